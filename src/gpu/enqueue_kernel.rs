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

/// Most blocks of one kernel (`SAR_BLOCKS_MAX`: the flag array's size).
pub const BLOCKS_MAX: usize = 128;
/// Threads per block (`SAR_THREADS`).
pub const THREADS: u32 = 512;
/// Where the flags start in a rank's scratch (`SAR_FLAG_OFF`): after the counter words.
pub const FLAG_OFF: usize = 4096;
/// Where the data starts (`SAR_DATA_OFF`): after 2 phases x 2 parities x blocks x senders flags.
pub const DATA_OFF: usize = FLAG_OFF + 2 * 2 * BLOCKS_MAX * MAXP * 8;
pub const ONE_SHOT: u32 = 0;
pub const TWO_SHOT: u32 = 1;
/// Bytes of a block's part of a slice below which a call uses fewer blocks (one block up to
/// this size: the latency of small calls is one block's flag round trip).
pub const BLOCK_BYTES: usize = 32 << 10;
/// With more than 2 ranks, vectors above this go two-shot (each rank moves 2 (n-1)/n of the
/// vector instead of n - 1 times it); up to it one-shot (one flag exchange instead of two).
pub const ONE_SHOT_MAX: usize = 512 << 10;
/// Alignment of slices and block parts (the kernels' 16-byte vector loads).
const ALIGN: usize = 16;

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
    pub nranks: u32,
    pub rank: u32,
    pub op: u32,
    pub ty: u32,
    pub algo: u32,
    pub pad: u32,
}

const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<StreamAr>() == 8 * MAXP + 48 + 24);
    assert!(offset_of!(StreamAr, src) == 8 * MAXP && offset_of!(StreamAr, slot) == 8 * MAXP + 40);
    assert!(offset_of!(StreamAr, nranks) == 8 * MAXP + 48);
};

/// `StreamAr` as gpu::kabi's test holds it against kernels/stream_ar.cuh.
#[cfg(test)]
pub(crate) fn layouts() -> Vec<super::kabi::Layout> {
    use super::kabi::layout;
    vec![layout!(
        "StreamAr",
        StreamAr,
        "peers" => peers, "src" => src, "dst" => dst, "bytes" => bytes, "slice" => slice,
        "per" => per, "slot" => slot, "nranks" => nranks, "rank" => rank, "op" => op,
        "type" => ty, "algo" => algo, "pad" => pad,
    )]
}

/// The `#define`s of kernels/stream_ar.cuh with their Rust values.
#[cfg(test)]
pub(crate) fn constants() -> Vec<(&'static str, u64)> {
    vec![
        ("SAR_BLOCKS_MAX", BLOCKS_MAX as u64),
        ("SAR_THREADS", THREADS as u64),
        ("SAR_FLAG_OFF", FLAG_OFF as u64),
        ("SAR_DATA_OFF", DATA_OFF as u64),
        ("SAR_ONE_SHOT", ONE_SHOT as u64),
        ("SAR_TWO_SHOT", TWO_SHOT as u64),
    ]
}

/// How one call runs: the same on every rank (a function of the vector's bytes, the rank count,
/// the agreed slot and the block limit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    pub algo: u32,
    pub blocks: usize,
    /// Bytes of one rank's slice of a round (one-shot: the whole round).
    pub slice: usize,
    /// Bytes of a slice each block takes (block b: `[b * per, (b + 1) * per)`, clipped).
    pub per: usize,
    pub rounds: usize,
}

/// The plan of an allreduce of `bytes` (> 0) over `n` ranks with scratch slots of `slot` bytes
/// (a multiple of 16) and at most `max_blocks` blocks.
pub fn plan(bytes: usize, n: usize, slot: usize, max_blocks: usize) -> Plan {
    let two = n > 2 && bytes > ONE_SHOT_MAX;
    let want = if two { bytes.div_ceil(n) } else { bytes };
    let slice = want.next_multiple_of(ALIGN).min(slot);
    let blocks = slice
        .div_ceil(BLOCK_BYTES)
        .clamp(1, max_blocks.clamp(1, BLOCKS_MAX));
    let per = slice.div_ceil(blocks).next_multiple_of(ALIGN);
    let round = if two { slice * n } else { slice };
    Plan {
        algo: if two { TWO_SHOT } else { ONE_SHOT },
        blocks,
        slice,
        per,
        rounds: bytes.div_ceil(round),
    }
}

/// Bytes of a rank's scratch with slots of `slot` bytes: the push area of both parities, and for
/// more than 2 ranks (two-shot) the gather area of both parities.
pub fn scratch_bytes(n: usize, slot: usize) -> usize {
    let areas = if n > 2 { 4 } else { 2 };
    DATA_OFF + areas * n * slot
}

/// The slot of each sender in a rank's scratch for `n` ranks within a scratch budget of
/// `budget` bytes (64 KiB multiples, at least 64 KiB).
pub fn slot_for(n: usize, budget: usize) -> usize {
    let areas = if n > 2 { 4 } else { 2 };
    let unit = 64 << 10;
    (budget.saturating_sub(DATA_OFF) / (areas * n.max(1)) / unit * unit).max(unit)
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
    pub slot: usize,
    /// The most blocks of a kernel (the least of the ranks' `GPUMPI_STREAM_BLOCKS`).
    pub blocks: usize,
}

/// Bytes of a rank's set-up record: ok, pid, device UUID, slot, block limit, scratch export.
const REC: usize = 1 + 4 + 16 + 8 + 8 + EXPORT_BYTES;
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
    let slot = slot_for(nranks, budget);
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
        let bytes = scratch_bytes(nranks, slot);
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
        rec[37..].copy_from_slice(&e.to_bytes());
    }
    rec[1..5].copy_from_slice(&std::process::id().to_le_bytes());
    rec[21..29].copy_from_slice(&(slot as u64).to_le_bytes());
    let blocks = crate::config::snapshot()
        .gpu
        .stream_blocks
        .clamp(1, BLOCKS_MAX);
    rec[29..37].copy_from_slice(&(blocks as u64).to_le_bytes());
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
    let least = |at: usize| {
        recs.iter()
            .map(|r| u64::from_le_bytes(r[at..at + 8].try_into().expect("8 bytes")) as usize)
            .min()
    };
    let slot = least(21).unwrap_or(slot);
    let blocks = least(29).unwrap_or(1);
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
            let e = Export::from_bytes(&r[37..]).expect("an export");
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
        slot,
        blocks,
    }))
}

impl Ready {
    /// The kernel's parameter for an allreduce of `bytes` from `src` into `dst` (device
    /// addresses the kernel may read and write; equal in place), and the plan it follows.
    pub fn params(&self, src: u64, dst: u64, bytes: usize, red: (KOp, KType)) -> (StreamAr, Plan) {
        let p = plan(bytes, self.nranks, self.slot, self.blocks);
        let a = StreamAr {
            peers: self.peers,
            src,
            dst,
            bytes: bytes as u64,
            slice: p.slice as u64,
            per: p.per as u64,
            slot: self.slot as u64,
            nranks: self.nranks as u32,
            rank: self.rank as u32,
            op: red.0.code(),
            ty: red.1.code(),
            algo: p.algo,
            pad: 0,
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
    /// (round, slice, block) parts cover it; check every part lies in its slot, 16-aligned.
    fn coverage(bytes: usize, n: usize, slot: usize, max_blocks: usize) -> Vec<u8> {
        let p = plan(bytes, n, slot, max_blocks);
        assert!(p.blocks >= 1 && p.blocks <= max_blocks.clamp(1, BLOCKS_MAX));
        assert!(p.slice <= slot && p.slice.is_multiple_of(ALIGN) && p.per.is_multiple_of(ALIGN));
        assert!(p.per * p.blocks >= p.slice, "{p:?}");
        let two = p.algo == TWO_SHOT;
        let round = if two { p.slice * n } else { p.slice };
        assert_eq!(p.rounds, bytes.div_ceil(round));
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
                for b in 0..p.blocks {
                    let (off, len) = part(p.per, slen, b);
                    assert!(off + len <= p.slice, "inside the slot");
                    assert!(len == 0 || off.is_multiple_of(ALIGN));
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

    /// Every byte of the vector is covered exactly once, for every rank count, around slot and
    /// block boundaries, odd sizes and the one-shot/two-shot switch.
    #[test]
    fn plans_cover_every_byte_once() {
        let slot = 64 << 10;
        for n in 2..=MAXP {
            for bytes in [
                1usize,
                2,
                4,
                8,
                12,
                15,
                16,
                17,
                4096 + 4,
                BLOCK_BYTES - 2,
                BLOCK_BYTES,
                BLOCK_BYTES + 2,
                slot - 8,
                slot,
                slot + 8,
                2 * slot + 6,
                ONE_SHOT_MAX,
                ONE_SHOT_MAX + 2,
                n * slot + 4,
                3 * n * slot - 2,
                1_000_003 * 2,
            ] {
                for blocks in [1, 3, 32, 64] {
                    let c = coverage(bytes, n, slot, blocks);
                    assert!(
                        c.iter().all(|&x| x == 1),
                        "n={n} bytes={bytes} blocks={blocks}"
                    );
                }
            }
        }
    }

    /// Small calls use one block and one round; large ones many blocks; more than 2 ranks go
    /// two-shot above ONE_SHOT_MAX, 2 ranks never.
    #[test]
    fn plan_choices() {
        let slot = 8 << 20;
        let p = plan(8, 2, slot, 32);
        assert_eq!((p.algo, p.blocks, p.rounds, p.slice), (ONE_SHOT, 1, 1, 16));
        assert_eq!(plan(1 << 30, 2, slot, 32).algo, ONE_SHOT);
        assert_eq!(plan(1 << 30, 2, slot, 32).blocks, 32);
        assert_eq!(plan(1 << 30, 2, slot, 32).rounds, 128);
        assert_eq!(plan(ONE_SHOT_MAX, 4, slot, 32).algo, ONE_SHOT);
        let t = plan(ONE_SHOT_MAX + 16, 4, slot, 32);
        assert_eq!(t.algo, TWO_SHOT);
        assert_eq!(t.rounds, 1);
        assert_eq!(plan(1 << 30, 4, 2 << 20, 32).rounds, (1 << 30) / (8 << 20));
        assert_eq!(
            plan(4 << 20, 2, slot, 0).blocks,
            1,
            "a zero limit means one block"
        );
        assert_eq!(plan(4 << 20, 2, slot, 1000).blocks, BLOCKS_MAX.min(128));
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

    #[test]
    fn scratch_and_slots() {
        assert_eq!(DATA_OFF, 36864);
        let s = slot_for(2, 32 << 20);
        assert_eq!(s % (64 << 10), 0);
        assert!(scratch_bytes(2, s) <= 32 << 20);
        for n in 3..=MAXP {
            let s = slot_for(n, 32 << 20);
            assert!(scratch_bytes(n, s) <= 32 << 20, "n={n}");
            assert!(s >= 64 << 10);
        }
        assert_eq!(
            slot_for(8, 0),
            64 << 10,
            "a tiny budget still gets one 64 KiB slot"
        );
    }
}
