//! scripts/install.sh installs a usable, relocatable prefix: library with its soname link,
//! headers, mpicc / mpicxx wrappers and pkg-config files that find the prefix from their own
//! location, mpirun. Programs built with the wrappers run (as singletons) against the installed
//! library; without pkg-config the mpi.pc check is recorded as a skip (`support/skip.rs`).

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

/// Install what cargo built for this test run (`--no-build`) under `prefix`.
fn install(prefix: &Path) {
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
    let _ = std::fs::remove_dir_all(prefix);
    let mut install = Command::new("bash");
    install
        .arg(repo().join("scripts/install.sh"))
        .arg("--no-build")
        .arg("--prefix")
        .arg(prefix);
    install.env("CARGO_TARGET_DIR", profile_dir.parent().unwrap());
    if profile == "debug" {
        install.arg("--debug");
    }
    run(&mut install);
}

/// The -I and -L directories of pkg-config's output, resolved (the .pc file names them
/// relative to its own directory: `<prefix>/lib/pkgconfig/../../include`).
fn pc_dirs(pc: &str) -> (PathBuf, PathBuf) {
    let words: Vec<&str> = pc.split_whitespace().collect();
    let dir = |flag: &str| {
        let d = words.iter().find_map(|w| w.strip_prefix(flag)).expect(pc);
        std::fs::canonicalize(d).unwrap_or_else(|e| panic!("{d}: {e}"))
    };
    (dir("-I"), dir("-L"))
}

/// A command without the variables that would redirect the wrappers or the launcher.
fn clean(prog: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new(prog);
    for (k, _) in std::env::vars() {
        if k.starts_with("GPUMPI_") {
            c.env_remove(k);
        }
    }
    c
}

#[test]
fn install_and_build_with_mpicc() {
    let prefix = std::env::temp_dir().join(format!("gpumpi-install-{}", std::process::id()));
    install(&prefix);

    for f in [
        "lib/libmpi_abi.so.1",
        "include/mpi.h",
        "include/mpi-ext.h",
        "bin/mpicc",
        "bin/mpicxx",
        "bin/mpirun",
        "bin/gpumpi-info",
        "lib/pkgconfig/mpi.pc",
        "lib/pkgconfig/mpi-c.pc",
    ] {
        assert!(prefix.join(f).exists(), "{f} not installed");
    }
    assert_eq!(
        std::fs::read_link(prefix.join("lib/libmpi_abi.so")).unwrap(),
        Path::new("libmpi_abi.so.1")
    );
    // The MPICH-ABI library, where the build made it (cargo build --workspace, as test.sh runs).
    let built = std::env::current_exe().unwrap();
    if built
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("libmpi.so")
        .exists()
    {
        assert!(
            prefix.join("lib/libmpi.so.12").exists(),
            "libmpi.so.12 not installed"
        );
        assert_eq!(
            std::fs::read_link(prefix.join("lib/libmpi.so")).unwrap(),
            Path::new("libmpi.so.12")
        );
    }
    let p = prefix.display().to_string();
    let mpicc = prefix.join("bin/mpicc");

    let show = run(clean(&mpicc).args(["-show", "hello.c", "-o", "hello"]));
    assert!(show.starts_with("cc "), "{show}");
    for want in [
        format!("-I{p}/include"),
        "hello.c".into(),
        format!("-L{p}/lib"),
        "-lmpi_abi".into(),
    ] {
        assert!(show.contains(&want), "`{want}` not in `{show}`");
    }
    let compile_only = run(clean(&mpicc).args(["-c", "hello.c", "-showme"]));
    assert!(
        compile_only.contains("-c hello.c") && !compile_only.contains("-lmpi_abi"),
        "{compile_only}"
    );
    let link = run(clean(&mpicc).arg("-showme:link"));
    assert_eq!(
        link.trim(),
        format!("-L{p}/lib -Wl,-rpath,{p}/lib -lmpi_abi")
    );
    assert_eq!(
        run(clean(&mpicc).arg("-showme:compile")).trim(),
        format!("-I{p}/include")
    );
    assert!(run(clean(&mpicc).arg("-showme:version")).contains("gpumpi"));
    let cxx_show = run(clean(prefix.join("bin/mpicxx"))
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
    run(clean(&mpicc)
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
    run(clean(prefix.join("bin/mpicxx"))
        .arg(&cxx_src)
        .arg("-o")
        .arg(prefix.join("hello_cc")));
    let hello_cc = run(Command::new(prefix.join("hello_cc")).env_remove("LD_LIBRARY_PATH"));
    assert_eq!(hello_cc, "hello_cc 1\n");

    if Command::new("pkg-config").arg("--version").output().is_ok() {
        let pc = run(Command::new("pkg-config")
            .args(["--cflags", "--libs", "mpi"])
            .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig")));
        assert!(pc.contains("-lmpi_abi"), "{pc}");
        assert_eq!(
            pc_dirs(&pc),
            (prefix.join("include"), prefix.join("lib")),
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

const HELLO_RANKS: &str = "#include <mpi.h>\n#include <stdio.h>\n\
     int main(int argc, char **argv) { int r, n; MPI_Init(&argc, &argv);\n\
     MPI_Comm_rank(MPI_COMM_WORLD, &r); MPI_Comm_size(MPI_COMM_WORLD, &n);\n\
     int s = 0; MPI_Allreduce(&r, &s, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);\n\
     printf(\"rank %d of %d sum %d\\n\", r, n, s); MPI_Finalize(); return 0; }\n";

/// Install, move the prefix elsewhere, then build with the moved mpicc (directly, through a
/// symbolic link and through pkg-config) and run with the moved mpirun: nothing may point at
/// the old path.
#[test]
fn moved_install_builds_and_runs() {
    let base = std::env::temp_dir().join(format!("gpumpi-reloc-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    let old = base.join("first");
    install(&old);
    let new = base.join("moved/elsewhere");
    std::fs::create_dir_all(new.parent().unwrap()).unwrap();
    std::fs::rename(&old, &new).unwrap();
    assert!(!old.exists());
    let (o, p) = (old.display().to_string(), new.display().to_string());
    for f in [
        "bin/mpicc",
        "bin/mpicxx",
        "lib/pkgconfig/mpi.pc",
        "lib/pkgconfig/mpi-c.pc",
    ] {
        let text = std::fs::read_to_string(new.join(f)).unwrap();
        assert!(!text.contains(&o), "{f} names the install path {o}");
    }
    let mpicc = new.join("bin/mpicc");
    assert_eq!(
        run(clean(&mpicc).arg("-showme:compile")).trim(),
        format!("-I{p}/include")
    );
    assert_eq!(
        run(clean(&mpicc).arg("-showme:link")).trim(),
        format!("-L{p}/lib -Wl,-rpath,{p}/lib -lmpi_abi")
    );
    // Through a symbolic link from another directory (as module systems and /usr/local/bin do),
    // and found on PATH by name.
    let links = base.join("links");
    std::fs::create_dir_all(&links).unwrap();
    std::os::unix::fs::symlink(&mpicc, links.join("mpicc")).unwrap();
    assert_eq!(
        run(clean(links.join("mpicc")).arg("-showme:incdirs")).trim(),
        format!("{p}/include")
    );
    let path = format!(
        "{}:{}",
        links.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    assert_eq!(
        run(clean("mpicc").env("PATH", &path).arg("-showme:libdirs")).trim(),
        format!("{p}/lib")
    );
    // The override.
    assert_eq!(
        run(clean(&mpicc)
            .env("GPUMPI_PREFIX", &new)
            .arg("-showme:incdirs"))
        .trim(),
        format!("{p}/include")
    );
    let bad = clean(&mpicc)
        .env("GPUMPI_PREFIX", base.join("nothing"))
        .arg("-showme:incdirs")
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("GPUMPI_PREFIX"),
        "{bad:?}"
    );

    // Build and run with the moved wrappers and launcher.
    let src = base.join("hello.c");
    std::fs::write(&src, HELLO_RANKS).unwrap();
    let exe = base.join("hello");
    run(clean(&mpicc).arg("-Wall").arg(&src).arg("-o").arg(&exe));
    let dynamic = run(Command::new("readelf").arg("-d").arg(&exe));
    assert!(dynamic.contains(&format!("{p}/lib")), "{dynamic}");
    assert!(!dynamic.contains(&o), "{dynamic}");
    let out = run(clean(new.join("bin/mpirun"))
        .args(["-n", "2", "--oversubscribe"])
        .arg(&exe));
    let mut lines: Vec<&str> = out.lines().collect();
    lines.sort();
    assert_eq!(lines, ["rank 0 of 2 sum 1", "rank 1 of 2 sum 1"], "{out}");

    // pkg-config finds the moved prefix from the .pc file's own location.
    if Command::new("pkg-config").arg("--version").output().is_ok() {
        let pc = run(Command::new("pkg-config")
            .args(["--cflags", "--libs", "mpi"])
            .env("PKG_CONFIG_PATH", new.join("lib/pkgconfig")));
        assert!(!pc.contains(&o), "{pc}");
        assert_eq!(pc_dirs(&pc), (new.join("include"), new.join("lib")), "{pc}");
        let exe_pc = base.join("hello_pc");
        let flags: Vec<&str> = pc.split_whitespace().collect();
        run(Command::new("cc")
            .arg(&src)
            .arg("-o")
            .arg(&exe_pc)
            .args(&flags));
        let out = run(clean(new.join("bin/mpirun")).args(["-n", "1"]).arg(&exe_pc));
        assert_eq!(out.trim(), "rank 0 of 1 sum 0");
        let over = run(Command::new("pkg-config")
            .args(["--cflags", "mpi", "--define-variable=prefix=/opt/x"])
            .env("PKG_CONFIG_PATH", new.join("lib/pkgconfig")));
        assert_eq!(over.trim(), "-I/opt/x/include");
    } else {
        println!("SKIP pkg-config part: pkg-config is not installed");
    }
    let _ = std::fs::remove_dir_all(&base);
}

/// scripts/install-deps.sh names every missing package and what needs it, and installs nothing
/// with --check: here on a PATH without compilers, pkg-config, readelf or python3.
#[test]
fn install_deps_names_what_is_missing() {
    let bin = std::env::temp_dir().join(format!("gpumpi-deps-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&bin);
    std::fs::create_dir_all(&bin).unwrap();
    let bash = run(Command::new("sh").args(["-c", "command -v bash"]));
    for tool in ["ls", "mktemp", "rm", "id", "grep"] {
        let path = run(Command::new("sh").args(["-c", &format!("command -v {tool}")]));
        std::os::unix::fs::symlink(path.trim(), bin.join(tool)).unwrap();
    }
    let out = Command::new(bash.trim())
        .arg(repo().join("scripts/install-deps.sh"))
        .arg("--check")
        .env("PATH", &bin)
        .env_remove("LIBCLANG_PATH")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    for pkg in [
        "gcc",
        "g++",
        "pkg-config",
        "binutils",
        "python3-venv",
        "python3-pip",
    ] {
        assert!(
            err.contains(&format!("missing package {pkg}: without it, ")),
            "{pkg} not named in:\n{err}"
        );
    }
    assert!(
        err.contains("install with: apt-get install gcc g++"),
        "{err}"
    );
    assert!(
        !err.contains("installing"),
        "--check installs nothing: {err}"
    );
    let _ = std::fs::remove_dir_all(&bin);
}

/// Run `cmd`, feed its output to python3's JSON parser and return `key=value` lines for the
/// paths asked (dotted; list items by index), or the parser's error.
fn json_fields(cmd: &mut Command, paths: &[&str]) -> String {
    let json = run(cmd);
    let script = "import json, sys\n\
        d = json.loads(sys.stdin.read())\n\
        for p in sys.argv[1:]:\n\
        \x20   v = d\n\
        \x20   for k in p.split('.'):\n\
        \x20       v = v[int(k)] if isinstance(v, list) else v[k]\n\
        \x20   print(p + '=' + json.dumps(v))\n";
    let mut py = Command::new("python3");
    py.arg("-c").arg(script).args(paths);
    py.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = py
        .spawn()
        .expect("python3 (scripts/install-deps.sh installs it)");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(json.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "not valid JSON or a field is missing: {}\n{json}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The installed gpumpi-info, on a machine without a GPU (or with one: the CUDA facts are
/// checked for consistency, not for absence).
#[test]
fn gpumpi_info_reports_build_machine_and_environment() {
    let prefix = std::env::temp_dir().join(format!("gpumpi-info-{}", std::process::id()));
    install(&prefix);
    let info = prefix.join("bin/gpumpi-info");
    let p = prefix.display().to_string();

    let mut c = clean(&info);
    c.env("GPUMPI_EAGER_LIMIT", "32k")
        .env("GPUMPI_RAIL", "5")
        .arg("--json");
    let f = json_fields(
        &mut c,
        &[
            "gpumpi.version",
            "gpumpi.abi_version",
            "gpumpi.mpi_version",
            "gpumpi.prefix",
            "gpumpi.library",
            "kernels.compiled",
            "kernels.targets",
            "cuda.status",
            "cuda.devices",
            "bootstrap.would_choose",
            "bootstrap.methods.0.method",
            "bootstrap.methods.0.how",
            "bootstrap.methods.1.method",
            "bootstrap.methods.3.method",
            "transports.0.transport",
            "transports.0.usable",
            "rails.this_rank.rail",
            "rails.this_rank.source",
            "environment.GPUMPI_EAGER_LIMIT",
            "environment.GPUMPI_BIND",
        ],
    );
    let field = |k: &str| -> String {
        f.lines()
            .find_map(|l| l.strip_prefix(&format!("{k}=")))
            .unwrap_or_else(|| panic!("{k} not in {f}"))
            .to_string()
    };
    assert_eq!(
        field("gpumpi.version"),
        format!("\"{}\"", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(field("gpumpi.abi_version"), "\"1.0\"");
    assert_eq!(field("gpumpi.mpi_version"), "\"5.0\"");
    assert_eq!(field("gpumpi.prefix"), format!("\"{p}\""));
    assert_eq!(
        field("gpumpi.library"),
        format!("\"{p}/lib/libmpi_abi.so.1\"")
    );
    // Kernels: the targets are listed exactly when they were compiled.
    let compiled = field("kernels.compiled") == "true";
    assert_eq!(compiled, field("kernels.targets") != "[]", "{f}");
    // CUDA: "no libcuda" / "no GPU" with no device, or N GPUs with N devices listed.
    let status = field("cuda.status");
    if status == "\"no libcuda\"" || status == "\"no GPU\"" {
        assert_eq!(field("cuda.devices"), "[]");
    } else {
        assert!(
            status.ends_with(" GPU\"") || status.ends_with(" GPUs\""),
            "{status}"
        );
        assert_ne!(field("cuda.devices"), "[]");
    }
    assert!(
        field("bootstrap.would_choose").starts_with("\"singleton"),
        "{f}"
    );
    assert_eq!(field("bootstrap.methods.0.method"), "\"mpirun\"");
    assert!(
        field("bootstrap.methods.0.how").contains(&format!("{p}/bin/mpirun")),
        "{f}"
    );
    assert_eq!(field("bootstrap.methods.1.method"), "\"pmix\"");
    assert_eq!(field("bootstrap.methods.3.method"), "\"singleton\"");
    assert_eq!(field("transports.0.transport"), "\"shm\"");
    assert_eq!(field("transports.0.usable"), "true");
    // The rail this process would take as a rank: GPUMPI_RAIL wins.
    assert_eq!(field("rails.this_rank.rail"), "5");
    assert_eq!(field("rails.this_rank.source"), "\"GPUMPI_RAIL\"");
    assert_eq!(
        field("environment.GPUMPI_EAGER_LIMIT"),
        r#"{"value": "32k", "default": "16k"}"#
    );
    assert_eq!(
        field("environment.GPUMPI_BIND"),
        r#"{"value": null, "default": "core"}"#
    );
    // Every GPUMPI_* variable of the registry, and nothing else, is in the environment section.
    let json = run(clean(&info).arg("--json"));
    for p in mpi_abi::config::PARAMS {
        assert_eq!(
            json.contains(&format!("\"{}\": {{", p.name)),
            p.name.starts_with("GPUMPI_"),
            "{}",
            p.name
        );
    }

    // Plain text: the same facts.
    let text = run(&mut clean(&info));
    for want in [
        "gpumpi:\n".to_string(),
        format!("  version: {}\n", env!("CARGO_PKG_VERSION")),
        "  abi_version: 1.0\n".into(),
        format!("  compiled: {}\n", if compiled { "yes" } else { "no" }),
        format!("  status: {}\n", status.trim_matches('"')),
        "  GPUMPI_EAGER_LIMIT: value -, default 16k\n".into(),
        "- transport shm, usable yes".into(),
    ] {
        assert!(text.contains(&want), "`{want}` not in:\n{text}");
    }
    // CUDA switched off: said so.
    let mut c = clean(&info);
    c.env("GPUMPI_CUDA", "0").arg("--json");
    let f = json_fields(
        &mut c,
        &["cuda.status", "cuda.reason", "transports.2.usable"],
    );
    assert!(f.contains("cuda.status=\"disabled\""), "{f}");
    assert!(f.contains("GPUMPI_CUDA=0"), "{f}");
    assert!(f.contains("transports.2.usable=false"), "{f}");
    // Under mpirun it sees mpirun's bootstrap.
    let mut c = clean(prefix.join("bin/mpirun"));
    c.args(["-n", "1"]).arg(&info).arg("--json");
    let f = json_fields(
        &mut c,
        &["bootstrap.would_choose", "bootstrap.methods.0.set_now"],
    );
    assert!(f.contains("bootstrap.would_choose=\"mpirun ("), "{f}");
    assert!(f.contains("\"GPUMPI_SERVER\""), "{f}");
    // Usage.
    let bad = clean(&info).arg("--bogus").output().unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown argument"));
    assert!(run(clean(&info).arg("--help")).contains("--json"));
    let _ = std::fs::remove_dir_all(&prefix);
}
