//! Rabenseifner reduce (large messages): fold to a power of two, reduce-scatter by recursive
//! halving, then a binomial gather that undoes the halving onto new rank 0, which sends the
//! result to the root when it is another rank. Rank-ordered.

use crate::coll::allreduce::{blocks_region, halving, Fold};
use crate::coll::schedule::{split_elems, Builder, Region};
use crate::coll::{CollArgs, Schedule};

pub fn build(a: &CollArgs) -> Schedule {
    let (r, n, nbytes) = (a.rank, a.size, a.bytes);
    let mut b = Builder::new();
    if nbytes == 0 {
        return b.finish();
    }
    let is_root = r == a.root;
    let (acc, tmp) = if is_root {
        (Region::recv(0, nbytes), Region::tmp(0, nbytes))
    } else {
        (Region::tmp(0, nbytes), Region::tmp(nbytes, nbytes))
    };
    if !(is_root && a.in_place) {
        b.copy(Region::send(0, nbytes), acc);
    }
    if n == 1 {
        return b.finish();
    }
    b.tmp_at_least(tmp.end());
    let fold = Fold::new(n);
    let gatherer = fold.real(0);
    if let Some(nr) = fold.pre(&mut b, r, acc, tmp) {
        let blocks = split_elems(nbytes / a.elem_size, fold.pof2, a.elem_size);
        let steps = halving(&mut b, &fold, nr, &blocks, acc, tmp);
        for s in steps.iter().rev() {
            let peer = fold.real(nr ^ s.mask);
            let (mine, theirs) = if s.keep_low {
                ((s.lo, s.mid), (s.mid, s.hi))
            } else {
                ((s.mid, s.hi), (s.lo, s.mid))
            };
            if nr & s.mask != 0 {
                b.send_nz(peer, blocks_region(acc, &blocks, mine.0, mine.1));
                b.wait();
                break;
            }
            b.recv_nz(peer, blocks_region(acc, &blocks, theirs.0, theirs.1));
            b.wait();
        }
    }
    if r == gatherer && !is_root {
        b.send(a.root, acc);
    } else if is_root && r != gatherer {
        b.recv(gatherer, acc);
    }
    b.finish()
}
