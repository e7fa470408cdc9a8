//! Builtin reduction operations.
