//! Scatter: binomial tree (regular scatter); linear (scatterv).

use super::gather::subtree;
use super::schedule::{Builder, Region};
use super::{CollArgs, Schedule};

/// Binomial scatter (MPICH): the root sends each child its subtree's blocks (through Tmp where
/// the relative range wraps around the end of the send buffer); inner ranks receive their
/// subtree into Tmp and forward the children's parts.
pub fn binomial(a: &CollArgs) -> Schedule {
    let (n, root, bs) = (a.size, a.root, a.bytes);
    let vr = (a.rank + n - root) % n;
    let real = |v: usize| (v + root) % n;
    let mut b = Builder::new();
    if bs == 0 {
        return b.finish();
    }
    if vr == 0 {
        if !a.in_place {
            b.copy(Region::send(root * bs, bs), Region::recv(0, bs));
        }
        let mut mask = 1;
        while mask < n {
            mask <<= 1;
        }
        mask >>= 1;
        while mask > 0 {
            let (lo, cnt) = (mask, subtree(mask, n));
            let first = real(lo);
            if first + cnt <= n {
                b.send(first, Region::send(first * bs, cnt * bs));
            } else {
                b.tmp_at_least((lo + cnt) * bs);
                let t = Region::tmp(lo * bs, cnt * bs);
                let k = n - first;
                b.copy(Region::send(first * bs, k * bs), t.sub(0, k * bs));
                b.copy(
                    Region::send(0, (cnt - k) * bs),
                    t.sub(k * bs, (cnt - k) * bs),
                );
                b.send(first, t);
            }
            mask >>= 1;
        }
        return b.finish();
    }
    let cnt = subtree(vr, n);
    let lowbit = vr & vr.wrapping_neg();
    let parent = real(vr - lowbit);
    if cnt == 1 {
        b.recv(parent, Region::recv(0, bs));
        return b.finish();
    }
    b.tmp_at_least(cnt * bs);
    b.recv(parent, Region::tmp(0, cnt * bs));
    b.wait();
    let mut mask = lowbit >> 1;
    while mask > 0 {
        if vr + mask < n {
            let c = subtree(vr + mask, n);
            b.send(real(vr + mask), Region::tmp(mask * bs, c * bs));
        }
        mask >>= 1;
    }
    b.copy(Region::tmp(0, bs), Region::recv(0, bs));
    b.finish()
}

/// Linear scatterv: the root posts one send per rank.
pub fn linear_v(a: &CollArgs) -> Schedule {
    let mut b = Builder::new();
    if a.rank != a.root {
        b.recv(a.root, Region::recv(0, a.bytes));
        return b.finish();
    }
    for (i, blk) in a.send_blocks.iter().enumerate() {
        let src = Region::send(blk.off, blk.len);
        if i == a.rank {
            if !a.in_place {
                let l = blk.len.min(a.bytes);
                b.copy(src.sub(0, l), Region::recv(0, l));
            }
        } else {
            b.send(i, src);
        }
    }
    b.finish()
}
