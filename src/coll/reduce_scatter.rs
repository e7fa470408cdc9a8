//! Reduce_scatter (per-rank counts) and reduce_scatter_block: recursive halving (commutative
//! ops) and pairwise exchange (any op; rank-ordered for non-commutative ops).

use super::allreduce::{blocks_region, Fold};
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
        // Superblock j: the blocks of the ranks new rank j stands for (contiguous).
        let sup: Vec<(usize, usize)> = (0..fold.pof2)
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
            .collect();
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
