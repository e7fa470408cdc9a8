//! scripts/install.sh installs a usable prefix: library with its soname link, headers, mpicc /
//! mpicxx wrappers with the prefix baked in, pkg-config files.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn install_and_build_with_mpicc() {
    // The library this test links against is the one cargo built for this test run.
    let profile_dir = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    let profile = profile_dir
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    let prefix = std::env::temp_dir().join(format!("gpumpi-install-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&prefix);
    let mut install = Command::new("bash");
    install
        .arg(repo().join("scripts/install.sh"))
        .arg("--no-build")
        .arg("--prefix")
        .arg(&prefix);
    install.env("CARGO_TARGET_DIR", profile_dir.parent().unwrap());
    if profile == "debug" {
        install.arg("--debug");
    }
    run(&mut install);

    for f in [
        "lib/libmpi_abi.so.1",
        "include/mpi.h",
        "include/mpi-ext.h",
        "bin/mpicc",
        "bin/mpicxx",
        "lib/pkgconfig/mpi.pc",
        "lib/pkgconfig/mpi-c.pc",
    ] {
        assert!(prefix.join(f).exists(), "{f} not installed");
    }
    assert_eq!(
        std::fs::read_link(prefix.join("lib/libmpi_abi.so")).unwrap(),
        Path::new("libmpi_abi.so.1")
    );
    let p = prefix.display().to_string();
    let mpicc = prefix.join("bin/mpicc");

    let show = run(Command::new(&mpicc).args(["-show", "hello.c", "-o", "hello"]));
    assert!(show.starts_with("cc "), "{show}");
    for want in [
        format!("-I{p}/include"),
        "hello.c".into(),
        format!("-L{p}/lib"),
        "-lmpi_abi".into(),
    ] {
        assert!(show.contains(&want), "`{want}` not in `{show}`");
    }
    let compile_only = run(Command::new(&mpicc).args(["-c", "hello.c", "-showme"]));
    assert!(
        compile_only.contains("-c hello.c") && !compile_only.contains("-lmpi_abi"),
        "{compile_only}"
    );
    let link = run(Command::new(&mpicc).arg("-showme:link"));
    assert_eq!(
        link.trim(),
        format!("-L{p}/lib -Wl,-rpath,{p}/lib -lmpi_abi")
    );
    assert_eq!(
        run(Command::new(&mpicc).arg("-showme:compile")).trim(),
        format!("-I{p}/include")
    );
    assert!(run(Command::new(&mpicc).arg("-showme:version")).contains("gpumpi"));
    let cxx_show = run(Command::new(prefix.join("bin/mpicxx"))
        .args(["-show", "x.cc"])
        .env("MPICXX_CXX", "g++"));
    assert!(cxx_show.starts_with("g++ "), "{cxx_show}");

    // Compile and link a program against the installed library.
    let src = prefix.join("hello.c");
    std::fs::write(
        &src,
        "#include <mpi.h>\n#include <mpi-ext.h>\n#include <stdio.h>\n\
         int main(void) { int v = 0, s = 0; MPI_Get_version(&v, &s); printf(\"%d.%d %d\\n\", v, s, MPIX_Query_cuda_support()); return 0; }\n",
    )
    .unwrap();
    let exe = prefix.join("hello");
    run(Command::new(&mpicc)
        .args(["-Wall", "-Werror"])
        .arg(&src)
        .arg("-o")
        .arg(&exe));
    let dynamic = run(Command::new("readelf").arg("-d").arg(&exe));
    assert!(dynamic.contains("[libmpi_abi.so.1]"), "{dynamic}");
    assert!(
        dynamic.contains(&format!("{p}/lib")),
        "no rpath in {dynamic}"
    );

    let cxx_src = prefix.join("hello.cc");
    std::fs::write(
        &cxx_src,
        "#include <mpi.h>\nint main() { int v, s; return MPI_Get_version(&v, &s) == MPI_SUCCESS ? 0 : 0; }\n",
    )
    .unwrap();
    run(Command::new(prefix.join("bin/mpicxx"))
        .arg(&cxx_src)
        .arg("-o")
        .arg(prefix.join("hello_cc")));

    if Command::new("pkg-config").arg("--version").output().is_ok() {
        let pc = run(Command::new("pkg-config")
            .args(["--cflags", "--libs", "mpi"])
            .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig")));
        assert!(
            pc.contains(&format!("-I{p}/include")) && pc.contains("-lmpi_abi"),
            "{pc}"
        );
    }
    let _ = std::fs::remove_dir_all(&prefix);
}
