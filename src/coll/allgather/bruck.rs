//! Bruck allgather: ceil(log2 n) steps for any n. Tmp slot i collects the block of rank
//! (rank + i) mod n; step k sends slots [0, min(k, n-k)) to rank - k and receives slots
//! [k, ..) from rank + k; a final rotation copies the slots into Recv.

use crate::coll::schedule::{Builder, Region};
use crate::coll::{CollArgs, Schedule};

pub fn build(a: &CollArgs) -> Schedule {
    let (r, n, bs) = (a.rank, a.size, a.bytes);
    let mut b = Builder::new();
    if bs == 0 {
        return b.finish();
    }
    let own = if a.in_place {
        Region::recv(r * bs, bs)
    } else {
        Region::send(0, bs)
    };
    if n == 1 {
        b.copy(own, Region::recv(0, bs));
        return b.finish();
    }
    b.tmp_at_least(n * bs);
    b.copy(own, Region::tmp(0, bs));
    let mut k = 1;
    while k < n {
        let cnt = k.min(n - k);
        b.send((r + n - k) % n, Region::tmp(0, cnt * bs));
        b.recv((r + k) % n, Region::tmp(k * bs, cnt * bs));
        b.wait();
        k <<= 1;
    }
    // Slots [0, n - r) are ranks r..n, slots [n - r, n) are ranks 0..r.
    b.copy(
        Region::tmp(0, (n - r) * bs),
        Region::recv(r * bs, (n - r) * bs),
    );
    b.copy(Region::tmp((n - r) * bs, r * bs), Region::recv(0, r * bs));
    b.finish()
}
