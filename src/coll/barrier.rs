//! Barrier: dissemination (Hensgen, Finkel, Manber): ceil(log2 n) rounds of zero-byte
//! messages to rank + 2^k, from rank - 2^k.

use super::schedule::{Builder, Region};
use super::{CollArgs, Schedule};

pub fn dissemination(a: &CollArgs) -> Schedule {
    let (r, n) = (a.rank, a.size);
    let mut b = Builder::new();
    let mut k = 1;
    while k < n {
        b.send((r + k) % n, Region::tmp(0, 0));
        b.recv((r + n - k) % n, Region::tmp(0, 0));
        b.wait();
        k <<= 1;
    }
    b.finish()
}
