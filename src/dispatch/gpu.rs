//! The GPU paths: blocking collectives whose every rank passes device buffers, each run through
//! its `gpu::path::GpuPath` (the rule shared by every GPU path, this rank's buffers, the flag
//! round, then the path's own eligibility and run).

use super::call::{CollSpec, Reduction};
use super::flag::{check_start, flag_all, flag_eligible};
use super::internal::{allgather_bytes, allreduce_band_u64};
use super::run_blocking;
use crate::abi::objects::CommObj;
use crate::coll::CollKind;
use crate::engine::collcheck::Path as CheckPath;
use crate::gpu::call::{Call, Shape};
use crate::gpu::kernels::{KOp, KType};
use crate::gpu::path::GpuPath;
use crate::mpi::error::MpiResult;
use crate::standard::consts as c;
use smallvec::SmallVec;
use std::sync::Arc;

/// The host collectives the GPU path needs, over the call's communicator.
struct GpuHost<'a>(&'a Arc<CommObj>);

impl crate::gpu::comm::Host for GpuHost<'_> {
    fn allgather(&self, mine: &[u8]) -> MpiResult<Vec<u8>> {
        allgather_bytes(self.0, mine)
    }
    fn barrier(&self) -> MpiResult<()> {
        let mut s = CollSpec::new(CollKind::Barrier, self.0.clone());
        s.host_only = true;
        // SAFETY: no user buffers.
        unsafe { run_blocking(s) }
    }
    fn all(&self, ok: bool) -> MpiResult<bool> {
        let mut w = [ok as u64];
        allreduce_band_u64(self.0, &mut w)?;
        Ok(w[0] != 0)
    }
    fn world_rank(&self, p: usize) -> usize {
        self.0.peers[p]
    }
    fn identity(&self) -> (u32, Arc<[usize]>) {
        (self.0.ctx, self.0.peers.clone())
    }
    fn gpu(&self) -> &crate::gpu::comm::CommGpu {
        &self.0.gpu
    }
}

/// Release what the GPU paths hold for `comm` (collective: `MPI_Comm_free`).
pub(crate) fn release_gpu(comm: &Arc<CommObj>) -> MpiResult<()> {
    comm.gpu.release(&GpuHost(comm))
}

/// The kernel for a call the GPU paths serve (`Some(None)`: no reduction), None when they do not
/// serve it. A rule on values every rank shares: the collective, the byte count, an internal
/// call, whether GPU-native collectives are on, the op and element type.
fn gpu_call(spec: &CollSpec) -> Option<Option<(KOp, KType)>> {
    use CollKind as K;
    if !matches!(
        spec.kind,
        K::Allreduce | K::Alltoall | K::Allgather | K::Bcast | K::Reduce | K::ReduceScatterBlock
    ) || spec.bytes == 0
        || spec.host_only
        || !crate::gpu::device::enabled()
    {
        return None;
    }
    match &spec.red {
        None => Some(None),
        Some((Reduction::Builtin(op, e), _)) => crate::gpu::kernels::kernel_for(*op, *e).map(Some),
        Some(_) => None,
    }
}

/// Whether the calling program asked for MPI_THREAD_MULTIPLE (the resident kernels serve one
/// caller at a time). Asked (a lock) only for calls the resident path could take.
fn thread_multiple() -> bool {
    crate::abi::runtime::lock()
        .as_ref()
        .is_some_and(|rt| rt.thread_level == c::MPI_THREAD_MULTIPLE)
}

/// The shape of a GPU call (`red`: from [`gpu_call`]).
fn shape(spec: &CollSpec, red: Option<(KOp, KType)>) -> Shape {
    Shape {
        kind: spec.kind,
        nranks: spec.comm.size(),
        rank: spec.comm.rank,
        root: spec.root,
        bytes: spec.bytes,
        elem: red.map_or(1, |(_, t)| t.size()),
        in_place: spec.in_place,
    }
}

/// Whether GPU path `path` may take the call: a GPU call ([`gpu_call`]) that the path's own
/// rule accepts (`GpuPath::eligible`: resident kernels for small allreduce, alltoall and
/// allgather; NVLink with peer access on; host memory with it off).
pub(super) fn eligible(path: &dyn GpuPath, spec: &CollSpec) -> bool {
    gpu_call(spec).is_some_and(|red| path.eligible(&shape(spec, red), thread_multiple))
}

/// This rank's side of a GPU call: its contiguous send and receive ranges and its device.
struct Local {
    red: Option<(KOp, KType)>,
    send: Option<(usize, usize)>,
    recv: Option<(usize, usize)>,
    /// This rank's GPU when every buffer it passes is device memory of that GPU with the length
    /// the call needs.
    device: Option<i32>,
}

/// Describe this rank's buffers, and for a call the flag slots would serve (small,
/// MPI_COMM_WORLD) agree in one flag round whether every rank has device buffers; if not
/// (None), every rank takes the flag path (staging its own device buffers), as every rank would
/// without a GPU. `ready`: the communicator's resident kernels are set up (the same state on
/// every rank): their ok bits agree by themselves, and a "no" sends every rank on to the flag
/// path just the same, so the round is skipped.
unsafe fn local(spec: &CollSpec, ready: bool) -> MpiResult<Option<Local>> {
    use CollKind as K;
    let Some(red) = gpu_call(spec) else {
        return Ok(None);
    };
    let n = spec.comm.size();
    let b = spec.bytes;
    let (slen, rlen) = match spec.kind {
        K::Allreduce | K::Reduce | K::Bcast => (b, b),
        K::Allgather => (b, n * b),
        K::Alltoall => (n * b, n * b),
        _ => (n * b, b),
    };
    let send = spec.send.as_ref().and_then(|s| s.contiguous());
    let recv = spec.recv.as_ref().and_then(|s| s.contiguous());
    let fit = spec.send.is_none() == send.is_none()
        && spec.recv.is_none() == recv.is_none()
        && send.is_none_or(|x| x.1 == slen)
        && recv.is_none_or(|x| x.1 == rlen)
        && (send.is_some() || recv.is_some());
    // This rank's device when every buffer it passes is device memory of one GPU (classified
    // once: each classification may ask the driver).
    let device = {
        let kinds: SmallVec<[crate::gpu::cache::PtrInfo; 2]> = [send, recv]
            .iter()
            .flatten()
            .map(|x| crate::gpu::classify(x.0 as *const u8))
            .collect();
        let dev = crate::gpu::cache::MemKind::Device;
        match kinds.first() {
            Some(k0) if fit && kinds.iter().all(|k| k.kind == dev && k.device == k0.device) => {
                Some(k0.device)
            }
            _ => None,
        }
    };
    if !ready {
        if let Some(slots) = flag_eligible(spec) {
            if !flag_all(&slots, device.is_some())? {
                return Ok(None);
            }
        }
    }
    Ok(Some(Local {
        red,
        send,
        recv,
        device,
    }))
}

/// Run an eligible call on GPU path `path`. `Ok(false)`: declined on every rank (the flag
/// round, the descriptor exchange, the resident kernels' ok bits). A path whose communicator
/// state is ready (the resident kernels) agrees by itself, so the flag round is skipped.
pub(super) unsafe fn run(path: &dyn GpuPath, spec: &CollSpec, seq: i32) -> MpiResult<bool> {
    let ready = path.ready(&spec.comm.gpu);
    let Some(Local {
        red,
        send,
        recv,
        device,
    }) = local(spec, ready)?
    else {
        return Ok(false);
    };
    // This rank takes a GPU path: host ranks that meet its record in their checks fail (the
    // GPU paths' own waits are not checked).
    check_start(spec, seq, CheckPath::Gpu);
    let call = Call {
        shape: shape(spec, red),
        send,
        recv,
        red,
        device,
        thread_multiple,
    };
    path.run(&call, &GpuHost(&spec.comm), ready)
}
