//! Alltoall: Bruck (small blocks), pairwise exchange (large; also alltoallv/alltoallw), and
//! between nodes through PXN forwarders ([`pxn`]) or one aggregator per node and rail
//! ([`rails`]; alltoallv/alltoallw after the block lengths were told inside the node,
//! [`counts`], through either per pair of nodes, [`pairs`]).

pub mod bruck;
pub mod choice;
pub mod counts;
pub mod pairs;
pub mod pairwise;
pub mod pxn;
pub mod rails;

use crate::coll::schedule::{Builder, Region};
use crate::coll::{Block, CollArgs};

/// Rank `a.rank`'s input blocks, one per destination `d` (`len(rank, d)` bytes at `send[d].off`
/// in Send), and the scratch bytes they took: in place they are copied aside into Tmp from 0
/// first (from `recv[d].off` in Recv), since received blocks land in Recv.
pub(crate) fn input_blocks(
    b: &mut Builder,
    a: &CollArgs,
    len: &dyn Fn(usize, usize) -> usize,
    send: &[Block],
    recv: &[Block],
) -> (Vec<Region>, usize) {
    let (r, n) = (a.rank, a.size);
    if !a.in_place {
        let v = (0..n)
            .map(|d| Region::send(send[d].off, len(r, d)))
            .collect();
        return (v, 0);
    }
    let mut k = 0;
    let mut v = Vec::with_capacity(n);
    for (d, blk) in recv.iter().enumerate().take(n) {
        let l = len(r, d);
        b.copy(Region::recv(blk.off, l), Region::tmp(k, l));
        v.push(Region::tmp(k, l));
        k += l;
    }
    (v, k)
}

/// Epoch 1 of the schedules that gather blocks inside a node before they cross the network
/// ([`pxn`], [`rails`], [`pairs`]): to each other member `t` of the node, rank `r`'s block for
/// `t` and its blocks for the remote ranks `t` carries (`carrier(s, d)`: the member that puts the
/// block from `s` for remote `d` on the network), packed ([`pxn::send_packed`]); from `t` the
/// same, into the receive buffer when `t` carries nothing for `r`, else into scratch from `alloc`.
/// The returned [`Gathered`] says where everything landed (valid after the builder's next wait).
#[allow(clippy::too_many_arguments)]
pub(crate) fn gather_in_node(
    b: &mut Builder,
    alloc: &mut impl FnMut(usize) -> usize,
    r: usize,
    members: &[usize],
    remote: &[usize],
    carrier: &dyn Fn(usize, usize) -> usize,
    src: &[Region],
    len: &dyn Fn(usize, usize) -> usize,
    dst: &dyn Fn(usize) -> Region,
) -> Gathered {
    let mut got = Vec::with_capacity(members.len());
    for &t in members {
        if t == r {
            continue;
        }
        let mine: Vec<Region> = std::iter::once(t)
            .chain(remote.iter().copied().filter(|&d| carrier(r, d) == t))
            .map(|d| src[d])
            .collect();
        pxn::send_packed(b, alloc, t, &mine);
        // What t sends me: its block for me, then its blocks for the remote ranks I carry.
        let theirs: Vec<usize> = remote
            .iter()
            .copied()
            .filter(|&d| carrier(t, d) == r)
            .collect();
        let total = len(t, r) + theirs.iter().map(|&d| len(t, d)).sum::<usize>();
        if theirs.is_empty() {
            b.recv_nz(t, dst(t));
            got.push((t, None, theirs));
        } else {
            let at = alloc(total);
            b.recv_nz(t, Region::tmp(at, total));
            got.push((t, Some(at), theirs));
        }
    }
    Gathered(got)
}

/// Where [`gather_in_node`] put each member's message: (member `t`, the scratch offset of its
/// packed message or `None` when it went straight to the receive buffer, the remote ranks whose
/// blocks from `t` follow `t`'s block for this rank in it).
pub(crate) struct Gathered(Vec<(usize, Option<usize>, Vec<usize>)>);

impl Gathered {
    /// After the wait: each packed message's first block (its sender's block for rank `r`) into
    /// the receive buffer.
    pub(crate) fn unpack_own(
        &self,
        b: &mut Builder,
        r: usize,
        len: &dyn Fn(usize, usize) -> usize,
        dst: &dyn Fn(usize) -> Region,
    ) {
        for (t, at, _) in &self.0 {
            if let Some(at) = at {
                b.copy(Region::tmp(*at, len(*t, r)), dst(*t));
            }
        }
    }

    /// Where the block from member `s` for remote `d` is now (`src[d]` for rank `r`'s own).
    pub(crate) fn held(
        &self,
        r: usize,
        src: &[Region],
        len: &dyn Fn(usize, usize) -> usize,
        s: usize,
        d: usize,
    ) -> Region {
        if s == r {
            return src[d];
        }
        let (_, at, theirs) = self.0.iter().find(|(t, _, _)| *t == s).expect("member");
        let mut k = at.expect("packed") + len(s, r);
        for &x in theirs {
            if x == d {
                return Region::tmp(k, len(s, d));
            }
            k += len(s, x);
        }
        unreachable!("block {s} -> {d} is not carried here")
    }
}
