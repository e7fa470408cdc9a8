//! Ring allreduce (large messages, commutative ops only): ring reduce-scatter of n blocks,
//! then ring allgather. Each rank sends 2(n-1)/n of the vector.

use crate::coll::schedule::{split_elems, Builder, Region};
use crate::coll::{CollArgs, Schedule};

pub fn build(a: &CollArgs) -> Schedule {
    let (r, n) = (a.rank, a.size);
    let mut b = Builder::new();
    let acc = Region::recv(0, a.bytes);
    if a.bytes == 0 {
        return b.finish();
    }
    if !a.in_place {
        b.copy(Region::send(0, a.bytes), acc);
    }
    if n == 1 {
        return b.finish();
    }
    let blocks = split_elems(a.bytes / a.elem_size, n, a.elem_size);
    let blk = |i: usize| acc.sub(blocks[i].0, blocks[i].1);
    b.tmp_at_least(blocks[0].1);
    let (left, right) = ((r + n - 1) % n, (r + 1) % n);
    for s in 0..n - 1 {
        let sb = (r + n - s) % n;
        let rb = (r + 2 * n - s - 1) % n;
        let tmp = Region::tmp(0, blocks[rb].1);
        b.send_nz(right, blk(sb));
        b.recv_nz(left, tmp);
        b.wait();
        b.reduce(tmp, blk(rb));
    }
    // Rank r now holds the reduced block r + 1.
    for s in 0..n - 1 {
        let sb = (r + 1 + n - s) % n;
        let rb = (r + n - s) % n;
        b.send_nz(right, blk(sb));
        b.recv_nz(left, blk(rb));
        b.wait();
    }
    b.finish()
}
