//! coll (see ARCHITECTURE.md)

pub mod schedule;
