//! Ring allgather(v): n-1 steps, each passing one block to the right neighbour.

use crate::coll::schedule::{Builder, Region};
use crate::coll::{Block, CollArgs, Schedule};

fn ring(a: &CollArgs, blocks: &[Block], own_len: usize) -> Schedule {
    let (r, n) = (a.rank, a.size);
    let mut b = Builder::new();
    let blk = |i: usize| Region::recv(blocks[i].off, blocks[i].len);
    if !a.in_place {
        let l = own_len.min(blocks[r].len);
        b.copy(Region::send(0, l), blk(r).sub(0, l));
    }
    let (left, right) = ((r + n - 1) % n, (r + 1) % n);
    for s in 0..n.saturating_sub(1) {
        b.send(right, blk((r + n - s) % n));
        b.recv(left, blk((r + 2 * n - s - 1) % n));
        b.wait();
    }
    b.finish()
}

pub fn build(a: &CollArgs) -> Schedule {
    if a.bytes == 0 {
        return Schedule::default();
    }
    let blocks: Vec<Block> = (0..a.size)
        .map(|i| Block::new(i * a.bytes, a.bytes))
        .collect();
    ring(a, &blocks, a.bytes)
}

/// Allgatherv: `recv_blocks[i]` is rank i's block in Recv.
pub fn build_v(a: &CollArgs) -> Schedule {
    ring(a, a.recv_blocks, a.recv_blocks[a.rank].len)
}
