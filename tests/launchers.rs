//! Runs `tests/launchers.sh` (our mpirun, Open MPI 5 mpirun/prterun over PMIx, MPICH hydra
//! mpiexec over PMI-1) against an install of the library this test run built, on one host and
//! (as root, where network namespaces are permitted) across 2 namespace nodes, prterun and hydra
//! there also with `GPUMPI_NET=ib` over the libibverbs test double (`support/fake_ib.rs` builds
//! it); where the namespace nodes cannot be made, that part is recorded as a skip with the
//! script's reason.
//!
//! The launchers come from PyPI into `build/launchers/` (venvs). This test does not download
//! them by itself: it records a skip (`support/skip.rs`) when they are missing, unless
//! `LAUNCHERS_INSTALL=1` is set (then the script pip-installs them first). Run
//! `tests/launchers.sh PREFIX` once, or set `LAUNCHERS_INSTALL=1`, to make it run.
//!
//! `under_slurm` runs `tests/slurm.sh` (a one-node Slurm, `srun --mpi=pmix` and `--mpi=pmi2`)
//! when Slurm is installed and the test runs as root; else it records a skip and why.

use std::path::PathBuf;
use std::process::Command;

#[path = "support/fake_ib.rs"]
mod fake_ib;
#[path = "support/skip.rs"]
mod skip;

#[test]
fn programs_run_under_common_launchers() {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let build = repo.join("build/launchers");
    let install_launchers = std::env::var("LAUNCHERS_INSTALL").is_ok_and(|v| v == "1");
    let have = build.join("venv-mpich/bin/mpiexec.hydra").exists()
        && build.join("venv-ompi/bin/prterun").exists();
    if !have && !install_launchers {
        skip::skip(
            "launchers::programs_run_under_common_launchers",
            &format!(
                "MPICH/Open MPI launchers not installed under {} (run `tests/launchers.sh \
                 PREFIX` once, or set LAUNCHERS_INSTALL=1 to install them from PyPI)",
                build.display()
            ),
        );
        return;
    }
    let prefix = install_prefix("launchers");
    let mut cmd = Command::new("bash");
    cmd.arg(repo.join("tests/launchers.sh"))
        .arg(&prefix)
        .arg("--build-dir")
        .arg(&build);
    if !install_launchers {
        cmd.arg("--no-install");
    }
    let helper = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("gpumpi-bootstrap-test");
    if helper.exists() {
        cmd.arg("--helper").arg(&helper);
    }
    // prterun and hydra also run the namespace-node programs over the ibverbs test double.
    let ib = fake_ib::lib();
    match &ib {
        Ok(lib) => {
            cmd.arg("--ib").arg(lib);
        }
        Err(why) => skip::skip(
            "launchers::programs_run_under_common_launchers (ib)",
            &format!("the libibverbs test double does not build: {why}"),
        ),
    }
    let out = cmd.output().expect("run tests/launchers.sh");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&prefix);
    if out.status.code() == Some(77) {
        skip::skip(
            "launchers::programs_run_under_common_launchers",
            text.trim(),
        );
        return;
    }
    println!("{text}");
    assert!(out.status.success(), "tests/launchers.sh failed:\n{text}");
    for want in [
        "== gpumpi-mpirun",
        "== ompi-mpirun",
        "== prterun",
        "== hydra-mpiexec",
        "== namespace nodes",
        " 0 failed",
    ] {
        assert!(text.contains(want), "`{want}` missing from:\n{text}");
    }
    match text
        .lines()
        .find(|l| l.starts_with("SKIP namespace nodes:"))
    {
        Some(line) => skip::skip(
            "launchers::programs_run_under_common_launchers (namespace nodes)",
            line.trim_start_matches("SKIP namespace nodes:").trim(),
        ),
        None => {
            for l in ["prterun", "ompi-mpirun", "hydra-mpiexec"] {
                for p in ["p2p_basic", "coll_data blocking", "abort_job"] {
                    assert!(
                        text.lines()
                            .any(|x| x.starts_with(&format!("  ok  {l:<14} {p} "))),
                        "{l} {p} over namespace nodes: no ok line in:\n{text}"
                    );
                }
            }
            if ib.is_ok() {
                for l in ["prterun", "hydra-mpiexec"] {
                    for p in [
                        "p2p_basic",
                        "p2p_nonblocking",
                        "p2p_large",
                        "coll_data blocking",
                        "coll_data nonblocking",
                        "coll_reduce blocking",
                        "comm_basic",
                    ] {
                        assert!(
                            text.lines()
                                .any(|x| x.starts_with(&format!("  ok  {l:<14} {p} "))
                                    && x.ends_with(", over ib")),
                            "{l} {p} over namespace nodes and ib: no ok line in:\n{text}"
                        );
                    }
                }
            }
            assert!(
                text.contains("ok  namespace nodes removed"),
                "namespace nodes not checked clean:\n{text}"
            );
        }
    }
}

/// Install the library this test run built under a fresh temporary prefix.
fn install_prefix(tag: &str) -> PathBuf {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let profile_dir = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    let prefix = std::env::temp_dir().join(format!("gpumpi-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&prefix);
    let mut install = Command::new("bash");
    install
        .arg(repo.join("scripts/install.sh"))
        .arg("--no-build")
        .arg("--prefix")
        .arg(&prefix)
        .env("CARGO_TARGET_DIR", profile_dir.parent().unwrap());
    if profile_dir.file_name().unwrap() == "debug" {
        install.arg("--debug");
    }
    let st = install.status().expect("run install.sh");
    assert!(st.success(), "install.sh failed");
    assert!(
        prefix.join("bin/mpirun").exists(),
        "mpirun was not built for this test run"
    );
    prefix
}

#[test]
fn under_slurm() {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let has_srun = Command::new("srun").arg("--version").output().is_ok();
    if !has_srun {
        skip::skip(
            "launchers::under_slurm",
            "srun is not installed (tests/slurm.sh --install, as root)",
        );
        return;
    }
    let prefix = install_prefix("slurm");
    let out = Command::new("bash")
        .arg(repo.join("tests/slurm.sh"))
        .arg(&prefix)
        .output()
        .expect("run tests/slurm.sh");
    let _ = std::fs::remove_dir_all(&prefix);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.code() == Some(77) {
        skip::skip("launchers::under_slurm", text.trim());
        return;
    }
    println!("{text}");
    assert!(out.status.success(), "tests/slurm.sh failed:\n{text}");
    assert!(
        text.contains("== srun --mpi=pmix") && text.contains(" 0 failed"),
        "{text}"
    );
}
