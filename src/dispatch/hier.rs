//! The hierarchical path: allreduce, bcast, reduce, allgather and alltoall on a communicator
//! whose ranks span nodes, as the schedules of `coll::hier` (inside each node, between one
//! leader per node, inside the node again), run by the engine like every schedule.
//!
//! Eligibility is a rule on what every rank of the communicator shares: the communicator's
//! nodes (`CommObj::nodes`, set at its creation from the job's node map), the collective,
//! whether the op commutes, and `GPUMPI_COLL_HIER`.

use super::call::CollSpec;
use crate::abi::request::ReqKind;
use crate::coll::hier;
use crate::mpi::error::MpiResult;

/// The communicator's nodes, if the hierarchical schedules take `spec`.
fn serves(spec: &CollSpec) -> Option<&hier::Nodes> {
    let nodes = spec.comm.nodes.as_deref()?;
    if !crate::config::snapshot().coll.hier || !hier::supports(spec.kind) {
        return None;
    }
    if spec.kind.is_reduction() && !matches!(spec.red, Some((_, true))) {
        return None;
    }
    Some(nodes)
}

/// Whether the hierarchical path takes `spec`: the same answer on every rank.
pub(super) fn hier_eligible(spec: &CollSpec) -> bool {
    serves(spec).is_some()
}

/// Start `spec` as its hierarchical schedule (`None` for `seq`: the communicator's next call
/// number); `Ok(None)` when the path does not serve it.
///
/// # Safety
/// The buffers of `spec` were validated for the call (`CollSpec::check`).
pub(super) unsafe fn start_hier(spec: &CollSpec, seq: Option<i32>) -> MpiResult<Option<ReqKind>> {
    match serves(spec) {
        Some(nodes) => spec.start_on(seq, Some(nodes)).map(Some),
        None => Ok(None),
    }
}
