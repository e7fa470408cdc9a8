//! Alltoall: Bruck (small blocks), pairwise exchange (large; also alltoallv/alltoallw), and
//! between nodes through PXN forwarders ([`pxn`]).

pub mod bruck;
pub mod pairwise;
pub mod pxn;
