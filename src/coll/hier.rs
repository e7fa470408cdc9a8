//! Hierarchical schedules for communicators whose ranks span nodes: the work inside each node
//! (over shared memory) around the exchange between nodes (over the network), so that only one
//! rank per node (its *leader*) talks to other nodes.
//!
//! | collective | inside the node | between the leaders | inside the node |
//! |---|---|---|---|
//! | allreduce | reduce to the leader | allreduce | bcast from the leader |
//! | bcast | | bcast (the root leads its node) | bcast from the leader |
//! | reduce | reduce to the leader (the root leads its node) | reduce to the root | |
//! | allgather | gatherv to the leader | allgatherv of whole nodes | bcast of the result |
//! | alltoall | every member's send buffer to the leader | one message per pair of nodes | each member's result from the leader |
//!
//! Each phase is a schedule of an existing algorithm (chosen by `select` for the phase's rank
//! count and size) built for the phase's ranks and embedded into the caller's schedule: its
//! peers mapped to communicator ranks, its three buffers to ranges of the caller's (phases
//! that keep partial results in scratch space get their own range of `Tmp`). Alltoall's
//! exchange between leaders packs blocks with copies (one message per pair of nodes instead of
//! one per pair of ranks). The phases run one after the other; every phase ends with a `Wait`,
//! and messages between one pair of ranks stay in the same order on both sides, so the result
//! follows the executor rules of the module docs of `coll`.
//!
//! A node's leader is its lowest rank, except that the root of bcast and reduce leads its own
//! node. Reductions must be commutative: members of a node need not be consecutive ranks, so
//! the partial results are not in rank order.

use super::schedule::{BufId, Builder, Region, Schedule, Step};
use super::{Block, CollArgs, CollKind};
use crate::mpi::error::MpiResult;
use crate::mpi_bail;

/// The nodes of a communicator: the node of each rank and the ranks of each node (ascending),
/// nodes numbered in the order of their lowest rank.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nodes {
    pub of: Vec<usize>,
    pub ranks: Vec<Vec<usize>>,
}

impl Nodes {
    /// From any label per rank (equal labels: one node).
    pub fn new<T: PartialEq>(label: &[T]) -> Nodes {
        let mut firsts: Vec<usize> = Vec::new();
        let mut n = Nodes {
            of: Vec::with_capacity(label.len()),
            ranks: Vec::new(),
        };
        for (r, x) in label.iter().enumerate() {
            let i = match firsts.iter().position(|&f| label[f] == *x) {
                Some(i) => i,
                None => {
                    firsts.push(r);
                    n.ranks.push(Vec::new());
                    firsts.len() - 1
                }
            };
            n.of.push(i);
            n.ranks[i].push(r);
        }
        n
    }

    pub fn count(&self) -> usize {
        self.ranks.len()
    }

    /// Whether a hierarchical schedule differs from a flat one: more than one node, and a node
    /// with more than one rank.
    pub fn worth_it(&self) -> bool {
        self.count() > 1 && self.ranks.iter().any(|m| m.len() > 1)
    }

    /// Position of `rank` among the ranks of its node.
    fn local(&self, rank: usize) -> usize {
        let m = &self.ranks[self.of[rank]];
        m.iter().position(|&r| r == rank).expect("rank on its node")
    }
}

/// The collectives with a hierarchical schedule.
pub fn supports(kind: CollKind) -> bool {
    matches!(
        kind,
        CollKind::Allreduce
            | CollKind::Bcast
            | CollKind::Reduce
            | CollKind::Allgather
            | CollKind::Alltoall
    )
}

/// The hierarchical schedule of `kind` for rank `a.rank` of a communicator whose ranks lie on
/// `nodes` (`a.size == nodes.of.len()`). Reductions need a commutative op.
pub fn build(kind: CollKind, a: &CollArgs, nodes: &Nodes) -> MpiResult<Schedule> {
    super::validate(kind, a)?;
    if nodes.of.len() != a.size {
        mpi_bail!(
            MPI_ERR_INTERN,
            "node map of {} ranks for a communicator of {}",
            nodes.of.len(),
            a.size
        );
    }
    if kind.is_reduction() && !a.commutative {
        mpi_bail!(
            MPI_ERR_OP,
            "{}: the hierarchical schedule needs a commutative op",
            kind.name()
        );
    }
    let mut h = Hier {
        b: Builder::new(),
        tmp: 0,
        a,
        nodes,
    };
    match kind {
        CollKind::Allreduce => h.allreduce()?,
        CollKind::Bcast => h.bcast()?,
        CollKind::Reduce => h.reduce()?,
        CollKind::Allgather => h.allgather()?,
        CollKind::Alltoall => h.alltoall(),
        _ => mpi_bail!(
            MPI_ERR_INTERN,
            "{} has no hierarchical schedule",
            kind.name()
        ),
    }
    let mut s = h.b.finish();
    s.tmp_len = s.tmp_len.max(h.tmp);
    Ok(s)
}

/// Where a phase's buffers lie in the caller's: (buffer, offset) of its Send and Recv; its Tmp
/// gets a range of its own.
#[derive(Clone, Copy)]
struct Place {
    send: (BufId, usize),
    recv: (BufId, usize),
}

const RECV: (BufId, usize) = (BufId::Recv, 0);
const SEND: (BufId, usize) = (BufId::Send, 0);

struct Hier<'a> {
    b: Builder,
    /// Bytes of `Tmp` handed out so far.
    tmp: usize,
    a: &'a CollArgs<'a>,
    nodes: &'a Nodes,
}

impl Hier<'_> {
    /// A fresh range of `Tmp`.
    fn alloc(&mut self, len: usize) -> usize {
        let off = self.tmp;
        self.tmp += len;
        self.b.tmp_at_least(self.tmp);
        off
    }

    /// Arguments of a phase over `size` ranks in which this rank is `rank`.
    fn args(&self, rank: usize, size: usize, root: usize, bytes: usize) -> CollArgs<'static> {
        CollArgs {
            rank,
            size,
            root,
            bytes,
            send_blocks: &[],
            recv_blocks: &[],
            elem_size: self.a.elem_size,
            in_place: false,
            commutative: true,
        }
    }

    /// Builds phase `kind` (its algorithm chosen for its own size) over `peers` (phase rank ->
    /// communicator rank) and appends it, its buffers placed by `place`.
    fn phase(
        &mut self,
        kind: CollKind,
        a: &CollArgs,
        peers: &[usize],
        place: Place,
    ) -> MpiResult<()> {
        let (_, sub) = super::build(kind, a)?;
        let base = self.alloc(sub.tmp_len);
        let map = |r: Region| {
            let (buf, off) = match r.buf {
                BufId::Send => place.send,
                BufId::Recv => place.recv,
                BufId::Tmp => (BufId::Tmp, base),
            };
            Region::new(buf, off + r.off, r.len)
        };
        self.b.wait();
        for s in &sub.steps {
            match *s {
                Step::Send { peer, src } => self.b.send(peers[peer], map(src)),
                Step::Recv { peer, dst } => self.b.recv(peers[peer], map(dst)),
                Step::Reduce { src, dst } => self.b.reduce(map(src), map(dst)),
                Step::ReduceRev { src, dst } => self.b.reduce_rev(map(src), map(dst)),
                Step::Copy { src, dst } => self.b.copy(map(src), map(dst)),
                Step::Wait => self.b.wait(),
            }
        }
        self.b.wait();
        Ok(())
    }

    fn members(&self) -> &[usize] {
        &self.nodes.ranks[self.nodes.of[self.a.rank]]
    }

    /// The leader of every node: its lowest rank, or `root` on the root's node.
    fn leaders(&self, root: Option<usize>) -> Vec<usize> {
        let rn = root.map(|r| self.nodes.of[r]);
        (0..self.nodes.count())
            .map(|g| match root {
                Some(r) if rn == Some(g) => r,
                _ => self.nodes.ranks[g][0],
            })
            .collect()
    }

    fn allreduce(&mut self) -> MpiResult<()> {
        let a = self.a;
        let (n, l) = (a.bytes, self.nodes.local(a.rank));
        let members = self.members().to_vec();
        let leaders = self.leaders(None);
        let g = self.nodes.of[a.rank];
        // Where this rank's operand is; at the leader, whether the node's sum is in Recv.
        let input = if a.in_place { RECV } else { SEND };
        let mut in_recv = a.in_place;
        if members.len() > 1 {
            let mut sa = self.args(l, members.len(), 0, n);
            let place = if l == 0 {
                sa.in_place = a.in_place;
                Place {
                    send: SEND,
                    recv: RECV,
                }
            } else {
                // A member's Recv is its operand when in place: the phase's result (scratch at
                // a non-root) goes to Tmp then.
                let recv = match a.in_place {
                    true => (BufId::Tmp, self.alloc(n)),
                    false => RECV,
                };
                Place { send: input, recv }
            };
            self.phase(CollKind::Reduce, &sa, &members, place)?;
            in_recv = true;
        }
        if l == 0 {
            if leaders.len() > 1 {
                let mut sa = self.args(g, leaders.len(), 0, n);
                sa.in_place = in_recv;
                let place = Place {
                    send: SEND,
                    recv: RECV,
                };
                self.phase(CollKind::Allreduce, &sa, &leaders, place)?;
            } else if !in_recv {
                self.b.copy(Region::send(0, n), Region::recv(0, n));
            }
        }
        if members.len() > 1 {
            let sa = self.args(l, members.len(), 0, n);
            let place = Place {
                send: SEND,
                recv: RECV,
            };
            self.phase(CollKind::Bcast, &sa, &members, place)?;
        }
        Ok(())
    }

    fn bcast(&mut self) -> MpiResult<()> {
        let a = self.a;
        let members = self.members().to_vec();
        let leaders = self.leaders(Some(a.root));
        let g = self.nodes.of[a.rank];
        let place = Place {
            send: SEND,
            recv: RECV,
        };
        if leaders[g] == a.rank && leaders.len() > 1 {
            let sa = self.args(g, leaders.len(), self.nodes.of[a.root], a.bytes);
            self.phase(CollKind::Bcast, &sa, &leaders, place)?;
        }
        if members.len() > 1 {
            let lead = self.nodes.local(leaders[g]);
            let sa = self.args(self.nodes.local(a.rank), members.len(), lead, a.bytes);
            self.phase(CollKind::Bcast, &sa, &members, place)?;
        }
        Ok(())
    }

    fn reduce(&mut self) -> MpiResult<()> {
        let a = self.a;
        let n = a.bytes;
        let members = self.members().to_vec();
        let leaders = self.leaders(Some(a.root));
        let g = self.nodes.of[a.rank];
        let is_root = a.rank == a.root;
        // Where this rank's operand (then, at a leader, its node's partial result) lies.
        let mut partial = SEND;
        let mut in_recv = is_root && a.in_place;
        if members.len() > 1 {
            let lead = self.nodes.local(leaders[g]);
            let mut sa = self.args(self.nodes.local(a.rank), members.len(), lead, n);
            sa.in_place = is_root && a.in_place;
            // The result lands in Recv at the root; elsewhere (a Recv that is not significant,
            // possibly empty) in scratch space.
            let recv = match is_root {
                true => RECV,
                false => (BufId::Tmp, self.alloc(n)),
            };
            self.phase(CollKind::Reduce, &sa, &members, Place { send: SEND, recv })?;
            partial = recv;
            in_recv = is_root;
        }
        if leaders[g] == a.rank && leaders.len() > 1 {
            let mut sa = self.args(g, leaders.len(), self.nodes.of[a.root], n);
            let place = if is_root {
                sa.in_place = in_recv;
                Place {
                    send: SEND,
                    recv: RECV,
                }
            } else {
                let recv = (BufId::Tmp, self.alloc(n));
                Place {
                    send: partial,
                    recv,
                }
            };
            self.phase(CollKind::Reduce, &sa, &leaders, place)?;
        } else if is_root && !in_recv {
            self.b.copy(Region::send(0, n), Region::recv(0, n));
        }
        Ok(())
    }

    fn allgather(&mut self) -> MpiResult<()> {
        let a = self.a;
        let (bs, size) = (a.bytes, a.size);
        let nodes = self.nodes;
        let members = self.members().to_vec();
        let leaders = self.leaders(None);
        let g = nodes.of[a.rank];
        let l = nodes.local(a.rank);
        // Blocks packed node by node: `pos[r]` is rank r's block index there, `start[j]` node
        // j's first. Where that order is rank order (nodes of consecutive ranks) the packing is
        // Recv itself.
        let mut pos = vec![0; size];
        let mut start = Vec::with_capacity(nodes.count());
        let mut k = 0;
        for m in &nodes.ranks {
            start.push(k);
            for &r in m {
                pos[r] = k;
                k += 1;
            }
        }
        let identity = pos.iter().enumerate().all(|(r, &p)| r == p);
        let input = match a.in_place {
            true => (BufId::Recv, a.rank * bs),
            false => SEND,
        };
        if l == 0 {
            let packed = match identity {
                true => RECV,
                false => (BufId::Tmp, self.alloc(size * bs)),
            };
            let at = |r: usize| Region::new(packed.0, packed.1 + pos[r] * bs, bs);
            if members.len() > 1 {
                let blocks: Vec<Block> = members
                    .iter()
                    .map(|&r| Block::new(pos[r] * bs, bs))
                    .collect();
                let mut sa = self.args(0, members.len(), 0, bs);
                sa.in_place = a.in_place && identity;
                let send = if sa.in_place { SEND } else { input };
                let place = Place { send, recv: packed };
                self.phase_blocks(CollKind::Gatherv, sa, &blocks, &members, place)?;
            } else {
                self.b.copy(Region::new(input.0, input.1, bs), at(a.rank));
            }
            if leaders.len() > 1 {
                let blocks: Vec<Block> = nodes
                    .ranks
                    .iter()
                    .zip(&start)
                    .map(|(m, &s)| Block::new(s * bs, m.len() * bs))
                    .collect();
                let mut sa = self.args(g, leaders.len(), 0, blocks[g].len);
                sa.in_place = true;
                let place = Place {
                    send: SEND,
                    recv: packed,
                };
                self.phase_blocks(CollKind::Allgatherv, sa, &blocks, &leaders, place)?;
            }
            if !identity {
                // Unpack runs of consecutive ranks that are consecutive in the packing too.
                let mut r = 0;
                while r < size {
                    let mut e = r + 1;
                    while e < size && pos[e] == pos[e - 1] + 1 {
                        e += 1;
                    }
                    let src = Region::new(packed.0, packed.1 + pos[r] * bs, (e - r) * bs);
                    self.b.copy(src, Region::recv(r * bs, (e - r) * bs));
                    r = e;
                }
            }
        } else {
            let sa = self.args(l, members.len(), 0, bs);
            let place = Place {
                send: input,
                recv: RECV,
            };
            self.phase_blocks(CollKind::Gatherv, sa, &[], &members, place)?;
        }
        if members.len() > 1 {
            let sa = self.args(l, members.len(), 0, size * bs);
            let place = Place {
                send: SEND,
                recv: RECV,
            };
            self.phase(CollKind::Bcast, &sa, &members, place)?;
        }
        Ok(())
    }

    /// [`Self::phase`] for a phase whose arguments borrow `blocks` as its receive blocks.
    fn phase_blocks<'b>(
        &mut self,
        kind: CollKind,
        mut sa: CollArgs<'b>,
        blocks: &'b [Block],
        peers: &[usize],
        place: Place,
    ) -> MpiResult<()> {
        sa.recv_blocks = blocks;
        self.phase(kind, &sa, peers, place)
    }

    /// Alltoall: every member sends its whole send buffer to the leader, leaders exchange one
    /// packed message per pair of nodes, and each member receives its whole result from its
    /// leader.
    fn alltoall(&mut self) {
        let a = self.a;
        let (bs, size) = (a.bytes, a.size);
        if bs == 0 {
            return;
        }
        let nodes = self.nodes;
        let members = self.members().to_vec();
        let (g, l, m) = (nodes.of[a.rank], nodes.local(a.rank), members.len());
        let input = match a.in_place {
            true => Region::recv(0, size * bs),
            false => Region::send(0, size * bs),
        };
        if l != 0 {
            self.b.send(members[0], input);
            self.b.wait();
            self.b.recv(members[0], Region::recv(0, size * bs));
            self.b.wait();
            return;
        }
        // `all`: every member's send buffer, member by member (the leader's own copied in when
        // in place, since its Recv is written below).
        let all = self.alloc(m * size * bs);
        let from = |i: usize, d: usize| Region::tmp(all + (i * size + d) * bs, bs);
        for (i, &r) in members.iter().enumerate().skip(1) {
            self.b.recv(r, Region::tmp(all + i * size * bs, size * bs));
        }
        self.b.copy(input, Region::tmp(all, size * bs));
        self.b.wait();
        // One message each way per other node: out[j] holds (my member i, node j's member k)
        // blocks in that order; inn[j] holds (node j's member k, my member i).
        let mut inn = vec![0; nodes.count()];
        for (j, other) in nodes.ranks.iter().enumerate() {
            if j == g {
                continue;
            }
            let len = m * other.len() * bs;
            let out = self.alloc(len);
            for i in 0..m {
                for (k, &d) in other.iter().enumerate() {
                    let dst = Region::tmp(out + (i * other.len() + k) * bs, bs);
                    self.b.copy(from(i, d), dst);
                }
            }
            inn[j] = self.alloc(len);
            self.b.send(other[0], Region::tmp(out, len));
            self.b.recv(other[0], Region::tmp(inn[j], len));
        }
        self.b.wait();
        // Each member's result in rank order: the leader's in its Recv, the others' in Tmp.
        let mut outs = Vec::with_capacity(m);
        for (i, &dst) in members.iter().enumerate() {
            let res = match i {
                0 => Region::recv(0, size * bs),
                _ => Region::tmp(self.alloc(size * bs), size * bs),
            };
            for s in 0..size {
                let j = nodes.of[s];
                let k = nodes.local(s);
                let src = if j == g {
                    from(k, dst)
                } else {
                    Region::tmp(inn[j] + (k * m + i) * bs, bs)
                };
                self.b.copy(src, res.sub(s * bs, bs));
            }
            outs.push(res);
        }
        for (i, &r) in members.iter().enumerate().skip(1) {
            self.b.send(r, outs[i]);
        }
    }
}

#[cfg(test)]
mod tests;
