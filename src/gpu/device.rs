//! Device facts every GPU path reads: whether and how GPU-native collectives run on this node
//! ([`mode`]), device UUIDs and the kernel grid size. Leaf of the GPU paths: it uses only the
//! driver and the kernels' presence.

use crate::sys::cuda;
use std::sync::{Mutex, OnceLock};

/// How the GPUs of a node reach each other's data in the GPU-native collectives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// CUDA IPC mappings of the peers' buffers (NVLink/PCIe peer access, zero-copy).
    Ipc,
    /// Pinned shared host memory (`gpu::hostmem`): P2P forced off (`GPUMPI_CUDA_IPC=0`).
    Host,
}

/// Whether GPU-native collectives are attempted at all, and how (`GPUMPI_GPU_COLL`: `auto` =
/// on nodes with an NVIDIA driver, the same answer on every rank of the node; `1`; `0`).
/// With `GPUMPI_CUDA_IPC=0` they go through pinned host memory.
pub fn mode() -> Option<Mode> {
    static M: OnceLock<Option<Mode>> = OnceLock::new();
    *M.get_or_init(|| {
        let m = mode_from(
            (!crate::config::snapshot().cuda.ipc).then_some("0"),
            crate::config::snapshot().gpu.coll.as_deref(),
            std::path::Path::new("/dev/nvidiactl").exists(),
            super::kernels::embedded(),
        );
        if !super::kernels::embedded() {
            tracing::info!(
                "GPU-native collectives off: gpumpi was built without CUDA kernels (no nvcc); \
                 device buffers are staged"
            );
        }
        m
    })
}

/// [`mode`] from its inputs: `GPUMPI_CUDA_IPC`, `GPUMPI_GPU_COLL`, whether an NVIDIA device
/// node exists, and whether the library carries its kernels (every GPU-native path needs them:
/// a build without nvcc stages device buffers instead of failing calls).
fn mode_from(ipc: Option<&str>, coll: Option<&str>, nvidia: bool, kernels: bool) -> Option<Mode> {
    let m = if ipc == Some("0") {
        Mode::Host
    } else {
        Mode::Ipc
    };
    if !kernels {
        return None;
    }
    match coll {
        Some("0") => None,
        Some("1") => Some(m),
        _ => nvidia.then_some(m),
    }
}

/// Whether GPU-native collectives are attempted at all (see [`mode`]).
pub fn enabled() -> bool {
    mode().is_some()
}

/// The UUID of a device (asked once per device).
pub(crate) fn device_uuid(ordinal: i32) -> Option<[u8; 16]> {
    static U: Mutex<Vec<(i32, [u8; 16])>> = Mutex::new(Vec::new());
    let mut u = U.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, x)) = u.iter().find(|(o, _)| *o == ordinal) {
        return Some(*x);
    }
    let x = cuda::device_uuid(ordinal).ok()?;
    u.push((ordinal, x));
    Some(x)
}

/// Blocks a kernel of the GPU collectives may use (`GPUMPI_GPU_BLOCKS`, 0 = one per SM: measured
/// best for two-shot allreduce and alltoall at 512 MiB on 4 H200, benches/NOTES.md).
pub(crate) fn max_grid(ordinal: i32) -> u32 {
    static G: OnceLock<u32> = OnceLock::new();
    *G.get_or_init(|| match crate::config::snapshot().gpu.blocks {
        0 => cuda::multiprocessor_count(ordinal)
            .map(|n| n.max(1) as u32)
            .unwrap_or(64),
        n => n as u32,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_needs_the_kernels() {
        assert_eq!(mode_from(None, None, true, true), Some(Mode::Ipc));
        assert_eq!(mode_from(Some("0"), None, true, true), Some(Mode::Host));
        assert_eq!(
            mode_from(None, None, false, true),
            None,
            "no NVIDIA device node"
        );
        assert_eq!(mode_from(None, Some("1"), false, true), Some(Mode::Ipc));
        assert_eq!(mode_from(None, Some("0"), true, true), None);
        // Built without nvcc: never a GPU-native path, even when forced (calls stage instead).
        assert_eq!(mode_from(None, None, true, false), None);
        assert_eq!(mode_from(None, Some("1"), true, false), None);
    }
}
