//! Large-message broadcast: binomial scatter of n chunks, then a ring allgather
//! (MPICH `bcast_scatter_ring_allgather`).

use crate::coll::schedule::Builder;
use crate::coll::{CollArgs, Schedule};

pub fn build(a: &CollArgs) -> Schedule {
    let (n, root) = (a.size, a.root);
    let vr = (a.rank + n - root) % n;
    let real = |v: usize| (v + root) % n;
    let mut b = Builder::new();
    if a.bytes == 0 || n == 1 {
        return b.finish();
    }
    let c = super::scatter(&mut b, a);
    let (left, right) = (real((vr + n - 1) % n), real((vr + 1) % n));
    for s in 0..n - 1 {
        let sc = (vr + n - s) % n;
        let rc = (vr + 2 * n - s - 1) % n;
        b.send_nz(right, c.range(sc, sc + 1));
        b.recv_nz(left, c.range(rc, rc + 1));
        b.wait();
    }
    b.finish()
}
