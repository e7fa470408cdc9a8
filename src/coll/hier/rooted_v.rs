//! Gatherv and scatterv through the node leaders: one network message of data between the
//! root and each other node (its packed blocks) instead of one per rank.
//!
//! Only the root knows every count; each other rank knows its own. Before the schedule, the
//! leader (lowest rank) of every node without the root learns its members' block lengths
//! ([`lens_schedule`]), so that it knows how to pack or unpack its node's message: for gatherv
//! from the members themselves (over shared memory; nothing crosses nodes), for scatterv from
//! the root (one small network message per node, ahead of the data), so that no member sends
//! anything before it receives its block. The schedules then:
//!
//! - gatherv: each member of a node without the root sends its block to the leader, which
//!   packs them member by member behind its own and sends the packing to the root in one
//!   message; the root receives it straight into Recv where the node's blocks lie back to
//!   back there in member order, else into scratch space and copies each block to its
//!   displacement. Ranks of the root's node send to the root directly (it leads its node).
//! - scatterv: the mirror. The root sends each other node its members' blocks packed member by
//!   member (straight from Send where they lie back to back there, else packed by copies
//!   first); the leader keeps its own block and sends each member its own.
//!
//! A block goes through the leader only while the node's packed message stays below `relay`
//! (the job's bulk threshold: below it a message between nodes goes eagerly, from it on a
//! rendezvous costs a round trip more): a block of `len` bytes of a node of `m` ranks goes
//! through the leader when `len * m < relay` ([`through_leader`]), else straight between its
//! rank and the root, as in the flat schedule. Each side of each message decides this from
//! what it knows (its own length, the node's size and `relay`; the leader and the root know
//! every length of the node), so both agree. A leader's own block that goes straight moves
//! before the node's packed message, in that order on both sides.
//!
//! Zero-length blocks move nothing (both ends know the length), and a node whose blocks are
//! all empty exchanges no message with the root. A node of one rank exchanges its block with
//! the root directly, as the flat schedule does.

use super::{Block, BufId, CollKind, Hier, Nodes, Region, Schedule};
use crate::coll::schedule::Builder;
use crate::mpi::error::MpiResult;
use crate::mpi_bail;

/// Bytes of one block length in the count exchange.
const LEN: usize = 8;

/// Whether a block of `len` bytes of a rank of a node of `m` ranks without the root goes
/// through the node's leader (module docs): while `m` such blocks stay below `relay`.
pub fn through_leader(len: usize, m: usize, relay: usize) -> bool {
    len.saturating_mul(m) < relay
}

/// The nodes whose leader must learn its members' lengths before a gatherv/scatterv with root
/// `root`: those of more than one rank, not the root's.
fn told_nodes(nodes: &Nodes, root: usize) -> impl Iterator<Item = &[usize]> {
    let rn = nodes.of[root];
    (0..nodes.count())
        .filter(move |&j| j != rn && nodes.ranks[j].len() > 1)
        .map(|j| nodes.ranks[j].as_slice())
}

/// Whether `rank` takes part in the count exchange of `kind` (gatherv or scatterv) with root
/// `root`: gatherv, the ranks of the nodes of [`told_nodes`] (each tells its leader);
/// scatterv, the leaders of those nodes and the root (which tells them).
pub fn tells_lens(kind: CollKind, nodes: &Nodes, rank: usize, root: usize) -> bool {
    let g = nodes.of[rank];
    let told = g != nodes.of[root] && nodes.ranks[g].len() > 1;
    match kind {
        CollKind::Scatterv if rank == root => told_nodes(nodes, root).next().is_some(),
        CollKind::Scatterv => told && nodes.ranks[g][0] == rank,
        _ => told,
    }
}

/// The count exchange of `rank` ([`tells_lens`]) before `kind` (gatherv or scatterv); empty
/// where the rank takes no part. A leader of a node of [`told_nodes`] receives member `i`'s
/// length (8 bytes, little-endian) at `Recv[8 i..]`, from:
/// - gatherv: member `i` itself (its length at `Send[0..8]`; the leader's own copied), over
///   shared memory: nothing crosses nodes, and the leader waits for what its members send
///   anyway;
/// - scatterv: the root, one message per node from [`root_lens`] at the root's `Send`: no
///   member sends anything before it receives its block, so the leader never waits for its
///   members (a message from each would hold the leader, and so its node's blocks, up until
///   every member has reached the call).
pub fn lens_schedule(kind: CollKind, nodes: &Nodes, rank: usize, root: usize) -> Schedule {
    let mut b = Builder::new();
    if !tells_lens(kind, nodes, rank, root) {
        return b.finish();
    }
    if kind == CollKind::Scatterv {
        if rank == root {
            let mut off = 0;
            for m in told_nodes(nodes, root) {
                b.send(m[0], Region::send(off, m.len() * LEN));
                off += m.len() * LEN;
            }
        } else {
            b.recv(root, Region::recv(0, lens_recv_bytes(nodes, rank)));
        }
        return b.finish();
    }
    let members = &nodes.ranks[nodes.of[rank]];
    if members[0] != rank {
        b.send(members[0], Region::send(0, LEN));
        return b.finish();
    }
    b.copy(Region::send(0, LEN), Region::recv(0, LEN));
    for (i, &r) in members.iter().enumerate().skip(1) {
        b.recv(r, Region::recv(i * LEN, LEN));
    }
    b.finish()
}

/// Bytes of the `Recv` buffer of [`lens_schedule`] at `rank` (read at the leaders only).
pub fn lens_recv_bytes(nodes: &Nodes, rank: usize) -> usize {
    nodes.ranks[nodes.of[rank]].len() * LEN
}

/// The `Send` buffer of [`lens_schedule`] at a rank other than scatterv's root: its length.
pub fn encode_len(len: usize) -> [u8; LEN] {
    (len as u64).to_le_bytes()
}

/// The `Send` buffer of [`lens_schedule`] at scatterv's root, whose block for rank `r` is
/// `len(r)` bytes: the lengths of the members of each node of [`told_nodes`], node after node.
pub fn root_lens(nodes: &Nodes, root: usize, len: impl Fn(usize) -> usize) -> Vec<u8> {
    told_nodes(nodes, root)
        .flatten()
        .flat_map(|&r| encode_len(len(r)))
        .collect()
}

/// The members' lengths a leader received by [`lens_schedule`], in node order.
pub fn decode_lens(recv: &[u8]) -> Vec<usize> {
    recv.chunks_exact(LEN)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")) as usize)
        .collect()
}

/// The blocks of `members` that go through their leader (`via(r)`), packed member by member:
/// the offset in the packing of each non-empty one, paired with the block (`blocks[r]`, its
/// place in the user's buffer), and the packing's length.
fn packing(
    members: &[usize],
    blocks: &[Block],
    via: impl Fn(usize) -> bool,
) -> (Vec<(usize, Block)>, usize) {
    let mut items = Vec::with_capacity(members.len());
    let mut k = 0;
    for &r in members {
        let b = blocks[r];
        if b.len > 0 && via(r) {
            items.push((k, b));
            k += b.len;
        }
    }
    (items, k)
}

/// The offset in the user's buffer where the packing lies as it is (every non-empty block
/// right behind the previous one, in member order), if it does.
fn in_order(items: &[(usize, Block)]) -> Option<usize> {
    let start = items.first()?.1.off;
    let ok = items.iter().all(|(p, b)| b.off == start + p);
    ok.then_some(start)
}

impl Hier<'_> {
    /// The lengths of this node's members' blocks at a leader of a node without the root
    /// (from the count exchange), checked against its own.
    fn member_lens(&self, kind: CollKind, m: usize) -> MpiResult<Vec<usize>> {
        let lens = self.node_lens;
        if lens.len() != m {
            mpi_bail!(
                MPI_ERR_INTERN,
                "{}: {} block lengths for a node of {} ranks",
                kind.name(),
                lens.len(),
                m
            );
        }
        if lens[0] != self.a.bytes {
            mpi_bail!(
                MPI_ERR_TRUNCATE,
                "{}: the root's count for rank {} is {} bytes, the rank's own {} bytes",
                kind.name(),
                self.a.rank,
                lens[0],
                self.a.bytes
            );
        }
        Ok(lens.to_vec())
    }

    /// Where this rank's block goes to or comes from: the root, or its node's leader.
    fn v_peer(&self) -> usize {
        let (a, nodes) = (self.a, self.nodes);
        let members = self.members();
        let direct = nodes.of[a.rank] == nodes.of[a.root]
            || members.len() == 1
            || !through_leader(a.bytes, members.len(), self.relay);
        match direct {
            true => a.root,
            false => members[0],
        }
    }

    /// Gatherv through the node leaders (module docs).
    pub(super) fn gatherv(&mut self) -> MpiResult<()> {
        let a = self.a;
        let members = self.members().to_vec();
        let (m, own) = (members.len(), a.bytes);
        if a.rank == a.root {
            return self.gatherv_root();
        }
        let to = self.v_peer();
        if to != a.rank && own > 0 {
            self.b.send(to, Region::send(0, own));
        }
        if a.rank != members[0] || m == 1 || self.nodes.of[a.rank] == self.nodes.of[a.root] {
            return Ok(());
        }
        // The leader of a node without the root (its own block, where it goes straight, is
        // on its way already).
        let lens = self.member_lens(CollKind::Gatherv, m)?;
        let relay = self.relay;
        let via = |i: usize| through_leader(lens[i], m, relay);
        let total: usize = (0..m).filter(|&i| via(i)).map(|i| lens[i]).sum();
        if total == 0 {
            return Ok(());
        }
        if via(0) && total == own {
            self.b.send(a.root, Region::send(0, own));
            return Ok(());
        }
        let t = self.alloc(total);
        let mut k = 0;
        if via(0) && own > 0 {
            self.b.copy(Region::send(0, own), Region::tmp(t, own));
            k = own;
        }
        for (i, &r) in members.iter().enumerate().skip(1) {
            if lens[i] > 0 && via(i) {
                self.b.recv(r, Region::tmp(t + k, lens[i]));
                k += lens[i];
            }
        }
        self.b.wait();
        self.b.send(a.root, Region::tmp(t, total));
        Ok(())
    }

    fn gatherv_root(&mut self) -> MpiResult<()> {
        let a = self.a;
        let nodes = self.nodes;
        let blocks = a.recv_blocks;
        let g = nodes.of[a.rank];
        let mut unpack = Vec::new();
        for (j, other) in nodes.ranks.iter().enumerate() {
            let m = other.len();
            let via = |r: usize| j != g && m > 1 && through_leader(blocks[r].len, m, self.relay);
            // The blocks that come straight (the leader's first, as it sends them).
            for &r in other {
                if r != a.rank && blocks[r].len > 0 && !via(r) {
                    self.b.recv(r, Region::recv(blocks[r].off, blocks[r].len));
                }
            }
            let (items, total) = packing(other, blocks, via);
            if total == 0 {
                continue;
            }
            let dst = match in_order(&items) {
                Some(off) => Region::recv(off, total),
                None => {
                    let t = self.alloc(total);
                    unpack.push(((BufId::Tmp, t), items));
                    Region::tmp(t, total)
                }
            };
            self.b.recv(other[0], dst);
        }
        let mine = blocks[a.rank];
        let l = mine.len.min(a.bytes);
        if !a.in_place && l > 0 {
            self.b.copy(Region::send(0, l), Region::recv(mine.off, l));
        }
        self.b.wait();
        for (t, items) in unpack {
            self.unpack(t, &items);
        }
        Ok(())
    }

    /// Scatterv through the node leaders (module docs).
    pub(super) fn scatterv(&mut self) -> MpiResult<()> {
        let a = self.a;
        let members = self.members().to_vec();
        let (m, own) = (members.len(), a.bytes);
        if a.rank == a.root {
            self.scatterv_root();
            return Ok(());
        }
        let from = self.v_peer();
        if from != a.rank && own > 0 {
            self.b.recv(from, Region::recv(0, own));
        }
        if a.rank != members[0] || m == 1 || self.nodes.of[a.rank] == self.nodes.of[a.root] {
            return Ok(());
        }
        // The leader of a node without the root (its own block, where it comes straight, is
        // received first).
        let lens = self.member_lens(CollKind::Scatterv, m)?;
        let relay = self.relay;
        let via = |i: usize| through_leader(lens[i], m, relay);
        let total: usize = (0..m).filter(|&i| via(i)).map(|i| lens[i]).sum();
        if total == 0 {
            return Ok(());
        }
        if via(0) && total == own {
            self.b.recv(a.root, Region::recv(0, own));
            return Ok(());
        }
        let t = self.alloc(total);
        self.b.recv(a.root, Region::tmp(t, total));
        self.b.wait();
        let mut k = 0;
        if via(0) && own > 0 {
            self.b.copy(Region::tmp(t, own), Region::recv(0, own));
            k = own;
        }
        for (i, &r) in members.iter().enumerate().skip(1) {
            if lens[i] > 0 && via(i) {
                self.b.send(r, Region::tmp(t + k, lens[i]));
                k += lens[i];
            }
        }
        Ok(())
    }

    fn scatterv_root(&mut self) {
        let a = self.a;
        let nodes = self.nodes;
        let blocks = a.send_blocks;
        let g = nodes.of[a.rank];
        for (j, other) in nodes.ranks.iter().enumerate() {
            let m = other.len();
            let via = |r: usize| j != g && m > 1 && through_leader(blocks[r].len, m, self.relay);
            // The blocks that go straight (the leader's first, as it receives them).
            for &r in other {
                if r != a.rank && blocks[r].len > 0 && !via(r) {
                    self.b.send(r, Region::send(blocks[r].off, blocks[r].len));
                }
            }
            let (items, total) = packing(other, blocks, via);
            if total == 0 {
                continue;
            }
            let src = match in_order(&items) {
                Some(off) => Region::send(off, total),
                None => {
                    let t = self.alloc(total);
                    self.pack(t, &items);
                    Region::tmp(t, total)
                }
            };
            self.b.send(other[0], src);
        }
        let mine = blocks[a.rank];
        let l = mine.len.min(a.bytes);
        if !a.in_place && l > 0 {
            self.b.copy(Region::send(mine.off, l), Region::recv(0, l));
        }
    }

    /// Copies blocks of Send into the packing at `Tmp[t..]` (the mirror of [`Self::unpack`]):
    /// one copy per run of items that are consecutive in both.
    fn pack(&mut self, t: usize, items: &[(usize, Block)]) {
        let mut i = 0;
        while i < items.len() {
            let (p, blk) = items[i];
            let mut len = blk.len;
            let mut e = i + 1;
            while e < items.len() && items[e].0 == p + len && items[e].1.off == blk.off + len {
                len += items[e].1.len;
                e += 1;
            }
            self.b
                .copy(Region::send(blk.off, len), Region::tmp(t + p, len));
            i = e;
        }
    }
}
