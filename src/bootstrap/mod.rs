//! bootstrap (see ARCHITECTURE.md)
