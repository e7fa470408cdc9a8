//! MPI semantics without transport code: error type, datatypes, reduction
//! operations, groups, matching rules.

pub mod error;
pub mod group;
pub mod handles;
