//! Binomial-tree reduce. Commutative ops: the tree is rooted at `root` (relative ranks).
//! Non-commutative ops: the tree is rooted at rank 0 in absolute ranks, where every child's
//! subtree covers the ranks just above its parent's, so `acc = acc op child` is rank order;
//! rank 0 then sends the result to the root (MPICH does the same).

use crate::coll::schedule::{Builder, Region};
use crate::coll::{CollArgs, Schedule};

pub fn build(a: &CollArgs) -> Schedule {
    let (r, n, nbytes) = (a.rank, a.size, a.bytes);
    let mut b = Builder::new();
    if nbytes == 0 {
        return b.finish();
    }
    let is_root = r == a.root;
    let tree_root = if a.commutative { a.root } else { 0 };
    let vr = (r + n - tree_root) % n;
    let real = |v: usize| (v + tree_root) % n;
    // The input, the writable accumulator and the landing zone for children's data.
    let input = if is_root && a.in_place {
        Region::recv(0, nbytes)
    } else {
        Region::send(0, nbytes)
    };
    let (target, incoming) = if is_root {
        (Region::recv(0, nbytes), Region::tmp(0, nbytes))
    } else {
        (Region::tmp(0, nbytes), Region::tmp(nbytes, nbytes))
    };
    let mut acc = input;
    let mut mask = 1;
    while mask < n {
        if vr & mask == 0 {
            let child = vr | mask;
            if child < n {
                if acc.buf == target.buf && acc.off == target.off {
                    b.tmp_at_least(incoming.end());
                    b.recv(real(child), incoming);
                    b.wait();
                    b.reduce_rev(incoming, acc); // acc = acc op child
                } else {
                    // First child: land it in the accumulator and put our input on the left.
                    b.tmp_at_least(if target.buf == crate::coll::BufId::Tmp {
                        target.end()
                    } else {
                        0
                    });
                    b.recv(real(child), target);
                    b.wait();
                    b.reduce(acc, target);
                    acc = target;
                }
            }
        } else {
            b.send(real(vr & !mask), acc);
            b.wait();
            break;
        }
        mask <<= 1;
    }
    if vr == 0 {
        if is_root {
            b.copy(acc, Region::recv(0, nbytes));
        } else {
            b.send(a.root, acc);
        }
    } else if is_root {
        b.recv(tree_root, Region::recv(0, nbytes));
    }
    b.finish()
}
