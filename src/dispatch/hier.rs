//! The hierarchical path: the collectives of `coll::hier::supports` on a communicator
//! whose ranks span nodes, as the schedules of `coll::hier` (inside each node, between one
//! leader per node, inside the node again), run by the engine like every schedule.
//!
//! Eligibility is a rule on what every rank of the communicator shares: the communicator's
//! nodes (`CommObj::nodes`, set at its creation from the job's node map), the collective,
//! whether the call blocks (gatherv and scatterv only then: their leaders learn their members'
//! counts inside the node first, `coll::hier::build_v`), whether the op commutes, and
//! `GPUMPI_COLL_HIER`.

use super::call::CollSpec;
use crate::coll::hier;

/// The communicator's nodes, if the hierarchical schedules take `spec`, a blocking call or not
/// (`CollSpec::start_on` then runs them).
pub(super) fn serves(spec: &CollSpec, blocking: bool) -> Option<&hier::Nodes> {
    let nodes = spec.comm.nodes.as_deref()?;
    if !crate::config::snapshot().coll.hier || !hier::supports(spec.kind, blocking) {
        return None;
    }
    if spec.kind.is_reduction() && !matches!(spec.red, Some((_, true))) {
        return None;
    }
    Some(nodes)
}
