//! Allgather: recursive doubling (power-of-two rank counts), Bruck (any count, small),
//! ring (large; also allgatherv).

pub mod bruck;
pub mod recursive_doubling;
pub mod ring;
