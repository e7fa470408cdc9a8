//! Scan and exscan: recursive doubling (MPICH) with operands in rank order.

use super::schedule::{Builder, Region};
use super::{CollArgs, Schedule};

fn build(a: &CollArgs, inclusive: bool) -> Schedule {
    let (r, n, len) = (a.rank, a.size, a.bytes);
    let mut b = Builder::new();
    if len == 0 {
        return b.finish();
    }
    let input = if a.in_place {
        Region::recv(0, len)
    } else {
        Region::send(0, len)
    };
    let out = Region::recv(0, len);
    // partial: the reduction over this rank's aligned group so far; incoming: the partner's.
    let (partial, incoming) = (Region::tmp(0, len), Region::tmp(len, len));
    b.tmp_at_least(2 * len);
    b.copy(input, partial);
    if inclusive {
        b.copy(input, out);
    }
    let mut have_out = inclusive;
    let mut mask = 1;
    while mask < n {
        let peer = r ^ mask;
        if peer < n {
            b.send(peer, partial);
            b.recv(peer, incoming);
            b.wait();
            if peer < r {
                b.reduce(incoming, partial);
                if have_out {
                    b.reduce(incoming, out);
                } else {
                    b.copy(incoming, out);
                    have_out = true;
                }
            } else {
                b.reduce_rev(incoming, partial);
            }
        }
        mask <<= 1;
    }
    b.finish()
}

pub fn scan_recursive_doubling(a: &CollArgs) -> Schedule {
    build(a, true)
}

/// Exscan: rank 0's Recv is left untouched.
pub fn exscan_recursive_doubling(a: &CollArgs) -> Schedule {
    build(a, false)
}
