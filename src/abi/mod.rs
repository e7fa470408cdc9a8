//! The C ABI: every `#[no_mangle] extern "C"` function of the MPI-5.0
//! standard ABI (and its `PMPI_` twin). Wrappers are generated from
//! `mpi-abi/`; they validate, convert handles, catch panics and route errors
//! through the error handler of the object the call was made on.

pub mod consts;
