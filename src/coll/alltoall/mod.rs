//! Alltoall: Bruck (small blocks), pairwise exchange (large; also alltoallv/alltoallw), and
//! between nodes through PXN forwarders ([`pxn`]) or one aggregator per node and rail
//! ([`rails`]; alltoallv/alltoallw after the block lengths were told inside the node,
//! [`counts`]).

pub mod bruck;
pub mod choice;
pub mod counts;
pub mod pairwise;
pub mod pxn;
pub mod rails;
