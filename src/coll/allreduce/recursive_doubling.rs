//! Recursive-doubling allreduce (small messages): log2(pof2) exchanges of the whole vector,
//! plus the fold pre/post step for non-power-of-two rank counts. Rank-ordered.

use super::Fold;
use crate::coll::schedule::{Builder, Region};
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
        let mut mask = 1;
        while mask < fold.pof2 {
            let partner = nr ^ mask;
            let peer = fold.real(partner);
            b.send(peer, acc);
            b.recv(peer, tmp);
            b.wait();
            b.combine(tmp, acc, partner < nr);
            mask <<= 1;
        }
    }
    fold.post(&mut b, a.rank, acc);
    b.finish()
}
