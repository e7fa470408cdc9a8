//! tests/gpu/run.sh against a fresh install: every run must PASS, or print "SKIP: <reason>".
//! A SKIP is recorded as a skip (`support/skip.rs`), never counted as a pass; on a machine with a
//! GPU (`nvidia-smi -L` lists one, or `GPUMPI_REQUIRE_GPU=1`) run.sh itself fails on a SKIP, so
//! a GPU machine whose CUDA runtime does not load fails here instead of passing.

use std::path::PathBuf;
use std::process::Command;

#[path = "support/skip.rs"]
mod skip;

#[test]
fn gpu_tests_pass_or_skip() {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let profile_dir = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    let debug = profile_dir.file_name().unwrap() == "debug";
    let prefix = std::env::temp_dir().join(format!("gpumpi-gpu-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&prefix);
    let mut install = Command::new("bash");
    install
        .arg(repo.join("scripts/install.sh"))
        .args(["--no-build", "--prefix"])
        .arg(&prefix)
        .env("CARGO_TARGET_DIR", profile_dir.parent().unwrap());
    if debug {
        install.arg("--debug");
    }
    let st = install.status().expect("run install.sh");
    assert!(st.success(), "install.sh failed");
    let out = Command::new("bash")
        .arg(repo.join("tests/gpu/run.sh"))
        .arg(&prefix)
        .args(["--max-count", "1025"])
        .env("GPU_TEST_TIMEOUT", "120")
        .env("GPU_TEST_BUILD", prefix.join("gpu-tests"))
        .output()
        .expect("run tests/gpu/run.sh");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let _ = std::fs::remove_dir_all(&prefix);
    assert!(out.status.success(), "tests/gpu/run.sh failed:\n{text}");
    let runs = text.matches("\n== gpu_").count() + usize::from(text.starts_with("== gpu_"));
    assert_eq!(
        runs, 78,
        "expected 18 gpu_test, 3 gpu_mt, 11 gpu_stream, 7 gpu_mem, 2 gpu_err_matrix, 2 gpu_churn, \
         3 gpu_mismatch, 12 gpu_resident_mid and 20 gpu_net runs:\n{text}"
    );
    let passes = text.lines().filter(|l| l.starts_with("PASS: gpu_")).count();
    let skips: Vec<&str> = text.lines().filter(|l| l.starts_with("SKIP: ")).collect();
    assert_eq!(
        passes + skips.len(),
        runs,
        "every run must PASS or SKIP with a reason:\n{text}"
    );
    // run.sh's own summary agrees with what its runs printed.
    let summary = format!("gpu: {passes} passed, 0 failed, {} skipped", skips.len());
    assert!(text.contains(&summary), "`{summary}` missing from:\n{text}");
    if !skips.is_empty() {
        let mut reasons: Vec<&str> = skips.iter().map(|l| &l["SKIP: ".len()..]).collect();
        reasons.sort_unstable();
        reasons.dedup();
        skip::gpu_skip(
            "gpu_run::gpu_tests_pass_or_skip",
            &format!(
                "{} of {runs} tests/gpu/run.sh runs skipped: {}",
                skips.len(),
                reasons.join("; ")
            ),
        );
    }
}
