//! Foreign libraries loaded at run time (see ARCHITECTURE.md). All unsafe FFI lives here.
//!
//! - `cuda`: the CUDA driver API through cudarc, `dlopen`ed at first GPU use.
//! - `ibverbs`: libibverbs, `dlopen`ed by the ibverbs network backend (`GPUMPI_NET=ib`).
//! - `pmix`: libpmix.so.2, `dlopen`ed when a PMIx launcher started the process.
//! - `fdpass`: libc's `SCM_RIGHTS`/`SO_PEERCRED` on Unix sockets (descriptors of cuMem memory).
//! - `socket`: libc sockets beyond std (getifaddrs, nonblocking connect, poll, eventfd).
pub mod cuda;
pub mod fdpass;
pub mod ibverbs;
pub mod pmix;
pub mod socket;
