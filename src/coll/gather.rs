//! Gather: binomial tree (regular gather); linear (gatherv).

use super::schedule::{Builder, Region};
use super::{CollArgs, Schedule};

/// Size of the binomial subtree of relative rank `vr` (vr > 0): [vr, vr + lowbit(vr)) clipped.
pub(crate) fn subtree(vr: usize, n: usize) -> usize {
    if vr == 0 {
        n
    } else {
        (vr & vr.wrapping_neg()).min(n - vr)
    }
}

/// Binomial gather (MPICH): each rank collects its subtree's blocks in relative order in Tmp and
/// forwards them to its parent; the root receives straight into Recv where the relative range
/// does not wrap around the end of the buffer, else through Tmp.
pub fn binomial(a: &CollArgs) -> Schedule {
    let (n, root, bs) = (a.size, a.root, a.bytes);
    let vr = (a.rank + n - root) % n;
    let real = |v: usize| (v + root) % n;
    let mut b = Builder::new();
    if bs == 0 {
        return b.finish();
    }
    let own = Region::send(0, bs);
    if vr == 0 {
        if !a.in_place {
            b.copy(own, Region::recv(root * bs, bs));
        }
        let mut fixups = Vec::new();
        let mut mask = 1;
        while mask < n {
            let (lo, cnt) = (mask, subtree(mask, n));
            let first = real(lo);
            if first + cnt <= n {
                b.recv(first, Region::recv(first * bs, cnt * bs));
            } else {
                b.tmp_at_least((lo + cnt) * bs);
                let t = Region::tmp(lo * bs, cnt * bs);
                b.recv(first, t);
                fixups.push((first, cnt, t));
            }
            mask <<= 1;
        }
        b.wait();
        for (first, cnt, t) in fixups {
            let k = n - first; // blocks up to the end of the buffer
            b.copy(t.sub(0, k * bs), Region::recv(first * bs, k * bs));
            b.copy(
                t.sub(k * bs, (cnt - k) * bs),
                Region::recv(0, (cnt - k) * bs),
            );
        }
        return b.finish();
    }
    let cnt = subtree(vr, n);
    let lowbit = vr & vr.wrapping_neg();
    if cnt == 1 {
        b.send(real(vr - lowbit), own);
        return b.finish();
    }
    b.tmp_at_least(cnt * bs);
    b.copy(own, Region::tmp(0, bs));
    let mut mask = 1;
    while mask < lowbit && vr + mask < n {
        let c = subtree(vr + mask, n);
        b.recv(real(vr + mask), Region::tmp(mask * bs, c * bs));
        mask <<= 1;
    }
    b.wait();
    b.send(real(vr - lowbit), Region::tmp(0, cnt * bs));
    b.finish()
}

/// Linear gatherv: the root posts one receive per rank.
pub fn linear_v(a: &CollArgs) -> Schedule {
    let mut b = Builder::new();
    if a.rank != a.root {
        b.send(a.root, Region::send(0, a.bytes));
        return b.finish();
    }
    for (i, blk) in a.recv_blocks.iter().enumerate() {
        let dst = Region::recv(blk.off, blk.len);
        if i == a.rank {
            if !a.in_place {
                b.copy(
                    Region::send(0, blk.len.min(a.bytes)),
                    dst.sub(0, blk.len.min(a.bytes)),
                );
            }
        } else {
            b.recv(i, dst);
        }
    }
    b.finish()
}
