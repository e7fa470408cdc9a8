//! scripts/install.sh installs a usable prefix: library with its soname link, headers, mpicc /
//! mpicxx wrappers with the prefix baked in, pkg-config files. Programs built with the wrappers
//! run (as singletons) against the installed library; without pkg-config the mpi.pc check is
//! recorded as a skip (`support/skip.rs`).

use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "support/skip.rs"]
mod skip;

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
         int main(int argc, char **argv) {\n\
           int v = 0, s = 0, rank = -1, size = 0, fin = 0;\n\
           MPI_Get_version(&v, &s);\n\
           if (MPI_Init(&argc, &argv) != MPI_SUCCESS) return 2;\n\
           MPI_Comm_rank(MPI_COMM_WORLD, &rank);\n\
           MPI_Comm_size(MPI_COMM_WORLD, &size);\n\
           printf(\"hello %d.%d rank %d of %d cuda %d\\n\", v, s, rank, size, MPIX_Query_cuda_support());\n\
           MPI_Finalize();\n\
           MPI_Finalized(&fin);\n\
           return fin ? 0 : 3;\n\
         }\n",
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
    // It runs against the installed library (found through the rpath), as a singleton.
    let hello = run(Command::new(&exe).env_remove("LD_LIBRARY_PATH"));
    assert!(
        hello.starts_with("hello 5.0 rank 0 of 1 cuda "),
        "unexpected output of the installed hello: {hello:?}"
    );

    let cxx_src = prefix.join("hello.cc");
    std::fs::write(
        &cxx_src,
        "#include <mpi.h>\n#include <cstdio>\n\
         int main() {\n\
           int v = 0, s = 0, size = 0;\n\
           if (MPI_Get_version(&v, &s) != MPI_SUCCESS || v != 5) return 1;\n\
           if (MPI_Init(nullptr, nullptr) != MPI_SUCCESS) return 2;\n\
           MPI_Comm_size(MPI_COMM_WORLD, &size);\n\
           std::printf(\"hello_cc %d\\n\", size);\n\
           return MPI_Finalize() == MPI_SUCCESS && size == 1 ? 0 : 3;\n\
         }\n",
    )
    .unwrap();
    run(Command::new(prefix.join("bin/mpicxx"))
        .arg(&cxx_src)
        .arg("-o")
        .arg(prefix.join("hello_cc")));
    let hello_cc = run(Command::new(prefix.join("hello_cc")).env_remove("LD_LIBRARY_PATH"));
    assert_eq!(hello_cc, "hello_cc 1\n");

    if Command::new("pkg-config").arg("--version").output().is_ok() {
        let pc = run(Command::new("pkg-config")
            .args(["--cflags", "--libs", "mpi"])
            .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig")));
        assert!(
            pc.contains(&format!("-I{p}/include")) && pc.contains("-lmpi_abi"),
            "{pc}"
        );
    } else {
        skip::skip(
            "install::install_and_build_with_mpicc (pkg-config part)",
            "pkg-config is not installed: lib/pkgconfig/mpi.pc was not checked",
        );
    }
    let _ = std::fs::remove_dir_all(&prefix);
}
