//! sys (see ARCHITECTURE.md): the unsafe FFI to libraries loaded at run time.

pub mod pmix;
