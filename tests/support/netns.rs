//! Namespace nodes for the integration tests (`scripts/netns-nodes.sh`): bring a set up, record
//! a skip where namespaces are not permitted, tear it down when the test ends (even by a panic).
//! Shared through `#[path = "support/netns.rs"] mod netns;` (uses `skip.rs` the same way).
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output};

pub fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/netns-nodes.sh")
}

/// Runs `netns-nodes.sh -p PREFIX ARGS...`.
pub fn nodes(prefix: &str, args: &[&str]) -> Output {
    Command::new("bash")
        .arg(script())
        .args(["-p", prefix])
        .args(args)
        .output()
        .expect("run scripts/netns-nodes.sh")
}

/// Tears the namespace set down when dropped.
pub struct Down(pub String);

impl Drop for Down {
    fn drop(&mut self) {
        let _ = nodes(&self.0, &["down"]);
    }
}

/// `up N R` for `prefix`: the guard, or `None` after recording a skip of `test` (exit 77, with
/// the script's reason); any other failure panics.
pub fn up(prefix: &str, n: usize, r: usize, test: &str) -> Option<Down> {
    let out = nodes(prefix, &["up", &n.to_string(), &r.to_string()]);
    let err = String::from_utf8_lossy(&out.stderr).trim().to_string();
    match out.status.code() {
        Some(0) => Some(Down(prefix.to_string())),
        Some(77) => {
            super::skip::skip(test, &err);
            None
        }
        c => panic!("netns-nodes.sh up failed ({c:?}): {err}"),
    }
}
