//! Builds the libibverbs test double (`tests/support/fake_ibverbs.c`) with `cc` once per test
//! binary, and gives each user a fabric file of its own under /dev/shm (removed by
//! [`Fabric::drop`]). std only.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// The path of the built double: `Err` says why it could not be built (no C compiler).
pub fn lib() -> Result<PathBuf, String> {
    static LIB: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    LIB.get_or_init(|| {
        let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/support/fake_ibverbs.c");
        let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("libfakeibverbs-{}.so", std::process::id()));
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let o = Command::new(&cc)
            .args(["-shared", "-fPIC", "-O1", "-Wall", "-o"])
            .arg(&out)
            .arg(&src)
            .arg("-ldl")
            .output()
            .map_err(|e| format!("{cc}: {e}"))?;
        if !o.status.success() {
            return Err(format!(
                "{cc} failed on {}: {}",
                src.display(),
                String::from_utf8_lossy(&o.stderr)
            ));
        }
        Ok(out)
    })
    .clone()
}

/// A fabric file of the double: set `FAKEIBV_FABRIC` to [`Fabric::path`]; removed on drop.
pub struct Fabric {
    pub path: PathBuf,
}

impl Fabric {
    pub fn new(name: &str) -> Fabric {
        Fabric {
            path: PathBuf::from(format!(
                "/dev/shm/gpumpi-fakeibv-{name}-{}",
                std::process::id()
            )),
        }
    }
}

impl Drop for Fabric {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
