//! Collective dispatch, below the C ABI.
//!
//! The ABI (`abi/imp/coll.rs`) validates a call's arguments and describes it as a [`CollSpec`]:
//! the collective, the communicator, the buffers as typed blocks (one [`Side`] each), the byte
//! count, the datatype and op (a [`Reduction`]), the root. This module chooses the path that
//! runs it.
//!
//! A blocking call walks [`BLOCKING`], an ordered list of [`Path`]s: the first path that is
//! eligible runs the call, and a path that declines (`Ok(false)`, after agreeing with the other
//! ranks) hands it to the next eligible one; the schedule path takes everything. "Eligible" is
//! a rule on values every rank of the communicator agrees on (the collective, the communicator,
//! the byte count, the op, the configuration), never on where one rank's buffers live, so every
//! rank walks the list the same way; a path that must look at the buffers agrees with the other
//! ranks inside its `run` before it answers. A new path (a network or hierarchical one) is one
//! more [`Path`] with its rule and its `run`, placed in the list; the ABI does not change.
//!
//! Nonblocking and persistent calls are schedules ([`start`]: a request's state machine).
//!
//! Before a [`CollSpec`] exists, the blocking `MPI_Barrier/Bcast/Reduce/Allreduce` entry points
//! try [`flag_quick`]: the flag path straight from the C arguments (no allocation, no lock),
//! for predefined datatypes on contiguous host buffers on MPI_COMM_WORLD; it declines to the
//! full path with the same rule as [`Path::Flag`].
//!
//! The library's own collectives (context-id agreement, split, finalize, the GPU paths' set-up)
//! are here too ([`allreduce_band_u64`], [`allgather_bytes`], [`barrier_world`]): host memory,
//! never the GPU paths.

mod call;
mod flag;
mod gpu;
mod hier;
mod internal;
mod mid;
mod piped;
mod schedule;

pub(crate) use call::{in_place, CollSpec, Reduction, Side, TBlock};
pub(crate) use flag::flag_quick;
pub(crate) use gpu::{release_gpu, stream_kernel_setup};
pub use internal::{allgather_bytes, allreduce_band_u64, barrier_world};

use crate::engine::collcheck::CallNo;
use crate::gpu::path::{HOST_MEMORY, NVLINK, RESIDENT};
use crate::mpi::error::{MpiError, MpiResult};
use crate::runtime::request::ReqKind;

/// A way to run a collective call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// Small allreduce/alltoall/allgather on device buffers through the communicator's resident
    /// kernels (`gpu::resident`).
    Resident,
    /// Device buffers through CUDA IPC mappings of the peers' buffers (NVLink or PCIe peer
    /// access): the plans of `gpu::nvlink`.
    Nvlink,
    /// Device buffers through pinned shared host memory (`gpu::hostmem`), where peer access
    /// is off.
    HostMemory,
    /// Small calls on MPI_COMM_WORLD through the shared-memory flag slots (`engine::flag`).
    Flag,
    /// Mid-size bcast/reduce/allreduce on MPI_COMM_WORLD through the shared-memory scratch
    /// areas (`engine::scratch`).
    Scratch,
    /// A large allreduce or alltoall on a communicator that spans nodes, as pieces a few at a
    /// time (device buffers relayed through pinned buffers piece by piece).
    Piped,
    /// The collectives of `coll::hier::supports` on a communicator that spans nodes: inside
    /// each node, between one leader per node, inside the node again (`coll::hier`).
    Hier,
    /// A schedule over point-to-point (`coll::build`), run by the engine: every call.
    Schedule,
}

/// The paths a blocking collective tries, in order.
pub const BLOCKING: &[Path] = &[
    Path::Resident,
    Path::Nvlink,
    Path::HostMemory,
    Path::Flag,
    Path::Scratch,
    Path::Piped,
    Path::Hier,
    Path::Schedule,
];

impl Path {
    /// Whether this path may take the call: the same answer on every rank.
    fn eligible(self, spec: &CollSpec) -> bool {
        match self {
            Path::Resident => gpu::eligible(&RESIDENT, spec),
            Path::Nvlink => gpu::eligible(&NVLINK, spec),
            Path::HostMemory => gpu::eligible(&HOST_MEMORY, spec),
            Path::Flag => flag::flag_eligible(spec).is_some(),
            Path::Scratch => mid::mid_eligible(spec),
            Path::Piped => piped::serves(spec).is_some(),
            Path::Hier => hier::serves(spec, true).is_some(),
            Path::Schedule => true,
        }
    }

    /// Run an eligible blocking call, number `no` of its communicator. `Ok(false)`: declined,
    /// on every rank.
    unsafe fn run(self, spec: &CollSpec, no: CallNo) -> MpiResult<bool> {
        match self {
            Path::Resident => gpu::run(&RESIDENT, spec, no),
            Path::Nvlink => gpu::run(&NVLINK, spec, no),
            Path::HostMemory => gpu::run(&HOST_MEMORY, spec, no),
            Path::Flag => flag::run_flag(spec, no),
            Path::Scratch => mid::run_mid(spec, no),
            Path::Piped => match piped::serves(spec) {
                Some(plan) => piped::run(spec, no, &plan),
                None => Ok(false),
            },
            Path::Hier => match hier::serves(spec, true) {
                Some(nodes) => wait_schedule(spec.start_on(Some(no), Some(nodes))?),
                None => Ok(false),
            },
            Path::Schedule => wait_schedule(spec.start(Some(no))?),
        }
    }
}

/// Completes a started blocking schedule.
fn wait_schedule(k: ReqKind) -> MpiResult<bool> {
    let st = crate::runtime::wait_kind(k)?;
    if st.error != 0 {
        return Err(MpiError::new(st.error, "collective failed"));
    }
    Ok(true)
}

/// Run a blocking collective on the first path of [`BLOCKING`] that takes it.
pub(crate) unsafe fn run_blocking(spec: CollSpec) -> MpiResult<()> {
    // Every path of the call shares its number (engine::collcheck's CallNo).
    let no = CallNo::new(spec.comm.next_coll_seq());
    let r = run_numbered(&spec, no);
    if r.is_err() {
        // A failed call (ranks that called different collectives fail it) restarts the
        // numbering of the resident kernels' flags the same way on every rank that failed it.
        crate::gpu::resident::call_failed(&spec.comm.gpu, no.seq);
    }
    r
}

/// [`run_blocking`] as call number `no` (an internal collective of a GPU path: `no.sub > 0`).
pub(crate) unsafe fn run_numbered(spec: &CollSpec, no: CallNo) -> MpiResult<()> {
    for &path in BLOCKING {
        if path.eligible(spec) && path.run(spec, no)? {
            return Ok(());
        }
    }
    Err(MpiError::intern("no collective path took the call"))
}

/// Start a nonblocking or persistent collective: its schedule (hierarchical where
/// [`Path::Hier`] would take the blocking call, except gatherv and scatterv, which stay flat),
/// as a request's state machine.
pub(crate) unsafe fn start(spec: &CollSpec) -> MpiResult<ReqKind> {
    spec.start_on(None, hier::serves(spec, false))
}
