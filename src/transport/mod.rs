//! transport (see ARCHITECTURE.md)
