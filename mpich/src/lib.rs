//! gpumpi's MPICH-ABI library, `libmpi.so.12`: the library name, handle representation
//! (`int` handles with MPICH's values for the predefined ones), constants, `MPI_Status` layout
//! and symbol set of the MPICH ABI (shared by MPICH, Intel MPI, MVAPICH and Cray MPICH), so that
//! binaries built against MPICH, such as mpi4py's binary wheel, run on gpumpi unchanged.
//!
//! Contract: every function forwards to the same function of the standard-ABI library
//! `libmpi_abi.so.1` from the same directory (opened `RTLD_LOCAL` at the first call, `sys.rs`),
//! translating handles, int constants (ranks, tags, error classes, thread levels, ...), statuses
//! and the `MPI_IN_PLACE`/`MPI_BUFFER_AUTOMATIC` sentinels both ways (`rt.rs`). So there is one
//! implementation: device buffers, `MPIX_Query_cuda_support` and every error message are the
//! core's. The forwarders are generated from `mpi-abi/data` (`mpich.txt` holds MPICH's values and
//! the translation rules; `mpi-abi/src/emit_mpich.rs` is the generator); the few functions whose
//! arguments carry callbacks or combiner-dependent contents are written in `hand.rs`.
//!
//! `MPI_Abi_get_version` answers -1.-1, as MPICH's own libmpi.so.12 does: this library
//! implements the MPICH ABI, not the standard ABI (mpi4py classifies a library by it).

mod hand;
mod rt;
mod sys;

/// The generated tables and forwarders (OUT_DIR/mpich.rs).
#[allow(
    non_snake_case,
    non_camel_case_types,
    unused_variables,
    unused_unsafe,
    unused_mut,
    clippy::all
)]
pub mod gen {
    include!(concat!(env!("OUT_DIR"), "/mpich.rs"));
}
