//! The MPI-5.0 standard ABI as data (placeholder).
