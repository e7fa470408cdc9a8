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
//! | gather | gather to the leader (the root leads its node) | one message per node to the root | |
//! | scatter | | one message per node from the root | scatter from the leader |
//! | allgatherv | gatherv to the leader | allgatherv of whole nodes | bcast of the result |
//! | reduce_scatter(_block) | reduce of the whole vector to the leader | reduce_scatter, one block per node | scatterv from the leader |
//! | gatherv (blocking) | the members' blocks to the leader (the root's node: to the root) | one message per node to the root | |
//! | scatterv (blocking) | | one message per node from the root | each member's block from the leader |
//!
//! Gatherv and scatterv ([`build_v`], `rooted_v`) have their counts at the root only: before
//! the schedule, the leader of each node without the root learns its members' lengths (from
//! the members for gatherv, from the root for scatterv: [`lens_schedule`], run by the
//! dispatcher as an internal collective), which a nonblocking call cannot wait for at its
//! start, so `MPI_Igatherv`/`MPI_Iscatterv` stay flat. Alltoallv and
//! alltoallw stay flat (pairwise: one message per pair of ranks, none crossing twice): a
//! leader does not know its members' counts for other nodes.
//!
//! Each phase is a schedule of an existing algorithm (chosen by `select` for the phase's rank
//! count and size) built for the phase's ranks and embedded into the caller's schedule: its
//! peers mapped to communicator ranks, its three buffers to ranges of the caller's (phases
//! that keep partial results in scratch space get their own range of `Tmp`). Alltoall's
//! exchange between leaders packs blocks with copies (one message per pair of nodes instead of
//! one per pair of ranks). The phases run one after the other; every phase ends with a `Wait`,
//! and messages between one pair of ranks stay in the same order on both sides, so the result
//! follows the executor rules of the module docs of `coll`. One exception: at the root of
//! gather and scatter, the phase inside its node runs beside its messages to or from the other
//! nodes' leaders (other peers, other ranges of its buffers), so that neither waits for the
//! other.
//!
//! A node's leader is its lowest rank, except that the root of bcast, reduce, gather(v) and
//! scatter(v) leads its own node. Reductions must be commutative: members of a node need not be
//! consecutive ranks, so the partial results are not in rank order.

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

    /// Whether node `j`'s ranks are consecutive.
    fn consecutive(&self, j: usize) -> bool {
        self.ranks[j].windows(2).all(|w| w[1] == w[0] + 1)
    }

    /// Whether listing the ranks node by node lists them in rank order (every node a run of
    /// consecutive ranks, nodes in rank order).
    fn rank_ordered(&self) -> bool {
        self.ranks.concat().iter().enumerate().all(|(i, &r)| i == r)
    }

    /// Blocks of `lens[r]` bytes per rank packed node by node (member by member inside a
    /// node): each rank's offset in the packing, and each node's block of it.
    fn packing(&self, lens: &[usize]) -> (Vec<usize>, Vec<Block>) {
        let mut off = vec![0; lens.len()];
        let mut nodes = Vec::with_capacity(self.count());
        let mut k = 0;
        for m in &self.ranks {
            let start = k;
            for &r in m {
                off[r] = k;
                k += lens[r];
            }
            nodes.push(Block::new(start, k - start));
        }
        (off, nodes)
    }

    /// Position of `rank` among the ranks of its node.
    fn local(&self, rank: usize) -> usize {
        let m = &self.ranks[self.of[rank]];
        m.iter().position(|&r| r == rank).expect("rank on its node")
    }
}

/// The collectives with a hierarchical schedule: the path takes them on every communicator
/// with [`Nodes::worth_it`] (else the flat schedule, which is then the same traffic or less).
pub const SUPPORTED: &[CollKind] = &[
    CollKind::Allreduce,
    CollKind::Bcast,
    CollKind::Reduce,
    CollKind::Allgather,
    CollKind::Alltoall,
    CollKind::Gather,
    CollKind::Scatter,
    CollKind::Allgatherv,
    CollKind::ReduceScatter,
    CollKind::ReduceScatterBlock,
];

/// The collectives with a hierarchical schedule when blocking only ([`build_v`]): their
/// schedule needs the count exchange inside the node first, which a nonblocking call cannot
/// wait for at its start.
pub const SUPPORTED_BLOCKING: &[CollKind] = &[CollKind::Gatherv, CollKind::Scatterv];

/// Whether `kind` has a hierarchical schedule ([`SUPPORTED`]; with `blocking`, also
/// [`SUPPORTED_BLOCKING`]).
pub fn supports(kind: CollKind, blocking: bool) -> bool {
    SUPPORTED.contains(&kind) || (blocking && SUPPORTED_BLOCKING.contains(&kind))
}

/// The hierarchical schedule of gatherv or scatterv ([`SUPPORTED_BLOCKING`], module docs of
/// `rooted_v`) for rank `a.rank`: `node_lens` are the block lengths of the members of its node
/// in node order where it leads a node without the root ([`tells_lens`]; [`lens_schedule`]
/// tells them), and are not read elsewhere. `relay`: the job's bulk threshold, below which a
/// node's packed message must stay ([`through_leader`]; the same on every rank).
pub fn build_v(
    kind: CollKind,
    a: &CollArgs,
    nodes: &Nodes,
    node_lens: &[usize],
    relay: usize,
) -> MpiResult<Schedule> {
    if !SUPPORTED_BLOCKING.contains(&kind) {
        mpi_bail!(
            MPI_ERR_INTERN,
            "{} has no hierarchical schedule with counts",
            kind.name()
        );
    }
    build_with(kind, a, nodes, node_lens, relay)
}

/// The hierarchical schedule of `kind` for rank `a.rank` of a communicator whose ranks lie on
/// `nodes` (`a.size == nodes.of.len()`). Reductions need a commutative op.
/// Gatherv and scatterv take [`build_v`].
pub fn build(kind: CollKind, a: &CollArgs, nodes: &Nodes) -> MpiResult<Schedule> {
    if SUPPORTED_BLOCKING.contains(&kind) {
        mpi_bail!(
            MPI_ERR_INTERN,
            "{}: the hierarchical schedule needs the node's counts",
            kind.name()
        );
    }
    build_with(kind, a, nodes, &[], usize::MAX)
}

fn build_with(
    kind: CollKind,
    a: &CollArgs,
    nodes: &Nodes,
    node_lens: &[usize],
    relay: usize,
) -> MpiResult<Schedule> {
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
        node_lens,
        relay,
    };
    match kind {
        CollKind::Allreduce => h.allreduce()?,
        CollKind::Bcast => h.bcast()?,
        CollKind::Reduce => h.reduce()?,
        CollKind::Allgather => h.allgather()?,
        CollKind::Alltoall => h.alltoall(),
        CollKind::Gather => h.gather()?,
        CollKind::Scatter => h.scatter()?,
        CollKind::Allgatherv => h.allgatherv(a.recv_blocks)?,
        CollKind::ReduceScatter => {
            let lens: Vec<usize> = a.recv_blocks.iter().map(|b| b.len).collect();
            h.reduce_scatter(&lens)?
        }
        CollKind::ReduceScatterBlock => h.reduce_scatter(&vec![a.bytes; a.size])?,
        CollKind::Gatherv => h.gatherv()?,
        CollKind::Scatterv => h.scatterv()?,
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
    /// Gatherv and scatterv at the leader of a node without the root: its members' block
    /// lengths in node order (`rooted_v`); empty elsewhere.
    node_lens: &'a [usize],
    /// Gatherv and scatterv: [`through_leader`]'s `relay`.
    relay: usize,
}

impl Hier<'_> {
    /// A fresh range of `Tmp`.
    fn alloc(&mut self, len: usize) -> usize {
        let off = self.tmp;
        self.tmp += len;
        self.b.tmp_at_least(self.tmp);
        off
    }

    /// Arguments of a phase inside a node over `size` ranks in which this rank is `rank`.
    fn args(&self, rank: usize, size: usize, root: usize, bytes: usize) -> CollArgs<'static> {
        CollArgs {
            nodes: 1,
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

    /// Arguments of a phase between the node leaders (one rank per node), this rank leader
    /// `g` of them.
    fn leader_args(&self, g: usize, root: usize, bytes: usize) -> CollArgs<'static> {
        let n = self.nodes.count();
        CollArgs {
            nodes: n,
            ..self.args(g, n, root, bytes)
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
        self.embed(kind, a, peers, place, true)
    }

    /// [`Self::phase`] without the `Wait` before it: its steps run beside the messages still
    /// outstanding, which must touch none of its regions (they go to other peers, and read or
    /// write other ranges).
    fn phase_beside(
        &mut self,
        kind: CollKind,
        a: &CollArgs,
        peers: &[usize],
        place: Place,
    ) -> MpiResult<()> {
        self.embed(kind, a, peers, place, false)
    }

    fn embed(
        &mut self,
        kind: CollKind,
        a: &CollArgs,
        peers: &[usize],
        place: Place,
        wait_first: bool,
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
        if wait_first {
            self.b.wait();
        }
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
                let mut sa = self.leader_args(g, 0, n);
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
            let sa = self.leader_args(g, self.nodes.of[a.root], a.bytes);
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
            let mut sa = self.leader_args(g, self.nodes.of[a.root], n);
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
        let bs = self.a.bytes;
        let blocks: Vec<Block> = (0..self.a.size).map(|r| Block::new(r * bs, bs)).collect();
        self.allgatherv(&blocks)
    }

    /// Allgather(v) with rank r's block at `blocks[r]` of Recv: the node's blocks gathered at
    /// its leader into a packing `P` (node by node), the leaders' allgatherv of whole nodes
    /// there, then a bcast inside the node. Where Recv holds the blocks back to back in rank
    /// order, the leader unpacks `P` into Recv (or `P` is Recv, when nodes are runs of
    /// consecutive ranks) and the bcast sends that range of Recv; otherwise (gaps, any order)
    /// the bcast sends `P` and every rank unpacks it, so bytes between blocks are never
    /// written.
    fn allgatherv(&mut self, blocks: &[Block]) -> MpiResult<()> {
        let a = self.a;
        let nodes = self.nodes;
        let lens: Vec<usize> = blocks.iter().map(|b| b.len).collect();
        let total: usize = lens.iter().sum();
        if total == 0 {
            return Ok(());
        }
        let members = self.members().to_vec();
        let leaders = self.leaders(None);
        let g = nodes.of[a.rank];
        let l = nodes.local(a.rank);
        let own = lens[a.rank];
        let (poff, nblk) = nodes.packing(&lens);
        let base = blocks[0].off;
        let contiguous = blocks.iter().scan(base, |e, b| {
            let ok = b.off == *e;
            *e += b.len;
            Some(ok)
        });
        let contiguous = contiguous.collect::<Vec<_>>().iter().all(|&ok| ok);
        let identity = contiguous && nodes.rank_ordered();
        let items: Vec<(usize, Block)> = poff.iter().copied().zip(blocks.iter().copied()).collect();
        let input = match a.in_place {
            true => (BufId::Recv, blocks[a.rank].off),
            false => SEND,
        };
        let packed = match (identity, l == 0 || !contiguous) {
            (true, _) => (BufId::Recv, base),
            (false, true) => (BufId::Tmp, self.alloc(total)),
            (false, false) => RECV,
        };
        if l == 0 {
            if members.len() > 1 {
                let pb: Vec<Block> = members
                    .iter()
                    .map(|&r| Block::new(poff[r], lens[r]))
                    .collect();
                let mut sa = self.args(0, members.len(), 0, own);
                sa.in_place = a.in_place && identity;
                let send = if sa.in_place { SEND } else { input };
                let place = Place { send, recv: packed };
                self.phase_blocks(CollKind::Gatherv, sa, &pb, &members, place)?;
            } else {
                let dst = Region::new(packed.0, packed.1 + poff[a.rank], own);
                self.b.copy(Region::new(input.0, input.1, own), dst);
            }
            if leaders.len() > 1 {
                let mut sa = self.leader_args(g, 0, nblk[g].len);
                sa.in_place = true;
                let place = Place {
                    send: SEND,
                    recv: packed,
                };
                self.phase_blocks(CollKind::Allgatherv, sa, &nblk, &leaders, place)?;
            }
            if contiguous && !identity {
                self.unpack(packed, &items);
            }
        } else {
            let sa = self.args(l, members.len(), 0, own);
            let place = Place {
                send: input,
                recv: RECV,
            };
            self.phase_blocks(CollKind::Gatherv, sa, &[], &members, place)?;
        }
        if members.len() > 1 {
            let sa = self.args(l, members.len(), 0, total);
            let recv = match contiguous {
                true => (BufId::Recv, base),
                false => packed,
            };
            let place = Place { send: SEND, recv };
            self.phase(CollKind::Bcast, &sa, &members, place)?;
        }
        if !contiguous {
            self.unpack(packed, &items);
        }
        Ok(())
    }

    /// Copies blocks out of the packing at `packed`: each item is (offset in the packing,
    /// block of Recv); one copy per run of items that are consecutive in both.
    fn unpack(&mut self, packed: (BufId, usize), items: &[(usize, Block)]) {
        let mut i = 0;
        while i < items.len() {
            let (p, blk) = items[i];
            let mut len = blk.len;
            let mut e = i + 1;
            while e < items.len() && items[e].0 == p + len && items[e].1.off == blk.off + len {
                len += items[e].1.len;
                e += 1;
            }
            let src = Region::new(packed.0, packed.1 + p, len);
            self.b.copy(src, Region::recv(blk.off, len));
            i = e;
        }
    }

    /// The items of [`Self::unpack`] for node `j`'s `bs`-byte blocks packed member by member
    /// (rank r's block at `r * bs` of Recv).
    fn node_items(&self, j: usize, bs: usize) -> Vec<(usize, Block)> {
        let m = &self.nodes.ranks[j];
        m.iter()
            .enumerate()
            .map(|(k, &r)| (k * bs, Block::new(r * bs, bs)))
            .collect()
    }

    /// Gather: each node's blocks gathered at its leader (the root leads its own node), and
    /// one message per other node from its leader to the root, received straight into Recv
    /// where the node's ranks are consecutive, else unpacked from scratch space.
    fn gather(&mut self) -> MpiResult<()> {
        let a = self.a;
        let bs = a.bytes;
        if bs == 0 {
            return Ok(());
        }
        let nodes = self.nodes;
        let members = self.members().to_vec();
        let leaders = self.leaders(Some(a.root));
        let g = nodes.of[a.rank];
        let (l, m) = (nodes.local(a.rank), members.len());
        let lead = leaders[g];
        let is_root = a.rank == a.root;
        // Where this node's blocks gather, member by member, at its leader.
        let packed = match (is_root, lead == a.rank) {
            (true, _) if nodes.consecutive(g) => (BufId::Recv, members[0] * bs),
            (_, true) if m > 1 => (BufId::Tmp, self.alloc(m * bs)),
            (_, true) => SEND,
            _ => RECV,
        };
        // The root posts its receives from the other nodes' leaders first: they land in other
        // ranges than its node's gather, which runs beside them.
        let mut scattered = Vec::new();
        if is_root {
            for (j, other) in nodes.ranks.iter().enumerate() {
                if j == g {
                    continue;
                }
                let len = other.len() * bs;
                let dst = match nodes.consecutive(j) {
                    true => (BufId::Recv, other[0] * bs),
                    false => {
                        let t = (BufId::Tmp, self.alloc(len));
                        scattered.push((j, t));
                        t
                    }
                };
                self.b.recv(leaders[j], Region::new(dst.0, dst.1, len));
            }
        }
        if m > 1 {
            let mut sa = self.args(l, m, nodes.local(lead), bs);
            sa.in_place = is_root && a.in_place && packed.0 == BufId::Recv;
            let send = match is_root && a.in_place && !sa.in_place {
                true => (BufId::Recv, a.root * bs),
                false => SEND,
            };
            let place = Place { send, recv: packed };
            self.phase_beside(CollKind::Gather, &sa, &members, place)?;
        } else if is_root && !a.in_place {
            self.b
                .copy(Region::send(0, bs), Region::recv(a.root * bs, bs));
        }
        if is_root {
            self.b.wait();
            if packed.0 == BufId::Tmp {
                scattered.push((g, packed));
            }
            for (j, t) in scattered {
                let items = self.node_items(j, bs);
                self.unpack(t, &items);
            }
        } else if lead == a.rank && leaders.len() > 1 {
            self.b.send(a.root, Region::new(packed.0, packed.1, m * bs));
        }
        Ok(())
    }

    /// Scatter: the root sends each other node's blocks in one message to its leader
    /// (straight from Send where the node's ranks are consecutive, else packed first), then
    /// every node scatters from its leader (the root leads its own node).
    fn scatter(&mut self) -> MpiResult<()> {
        let a = self.a;
        let bs = a.bytes;
        if bs == 0 {
            return Ok(());
        }
        let nodes = self.nodes;
        let members = self.members().to_vec();
        let leaders = self.leaders(Some(a.root));
        let g = nodes.of[a.rank];
        let (l, m) = (nodes.local(a.rank), members.len());
        let lead = leaders[g];
        // The node's blocks member by member at `packed` (leaders only).
        let mut packed = RECV;
        if a.rank == a.root {
            for (j, other) in nodes.ranks.iter().enumerate() {
                if j == g && m == 1 {
                    continue;
                }
                let at = match nodes.consecutive(j) {
                    true => (BufId::Send, other[0] * bs),
                    false => {
                        let t = (BufId::Tmp, self.alloc(other.len() * bs));
                        for (k, &r) in other.iter().enumerate() {
                            let dst = Region::new(t.0, t.1 + k * bs, bs);
                            self.b.copy(Region::send(r * bs, bs), dst);
                        }
                        t
                    }
                };
                match j == g {
                    true => packed = at,
                    false => {
                        let len = other.len() * bs;
                        self.b.send(leaders[j], Region::new(at.0, at.1, len));
                    }
                }
            }
            if m == 1 && !a.in_place {
                self.b
                    .copy(Region::send(a.root * bs, bs), Region::recv(0, bs));
            }
        } else if lead == a.rank {
            packed = match m {
                1 => RECV,
                _ => (BufId::Tmp, self.alloc(m * bs)),
            };
            self.b.recv(a.root, Region::new(packed.0, packed.1, m * bs));
        }
        if m > 1 {
            let mut sa = self.args(l, m, nodes.local(lead), bs);
            sa.in_place = a.rank == a.root && a.in_place;
            let place = Place {
                send: packed,
                recv: RECV,
            };
            // At the root, beside its sends to the other nodes (they only read Send and the
            // packings); a leader's scatter needs its node's blocks first.
            match a.rank == a.root {
                true => self.phase_beside(CollKind::Scatter, &sa, &members, place)?,
                false => self.phase(CollKind::Scatter, &sa, &members, place)?,
            }
        }
        Ok(())
    }

    /// Reduce_scatter(_block) with `lens[r]` result bytes for rank r: the whole vector reduced
    /// to each node's leader, the leaders' reduce_scatter of it with one block per node (the
    /// node's members' blocks, packed node by node: the vector is reordered first unless
    /// nodes are runs of consecutive ranks in rank order), then a scatterv inside the node.
    fn reduce_scatter(&mut self, lens: &[usize]) -> MpiResult<()> {
        let a = self.a;
        let total: usize = lens.iter().sum();
        if total == 0 {
            return Ok(());
        }
        let nodes = self.nodes;
        let members = self.members().to_vec();
        let leaders = self.leaders(None);
        let g = nodes.of[a.rank];
        let (l, m) = (nodes.local(a.rank), members.len());
        let own = lens[a.rank];
        let input = match a.in_place {
            true => RECV,
            false => SEND,
        };
        let mut sum = input;
        if m > 1 {
            let sa = self.args(l, m, 0, total);
            let recv = (BufId::Tmp, self.alloc(total));
            self.phase(CollKind::Reduce, &sa, &members, Place { send: input, recv })?;
            sum = recv;
        }
        let (poff, nblk) = nodes.packing(lens);
        let mut mine = RECV;
        if l == 0 {
            let ordered = match nodes.rank_ordered() {
                true => sum,
                false => {
                    let t = (BufId::Tmp, self.alloc(total));
                    let mut at = 0;
                    for (r, &len) in lens.iter().enumerate() {
                        let src = Region::new(sum.0, sum.1 + at, len);
                        self.b.copy(src, Region::new(t.0, t.1 + poff[r], len));
                        at += len;
                    }
                    t
                }
            };
            mine = (ordered.0, ordered.1 + nblk[g].off);
            if leaders.len() > 1 {
                let nb: Vec<Block> = nblk.iter().map(|b| Block::new(0, b.len)).collect();
                let sa = self.leader_args(g, 0, 0);
                let out = (BufId::Tmp, self.alloc(nblk[g].len));
                let place = Place {
                    send: ordered,
                    recv: out,
                };
                self.phase_blocks(CollKind::ReduceScatter, sa, &nb, &leaders, place)?;
                mine = out;
            }
            if m == 1 {
                self.b
                    .copy(Region::new(mine.0, mine.1, own), Region::recv(0, own));
            }
        }
        if m > 1 {
            let sb: Vec<Block> = members
                .iter()
                .map(|&r| Block::new(poff[r] - nblk[g].off, lens[r]))
                .collect();
            let mut sa = self.args(l, m, 0, own);
            if l == 0 {
                sa.send_blocks = &sb;
            }
            let place = Place {
                send: mine,
                recv: RECV,
            };
            self.phase(CollKind::Scatterv, &sa, &members, place)?;
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

mod rooted_v;
pub use rooted_v::{
    decode_lens, encode_len, lens_recv_bytes, lens_schedule, root_lens, tells_lens, through_leader,
};

#[cfg(test)]
mod tests;
