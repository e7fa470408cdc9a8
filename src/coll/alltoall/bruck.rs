//! Bruck alltoall: rotate so that Tmp slot i holds the block for rank + i, then for each bit k
//! send the slots with bit k set to rank + k (packed), receive the same slots from rank - k;
//! finally slot i holds the block from rank - i. ceil(log2 n) messages of about n/2 blocks.

use crate::coll::schedule::{Builder, Region};
use crate::coll::{CollArgs, Schedule};

pub fn build(a: &CollArgs) -> Schedule {
    let (r, n, bs) = (a.rank, a.size, a.bytes);
    let mut b = Builder::new();
    if bs == 0 {
        return b.finish();
    }
    let input = if a.in_place {
        Region::recv(0, n * bs)
    } else {
        Region::send(0, n * bs)
    };
    if n == 1 {
        b.copy(input, Region::recv(0, bs));
        return b.finish();
    }
    let slot = |i: usize| Region::tmp(i * bs, bs);
    let half = n.div_ceil(2);
    let pack = Region::tmp(n * bs, half * bs);
    let unpack = Region::tmp((n + half) * bs, half * bs);
    b.tmp_at_least((n + 2 * half) * bs);
    // Slot i = block for rank (r + i) % n.
    b.copy(
        input.sub(r * bs, (n - r) * bs),
        Region::tmp(0, (n - r) * bs),
    );
    b.copy(input.sub(0, r * bs), Region::tmp((n - r) * bs, r * bs));
    let mut k = 1;
    while k < n {
        let idx: Vec<usize> = (0..n).filter(|i| i & k != 0).collect();
        for (j, &i) in idx.iter().enumerate() {
            b.copy(slot(i), pack.sub(j * bs, bs));
        }
        let len = idx.len() * bs;
        b.send((r + k) % n, pack.sub(0, len));
        b.recv((r + n - k) % n, unpack.sub(0, len));
        b.wait();
        for (j, &i) in idx.iter().enumerate() {
            b.copy(unpack.sub(j * bs, bs), slot(i));
        }
        k <<= 1;
    }
    // Slot i holds the block from rank (r - i) mod n.
    for i in 0..n {
        b.copy(slot(i), Region::recv(((r + n - i) % n) * bs, bs));
    }
    b.finish()
}
