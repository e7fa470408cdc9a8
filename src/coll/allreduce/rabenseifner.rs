//! Rabenseifner allreduce: reduce-scatter by recursive halving, then allgather by recursive
//! doubling (the halving steps undone), with the fold pre/post step. Rank-ordered (the halving
//! runs with distance doubling so partial results always cover aligned groups of new ranks).

use super::{blocks_region, halving, Fold};
use crate::coll::schedule::{split_elems, Builder, Region};
use crate::coll::{CollArgs, Schedule};

pub fn build(a: &CollArgs) -> Schedule {
    let mut b = Builder::new();
    let acc = Region::recv(0, a.bytes);
    if a.bytes == 0 {
        return b.finish();
    }
    if !a.in_place {
        b.copy(Region::send(0, a.bytes), acc);
    }
    if a.size == 1 {
        return b.finish();
    }
    b.tmp_at_least(a.bytes);
    let tmp = Region::tmp(0, a.bytes);
    let fold = Fold::new(a.size);
    if let Some(nr) = fold.pre(&mut b, a.rank, acc, tmp) {
        let blocks = split_elems(a.bytes / a.elem_size, fold.pof2, a.elem_size);
        let steps = halving(&mut b, &fold, nr, &blocks, acc, tmp);
        for s in steps.iter().rev() {
            let peer = fold.real(nr ^ s.mask);
            let (mine, theirs) = if s.keep_low {
                ((s.lo, s.mid), (s.mid, s.hi))
            } else {
                ((s.mid, s.hi), (s.lo, s.mid))
            };
            b.send_nz(peer, blocks_region(acc, &blocks, mine.0, mine.1));
            b.recv_nz(peer, blocks_region(acc, &blocks, theirs.0, theirs.1));
            b.wait();
        }
    }
    fold.post(&mut b, a.rank, acc);
    b.finish()
}
