//! MPI semantics without transport code: error type, datatypes, reduction
//! operations, groups, handle tables.

pub mod datatype;
pub mod error;
pub mod group;
pub mod handles;
pub mod op;
