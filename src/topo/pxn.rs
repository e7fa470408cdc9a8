//! PXN routing as a pure plan: which rank puts a message between two nodes on the network.
//!
//! On a rail-optimized fabric a message from rank `s` (rail `a`) to rank `d` on another node
//! (rail `b != a`) either crosses the spine (sent by `s` over rail `a`) or, with PXN, first
//! moves inside the node (shared memory for host buffers, NVLink for device buffers) to a
//! rank `p` of `s`'s node on rail `b`, which sends it over rail `b` to `d`: network traffic
//! stays on its rail, and `p` can combine the messages of several local ranks bound for `d`
//! into one network operation (aggregation). The receive stays local to `d`.
//!
//! The rules of [`proxy`], numbered as the tests check them:
//! 1. same node: no network hop (`None`);
//! 2. PXN off, or `s` already on `d`'s rail: `s` sends itself;
//! 3. no rank of `s`'s node on `d`'s rail: `s` sends itself (the message crosses rails);
//! 4. otherwise the ranks of `s`'s node on `d`'s rail, ascending, take the remote ranks of
//!    that rail in turn: `d` is the `k`-th rank of its node on rail `b`, and the `k mod m`-th of
//!    the `m` candidates forwards. Every message from one node to `d` then goes through one
//!    rank (the most aggregation), and the remote ranks of a rail are spread over the
//!    candidates.
//!
//! Every rank computes the same plan from the same [`Layout`] (the node map and each rank's
//! rail, exchanged at `MPI_Init`), so a forwarder knows what it forwards without asking.

/// Where every rank of a job sits: its node and its rail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub node_of: Vec<usize>,
    pub rail_of: Vec<usize>,
}

/// `GPUMPI_PXN`, parsed once into the configuration snapshot (`config::NetConfig::pxn`).
pub use crate::config::Pxn as Mode;

impl Layout {
    pub fn size(&self) -> usize {
        self.node_of.len()
    }

    /// The ranks of `node` on `rail`, ascending.
    pub fn on_rail(&self, node: usize, rail: usize) -> impl Iterator<Item = usize> + '_ {
        (0..self.size()).filter(move |&r| self.node_of[r] == node && self.rail_of[r] == rail)
    }

    /// Whether PXN changes any route: some message between nodes would cross rails and a rank
    /// of the sender's node sits on the destination's rail.
    pub fn helps(&self) -> bool {
        (0..self.size()).any(|s| {
            (0..self.size()).any(|d| {
                self.node_of[s] != self.node_of[d]
                    && self.rail_of[s] != self.rail_of[d]
                    && self
                        .on_rail(self.node_of[s], self.rail_of[d])
                        .next()
                        .is_some()
            })
        })
    }

    /// Whether PXN is used under `mode`: `On` always, `Off` never, `Auto` where it helps.
    pub fn enabled(&self, mode: Mode) -> bool {
        match mode {
            Mode::On => true,
            Mode::Off => false,
            Mode::Auto => self.helps(),
        }
    }
}

/// The rank that sends a message from `src` to `dst` over the network (`None`: same node).
/// See the module documentation for the rules.
pub fn proxy(l: &Layout, src: usize, dst: usize, pxn: bool) -> Option<usize> {
    let (node, rail) = (l.node_of[src], l.rail_of[dst]);
    if node == l.node_of[dst] {
        return None;
    }
    if !pxn || l.rail_of[src] == rail {
        return Some(src);
    }
    let cand: Vec<usize> = l.on_rail(node, rail).collect();
    if cand.is_empty() {
        return Some(src);
    }
    let k = l
        .on_rail(l.node_of[dst], rail)
        .take_while(|&r| r != dst)
        .count();
    Some(cand[k % cand.len()])
}

/// How rank `me` reaches each rank (index = destination world rank).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hop {
    /// This rank, or a rank of this node: shared memory.
    Local,
    /// Over the network from this rank.
    Net,
    /// Through the rank given (on this node), which sends it over the network.
    Via(usize),
}

/// Rank `me`'s routes to every rank.
pub fn routes(l: &Layout, me: usize, pxn: bool) -> Vec<Hop> {
    (0..l.size())
        .map(|d| match proxy(l, me, d, pxn) {
            None => Hop::Local,
            Some(p) if p == me => Hop::Net,
            Some(p) => Hop::Via(p),
        })
        .collect()
}

/// The ranks `me` forwards messages to for other ranks of its node (index = world rank).
pub fn forwarded_to(l: &Layout, me: usize, pxn: bool) -> Vec<bool> {
    (0..l.size())
        .map(|d| (0..l.size()).any(|s| s != me && proxy(l, s, d, pxn) == Some(me)))
        .collect()
}

/// The ranks of `me`'s node that send through `me` (index = world rank): `me` keeps
/// forwarding at `MPI_Finalize` until each of them said it sends nothing more.
pub fn forwarded_for(l: &Layout, me: usize, pxn: bool) -> Vec<bool> {
    (0..l.size())
        .map(|s| s != me && (0..l.size()).any(|d| proxy(l, s, d, pxn) == Some(me)))
        .collect()
}

/// What one all-to-all (every rank one message to every rank of another node) puts on the
/// network under a plan.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Messages between nodes.
    pub messages: usize,
    /// Network operations: one per message, or, with aggregation, one per (sender,
    /// destination) pair that has messages.
    pub ops: usize,
    /// Network messages whose sender and destination are on different rails.
    pub cross_rail: usize,
    /// Messages moved inside the node to a forwarding rank first.
    pub forwarded: usize,
}

/// The network traffic of one all-to-all under PXN on or off, with or without aggregation.
pub fn alltoall(l: &Layout, pxn: bool, aggregate: bool) -> Traffic {
    let mut t = Traffic::default();
    let mut pairs = std::collections::BTreeSet::new();
    for s in 0..l.size() {
        for d in 0..l.size() {
            let Some(p) = proxy(l, s, d, pxn) else {
                continue;
            };
            t.messages += 1;
            t.forwarded += (p != s) as usize;
            if l.rail_of[p] != l.rail_of[d] {
                t.cross_rail += 1;
            }
            if !aggregate || pairs.insert((p, d)) {
                t.ops += 1;
            }
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `nodes` nodes of `per` ranks, rank `i` of a node on rail `rail(node, i)`.
    fn layout(nodes: usize, per: usize, rail: impl Fn(usize, usize) -> usize) -> Layout {
        let mut l = Layout {
            node_of: Vec::new(),
            rail_of: Vec::new(),
        };
        for n in 0..nodes {
            for i in 0..per {
                l.node_of.push(n);
                l.rail_of.push(rail(n, i));
            }
        }
        l
    }

    /// Deterministic pseudo-random numbers (an LCG), for irregular layouts.
    fn lcg(seed: &mut u64) -> usize {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (*seed >> 33) as usize
    }

    /// Every layout shape the tests walk: 2-3 nodes, 1-8 ranks per node, 1-8 rails, ranks
    /// round-robin over the rails, in blocks, or at random (so that some nodes miss rails).
    fn shapes() -> Vec<(String, Layout, usize)> {
        let mut out = Vec::new();
        let mut seed = 7u64;
        for nodes in 2..=3 {
            for per in 1..=8 {
                for rails in 1..=8 {
                    out.push((
                        format!("{nodes}x{per} rr/{rails}"),
                        layout(nodes, per, |_, i| i % rails),
                        rails,
                    ));
                    out.push((
                        format!("{nodes}x{per} block/{rails}"),
                        layout(nodes, per, |_, i| i * rails / per),
                        rails,
                    ));
                    let r: Vec<usize> = (0..nodes * per).map(|_| lcg(&mut seed) % rails).collect();
                    out.push((
                        format!("{nodes}x{per} random/{rails} {r:?}"),
                        layout(nodes, per, |n, i| r[n * per + i]),
                        rails,
                    ));
                }
            }
        }
        out
    }

    #[test]
    fn rules_hold_on_every_shape() {
        for (name, l, _) in shapes() {
            for s in 0..l.size() {
                for d in 0..l.size() {
                    let off = proxy(&l, s, d, false);
                    let on = proxy(&l, s, d, true);
                    if l.node_of[s] == l.node_of[d] {
                        // Rule 1.
                        assert_eq!((off, on), (None, None), "{name}: {s}->{d}");
                        continue;
                    }
                    // Rule 2: off, the sender sends; on its own rail too.
                    assert_eq!(off, Some(s), "{name}: {s}->{d}");
                    let p = on.unwrap();
                    assert_eq!(l.node_of[p], l.node_of[s], "{name}: {s}->{d} via {p}");
                    let has = l.on_rail(l.node_of[s], l.rail_of[d]).next().is_some();
                    if l.rail_of[s] == l.rail_of[d] {
                        assert_eq!(p, s, "{name}: {s}->{d}");
                    } else if !has {
                        // Rule 3.
                        assert_eq!(p, s, "{name}: {s}->{d}");
                    } else {
                        // Rule 4: on the destination's rail.
                        assert_eq!(l.rail_of[p], l.rail_of[d], "{name}: {s}->{d} via {p}");
                    }
                    // Every message from one node to `d` leaves through one rank.
                    for s2 in (0..l.size()).filter(|&x| l.node_of[x] == l.node_of[s]) {
                        if has && l.rail_of[s2] != l.rail_of[d] && l.rail_of[s] != l.rail_of[d] {
                            assert_eq!(proxy(&l, s2, d, true), on, "{name}: {s2}->{d}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn no_cross_rail_messages_where_every_rail_has_a_local_rank() {
        let mut checked = 0;
        for (name, l, rails) in shapes() {
            let full = (0..=*l.node_of.iter().max().unwrap())
                .all(|n| (0..rails).all(|r| l.on_rail(n, r).next().is_some()));
            let off = alltoall(&l, false, false);
            let on = alltoall(&l, true, false);
            assert_eq!(on.messages, off.messages, "{name}");
            if full {
                assert_eq!(on.cross_rail, 0, "{name}: {on:?}");
                checked += 1;
            }
            // PXN never adds cross-rail messages.
            assert!(on.cross_rail <= off.cross_rail, "{name}: {on:?} vs {off:?}");
            // Forwarded messages are exactly the cross-rail ones PXN removed.
            assert_eq!(on.forwarded, off.cross_rail - on.cross_rail, "{name}");
        }
        assert!(checked > 50, "{checked} full layouts");
    }

    #[test]
    fn aggregation_divides_operations_by_the_rails() {
        // Every rail has the same number of ranks on every node: with PXN each remote rank
        // gets one aggregated operation from the forwarder of each other node, plus one from
        // each other rank of its rail there (they send their own directly): the operations
        // drop from one per message by the number of rails.
        for nodes in 2..=3 {
            for rails in [1, 2, 4, 8] {
                for per_rail in 1..=2 {
                    let per = rails * per_rail;
                    if per > 8 {
                        continue;
                    }
                    let l = layout(nodes, per, |_, i| i % rails);
                    let off = alltoall(&l, false, false);
                    let on = alltoall(&l, true, true);
                    let remote = nodes * per * (nodes - 1) * per;
                    assert_eq!(off.messages, remote);
                    assert_eq!(off.ops, remote);
                    assert_eq!(on.ops, remote / rails, "{nodes}x{per}, {rails} rails");
                    assert_eq!(on.cross_rail, 0);
                    assert_eq!(off.cross_rail, remote - remote / rails);
                    // Aggregation without PXN: one operation per pair of ranks, nothing gained.
                    assert_eq!(alltoall(&l, false, true).ops, remote);
                }
            }
        }
    }

    #[test]
    fn remote_ranks_of_a_rail_are_spread_over_the_forwarders() {
        // 2 nodes x 4 ranks, 2 rails: ranks 0,2 on rail 0 and 1,3 on rail 1 of each node.
        let l = layout(2, 4, |_, i| i % 2);
        // To node 1's rail-1 ranks 5 and 7: through 1 and 3 in turn.
        assert_eq!(proxy(&l, 0, 5, true), Some(1));
        assert_eq!(proxy(&l, 0, 7, true), Some(3));
        assert_eq!(proxy(&l, 2, 7, true), Some(3));
        assert_eq!(proxy(&l, 1, 7, true), Some(1), "own rail: direct");
        assert_eq!(
            routes(&l, 0, true),
            [
                Hop::Local,
                Hop::Local,
                Hop::Local,
                Hop::Local,
                Hop::Net,
                Hop::Via(1),
                Hop::Net,
                Hop::Via(3)
            ]
        );
        assert!(routes(&l, 0, false)[4..].iter().all(|h| *h == Hop::Net));
        // Rank 0 forwards to 4 (for 1 and 3), rank 3 to 7 (for 0 and 2); nobody without PXN.
        let to = |me, pxn| -> Vec<usize> {
            let f = forwarded_to(&l, me, pxn);
            (0..8).filter(|&d| f[d]).collect()
        };
        assert_eq!(to(0, true), [4]);
        assert_eq!(to(3, true), [7]);
        assert!(to(0, false).is_empty());
    }

    #[test]
    fn mode_parses_and_auto_follows_the_layout() {
        assert_eq!(Mode::parse(None), Ok(Mode::Auto));
        assert_eq!(Mode::parse(Some("AUTO")), Ok(Mode::Auto));
        assert_eq!(Mode::parse(Some("0")), Ok(Mode::Off));
        assert_eq!(Mode::parse(Some("1")), Ok(Mode::On));
        assert!(Mode::parse(Some("2"))
            .unwrap_err()
            .contains("GPUMPI_PXN=\"2\""));
        let one_rail = layout(2, 2, |_, _| 0);
        let two = layout(2, 2, |_, i| i);
        // One rank per node: nobody to forward through.
        let lonely = layout(2, 1, |n, _| n);
        let one_node = layout(1, 4, |_, i| i);
        assert!(!one_rail.enabled(Mode::Auto) && one_rail.enabled(Mode::On));
        assert!(two.enabled(Mode::Auto) && !two.enabled(Mode::Off));
        assert!(!lonely.enabled(Mode::Auto));
        assert!(!one_node.enabled(Mode::Auto));
    }
}
