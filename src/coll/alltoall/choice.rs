//! Which schedule an alltoall between nodes takes with PXN on: the rail aggregators
//! (`rails`) or the forwarders (`pxn`), by block size ([`rail_aggregators_pay`]), or as
//! `GPUMPI_PXN_ALLTOALL` forces.

/// The PXN alltoall of a communicator: the forwarders (`pxn::Via`) and the rail aggregators
/// (`rails::Rails`) over its ranks, with the size below which the rail aggregators' schedule
/// runs ([`Plan::pick`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub via: super::pxn::Via,
    pub rails: super::rails::Rails,
    /// The most ranks on one node of the communicator.
    pub per_node: usize,
    /// `relay` of [`rail_aggregators_pay`]: the job's bulk threshold.
    pub relay: usize,
    pub force: Force,
}

/// `GPUMPI_PXN_ALLTOALL`: which schedule an alltoall through PXN takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Force {
    /// By size ([`rail_aggregators_pay`]).
    Auto,
    /// One aggregator per (node, rail) at every size.
    Rails,
    /// The forwarders at every size.
    Forwarders,
}

impl Force {
    pub fn parse(v: Option<&str>) -> Result<Force, String> {
        match v.map(str::trim).unwrap_or("") {
            "" | "auto" => Ok(Force::Auto),
            "rails" => Ok(Force::Rails),
            "forwarders" => Ok(Force::Forwarders),
            o => Err(format!(
                "GPUMPI_PXN_ALLTOALL={o}: expected auto, rails or forwarders"
            )),
        }
    }
}

/// The schedule an alltoall through PXN takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pick {
    /// `rails`: one network message per (node pair, rail), relayed by the rail's aggregators.
    Rails,
    /// `pxn`: one network message per (forwarder, destination).
    Forwarders,
}

impl Pick {
    pub fn name(self) -> &'static str {
        match self {
            Pick::Rails => "rail aggregators",
            Pick::Forwarders => "forwarders",
        }
    }
}

/// Whether the rail aggregators' schedule costs less than the forwarders' for blocks of
/// `block` bytes on nodes of up to `per_node` ranks. Both put the same bytes on each rail and
/// nothing across rails; with `k` ranks of a node on a rail and `N` nodes they differ in
///
/// - network messages: each forwarder sends `(N-1) k` messages, an aggregator `N-1`, so the
///   forwarders' rail pays `(N-1)(k-1)` more message costs `a` on one rank's path;
/// - relayed bytes: the receiving aggregator gets the blocks of its rail's other `k-1` ranks,
///   `(N-1) per_node block` bytes each, and passes them on through shared memory, one more
///   copy `c` per byte on one rank's path, which the forwarders' destinations receive directly.
///
/// So the aggregators win while `(N-1)(k-1) a > (k-1)(N-1) per_node block c`, that is while
/// `per_node * block < a / c`, whatever `N` and `k`: while what one rank gets from one node is
/// smaller than the size at which a network message's fixed cost equals the cost of copying
/// its bytes. That size is what the transport's bulk threshold (`GPUMPI_NET_BULK_MIN`) stands
/// for: below it a message is cheaper copied through frames than sent with a round trip more.
/// `relay` is the job's (the smallest of every rank's, so that every rank decides alike).
pub fn rail_aggregators_pay(per_node: usize, block: usize, relay: usize) -> bool {
    per_node.saturating_mul(block) < relay
}

impl Plan {
    /// The schedule for blocks of `block` bytes.
    pub fn pick(&self, block: usize) -> Pick {
        match self.force {
            Force::Rails => Pick::Rails,
            Force::Forwarders => Pick::Forwarders,
            Force::Auto if rail_aggregators_pay(self.per_node, block, self.relay) => Pick::Rails,
            Force::Auto => Pick::Forwarders,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coll::hier::Nodes;

    #[test]
    fn rail_aggregators_below_the_relay_size_forwarders_from_there() {
        // What one rank gets from one node (ranks per node x block) against the threshold.
        assert!(rail_aggregators_pay(4, 16383, 65536));
        assert!(!rail_aggregators_pay(4, 16384, 65536));
        assert!(rail_aggregators_pay(2, 32767, 65536));
        assert!(!rail_aggregators_pay(8, 8192, 65536));
        assert!(!rail_aggregators_pay(usize::MAX, 2, 65536));
        let nodes = Nodes::new(&[0, 0, 0, 0, 1, 1, 1, 1]);
        let rail = [0, 1, 0, 1, 0, 1, 0, 1];
        let mut plan = Plan {
            via: crate::coll::alltoall::pxn::tests::rail_rule(&nodes, &rail),
            rails: crate::coll::alltoall::rails::Rails::new(&nodes, &rail),
            per_node: 4,
            relay: 65536,
            force: Force::Auto,
        };
        assert_eq!(plan.pick(1), Pick::Rails);
        assert_eq!(plan.pick(16383), Pick::Rails);
        assert_eq!(plan.pick(16384), Pick::Forwarders);
        plan.relay = 1 << 20;
        assert_eq!(plan.pick(16384), Pick::Rails);
        plan.force = Force::Forwarders;
        assert_eq!(plan.pick(1), Pick::Forwarders);
        plan.force = Force::Rails;
        assert_eq!(plan.pick(1 << 30), Pick::Rails);
        assert_eq!(Force::parse(None), Ok(Force::Auto));
        assert_eq!(Force::parse(Some(" rails ")), Ok(Force::Rails));
        assert_eq!(Force::parse(Some("forwarders")), Ok(Force::Forwarders));
        assert!(Force::parse(Some("leaders"))
            .unwrap_err()
            .contains("GPUMPI_PXN_ALLTOALL"));
    }
}
