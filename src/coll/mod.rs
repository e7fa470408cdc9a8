//! coll (see ARCHITECTURE.md)
