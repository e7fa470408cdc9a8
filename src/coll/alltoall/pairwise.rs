//! Pairwise-exchange alltoall(v,w): n-1 steps; in step k exchange with rank xor k when n is a
//! power of two, else send to rank + k and receive from rank - k. In place, the input is first
//! copied to Tmp so that received blocks cannot overwrite blocks still to be sent.

use crate::coll::schedule::{Builder, Region};
use crate::coll::{Block, CollArgs, Schedule};

fn pairwise(a: &CollArgs, send: &[Block], recv: &[Block]) -> Schedule {
    let (r, n) = (a.rank, a.size);
    let mut b = Builder::new();
    let src: Vec<Region> = if a.in_place {
        // Pack the outgoing blocks into Tmp.
        let mut off = 0;
        let mut v = Vec::with_capacity(n);
        for (i, blk) in recv.iter().enumerate() {
            let t = Region::tmp(off, blk.len);
            if i != r {
                b.copy(Region::recv(blk.off, blk.len), t);
            }
            off += blk.len;
            v.push(t);
        }
        b.tmp_at_least(off);
        v
    } else {
        send.iter().map(|s| Region::send(s.off, s.len)).collect()
    };
    let dst = |i: usize| Region::recv(recv[i].off, recv[i].len);
    if !a.in_place {
        b.copy(src[r], dst(r));
    }
    let pof2 = n.is_power_of_two();
    for k in 1..n {
        let (to, from) = if pof2 {
            (r ^ k, r ^ k)
        } else {
            ((r + k) % n, (r + n - k) % n)
        };
        b.send(to, src[to]);
        b.recv(from, dst(from));
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
    pairwise(a, &blocks, &blocks)
}

/// Alltoallv / alltoallw: per-peer regions in packed space.
pub fn build_v(a: &CollArgs) -> Schedule {
    pairwise(a, a.send_blocks, a.recv_blocks)
}
