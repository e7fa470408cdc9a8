//! gpumpi's MPIX_ extensions (declared in mpi-ext.h).

use std::os::raw::c_int;

/// 1 when a CUDA driver with at least one device is present (device buffers are then accepted
/// by every call), else 0. Usable before MPI_Init. Initializes the driver if needed.
pub unsafe fn MPIX_Query_cuda_support() -> c_int {
    crate::gpu::available() as c_int
}

/// What this process holds for communicators' GPU state (`gpu::comm::counters`): communicators
/// with GPU state, page-locked host bytes, device bytes, and peers' device buffers mapped for
/// them. Usable at any time (all zero without GPU paths). Each output may be NULL.
pub unsafe fn MPIX_Query_gpu_resources(
    comms: *mut crate::abi::ffi::MPI_Count,
    pinned_bytes: *mut crate::abi::ffi::MPI_Count,
    device_bytes: *mut crate::abi::ffi::MPI_Count,
    peer_mappings: *mut crate::abi::ffi::MPI_Count,
) -> crate::mpi::error::MpiResult<()> {
    let c = crate::gpu::comm::counters();
    for (p, v) in [
        (comms, c.comms),
        (pinned_bytes, c.pinned_bytes),
        (device_bytes, c.device_bytes),
        (peer_mappings, c.peer_mappings),
    ] {
        if !p.is_null() {
            *p = v;
        }
    }
    Ok(())
}
