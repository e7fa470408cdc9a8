//! Foreign libraries loaded at run time (see ARCHITECTURE.md). All unsafe FFI lives here.
//!
//! - `cuda`: the CUDA driver API through cudarc, `dlopen`ed at first GPU use.
pub mod cuda;
