//! The GPU collective paths behind one trait. Each path is a folder (or file) of `gpu/` with
//! its own plans and per-communicator state; this module is the thin layer above them that the
//! dispatch layer (`dispatch/gpu.rs`) runs every GPU path through: the dispatch list's
//! `Resident`, `Nvlink` and `HostMemory` entries are [`RESIDENT`], [`NVLINK`] and
//! [`HOST_MEMORY`].
//!
//! A path's per-communicator state is a [`PathState`] type kept in the communicator's
//! `comm::State` (`State::of`): created by the path's `run` at the first call that needs it
//! (collectively), released with the communicator (`CommGpu::release`, `MPI_Finalize`), which
//! calls the type's `close_mappings`, `free` and `leak`.
//!
//! A new GPU path (say, one over a network for the ranks of other nodes): its folder under
//! `gpu/`, a [`GpuPath`] implementation here, and a `dispatch::Path` entry that names it.

use super::call::{Call, Shape};
#[cfg(doc)]
use super::comm::PathState;
use super::comm::{CommGpu, Host};
use super::device::{mode, Mode};
use super::kernels::MAXP;
use crate::coll::CollKind;
use crate::mpi::error::MpiResult;

/// One GPU collective path.
pub trait GpuPath: Sync {
    /// Whether the path may take a GPU call of this shape: a rule on values every rank shares
    /// (the collective, rank count, byte count, configuration), never on one rank's buffers.
    /// `thread_multiple` is asked only where the answer depends on it.
    fn eligible(&self, s: &Shape, thread_multiple: fn() -> bool) -> bool;

    /// Whether the communicator's state for this path is set up, so that the ranks agree on
    /// the path without a host round of their own (the same answer on every rank). The caller
    /// agrees first where this is false.
    fn ready(&self, g: &CommGpu) -> bool {
        let _ = g;
        false
    }

    /// Run the call if every rank can (`ready`: from [`GpuPath::ready`]). `Ok(false)`:
    /// declined on every rank; the caller tries the next path.
    ///
    /// # Safety
    /// The buffers in `c` are the caller's live device buffers for the whole call.
    unsafe fn run(&self, c: &Call, host: &dyn Host, ready: bool) -> MpiResult<bool>;
}

/// Small allreduce, alltoall and allgather through the communicator's resident kernels
/// (`gpu::resident`).
pub struct Resident;
/// Plans over CUDA IPC mappings of the peers' buffers (NVLink or PCIe peer access,
/// `gpu::nvlink`); calls whose buffers some rank cannot export go through host memory inside it.
pub struct Nvlink;
/// Pipelines through pinned shared host memory (`gpu::hostmem`), where peer access is off.
pub struct HostMemory;

pub static RESIDENT: Resident = Resident;
pub static NVLINK: Nvlink = Nvlink;
pub static HOST_MEMORY: HostMemory = HostMemory;

impl GpuPath for Resident {
    fn eligible(&self, s: &Shape, thread_multiple: fn() -> bool) -> bool {
        super::resident::applies(s.kind, s.nranks, s.bytes, thread_multiple)
    }

    fn ready(&self, g: &CommGpu) -> bool {
        super::resident::ready(g)
    }

    unsafe fn run(&self, c: &Call, host: &dyn Host, ready: bool) -> MpiResult<bool> {
        let dst = c.recv.map_or(0, |x| x.0);
        let src = match (c.shape.kind, c.send) {
            (_, Some(s)) => s.0,
            (CollKind::Allgather, None) => dst + c.shape.rank * c.shape.bytes,
            (_, None) => dst,
        };
        let call = super::resident::ResCall {
            kind: c.shape.kind,
            nranks: c.shape.nranks,
            rank: c.shape.rank,
            bytes: c.shape.bytes,
            src,
            dst,
            red: c.red,
            device: c.device.filter(|_| c.recv.is_some()),
            seq: c.seq,
        };
        super::resident::run(&call, host, ready)
    }
}

impl GpuPath for Nvlink {
    /// Peer access on (`device::mode` = IPC), and not a call the resident kernels take.
    fn eligible(&self, s: &Shape, thread_multiple: fn() -> bool) -> bool {
        mode() == Some(Mode::Ipc) && !RESIDENT.eligible(s, thread_multiple)
    }

    unsafe fn run(&self, c: &Call, host: &dyn Host, _ready: bool) -> MpiResult<bool> {
        super::nvlink::run(c, host)
    }
}

impl GpuPath for HostMemory {
    /// Peer access off (`GPUMPI_CUDA_IPC=0`, no P2P), and not a call the resident kernels take.
    fn eligible(&self, s: &Shape, thread_multiple: fn() -> bool) -> bool {
        mode() == Some(Mode::Host) && !RESIDENT.eligible(s, thread_multiple)
    }

    unsafe fn run(&self, c: &Call, host: &dyn Host, _ready: bool) -> MpiResult<bool> {
        // The kernels take at most MAXP operands: stage beyond.
        if c.shape.nranks > MAXP {
            return Ok(false);
        }
        super::hostmem::run(c, host)
    }
}
