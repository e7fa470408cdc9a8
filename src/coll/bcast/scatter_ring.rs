//! Large-message broadcast: binomial scatter of n chunks, then a ring allgather
//! (MPICH `bcast_scatter_ring_allgather`). Chunk i belongs to relative rank i.

use crate::coll::schedule::{split_elems, Builder, Region};
use crate::coll::{CollArgs, Schedule};

pub fn build(a: &CollArgs) -> Schedule {
    let (n, root) = (a.size, a.root);
    let vr = (a.rank + n - root) % n;
    let real = |v: usize| (v + root) % n;
    let mut b = Builder::new();
    if a.bytes == 0 || n == 1 {
        return b.finish();
    }
    let chunks = split_elems(a.bytes, n, 1);
    // Bytes of the chunks [lo, hi) (relative indices, clipped to n) as one region.
    let range = |lo: usize, hi: usize| {
        let hi = hi.min(n);
        if lo >= hi {
            return Region::recv(0, 0);
        }
        let off = chunks[lo].0;
        Region::recv(off, chunks[hi - 1].0 + chunks[hi - 1].1 - off)
    };
    // Binomial scatter: the subtree of vr is [vr, vr + lowbit(vr)).
    let mut mask = 1;
    while mask < n {
        if vr & mask != 0 {
            b.recv_nz(real(vr - mask), range(vr, vr + mask));
            b.wait();
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    while mask > 0 {
        if vr + mask < n {
            b.send_nz(real(vr + mask), range(vr + mask, vr + 2 * mask));
        }
        mask >>= 1;
    }
    b.wait();
    // Ring allgather of the chunks.
    let (left, right) = (real((vr + n - 1) % n), real((vr + 1) % n));
    for s in 0..n - 1 {
        let sc = (vr + n - s) % n;
        let rc = (vr + 2 * n - s - 1) % n;
        b.send_nz(right, range(sc, sc + 1));
        b.recv_nz(left, range(rc, rc + 1));
        b.wait();
    }
    b.finish()
}
