//! Alltoall: Bruck (small blocks), pairwise exchange (large; also alltoallv/alltoallw), and
//! between nodes through PXN forwarders ([`pxn`]) or one aggregator per node and rail
//! ([`rails`]; alltoallv/alltoallw after the block lengths were told inside the node,
//! [`counts`], through either per pair of nodes, [`pairs`]).

pub mod bruck;
pub mod choice;
pub mod counts;
pub mod pairs;
pub mod pairwise;
pub mod pxn;
pub mod rails;

use crate::coll::schedule::{Builder, Region};
use crate::coll::{Block, CollArgs};

/// Rank `a.rank`'s input blocks, one per destination `d` (`len(rank, d)` bytes at `send[d].off`
/// in Send), and the scratch bytes they took: in place they are copied aside into Tmp from 0
/// first (from `recv[d].off` in Recv), since received blocks land in Recv.
pub(crate) fn input_blocks(
    b: &mut Builder,
    a: &CollArgs,
    len: &dyn Fn(usize, usize) -> usize,
    send: &[Block],
    recv: &[Block],
) -> (Vec<Region>, usize) {
    let (r, n) = (a.rank, a.size);
    if !a.in_place {
        let v = (0..n)
            .map(|d| Region::send(send[d].off, len(r, d)))
            .collect();
        return (v, 0);
    }
    let mut k = 0;
    let mut v = Vec::with_capacity(n);
    for (d, blk) in recv.iter().enumerate().take(n) {
        let l = len(r, d);
        b.copy(Region::recv(blk.off, l), Region::tmp(k, l));
        v.push(Region::tmp(k, l));
        k += l;
    }
    (v, k)
}
