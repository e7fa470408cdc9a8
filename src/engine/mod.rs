//! engine (see ARCHITECTURE.md)
