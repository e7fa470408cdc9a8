//! Skip records: a test that cannot run says so, and is counted as a skip, never as a pass.
//!
//! Shared by the library's unit tests (`crate::test_skip`) and the integration tests
//! (`#[path = "support/skip.rs"] mod skip;`); std only.
//!
//! - [`skip`] prints `SKIP <test>: <reason>` and appends that line to the file named by
//!   `GPUMPI_TEST_SKIPS`, when set. `scripts/test.sh` sets it for each stage and lists every
//!   record, with its reason, in its final summary (cargo's own "ok" for a test that returned
//!   early would otherwise read as a pass).
//! - [`gpu_skip`] is the same for a test that needs a GPU, but on a machine that has one it
//!   panics: there a GPU test that cannot run is a failure (a broken CUDA install would
//!   otherwise pass every GPU test), unless `GPUMPI_ALLOW_GPU_SKIP` names it.
//! - [`gpu_required`]: `GPUMPI_REQUIRE_GPU=1` (or `0`) decides; unset, a machine has a GPU when
//!   `nvidia-smi -L` lists one.
#![allow(dead_code)]

use std::io::Write;
use std::sync::OnceLock;

/// Records that `test` did not run, and why.
pub fn skip(test: &str, reason: &str) {
    let line = format!("SKIP {test}: {}", reason.replace('\n', " "));
    println!("{line}");
    if let Some(path) = std::env::var_os("GPUMPI_TEST_SKIPS").filter(|p| !p.is_empty()) {
        // One write of one line in append mode: records of tests running in parallel do not mix.
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(format!("{line}\n").as_bytes()));
        if let Err(e) = written {
            panic!("{test}: cannot record the skip in GPUMPI_TEST_SKIPS={path:?}: {e}");
        }
    }
}

/// Whether GPU tests must run here: `GPUMPI_REQUIRE_GPU` if set to 1 or 0, else whether
/// `nvidia-smi -L` lists a GPU.
pub fn gpu_required() -> bool {
    static REQUIRED: OnceLock<bool> = OnceLock::new();
    *REQUIRED.get_or_init(|| match std::env::var("GPUMPI_REQUIRE_GPU").as_deref() {
        Ok("1") => true,
        Ok("0") => false,
        _ => std::process::Command::new("nvidia-smi")
            .arg("-L")
            .output()
            .is_ok_and(|o| {
                o.status.success() && String::from_utf8_lossy(&o.stdout).contains("GPU ")
            }),
    })
}

/// Whether `GPUMPI_ALLOW_GPU_SKIP` (comma-separated parts of test names, or `all`) allows
/// `test` to skip on a machine with a GPU.
pub fn gpu_skip_allowed(test: &str) -> bool {
    std::env::var("GPUMPI_ALLOW_GPU_SKIP").is_ok_and(|v| {
        v.split(',')
            .map(str::trim)
            .any(|p| p == "all" || (!p.is_empty() && test.contains(p)))
    })
}

/// Records a GPU test that cannot run: a skip where no GPU is expected, a panic (test failure)
/// where one is, unless allowed by `GPUMPI_ALLOW_GPU_SKIP`.
pub fn gpu_skip(test: &str, reason: &str) {
    if gpu_required() && !gpu_skip_allowed(test) {
        panic!(
            "{test} did not run on a machine with a GPU (nvidia-smi lists one, or \
             GPUMPI_REQUIRE_GPU=1): {reason}. Set GPUMPI_ALLOW_GPU_SKIP={test} to accept the skip."
        );
    }
    skip(test, reason);
}

/// The name of the running test: the libtest thread's name, else the caller's file and line
/// (libtest runs a test on the main thread when it runs one at a time).
#[track_caller]
pub fn current_test() -> String {
    match std::thread::current().name() {
        Some(n) if n != "main" => n.to_string(),
        _ => {
            let l = std::panic::Location::caller();
            format!("{}:{}", l.file(), l.line())
        }
    }
}
