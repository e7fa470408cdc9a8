//! tests/gpu/run.sh against a fresh install: on a machine with a CUDA device every run must
//! PASS; elsewhere every run must print "SKIP: no CUDA device (<reason>)" and succeed.

use std::path::PathBuf;
use std::process::Command;

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
    let runs = text.matches("== gpu_").count();
    let verdicts = text.matches("SKIP: no CUDA device (").count()
        + text.matches("PASS: gpu_test").count()
        + text.matches("PASS: gpu_mt").count()
        + text.matches("PASS: gpu_mem").count()
        + text.matches("PASS: gpu_churn").count();
    assert_eq!(
        runs, 22,
        "expected 12 gpu_test, 3 gpu_mt, 5 gpu_mem and 2 gpu_churn runs:\n{text}"
    );
    assert_eq!(
        verdicts, runs,
        "every run must PASS or SKIP with a reason:\n{text}"
    );
}
