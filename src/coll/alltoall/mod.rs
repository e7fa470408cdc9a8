//! Alltoall: Bruck (small blocks), pairwise exchange (large; also alltoallv/alltoallw).

pub mod bruck;
pub mod pairwise;
