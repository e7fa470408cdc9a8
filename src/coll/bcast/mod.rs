//! Bcast: binomial tree (small), binomial scatter + ring allgather (large, van de Geijn).
//! The one buffer is `Recv` on every rank.

pub mod binomial;
pub mod scatter_ring;
