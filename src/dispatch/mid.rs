//! The scratch-area path: mid-size blocking collectives through the shared-memory scratch areas
//! (`engine::scratch`): MPI_COMM_WORLD's bcast, reduce and allreduce with a predefined op, above
//! the flag slots and up to `GPUMPI_SHM_MID_MAX` bytes.
//!
//! Whether a call goes this way depends only on what every rank has in common (the collective,
//! the communicator, the byte count, the op and the configuration), never on where one rank's
//! buffers live: device buffers are staged through host mirrors and non-contiguous ones packed
//! (as for the flag slots), so all ranks take the same path.

use super::call::{CollSpec, Reduction};
use super::flag::{check_start, idle_with, reducer, Flat};
use crate::coll::CollKind;
use crate::engine::collcheck::{CallNo, Path as CheckPath};
use crate::engine::scratch::{MidOp, Scratch};
use crate::mpi::error::MpiResult;
use crate::runtime;

/// The world's scratch areas and the call's reduction if this path serves `spec` (a rule on
/// values every rank shares).
fn serves(spec: &CollSpec) -> Option<(Scratch, Option<&Reduction>)> {
    // Context id 0 is MPI_COMM_WORLD's (reserved at MPI_Init, never reused). The areas are
    // shared memory: only a world on one node has them.
    // The library's own collectives never come here: a call's number in the scratch areas is
    // its sequence number, which its internal collectives share (`CallNo::sub`).
    if spec.comm.ctx != 0 || spec.bytes == 0 || spec.host_only || !spec.comm.one_node {
        return None;
    }
    let red = match (spec.kind, &spec.red) {
        (CollKind::Bcast, _) => None,
        (CollKind::Reduce | CollKind::Allreduce, Some((r @ Reduction::Builtin(..), _))) => Some(r),
        _ => return None,
    };
    let (scratch, max) = runtime::world_mid()?;
    if spec.bytes > max || red.map_or(1, |r| r.elem_size()) > scratch.cap() {
        return None;
    }
    Some((scratch, red))
}

/// Whether the scratch areas take `spec`: the same answer on every rank.
pub(super) fn mid_eligible(spec: &CollSpec) -> bool {
    serves(spec).is_some()
}

/// Run `spec`, number `seq` of MPI_COMM_WORLD, through the world's scratch areas.
///
/// # Safety
/// The buffers of `spec` were validated for the call (`CollSpec::check`).
pub(super) unsafe fn run_mid(spec: &CollSpec, no: CallNo) -> MpiResult<bool> {
    let Some((scratch, red)) = serves(spec) else {
        return Ok(false);
    };
    let elem = red.map_or(1, |r| r.elem_size());
    // The record of this call, checked while it waits (engine::collcheck).
    let mut watch = check_start(spec, no, CheckPath::Scratch);
    // The call's number in the areas: its sequence number (the calls of other paths take none,
    // so nothing a mismatched call did moves it).
    let k = (no.seq + 1) & 0xffff_ffff;
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
    scratch.run(
        k,
        &op,
        &mut idle_with(scratch.is_oversubscribed(), watch.as_mut()),
    )?;
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
