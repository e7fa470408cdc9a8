//! The hook of the mid-size shared-memory collectives (`engine::scratch`) into the blocking
//! collective path: MPI_COMM_WORLD's bcast, reduce and allreduce with a predefined op, above the
//! flag slots and up to `GPUMPI_SHM_MID_MAX` bytes.
//!
//! Whether a call goes this way depends only on what every rank has in common (the collective,
//! the communicator, the byte count, the op and the configuration), never on where one rank's
//! buffers live: device buffers are staged through host mirrors and non-contiguous ones packed
//! (as for the flag slots), so all ranks take the same path.

use super::{flag_idle_with, reducer, CollSpec, Flat, Reduction};
use crate::abi::runtime;
use crate::coll::CollKind;
use crate::engine::scratch::MidOp;
use crate::mpi::error::MpiResult;

/// Run `spec` through the world's scratch areas. `Ok(false)`: not this path (every rank
/// declines alike).
///
/// # Safety
/// The buffers of `spec` were validated for the call (`CollSpec::check`).
pub(super) unsafe fn run(spec: &CollSpec) -> MpiResult<bool> {
    // Context id 0 is MPI_COMM_WORLD's (reserved at MPI_Init, never reused).
    if spec.comm.ctx != 0 || spec.bytes == 0 {
        return Ok(false);
    }
    let red = match (spec.kind, &spec.red) {
        (CollKind::Bcast, _) => None,
        (CollKind::Reduce | CollKind::Allreduce, Some((r @ Reduction::Builtin(..), _))) => Some(r),
        _ => return Ok(false),
    };
    let Some((scratch, max)) = runtime::world_mid() else {
        return Ok(false);
    };
    if spec.bytes > max {
        return Ok(false);
    }
    let elem = red.map_or(1, |r| r.elem_size());
    if elem > scratch.cap() {
        return Ok(false);
    }
    let k = runtime::next_mid_seq();
    let (send, recv, input) = Flat::sides(spec)?;
    let reduce = reducer(red);
    let len = spec.bytes;
    let op = match spec.kind {
        CollKind::Bcast => MidOp::Bcast {
            root: spec.root,
            buf: recv.ptr,
            len,
        },
        CollKind::Reduce => MidOp::Reduce {
            root: spec.root,
            input,
            output: recv.ptr,
            len,
            elem,
            reduce: &reduce,
        },
        _ => MidOp::Allreduce {
            input,
            output: recv.ptr,
            len,
            elem,
            reduce: &reduce,
        },
    };
    tracing::debug!(
        coll = spec.kind.name(),
        algo = "scratch areas",
        bytes = len,
        ranks = scratch.size(),
        "collective over shared memory"
    );
    scratch.run(k, &op, &mut flag_idle_with(scratch.is_oversubscribed()))?;
    let received = match spec.kind {
        CollKind::Bcast => spec.root != spec.comm.rank,
        CollKind::Reduce => spec.root == spec.comm.rank,
        _ => true,
    };
    if received {
        recv.finish(spec.recv.as_ref())?;
    }
    drop(send);
    Ok(true)
}
