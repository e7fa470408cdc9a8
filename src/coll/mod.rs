//! Collective algorithms as pure schedules (docs/CONTRACTS.md section 3).
//!
//! A builder turns (collective, rank, size, byte layout, root, element size, in-place,
//! commutativity) into a [`Schedule`] of Send/Recv/Reduce/ReduceRev/Copy/Wait steps over three
//! byte buffers: `Send` (the user's send buffer), `Recv` (the receive buffer) and `Tmp`
//! (scratch of `tmp_len` bytes). All layouts are in a packed contiguous byte space; the caller
//! packs and unpacks derived datatypes. Nothing here touches a transport, CUDA or an MPI handle.
//!
//! # Algorithms (registry: [`ALGORITHMS`]; choice: `select.rs` + `tuning.txt`)
//! barrier: dissemination. bcast: binomial, scatter_recursive_doubling_allgather,
//! scatter_ring_allgather. reduce: binomial, rabenseifner. allreduce: recursive_doubling,
//! rabenseifner, ring (commutative only). gather: binomial; gatherv: linear. scatter: binomial;
//! scatterv: linear. allgather: recursive_doubling (power-of-two sizes; else Bruck), bruck,
//! ring; allgatherv: ring. alltoall: bruck, pairwise (between nodes with PXN: `alltoall::pxn`,
//! chosen by the dispatcher, not the table); alltoallv, alltoallw: pairwise.
//! reduce_scatter(_block): recursive_halving (commutative only), recursive_halving_ordered,
//! pairwise. scan, exscan:
//! recursive_doubling. Every algorithm marked `ordered` combines operands in rank order
//! (a0 op a1 op ... op a(n-1)) and so serves non-commutative ops.
//!
//! # What an executor must guarantee
//! - Steps are started in order. Send/Recv steps between two `Wait`s may run concurrently
//!   with each other; a `Wait` completes every Send and Recv issued before it before any later
//!   step starts. Reduce/ReduceRev/Copy run when reached (they never depend on an
//!   uncompleted Send/Recv: builders put a `Wait` in between, and the simulator checks it).
//! - Messages between one pair of ranks are matched in FIFO order (one context and tag per
//!   collective call); a Recv's length equals the matching Send's length.
//! - The end of the step list completes everything (builders end with a `Wait` when any
//!   communication is outstanding).
//! - `Reduce { src, dst }`: `dst = src op dst` (src is the left operand); `ReduceRev`:
//!   `dst = dst op src`. Region lengths are multiples of `elem_size`; src and dst never overlap.
//!   `Copy` regions never overlap.
//! - The Send buffer is never written. With `in_place` it is not read at all (it may be null).
//!
//! # Buffer layout per collective (`CollArgs` fields; all sizes in bytes)
//! | collective | layout |
//! |---|---|
//! | barrier | nothing |
//! | bcast | `bytes`; the one buffer is `Recv` on every rank (root included) |
//! | reduce, allreduce, scan, exscan | `bytes` (multiple of `elem_size`): input `Send[0..bytes]` (in place: `Recv`), result `Recv[0..bytes]` (reduce: at root only) |
//! | gather | `bytes` per rank: `Send[0..bytes]`; root `Recv[i*bytes..]`; in place: root's block already at `Recv[root*bytes]` |
//! | scatter | `bytes` per rank: root `Send[i*bytes..]`; `Recv[0..bytes]`; in place: root receives nothing |
//! | gatherv | `bytes` = this rank's contribution `Send[0..bytes]`; root: `recv_blocks[i]` in `Recv`; in place: root's block already in place |
//! | scatterv | `bytes` = this rank's share `Recv[0..bytes]`; root: `send_blocks[i]` in `Send`; in place: root receives nothing |
//! | allgather | `bytes` per rank: `Send[0..bytes]`, `Recv[i*bytes..]`; in place: own block already at `Recv[rank*bytes]` |
//! | allgatherv | `recv_blocks[i]` in `Recv` (every rank); `Send[0..recv_blocks[rank].len]`; in place: own block already in place |
//! | alltoall | `bytes` per pair: `Send[i*bytes..]` goes to rank i, `Recv[i*bytes..]` comes from rank i; in place: data in `Recv` |
//! | alltoallv, alltoallw | `send_blocks[i]` in `Send` to rank i, `recv_blocks[i]` in `Recv` from rank i; in place: `recv_blocks` for both |
//! | reduce_scatter | `recv_blocks[i].len` = result bytes of rank i (`off` ignored: the input vector `Send[0..sum]` is the blocks in rank order); result `Recv[0..len(rank)]`; in place: input in `Recv` |
//! | reduce_scatter_block | `bytes` per rank: input `Send[0..size*bytes]` (in place: `Recv`), result `Recv[0..bytes]` |

pub mod schedule;
pub mod select;
pub mod sim;

pub mod allgather;
pub mod allreduce;
pub mod alltoall;
pub mod barrier;
pub mod bcast;
pub mod gather;
pub mod hier;
pub mod pieces;
pub mod reduce;
pub mod reduce_scatter;
pub mod scan;
pub mod scatter;

pub use schedule::{BufId, Region, Schedule, Step};

use crate::mpi::error::MpiResult;
use crate::mpi_bail;

/// The collectives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CollKind {
    Barrier,
    Bcast,
    Reduce,
    Allreduce,
    Gather,
    Gatherv,
    Scatter,
    Scatterv,
    Allgather,
    Allgatherv,
    Alltoall,
    Alltoallv,
    Alltoallw,
    ReduceScatter,
    ReduceScatterBlock,
    Scan,
    Exscan,
}

impl CollKind {
    pub const ALL: [CollKind; 17] = [
        CollKind::Barrier,
        CollKind::Bcast,
        CollKind::Reduce,
        CollKind::Allreduce,
        CollKind::Gather,
        CollKind::Gatherv,
        CollKind::Scatter,
        CollKind::Scatterv,
        CollKind::Allgather,
        CollKind::Allgatherv,
        CollKind::Alltoall,
        CollKind::Alltoallv,
        CollKind::Alltoallw,
        CollKind::ReduceScatter,
        CollKind::ReduceScatterBlock,
        CollKind::Scan,
        CollKind::Exscan,
    ];

    /// The name used in the tuning table and in `GPUMPI_<NAME>_ALGORITHM` (upper-cased).
    pub fn name(self) -> &'static str {
        match self {
            CollKind::Barrier => "barrier",
            CollKind::Bcast => "bcast",
            CollKind::Reduce => "reduce",
            CollKind::Allreduce => "allreduce",
            CollKind::Gather => "gather",
            CollKind::Gatherv => "gatherv",
            CollKind::Scatter => "scatter",
            CollKind::Scatterv => "scatterv",
            CollKind::Allgather => "allgather",
            CollKind::Allgatherv => "allgatherv",
            CollKind::Alltoall => "alltoall",
            CollKind::Alltoallv => "alltoallv",
            CollKind::Alltoallw => "alltoallw",
            CollKind::ReduceScatter => "reduce_scatter",
            CollKind::ReduceScatterBlock => "reduce_scatter_block",
            CollKind::Scan => "scan",
            CollKind::Exscan => "exscan",
        }
    }

    pub fn from_name(s: &str) -> Option<CollKind> {
        CollKind::ALL.iter().copied().find(|k| k.name() == s)
    }

    /// Whether the collective applies a reduction operation.
    pub fn is_reduction(self) -> bool {
        matches!(
            self,
            CollKind::Reduce
                | CollKind::Allreduce
                | CollKind::ReduceScatter
                | CollKind::ReduceScatterBlock
                | CollKind::Scan
                | CollKind::Exscan
        )
    }

    /// The environment variable forcing this collective's algorithm.
    pub fn algorithm_var(self) -> &'static str {
        match self {
            CollKind::Barrier => "GPUMPI_BARRIER_ALGORITHM",
            CollKind::Bcast => "GPUMPI_BCAST_ALGORITHM",
            CollKind::Reduce => "GPUMPI_REDUCE_ALGORITHM",
            CollKind::Allreduce => "GPUMPI_ALLREDUCE_ALGORITHM",
            CollKind::Gather => "GPUMPI_GATHER_ALGORITHM",
            CollKind::Gatherv => "GPUMPI_GATHERV_ALGORITHM",
            CollKind::Scatter => "GPUMPI_SCATTER_ALGORITHM",
            CollKind::Scatterv => "GPUMPI_SCATTERV_ALGORITHM",
            CollKind::Allgather => "GPUMPI_ALLGATHER_ALGORITHM",
            CollKind::Allgatherv => "GPUMPI_ALLGATHERV_ALGORITHM",
            CollKind::Alltoall => "GPUMPI_ALLTOALL_ALGORITHM",
            CollKind::Alltoallv => "GPUMPI_ALLTOALLV_ALGORITHM",
            CollKind::Alltoallw => "GPUMPI_ALLTOALLW_ALGORITHM",
            CollKind::ReduceScatter => "GPUMPI_REDUCE_SCATTER_ALGORITHM",
            CollKind::ReduceScatterBlock => "GPUMPI_REDUCE_SCATTER_BLOCK_ALGORITHM",
            CollKind::Scan => "GPUMPI_SCAN_ALGORITHM",
            CollKind::Exscan => "GPUMPI_EXSCAN_ALGORITHM",
        }
    }
}

/// A byte range (offset, length) of one peer's block in a packed buffer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Block {
    pub off: usize,
    pub len: usize,
}

impl Block {
    pub fn new(off: usize, len: usize) -> Self {
        Block { off, len }
    }
}

/// Everything a builder needs. See the module docs for what `bytes` and the block lists mean
/// for each collective; unused fields are ignored.
#[derive(Clone, Copy, Debug)]
pub struct CollArgs<'a> {
    /// This rank in the communicator.
    pub rank: usize,
    /// Communicator size (>= 1).
    pub size: usize,
    /// Root of rooted collectives (bcast, reduce, gather(v), scatter(v)).
    pub root: usize,
    /// Byte count of the regular collectives (see the module docs).
    pub bytes: usize,
    /// Per-peer regions in the Send buffer (scatterv at root, alltoallv/w).
    pub send_blocks: &'a [Block],
    /// Per-peer regions in the Recv buffer (gatherv at root, allgatherv, alltoallv/w,
    /// reduce_scatter lengths).
    pub recv_blocks: &'a [Block],
    /// Bytes of one reduction element (reductions only; 1 otherwise).
    pub elem_size: usize,
    /// MPI_IN_PLACE semantics of the collective.
    pub in_place: bool,
    /// Whether the reduction op is commutative.
    pub commutative: bool,
    /// The number of nodes the ranks are on (1 inside one node): the tuning table's `nodes`.
    pub nodes: usize,
}

impl<'a> CollArgs<'a> {
    /// Arguments for a regular collective on `size` ranks with no blocks, elem size 1,
    /// root 0, not in place, commutative.
    pub fn new(rank: usize, size: usize, bytes: usize) -> Self {
        CollArgs {
            rank,
            size,
            root: 0,
            bytes,
            send_blocks: &[],
            recv_blocks: &[],
            elem_size: 1,
            in_place: false,
            commutative: true,
            nodes: 1,
        }
    }

    /// The message size the tuning table compares against: the reduced vector for
    /// bcast/reduce/allreduce/scan/exscan, the whole (receive-side) buffer for the others, and 0
    /// for gatherv/scatterv/alltoallv/alltoallw, whose total is not known alike on every rank
    /// (selection must agree on all ranks, so it may only use what all ranks know).
    pub fn msg_bytes(&self, kind: CollKind) -> usize {
        let sum = |b: &[Block]| b.iter().map(|b| b.len).sum::<usize>();
        match kind {
            CollKind::Barrier => 0,
            CollKind::Bcast
            | CollKind::Reduce
            | CollKind::Allreduce
            | CollKind::Scan
            | CollKind::Exscan => self.bytes,
            CollKind::Gather
            | CollKind::Scatter
            | CollKind::Allgather
            | CollKind::Alltoall
            | CollKind::ReduceScatterBlock => self.bytes.saturating_mul(self.size),
            CollKind::Allgatherv | CollKind::ReduceScatter => sum(self.recv_blocks),
            // Not known alike on every rank: every rank must select the same algorithm.
            CollKind::Gatherv | CollKind::Scatterv | CollKind::Alltoallv | CollKind::Alltoallw => 0,
        }
    }
}

/// One algorithm of one collective.
pub struct AlgoInfo {
    pub kind: CollKind,
    pub name: &'static str,
    /// Keeps operands in rank order: usable for non-commutative ops.
    pub ordered: bool,
    pub build: fn(&CollArgs) -> Schedule,
}

macro_rules! algo {
    ($kind:ident, $name:literal, $ordered:literal, $f:path) => {
        AlgoInfo {
            kind: CollKind::$kind,
            name: $name,
            ordered: $ordered,
            build: $f,
        }
    };
}

/// Every algorithm, grouped by collective. Non-reductions are `ordered` trivially.
pub static ALGORITHMS: &[AlgoInfo] = &[
    algo!(Barrier, "dissemination", true, barrier::dissemination),
    algo!(Bcast, "binomial", true, bcast::binomial::build),
    algo!(
        Bcast,
        "scatter_recursive_doubling_allgather",
        true,
        bcast::scatter_rdb::build
    ),
    algo!(
        Bcast,
        "scatter_ring_allgather",
        true,
        bcast::scatter_ring::build
    ),
    algo!(Reduce, "binomial", true, reduce::binomial::build),
    algo!(Reduce, "rabenseifner", true, reduce::rabenseifner::build),
    algo!(
        Allreduce,
        "recursive_doubling",
        true,
        allreduce::recursive_doubling::build
    ),
    algo!(
        Allreduce,
        "rabenseifner",
        true,
        allreduce::rabenseifner::build
    ),
    algo!(Allreduce, "ring", false, allreduce::ring::build),
    algo!(Gather, "binomial", true, gather::binomial),
    algo!(Gatherv, "linear", true, gather::linear_v),
    algo!(Scatter, "binomial", true, scatter::binomial),
    algo!(Scatterv, "linear", true, scatter::linear_v),
    algo!(
        Allgather,
        "recursive_doubling",
        true,
        allgather::recursive_doubling::build
    ),
    algo!(Allgather, "bruck", true, allgather::bruck::build),
    algo!(Allgather, "ring", true, allgather::ring::build),
    algo!(Allgatherv, "ring", true, allgather::ring::build_v),
    algo!(Alltoall, "bruck", true, alltoall::bruck::build),
    algo!(Alltoall, "pairwise", true, alltoall::pairwise::build),
    algo!(Alltoallv, "pairwise", true, alltoall::pairwise::build_v),
    algo!(Alltoallw, "pairwise", true, alltoall::pairwise::build_v),
    algo!(
        ReduceScatter,
        "recursive_halving",
        false,
        reduce_scatter::recursive_halving
    ),
    algo!(
        ReduceScatter,
        "recursive_halving_ordered",
        true,
        reduce_scatter::recursive_halving_ordered
    ),
    algo!(ReduceScatter, "pairwise", true, reduce_scatter::pairwise),
    algo!(
        ReduceScatterBlock,
        "recursive_halving",
        false,
        reduce_scatter::recursive_halving
    ),
    algo!(
        ReduceScatterBlock,
        "recursive_halving_ordered",
        true,
        reduce_scatter::recursive_halving_ordered
    ),
    algo!(
        ReduceScatterBlock,
        "pairwise",
        true,
        reduce_scatter::pairwise
    ),
    algo!(
        Scan,
        "recursive_doubling",
        true,
        scan::scan_recursive_doubling
    ),
    algo!(
        Exscan,
        "recursive_doubling",
        true,
        scan::exscan_recursive_doubling
    ),
];

/// The algorithms of one collective, in registry order.
pub fn algorithms(kind: CollKind) -> impl Iterator<Item = &'static AlgoInfo> {
    ALGORITHMS.iter().filter(move |a| a.kind == kind)
}

/// Look an algorithm up by collective and name.
pub fn algorithm(kind: CollKind, name: &str) -> Option<&'static AlgoInfo> {
    algorithms(kind).find(|a| a.name == name)
}

/// Check the arguments of `kind` (ranks, root, block lists, element alignment).
pub fn validate(kind: CollKind, a: &CollArgs) -> MpiResult<()> {
    if a.size == 0 || a.rank >= a.size {
        mpi_bail!(
            MPI_ERR_RANK,
            "rank {} is not in a communicator of size {}",
            a.rank,
            a.size
        );
    }
    let rooted = matches!(
        kind,
        CollKind::Bcast
            | CollKind::Reduce
            | CollKind::Gather
            | CollKind::Gatherv
            | CollKind::Scatter
            | CollKind::Scatterv
    );
    if rooted && a.root >= a.size {
        mpi_bail!(
            MPI_ERR_ROOT,
            "root {} is not in a communicator of size {}",
            a.root,
            a.size
        );
    }
    if kind.is_reduction() {
        if a.elem_size == 0 {
            mpi_bail!(MPI_ERR_TYPE, "reduction element size is 0");
        }
        let lens: Vec<usize> = match kind {
            CollKind::ReduceScatter => a.recv_blocks.iter().map(|b| b.len).collect(),
            _ => vec![a.bytes],
        };
        if let Some(l) = lens.iter().find(|l| *l % a.elem_size != 0) {
            mpi_bail!(
                MPI_ERR_COUNT,
                "{} bytes is not a whole number of {}-byte elements",
                l,
                a.elem_size
            );
        }
    }
    let need_recv = match kind {
        CollKind::Allgatherv
        | CollKind::Alltoallv
        | CollKind::Alltoallw
        | CollKind::ReduceScatter => true,
        CollKind::Gatherv => a.rank == a.root,
        _ => false,
    };
    if need_recv && a.recv_blocks.len() != a.size {
        mpi_bail!(
            MPI_ERR_ARG,
            "{}: {} receive blocks for {} ranks",
            kind.name(),
            a.recv_blocks.len(),
            a.size
        );
    }
    let need_send = match kind {
        CollKind::Alltoallv | CollKind::Alltoallw => !a.in_place,
        CollKind::Scatterv => a.rank == a.root,
        _ => false,
    };
    if need_send && a.send_blocks.len() != a.size {
        mpi_bail!(
            MPI_ERR_ARG,
            "{}: {} send blocks for {} ranks",
            kind.name(),
            a.send_blocks.len(),
            a.size
        );
    }
    if need_send && need_recv {
        for (i, (s, r)) in a.send_blocks.iter().zip(a.recv_blocks).enumerate() {
            if i == a.rank && s.len != r.len {
                mpi_bail!(
                    MPI_ERR_TRUNCATE,
                    "{}: own block is {} bytes sent, {} received",
                    kind.name(),
                    s.len,
                    r.len
                );
            }
        }
    }
    // The root's own block of gatherv/scatterv is copied locally: it must fit.
    if a.rank == a.root && !a.in_place {
        let (from, to) = match kind {
            CollKind::Gatherv => (a.bytes, a.recv_blocks[a.rank].len),
            CollKind::Scatterv => (a.send_blocks[a.rank].len, a.bytes),
            _ => (0, 0),
        };
        if from > to {
            mpi_bail!(
                MPI_ERR_TRUNCATE,
                "{}: root's own block of {from} bytes does not fit in {to}",
                kind.name()
            );
        }
    }
    Ok(())
}

/// Build the schedule of `kind` with a named algorithm.
pub fn build_with(kind: CollKind, name: &str, a: &CollArgs) -> MpiResult<Schedule> {
    validate(kind, a)?;
    let Some(info) = algorithm(kind, name) else {
        mpi_bail!(MPI_ERR_ARG, "{} has no algorithm {name:?}", kind.name());
    };
    if kind.is_reduction() && !a.commutative && !info.ordered {
        mpi_bail!(
            MPI_ERR_OP,
            "{} algorithm {name} needs a commutative op",
            kind.name()
        );
    }
    Ok((info.build)(a))
}

/// Select an algorithm (tuning table, `GPUMPI_<COLL>_ALGORITHM`) and build the schedule.
/// Returns the algorithm's name with it.
pub fn build(kind: CollKind, a: &CollArgs) -> MpiResult<(&'static str, Schedule)> {
    validate(kind, a)?;
    let info = select::select(kind, a);
    let sched = (info.build)(a);
    tracing::trace!(
        "{} {} rank {}/{}:\n{sched}",
        kind.name(),
        info.name,
        a.rank,
        a.size
    );
    Ok((info.name, sched))
}

/// Calls with at most this many blocks (send and receive together) go through the cache of
/// [`build_shared`]: the regular collectives (one block a side), whose small-message latency
/// the build would otherwise dominate.
const CACHE_MAX_BLOCKS: usize = 2;
/// Schedules kept per thread.
const CACHE_ENTRIES: usize = 8;

/// A built schedule and the call it was built for. A schedule is a pure function of the
/// collective and its [`CollArgs`] (the tuning table and the forcing variables are read once),
/// so an equal call can reuse it.
struct Cached {
    kind: CollKind,
    rank: usize,
    size: usize,
    root: usize,
    bytes: usize,
    send_blocks: Vec<Block>,
    recv_blocks: Vec<Block>,
    elem_size: usize,
    in_place: bool,
    commutative: bool,
    nodes: usize,
    algo: &'static str,
    sched: std::sync::Arc<Schedule>,
}

impl Cached {
    fn matches(&self, kind: CollKind, a: &CollArgs) -> bool {
        self.kind == kind
            && self.rank == a.rank
            && self.size == a.size
            && self.root == a.root
            && self.bytes == a.bytes
            && self.elem_size == a.elem_size
            && self.in_place == a.in_place
            && self.commutative == a.commutative
            && self.nodes == a.nodes
            && self.send_blocks[..] == *a.send_blocks
            && self.recv_blocks[..] == *a.recv_blocks
    }
}

#[derive(Default)]
struct Cache {
    entries: Vec<Cached>,
    next: usize,
}

thread_local! {
    static CACHE: std::cell::RefCell<Cache> = std::cell::RefCell::new(Cache::default());
}

/// [`build`], through a small per-thread cache for calls with few blocks: a repeated call (same
/// collective, sizes, root, layout) gets the schedule built the first time, validated then.
pub fn build_shared(
    kind: CollKind,
    a: &CollArgs,
) -> MpiResult<(&'static str, std::sync::Arc<Schedule>)> {
    let fresh = || build(kind, a).map(|(algo, s)| (algo, std::sync::Arc::new(s)));
    if a.send_blocks.len() + a.recv_blocks.len() > CACHE_MAX_BLOCKS {
        return fresh();
    }
    let hit = CACHE.try_with(|c| {
        c.borrow()
            .entries
            .iter()
            .find(|e| e.matches(kind, a))
            .map(|e| (e.algo, e.sched.clone()))
    });
    if let Ok(Some(hit)) = hit {
        return Ok(hit);
    }
    let (algo, sched) = fresh()?;
    let _ = CACHE.try_with(|c| {
        let mut c = c.borrow_mut();
        let e = Cached {
            kind,
            rank: a.rank,
            size: a.size,
            root: a.root,
            bytes: a.bytes,
            send_blocks: a.send_blocks.to_vec(),
            recv_blocks: a.recv_blocks.to_vec(),
            elem_size: a.elem_size,
            in_place: a.in_place,
            commutative: a.commutative,
            nodes: a.nodes,
            algo,
            sched: sched.clone(),
        };
        if c.entries.len() < CACHE_ENTRIES {
            c.entries.push(e);
        } else {
            let i = c.next;
            c.entries[i] = e;
            c.next = (i + 1) % CACHE_ENTRIES;
        }
    });
    Ok((algo, sched))
}

#[cfg(test)]
mod tests;
