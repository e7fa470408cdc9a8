//! Reduce_scatter (per-rank counts) and reduce_scatter_block: recursive halving (commutative
//! ops), rank-ordered recursive halving plus a final permutation (any op), and pairwise exchange
//! (any op; rank-ordered for non-commutative ops).

use super::allreduce::{blocks_region, halving, Fold};
use super::schedule::{Builder, Region};
use super::{CollArgs, Schedule};

/// Byte (offset, length) of each rank's block in the input vector, and the vector length.
fn layout(a: &CollArgs) -> (Vec<(usize, usize)>, usize) {
    let lens: Vec<usize> = if a.recv_blocks.len() == a.size {
        a.recv_blocks.iter().map(|b| b.len).collect()
    } else {
        vec![a.bytes; a.size]
    };
    let mut off = 0;
    let v = lens
        .iter()
        .map(|&l| {
            let o = off;
            off += l;
            (o, l)
        })
        .collect();
    (v, off)
}

/// Recursive halving (commutative ops only): fold to a power of two, halve the vector log2
/// times with distance halving so that new rank j ends with the blocks of the ranks it stands
/// for, then hand the folded ranks their block.
pub fn recursive_halving(a: &CollArgs) -> Schedule {
    let (r, n) = (a.rank, a.size);
    let (blocks, total) = layout(a);
    let mut b = Builder::new();
    if total == 0 {
        return b.finish();
    }
    let input = if a.in_place {
        Region::recv(0, total)
    } else {
        Region::send(0, total)
    };
    let out = Region::recv(0, blocks[r].1);
    let acc = Region::tmp(0, total);
    let tmp = Region::tmp(total, total);
    b.tmp_at_least(2 * total);
    b.copy(input, acc);
    let fold = Fold::new(n);
    if let Some(nr) = fold.pre(&mut b, r, acc, tmp) {
        let sup = superblocks(&fold, &blocks);
        let (mut lo, mut hi) = (0, fold.pof2);
        let mut mask = fold.pof2 / 2;
        while mask > 0 {
            let peer = fold.real(nr ^ mask);
            let mid = lo + (hi - lo) / 2;
            let (klo, khi, slo, shi) = if nr & mask == 0 {
                (lo, mid, mid, hi)
            } else {
                (mid, hi, lo, mid)
            };
            b.send_nz(peer, blocks_region(acc, &sup, slo, shi));
            b.recv_nz(peer, blocks_region(tmp, &sup, klo, khi));
            b.wait();
            b.reduce(
                blocks_region(tmp, &sup, klo, khi),
                blocks_region(acc, &sup, klo, khi),
            );
            lo = klo;
            hi = khi;
            mask >>= 1;
        }
        if r < 2 * fold.rem {
            b.send_nz(r - 1, acc.sub(blocks[r - 1].0, blocks[r - 1].1));
        }
        b.copy(acc.sub(blocks[r].0, blocks[r].1), out);
    } else {
        b.recv_nz(r + 1, out);
    }
    b.finish()
}

/// Superblock j of the fold: the blocks of the ranks new rank j stands for (contiguous).
fn superblocks(fold: &Fold, blocks: &[(usize, usize)]) -> Vec<(usize, usize)> {
    (0..fold.pof2)
        .map(|j| {
            let (first, last) = if j < fold.rem {
                (2 * j, 2 * j + 1)
            } else {
                (j + fold.rem, j + fold.rem)
            };
            (
                blocks[first].0,
                blocks[last].0 + blocks[last].1 - blocks[first].0,
            )
        })
        .collect()
}

/// The superblock new rank `nr` holds after the distance-doubling halving of `allreduce::halving`
/// (its index bits reversed).
fn halving_result(nr: usize, pof2: usize) -> usize {
    let (mut lo, mut hi) = (0, pof2);
    let mut mask = 1;
    while mask < pof2 {
        let mid = lo + (hi - lo) / 2;
        if nr & mask == 0 {
            hi = mid;
        } else {
            lo = mid;
        }
        mask <<= 1;
    }
    lo
}

/// Rank-ordered recursive halving (any op): fold to a power of two, reduce-scatter with
/// distance doubling (partial results always cover aligned groups of new ranks, combined lower
/// group on the left), so new rank nr ends with superblock bitreverse(nr); one more exchange
/// delivers every rank its block. log2(n) + 2 messages per rank.
pub fn recursive_halving_ordered(a: &CollArgs) -> Schedule {
    let r = a.rank;
    let (blocks, total) = layout(a);
    let mut b = Builder::new();
    if total == 0 {
        return b.finish();
    }
    let input = if a.in_place {
        Region::recv(0, total)
    } else {
        Region::send(0, total)
    };
    let out = Region::recv(0, blocks[r].1);
    let acc = Region::tmp(0, total);
    let tmp = Region::tmp(total, total);
    b.tmp_at_least(2 * total);
    b.copy(input, acc);
    let fold = Fold::new(a.size);
    let sup = superblocks(&fold, &blocks);
    let owners = |j: usize| {
        if j < fold.rem {
            vec![2 * j, 2 * j + 1]
        } else {
            vec![j + fold.rem]
        }
    };
    let mut mine_here = false;
    if let Some(nr) = fold.pre(&mut b, r, acc, tmp) {
        halving(&mut b, &fold, nr, &sup, acc, tmp);
        for o in owners(halving_result(nr, fold.pof2)) {
            if o == r {
                mine_here = true;
            } else {
                b.send_nz(o, acc.sub(blocks[o].0, blocks[o].1));
            }
        }
    }
    if mine_here {
        b.copy(acc.sub(blocks[r].0, blocks[r].1), out);
    } else {
        let my_sup = if r < 2 * fold.rem {
            r / 2
        } else {
            r - fold.rem
        };
        let holder = (0..fold.pof2)
            .find(|&nr| halving_result(nr, fold.pof2) == my_sup)
            .expect("the halving is a permutation");
        b.recv_nz(fold.real(holder), out);
    }
    b.finish()
}

/// Pairwise exchange: in step k send block rank+k to rank+k and receive our block from rank-k.
/// Commutative ops reduce as data arrives; non-commutative ops keep every contribution and fold
/// them in rank order at the end.
pub fn pairwise(a: &CollArgs) -> Schedule {
    let (r, n) = (a.rank, a.size);
    let (blocks, total) = layout(a);
    let mut b = Builder::new();
    if total == 0 {
        return b.finish();
    }
    let input = if a.in_place {
        Region::recv(0, total)
    } else {
        Region::send(0, total)
    };
    let c = blocks[r].1;
    let blk = |i: usize| input.sub(blocks[i].0, blocks[i].1);
    let out = Region::recv(0, c);
    if a.commutative {
        let (acc, tmp) = (Region::tmp(0, c), Region::tmp(c, c));
        b.tmp_at_least(2 * c);
        b.copy(blk(r), acc);
        for k in 1..n {
            let (to, from) = ((r + k) % n, (r + n - k) % n);
            b.send_nz(to, blk(to));
            b.recv_nz(from, tmp);
            b.wait();
            b.reduce(tmp, acc);
        }
        b.copy(acc, out);
    } else {
        let slot = |i: usize| Region::tmp(i * c, c);
        b.tmp_at_least(n * c);
        b.copy(blk(r), slot(r));
        for k in 1..n {
            let (to, from) = ((r + k) % n, (r + n - k) % n);
            b.send_nz(to, blk(to));
            b.recv_nz(from, slot(from));
            b.wait();
        }
        b.copy(slot(n - 1), out);
        for i in (0..n - 1).rev() {
            b.reduce(slot(i), out);
        }
    }
    b.finish()
}
