//! The GPU paths: blocking collectives whose every rank passes device buffers.

use super::call::{CollSpec, Reduction};
use super::flag::{flag_all, flag_eligible};
use super::internal::{allgather_bytes, allreduce_band_u64};
use super::run_blocking;
use crate::abi::consts as c;
use crate::abi::objects::CommObj;
use crate::coll::CollKind;
use crate::mpi::error::MpiResult;
use smallvec::SmallVec;
use std::sync::Arc;

/// The host collectives the GPU path needs, over the call's communicator.
struct GpuHost<'a>(&'a Arc<CommObj>);

impl crate::gpu::coll::Host for GpuHost<'_> {
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

/// Blocking collectives whose every rank passes device buffers run GPU-native (CUDA IPC,
/// kernels over NVLink: src/gpu/coll.rs). `Ok(false)`: every rank takes the staged path.
/// The decision is collective: each condition checked before the exchange is the same on
/// every rank (kind, sizes, op), the rest is agreed on inside `gpu::coll::run`.
pub(super) unsafe fn try_gpu(spec: &CollSpec) -> MpiResult<bool> {
    use crate::gpu::coll::{Call, Shape};
    use CollKind as K;
    if !matches!(
        spec.kind,
        K::Allreduce | K::Alltoall | K::Allgather | K::Bcast | K::Reduce | K::ReduceScatterBlock
    ) || spec.bytes == 0
        || spec.host_only
        || !crate::gpu::coll::enabled()
    {
        return Ok(false);
    }
    let red = match &spec.red {
        None => None,
        Some((Reduction::Builtin(op, e), _)) => match crate::gpu::kernels::kernel_for(*op, *e) {
            Some(k) => Some(k),
            None => return Ok(false),
        },
        Some(_) => return Ok(false),
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
    // The thread level is asked (a lock) only for calls the resident path could take.
    let tm = || {
        crate::abi::runtime::lock()
            .as_ref()
            .is_some_and(|rt| rt.thread_level == c::MPI_THREAD_MULTIPLE)
    };
    let resident = crate::gpu::resident::applies(spec.kind, n, b, tm);
    // A call the flag slots would serve (small, MPI_COMM_WORLD): agree in one flag round whether
    // every rank has device buffers; if not, every rank takes the flag path (staging its own
    // device buffers), as every rank would without a GPU. Skipped once the communicator's
    // resident kernels are set up (the same state on every rank): their ok bits agree by
    // themselves, and a "no" sends every rank on to the flag path just the same.
    let ready = resident && crate::gpu::resident::ready(&spec.comm.gpu);
    if !ready {
        if let Some(slots) = flag_eligible(spec) {
            if !flag_all(&slots, device.is_some())? {
                return Ok(false);
            }
        }
    }
    if resident {
        // Small: the resident kernels (no launch, no stream synchronize per call).
        let dst = recv.map_or(0, |x| x.0);
        let src = match (spec.kind, send) {
            (_, Some(s)) => s.0,
            (K::Allgather, None) => dst + spec.comm.rank * b,
            (_, None) => dst,
        };
        let call = crate::gpu::resident::ResCall {
            kind: spec.kind,
            nranks: n,
            rank: spec.comm.rank,
            bytes: b,
            src,
            dst,
            red,
            device: device.filter(|_| recv.is_some()),
        };
        return crate::gpu::resident::run(&call, &GpuHost(&spec.comm), ready);
    }
    let call = Call {
        shape: Shape {
            kind: spec.kind,
            nranks: n,
            rank: spec.comm.rank,
            root: spec.root,
            bytes: b,
            elem: red.map_or(1, |(_, t)| t.size()),
            in_place: spec.in_place,
        },
        send,
        recv,
        red,
        device,
        thread_multiple: tm,
    };
    crate::gpu::coll::run(&call, &GpuHost(&spec.comm))
}
