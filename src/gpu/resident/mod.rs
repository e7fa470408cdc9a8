//! Small collectives through a resident kernel (kernels/resident.cuh): no kernel launch and no
//! stream synchronize per call. The host writes a command into mapped pinned memory and spins
//! on a completion word the kernel writes back; the kernels of the ranks exchange the data
//! through per-communicator scratch buffers mapped with CUDA IPC (NVLink stores and flags).
//!
//! Used for blocking `MPI_Allreduce` (vector), `MPI_Alltoall` and `MPI_Allgather` (block) of at
//! most [`SLOT`] bytes (the one-block kernel), and with peer access on up to
//! `GPUMPI_GPU_RESIDENT_MAX` (the wide kernel: one-shot or two-shot allreduce, alltoall and
//! allgather by stores into the peers' scratch; [`mid`] chooses by the table `tuning.txt`), when
//! every rank passes device memory of its own GPU (one rank per GPU:
//! kernels of different processes on one GPU time-slice, so spinning kernels there would wait
//! for each other) and the process is not `MPI_THREAD_MULTIPLE` (one command at a time per
//! process; concurrent collectives on different communicators could otherwise wait on each
//! other's kernel). The first call on a communicator sets it up with one host allgather (scratch
//! exports); after that each kernel's flag says whether its rank's buffers qualify, so ranks
//! agree on the GPU, and fall back together, with no host round per call.
//!
//! The kernel itself, its commands and the scratch layout are in [`kernel`] (which also serves
//! small point-to-point copies). Each kernel (one-block, wide) has its own scratch per
//! communicator, set up at its first call, and its own chain of flag values.

use super::call::{Desc, DESC_BYTES};
use super::comm::{CommGpu, Host, PathState, State};
use super::ipc::{self, Export};
use super::kernels::{KOp, KType, MAXP};
use crate::coll::CollKind;
use crate::mpi::error::{MpiError, MpiResult};
use crate::sys::cuda;
use kernel::{
    with_res, with_wide, ResCmd, ResDesc, DESC_OFF, HOST_SLOT, MID_BLOCKS_MAX, MID_DESC_OFF,
    RES_ALLGATHER, RES_ALLREDUCE, RES_ALLTOALL, RES_AR_TWO_SHOT, RES_MID_LL, RES_MID_LL128,
    SCRATCH, SLOT,
};
use mid::Algo;

pub mod kernel;
pub mod mid;
#[cfg(test)]
mod model;

/// The largest vector or block of the resident path in the current mode.
fn slot_limit() -> usize {
    if super::device::mode() == Some(super::device::Mode::Host) {
        HOST_SLOT
    } else {
        SLOT
    }
}

fn err(e: impl std::fmt::Display) -> MpiError {
    MpiError::new(
        crate::standard::consts::MPI_ERR_OTHER,
        format!("GPU resident collective: {e}"),
    )
}

/// One communicator's scratch on this rank and its peers' scratch as mapped here, kept in the
/// communicator's state ([`super::comm`]).
pub(crate) struct CommRes {
    ordinal: i32,
    /// Device address of my scratch (device memory, or my host region in host mode).
    scratch: usize,
    /// The IPC export of a device scratch this rank allocated (None in host mode, where the
    /// scratch belongs to the communicator's host regions).
    export: Option<Export>,
    peers: [u64; MAXP],
    /// The peers' scratch mapped here: (world rank, buffer id).
    mapped: Vec<(usize, u64)>,
    chain: Chain,
    verified: bool,
    /// The scratch of the wide kernel (mid-size calls), else of the one-block kernel.
    wide: bool,
    /// Bytes of the device scratch this rank allocated (0: host mode's region).
    bytes: usize,
    /// Wide: the blocks every rank's kernel runs (the least of the ranks' counts).
    blocks: usize,
    /// Wide: set-up failed on some rank (its peers' scratch could not be mapped): the
    /// communicator's mid-size calls take the NVLink plans.
    failed: bool,
}

impl PathState for CommRes {
    /// Close the mappings of the peers' scratch (local: the peers' allocations stay).
    fn close_mappings(&mut self) {
        for (peer, id) in self.mapped.drain(..) {
            if ipc::release_pinned(peer, id, self.ordinal) {
                super::comm::add_mappings(-1);
            }
        }
        self.peers = [0; MAXP];
        self.verified = false;
    }

    /// Free my device scratch (once no peer maps it).
    fn free(self) {
        let Some(e) = self.export else { return };
        if let Some(d) = super::gpu().and_then(|g| g.device(self.ordinal).ok()) {
            let _ = cuda::with_context(d.ctx, || {
                // SAFETY: the scratch came from mem_alloc in comm_state; no command of this
                // communicator runs (its collectives returned) and no peer maps it any more.
                unsafe { cuda::mem_free(self.scratch) };
                Ok(())
            });
            ipc::forget_export(e.buffer_id);
            super::comm::add_device(-(self.bytes as i64));
        }
    }

    /// Keep my device scratch allocated until the process ends (a peer may still map it).
    fn leak(self) {}
}

/// The resident algorithm of a call of this shape, if the resident path applies (the same
/// answer on every rank).
pub fn algorithm(
    kind: CollKind,
    nranks: usize,
    bytes: usize,
    thread_multiple: impl FnOnce() -> bool,
) -> Option<Algo> {
    if bytes == 0 || nranks > MAXP || !crate::config::snapshot().gpu.resident {
        return None;
    }
    let ipc = super::device::mode() == Some(super::device::Mode::Ipc);
    mid::select(kind, nranks, bytes, slot_limit(), ipc).filter(|_| !thread_multiple())
}

/// Whether the resident path applies to a call of this shape (the same answer on every rank).
pub fn applies(
    kind: CollKind,
    nranks: usize,
    bytes: usize,
    thread_multiple: impl FnOnce() -> bool,
) -> bool {
    algorithm(kind, nranks, bytes, thread_multiple).is_some()
}

/// What the ABI layer hands over (see [`super::call::Call`]).
pub struct ResCall {
    pub kind: CollKind,
    pub nranks: usize,
    pub rank: usize,
    pub bytes: usize,
    /// Device address the kernel reads (allgather in place: my block of the receive buffer).
    pub src: usize,
    pub dst: usize,
    pub red: Option<(KOp, KType)>,
    /// The GPU of this rank's buffers when they are all contiguous device memory of that GPU
    /// with the right lengths (else this rank does not qualify).
    pub device: Option<i32>,
    /// The call's sequence number on its communicator (the same on every rank).
    pub seq: u64,
}

/// The flag value of a resident call (the kernels wait for exactly this value in every
/// rank's flag): the call's sequence number `seq`, a 16-bit digest `shape` of the call's
/// collective, size, op and type, and the parity bit, the other one than the communicator's
/// previous call's (`prev`: the kernels alternate between two slots, and a rank may reuse a
/// slot only after every peer finished the call before). A function of values the ranks share,
/// so they agree on it by themselves; where they do not (a mismatched call: another size, or
/// `prev` differing after an earlier one), no kernel sees its value from every rank, the
/// waits find the disagreement in the call's records, and the call is given up on every rank
/// (then every rank continues from [`flag_after_stop`]).
pub fn flag_value(prev: u64, seq: u64, shape: u16) -> u64 {
    (seq + 1) << 17 | (shape as u64) << 1 | ((prev & 1) ^ 1)
}

/// The `prev` of the next resident call after call `seq` was given up: the same on every rank.
pub fn flag_after_stop(seq: u64) -> u64 {
    (seq + 1) << 17 | 1
}

/// The chain of flag values of one resident kernel on a communicator ([`flag_value`]), the
/// same on every rank.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct Chain {
    /// The flag value of the kernel's previous call, or [`flag_after_stop`] of the call given
    /// up since.
    prev: u64,
    /// A call was given up since the kernel's previous call.
    stopped: bool,
}

impl Chain {
    /// The flag value of call `seq` of shape `shape`, and whether the ranks must first wait for
    /// each other (a host barrier). After a given-up call they must: a rank's kernel may still
    /// be in that call, its release (every flag word of my scratch at the call's parity, see
    /// [`release`]) not yet written, when a peer that gave up earlier already runs its next
    /// call. The parities do not keep them apart (the call after a stop has parity 0,
    /// whatever the given-up call's was, and even then the peer's next call may be at the
    /// parity of the call before, which this rank may still be reading): the peer's flag of the
    /// new call, written into this rank's scratch, would be overwritten by the release, and this
    /// rank's kernel would wait for it for ever.
    pub(crate) fn next(&mut self, seq: u64, shape: u16) -> (u64, bool) {
        self.prev = flag_value(self.prev, seq, shape);
        (self.prev, std::mem::take(&mut self.stopped))
    }

    /// Call `seq` failed on this rank.
    pub(crate) fn stop(&mut self, seq: u64) {
        self.prev = flag_after_stop(seq);
        self.stopped = true;
    }
}

/// Call `seq` of the communicator failed on this rank (the ranks called different
/// collectives there, or one gave it up): its next resident call's flag continues from
/// [`flag_after_stop`], as on every rank that failed the same call, whatever each rank ran
/// in it, after a host barrier ([`Chain::next`]).
pub fn call_failed(g: &CommGpu, seq: u64) {
    if let Some(st) = g.peek() {
        for x in st
            .of::<CommRes>()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter_mut()
        {
            x.chain.stop(seq);
        }
    }
}

/// The digest of a resident call's shape in its flag value ([`flag_value`]).
fn shape_digest(kind: u32, op: u32, ty: u32, bytes: usize) -> u16 {
    let h = (kind as u64 | (op as u64) << 8 | (ty as u64) << 16 | (bytes as u64) << 24)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (h >> 48) as u16
}

/// The communicator's scratch on device `ordinal`, allocated and exported at first use; its
/// export.
fn comm_state(c: &ResCall, st: &State, ordinal: i32, wide: bool) -> Result<Export, String> {
    let res = st.of::<CommRes>();
    let mut comms = res.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(x) = comms
        .iter()
        .find(|x| x.ordinal == ordinal && x.export.is_some() && x.wide == wide)
    {
        return x.export.ok_or_else(|| "no export".to_string());
    }
    let bytes = if wide {
        mid::scratch_bytes(c.nranks, mid::wide_limit())
    } else {
        SCRATCH
    };
    let g = super::gpu().ok_or("CUDA is not available")?;
    let d = g.device(ordinal)?;
    let scratch = cuda::with_context(d.ctx, || {
        let p = cuda::mem_alloc(bytes)?;
        // SAFETY: p is a fresh allocation of `bytes` bytes; flags start at zero.
        unsafe { cuda::memset_async(p, 0, bytes, d.stream)? };
        cuda::stream_synchronize(d.stream)?;
        Ok(p)
    })
    .map_err(|e| e.to_string())?;
    super::comm::add_device(bytes as i64);
    let Some((export, _)) = ipc::export(scratch) else {
        let _ = cuda::with_context(d.ctx, || {
            // SAFETY: allocated above, never used.
            unsafe { cuda::mem_free(scratch) };
            Ok(())
        });
        super::comm::add_device(-(bytes as i64));
        return Err("scratch not exportable".into());
    };
    comms.push(CommRes {
        ordinal,
        scratch,
        export: Some(export),
        peers: [0; MAXP],
        mapped: Vec::new(),
        chain: Chain::default(),
        verified: false,
        wide,
        bytes,
        blocks: 0,
        failed: false,
    });
    drop(comms);
    tracing::debug!(
        ranks = c.nranks,
        bytes,
        wide,
        "resident collectives: scratch allocated for a communicator"
    );
    super::comm::log("resident scratch allocated");
    Ok(export)
}

/// Set up the resident path of a communicator: one host allgather of (ok, pid, device UUID,
/// scratch export), the peers' scratch mapped, and (once) a host AND that every rank mapped
/// every peer. Without CUDA IPC (`GPUMPI_CUDA_IPC=0`, or a rank that could not map its peers'
/// scratch) the scratch is each rank's pinned shared host region ([`super::hostmem`]).
/// `Ok(false)`: not every rank can (this call stages; the next one asks again).
/// `wide`: the scratch of the wide kernel (peer access only; where some rank cannot map its
/// peers' scratch, the communicator's mid-size calls take the NVLink plans from then on).
fn setup(c: &ResCall, host: &dyn Host, wide: bool) -> MpiResult<bool> {
    let host_mode = super::device::mode() == Some(super::device::Mode::Host);
    // The communicator's state is created only by a rank with device buffers.
    let mine = c.device.and_then(|o| {
        let uuid = super::device::device_uuid(o)?;
        let e = if host_mode {
            None
        } else {
            Some(comm_state(c, &host.gpu().state(), o, wide).ok()?)
        };
        Some((uuid, e, o))
    });
    let rec = Desc {
        ok: mine.is_some(),
        pid: std::process::id(),
        uuid: mine.map_or([0; 16], |m| m.0),
        send: mine.and_then(|(_, e, _)| e),
        recv: None,
        ordinal: -1,
    };
    let all = host.allgather(&rec.to_bytes())?;
    let recs: Vec<Desc> = all.chunks(DESC_BYTES).map(Desc::from_bytes).collect();
    let distinct = (0..recs.len()).all(|i| (0..i).all(|j| recs[i].uuid != recs[j].uuid));
    if recs
        .iter()
        .any(|r| !r.ok || (!host_mode && r.send.is_none()))
        || !distinct
    {
        return Ok(false);
    }
    let (_, export, ordinal) = mine.expect("my record said ok");
    if export.is_none() {
        if wide {
            return Ok(false);
        }
        return setup_host(c, ordinal, host);
    }
    // Every rank is about to map every peer's scratch: from now on releasing the communicator
    // waits until every rank closed its mappings (the same on every rank).
    let state = host.gpu().state();
    state
        .shared
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let res = state.of::<CommRes>();
    let mut comms = res.lock().unwrap_or_else(|e| e.into_inner());
    let st = comms
        .iter_mut()
        .find(|x| x.ordinal == ordinal && x.export.is_some() && x.wide == wide)
        .expect("allocated by comm_state");
    let mut map_err = None;
    for (p, r) in recs.iter().enumerate() {
        let e = r.send.expect("checked above");
        st.peers[p] = if p == c.rank {
            st.scratch as u64
        } else if st.mapped.contains(&(host.world_rank(p), e.buffer_id)) {
            st.peers[p]
        } else {
            match ipc::import_pinned(host.world_rank(p), &e, st.ordinal) {
                Ok(a) => {
                    st.mapped.push((host.world_rank(p), e.buffer_id));
                    super::comm::add_mappings(1);
                    a as u64
                }
                Err(x) => {
                    map_err.get_or_insert(x);
                    0
                }
            }
        };
    }
    if map_err.is_none() {
        let (slot, at) = if wide {
            (mid::wide_limit(), MID_DESC_OFF)
        } else {
            (SLOT, DESC_OFF)
        };
        let desc = ResDesc {
            nranks: c.nranks as u32,
            rank: c.rank as u32,
            slot: slot as u64,
            peers: st.peers,
            host: 0,
        };
        // SAFETY: the descriptor area lies inside this rank's scratch allocation.
        if let Err(e) = unsafe { super::p2p::htod(st.scratch + at, desc_bytes(&desc)) } {
            map_err = Some(e);
        }
    }
    drop(comms);
    let mapped_everywhere = host.all(map_err.is_none())?;
    if wide {
        return setup_wide(c, host, ordinal, mapped_everywhere);
    }
    if !mapped_everywhere {
        tracing::info!(
            "resident collectives: a rank could not map its peers' scratch ({}); \
             trying pinned host memory",
            map_err.as_deref().unwrap_or("on another rank")
        );
        return setup_host(c, ordinal, host);
    }
    if let Some(st) = res
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter_mut()
        .find(|x| x.ordinal == ordinal && x.export.is_some() && !x.wide)
    {
        st.verified = true;
    }
    tracing::debug!(
        ranks = c.nranks,
        "resident collectives ready on a communicator"
    );
    Ok(true)
}

/// The end of the wide kernel's set-up: where every rank mapped every peer's scratch, the
/// ranks agree on the blocks a command runs on (the least of theirs: block b of each rank
/// exchanges flags with block b of every peer); else the communicator's wide state is marked
/// failed (the same on every rank).
fn setup_wide(c: &ResCall, host: &dyn Host, ordinal: i32, mapped: bool) -> MpiResult<bool> {
    let blocks = if mapped {
        let mine = kernel::wide_blocks(ordinal);
        let all = host.allgather(&mine.to_le_bytes())?;
        all.chunks(4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")) as usize)
            .min()
            .unwrap_or(1)
            .clamp(1, MID_BLOCKS_MAX)
    } else {
        0
    };
    let res = host.gpu().state().of::<CommRes>();
    if let Some(st) = res
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter_mut()
        .find(|x| x.ordinal == ordinal && x.export.is_some() && x.wide)
    {
        st.verified = mapped;
        st.failed = !mapped;
        st.blocks = blocks;
    }
    if mapped {
        tracing::debug!(
            ranks = c.nranks,
            blocks,
            "wide resident kernel ready on a communicator"
        );
    } else {
        tracing::info!(
            "wide resident kernel: a rank could not map its peers' scratch; mid-size calls of \
             this communicator take the NVLink plans"
        );
    }
    Ok(mapped)
}

fn desc_bytes(d: &ResDesc) -> &[u8] {
    // SAFETY: a plain repr(C) value viewed as its bytes.
    unsafe {
        std::slice::from_raw_parts(
            d as *const ResDesc as *const u8,
            std::mem::size_of::<ResDesc>(),
        )
    }
}

/// The resident path's set-up in host mode (collective, after every rank agreed it has its own
/// GPU): the scratch of every rank is the start of its pinned shared host region.
fn setup_host(c: &ResCall, ordinal: i32, host: &dyn Host) -> MpiResult<bool> {
    // The resident path never runs at MPI_THREAD_MULTIPLE (`applies`).
    let r = super::hostmem::with_comm(
        c.rank,
        ordinal,
        || false,
        host,
        |hc| {
            let mut peers = [0u64; MAXP];
            peers[..hc.dev.len()].copy_from_slice(&hc.dev);
            let desc = ResDesc {
                nranks: c.nranks as u32,
                rank: c.rank as u32,
                slot: slot_limit() as u64,
                peers,
                host: 1,
            };
            let b = desc_bytes(&desc);
            // SAFETY: my region is mapped and at least SCRATCH bytes long; the kernel reads the
            // descriptor only in commands issued after this (the host's stores are ordered).
            unsafe {
                let dst = hc.own_host().add(DESC_OFF);
                for (k, v) in b.iter().enumerate() {
                    std::ptr::write_volatile(dst.add(k), *v);
                }
            }
            std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
            (hc.dev[c.rank] as usize, peers)
        },
    )?;
    let Some((scratch, peers)) = r else {
        return Ok(false);
    };
    let res = host.gpu().state().of::<CommRes>();
    let mut comms = res.lock().unwrap_or_else(|e| e.into_inner());
    comms.push(CommRes {
        ordinal,
        scratch,
        export: None,
        peers,
        mapped: Vec::new(),
        chain: Chain::default(),
        verified: true,
        wide: false,
        bytes: 0,
        blocks: 0,
        failed: false,
    });
    drop(comms);
    tracing::debug!(
        ranks = c.nranks,
        "resident collectives ready on a communicator (scratch in pinned host memory)"
    );
    Ok(true)
}

/// Whether the communicator's resident kernels are set up here (the same answer on every
/// rank: set-up succeeds or fails collectively).
pub fn ready(g: &CommGpu) -> bool {
    g.peek().is_some_and(|st| {
        st.of::<CommRes>()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .any(|x| x.verified)
    })
}

/// Run the call on the resident kernels if every rank can (`ready`: from [`ready`]; false: set
/// the communicator up first). `Ok(false)`: every rank stages.
/// Once a communicator is set up, no host round is needed: each rank's kernel tells the others
/// in its flag whether its buffers qualify, and all kernels report the same verdict.
///
/// # Safety
/// `src`/`dst` are the caller's live device buffers of the sizes the shape implies.
pub unsafe fn run(c: &ResCall, host: &dyn Host, _ready: bool) -> MpiResult<bool> {
    let algo = algorithm(c.kind, c.nranks, c.bytes, || false)
        .ok_or_else(|| err("called for a call the resident path does not take"))?;
    let wide = algo.wide();
    // Set up at the first call of this kernel (collective: the state is the same on every
    // rank, whatever the other kernel's).
    let (set, failed) = {
        let res = host.gpu().state().of::<CommRes>();
        let comms = res.lock().unwrap_or_else(|e| e.into_inner());
        let mine = || comms.iter().filter(|x| x.wide == wide);
        (mine().any(|x| x.verified), mine().any(|x| x.failed))
    };
    if failed || (!set && !setup(c, host, wide)?) {
        return Ok(false);
    }
    let res = host.gpu().state().of::<CommRes>();
    let mut comms = res.lock().unwrap_or_else(|e| e.into_inner());
    let st = comms
        .iter_mut()
        .find(|x| x.verified && x.wide == wide)
        .ok_or_else(|| err("the communicator's resident state is gone"))?;
    let ok = c.device == Some(st.ordinal);
    let (op, ty) = c.red.map_or((0, 0), |(o, t)| (o.code(), t.code()));
    let mut kind = match (algo, c.kind) {
        (Algo::TwoShot, _) => RES_AR_TWO_SHOT,
        (_, CollKind::Allreduce) => RES_ALLREDUCE,
        (_, CollKind::Alltoall) => RES_ALLTOALL,
        _ => RES_ALLGATHER,
    };
    if wide {
        // The blocks the command runs on, in the kind's upper half, and the LL bit
        // (kernels/resident_mid.cuh).
        kind |= (mid::blocks_for(algo, c.nranks, c.bytes, st.blocks) as u32) << 16;
        if algo.ll() {
            kind |= RES_MID_LL;
        }
        if algo.ll128() {
            kind |= RES_MID_LL128;
        }
    }
    let (flagv, sync) = st.chain.next(c.seq, shape_digest(kind, op, ty, c.bytes));
    let scratch = st.scratch;
    let cmd = ResCmd {
        seq: 0,
        kind,
        op,
        ty,
        ok: ok as u32,
        bytes: c.bytes as u64,
        src: c.src as u64,
        dst: c.dst as u64,
        flagv,
        desc: (st.scratch + if wide { MID_DESC_OFF } else { DESC_OFF }) as u64,
    };
    let ordinal = st.ordinal;
    drop(comms);
    if sync {
        // The first call after a given-up one: every rank's kernel has left that call (and
        // its release is written) before any rank's kernel writes this call's flags.
        tracing::debug!(
            seq = c.seq,
            "resident collectives: the first call after a given-up one waits for every rank"
        );
        host.barrier()?;
    }
    // Every rank runs this call here: say so in its record, with the flag value.
    host.commit(flagv);
    let failed = std::cell::RefCell::new(None);
    let mut stop = || match host.check() {
        Ok(()) => false,
        Err(e) => {
            *failed.borrow_mut() = Some(e);
            true
        }
    };
    let release = || release(ordinal, scratch, c.nranks, flagv, wide);
    let run = |r: &mut kernel::Res| r.run(cmd, &mut stop, &release);
    let done = if wide {
        with_wide(ordinal, run)
    } else {
        with_res(ordinal, run)
    };
    match done.map_err(err)? {
        Some(ok) => Ok(ok),
        None => {
            // Given up (the call fails: the dispatch layer then calls `call_failed`).
            Err(failed
                .into_inner()
                .unwrap_or_else(|| err("the call was given up")))
        }
    }
}

/// Release this rank's resident kernel from the command with flag value `flagv`, which waits
/// for peers that called something else: every rank's flag of the command in my scratch
/// (`nranks` words at the command's parity, kernels/resident.cuh) set to that value with
/// "not ok", so the kernel finishes the command without doing it. Written by the copy engine
/// on the device's own stream (the resident kernel's stream is busy with the command; the
/// resident small copies are this kernel). The wide kernel's command: the first phase's flags
/// of every block and sender at the command's parity (kernels/resident_mid.cuh; a block reaches
/// the second phase only when every rank took part in the first).
fn release(
    ordinal: i32,
    scratch: usize,
    nranks: usize,
    flagv: u64,
    wide: bool,
) -> Result<(), String> {
    let g = super::gpu().ok_or("CUDA is not available")?;
    let d = g.device(ordinal)?;
    let (words, at) = if wide {
        (
            MID_BLOCKS_MAX * MAXP,
            scratch + (flagv & 1) as usize * MID_BLOCKS_MAX * MAXP * 8,
        )
    } else {
        (nranks, scratch + ((flagv & 1) as usize * MAXP) * 8)
    };
    let words: Vec<u8> = (0..words)
        .flat_map(|_| (flagv << 1).to_le_bytes())
        .collect();
    cuda::with_context(d.ctx, || {
        // SAFETY: the flag words lie at the start of my scratch (device memory of this
        // context, or pinned host memory mapped into it); `words` lives until the stream is
        // synchronized.
        unsafe { cuda::memcpy_htod_async(at, &words, d.stream)? };
        cuda::stream_synchronize(d.stream)
    })
    .map_err(|e| e.to_string())
}

#[cfg(test)]
mod flag_tests {
    use super::*;

    /// Flag values: the parity alternates from call to call, whatever calls of other paths
    /// came between; a value is never one an earlier call used; calls of another shape (a
    /// mismatched size) or after a different previous call differ; after a given-up call every
    /// rank continues the same way.
    #[test]
    fn flag_values() {
        let d = shape_digest(RES_ALLREDUCE, 0, 0, 32);
        let mut prev = 0;
        let mut seen = Vec::new();
        for seq in [0u64, 1, 4, 5, 9, 100, 101] {
            let f = flag_value(prev, seq, d);
            assert_ne!(f & 1, prev & 1, "parity alternates at {seq}");
            assert!(!seen.contains(&f), "new value at {seq}");
            assert!(f << 1 >> 1 == f, "fits the flag word");
            seen.push(f);
            prev = f;
        }
        assert_ne!(d, shape_digest(RES_ALLREDUCE, 0, 0, 16));
        assert_ne!(d, shape_digest(RES_ALLGATHER, 0, 0, 32));
        assert_ne!(d, shape_digest(RES_ALLREDUCE, 0, 1, 32));
        assert_ne!(flag_value(0, 7, d), flag_value(1, 7, d));
        let after = flag_after_stop(7);
        assert_eq!(flag_value(after, 9, d) & 1, 0);
        assert!(flag_value(after, 8, d) > after);
    }
}
