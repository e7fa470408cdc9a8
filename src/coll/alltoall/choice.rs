//! Which schedule an alltoall between nodes takes with PXN on: the node leaders (`hier`, the
//! schedule PXN off takes), the rail aggregators (`rails`) or the forwarders (`pxn`), by block
//! size and the CPUs the ranks have ([`leaders_pay`], [`rail_aggregators_pay`]), or as
//! `GPUMPI_PXN_ALLTOALL` forces; for an alltoallv or alltoallw, the forwarders or the
//! aggregators per pair of nodes by the lengths between them
//! ([`rail_aggregators_pay_between`], [`Plan::picks_between`]).

use crate::coll::hier::{self, Nodes};
use crate::coll::{CollArgs, CollKind, Schedule};
use crate::mpi::error::MpiResult;

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
    /// `milli_cpus` of [`leaders_pay`]: the thousandths of a CPU the job's rank with the fewest
    /// has to itself (`coll::pieces::milli_cpus`, exchanged at `MPI_Init`).
    pub milli_cpus: usize,
    pub force: Force,
}

/// `GPUMPI_PXN_ALLTOALL`: which schedule an alltoall through PXN takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Force {
    /// By size and CPUs ([`leaders_pay`], [`rail_aggregators_pay`]).
    Auto,
    /// The node leaders at every size.
    Leaders,
    /// One aggregator per (node, rail) at every size.
    Rails,
    /// The forwarders at every size.
    Forwarders,
}

impl Force {
    pub fn parse(v: Option<&str>) -> Result<Force, String> {
        match v.map(str::trim).unwrap_or("") {
            "" | "auto" => Ok(Force::Auto),
            "leaders" => Ok(Force::Leaders),
            "rails" => Ok(Force::Rails),
            "forwarders" => Ok(Force::Forwarders),
            o => Err(format!(
                "GPUMPI_PXN_ALLTOALL={o}: expected auto, leaders, rails or forwarders"
            )),
        }
    }
}

/// The schedule an alltoall through PXN takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pick {
    /// `hier`: the lowest rank of each node gathers its node's blocks and sends one network
    /// message per pair of nodes (the schedule PXN off takes; its messages follow the PXN
    /// routes, so none crosses rails where a rank of the node sits on the other leader's rail).
    Leaders,
    /// `rails`: one network message per (node pair, rail), relayed by the rail's aggregators.
    Rails,
    /// `pxn`: one network message per (forwarder, destination).
    Forwarders,
}

impl Pick {
    pub fn name(self) -> &'static str {
        match self {
            Pick::Leaders => "node leaders",
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

/// Whether the node leaders' schedule (one rank of each node gathers, sends one message per
/// other node, and scatters: the schedule PXN off takes) costs less than the rail aggregators'
/// for blocks of `block` bytes on nodes of up to `per_node` ranks, where the rank with the
/// fewest CPUs has `milli_cpus` thousandths of one to itself.
///
/// Below the size where [`rail_aggregators_pay`] a call's cost is its messages, not its bytes.
/// The two schedules take the same hops on a block's way (one through shared memory, one over
/// the network, one through shared memory) but differ in how many messages they move:
///
/// - one rank's path: a leader handles `2(P-1)` messages inside the node and `2(N-1)` over the
///   network, an aggregator as many plus `k-1` relayed, and the leader alone copies its whole
///   node's blocks twice and sends them over one rail. With a CPU per rank the ranks work in
///   parallel, a call takes about its longest path, and the aggregators cost no more;
/// - the node's total: the leaders' schedule moves `2(P-1)` messages inside the node, every
///   schedule without a leader `P(P-1)` (each ordered pair of the node's ranks, which
///   [`rail_aggregators_pay`] weighs on one path only). Where ranks share CPUs (fewer CPUs
///   than ranks: a rank waiting for a message gives its CPU to the others) a call takes about
///   the node's total work divided by its CPUs, which the leaders keep smallest.
///
/// So the leaders pay below the aggregators' size where a rank has less than a CPU to itself,
/// never where each has one. From the aggregators' size on the bytes dominate, and the rails
/// carrying their share (instead of the leader's one) win. `milli_cpus` is the job's least
/// (every rank computes the same, so every rank decides alike).
pub fn leaders_pay(per_node: usize, block: usize, relay: usize, milli_cpus: usize) -> bool {
    milli_cpus < 1000 && rail_aggregators_pay(per_node, block, relay)
}

/// [`rail_aggregators_pay`] for the blocks between one pair of nodes, of any lengths (an
/// alltoallv or alltoallw): `bytes` in all both ways between the two nodes, whose ranks
/// together are `ranks`. The aggregators pay while the mean of what one rank of the pair gets
/// from the other node, `bytes / ranks`, is below `relay`.
///
/// The mean, not the largest: both costs of [`rail_aggregators_pay`] add up over a rail. A
/// receiving aggregator relays the sum of what its rail's other ranks get from the other node
/// (one copy per byte), and the forwarders cost one network message more per such rank
/// (message counts do not depend on lengths, except that empty blocks are not sent), so on
/// each rail the comparison is the mean of what its ranks get against `relay`; over the pair
/// it is the mean over both nodes' ranks. With blocks of one length on nodes of `per_node`
/// ranks this is `rail_aggregators_pay(per_node, block, relay)` exactly (`bytes = 2 per_node^2
/// block`, `ranks = 2 per_node`), so an alltoallv with equal blocks takes the alltoall's
/// schedule (the leaders aside). A few large receivers among small ones on a rail (a skewed
/// pattern) can make the aggregators' busiest rail slower than the mean says; the largest
/// would misjudge the opposite way (one large block would send every small one through the
/// forwarders). Both nodes of the pair know every length between them after the count
/// exchange inside the node (`counts`: a node's ranks' send and receive lengths), so both
/// compute the same `bytes` and decide alike.
pub fn rail_aggregators_pay_between(bytes: usize, ranks: usize, relay: usize) -> bool {
    bytes < relay.saturating_mul(ranks)
}

impl Plan {
    /// The schedule for blocks of `block` bytes.
    pub fn pick(&self, block: usize) -> Pick {
        let (p, r, c) = (self.per_node, self.relay, self.milli_cpus);
        match self.force {
            Force::Leaders => Pick::Leaders,
            Force::Rails => Pick::Rails,
            Force::Forwarders => Pick::Forwarders,
            Force::Auto if leaders_pay(p, block, r, c) => Pick::Leaders,
            Force::Auto if rail_aggregators_pay(p, block, r) => Pick::Rails,
            Force::Auto => Pick::Forwarders,
        }
    }

    /// The schedule of the blocks between one pair of nodes of an alltoallv or alltoallw:
    /// `bytes` both ways between them, `ranks` ranks on the two together (the forwarders or
    /// the aggregators: the leaders' schedule takes no blocks of other lengths, so where it
    /// is forced, or where [`leaders_pay`] for an alltoall, below the same size, the
    /// aggregators take it).
    pub fn pick_between(&self, bytes: usize, ranks: usize) -> Pick {
        match self.force {
            Force::Forwarders => Pick::Forwarders,
            Force::Rails | Force::Leaders => Pick::Rails,
            Force::Auto if rail_aggregators_pay_between(bytes, ranks, self.relay) => Pick::Rails,
            Force::Auto => Pick::Forwarders,
        }
    }

    /// [`Self::pick_between`] for node `g` and each node `h` of `nodes` (entry `g`: the
    /// aggregators, not used), where `len(s, d)` is the length of the block from `s` to `d`
    /// for every `s` or `d` on `g` (`counts::NodeLens`). A rank of `h` computes the same
    /// entry for `g` from its own node's lengths: the same blocks both ways.
    pub fn picks_between(
        &self,
        nodes: &Nodes,
        g: usize,
        len: &dyn Fn(usize, usize) -> usize,
    ) -> Vec<Pick> {
        (0..nodes.count())
            .map(|h| {
                if h == g {
                    return Pick::Rails;
                }
                let mut bytes = 0usize;
                for &s in &nodes.ranks[g] {
                    for &d in &nodes.ranks[h] {
                        bytes = bytes.saturating_add(len(s, d)).saturating_add(len(d, s));
                    }
                }
                self.pick_between(bytes, nodes.ranks[g].len() + nodes.ranks[h].len())
            })
            .collect()
    }

    /// The schedule of a whole alltoall of `a.bytes` per block over `nodes` (the
    /// communicator's), and which one it is.
    pub fn build(&self, a: &CollArgs, nodes: &Nodes) -> MpiResult<(Pick, Schedule)> {
        let pick = self.pick(a.bytes);
        let sched = match pick {
            Pick::Leaders => hier::build(CollKind::Alltoall, a, nodes)?,
            Pick::Rails => super::rails::build(a, nodes, &self.rails),
            Pick::Forwarders => super::pxn::build(a, nodes, &self.via),
        };
        Ok((pick, sched))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            milli_cpus: 8000,
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
        assert_eq!(Force::parse(Some("leaders")), Ok(Force::Leaders));
        assert_eq!(Force::parse(Some(" rails ")), Ok(Force::Rails));
        assert_eq!(Force::parse(Some("forwarders")), Ok(Force::Forwarders));
        assert!(Force::parse(Some("pairwise"))
            .unwrap_err()
            .contains("GPUMPI_PXN_ALLTOALL"));
    }

    /// The leaders below the aggregators' size where ranks share CPUs (less than 1000
    /// thousandths each), never where each has a CPU; the same size boundary for any shape.
    #[test]
    fn leaders_below_the_relay_size_where_ranks_share_cpus() {
        // 2 nodes x 4 ranks on one 2-CPU machine (this build VM): 250 thousandths each.
        assert!(leaders_pay(4, 1, 65536, 250));
        assert!(leaders_pay(4, 16383, 65536, 250));
        assert!(!leaders_pay(4, 16384, 65536, 250));
        assert!(leaders_pay(4, 16383, 65536, 999));
        // A 64-core host with 8 ranks (8000 each), or exactly one CPU per rank.
        assert!(!leaders_pay(8, 1, 65536, 8000));
        assert!(!leaders_pay(4, 1, 65536, 1000));
        // 16 ranks per node on 8 CPUs: the size boundary scales with the ranks per node.
        assert!(leaders_pay(16, 4095, 65536, 500));
        assert!(!leaders_pay(16, 4096, 65536, 500));
        for (nodes, rail) in [
            (vec![0, 0, 0, 0, 1, 1, 1, 1], vec![0, 1, 0, 1, 0, 1, 0, 1]),
            (vec![0, 0, 1, 1], vec![0, 1, 0, 1]),
            (
                vec![0, 0, 0, 1, 1, 1, 2, 2, 2],
                vec![0, 1, 2, 0, 1, 2, 0, 1, 2],
            ),
        ] {
            let g = Nodes::new(&nodes);
            let per_node = g.ranks.iter().map(Vec::len).max().unwrap();
            let mut plan = Plan {
                via: crate::coll::alltoall::pxn::tests::rail_rule(&g, &rail),
                rails: crate::coll::alltoall::rails::Rails::new(&g, &rail),
                per_node,
                relay: 65536,
                milli_cpus: 250,
                force: Force::Auto,
            };
            let edge = 65536usize.div_ceil(per_node);
            assert_eq!(plan.pick(1), Pick::Leaders, "{nodes:?}");
            assert_eq!(plan.pick(edge - 1), Pick::Leaders, "{nodes:?}");
            assert_eq!(plan.pick(edge), Pick::Forwarders, "{nodes:?}");
            plan.milli_cpus = 16000;
            assert_eq!(plan.pick(1), Pick::Rails, "{nodes:?}");
            assert_eq!(plan.pick(edge - 1), Pick::Rails, "{nodes:?}");
            assert_eq!(plan.pick(edge), Pick::Forwarders, "{nodes:?}");
            plan.force = Force::Leaders;
            assert_eq!(plan.pick(1 << 30), Pick::Leaders, "{nodes:?}");
            // Every rank of the shape builds the schedule its pick names.
            for r in 0..nodes.len() {
                let a = CollArgs {
                    nodes: g.count(),
                    ..CollArgs::new(r, nodes.len(), 8)
                };
                let (pick, sched) = plan.build(&a, &g).unwrap();
                assert_eq!(pick, Pick::Leaders);
                assert_eq!(sched, hier::build(CollKind::Alltoall, &a, &g).unwrap());
            }
        }
    }

    /// The per-pair rule is the alltoall's for blocks of one length, at every length.
    #[test]
    fn between_a_pair_equal_blocks_decide_as_the_alltoall() {
        for per_node in 1..=8 {
            for block in [0, 1, 100, 8191, 8192, 16383, 16384, 65535, 65536, 1 << 20] {
                let bytes = 2 * per_node * per_node * block;
                assert_eq!(
                    rail_aggregators_pay_between(bytes, 2 * per_node, 65536),
                    rail_aggregators_pay(per_node, block, 65536),
                    "{per_node} x {block}"
                );
            }
        }
        // The mean over the pair's ranks: 2 + 3 ranks, 5 * 65536 bytes is the edge.
        assert!(rail_aggregators_pay_between(5 * 65536 - 1, 5, 65536));
        assert!(!rail_aggregators_pay_between(5 * 65536, 5, 65536));
        assert!(!rail_aggregators_pay_between(usize::MAX, usize::MAX, 65536));
    }

    /// Synthetic length matrices over 3 nodes of 2, 3 and 4 ranks: small blocks between nodes
    /// 0 and 1, large between 0 and 2, and between 1 and 2 large one way and empty the other
    /// (the mean of both ways decides). Each rank computes its node's picks from what the count
    /// exchange inside its node tells it (simulated), and the two nodes of every pair agree.
    #[test]
    fn picks_between_pairs_from_either_nodes_lengths() {
        use crate::coll::alltoall::counts;
        use crate::coll::sim::{simulate, RankBufs};
        let node_of = [0, 1, 2, 0, 1, 2, 2, 1, 2];
        let nodes = Nodes::new(&node_of);
        let n = node_of.len();
        let rail: Vec<usize> = (0..n).map(|r| r % 2).collect();
        let mut plan = Plan {
            via: crate::coll::alltoall::pxn::tests::rail_rule(&nodes, &rail),
            rails: crate::coll::alltoall::rails::Rails::new(&nodes, &rail),
            per_node: 4,
            relay: 65536,
            milli_cpus: 250,
            force: Force::Auto,
        };
        // Lengths vary per block around each pair's scale.
        let scale = |g: usize, h: usize| match (g.min(h), g.max(h), g < h) {
            (0, 1, _) => 1000,
            (0, 2, _) => 300_000,
            (1, 2, true) => 200_000,
            (1, 2, false) => 0,
            _ => 7,
        };
        let global = |s: usize, d: usize| {
            let k = scale(node_of[s], node_of[d]);
            k + (s * 13 + d * 5) % 11 * k / 10
        };
        let picks_of = |plan: &Plan| -> Vec<Vec<Pick>> {
            let scheds: Vec<Schedule> = (0..n).map(|r| counts::build(&nodes, r)).collect();
            let mut bufs: Vec<RankBufs> = (0..n)
                .map(|r| RankBufs {
                    send: counts::row(n, |d| global(r, d), |s| global(s, r)),
                    recv: vec![0; nodes.ranks[node_of[r]].len() * counts::row_bytes(n)],
                })
                .collect();
            simulate(&scheds, &mut bufs, 1, &|_, _| unreachable!("no reduction"));
            (0..n)
                .map(|r| {
                    let g = node_of[r];
                    let lens = counts::NodeLens::new(&nodes, g, &bufs[r].recv);
                    plan.picks_between(&nodes, g, &|s, d| lens.len(s, d))
                })
                .collect()
        };
        let want = |g: usize, h: usize| match (g.min(h), g.max(h)) {
            (0, 1) => Pick::Rails,
            _ => Pick::Forwarders,
        };
        let picks = picks_of(&plan);
        for r in 0..n {
            for p in 0..n {
                let (g, h) = (node_of[r], node_of[p]);
                if g != h {
                    assert_eq!(picks[r][h], picks[p][g], "rank {r} and rank {p}");
                    assert_eq!(picks[r][h], want(g, h), "rank {r}: node {g} with {h}");
                }
            }
        }
        // A larger threshold keeps every pair on the aggregators; forcing overrides the sizes.
        plan.relay = 1 << 30;
        assert!(picks_of(&plan).iter().flatten().all(|&p| p == Pick::Rails));
        plan.relay = 1;
        plan.force = Force::Rails;
        assert!(picks_of(&plan).iter().flatten().all(|&p| p == Pick::Rails));
        plan.force = Force::Leaders;
        assert!(picks_of(&plan).iter().flatten().all(|&p| p == Pick::Rails));
        plan.force = Force::Forwarders;
        plan.relay = 1 << 30;
        for (r, v) in picks_of(&plan).iter().enumerate() {
            for (h, &p) in v.iter().enumerate() {
                if h != node_of[r] {
                    assert_eq!(p, Pick::Forwarders);
                }
            }
        }
    }
}
