//! GPU collectives without peer access: when CUDA IPC / P2P is unavailable between the GPUs of
//! a node (or forced off with `GPUMPI_CUDA_IPC=0`), the ranks of a communicator exchange data
//! through **pinned shared host memory**: one `/dev/shm` region per rank, mapped by every rank
//! of the communicator and registered with CUDA (page-locked, device-mapped), so copy engines
//! and kernels of every GPU read and write it directly.
//!
//! Two users:
//! - the resident kernel ([`super::resident`]) for calls of at most 64 KiB: its scratch is the
//!   first part of the region instead of IPC-mapped device memory (flags and data over PCIe,
//!   ~3 us GPU-to-GPU flag round trip measured);
//! - the kernel-driven allreduce (kernels/hostar.cuh, [`kernel_needs`]), by default for every
//!   allreduce the resident kernel does not take when every rank has a GPU of its own and none
//!   runs at MPI_THREAD_MULTIPLE (kernels waiting for each other must all be resident): the
//!   two-shot below, but one kernel per rank runs all rounds, its blocks handing rounds to the
//!   same blocks of the peers through per-block counters in the region's kernel area (one wait
//!   and one publication per iteration; rounds of `GPUMPI_GPU_HOST_KERNEL`, 1 MiB per rank, in
//!   two slots, small enough to stay in the CPU caches; no driver call per round);
//! - pipelines here for larger calls: allreduce (with `GPUMPI_GPU_HOST_KERNEL=0`, or two ranks
//!   on a GPU), alltoall, allgather, bcast, reduce and reduce_scatter_block ([`pipeline`]).
//!   The allreduce is a two-shot; round `k` covers `n x chunk` bytes of the vector, sub-chunk
//!   `j` of it belongs to rank `j`:
//!   - A (copy engine): my sub-chunks `j != me` -> my region's `in[slot][j]`;
//!   - B: a kernel reduces sub-chunk `me` of every rank (mine from device memory, the others
//!     read over PCIe from their `in[slot][me]`) and stores the result both in my output and
//!     in my `out[slot]`;
//!   - C (copy engine): every other rank's `out[slot]` -> my output.
//!
//!   Alltoall: A copies my blocks for the others into my `in` slots, C copies my block out of
//!   every other rank's; allgather and bcast: A copies my block (the root's vector) into my
//!   `out` slot, C copies the others' (the root's) into my output. The three stages run on
//!   three streams, ordered across ranks by 64-bit counters in the regions that the streams
//!   themselves write and wait on (CUDA stream memory operations, the waits of a stage batched
//!   into one `cuStreamBatchMemOp`: no host round trip, no kernel): stage X of round g sets my
//!   counter X to g+1; a stage waits for the counters of the stages it reads, and a slot
//!   (g mod depth) is rewritten only after every reader of round g-depth is done. Rounds are
//!   numbered per communicator across calls, so a call never waits for peers at its end: when
//!   its own streams are done its output is complete and its buffers are no longer read by
//!   anyone.
//!
//! A call of `b` bytes runs in about 4 rounds (`b / 4n` bytes per rank and round, at least
//! 256 KiB, at most `GPUMPI_GPU_HOST_CHUNK`, default 1 MiB): the copies of one round overlap
//! the others'. Per rank and per communicator the region holds the resident scratch (1 MiB:
//! 64 KiB slots in host mode) plus `depth x (n + 1) x chunk` bytes (`GPUMPI_GPU_HOST_DEPTH`,
//! default 2: 11 MiB in all at 4 ranks) plus the kernel area (32 KiB of counters and
//! `2 x (n + 1) x GPUMPI_GPU_HOST_KERNEL` bytes: 10 MiB at 4 ranks). The regions belong to the
//! communicator ([`super::comm`]): set up at its first call here, unregistered and unmapped when
//! it is freed.
//!
//! Host-memory bandwidth bounds this design: every byte a GPU contributes crosses PCIe and the
//! host memory twice, 10 x the vector per call at 4 ranks through host memory (see
//! benches/NOTES.md for the measured ceiling on the 4 x H200 machine).

use super::call::{chunk, Call, Shape};
use super::comm::{Host, PathState};
use super::shmem::SharedRegion;
use crate::mpi::error::{MpiError, MpiResult};
use crate::sys::cuda::{self, Stream};

/// Bytes at the start of each region for the resident kernel's scratch.
pub const RES_BYTES: usize = super::resident::kernel::HOST_SCRATCH;
const PIPE_OFF: usize = RES_BYTES.next_multiple_of(4096);
/// Counters of stages A, B, C at PIPE_OFF (one 64-byte line each, [`Stage::flag_off`]).
const IN_OFF: usize = PIPE_OFF + 4096;

fn err(e: impl std::fmt::Display) -> MpiError {
    MpiError::new(
        crate::standard::consts::MPI_ERR_OTHER,
        format!("GPU collective over host memory: {e}"),
    )
}

/// Bytes per rank of one pipeline round (`GPUMPI_GPU_HOST_CHUNK`, a multiple of 4 KiB) and
/// slots per stage buffer (`GPUMPI_GPU_HOST_DEPTH`, 2-8: rounds in flight at once), read when
/// a communicator's regions are set up and kept in its [`HostComm`].
fn chunk_and_depth() -> (usize, usize) {
    let c = &crate::config::snapshot().gpu;
    let q = c
        .host_chunk
        .clamp(64 << 10, 64 << 20)
        .next_multiple_of(4096);
    (q, c.host_depth.clamp(2, 8))
}

/// The kernel-driven allreduce (kernels/hostar.cuh): bytes per rank and round (0: off, the
/// allreduce takes the stream pipeline) from `GPUMPI_GPU_HOST_KERNEL`, a multiple of 4 KiB,
/// blocks per kernel (a power of two, at most [`KMAXB`]) from `GPUMPI_GPU_HOST_KERNEL_BLOCKS`,
/// and the largest call it takes from `GPUMPI_GPU_HOST_KERNEL_MAX`; read at set-up like
/// [`chunk_and_depth`].
fn kernel_params() -> (usize, u32, usize) {
    let c = &crate::config::snapshot().gpu;
    let q = c.host_kernel;
    let b = c.host_kernel_blocks.clamp(1, KMAXB).next_power_of_two();
    let q = if q == 0 {
        0
    } else {
        q.clamp(64 << 10, 16 << 20).next_multiple_of(4096)
    };
    let max = match c.host_kernel_max {
        0 => usize::MAX,
        m => m,
    };
    (q, b as u32, max)
}

/// Slots per buffer of the kernel-driven allreduce. Two suffice: the blocks of all ranks run
/// their iterations in lockstep (iteration `it` waits for every peer's `it - 1`), and within one
/// iteration A writes `in[(g) % 2]` while B reads `in[(g - 1) % 2]`, B writes `out[(g - 1) % 2]`
/// while C reads `out[(g - 2) % 2]`. The fewer slots, the likelier they stay in the CPU's caches.
const KDEPTH: usize = 2;
/// Most blocks of the kernel-driven allreduce (`HAR_MAXB` in kernels/hostar.cuh).
const KMAXB: usize = 128;
/// Offset of the slots in a kernel area (`HAR_DATA`; the counters sit before it).
const KDATA: usize = 32768;

/// The `#define`s of kernels/hostar.cuh with their Rust values (gpu::kabi's test).
#[cfg(test)]
pub(crate) fn constants() -> Vec<(&'static str, u64)> {
    vec![("HAR_MAXB", KMAXB as u64), ("HAR_DATA", KDATA as u64)]
}

/// Offset of the kernel area in a region, after the stream pipeline's slots.
fn kernel_off(n: usize, q: usize, depth: usize) -> usize {
    (IN_OFF + depth * (n + 1) * q).next_multiple_of(4096)
}

fn region_len(n: usize, q: usize, depth: usize, kq: usize) -> usize {
    let k = if kq == 0 {
        0
    } else {
        KDATA + KDEPTH * (n + 1) * kq
    };
    kernel_off(n, q, depth) + k
}

/// One communicator's regions as mapped and registered in this process.
pub struct HostComm {
    pub ordinal: i32,
    /// The three stages' streams, this communicator's own: stream-ordered waits on peers must
    /// never sit in front of another communicator's work (threads of MPI_THREAD_MULTIPLE).
    streams: Option<[Stream; 3]>,
    n: usize,
    me: usize,
    q: usize,
    /// Slots per stage buffer.
    depth: usize,
    /// Every rank's region (mine at `me`), mapped for the life of this state.
    regions: Vec<Box<dyn SharedRegion>>,
    /// Device address of every rank's region (registered here; all of them).
    pub dev: Vec<u64>,
    /// Pipeline rounds run on this communicator so far (the same on every rank).
    rounds: u64,
    /// The kernel-driven allreduce: bytes per slot (0: not used here: off, or two ranks of the
    /// communicator share a GPU, where spinning kernels of two processes would take turns),
    /// blocks, and its own rounds so far.
    kq: usize,
    kblocks: u32,
    krounds: u64,
    /// Largest allreduce (bytes) the kernel takes; larger ones take the stream pipeline.
    kmax: usize,
    /// A call was given up while its operations waited for a peer that called something else
    /// ([`wait_streams`]): those operations never finish, so the state is not used again (every
    /// rank's later calls on the communicator decline this path) and never synchronized or
    /// freed (its streams and regions are left to the process's end).
    given_up: bool,
}

impl HostComm {
    /// Host address of my region (the resident descriptor is written there).
    pub fn own_host(&self) -> *mut u8 {
        self.regions[self.me].as_ptr()
    }
    fn in_addr(&self, p: usize, slot: usize, j: usize) -> u64 {
        self.dev[p] + (IN_OFF + (slot * self.n + j) * self.q) as u64
    }
    fn out_addr(&self, p: usize, slot: usize) -> u64 {
        self.dev[p] + (IN_OFF + (self.depth * self.n + slot) * self.q) as u64
    }
}

/// Kept in the communicator's state; released by dropping it (below).
impl PathState for HostComm {}

impl Drop for HostComm {
    /// Wait for the communicator's streams, destroy them, unregister every region (unmapped
    /// when `regions` drops). Peers are unaffected: their mappings keep the shared pages alive,
    /// and nothing they run writes into this process's view of them.
    fn drop(&mut self) {
        if self.given_up {
            std::mem::forget(std::mem::take(&mut self.regions));
            return;
        }
        let Some(d) = super::gpu().and_then(|g| g.device(self.ordinal).ok()) else {
            return;
        };
        let streams = self.streams.take();
        let regions = &self.regions;
        let _ = cuda::with_context(d.ctx, || {
            for s in streams.into_iter().flatten() {
                let _ = cuda::stream_synchronize(s);
                cuda::stream_destroy(s);
            }
            Ok(())
        });
        unregister(regions, self.ordinal);
        let bytes: usize = regions.iter().map(|r| r.bytes()).sum();
        super::comm::add_pinned(-(bytes as i64));
    }
}

/// Run `f` on the communicator's host state for device `ordinal`, setting it up first
/// (collective: every rank of the communicator calls this in the same call, with every rank's
/// buffers on a GPU; `thread_multiple`, asked at set-up: whether this process runs at
/// MPI_THREAD_MULTIPLE, which keeps the communicator off the kernel-driven allreduce on every
/// rank). The state lives in the communicator ([`Host::gpu`]); its lock is held during the call
/// (collectives of one communicator never overlap; other communicators' are not held up).
/// `Ok(None)`: some rank could not set up (every rank gets `None`).
pub fn with_comm<R>(
    me: usize,
    ordinal: i32,
    thread_multiple: fn() -> bool,
    host: &dyn Host,
    f: impl FnOnce(&mut HostComm) -> R,
) -> MpiResult<Option<R>> {
    let state = host.gpu().state().of::<HostComm>();
    {
        let mut v = state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(hc) = v.iter_mut().find(|h| h.ordinal == ordinal) {
            return Ok(Some(f(hc)));
        }
    }
    let Some(hc) = setup(me, ordinal, thread_multiple, host)? else {
        return Ok(None);
    };
    let mut v = state.lock().unwrap_or_else(|e| e.into_inner());
    v.push(hc);
    super::comm::log("host regions set up");
    Ok(Some(f(v.last_mut().expect("pushed"))))
}

/// Create my region, map and register every rank's (collective; see the module docs).
fn setup(
    me: usize,
    ordinal: i32,
    thread_multiple: fn() -> bool,
    host: &dyn Host,
) -> MpiResult<Option<HostComm>> {
    let (ctx_id, world) = host.identity();
    let n = world.len();
    let (q, depth) = chunk_and_depth();
    let (kq, kblocks, kmax) = kernel_params();
    // The kernel-driven allreduce needs every rank on a GPU of its own and none at
    // MPI_THREAD_MULTIPLE (agreed by all): its kernels wait for each other.
    // (No round at all when it is switched off, the same on every rank.)
    let spin_ok = kq > 0 && {
        let mut rec = [0u8; 17];
        rec[..16].copy_from_slice(&super::device::device_uuid(ordinal).unwrap_or_default());
        rec[16] = thread_multiple() as u8;
        let recs = host.allgather(&rec)?;
        let r: Vec<&[u8]> = recs.chunks(17).collect();
        (0..r.len()).all(|i| {
            r[i][..16] != [0u8; 16] && r[i][16] == 0 && (0..i).all(|j| r[i][..16] != r[j][..16])
        })
    };
    let kq = if spin_ok { kq } else { 0 };
    let len = region_len(n, q, depth, kq);
    let tag = |p: usize| format!("gpu{ctx_id}-{}", world[p]);
    let shm = host.shared_mem();
    let own = shm.create(&tag(me), len);
    if let Err(e) = &own {
        tracing::info!("GPU collectives over host memory unavailable here: {e}");
    }
    if !host.all(own.is_ok())? {
        return Ok(None);
    }
    let own = own.expect("agreed above");
    // Every rank created its region: map the others' and register all of them.
    let mut fail: Option<String> = None;
    let mut regions: Vec<Box<dyn SharedRegion>> = Vec::with_capacity(n);
    let mut own = Some(own);
    for p in 0..n {
        let r = if p == me {
            Ok(own.take().expect("once"))
        } else {
            shm.open(&tag(p), len)
        };
        match r {
            Ok(r) => regions.push(r),
            Err(e) => {
                fail = Some(e);
                break;
            }
        }
    }
    let mut dev = Vec::new();
    if fail.is_none() {
        match register(&regions, ordinal) {
            Ok(d) => dev = d,
            Err(e) => fail = Some(e),
        }
    }
    let ok = host.all(fail.is_none())?;
    // Every rank has opened every region (or given up): my name can go.
    match (&own, regions.get(me)) {
        (Some(r), _) | (None, Some(r)) => r.unlink(),
        _ => {}
    }
    if !ok {
        if fail.is_none() {
            unregister(&regions, ordinal);
            let bytes: usize = regions.iter().map(|r| r.bytes()).sum();
            super::comm::add_pinned(-(bytes as i64));
        }
        tracing::info!(
            "GPU collectives over host memory: set-up failed ({}); staged",
            fail.as_deref().unwrap_or("on another rank")
        );
        return Ok(None);
    }
    tracing::debug!(
        ranks = n,
        bytes = len,
        "GPU collectives over pinned shared host memory ready on a communicator"
    );
    Ok(Some(HostComm {
        ordinal,
        streams: None,
        n,
        me,
        q,
        depth,
        regions,
        dev,
        rounds: 0,
        kq,
        kblocks,
        krounds: 0,
        kmax,
        given_up: false,
    }))
}

fn register(regions: &[Box<dyn SharedRegion>], ordinal: i32) -> Result<Vec<u64>, String> {
    let g = super::gpu().ok_or("CUDA is not available")?;
    let d = g.device(ordinal)?;
    let mut dev = Vec::with_capacity(regions.len());
    let r = cuda::with_context(d.ctx, || {
        for r in regions {
            // SAFETY: each region stays mapped for the life of its HostComm, whose drop
            // unregisters it first.
            dev.push(unsafe { cuda::host_register(r.as_ptr(), r.bytes())? });
            super::comm::add_pinned(r.bytes() as i64);
        }
        Ok(())
    });
    if let Err(e) = r {
        let done = dev.len();
        unregister(&regions[..done], ordinal);
        let bytes: usize = regions[..done].iter().map(|r| r.bytes()).sum();
        super::comm::add_pinned(-(bytes as i64));
        return Err(e.to_string());
    }
    Ok(dev)
}

fn unregister(regions: &[Box<dyn SharedRegion>], ordinal: i32) {
    if let Some(d) = super::gpu().and_then(|g| g.device(ordinal).ok()) {
        let _ = cuda::with_context(d.ctx, || {
            for r in regions {
                // SAFETY: registered above; no work was enqueued on them.
                unsafe { cuda::host_unregister(r.as_ptr()) };
            }
            Ok(())
        });
    }
}

/// Run `c` through pinned shared host memory if every rank can; `Ok(false)`: every rank stages.
/// Serves allreduce, alltoall and reduce_scatter_block (not in place), allgather, bcast and
/// reduce ([`pipeline`]); the other collectives stage.
///
/// # Safety
/// The buffers in `c` are the caller's live device buffers for the whole call.
pub unsafe fn run(c: &Call, host: &dyn Host) -> MpiResult<bool> {
    use crate::coll::CollKind as K;
    // Calls the resident kernel could take stay with the staged paths when it does not (two
    // ranks on a GPU, MPI_THREAD_MULTIPLE): one stream-ordered round costs tens of
    // microseconds; allreduce takes the pipeline at every size (its staged path reduces on
    // the host).
    let big = c.shape.bytes > super::resident::kernel::HOST_SLOT;
    let served = match c.shape.kind {
        K::Allreduce => c.red.is_some(),
        K::Alltoall => big && !c.shape.in_place,
        K::Allgather | K::Bcast => big,
        K::Reduce => big && c.red.is_some(),
        K::ReduceScatterBlock => big && c.red.is_some() && !c.shape.in_place,
        _ => false,
    };
    if !served || c.shape.nranks > super::kernels::MAXP {
        return Ok(false);
    }
    // A communicator whose state here was given up takes the staged paths on every rank.
    let given_up = c.device.is_some_and(|o| {
        host.gpu().peek().is_some_and(|st| {
            st.of::<HostComm>()
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .any(|h| h.ordinal == o && h.given_up)
        })
    });
    if !host.all(c.device.is_some() && !given_up)? {
        return Ok(false);
    }
    let ordinal = c.device.expect("agreed above");
    let r = with_comm(c.shape.rank, ordinal, c.thread_multiple, host, |hc| {
        host.commit(0);
        execute(hc, c, host)
    })?;
    match r {
        None => Ok(false),
        Some(r) => r.map(|_| true),
    }
}

/// Wait for the work enqueued on `streams` (in context `ctx`), asking `host.check()` between
/// polls: a peer that called something else ends the wait with its error. The operations
/// left on the streams then wait for that peer for good: the communicator's state here is
/// marked given up ([`HostComm::given_up`]) and never used or synchronized again.
fn wait_streams(
    hc: &mut HostComm,
    ctx: cuda::Context,
    streams: &[Stream],
    host: &dyn Host,
) -> MpiResult<()> {
    let mut spins: u32 = 0;
    for &s in streams {
        loop {
            if cuda::with_context(ctx, || cuda::stream_query(s)).map_err(err)? {
                break;
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(64) {
                if let Err(e) = host.check() {
                    hc.given_up = true;
                    return Err(e);
                }
            }
            if spins > 4096 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }
    Ok(())
}

/// Bytes per rank of one round for a call of `bytes`: about 4 rounds (copies of one round
/// overlap the others'), at least 256 KiB (each round costs a few driver calls and PCIe
/// round trips), at most the region's slots (`max`).
fn round_chunk(bytes: usize, n: usize, max: usize) -> usize {
    bytes
        .div_ceil(n * 4)
        .next_multiple_of(4096)
        .clamp((256 << 10).min(max), max)
}

/// A place one pipeline operation reads or writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loc {
    /// Byte offset in this rank's input (its receive buffer in place).
    Input(usize),
    /// Byte offset in this rank's receive buffer.
    Recv(usize),
    /// Rank `p`'s region, `in[slot][j]`.
    In { p: usize, slot: usize, j: usize },
    /// Rank `p`'s region, `out[slot]`.
    Out { p: usize, slot: usize },
}

/// The three stages (their index is their stream's and their counter's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    A = 0,
    B = 1,
    C = 2,
}

impl Stage {
    /// Offset of the stage's counter in a region.
    fn flag_off(self) -> usize {
        PIPE_OFF + 64 * self as usize
    }
}

/// One operation on one of the three streams.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Wait until rank `p`'s counter of `stage` is at least `v`.
    Wait {
        p: usize,
        stage: Stage,
        v: u64,
    },
    Copy {
        dst: Loc,
        src: Loc,
        len: usize,
    },
    /// `dsts[..] = srcs[0] op srcs[1] ...` over `elems` elements.
    Reduce {
        dsts: Vec<Loc>,
        srcs: Vec<Loc>,
        elems: usize,
    },
    /// Set my counter of `stage` to `v` (after everything before it on the stream).
    Signal {
        stage: Stage,
        v: u64,
    },
}

/// The operations of rank `s.rank` for the call `s` (allreduce, alltoall, allgather, bcast,
/// reduce, reduce_scatter_block) starting at pipeline round `base`, per stream (A, B, C), and
/// the number of rounds; `q` bytes per rank and round, `depth` slots per stage buffer. `None`:
/// the call has no schedule here (in-place alltoall, other collectives). Pure: tested without
/// a GPU by running every rank's streams in random interleavings ([`tests`]).
///
/// Every stage signals its counter every round on every rank. Before a rank rewrites its slots
/// for round g it waits until every other rank's C of round g-depth is done (C, the last
/// stage, waits for everything of its round), except in allreduce's steady state, where the
/// readers are known precisely: `in` slots are read by B, `out` slots by C.
pub fn pipeline(s: &Shape, q: usize, depth: usize, base: u64) -> Option<([Vec<Op>; 3], u64)> {
    use crate::coll::CollKind as K;
    let (n, me) = (s.nranks, s.rank);
    let es = match s.kind {
        K::Allreduce | K::Reduce | K::ReduceScatterBlock => s.elem.max(1),
        _ => 1,
    };
    // Bytes one round covers: allreduce spreads n sub-chunks of q over the vector; the others
    // move q bytes of each block (of the vector, for bcast) per round.
    let (unit, total) = match s.kind {
        K::Allreduce | K::Reduce => (n * (q / es) * es, s.bytes),
        K::Alltoall if s.in_place => return None,
        K::ReduceScatterBlock if s.in_place => return None,
        K::Alltoall | K::Allgather | K::Bcast | K::ReduceScatterBlock => (q, s.bytes),
        _ => return None,
    };
    let rounds = total.div_ceil(unit.max(1)) as u64;
    let mut st: [Vec<Op>; 3] = Default::default();
    let others = || (0..n).filter(move |&p| p != me);
    let wait = |ps: &mut dyn Iterator<Item = usize>, stage, v| {
        ps.map(|p| Op::Wait { p, stage, v }).collect::<Vec<_>>()
    };
    let cp = |dst, src, len| Op::Copy { dst, src, len };
    // A reduction's operands in rank order: mine at `mine`, rank p's at `theirs(p)`.
    let operands = |mine: Loc, theirs: &dyn Fn(usize) -> Loc| -> Vec<Loc> {
        (0..n)
            .map(|p| if p == me { mine } else { theirs(p) })
            .collect()
    };
    let b = s.bytes;
    for r in 0..rounds {
        let g = base + r;
        let slot = (g % depth as u64) as usize;
        let lo = r as usize * unit;
        let len = unit.min(total - lo);
        let reuse = g + 1 > depth as u64;
        let freed = (g + 1).saturating_sub(depth as u64);
        // The first rounds of a call reuse slots of the previous call, whatever it was.
        let generic = (r as usize) < depth || s.kind != K::Allreduce;
        if reuse && generic {
            st[0].extend(wait(&mut others(), Stage::C, freed));
        }
        // Allreduce and reduce split a round into n sub-chunks, rank j reducing sub-chunk j:
        // (byte offset in the vector, bytes) of sub-chunk j; my sub-chunks for the others into
        // my in slots; the others' reduced sub-chunks from their out slots into my output.
        let sub = |j: usize| {
            let (o, l) = chunk(len / es, n, j, (16 / es).max(1));
            (lo + o * es, l * es)
        };
        let scatter = || {
            others().map(move |j| {
                let (off, l) = sub(j);
                cp(Loc::In { p: me, slot, j }, Loc::Input(off), l)
            })
        };
        let gather = || {
            others().map(move |p| {
                let (off, l) = sub(p);
                cp(Loc::Recv(off), Loc::Out { p, slot }, l)
            })
        };
        match s.kind {
            K::Allreduce => {
                // A: my sub-chunks for the others, once they have read this slot.
                if reuse && !generic {
                    st[0].extend(wait(&mut others(), Stage::B, freed));
                }
                st[0].extend(scatter());
                // B: reduce sub-chunk me once every rank's A is done and my out slot is free.
                st[1].extend(wait(&mut (0..n), Stage::A, g + 1));
                if reuse && !generic {
                    st[1].extend(wait(&mut others(), Stage::C, freed));
                }
                // The kernel stores my reduced sub-chunk in my output and in my out slot (no
                // copy-engine copy after it).
                let (off, l) = sub(me);
                st[1].push(Op::Reduce {
                    dsts: vec![Loc::Recv(off), Loc::Out { p: me, slot }],
                    srcs: operands(Loc::Input(off), &|p| Loc::In { p, slot, j: me }),
                    elems: l / es,
                });
                // C: every other rank's reduced sub-chunk into my output (after my own B,
                // which waited for my A: in place, C overwrites what A read).
                st[2].extend(wait(&mut (0..n), Stage::B, g + 1));
                st[2].extend(gather());
            }
            K::Alltoall => {
                // A: my block for p into my in[slot][p]; B: my own block; C: my block from
                // every other rank's in[slot][me].
                st[0].extend(
                    others()
                        .map(|p| cp(Loc::In { p: me, slot, j: p }, Loc::Input(p * b + lo), len)),
                );
                st[1].push(cp(Loc::Recv(me * b + lo), Loc::Input(me * b + lo), len));
                st[2].extend(wait(&mut others(), Stage::A, g + 1));
                for p in others() {
                    st[2].push(cp(Loc::Recv(p * b + lo), Loc::In { p, slot, j: me }, len));
                }
            }
            K::Allgather => {
                // In place, my block already sits in the receive buffer.
                let mine = if s.in_place {
                    Loc::Recv(me * b + lo)
                } else {
                    Loc::Input(lo)
                };
                st[0].push(cp(Loc::Out { p: me, slot }, mine, len));
                if !s.in_place {
                    st[1].push(cp(Loc::Recv(me * b + lo), mine, len));
                }
                st[2].extend(wait(&mut others(), Stage::A, g + 1));
                for p in others() {
                    st[2].push(cp(Loc::Recv(p * b + lo), Loc::Out { p, slot }, len));
                }
            }
            K::Bcast => {
                if me == s.root {
                    st[0].push(cp(Loc::Out { p: me, slot }, Loc::Recv(lo), len));
                } else {
                    st[2].extend(wait(&mut std::iter::once(s.root), Stage::A, g + 1));
                    st[2].push(cp(Loc::Recv(lo), Loc::Out { p: s.root, slot }, len));
                }
            }
            K::Reduce => {
                // A reduce-scatter, then a gather at the root, so that every rank reduces
                // 1/n of the round (the root alone would read (n-1) x the vector over PCIe).
                // A: my sub-chunks for the others into in[slot][j]; B: sub-chunk me reduced
                // from every rank's piece into my out slot (the root: into its output); C
                // (root): the others' reduced sub-chunks into the output.
                st[0].extend(scatter());
                st[1].extend(wait(&mut (0..n), Stage::A, g + 1));
                let (off, l) = sub(me);
                st[1].push(Op::Reduce {
                    dsts: vec![if me == s.root {
                        Loc::Recv(off)
                    } else {
                        Loc::Out { p: me, slot }
                    }],
                    srcs: operands(Loc::Input(off), &|p| Loc::In { p, slot, j: me }),
                    elems: l / es,
                });
                if me == s.root {
                    // After every B of the round (mine too: in place, my A read what C writes).
                    st[2].extend(wait(&mut (0..n), Stage::B, g + 1));
                    st[2].extend(gather());
                } else {
                    // The slots are read in B (and my out slot in the root's C, which the
                    // next writer of this slot waits for): C follows my B.
                    st[2].extend(wait(&mut std::iter::once(me), Stage::B, g + 1));
                }
            }
            K::ReduceScatterBlock => {
                // A: my piece of block p into my in[slot][p]; B: block me reduced from every
                // rank's in[slot][me] and my own block.
                st[0].extend(
                    others()
                        .map(|p| cp(Loc::In { p: me, slot, j: p }, Loc::Input(p * b + lo), len)),
                );
                st[1].extend(wait(&mut others(), Stage::A, g + 1));
                st[1].push(Op::Reduce {
                    dsts: vec![Loc::Recv(lo)],
                    srcs: operands(Loc::Input(me * b + lo), &|p| Loc::In { p, slot, j: me }),
                    elems: len / es,
                });
                st[2].extend(wait(&mut std::iter::once(me), Stage::B, g + 1));
            }
            _ => unreachable!("no schedule"),
        }
        for stage in [Stage::A, Stage::B, Stage::C] {
            st[stage as usize].push(Op::Signal { stage, v: g + 1 });
        }
    }
    Some((st, rounds))
}

/// The call's [`pipeline`] enqueued on three streams, then those streams waited for.
unsafe fn execute(hc: &mut HostComm, c: &Call, host: &dyn Host) -> MpiResult<()> {
    let g = super::gpu().ok_or_else(|| err("CUDA is not available"))?;
    let d = g.device(hc.ordinal).map_err(err)?;
    let k = g.kernels(hc.ordinal).map_err(err)?;
    let streams = match hc.streams {
        Some(s) => s,
        None => {
            let s = cuda::with_context(d.ctx, || {
                Ok([
                    cuda::stream_create()?,
                    cuda::stream_create()?,
                    cuda::stream_create()?,
                ])
            })
            .map_err(err)?;
            hc.streams = Some(s);
            s
        }
    };
    if c.shape.kind == crate::coll::CollKind::Allreduce && hc.kq > 0 && c.shape.bytes <= hc.kmax {
        return execute_kernel(hc, c, d, k, streams[0], host);
    }
    let n = hc.n;
    let total = match c.shape.kind {
        crate::coll::CollKind::Allreduce => c.shape.bytes,
        _ => c.shape.bytes * n,
    };
    let q = round_chunk(total, n, hc.q);
    let (ops, rounds) = pipeline(&c.shape, q, hc.depth, hc.rounds)
        .ok_or_else(|| err("no schedule for this call"))?;
    let recv = c.recv.map_or(0, |r| r.0);
    let input = c.send.map_or(recv, |s| s.0);
    let grid = super::device::max_grid(hc.ordinal);
    let at = |l: &Loc| match *l {
        Loc::Input(o) => input + o,
        Loc::Recv(o) => recv + o,
        Loc::In { p, slot, j } => hc.in_addr(p, slot, j) as usize,
        Loc::Out { p, slot } => hc.out_addr(p, slot) as usize,
    };
    let flag = |p: usize, s: Stage| hc.dev[p] + s.flag_off() as u64;
    cuda::with_context(d.ctx, || {
        // Round by round across the streams, so that every stream has work early.
        let mut pos = [0usize; 3];
        while (0..3).any(|i| pos[i] < ops[i].len()) {
            for i in 0..3 {
                let s = streams[i];
                // This stream's operations up to and including its next signal; consecutive
                // waits go to the driver as one batch.
                let mut waits: Vec<(u64, u64)> = Vec::new();
                while let Some(o) = ops[i].get(pos[i]) {
                    pos[i] += 1;
                    if let Op::Wait { p, stage, v } = o {
                        waits.push((flag(*p, *stage), *v));
                        continue;
                    }
                    cuda::stream_wait_all_geq(s, &waits)?;
                    waits.clear();
                    match o {
                        Op::Wait { .. } => unreachable!("collected above"),
                        Op::Copy { dst, src, len } => {
                            cuda::memcpy_dtod_async(at(dst), at(src), *len, s)?
                        }
                        Op::Reduce { dsts, srcs, elems } => {
                            let Some((op, t)) = c.red else {
                                return Err(cuda::CudaError {
                                    call: "reduce",
                                    code: -1,
                                    name: "a reduction without an operation".into(),
                                });
                            };
                            let ptrs: Vec<usize> = srcs.iter().map(at).collect();
                            let outs: Vec<usize> = dsts.iter().map(at).collect();
                            k.reduce_n_async(op, t, &outs, &ptrs, *elems, grid, s)?
                        }
                        Op::Signal { stage, v } => {
                            cuda::stream_write(s, flag(hc.me, *stage), *v)?;
                            break;
                        }
                    }
                }
            }
        }
        Ok(())
    })
    .map_err(err)?;
    wait_streams(hc, d.ctx, &streams, host)?;
    hc.rounds += rounds;
    tracing::debug!(
        coll = c.shape.kind.name(),
        bytes = c.shape.bytes,
        rounds,
        ranks = hc.n,
        "collective on the GPU through pinned shared host memory"
    );
    Ok(())
}

/// The counters (A, B, C; 0: none) every peer's block must have reached before iteration `it`
/// of a kernel-driven allreduce of `rounds` rounds from round `base`, with `depth` slots: the
/// iteration runs A(it), B(it - 1), C(it - 2). kernels/hostar.cuh computes the same at the top
/// of its loop; the tests run this protocol for every rank in random interleavings.
pub fn kernel_needs(it: u64, rounds: u64, base: u64, depth: u64) -> [u64; 3] {
    let (run_a, run_b, run_c) = (it < rounds, it >= 1 && it <= rounds, it >= 2);
    let g_a = base + it;
    let mut need = [0u64; 3];
    if run_b {
        need[0] = g_a; // their A of round g_a - 1: my sub-chunk in their `in`
    }
    if run_c {
        need[1] = g_a - 1; // their B of round g_a - 2: their `out`
    }
    if run_a && g_a >= depth {
        need[1] = need[1].max(g_a - depth + 1); // my `in` slot read by all
    }
    if run_b && g_a > depth {
        need[2] = g_a - depth; // my `out` slot read by all
    }
    need
}

/// Bytes per rank and round of a kernel-driven allreduce of `bytes`: the vector spread evenly
/// over the ranks when it fits one round, at most the slot size `kq`; a multiple of 16 bytes
/// per block, so every block's slice is whole 16-byte vectors of any element type.
fn kernel_round(bytes: usize, n: usize, kq: usize, blocks: usize) -> usize {
    bytes
        .div_ceil(n)
        .next_multiple_of(16 * blocks)
        .clamp(16 * blocks, kq)
}

/// The allreduce `c` by one kernel per rank (kernels/hostar.cuh; the module docs).
unsafe fn execute_kernel(
    hc: &mut HostComm,
    c: &Call,
    d: super::DevCtx,
    k: &super::kernels::Kernels,
    s: Stream,
    host: &dyn Host,
) -> MpiResult<()> {
    let (op, t) = c
        .red
        .ok_or_else(|| err("a reduction without an operation"))?;
    let es = t.size();
    let elems = c.shape.bytes / es;
    if elems == 0 {
        return Ok(());
    }
    let n = hc.n;
    let q = kernel_round(c.shape.bytes, n, hc.kq, hc.kblocks as usize);
    let qe = q / es;
    let rounds = elems.div_ceil(n * qe) as u64;
    let recv = c.recv.map_or(0, |r| r.0);
    let input = c.send.map_or(recv, |s| s.0);
    let koff = kernel_off(n, hc.q, hc.depth) as u64;
    let mut a = super::kernels::HostAr {
        input: input as u64,
        out: recv as u64,
        elems: elems as u64,
        qe: qe as u64,
        base: hc.krounds,
        rounds,
        slot: hc.kq as u64,
        n: n as i32,
        me: hc.me as i32,
        depth: KDEPTH as i32,
        ..Default::default()
    };
    for (p, r) in a.reg.iter_mut().take(n).enumerate() {
        *r = hc.dev[p] + koff;
    }
    cuda::with_context(d.ctx, || k.host_allreduce_async(op, t, &a, hc.kblocks, s)).map_err(err)?;
    wait_streams(hc, d.ctx, &[s], host)?;
    hc.krounds += rounds;
    tracing::debug!(
        bytes = c.shape.bytes,
        rounds,
        round_bytes = q,
        blocks = hc.kblocks,
        ranks = n,
        "allreduce on the GPU through pinned shared host memory, kernel-driven"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coll::CollKind as K;

    /// One rank's buffers of one call: (send, receive); no send buffer = in place.
    type Bufs = (Option<Vec<u8>>, Vec<u8>);

    fn shape(kind: K, n: usize, rank: usize, bytes: usize, in_place: bool) -> Shape {
        Shape {
            kind,
            nranks: n,
            rank,
            root: n / 2,
            bytes,
            elem: 4,
            in_place,
        }
    }

    fn val(c: usize, p: usize, i: usize) -> i32 {
        (c * 1000 + p * 31 + i * 7) as i32
    }
    fn ints(v: impl Iterator<Item = i32>) -> Vec<u8> {
        v.flat_map(|x| x.to_le_bytes()).collect()
    }

    /// Rank p's buffers for call c and what its receive buffer must hold afterwards.
    fn buffers(c: usize, s: &Shape, p: usize) -> (Bufs, Vec<u8>) {
        let (n, b) = (s.nranks, s.bytes);
        let ne = b / 4;
        let poison = |len| vec![0xEEu8; len];
        match s.kind {
            K::Allreduce => {
                let mine = ints((0..ne).map(|i| val(c, p, i)));
                let want =
                    ints((0..ne).map(|i| (0..n).fold(0i32, |a, r| a.wrapping_add(val(c, r, i)))));
                if s.in_place {
                    ((None, mine), want)
                } else {
                    ((Some(mine), poison(b)), want)
                }
            }
            K::Alltoall => {
                let send = ints((0..n * ne).map(|i| val(c, p, i + 100 * (i / ne))));
                let want = ints((0..n * ne).map(|i| {
                    let (src, k) = (i / ne, i % ne);
                    val(c, src, p * ne + k + 100 * p)
                }));
                ((Some(send), poison(n * b)), want)
            }
            K::Allgather => {
                let want = ints((0..n * ne).map(|i| val(c, i / ne, i % ne)));
                let mine = ints((0..ne).map(|i| val(c, p, i)));
                if s.in_place {
                    let mut r = poison(n * b);
                    r[p * b..(p + 1) * b].copy_from_slice(&mine);
                    ((None, r), want)
                } else {
                    ((Some(mine), poison(n * b)), want)
                }
            }
            K::Bcast => {
                let want = ints((0..ne).map(|i| val(c, s.root, i)));
                let r = if p == s.root { want.clone() } else { poison(b) };
                ((None, r), want)
            }
            K::Reduce => {
                let mine = ints((0..ne).map(|i| val(c, p, i)));
                let sum =
                    ints((0..ne).map(|i| (0..n).fold(0i32, |a, r| a.wrapping_add(val(c, r, i)))));
                match (p == s.root, s.in_place) {
                    (true, true) => ((None, mine), sum),
                    (true, false) => ((Some(mine), poison(b)), sum),
                    // Not the root: the receive buffer is left alone.
                    (false, _) => ((Some(mine), poison(b)), poison(b)),
                }
            }
            K::ReduceScatterBlock => {
                let send = ints((0..n * ne).map(|i| val(c, p, i)));
                let want = ints(
                    (0..ne)
                        .map(|k| (0..n).fold(0i32, |a, r| a.wrapping_add(val(c, r, p * ne + k)))),
                );
                ((Some(send), poison(b)), want)
            }
            _ => unreachable!(),
        }
    }

    /// Run `calls` (kind, bytes, in place) consecutively on `n` simulated ranks whose streams
    /// advance in a random interleaving (`seed`); each rank starts its next call when its three
    /// streams are done, as the host does. Checks every output; panics on a deadlock.
    fn run(n: usize, q: usize, depth: usize, calls: &[(K, usize, bool)], seed: u64) {
        struct Rank {
            region_in: Vec<u8>,
            region_out: Vec<u8>,
            flags: [u64; 3],
        }
        let mut ranks: Vec<Rank> = (0..n)
            .map(|_| Rank {
                region_in: vec![0; depth * n * q],
                region_out: vec![0; depth * q],
                flags: [0; 3],
            })
            .collect();
        let shapes: Vec<Vec<Shape>> = (0..n)
            .map(|p| {
                calls
                    .iter()
                    .map(|&(k, b, ip)| shape(k, n, p, b, ip))
                    .collect()
            })
            .collect();
        let mut bufs: Vec<Vec<Bufs>> = Vec::new();
        let mut wants: Vec<Vec<Vec<u8>>> = Vec::new();
        for (p, shape) in shapes.iter().enumerate().take(n) {
            let (b, w): (Vec<_>, Vec<_>) =
                (0..calls.len()).map(|c| buffers(c, &shape[c], p)).unzip();
            bufs.push(b);
            wants.push(w);
        }
        let mut base = vec![0u64; n];
        let mut call = vec![0usize; n];
        let mut ops: Vec<[Vec<Op>; 3]> = Vec::new();
        let mut pos = vec![[0usize; 3]; n];
        for p in 0..n {
            let (o, r) = pipeline(&shapes[p][0], q, depth, 0).expect("a schedule");
            ops.push(o);
            base[p] = r;
        }
        let mut rng = seed | 1;
        loop {
            let mut runnable = Vec::new();
            for p in 0..n {
                if call[p] >= calls.len() {
                    continue;
                }
                for s in 0..3 {
                    if let Some(o) = ops[p][s].get(pos[p][s]) {
                        let ok = match o {
                            Op::Wait { p: w, stage, v } => ranks[*w].flags[*stage as usize] >= *v,
                            _ => true,
                        };
                        if ok {
                            runnable.push((p, s));
                        }
                    }
                }
            }
            if runnable.is_empty() {
                assert!(
                    call.iter().all(|&c| c >= calls.len()),
                    "deadlock: n={n} q={q} depth={depth} calls={calls:?} at {call:?} {pos:?}"
                );
                break;
            }
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let (p, s) = runnable[(rng % runnable.len() as u64) as usize];
            let o = ops[p][s][pos[p][s]].clone();
            pos[p][s] += 1;
            let c = call[p];
            let read = |ranks: &Vec<Rank>, bufs: &Vec<Vec<Bufs>>, l: Loc, len| {
                let (snd, rcv) = &bufs[p][c];
                match l {
                    Loc::Input(o) => snd.as_ref().unwrap_or(rcv)[o..o + len].to_vec(),
                    Loc::Recv(o) => rcv[o..o + len].to_vec(),
                    Loc::In { p: r, slot, j } => {
                        assert!(len <= q);
                        let o = (slot * n + j) * q;
                        ranks[r].region_in[o..o + len].to_vec()
                    }
                    Loc::Out { p: r, slot } => {
                        assert!(len <= q);
                        ranks[r].region_out[slot * q..slot * q + len].to_vec()
                    }
                }
            };
            let write = |ranks: &mut Vec<Rank>, bufs: &mut Vec<Vec<Bufs>>, l: Loc, v: &[u8]| {
                let (snd, rcv) = &mut bufs[p][c];
                let dst = match l {
                    Loc::Input(o) => &mut snd.as_mut().unwrap_or(rcv)[o..o + v.len()],
                    Loc::Recv(o) => &mut rcv[o..o + v.len()],
                    Loc::In { p: r, slot, j } => {
                        assert_eq!(r, p, "a rank writes only its own region");
                        let o = (slot * n + j) * q;
                        &mut ranks[r].region_in[o..o + v.len()]
                    }
                    Loc::Out { p: r, slot } => {
                        assert_eq!(r, p, "a rank writes only its own region");
                        &mut ranks[r].region_out[slot * q..slot * q + v.len()]
                    }
                };
                dst.copy_from_slice(v);
            };
            match o {
                Op::Wait { .. } => {}
                Op::Copy { dst, src, len } => {
                    let v = read(&ranks, &bufs, src, len);
                    write(&mut ranks, &mut bufs, dst, &v);
                }
                Op::Reduce { dsts, srcs, elems } => {
                    let ins: Vec<Vec<u8>> = srcs
                        .iter()
                        .map(|l| read(&ranks, &bufs, *l, elems * 4))
                        .collect();
                    let out = ints((0..elems).map(|e| {
                        ins.iter()
                            .map(|b| i32::from_le_bytes(b[e * 4..e * 4 + 4].try_into().unwrap()))
                            .fold(0i32, |a, x| a.wrapping_add(x))
                    }));
                    for dst in dsts {
                        write(&mut ranks, &mut bufs, dst, &out);
                    }
                }
                Op::Signal { stage, v } => {
                    let f = &mut ranks[p].flags[stage as usize];
                    assert!(v > *f, "counters only grow");
                    *f = v;
                }
            }
            // All three streams done: the call returns; check it and start the next.
            if (0..3).all(|s| pos[p][s] == ops[p][s].len()) {
                assert!(
                    bufs[p][c].1 == wants[p][c],
                    "n={n} q={q} depth={depth} call {c} {:?} rank {p} seed {seed}: wrong output",
                    calls[c]
                );
                call[p] += 1;
                if call[p] < calls.len() {
                    let (o, r) =
                        pipeline(&shapes[p][call[p]], q, depth, base[p]).expect("a schedule");
                    ops[p] = o;
                    pos[p] = [0; 3];
                    base[p] += r;
                }
            }
        }
        assert!(base.iter().all(|&b| b == base[0]), "same rounds everywhere");
    }

    #[test]
    fn pipelines_in_any_interleaving() {
        for n in 1..=5 {
            for seed in 1..25u64 {
                // q = 32 bytes: calls take many rounds; kinds alternate so that slots of one
                // kind are reused by another.
                // Depths 2-4 (slots of a depth-d region reused from round d on).
                run(
                    n,
                    32,
                    2 + seed as usize % 3,
                    &[
                        (K::Allreduce, 4, false),
                        (K::Allreduce, 400, true),
                        (K::Alltoall, 36, false),
                        (K::Allreduce, 132, false),
                        (K::Allgather, 68, false),
                        (K::Bcast, 100, false),
                        (K::Allgather, 20, true),
                        (K::Allreduce, 32 * n * 3, false),
                        (K::Reduce, 100, false),
                        (K::Alltoall, 4, false),
                        (K::ReduceScatterBlock, 72, false),
                        (K::Reduce, 36, true),
                        (K::Reduce, 32 * n * 3 + 12, false),
                        (K::Reduce, 32 * n * 2 + 4, true),
                        (K::Allreduce, 28, true),
                        (K::ReduceScatterBlock, 4, false),
                    ],
                    seed * 7919 + n as u64,
                );
            }
        }
    }

    #[test]
    fn unserved_calls_have_no_schedule() {
        assert!(pipeline(&shape(K::Alltoall, 4, 0, 64, true), 4096, 2, 0).is_none());
        assert!(pipeline(&shape(K::ReduceScatterBlock, 4, 0, 64, true), 4096, 2, 0).is_none());
        assert!(pipeline(&shape(K::Scan, 4, 0, 64, false), 4096, 2, 0).is_none());
    }

    /// The kernel-driven allreduce's protocol (kernel_needs; the iteration body of
    /// kernels/hostar.cuh with slots holding round numbers): every rank's iterations in random
    /// interleavings over several calls, stepping a rank only when its counters allow. It never
    /// deadlocks and every read finds the round it wants in the slot (a slot is never
    /// rewritten before all its readers are done), with any depth of at least 2.
    #[test]
    fn kernel_allreduce_protocol() {
        struct R {
            flags: [u64; 3],
            ins: Vec<Vec<u64>>, // [slot][j]: round + 1 written there (0: never)
            outs: Vec<u64>,
            call: usize,
            base: u64,
            it: u64,
        }
        let mut rng = crate::test_rng::XorShift(0x9e3779b97f4a7c15);
        let mut next = move || rng.next();
        for (n, depth, calls) in [
            (2, 2, vec![3u64, 1, 5]),
            (4, 2, vec![1, 7, 2, 1]),
            (4, 4, vec![9, 1, 3]),
            (3, 3, vec![2, 2, 8]),
        ] {
            for _trial in 0..50 {
                let mut rs: Vec<R> = (0..n)
                    .map(|_| R {
                        flags: [0; 3],
                        ins: vec![vec![0; n]; depth],
                        outs: vec![0; depth],
                        call: 0,
                        base: 0,
                        it: 0,
                    })
                    .collect();
                loop {
                    let ready: Vec<usize> = (0..n)
                        .filter(|&r| {
                            let me = &rs[r];
                            me.call < calls.len() && {
                                let need =
                                    kernel_needs(me.it, calls[me.call], me.base, depth as u64);
                                (0..n)
                                    .filter(|&p| p != r)
                                    .all(|p| (0..3).all(|s| rs[p].flags[s] >= need[s]))
                            }
                        })
                        .collect();
                    if ready.is_empty() {
                        assert!(
                            rs.iter().all(|r| r.call == calls.len()),
                            "deadlock: n {n} depth {depth}"
                        );
                        break;
                    }
                    let r = ready[(next() % ready.len() as u64) as usize];
                    let (it, rounds, base) = (rs[r].it, calls[rs[r].call], rs[r].base);
                    let g_a = base + it;
                    let (run_a, run_b, run_c) = (it < rounds, it >= 1 && it <= rounds, it >= 2);
                    let d = depth as u64;
                    if run_b {
                        let g = g_a - 1;
                        for p in (0..n).filter(|&p| p != r) {
                            assert_eq!(rs[p].ins[(g % d) as usize][r], g + 1, "B reads round {g}");
                        }
                        rs[r].outs[(g % d) as usize] = g + 1;
                    }
                    if run_c {
                        let g = g_a - 2;
                        for p in (0..n).filter(|&p| p != r) {
                            assert_eq!(rs[p].outs[(g % d) as usize], g + 1, "C reads round {g}");
                        }
                    }
                    if run_a {
                        for j in (0..n).filter(|&j| j != r) {
                            rs[r].ins[(g_a % d) as usize][j] = g_a + 1;
                        }
                    }
                    // Reads above happen before the writes of A in the same step: a stricter
                    // order than the kernel's (A writes first), checked by the waits alone.
                    let me = &mut rs[r];
                    if run_a {
                        me.flags[0] = g_a + 1;
                    }
                    if run_b {
                        me.flags[1] = g_a;
                    }
                    if run_c {
                        me.flags[2] = g_a - 1;
                    }
                    me.it += 1;
                    if me.it == rounds + 2 {
                        me.base += rounds;
                        me.call += 1;
                        me.it = 0;
                    }
                }
            }
        }
    }

    #[test]
    fn kernel_rounds_fit_the_slots() {
        for blocks in [1, 32, 64, 128] {
            for bytes in [1, 8, 4096, 1 << 20, 3 << 20, 1 << 30] {
                let q = kernel_round(bytes, 4, 512 << 10, blocks);
                assert!(
                    q <= 512 << 10 && q.is_multiple_of(16 * blocks) && q > 0,
                    "{bytes} -> {q}"
                );
                if bytes <= 2 << 20 {
                    assert!(4 * q >= bytes, "one round holds the call");
                }
            }
        }
    }

    #[test]
    fn round_chunks_fit_the_slots() {
        for max in [64 << 10, 256 << 10, 1 << 20, 64 << 20] {
            for bytes in [1, 4096, 1 << 20, 3 << 20, 1 << 30] {
                let q = round_chunk(bytes, 4, max);
                assert!(q <= max && q.is_multiple_of(4096), "{bytes} {max} -> {q}");
            }
        }
        assert_eq!(round_chunk(64 << 20, 4, 1 << 20), 1 << 20);
        assert_eq!(round_chunk(8 << 20, 4, 1 << 20), 512 << 10);
        assert_eq!(round_chunk(1 << 20, 4, 1 << 20), 256 << 10);
    }

    #[test]
    fn allreduce_rounds_and_slots() {
        // 4 ranks, 1 MiB per rank per round: 16 MiB is 4 rounds; slots alternate across calls.
        let (ops, rounds) =
            pipeline(&shape(K::Allreduce, 4, 1, 16 << 20, false), 1 << 20, 2, 3).unwrap();
        assert_eq!(rounds, 4);
        let slots: Vec<usize> = ops[0]
            .iter()
            .filter_map(|o| match o {
                Op::Copy {
                    dst: Loc::In { slot, .. },
                    ..
                } => Some(*slot),
                _ => None,
            })
            .step_by(3)
            .collect();
        assert_eq!(slots, vec![1, 0, 1, 0]);
        // Each A copy moves one quarter of a round, never more than a slot.
        assert!(ops[0].iter().all(|o| match o {
            Op::Copy { len, .. } => *len == 1 << 20,
            _ => true,
        }));
    }
}
