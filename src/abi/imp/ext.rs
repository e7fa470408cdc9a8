//! gpumpi's MPIX_ extensions (declared in mpi-ext.h).

use std::os::raw::c_int;

/// 1 when a CUDA driver with at least one device is present (device buffers are then accepted
/// by every call), else 0. Usable before MPI_Init. Initializes the driver if needed.
pub unsafe fn MPIX_Query_cuda_support() -> c_int {
    crate::gpu::available() as c_int
}
