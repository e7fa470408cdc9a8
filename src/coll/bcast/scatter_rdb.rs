//! Medium-message broadcast: binomial scatter of n chunks, then a recursive-doubling allgather
//! of aligned chunk groups in relative ranks (MPICH `bcast_scatter_recursive_doubling_allgather`).
//! Needs a power-of-two rank count; other counts use the ring allgather.

use crate::coll::schedule::Builder;
use crate::coll::{CollArgs, Schedule};

pub fn build(a: &CollArgs) -> Schedule {
    let (n, root) = (a.size, a.root);
    if !n.is_power_of_two() {
        return super::scatter_ring::build(a);
    }
    let vr = (a.rank + n - root) % n;
    let real = |v: usize| (v + root) % n;
    let mut b = Builder::new();
    if a.bytes == 0 || n == 1 {
        return b.finish();
    }
    let c = super::scatter(&mut b, a);
    let mut mask = 1;
    while mask < n {
        let peer = vr ^ mask;
        let (mine, theirs) = (vr & !(mask - 1), peer & !(mask - 1));
        b.send_nz(real(peer), c.range(mine, mine + mask));
        b.recv_nz(real(peer), c.range(theirs, theirs + mask));
        b.wait();
        mask <<= 1;
    }
    b.finish()
}
