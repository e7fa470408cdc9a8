//! Small collectives through a resident kernel (kernels/resident.cuh): no kernel launch and no
//! stream synchronize per call. The host writes a command into mapped pinned memory and spins
//! on a completion word the kernel writes back; the kernels of the ranks exchange the data
//! through per-communicator scratch buffers mapped with CUDA IPC (NVLink stores and flags).
//!
//! Used for blocking `MPI_Allreduce` (vector), `MPI_Alltoall` and `MPI_Allgather` (block) of at
//! most [`SLOT`] bytes when every rank passes device memory of its own GPU (one rank per GPU:
//! kernels of different processes on one GPU time-slice, so spinning kernels there would wait
//! for each other) and the process is not `MPI_THREAD_MULTIPLE` (one command at a time per
//! process; concurrent collectives on different communicators could otherwise wait on each
//! other's kernel). The first call on a communicator sets it up with one host allgather (scratch
//! exports); after that each kernel's flag says whether its rank's buffers qualify, so ranks
//! agree on the GPU, and fall back together, with no host round per call.
//!
//! Holding an SM: one block of [`THREADS`] threads, which exits after
//! `GPUMPI_GPU_RESIDENT_IDLE_US` without a command (a `cudaDeviceSynchronize` or `cudaFree`
//! of the application waits at most that long for it); the next call relaunches it.

use super::call::{Desc, DESC_BYTES};
use super::comm::{CommGpu, Host, PathState, State};
use super::ipc::{self, Export};
use super::kernels::{KOp, KType, MAXP};
use crate::coll::CollKind;
use crate::mpi::error::{MpiError, MpiResult};
use crate::sys::cuda::{self, Function, Stream};
use std::ffi::c_void;
use std::sync::Mutex;

/// Largest vector (allreduce) or block (alltoall, allgather) of the resident path.
pub const SLOT: usize = 16 << 10;
/// The same with `GPUMPI_CUDA_IPC=0`, where the scratch is pinned host memory: the launched
/// alternative pays several PCIe round trips of stream ordering there (78 us at 32 KiB against
/// 14.7 us resident at 4 KiB, 4 x H200, benches/NOTES.md), so the resident kernel serves more.
pub const HOST_SLOT: usize = 64 << 10;
const THREADS: u32 = 512;
/// Largest staging copy the resident kernel can take ([`copy_small`]; its host areas' size).
/// `GPUMPI_GPU_SMALL_COPY` sets the limit used, at most this.
pub const COPY_MAX: usize = 16 << 10;
/// Small copies before the kernels are loaded in the background for them.
const PRELOAD_AFTER: usize = 16;
/// Bytes a host-to-device command carries in its own line.
const INLINE: usize = 16;
const DATA_OFF: usize = 256;
/// Bytes of one rank's scratch for one communicator.
pub const SCRATCH: usize = DATA_OFF + 2 * MAXP * SLOT;
/// Bytes of one rank's scratch in pinned host memory (host mode).
pub const HOST_SCRATCH: usize = DATA_OFF + 2 * MAXP * HOST_SLOT;

/// The largest vector or block of the resident path in the current mode.
fn slot_limit() -> usize {
    if super::device::mode() == Some(super::device::Mode::Host) {
        HOST_SLOT
    } else {
        SLOT
    }
}

/// `struct ResCmd` of kernels/resident.cuh: one 64-byte line.
#[repr(C, align(64))]
#[derive(Clone, Copy, Default)]
struct ResCmd {
    seq: u64,
    kind: u32,
    op: u32,
    ty: u32,
    ok: u32,
    bytes: u64,
    src: u64,
    dst: u64,
    flagv: u64,
    desc: u64,
}
// The layout of kernels/resident.cuh (checked against the header by gpu::kabi's test).
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<ResCmd>() == 64);
    assert!(offset_of!(ResCmd, kind) == 8 && offset_of!(ResCmd, ok) == 20);
    assert!(offset_of!(ResCmd, bytes) == 24 && offset_of!(ResCmd, desc) == 56);
    assert!(size_of::<ResDesc>() == 88);
    assert!(offset_of!(ResDesc, slot) == 8 && offset_of!(ResDesc, peers) == 16);
    assert!(offset_of!(ResDesc, host) == 16 + 8 * MAXP);
    assert!(size_of::<ResDone>() == 16 && offset_of!(ResDone, exited) == 8);
};
/// `ResCmd::kind` (the RES_* of kernels/resident.cuh).
const RES_ALLREDUCE: u32 = 1;
const RES_ALLTOALL: u32 = 2;
const RES_ALLGATHER: u32 = 3;
const RES_COPY: u32 = 4;

/// `struct ResDesc` of kernels/resident.cuh, at `DESC_OFF` of each rank's scratch.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct ResDesc {
    nranks: u32,
    rank: u32,
    slot: u64,
    peers: [u64; MAXP],
    /// 1: the scratch is pinned shared host memory (no P2P), 0: device memory (CUDA IPC).
    host: u64,
}
const DESC_OFF: usize = 128;
const _: () = assert!(DESC_OFF + std::mem::size_of::<ResDesc>() <= DATA_OFF);

/// `struct ResDone`: `seq` is (command seq << 1) | status (1 done, 0 some rank was not ok),
/// written in one store.
#[repr(C)]
struct ResDone {
    seq: u64,
    exited: u64,
}

/// The resident kernel of one device.
struct Res {
    ctx: cuda::Context,
    stream: Stream,
    func: Function,
    cmd: *mut ResCmd,
    cmd_dev: u64,
    done: *mut ResDone,
    done_dev: u64,
    /// Small copies: the device-to-host word area (2 x COPY_MAX bytes) and the host-to-device
    /// staging area (COPY_MAX bytes), mapped pinned memory.
    ll: *mut u64,
    ll_dev: u64,
    stage: *mut u8,
    stage_dev: u64,
    epoch: u64,
    seq: u64,
    launched: bool,
    idle_ns: u64,
}
// SAFETY: the raw pointers are pinned host memory owned by this object, used under RES's lock.
unsafe impl Send for Res {}

static RES: Mutex<Vec<Option<Res>>> = Mutex::new(Vec::new());

fn err(e: impl std::fmt::Display) -> MpiError {
    MpiError::new(
        crate::standard::consts::MPI_ERR_OTHER,
        format!("GPU resident collective: {e}"),
    )
}

impl Res {
    fn new(ordinal: i32) -> Result<Res, String> {
        let g = super::gpu().ok_or("CUDA is not available")?;
        let d = g.device(ordinal)?;
        let k = g.kernels(ordinal)?;
        let func = k.resident.ok_or("no resident kernel in this build")?;
        let (stream, (cmd, cmd_dev), (done, done_dev), (ll, ll_dev), (stage, stage_dev)) =
            cuda::with_context(d.ctx, || {
                Ok((
                    cuda::stream_create()?,
                    cuda::host_alloc_mapped(std::mem::size_of::<ResCmd>())?,
                    cuda::host_alloc_mapped(std::mem::size_of::<ResDone>())?,
                    cuda::host_alloc_mapped(2 * COPY_MAX)?,
                    cuda::host_alloc_mapped(COPY_MAX)?,
                ))
            })
            .map_err(|e| e.to_string())?;
        // SAFETY: fresh mapped allocations of the right sizes.
        unsafe {
            std::ptr::write_volatile(cmd as *mut ResCmd, ResCmd::default());
            std::ptr::write_volatile(done as *mut ResDone, ResDone { seq: 0, exited: 0 });
            std::ptr::write_bytes(ll, 0, 2 * COPY_MAX);
        }
        let idle_us = crate::config::snapshot().gpu.resident_idle_us.max(1) as u64;
        Ok(Res {
            ctx: d.ctx,
            stream,
            func,
            cmd: cmd as *mut ResCmd,
            cmd_dev,
            done: done as *mut ResDone,
            done_dev,
            ll: ll as *mut u64,
            ll_dev,
            stage,
            stage_dev,
            epoch: 0,
            seq: 0,
            launched: false,
            idle_ns: idle_us * 1000,
        })
    }

    fn launch(&mut self) -> Result<(), String> {
        self.epoch += 1;
        let (mut c, mut d, mut e, mut idle, mut last) = (
            self.cmd_dev,
            self.done_dev,
            self.epoch,
            self.idle_ns,
            self.seq - 1,
        );
        let mut params: [*mut c_void; 5] = [
            &mut c as *mut u64 as *mut c_void,
            &mut d as *mut u64 as *mut c_void,
            &mut e as *mut u64 as *mut c_void,
            &mut idle as *mut u64 as *mut c_void,
            &mut last as *mut u64 as *mut c_void,
        ];
        let (f, s) = (self.func, self.stream);
        // SAFETY: the parameters match gpumpi_resident's signature; the pointers are the
        // device addresses of this object's mapped memory.
        cuda::with_context(self.ctx, || unsafe {
            cuda::launch(f, 1, THREADS, &mut params, s)
        })
        .map_err(|e| e.to_string())?;
        self.launched = true;
        Ok(())
    }

    /// Run one command to completion; whether every rank's buffers qualified (else nothing
    /// was done).
    fn run(&mut self, mut c: ResCmd) -> Result<bool, String> {
        self.seq += 1;
        c.seq = 0;
        // SAFETY: cmd is this object's mapped memory; the kernel reads the fields only after it
        // sees the new seq, which is written last (x86 stores are ordered; the fence keeps the
        // compiler from reordering).
        unsafe {
            let seq_ptr = std::ptr::addr_of_mut!((*self.cmd).seq);
            let body = (self.cmd as *mut u8).add(8);
            let src = (&c as *const ResCmd as *const u8).add(8);
            for i in 0..std::mem::size_of::<ResCmd>() - 8 {
                std::ptr::write_volatile(body.add(i), *src.add(i));
            }
            std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
            std::ptr::write_volatile(seq_ptr, self.seq);
        }
        if !self.launched {
            self.launch()?;
        }
        let mut spins: u64 = 0;
        loop {
            // SAFETY: done is this object's mapped memory, written by the kernel.
            let (dseq, exited) = unsafe {
                (
                    std::ptr::read_volatile(std::ptr::addr_of!((*self.done).seq)),
                    std::ptr::read_volatile(std::ptr::addr_of!((*self.done).exited)),
                )
            };
            if dseq >> 1 == self.seq {
                return Ok(dseq & 1 == 1);
            }
            if exited == self.epoch {
                // It exited idle; it wrote done.seq before exited, so re-read once.
                // SAFETY: as above.
                let again =
                    unsafe { std::ptr::read_volatile(std::ptr::addr_of!((*self.done).seq)) };
                if again >> 1 == self.seq {
                    return Ok(again & 1 == 1);
                }
                self.launch()?;
            }
            spins += 1;
            if spins > 1 << 22 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }
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
    flagv: u64,
    verified: bool,
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
            super::comm::add_device(-(SCRATCH as i64));
        }
    }

    /// Keep my device scratch allocated until the process ends (a peer may still map it).
    fn leak(self) {}
}

/// Whether the resident path applies to a call of this shape (the same answer on every rank).
pub fn applies(
    kind: CollKind,
    nranks: usize,
    bytes: usize,
    thread_multiple: impl FnOnce() -> bool,
) -> bool {
    matches!(
        kind,
        CollKind::Allreduce | CollKind::Alltoall | CollKind::Allgather
    ) && bytes > 0
        && bytes <= slot_limit()
        && nranks <= MAXP
        && crate::config::snapshot().gpu.resident
        && !thread_multiple()
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
}

fn kop_index(k: KOp) -> u32 {
    match k {
        KOp::Sum => 0,
        KOp::Prod => 1,
        KOp::Min => 2,
        KOp::Max => 3,
    }
}

fn ktype_index(t: KType) -> u32 {
    match t {
        KType::I32 => 0,
        KType::I64 => 1,
        KType::F32 => 2,
        KType::F64 => 3,
        KType::F16 => 4,
        KType::Bf16 => 5,
    }
}

/// The communicator's scratch on device `ordinal`, allocated and exported at first use; its
/// export.
fn comm_state(c: &ResCall, st: &State, ordinal: i32) -> Result<Export, String> {
    let res = st.of::<CommRes>();
    let mut comms = res.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(x) = comms
        .iter()
        .find(|x| x.ordinal == ordinal && x.export.is_some())
    {
        return x.export.ok_or_else(|| "no export".to_string());
    }
    let g = super::gpu().ok_or("CUDA is not available")?;
    let d = g.device(ordinal)?;
    let scratch = cuda::with_context(d.ctx, || {
        let p = cuda::mem_alloc(SCRATCH)?;
        // SAFETY: p is a fresh allocation of SCRATCH bytes; flags start at zero.
        unsafe { cuda::memset_async(p, 0, SCRATCH, d.stream)? };
        cuda::stream_synchronize(d.stream)?;
        Ok(p)
    })
    .map_err(|e| e.to_string())?;
    super::comm::add_device(SCRATCH as i64);
    let Some((export, _)) = ipc::export(scratch) else {
        let _ = cuda::with_context(d.ctx, || {
            // SAFETY: allocated above, never used.
            unsafe { cuda::mem_free(scratch) };
            Ok(())
        });
        super::comm::add_device(-(SCRATCH as i64));
        return Err("scratch not exportable".into());
    };
    comms.push(CommRes {
        ordinal,
        scratch,
        export: Some(export),
        peers: [0; MAXP],
        mapped: Vec::new(),
        flagv: 0,
        verified: false,
    });
    drop(comms);
    tracing::debug!(
        ranks = c.nranks,
        bytes = SCRATCH,
        "resident collectives: scratch allocated for a communicator"
    );
    super::comm::log("resident scratch allocated");
    Ok(export)
}

/// Set up the resident path of a communicator: one host allgather of (ok, pid, device UUID,
/// scratch export), the peers' scratch mapped, and (once) a host AND that every rank mapped
/// every peer. Without CUDA IPC (`GPUMPI_CUDA_IPC=0`, or a rank that could not map its peers'
/// scratch) the scratch is each rank's pinned shared host region ([`super::hostcoll`]).
/// `Ok(false)`: not every rank can (this call stages; the next one asks again).
fn setup(c: &ResCall, host: &dyn Host) -> MpiResult<bool> {
    let host_mode = super::device::mode() == Some(super::device::Mode::Host);
    // The communicator's state is created only by a rank with device buffers.
    let mine = c.device.and_then(|o| {
        let uuid = super::device::device_uuid(o)?;
        let e = if host_mode {
            None
        } else {
            Some(comm_state(c, &host.gpu().state(), o).ok()?)
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
        .find(|x| x.ordinal == ordinal && x.export.is_some())
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
        let desc = ResDesc {
            nranks: c.nranks as u32,
            rank: c.rank as u32,
            slot: SLOT as u64,
            peers: st.peers,
            host: 0,
        };
        // SAFETY: the descriptor area lies inside this rank's scratch allocation.
        if let Err(e) = unsafe { super::p2p::htod(st.scratch + DESC_OFF, desc_bytes(&desc)) } {
            map_err = Some(e);
        }
    }
    drop(comms);
    if !host.all(map_err.is_none())? {
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
        .find(|x| x.ordinal == ordinal && x.export.is_some())
    {
        st.verified = true;
    }
    tracing::debug!(
        ranks = c.nranks,
        "resident collectives ready on a communicator"
    );
    Ok(true)
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
    let r = super::hostcoll::with_comm(
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
        flagv: 0,
        verified: true,
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
pub unsafe fn run(c: &ResCall, host: &dyn Host, ready: bool) -> MpiResult<bool> {
    if !ready && !setup(c, host)? {
        return Ok(false);
    }
    let res = host.gpu().state().of::<CommRes>();
    let mut comms = res.lock().unwrap_or_else(|e| e.into_inner());
    let st = comms
        .iter_mut()
        .find(|x| x.verified)
        .ok_or_else(|| err("the communicator's resident state is gone"))?;
    let ok = c.device == Some(st.ordinal);
    st.flagv += 1;
    let (op, ty) = c
        .red
        .map_or((0, 0), |(o, t)| (kop_index(o), ktype_index(t)));
    let cmd = ResCmd {
        seq: 0,
        kind: match c.kind {
            CollKind::Allreduce => RES_ALLREDUCE,
            CollKind::Alltoall => RES_ALLTOALL,
            _ => RES_ALLGATHER,
        },
        op,
        ty,
        ok: ok as u32,
        bytes: c.bytes as u64,
        src: c.src as u64,
        dst: c.dst as u64,
        flagv: st.flagv,
        desc: (st.scratch + DESC_OFF) as u64,
    };
    let ordinal = st.ordinal;
    drop(comms);
    with_res(ordinal, |r| r.run(cmd)).map_err(err)
}

/// `f` on the resident kernel of device `ordinal` (set up at first use), under its lock: one
/// command at a time per device.
fn with_res<R>(ordinal: i32, f: impl FnOnce(&mut Res) -> Result<R, String>) -> Result<R, String> {
    let mut res = RES.lock().unwrap_or_else(|e| e.into_inner());
    let idx = ordinal.max(0) as usize;
    if res.len() <= idx {
        res.resize_with(idx + 1, || None);
    }
    if res[idx].is_none() {
        res[idx] = Some(Res::new(ordinal)?);
    }
    f(res[idx].as_mut().expect("set up above"))
}

// ---- small copies for point-to-point staging ----

/// Bytes up to which staging copies take the resident kernel (`GPUMPI_GPU_SMALL_COPY`, at
/// most [`COPY_MAX`]; 0: never).
fn small_copy_limit() -> usize {
    crate::config::snapshot().gpu.small_copy.min(COPY_MAX)
}

/// Whether a copy of `len` bytes may use the resident kernel of device `ordinal`: `len` is
/// within `GPUMPI_GPU_SMALL_COPY`; the kernels are already loaded (their first load costs
/// milliseconds, more than the first-call budget: after a few small copies it is started in
/// the background, and no copy waits for it); and no other process is known to use this GPU
/// (kernels of processes sharing a GPU time-slice, so a polling kernel would delay the
/// other's work).
fn small_copy_ready(ordinal: i32, len: usize, dir: SmallCopy) -> bool {
    // A device-to-device pull uses none of the host areas: any size they would allow.
    let limit = match (dir, small_copy_limit()) {
        (SmallCopy::DevToDev, l) if l > 0 => COPY_MAX,
        (_, l) => l,
    };
    if len > limit {
        return false;
    }
    let Some(g) = super::gpu() else {
        return false;
    };
    if !g.kernels_loaded(ordinal) {
        // Not at the very first copies either: the load would compete with them for the
        // driver (the first device send/recv must stay under 2 ms).
        static ASKED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        if ASKED.fetch_add(1, std::sync::atomic::Ordering::Relaxed) >= PRELOAD_AFTER {
            g.preload_kernels(ordinal);
        }
        return false;
    }
    sole::alone(ordinal)
}

/// The direction of a small copy by the resident kernel ([`copy_small`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SmallCopy {
    /// Device address `src` (memory of the device, or a peer's buffer mapped into its context)
    /// to host memory `dst`.
    ToHost,
    /// Host memory `src` to device address `dst`.
    FromHost,
    /// Device address `src` (a peer's buffer mapped through CUDA IPC into this device's
    /// context) to device address `dst` of this device: the receiver's pull of a small device
    /// message, one host <-> kernel round trip.
    DevToDev,
}

/// Copy `len` bytes (at most `GPUMPI_GPU_SMALL_COPY`, itself at most [`COPY_MAX`]; a
/// [`SmallCopy::DevToDev`] copy up to [`COPY_MAX`] unless that variable is 0) with the resident
/// kernel of device `ordinal`, in direction `dir`. Synchronous, like the copies it
/// replaces. `None`: not available here (the caller copies with the copy engine).
///
/// # Safety
/// The device ranges are memory the kernel of `ordinal` may read (or write); a host range is
/// valid for `len` bytes.
pub unsafe fn copy_small(
    ordinal: i32,
    dst: usize,
    src: usize,
    len: usize,
    dir: SmallCopy,
) -> Option<Result<(), String>> {
    if len == 0 || !small_copy_ready(ordinal, len, dir) {
        return None;
    }
    Some(with_res(ordinal, |r| {
        let mut c = ResCmd {
            kind: RES_COPY,
            bytes: len as u64,
            ..Default::default()
        };
        match dir {
            SmallCopy::ToHost => {
                c.src = src as u64;
                c.dst = r.ll_dev;
            }
            SmallCopy::DevToDev => {
                c.op = 1;
                c.src = src as u64;
                c.dst = dst as u64;
            }
            SmallCopy::FromHost if len <= INLINE => {
                let mut inline = [0u8; INLINE];
                inline[..len].copy_from_slice(std::slice::from_raw_parts(src as *const u8, len));
                c.op = 1;
                c.ty = 1;
                c.dst = dst as u64;
                c.flagv = u64::from_le_bytes(inline[..8].try_into().unwrap());
                c.desc = u64::from_le_bytes(inline[8..].try_into().unwrap());
            }
            SmallCopy::FromHost => {
                std::ptr::copy_nonoverlapping(src as *const u8, r.stage, len);
                c.op = 1;
                c.src = r.stage_dev;
                c.dst = dst as u64;
            }
        }
        r.run(c)?;
        if dir == SmallCopy::ToHost {
            // Every word carries the command's tag once its data has arrived.
            let tag = (r.seq & 0xffff_ffff) << 32;
            let out = dst as *mut u8;
            for i in 0..len.div_ceil(4) {
                let w = loop {
                    let w = std::ptr::read_volatile(r.ll.add(i));
                    if w & !0xffff_ffff == tag {
                        break w;
                    }
                    std::hint::spin_loop();
                };
                let b = (w as u32).to_le_bytes();
                let k = (len - 4 * i).min(4);
                std::ptr::copy_nonoverlapping(b.as_ptr(), out.add(4 * i), k);
            }
        }
        Ok(())
    }))
}

/// Whether this process is the only one (of any gpumpi job on this host's network namespace)
/// known to use a GPU for resident small copies: the first process takes an abstract Unix
/// socket named after the GPU's UUID (released by the kernel when the process exits); a
/// later one finds the name taken, binds the "shared" marker beside it and stays off; the
/// holder looks for that marker at most every 10 ms and turns off when it appears.
mod sole {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
    use std::sync::Mutex;
    use std::time::{Duration, Instant};

    struct State {
        ordinal: i32,
        shared: bool,
        marker: Option<SocketAddr>,
        last: Instant,
        _held: Option<UnixListener>,
    }

    static STATE: Mutex<Vec<State>> = Mutex::new(Vec::new());

    fn name(uuid: &[u8; 16], suffix: &str) -> String {
        let hex: String = uuid.iter().map(|b| format!("{b:02x}")).collect();
        format!("gpumpi-gpu-{hex}{suffix}")
    }

    fn first_look(ordinal: i32) -> State {
        let mut st = State {
            ordinal,
            shared: true,
            marker: None,
            last: Instant::now(),
            _held: None,
        };
        let Some(uuid) = super::super::device::device_uuid(ordinal) else {
            return st;
        };
        let (Ok(own), Ok(marker)) = (
            SocketAddr::from_abstract_name(name(&uuid, "")),
            SocketAddr::from_abstract_name(name(&uuid, "-shared")),
        ) else {
            return st;
        };
        match UnixListener::bind_addr(&own) {
            Ok(l) => {
                st._held = Some(l);
                st.shared = UnixStream::connect_addr(&marker).is_ok();
                st.marker = Some(marker);
            }
            Err(_) => {
                // Another process holds this GPU: mark it shared (kept for our lifetime; a
                // marker someone else bound already says the same).
                st._held = UnixListener::bind_addr(&marker).ok();
                tracing::debug!(
                    ordinal,
                    "another process uses this GPU: small copies by the copy engine"
                );
            }
        }
        st
    }

    pub fn alone(ordinal: i32) -> bool {
        let mut v = STATE.lock().unwrap_or_else(|e| e.into_inner());
        let i = match v.iter().position(|s| s.ordinal == ordinal) {
            Some(i) => i,
            None => {
                v.push(first_look(ordinal));
                v.len() - 1
            }
        };
        let st = &mut v[i];
        if !st.shared && st.last.elapsed() > Duration::from_millis(10) {
            st.last = Instant::now();
            if let Some(m) = &st.marker {
                if UnixStream::connect_addr(m).is_ok() {
                    st.shared = true;
                    tracing::debug!(
                        ordinal,
                        "another process now uses this GPU: small copies by the copy engine"
                    );
                }
            }
        }
        !st.shared
    }
}

/// The shared structs' layouts (gpu::kabi's test holds them against kernels/resident.cuh).
#[cfg(test)]
pub(crate) fn layouts() -> Vec<super::kabi::Layout> {
    use super::kabi::layout;
    vec![
        layout!(
            "ResCmd",
            ResCmd,
            "seq" => seq, "kind" => kind, "op" => op, "type" => ty, "ok" => ok,
            "bytes" => bytes, "src" => src, "dst" => dst, "flagv" => flagv, "desc" => desc,
        ),
        layout!(
            "ResDesc",
            ResDesc,
            "nranks" => nranks, "rank" => rank, "slot" => slot, "peers" => peers,
            "host" => host,
        ),
        layout!(
            "ResDone",
            ResDone,
            "seq" => seq, "exited" => exited,
        ),
    ]
}

/// The header's `#define`s with their Rust values.
#[cfg(test)]
pub(crate) fn constants() -> Vec<(&'static str, u64)> {
    vec![
        ("RES_ALLREDUCE", RES_ALLREDUCE as u64),
        ("RES_ALLTOALL", RES_ALLTOALL as u64),
        ("RES_ALLGATHER", RES_ALLGATHER as u64),
        ("RES_COPY", RES_COPY as u64),
        ("RES_DATA_OFF", DATA_OFF as u64),
        ("RES_DESC_OFF", DESC_OFF as u64),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Small copies through the resident kernel against the copy engine: every length class
    /// (inline, staged, word tails), unaligned device and host ends, both directions, and
    /// back-to-back reuse of the word area (stale tags must not pass).
    #[test]
    fn small_copies_match_the_copy_engine() {
        let Some(g) = crate::gpu::kernels_or_skip() else {
            return;
        };
        let d = g.device(0).unwrap();
        g.kernels(0).unwrap();
        if !small_copy_ready(0, 1, SmallCopy::ToHost) {
            crate::test_skip::gpu_skip(
                &crate::test_skip::current_test(),
                "another process uses GPU 0 (small copies stay on the copy engine)",
            );
            return;
        }
        let limit = small_copy_limit();
        let buf = cuda::with_context(d.ctx, || cuda::mem_alloc(2 * COPY_MAX + 64)).unwrap();
        let mut round = 0u8;
        for len in [
            1usize, 3, 4, 5, 8, 15, 16, 17, 31, 255, 1000, 4093, 4096, limit,
        ] {
            if len > limit {
                continue;
            }
            for off in [0usize, 1, 3, 8] {
                round = round.wrapping_add(1);
                let data: Vec<u8> = (0..len)
                    .map(|i| (i as u8).wrapping_mul(31) ^ round)
                    .collect();
                // SAFETY: buf holds 2 * COPY_MAX + 64 bytes; every copy is synchronous.
                unsafe {
                    // Host -> device by the kernel, read back by the copy engine.
                    let host = [vec![0xee; off], data.clone()].concat();
                    let r = copy_small(
                        0,
                        buf as usize + off,
                        host[off..].as_ptr() as usize,
                        len,
                        SmallCopy::FromHost,
                    );
                    r.expect("applies").unwrap();
                    let mut back = vec![0u8; len];
                    cuda::with_context(d.ctx, || {
                        cuda::memcpy_dtoh_async(&mut back, buf + off, d.stream)?;
                        cuda::stream_synchronize(d.stream)
                    })
                    .unwrap();
                    assert_eq!(back, data, "host to device len={len} off={off}");
                    // Device -> host by the kernel into an unaligned host buffer.
                    let mut out = vec![0x55u8; len + off + 1];
                    let r = copy_small(
                        0,
                        out[off..].as_mut_ptr() as usize,
                        buf as usize + off,
                        len,
                        SmallCopy::ToHost,
                    );
                    r.expect("applies").unwrap();
                    assert_eq!(
                        &out[off..off + len],
                        &data[..],
                        "device to host len={len} off={off}"
                    );
                    assert!(
                        out[..off].iter().all(|&b| b == 0x55),
                        "nothing written before"
                    );
                    assert_eq!(out[off + len], 0x55, "nothing written after");
                    // Device -> device by the kernel (the path of a pulled small message),
                    // into the buffer's upper half, read back by the copy engine.
                    let dst = buf as usize + COPY_MAX + 32 + (off ^ 1);
                    let r = copy_small(0, dst, buf as usize + off, len, SmallCopy::DevToDev);
                    r.expect("applies").unwrap();
                    let mut back = vec![0u8; len];
                    cuda::with_context(d.ctx, || {
                        cuda::memcpy_dtoh_async(&mut back, dst, d.stream)?;
                        cuda::stream_synchronize(d.stream)
                    })
                    .unwrap();
                    assert_eq!(back, data, "device to device len={len} off={off}");
                }
            }
        }
        // SAFETY: refused before anything is touched; then buf is freed once, unused after.
        unsafe {
            assert!(
                copy_small(0, 0, 0, limit + 1, SmallCopy::ToHost).is_none(),
                "too long: not here"
            );
            cuda::with_context(d.ctx, || {
                cuda::mem_free(buf);
                Ok(())
            })
            .unwrap();
        }
    }
}
