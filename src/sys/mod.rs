//! sys (see ARCHITECTURE.md)
