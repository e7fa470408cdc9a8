//! Bcast: binomial tree (small), binomial scatter + allgather (van de Geijn; medium and large):
//! recursive-doubling allgather for power-of-two rank counts, ring allgather otherwise.
//! The one buffer is `Recv` on every rank.

pub mod binomial;
pub mod scatter_rdb;
pub mod scatter_ring;

use crate::coll::schedule::{split_elems, Builder, Region};
use crate::coll::CollArgs;

/// The message cut into one chunk per relative rank (chunk i belongs to relative rank i).
pub(crate) struct Chunks {
    chunks: Vec<(usize, usize)>,
}

impl Chunks {
    /// Bytes of the chunks [lo, hi) (relative indices, clipped to n) as one region.
    pub fn range(&self, lo: usize, hi: usize) -> Region {
        let hi = hi.min(self.chunks.len());
        if lo >= hi {
            return Region::recv(0, 0);
        }
        let off = self.chunks[lo].0;
        Region::recv(off, self.chunks[hi - 1].0 + self.chunks[hi - 1].1 - off)
    }
}

/// Binomial scatter of the chunks from the root: relative rank vr ends with (at least) the
/// chunks of its subtree [vr, vr + lowbit(vr)).
pub(crate) fn scatter(b: &mut Builder, a: &CollArgs) -> Chunks {
    let (n, root) = (a.size, a.root);
    let vr = (a.rank + n - root) % n;
    let real = |v: usize| (v + root) % n;
    let c = Chunks {
        chunks: split_elems(a.bytes, n, 1),
    };
    let mut mask = 1;
    while mask < n {
        if vr & mask != 0 {
            b.recv_nz(real(vr - mask), c.range(vr, vr + mask));
            b.wait();
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    while mask > 0 {
        if vr + mask < n {
            b.send_nz(real(vr + mask), c.range(vr + mask, vr + 2 * mask));
        }
        mask >>= 1;
    }
    b.wait();
    c
}
