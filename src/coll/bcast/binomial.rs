//! Binomial-tree broadcast over ranks relative to the root.

use crate::coll::schedule::{Builder, Region};
use crate::coll::{CollArgs, Schedule};

pub fn build(a: &CollArgs) -> Schedule {
    let (n, root) = (a.size, a.root);
    let vr = (a.rank + n - root) % n;
    let all = Region::recv(0, a.bytes);
    let mut b = Builder::new();
    if a.bytes == 0 {
        return b.finish();
    }
    let mut mask = 1;
    while mask < n {
        if vr & mask != 0 {
            b.recv((vr - mask + root) % n, all);
            b.wait();
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    while mask > 0 {
        if vr + mask < n {
            b.send((vr + mask + root) % n, all);
        }
        mask >>= 1;
    }
    b.finish()
}
