//! Allreduce: recursive doubling (small), Rabenseifner (reduce-scatter by recursive halving +
//! allgather by recursive doubling), ring (large, commutative only).
//!
//! Non-power-of-two rank counts use the standard fold (MPICH): with pof2 = the largest power of
//! two <= n and rem = n - pof2, the first 2*rem ranks pair up, the even one hands its vector to
//! the odd one and sits out; the odd one becomes "new rank" r/2, the others r - rem. New-rank
//! order is rank order, so combining the lower new rank's data on the left keeps operands in
//! rank order (needed for non-commutative ops).

pub mod rabenseifner;
pub mod recursive_doubling;
pub mod ring;

use crate::coll::schedule::{pof2_floor, Builder, Region};

/// The fold of n ranks onto a power of two.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Fold {
    pub pof2: usize,
    pub rem: usize,
}

impl Fold {
    pub fn new(n: usize) -> Self {
        let pof2 = pof2_floor(n);
        Fold {
            pof2,
            rem: n - pof2,
        }
    }
    /// The new rank of `r`, or None when r sits out.
    pub fn newrank(&self, r: usize) -> Option<usize> {
        if r < 2 * self.rem {
            (r & 1 == 1).then_some(r / 2)
        } else {
            Some(r - self.rem)
        }
    }
    /// The rank holding new rank `nr`.
    pub fn real(&self, nr: usize) -> usize {
        if nr < self.rem {
            2 * nr + 1
        } else {
            nr + self.rem
        }
    }
    /// Pre-step: fold `acc` of the sitting-out ranks into their partner. `tmp` has acc's length.
    pub fn pre(&self, b: &mut Builder, r: usize, acc: Region, tmp: Region) -> Option<usize> {
        if r < 2 * self.rem {
            if r & 1 == 0 {
                b.send_nz(r + 1, acc);
                b.wait();
            } else {
                b.recv_nz(r - 1, tmp);
                b.wait();
                b.reduce(tmp, acc); // rank r-1 is the left operand
            }
        }
        self.newrank(r)
    }
    /// Post-step: hand the result back to the ranks that sat out.
    pub fn post(&self, b: &mut Builder, r: usize, acc: Region) {
        if r < 2 * self.rem {
            if r & 1 == 1 {
                b.send_nz(r - 1, acc);
            } else {
                b.recv_nz(r + 1, acc);
            }
            b.wait();
        }
    }
}

/// One step of the recursive-halving reduce-scatter: the range [lo, hi) of blocks before the
/// step, its split point, the partner mask, and whether this rank kept the lower half.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HalvingStep {
    pub lo: usize,
    pub hi: usize,
    pub mid: usize,
    pub mask: usize,
    pub keep_low: bool,
}

/// Byte region of blocks [lo, hi) of `blocks` (byte (off, len) per block) in `base`'s buffer,
/// offsets relative to `base.off`.
pub(crate) fn blocks_region(
    base: Region,
    blocks: &[(usize, usize)],
    lo: usize,
    hi: usize,
) -> Region {
    if lo >= hi {
        return base.sub(0, 0);
    }
    let off = blocks[lo].0;
    let end = blocks[hi - 1].0 + blocks[hi - 1].1;
    base.sub(off, end - off)
}

/// Reduce-scatter by recursive halving with distance doubling (masks 1, 2, 4, ...), which keeps
/// rank order: after the step with mask m each new rank holds its range reduced over the aligned
/// group of 2m new ranks. `blocks` are pof2 blocks of acc. Returns the steps taken (to undo them);
/// new rank `nr` ends with the range of the last step's kept half.
pub(crate) fn halving(
    b: &mut Builder,
    fold: &Fold,
    nr: usize,
    blocks: &[(usize, usize)],
    acc: Region,
    tmp: Region,
) -> Vec<HalvingStep> {
    let mut steps = Vec::new();
    let (mut lo, mut hi) = (0, fold.pof2);
    let mut mask = 1;
    while mask < fold.pof2 {
        let partner = nr ^ mask;
        let peer = fold.real(partner);
        let mid = lo + (hi - lo) / 2;
        let keep_low = nr & mask == 0;
        let (klo, khi, slo, shi) = if keep_low {
            (lo, mid, mid, hi)
        } else {
            (mid, hi, lo, mid)
        };
        b.send_nz(peer, blocks_region(acc, blocks, slo, shi));
        b.recv_nz(peer, blocks_region(tmp, blocks, klo, khi));
        b.wait();
        b.combine(
            blocks_region(tmp, blocks, klo, khi),
            blocks_region(acc, blocks, klo, khi),
            partner < nr,
        );
        steps.push(HalvingStep {
            lo,
            hi,
            mid,
            mask,
            keep_low,
        });
        lo = klo;
        hi = khi;
        mask <<= 1;
    }
    steps
}
