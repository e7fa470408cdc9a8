//! Reduce: binomial tree (small; rank-ordered tree on rank 0 plus a final hop to the root for
//! non-commutative ops), Rabenseifner (large: reduce-scatter by recursive halving + binomial
//! gather). Both keep rank order.

pub mod binomial;
pub mod rabenseifner;
