//! Implementations of the MPI functions, one file per chapter of the standard.
//! Each is `pub unsafe fn MPI_Xxx(<the C parameters>) -> MpiResult<()>` (or the C return type for the
//! few functions that do not return int); build.rs finds them by that pattern and generates the
//! exported `MPI_Xxx` / `PMPI_Xxx` wrappers around them.
#![allow(non_snake_case, clippy::too_many_arguments)]
