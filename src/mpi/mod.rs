//! MPI semantics without transport code: error type, datatypes, reduction
//! operations, groups, matching rules.

pub mod error;
pub mod datatype;
pub mod op;
