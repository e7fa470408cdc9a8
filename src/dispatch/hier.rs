//! The hierarchical path: the collectives of `coll::hier::supports` on a communicator
//! whose ranks span nodes, as the schedules of `coll::hier` (inside each node, between one
//! leader per node, inside the node again), run by the engine like every schedule.
//!
//! Eligibility is a rule on what every rank of the communicator shares: the communicator's
//! nodes (`CommObj::nodes`, set at its creation from the job's node map), the collective,
//! whether the op commutes, and `GPUMPI_COLL_HIER`.

use super::call::CollSpec;
use crate::coll::hier;

/// The communicator's nodes, if the hierarchical schedules take `spec` (`CollSpec::start_on`
/// then runs them).
pub(super) fn serves(spec: &CollSpec) -> Option<&hier::Nodes> {
    let nodes = spec.comm.nodes.as_deref()?;
    if !crate::config::snapshot().coll.hier || !hier::supports(spec.kind) {
        return None;
    }
    if spec.kind.is_reduction() && !matches!(spec.red, Some((_, true))) {
        return None;
    }
    Some(nodes)
}
