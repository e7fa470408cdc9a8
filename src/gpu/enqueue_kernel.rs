//! The GPU-native `MPIX_Allreduce_enqueue`: one kernel (kernels/stream_ar.cuh) launched on the
//! application's stream, no host thread, host function or stream callback, so a CUDA graph
//! captures it as one kernel node and replays it at kernel-launch cost.
//!
//! Contract:
//! - [`comm_eligible`] says whether a stream communicator may ever use the kernel (its ranks on
//!   one node, 2 to [`MAXP`] of them, CUDA IPC on, the kernels built, `GPUMPI_STREAM_KERNEL`
//!   on): values every rank shares. Such a communicator gets a private duplicate at creation
//!   for the set-up exchange (the worker thread of `gpu::enqueue` may be running the fallback's
//!   MPI calls on the stream communicator itself at the same time, in another order than the
//!   calling thread on the peers).
//! - [`setup`] (collective, at the first eligible call, all ranks enqueue collectives in the
//!   same order): each rank allocates its scratch once, exports it, one host allgather of
//!   (device UUID, scratch export, scratch slot), every rank maps every peer's scratch, one host
//!   AND. It does no stream work and relaxes the thread's capture mode for its driver calls,
//!   so it is legal while the stream is being captured. The allocations live in the private
//!   duplicate's GPU state ([`super::comm`]) and are freed with it, after the stream finished.
//! - [`call_eligible`] decides from the call's arguments that every rank shares (count, op,
//!   datatype): the same answer everywhere. A rank whose own buffers are not device memory of
//!   the stream's GPU still takes the kernel path, staging them through pinned memory (the
//!   other ranks cannot know, and must not wait for a kernel that never comes).
//! - [`plan`] is the pure arithmetic of a call (algorithm, blocks, slice per round, part per
//!   block) that the kernel follows; the same on every rank.

use super::comm::{Host, PathState};
use super::ipc::{self, Export, EXPORT_BYTES};
use super::kernels::{KOp, KType, MAXP};
use crate::mpi::error::MpiResult;
use crate::sys::cuda;

/// Most blocks of one kernel (`SAR_BLOCKS_MAX`: the flag arrays' size).
pub const BLOCKS_MAX: usize = 128;
/// Threads per block (`SAR_THREADS`).
pub const THREADS: u32 = 512;
/// The round counter at the end of this rank's last pipelined call (`SAR_PIPE_END_OFF`).
pub const PIPE_END_OFF: usize = 16;
/// Each peer's done word (`SAR_DONE_OFF`): u64 per sender.
pub const DONE_OFF: usize = 64;
/// Where the flags of flagged rounds start in a rank's scratch (`SAR_FLAG_OFF`): after the
/// counter words.
pub const FLAG_OFF: usize = 4096;
/// Where the pipelined calls' flags start (`SAR_PFLAG_OFF`): after 2 phases x 2 parities x
/// blocks x senders flags.
pub const PFLAG_OFF: usize = FLAG_OFF + 2 * 2 * BLOCKS_MAX * MAXP * 8;
/// Where the data starts (`SAR_DATA_OFF`): after 4 kinds x parts x senders pipelined flags.
pub const DATA_OFF: usize = PFLAG_OFF + 4 * BLOCKS_MAX * MAXP * 8;
pub const ONE_SHOT: u32 = 0;
pub const TWO_SHOT: u32 = 1;
pub const LL: u32 = 2;
pub const PIPE: u32 = 3;
pub const PIPE_TWO: u32 = 4;
/// The collectives of kernels/stream_coll.cuh (`SCO_*`): flagged rounds on the same scratch.
pub const BCAST: u32 = 16;
pub const ALLGATHER: u32 = 17;
pub const ALLTOALL: u32 = 18;
pub const REDUCE_SCATTER: u32 = 19;
/// Most stages of a pipelined call (`SAR_STAGES_MAX`).
pub const STAGES_MAX: usize = 8;
/// Alignment of slices, parts, slots and areas (the kernels' 16-byte vector loads and stores).
const ALIGN: usize = 16;
/// Slots and stages are multiples of this.
const UNIT: usize = 64 << 10;

/// `struct StreamAr` of kernels/stream_ar.cuh: the kernel's one (by-value) parameter.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamAr {
    pub peers: [u64; MAXP],
    pub src: u64,
    pub dst: u64,
    pub bytes: u64,
    pub slice: u64,
    pub per: u64,
    pub slot: u64,
    pub stage: u64,
    pub pipe_off: u64,
    pub ll_off: u64,
    pub ll_slot: u64,
    pub nranks: u32,
    pub rank: u32,
    pub op: u32,
    pub ty: u32,
    pub algo: u32,
    pub parts: u32,
    pub stages: u32,
    pub pad: u32,
}

const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<StreamAr>() == 8 * MAXP + 80 + 32);
    assert!(
        offset_of!(StreamAr, src) == 8 * MAXP && offset_of!(StreamAr, ll_slot) == 8 * MAXP + 72
    );
    assert!(offset_of!(StreamAr, nranks) == 8 * MAXP + 80);
    // The counter words before the flags.
    assert!(DONE_OFF + 8 * MAXP <= FLAG_OFF && PIPE_END_OFF + 8 <= DONE_OFF);
};

/// `StreamAr` as gpu::kabi's test holds it against kernels/stream_ar.cuh.
#[cfg(test)]
pub(crate) fn layouts() -> Vec<super::kabi::Layout> {
    use super::kabi::layout;
    vec![layout!(
        "StreamAr",
        StreamAr,
        "peers" => peers, "src" => src, "dst" => dst, "bytes" => bytes, "slice" => slice,
        "per" => per, "slot" => slot, "stage" => stage, "pipe_off" => pipe_off,
        "ll_off" => ll_off, "ll_slot" => ll_slot, "nranks" => nranks, "rank" => rank,
        "op" => op, "type" => ty, "algo" => algo, "parts" => parts, "stages" => stages,
        "pad" => pad,
    )]
}

/// The `#define`s of kernels/stream_ar.cuh with their Rust values.
#[cfg(test)]
pub(crate) fn constants() -> Vec<(&'static str, u64)> {
    vec![
        ("SAR_BLOCKS_MAX", BLOCKS_MAX as u64),
        ("SAR_THREADS", THREADS as u64),
        ("SAR_PIPE_END_OFF", PIPE_END_OFF as u64),
        ("SAR_DONE_OFF", DONE_OFF as u64),
        ("SAR_FLAG_OFF", FLAG_OFF as u64),
        ("SAR_PFLAG_OFF", PFLAG_OFF as u64),
        ("SAR_DATA_OFF", DATA_OFF as u64),
        ("SAR_ONE_SHOT", ONE_SHOT as u64),
        ("SAR_TWO_SHOT", TWO_SHOT as u64),
        ("SAR_LL", LL as u64),
        ("SAR_PIPE", PIPE as u64),
        ("SAR_PIPE_TWO", PIPE_TWO as u64),
        ("SAR_STAGES_MAX", STAGES_MAX as u64),
        ("SCO_BCAST", BCAST as u64),
        ("SCO_ALLGATHER", ALLGATHER as u64),
        ("SCO_ALLTOALL", ALLTOALL as u64),
        ("SCO_REDUCE_SCATTER", REDUCE_SCATTER as u64),
    ]
}

/// The knobs as words of the set-up record.
const WORDS: usize = 9;

/// The knobs of a communicator's calls (`GPUMPI_STREAM_*`), agreed at set-up: every rank uses
/// the smallest value among them, so every rank plans every call the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tune {
    /// Most blocks of a kernel (`GPUMPI_STREAM_BLOCKS`).
    pub blocks: usize,
    /// A block per this many bytes of a slice (`GPUMPI_STREAM_BLOCK_BYTES`).
    pub block_bytes: usize,
    /// LL up to this at 2 ranks (`GPUMPI_STREAM_LL_MAX`).
    pub ll_max: usize,
    /// LL up to this above 2 ranks (`GPUMPI_STREAM_LL_MAX_WIDE`).
    pub ll_max_wide: usize,
    /// Above 2 ranks, two-shot above this (`GPUMPI_STREAM_ONE_SHOT_MAX`).
    pub one_shot_max: usize,
    /// Pipelined from this size at 2 ranks (`GPUMPI_STREAM_PIPE_MIN`; 0: never).
    pub pipe_min: usize,
    /// Pipelined from this size above 2 ranks (`GPUMPI_STREAM_PIPE_MIN_WIDE`; 0: never).
    pub pipe_min_wide: usize,
    /// A pipelined round's slice (`GPUMPI_STREAM_PIPE_CHUNK`; 0: one stage).
    pub pipe_chunk: usize,
    /// Stages of a pipelined call (`GPUMPI_STREAM_STAGES`).
    pub stages: usize,
}

impl Tune {
    /// The built-in defaults (docs/ENV.md).
    pub const DEFAULT: Tune = Tune {
        blocks: 128,
        block_bytes: 4 << 10,
        ll_max: 512 << 10,
        ll_max_wide: 256 << 10,
        one_shot_max: 512 << 10,
        pipe_min: 0,
        pipe_min_wide: 8 << 20,
        pipe_chunk: 0,
        stages: 4,
    };

    /// This rank's knobs from the environment, within their ranges.
    pub fn from_env() -> Tune {
        let g = &crate::config::snapshot().gpu;
        Tune {
            blocks: g.stream_blocks,
            block_bytes: g.stream_block_bytes,
            ll_max: g.stream_ll_max,
            ll_max_wide: g.stream_ll_max_wide,
            one_shot_max: g.stream_one_shot_max,
            pipe_min: g.stream_pipe_min,
            pipe_min_wide: g.stream_pipe_min_wide,
            pipe_chunk: g.stream_pipe_chunk,
            stages: g.stream_stages,
        }
        .clamped()
    }

    /// The knobs within the kernel's ranges.
    pub fn clamped(self) -> Tune {
        Tune {
            blocks: self.blocks.clamp(1, BLOCKS_MAX),
            block_bytes: self.block_bytes.max(1).next_multiple_of(ALIGN),
            stages: self.stages.clamp(2, STAGES_MAX),
            ..self
        }
    }

    fn to_words(self) -> [u64; WORDS] {
        [
            self.blocks,
            self.block_bytes,
            self.ll_max,
            self.ll_max_wide,
            self.one_shot_max,
            self.pipe_min,
            self.pipe_min_wide,
            self.pipe_chunk,
            self.stages,
        ]
        .map(|x| x as u64)
    }

    fn from_words(w: [u64; WORDS]) -> Tune {
        let u = |i: usize| usize::try_from(w[i]).unwrap_or(usize::MAX);
        Tune {
            blocks: u(0),
            block_bytes: u(1),
            ll_max: u(2),
            ll_max_wide: u(3),
            one_shot_max: u(4),
            pipe_min: u(5),
            pipe_min_wide: u(6),
            pipe_chunk: u(7),
            stages: u(8),
        }
        .clamped()
    }

    /// The least of each knob (the agreement of every rank's values).
    pub fn least(self, o: Tune) -> Tune {
        let w = self.to_words();
        let v = o.to_words();
        Tune::from_words(std::array::from_fn(|i| w[i].min(v[i])))
    }

    /// Pipelined from this many bytes for `n` ranks (0: never).
    pub fn pipe_from(&self, n: usize) -> usize {
        if n <= 2 {
            self.pipe_min
        } else {
            self.pipe_min_wide
        }
    }

    /// LL up to this many bytes for `n` ranks (a multiple of 16; 0: never).
    pub fn ll_limit(&self, n: usize) -> usize {
        let m = if n <= 2 {
            self.ll_max
        } else {
            self.ll_max_wide
        };
        m / ALIGN * ALIGN
    }
}

/// Where each area lies in a rank's scratch: the same on every rank (a function of agreed
/// values: the rank count, slot, stage, stages and LL capacity).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Bytes of one sender's slot of flagged rounds.
    pub slot: usize,
    /// Bytes of one sender's stage of pipelined calls.
    pub stage: usize,
    pub stages: usize,
    /// Most data bytes of an LL call (the LL slot holds twice this).
    pub ll_cap: usize,
    pub pipe_off: usize,
    pub ll_off: usize,
    /// The scratch's bytes.
    pub bytes: usize,
}

impl Layout {
    /// The areas for `n` ranks with these sizes, one after another from DATA_OFF: flagged push
    /// (and gather) areas, pipelined stages (and gather stages), the LL area.
    pub fn new(n: usize, slot: usize, stage: usize, stages: usize, ll_cap: usize) -> Layout {
        let areas = if n > 2 { 4 } else { 2 };
        let gathers = if n > 2 { 2 } else { 1 };
        let pipe_off = DATA_OFF + areas * n * slot;
        let ll_off = pipe_off + gathers * stages * n * stage;
        Layout {
            slot,
            stage,
            stages,
            ll_cap,
            pipe_off,
            ll_off,
            bytes: ll_off + 2 * n * 2 * ll_cap,
        }
    }

    /// The layout of this rank's scratch for `n` ranks within `budget` bytes: the LL area for
    /// `t`'s LL limit (at most a quarter of the budget), the rest in halves between the flagged
    /// slots and the pipelined stages (64 KiB multiples, at least 64 KiB each, so a tiny budget
    /// still gets a working scratch).
    pub fn for_budget(n: usize, budget: usize, t: &Tune) -> Layout {
        let n = n.max(1);
        let ll_cap = t.ll_limit(n).min(budget / 4 / (4 * n) / ALIGN * ALIGN);
        let rest = budget.saturating_sub(DATA_OFF + 4 * n * ll_cap) / 2;
        let areas = if n > 2 { 4 } else { 2 };
        let gathers = if n > 2 { 2 } else { 1 };
        let slot = (rest / (areas * n) / UNIT * UNIT).max(UNIT);
        let stage = (rest / (gathers * t.stages * n) / UNIT * UNIT).max(UNIT);
        Layout::new(n, slot, stage, t.stages, ll_cap)
    }
}

/// How one call runs: the same on every rank (a function of the vector's bytes, the rank
/// count, the agreed layout and knobs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    pub algo: u32,
    /// Blocks of the kernel (pipelined: roles x parts).
    pub blocks: usize,
    /// Pipelined: blocks of each role (else the same as `blocks`).
    pub parts: usize,
    /// Bytes of one rank's slice of a round (one-shot, LL: the whole round).
    pub slice: usize,
    /// Bytes of a slice each block (part) takes (block b: `[b * per, (b + 1) * per)`, clipped).
    pub per: usize,
    pub rounds: usize,
}

/// The algorithm's name in the debug log.
pub fn algo_name(algo: u32) -> &'static str {
    match algo {
        ONE_SHOT => "one-shot",
        TWO_SHOT => "two-shot",
        LL => "one-shot LL",
        PIPE => "pipelined one-shot",
        BCAST => "bcast",
        ALLGATHER => "allgather",
        ALLTOALL => "alltoall",
        REDUCE_SCATTER => "reduce_scatter_block",
        _ => "pipelined two-shot",
    }
}

/// Bytes of each round's slice when `want` bytes move in rounds of at most `most` (a multiple of
/// [`ALIGN`]): one round when they fit; else as few rounds as fit, of one size rounded up to
/// [`UNIT`] (within `most`), so that no round is a small remainder that costs a whole round's
/// flags and waits (16 MiB at 2 ranks with ~15.5 MiB slots: two rounds of 8 MiB, not 15.5 and
/// 0.5), while every round still starts at a 64 KiB multiple of the vector (rounds of 16-byte
/// multiples only, whose blocks' parts straddle cache lines, were 1-7% slower from 256 MiB on 2x
/// H200, benches/NOTES.md). The last round takes what is left.
fn even_slice(want: usize, most: usize) -> usize {
    if want <= most {
        return want.next_multiple_of(ALIGN);
    }
    let rounds = want.div_ceil(most.max(1));
    want.div_ceil(rounds).next_multiple_of(UNIT).min(most)
}

/// The plan of an allreduce of `bytes` (> 0) over `n` ranks with scratch layout `l` and knobs
/// `t`: LL up to `t.ll_limit(n)` (within the LL area), pipelined from `t.pipe_from(n)`, flagged
/// rounds between; two-shot above `t.one_shot_max` with more than 2 ranks.
pub fn plan(bytes: usize, n: usize, l: &Layout, t: &Tune) -> Plan {
    let t = t.clamped();
    let blocks_for =
        |slice: usize, most: usize| slice.div_ceil(t.block_bytes).clamp(1, most.max(1));
    if bytes <= t.ll_limit(n).min(l.ll_cap) {
        let slice = bytes.next_multiple_of(ALIGN);
        let blocks = blocks_for(slice, t.blocks);
        return Plan {
            algo: LL,
            blocks,
            parts: blocks,
            slice,
            per: slice.div_ceil(blocks).next_multiple_of(ALIGN),
            rounds: 1,
        };
    }
    let two = n > 2 && bytes > t.one_shot_max;
    let want = if two { bytes.div_ceil(n) } else { bytes };
    if t.pipe_from(n) > 0 && bytes >= t.pipe_from(n) {
        let roles = if two { 3 } else { 2 };
        let chunk = if t.pipe_chunk == 0 {
            l.stage
        } else {
            t.pipe_chunk.next_multiple_of(ALIGN).min(l.stage)
        };
        // Pipelined rounds keep whole stages (4 ranks on 4x H200: even rounds were 4-8% faster
        // at 8-32 MiB and 3% slower at 64-128 MiB; benches/NOTES.md).
        let slice = want.next_multiple_of(ALIGN).min(chunk);
        let parts = blocks_for(slice, t.blocks / roles);
        let round = if two { slice * n } else { slice };
        return Plan {
            algo: if two { PIPE_TWO } else { PIPE },
            blocks: roles * parts,
            parts,
            slice,
            per: slice.div_ceil(parts).next_multiple_of(ALIGN),
            rounds: bytes.div_ceil(round),
        };
    }
    let slice = even_slice(want, l.slot);
    let blocks = blocks_for(slice, t.blocks);
    let round = if two { slice * n } else { slice };
    Plan {
        algo: if two { TWO_SHOT } else { ONE_SHOT },
        blocks,
        parts: blocks,
        slice,
        per: slice.div_ceil(blocks).next_multiple_of(ALIGN),
        rounds: bytes.div_ceil(round),
    }
}

/// The plan of a collective of kernels/stream_coll.cuh (`algo`: one of [`BCAST`],
/// [`ALLGATHER`], [`ALLTOALL`], [`REDUCE_SCATTER`]) whose ranks' blocks are `bytes` (> 0) each,
/// over the flagged rounds' slots of layout `l`: a round carries `slice` bytes of every block
/// (at most a slot, the same in every round: [`even_slice`]), a block per `t.block_bytes` of
/// the slice.
pub fn coll_plan(algo: u32, bytes: usize, l: &Layout, t: &Tune) -> Plan {
    let t = t.clamped();
    let slice = even_slice(bytes, l.slot);
    let blocks = slice.div_ceil(t.block_bytes).clamp(1, t.blocks.max(1));
    Plan {
        algo,
        blocks,
        parts: blocks,
        slice,
        per: slice.div_ceil(blocks).next_multiple_of(ALIGN),
        rounds: bytes.div_ceil(slice),
    }
}

/// Whether a bcast, allgather, alltoall or reduce_scatter_block with these shared arguments
/// takes its kernel: `bytes` is one rank's block, `contiguous` whether every buffer's datatype
/// is contiguous for its count, `red` (reduce_scatter_block only) the kernel's op and type.
pub fn coll_eligible(
    algo: u32,
    bytes: usize,
    contiguous: bool,
    red: Option<Option<(KOp, KType)>>,
) -> Result<(), String> {
    if bytes == 0 {
        return Err("nothing to move".into());
    }
    if let Some(r) = red {
        call_eligible(bytes, r, contiguous)?;
    }
    if !contiguous {
        return Err("the datatype is not contiguous".into());
    }
    debug_assert!((BCAST..=REDUCE_SCATTER).contains(&algo));
    Ok(())
}

/// Whether a stream communicator of `nranks` ranks may ever use the kernel (`one_node`: all its
/// ranks on one node); why not. Values every rank shares.
pub fn comm_eligible(nranks: usize, one_node: bool) -> Result<(), String> {
    let cfg = &crate::config::snapshot().gpu;
    if !cfg.stream_kernel {
        return Err("GPUMPI_STREAM_KERNEL=0".into());
    }
    if !(2..=MAXP).contains(&nranks) {
        return Err(format!(
            "{nranks} rank(s) (the stream kernel serves 2 to {MAXP})"
        ));
    }
    if !one_node {
        return Err("the ranks are not all on one node".into());
    }
    match super::device::mode() {
        Some(super::device::Mode::Ipc) => Ok(()),
        Some(super::device::Mode::Host) => Err("CUDA IPC is off (GPUMPI_CUDA_IPC=0)".into()),
        None => Err(
            "GPU-native collectives are off (GPUMPI_GPU_COLL=0, no NVIDIA driver or no kernels)"
                .into(),
        ),
    }
}

/// Whether a call with these shared arguments takes the kernel: `red` is the kernel's op and
/// type (None: not one the kernels reduce), `contiguous` whether the datatype is contiguous for
/// the count. Values every rank shares (MPI requires the same count, datatype and op).
pub fn call_eligible(
    bytes: usize,
    red: Option<(KOp, KType)>,
    contiguous: bool,
) -> Result<(), String> {
    if bytes == 0 {
        return Err("nothing to reduce".into());
    }
    if red.is_none() {
        return Err("the op or datatype is not one the kernels reduce (SUM, PROD, MIN, MAX on 32/64-bit integers, float, double, half, bfloat16)".into());
    }
    if !contiguous {
        return Err("the datatype is not contiguous".into());
    }
    Ok(())
}

/// One stream communicator's scratch on this rank and its peers' as mapped here (kept in the
/// private duplicate's GPU state, so freed with it).
pub(crate) struct Scratch {
    ordinal: i32,
    addr: usize,
    bytes: usize,
    export: Option<Export>,
    /// The peers' scratch mapped here: (world rank, buffer id).
    mapped: Vec<(usize, u64)>,
}

impl PathState for Scratch {
    fn close_mappings(&mut self) {
        for (peer, id) in self.mapped.drain(..) {
            if ipc::release_pinned(peer, id, self.ordinal) {
                super::comm::add_mappings(-1);
            }
        }
    }

    /// Free my scratch (the stream finished, and no peer maps it any more).
    fn free(self) {
        if let Some(d) = super::gpu().and_then(|g| g.device(self.ordinal).ok()) {
            let _ = cuda::with_context(d.ctx, || {
                // SAFETY: allocated by `setup`; the stream communicator's stream has finished
                // (it is synchronized before its duplicate is freed) and no peer maps it.
                unsafe { cuda::mem_free(self.addr) };
                Ok(())
            });
            if let Some(e) = self.export {
                ipc::forget_export(e.buffer_id);
            }
            super::comm::add_device(-(self.bytes as i64));
        }
    }

    /// Keep the scratch allocated until the process ends (a peer may still map it).
    fn leak(self) {}
}

/// A stream communicator set up for the kernel: what each launch needs.
#[derive(Clone, Copy, Debug)]
pub struct Ready {
    pub ordinal: i32,
    pub nranks: usize,
    pub rank: usize,
    pub peers: [u64; MAXP],
    /// The scratch's areas (the same on every rank).
    pub layout: Layout,
    /// The knobs (the least of the ranks' `GPUMPI_STREAM_*`).
    pub tune: Tune,
}

/// Where a set-up record's words start: after ok, pid, device UUID and scratch export.
const REC_WORDS: usize = 1 + 4 + 16 + EXPORT_BYTES;
/// Bytes of a rank's set-up record: ok, pid, device UUID, scratch export, then slot, stage,
/// LL capacity and the knobs as u64.
const REC: usize = REC_WORDS + 8 * (3 + WORDS);
const _: () = assert!(REC <= super::comm::RECORD_MAX);

/// Set the kernel up for a stream communicator (collective over `host`, the communicator's
/// private duplicate; `device`: the device of this rank's stream, or why this rank cannot use
/// it). `Ok(Err(why))`: some rank cannot (the same answer on every rank); the communicator's
/// calls then keep the fallback.
pub(crate) fn setup(
    host: &dyn Host,
    device: Result<i32, String>,
    nranks: usize,
    rank: usize,
) -> MpiResult<Result<Ready, String>> {
    cuda::with_relaxed_capture(|| setup_relaxed(host, device, nranks, rank))
}

fn setup_relaxed(
    host: &dyn Host,
    device: Result<i32, String>,
    nranks: usize,
    rank: usize,
) -> MpiResult<Result<Ready, String>> {
    let budget = crate::config::snapshot().gpu.stream_scratch;
    let tune = Tune::from_env();
    let layout = Layout::for_budget(nranks, budget, &tune);
    let state = host.gpu().state();
    let list = state.of::<Scratch>();
    // My scratch, allocated and exported (None where this rank cannot).
    let mine: Result<(i32, usize, Export), String> = (|| {
        let ordinal = device?;
        let g = super::gpu().ok_or("CUDA is not available")?;
        let d = g.device(ordinal)?;
        g.kernels(ordinal)?
            .stream_ar
            .ok_or("the library's kernels lack gpumpi_stream_allreduce")?;
        let bytes = layout.bytes;
        let addr = cuda::with_context(d.ctx, || {
            let p = cuda::mem_alloc(bytes)?;
            // SAFETY: a fresh allocation of `bytes` bytes, zeroed on gpumpi's own stream (not
            // the application's, which may be capturing), synchronized before any peer sees it.
            unsafe { cuda::memset_async(p, 0, bytes, d.stream)? };
            cuda::stream_synchronize(d.stream)?;
            Ok(p)
        })
        .map_err(|e| e.to_string())?;
        super::comm::add_device(bytes as i64);
        let export = ipc::export(addr).map(|(e, _)| e);
        list.lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Scratch {
                ordinal,
                addr,
                bytes,
                export,
                mapped: Vec::new(),
            });
        let e = export.ok_or("the scratch cannot be exported with CUDA IPC")?;
        Ok((ordinal, addr, e))
    })();
    let uuid = mine
        .as_ref()
        .ok()
        .and_then(|m| super::device::device_uuid(m.0));
    let mut rec = [0u8; REC];
    if let (Ok((_, _, e)), Some(u)) = (&mine, uuid) {
        rec[0] = 1;
        rec[5..21].copy_from_slice(&u);
        rec[21..REC_WORDS].copy_from_slice(&e.to_bytes());
    }
    rec[1..5].copy_from_slice(&std::process::id().to_le_bytes());
    let words: Vec<u64> = [layout.slot, layout.stage, layout.ll_cap]
        .map(|x| x as u64)
        .into_iter()
        .chain(tune.to_words())
        .collect();
    for (i, w) in words.iter().enumerate() {
        rec[REC_WORDS + 8 * i..REC_WORDS + 8 * i + 8].copy_from_slice(&w.to_le_bytes());
    }
    let all = host.allgather(&rec)?;
    let recs: Vec<&[u8]> = all.chunks(REC).collect();
    if let Some(p) = recs.iter().position(|r| r[0] != 1) {
        let why = match (&mine, p == rank) {
            (Err(e), true) => e.clone(),
            _ => format!("rank {p} cannot set up its scratch"),
        };
        return Ok(Err(why));
    }
    let uuid_of = |r: &[u8]| -> [u8; 16] { r[5..21].try_into().expect("16 bytes") };
    if (0..nranks).any(|i| (0..i).any(|j| uuid_of(recs[i]) == uuid_of(recs[j]))) {
        return Ok(Err(
            "two ranks share a GPU (the kernel needs one rank per GPU)".into(),
        ));
    }
    // The least of every rank's word i: sizes every rank's scratch holds, knobs every rank
    // plans with.
    let least = |i: usize| {
        let at = REC_WORDS + 8 * i;
        recs.iter()
            .map(|r| u64::from_le_bytes(r[at..at + 8].try_into().expect("8 bytes")))
            .min()
            .unwrap_or(0)
    };
    let tune = Tune::from_words(std::array::from_fn(|i| least(3 + i)));
    let as_usize = |w: u64| usize::try_from(w).unwrap_or(usize::MAX);
    let layout = Layout::new(
        nranks,
        as_usize(least(0)),
        as_usize(least(1)),
        tune.stages,
        as_usize(least(2)),
    );
    // Every rank maps every peer's scratch from here on: its release waits for every rank.
    state
        .shared
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let (ordinal, my_addr, _) = mine.expect("my record said ok");
    let mut peers = [0u64; MAXP];
    let mut failed = None;
    {
        let mut l = list.lock().unwrap_or_else(|e| e.into_inner());
        let st = l
            .iter_mut()
            .find(|s| s.addr == my_addr)
            .expect("pushed above");
        for (p, r) in recs.iter().enumerate() {
            if p == rank {
                peers[p] = my_addr as u64;
                continue;
            }
            let e = Export::from_bytes(&r[21..REC_WORDS]).expect("an export");
            match ipc::import_pinned(host.world_rank(p), &e, ordinal) {
                Ok(a) => {
                    st.mapped.push((host.world_rank(p), e.buffer_id));
                    super::comm::add_mappings(1);
                    peers[p] = a as u64;
                }
                Err(x) => {
                    failed.get_or_insert(format!("mapping rank {p}'s scratch: {x}"));
                }
            }
        }
    }
    if !host.all(failed.is_none())? {
        return Ok(Err(failed.unwrap_or_else(|| {
            "another rank could not map its peers' scratch".into()
        })));
    }
    super::comm::log("stream kernel scratch set up");
    Ok(Ok(Ready {
        ordinal,
        nranks,
        rank,
        peers,
        layout,
        tune,
    }))
}

impl Ready {
    /// The fields every kernel's parameter shares: the communicator's peers and rank, the
    /// buffers `src` -> `dst` of `bytes`, and the block split of plan `p`.
    fn common(&self, src: u64, dst: u64, bytes: usize, p: &Plan) -> StreamAr {
        StreamAr {
            peers: self.peers,
            src,
            dst,
            bytes: bytes as u64,
            slice: p.slice as u64,
            per: p.per as u64,
            slot: self.layout.slot as u64,
            nranks: self.nranks as u32,
            rank: self.rank as u32,
            parts: p.parts as u32,
            ..StreamAr::default()
        }
    }

    /// The kernel's parameter for an allreduce of `bytes` from `src` into `dst` (device
    /// addresses the kernel may read and write; equal in place), and the plan it follows.
    pub fn params(&self, src: u64, dst: u64, bytes: usize, red: (KOp, KType)) -> (StreamAr, Plan) {
        let p = plan(bytes, self.nranks, &self.layout, &self.tune);
        let l = &self.layout;
        let a = StreamAr {
            stage: l.stage as u64,
            pipe_off: l.pipe_off as u64,
            ll_off: l.ll_off as u64,
            ll_slot: 2 * l.ll_cap as u64,
            op: red.0.code(),
            ty: red.1.code(),
            algo: p.algo,
            stages: l.stages as u32,
            ..self.common(src, dst, bytes, &p)
        };
        (a, p)
    }

    /// The kernel's parameter for a collective of kernels/stream_coll.cuh (`algo`) whose
    /// ranks' blocks are `bytes` each, from `src` into `dst` (device addresses; the input where
    /// the standard puts it in place); `op` is the root for [`BCAST`], and `red` the op and type
    /// for [`REDUCE_SCATTER`].
    pub fn coll_params(
        &self,
        algo: u32,
        src: u64,
        dst: u64,
        bytes: usize,
        root: usize,
        red: Option<(KOp, KType)>,
    ) -> (StreamAr, Plan) {
        let p = coll_plan(algo, bytes, &self.layout, &self.tune);
        let a = StreamAr {
            op: red.map_or(root as u32, |r| r.0.code()),
            ty: red.map_or(0, |r| r.1.code()),
            algo,
            ..self.common(src, dst, bytes, &p)
        };
        (a, p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's part of a slice for block `b` (sar_part).
    fn part(per: usize, slen: usize, b: usize) -> (usize, usize) {
        let s = (b * per).min(slen);
        let e = (b * per + per).min(slen);
        (s, e - s)
    }

    /// Walk a call as the kernel does and return, for every byte of the vector, how many
    /// (round, slice, part) pieces cover it; check every piece lies in its slot, stage or LL
    /// slot, 16-aligned, and the grid fits the flag arrays.
    fn coverage(bytes: usize, n: usize, l: &Layout, t: &Tune) -> Vec<u8> {
        let p = plan(bytes, n, l, t);
        let pipe = p.algo == PIPE || p.algo == PIPE_TWO;
        let two = p.algo == TWO_SHOT || p.algo == PIPE_TWO;
        let roles = match p.algo {
            PIPE => 2,
            PIPE_TWO => 3,
            _ => 1,
        };
        assert_eq!(p.blocks, roles * p.parts, "{p:?}");
        assert!(p.parts >= 1 && p.blocks <= BLOCKS_MAX, "{p:?}");
        if !pipe {
            assert!(p.blocks <= t.blocks.max(1), "{p:?} {t:?}");
        }
        let room = match p.algo {
            LL => l.ll_cap,
            PIPE | PIPE_TWO => l.stage,
            _ => l.slot,
        };
        assert!(p.slice <= room && p.slice.is_multiple_of(ALIGN) && p.per.is_multiple_of(ALIGN));
        assert!(p.per * p.parts >= p.slice, "{p:?}");
        let round = if two { p.slice * n } else { p.slice };
        assert_eq!(p.rounds, bytes.div_ceil(round));
        if p.algo == LL {
            assert_eq!(p.rounds, 1);
        }
        let mut seen = vec![0u8; bytes];
        for r in 0..p.rounds {
            let at = r * round;
            let rlen = (bytes - at).min(round);
            let slices = if two { n } else { 1 };
            for q in 0..slices {
                let s0 = q * p.slice;
                let slen = if s0 >= rlen {
                    0
                } else {
                    (rlen - s0).min(p.slice)
                };
                for b in 0..p.parts {
                    let (off, len) = part(p.per, slen, b);
                    assert!(off + len <= p.slice, "inside the slot");
                    assert!(len == 0 || off.is_multiple_of(ALIGN));
                    if p.algo == LL {
                        // The LL words of the part: 16 bytes per 8 data bytes, in the LL slot.
                        assert!(2 * off + 16 * len.div_ceil(8) <= 2 * l.ll_cap);
                    }
                    if len == 0 {
                        continue;
                    }
                    for x in &mut seen[at + s0 + off..at + s0 + off + len] {
                        *x += 1;
                    }
                }
            }
        }
        seen
    }

    fn small_tune(blocks: usize) -> Tune {
        Tune {
            blocks,
            block_bytes: 4 << 10,
            ll_max: 4 << 10,
            ll_max_wide: 1 << 10,
            one_shot_max: 256 << 10,
            pipe_min: 192 << 10,
            pipe_min_wide: 192 << 10,
            pipe_chunk: 0,
            stages: 3,
        }
    }

    /// Every byte of the vector is covered exactly once, for every rank count and algorithm,
    /// around LL, block, slot, stage and pipelined boundaries, odd sizes and the one-shot /
    /// two-shot switch.
    #[test]
    fn plans_cover_every_byte_once() {
        for n in 2..=MAXP {
            for blocks in [1, 2, 3, 7, 32, 64, 128] {
                let t = small_tune(blocks);
                let l = Layout::new(n, 64 << 10, 64 << 10, t.stages, 4 << 10);
                let slot = l.slot;
                for bytes in [
                    1usize,
                    2,
                    4,
                    8,
                    12,
                    15,
                    16,
                    17,
                    1 << 10,
                    (1 << 10) + 4,
                    4096 - 4,
                    4096,
                    4096 + 4,
                    t.block_bytes * 3 + 2,
                    slot - 8,
                    slot,
                    slot + 8,
                    2 * slot + 6,
                    t.pipe_min - 4,
                    t.pipe_min,
                    t.one_shot_max,
                    t.one_shot_max + 2,
                    n * slot + 4,
                    3 * n * slot - 2,
                    2 * t.stages * n * l.stage + 20,
                    1_000_003 * 2,
                ] {
                    let c = coverage(bytes, n, &l, &t);
                    assert!(
                        c.iter().all(|&x| x == 1),
                        "n={n} bytes={bytes} blocks={blocks}"
                    );
                }
            }
        }
    }

    /// Run a collective of kernels/stream_coll.cuh as its kernel does, on every rank, through a
    /// model of the ranks' slots: each round's pushes land in slot (parity, sender) of the
    /// receiver (each byte tagged with its origin and round), and each receiver reads its slots
    /// of the round after the pushes. Returns, per rank, the origins (rank, input byte) that
    /// reached each output byte (reduce_scatter_block: all its operands).
    // Indices as the kernel computes them (rank, byte of a slot), not iterators.
    #[allow(clippy::needless_range_loop)]
    fn run_coll(
        algo: u32,
        bytes: usize,
        n: usize,
        root: usize,
        l: &Layout,
        t: &Tune,
    ) -> Vec<Vec<Vec<(usize, usize)>>> {
        let p = coll_plan(algo, bytes, l, t);
        assert_eq!(p.blocks, p.parts);
        assert!(
            p.blocks >= 1 && p.blocks <= t.blocks.max(1) && p.blocks <= BLOCKS_MAX,
            "{p:?}"
        );
        assert!(p.slice <= l.slot && p.slice.is_multiple_of(ALIGN) && p.per.is_multiple_of(ALIGN));
        assert!(
            p.per * p.blocks >= p.slice && p.rounds == bytes.div_ceil(p.slice),
            "{p:?}"
        );
        let out_len = match algo {
            BCAST | REDUCE_SCATTER => bytes,
            _ => n * bytes,
        };
        let mut out = vec![vec![Vec::new(); out_len]; n];
        // slots[receiver][sender]: (origin rank, origin byte, round) per slot byte.
        let mut slots = vec![vec![vec![None::<(usize, usize, usize)>; l.slot]; n]; n];
        for r in 0..p.rounds {
            let at = r * p.slice;
            let slen = (bytes - at).min(p.slice);
            // Pushes of every rank's every block (the same parts on every rank).
            for me in 0..n {
                for b in 0..p.blocks {
                    let (off, len) = part(p.per, slen, b);
                    assert!(off + len <= p.slice && (len == 0 || off.is_multiple_of(ALIGN)));
                    for q in (0..n).filter(|&q| q != me) {
                        // The byte of my input that goes to q's slot, if any.
                        let from = match algo {
                            BCAST if me != root => continue,
                            BCAST | ALLGATHER => 0,
                            _ => q * bytes,
                        };
                        for k in off..off + len {
                            slots[q][me][k] = Some((me, from + at + k, r));
                        }
                    }
                }
            }
            // Each rank reads its slots of the round (after every peer's flag).
            for me in 0..n {
                for b in 0..p.blocks {
                    let (off, len) = part(p.per, slen, b);
                    for k in off..off + len {
                        let o = at + k;
                        let got = |q: usize| {
                            let (from, i, rr) = slots[me][q][k].expect("pushed");
                            assert_eq!((from, rr), (q, r), "slot of rank {q} at {me}");
                            (from, i)
                        };
                        match algo {
                            BCAST => {
                                let x = if me == root { (root, o) } else { got(root) };
                                out[me][o].push(x);
                            }
                            ALLGATHER | ALLTOALL => {
                                for q in 0..n {
                                    let x = if q == me {
                                        (me, if algo == ALLGATHER { o } else { me * bytes + o })
                                    } else {
                                        got(q)
                                    };
                                    out[me][q * bytes + o].push(x);
                                }
                            }
                            _ => {
                                for q in 0..n {
                                    let x = if q == me {
                                        (me, me * bytes + o)
                                    } else {
                                        got(q)
                                    };
                                    out[me][o].push(x);
                                }
                            }
                        }
                    }
                }
            }
        }
        out
    }

    /// Every byte of every collective of kernels/stream_coll.cuh reaches its place once, from
    /// the right rank and byte: 2 to 8 ranks, 1 to 128 CUDA blocks, one and many rounds.
    #[test]
    fn coll_plans_deliver_every_byte_once() {
        for n in 2..=MAXP {
            for (blocks, block_bytes) in [
                (1, 4 << 10),
                (3, 4 << 10),
                (128, 4 << 10),
                (128, 512),
                (7, 16),
                (128, 16),
            ] {
                let t = Tune {
                    blocks,
                    block_bytes,
                    ..Tune::DEFAULT
                };
                // Small slots: several rounds at small sizes (the arithmetic is the same).
                let l = Layout::new(n, 16 << 10, 64 << 10, 2, 0);
                let slot = l.slot;
                let sizes = [
                    1usize,
                    4,
                    15,
                    16,
                    17,
                    4092,
                    4096,
                    4100,
                    slot - 4,
                    slot,
                    slot + 4,
                    2 * slot + 20,
                ];
                for bytes in sizes {
                    if n > 4 && bytes > slot && blocks != 128 {
                        continue;
                    }
                    for algo in [BCAST, ALLGATHER, ALLTOALL, REDUCE_SCATTER] {
                        let root = (bytes + n / 2) % n;
                        let out = run_coll(algo, bytes, n, root, &l, &t);
                        for (me, o) in out.iter().enumerate() {
                            for (i, x) in o.iter().enumerate() {
                                let (blk, k) = (i / bytes, i % bytes);
                                let want: Vec<(usize, usize)> = match algo {
                                    BCAST => vec![(root, i)],
                                    ALLGATHER => vec![(blk, k)],
                                    ALLTOALL => vec![(blk, me * bytes + k)],
                                    _ => (0..n).map(|q| (q, me * bytes + i)).collect(),
                                };
                                assert_eq!(
                                    x, &want,
                                    "{} n={n} bytes={bytes} blocks={blocks}/{block_bytes} rank {me} byte {i}",
                                    algo_name(algo)
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    /// The collectives' plans: a block per GPUMPI_STREAM_BLOCK_BYTES of a round, a round per
    /// slot; who takes the kernel.
    #[test]
    fn coll_plan_choices() {
        let t = Tune::DEFAULT;
        let l = Layout::for_budget(4, 128 << 20, &t);
        let p = coll_plan(ALLTOALL, 8, &l, &t);
        assert_eq!((p.blocks, p.rounds, p.slice), (1, 1, 16));
        let p = coll_plan(ALLGATHER, 32 << 10, &l, &t);
        assert_eq!((p.blocks, p.per, p.rounds), (8, 4 << 10, 1));
        // More than a slot: as few rounds as fit, of one size.
        let p = coll_plan(BCAST, 16 << 20, &l, &t);
        let rounds = (16usize << 20).div_ceil(l.slot);
        assert!(rounds > 1);
        assert_eq!(
            (p.blocks, p.slice, p.rounds),
            (
                128,
                (16usize << 20).div_ceil(rounds).next_multiple_of(UNIT),
                rounds
            )
        );
        let small = Layout::for_budget(2, 256 << 10, &t);
        assert_eq!(small.slot, 64 << 10);
        let p = coll_plan(REDUCE_SCATTER, (64 << 10) + 4, &small, &t);
        assert_eq!(
            (p.slice, p.rounds, p.blocks),
            (64 << 10, 2, 16),
            "rounds start at 64 KiB multiples: a slot, then the 4 bytes left"
        );
        assert!(coll_eligible(BCAST, 4, true, None).is_ok());
        assert!(coll_eligible(ALLTOALL, 0, true, None)
            .unwrap_err()
            .contains("nothing"));
        assert!(coll_eligible(ALLGATHER, 4, false, None)
            .unwrap_err()
            .contains("contiguous"));
        let red = Some((KOp::Sum, KType::I32));
        assert!(coll_eligible(REDUCE_SCATTER, 4, true, Some(red)).is_ok());
        assert!(coll_eligible(REDUCE_SCATTER, 4, true, Some(None))
            .unwrap_err()
            .contains("op"));
    }

    /// Which algorithm takes which size; block counts from GPUMPI_STREAM_BLOCK_BYTES.
    #[test]
    fn plan_choices() {
        let t = Tune::DEFAULT;
        let l2 = Layout::for_budget(2, 128 << 20, &t);
        let l4 = Layout::for_budget(4, 128 << 20, &t);
        let p = plan(8, 2, &l2, &t);
        assert_eq!((p.algo, p.blocks, p.rounds, p.slice), (LL, 1, 1, 16));
        // 32 KiB: LL on 8 blocks of 4 KiB; LL up to 512 KiB at 2 ranks, 256 KiB at 4.
        let p = plan(32 << 10, 2, &l2, &t);
        assert_eq!((p.algo, p.blocks, p.per), (LL, 8, 4 << 10));
        assert_eq!(plan(32 << 10, 4, &l4, &t).blocks, 8);
        assert_eq!(plan(512 << 10, 2, &l2, &t).algo, LL);
        assert_eq!(plan((512 << 10) + 16, 2, &l2, &t).algo, ONE_SHOT);
        assert_eq!(plan(256 << 10, 4, &l4, &t).algo, LL);
        assert_eq!(plan((256 << 10) + 16, 4, &l4, &t).algo, ONE_SHOT);
        // 2 MiB at 2 ranks: flagged rounds, one of them, on every block; never pipelined.
        let p = plan(2 << 20, 2, &l2, &t);
        assert_eq!((p.algo, p.blocks, p.rounds), (ONE_SHOT, 128, 1));
        // 16 MiB at 2 ranks, a little more than a slot: two rounds of 8 MiB.
        assert!(l2.slot < 16 << 20 && l2.slot >= 8 << 20);
        let p = plan(16 << 20, 2, &l2, &t);
        assert_eq!((p.algo, p.slice, p.rounds), (ONE_SHOT, 8 << 20, 2));
        // Rounds of one size whatever the remainder: 1 GiB + 16 at 2 ranks.
        let total = (1usize << 30) + 16;
        let p = plan(total, 2, &l2, &t);
        assert!(p.slice <= l2.slot);
        assert_eq!(p.rounds, total.div_ceil(l2.slot));
        assert!(p.slice.is_multiple_of(UNIT), "{p:?}");
        assert!(
            p.slice * (p.rounds - 1) < total,
            "{p:?}: the last round is not empty"
        );
        assert!(
            p.slice * p.rounds - total < UNIT * p.rounds,
            "{p:?}: the last round is short"
        );
        assert_eq!(plan(1 << 30, 2, &l2, &t).algo, ONE_SHOT);
        // 4 ranks: two-shot above 512 KiB, pipelined (3 roles) from 8 MiB.
        assert_eq!(plan(512 << 10, 4, &l4, &t).algo, ONE_SHOT);
        assert_eq!(plan((512 << 10) + 16, 4, &l4, &t).algo, TWO_SHOT);
        assert_eq!(plan(4 << 20, 4, &l4, &t).algo, TWO_SHOT);
        let p = plan(8 << 20, 4, &l4, &t);
        assert_eq!((p.algo, p.parts, p.blocks), (PIPE_TWO, 42, 126));
        assert_eq!(plan(1 << 30, 4, &l4, &t).algo, PIPE_TWO);
        // Pipelining at 2 ranks when asked: 2 roles.
        let pipe2 = Tune {
            pipe_min: 4 << 20,
            ..t
        };
        let p = plan(4 << 20, 2, &l2, &pipe2);
        assert_eq!((p.algo, p.parts, p.blocks), (PIPE, 64, 128));
        assert_eq!(p.rounds, (4usize << 20).div_ceil(l2.stage));
        // The knobs: pipelining off, LL off, one block, a small pipelined round.
        let off = Tune {
            pipe_min_wide: 0,
            ll_max: 0,
            ..t
        };
        assert_eq!(plan(1 << 30, 4, &l4, &off).algo, TWO_SHOT);
        assert_eq!(plan(8, 2, &l2, &off).algo, ONE_SHOT);
        let one = Tune { blocks: 1, ..t };
        assert_eq!(plan(1 << 20, 2, &l2, &one).blocks, 1);
        assert_eq!(
            plan(1 << 30, 4, &l4, &one).blocks,
            3,
            "one block of each role"
        );
        let chunk = Tune {
            pipe_chunk: 1 << 20,
            ..pipe2
        };
        let p = plan(1 << 30, 2, &l2, &chunk);
        assert_eq!((p.slice, p.rounds), (1 << 20, 1024));
    }

    /// Every rank plans with the least of every knob, within the kernel's ranges.
    #[test]
    fn tune_agreement() {
        let a = Tune::DEFAULT;
        let b = Tune {
            blocks: 1000,
            block_bytes: 5,
            stages: 1,
            ll_max: 1 << 20,
            ..a
        };
        let m = a.least(b);
        assert_eq!(m.blocks, 128);
        assert_eq!(m.block_bytes, 16);
        assert_eq!(m.stages, 2);
        assert_eq!(m.ll_max, 512 << 10);
        assert_eq!(b.clamped().blocks, BLOCKS_MAX);
        assert_eq!(Tune::from_words(b.to_words()), b.clamped());
        assert_eq!(Tune { stages: 99, ..a }.clamped().stages, STAGES_MAX);
    }

    /// The choice of path: only shared arguments decide, and each refusal says why.
    #[test]
    fn path_choice() {
        let red = Some((KOp::Sum, KType::F32));
        assert!(call_eligible(4, red, true).is_ok());
        assert!(call_eligible(0, red, true).unwrap_err().contains("nothing"));
        assert!(call_eligible(4, None, true).unwrap_err().contains("op"));
        assert!(call_eligible(4, red, false)
            .unwrap_err()
            .contains("contiguous"));
        // Whatever the node's GPUs: one rank, more than MAXP ranks, or ranks on several nodes
        // never take the kernel.
        assert!(comm_eligible(1, true).is_err());
        assert!(comm_eligible(MAXP + 1, true).is_err());
        assert!(comm_eligible(2, false).is_err());
    }

    /// The areas do not overlap and fit the budget; a layout of agreed (smaller) sizes fits
    /// every rank's scratch.
    #[test]
    fn scratch_layouts() {
        assert_eq!(PFLAG_OFF, 36864);
        assert_eq!(DATA_OFF, 69632);
        let t = Tune::DEFAULT;
        for n in 2..=MAXP {
            let l = Layout::for_budget(n, 32 << 20, &t);
            assert!(l.bytes <= 32 << 20, "n={n} {l:?}");
            assert!(l.slot >= UNIT && l.slot.is_multiple_of(UNIT));
            assert!(l.stage >= UNIT && l.stage.is_multiple_of(UNIT));
            let areas = if n > 2 { 4 } else { 2 };
            let gathers = if n > 2 { 2 } else { 1 };
            assert_eq!(l.pipe_off, DATA_OFF + areas * n * l.slot);
            assert_eq!(l.ll_off, l.pipe_off + gathers * l.stages * n * l.stage);
            assert_eq!(l.bytes, l.ll_off + 4 * n * l.ll_cap);
            assert!(l.pipe_off.is_multiple_of(ALIGN) && l.ll_off.is_multiple_of(ALIGN));
            assert_eq!(l.ll_cap, t.ll_limit(n));
            let small = Layout::new(n, l.slot / 2, UNIT, 2, 0);
            assert!(small.bytes <= l.bytes && small.ll_off <= l.ll_off);
        }
        let l2 = Layout::for_budget(2, 32 << 20, &t);
        assert_eq!(l2.ll_cap, 512 << 10);
        assert!(l2.slot >= 3 << 20 && l2.stage >= 1 << 20, "{l2:?}");
        let l4 = Layout::for_budget(4, 128 << 20, &t);
        assert_eq!(l4.ll_cap, 256 << 10);
        assert!(l4.stage >= 1900 << 10, "{l4:?}");
        // A tiny budget still gets one 64 KiB slot and stage, and an LL area of at most a
        // quarter of it.
        let tiny = Layout::for_budget(8, 256 << 10, &t);
        assert_eq!((tiny.slot, tiny.stage), (UNIT, UNIT));
        assert!(4 * 8 * tiny.ll_cap <= 64 << 10);
    }
}
