//! Foreign libraries loaded at run time (see ARCHITECTURE.md). All unsafe FFI lives here.
//!
//! - `cuda`: the CUDA driver API through cudarc, `dlopen`ed at first GPU use.
//! - `ibverbs`: libibverbs, `dlopen`ed by the ibverbs network backend (`GPUMPI_NET=ib`).
//! - `pmix`: libpmix.so.2, `dlopen`ed when a PMIx launcher started the process.
//! - `fdpass`: libc's `SCM_RIGHTS`/`SO_PEERCRED` on Unix sockets (descriptors of cuMem memory).
//! - `socket`: libc sockets beyond std (getifaddrs, nonblocking connect, poll, eventfd).
//! - [`prefetch`]: the CPU's prefetch instruction (an intrinsic, not FFI, but `unsafe`).
//! - [`clock_ns`]: libc's `clock_gettime`.
pub mod cuda;
pub mod fdpass;
pub mod ibverbs;
pub mod pmix;
pub mod socket;

/// Ask for the cache line of `p` without waiting for it: a hint with no effect the program
/// can see (any address; nothing where the target has no such instruction). For a reader
/// spinning on one shared line whose writer fills another first: that other line then travels
/// while the spun-on one does instead of after it.
#[inline(always)]
pub fn prefetch(p: *const u8) {
    // SAFETY: a prefetch reads nothing the program sees and faults on no address; SSE is
    // part of every x86_64 target.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// `clock_gettime(clock)` in nanoseconds; 0 when the clock is unavailable. Straight to libc
/// (the vDSO), without `Instant`'s conversions: `MPI_Wtime` and the checks of every send and
/// receive read it.
#[inline]
pub fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec to write.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return 0;
    }
    (ts.tv_sec as u64).saturating_mul(1_000_000_000) + ts.tv_nsec as u64
}
