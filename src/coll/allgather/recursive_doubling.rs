//! Recursive-doubling allgather: log2 n exchanges of doubling aligned groups of blocks, in
//! place in Recv. Needs a power-of-two rank count; other counts use Bruck.

use crate::coll::schedule::{Builder, Region};
use crate::coll::{CollArgs, Schedule};

pub fn build(a: &CollArgs) -> Schedule {
    let (r, n, bs) = (a.rank, a.size, a.bytes);
    if !n.is_power_of_two() {
        return super::bruck::build(a);
    }
    let mut b = Builder::new();
    if bs == 0 {
        return b.finish();
    }
    if !a.in_place {
        b.copy(Region::send(0, bs), Region::recv(r * bs, bs));
    }
    let mut mask = 1;
    while mask < n {
        let peer = r ^ mask;
        let mine = r & !(mask - 1);
        let theirs = peer & !(mask - 1);
        b.send(peer, Region::recv(mine * bs, mask * bs));
        b.recv(peer, Region::recv(theirs * bs, mask * bs));
        b.wait();
        mask <<= 1;
    }
    b.finish()
}
