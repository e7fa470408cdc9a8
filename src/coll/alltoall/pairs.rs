//! Alltoall between nodes with its schedule chosen per pair of nodes: the blocks between two
//! nodes go through the forwarders ([`super::pxn`]) or through the rail aggregators
//! ([`super::rails`]), as `picks` says for that pair (`choice::Plan::picks_between`, which
//! both nodes of a pair compute alike from the lengths between them). A node whose pairs all
//! take one schedule runs that schedule's builder as it is; a node with pairs of both kinds
//! runs [`mixed`], whose messages between it and each other node are exactly those of the
//! pair's schedule, so that it composes with any other node's.
//!
//! [`mixed`], for rank `r` of node `g`:
//! 1. inside the node: each rank sends each other rank `t` of its node one message, its block
//!    for `t` followed by its blocks for the remote ranks whose blocks `t` puts on the network
//!    (ascending): for a remote rank of a forwarders' node, `t` is the forwarder of the PXN
//!    plan (`Via::get`), for one of an aggregators' node, the node's aggregator on the
//!    destination's rail (`Rails::sender`);
//! 2. between nodes, after the first epoch's wait: to each forwarders' node, one message per
//!    destination `r` forwards for; to each aggregators' node, one per rail of that node `r`
//!    aggregates for; from each forwarders' node, one message per rank that forwards for `r`;
//!    as its rail's receiving aggregator, one message from each aggregators' node; and, where
//!    `r` is not its rail's receiving aggregator, the receive of the third epoch;
//! 3. inside the node, after the second epoch's wait: the receiving aggregator sends each
//!    other rank of its node on its rail one message with the blocks from every remote rank of
//!    the aggregators' nodes (ascending).
//!
//! No deadlock: every network message is sent after its sender's first wait, which waits only
//! for messages inside the node that every rank posts before waiting (in every one of the three
//! builders: the aggregators' schedule waits for the third epoch's receive in its first epoch,
//! but only on a rank that puts nothing on the network); the third epoch's messages are sent
//! after the aggregator's second wait, which waits only for network messages. No confusion:
//! between two ranks of different nodes the call carries at most one message (one per
//! destination in the forwarders' pairs, one per receiving aggregator in the aggregators'
//! ones), and between two ranks of one node one per epoch, received in the order sent.

use super::choice::Pick;
use super::pxn::{self, send_packed, Via};
use super::rails::{self, Rails};
use super::{gather_in_node, input_blocks};
use crate::coll::hier::Nodes;
use crate::coll::schedule::{Builder, Region};
use crate::coll::{Block, CollArgs, Schedule};

/// The schedule of rank `a.rank` for an alltoall whose block from `s` to `d` is `len(s, d)`
/// bytes (`send[d]` in `Send`, `recv[d]` in `Recv` when in place, goes to `d`; `recv[s]`
/// comes from `s`), whose blocks between its node `g` and node `h` go through the forwarders
/// where `picks[h]` is [`Pick::Forwarders`], else through the rail aggregators (`picks[g]`
/// is not read). `len` as for `pxn::build_blocks` and `rails::build_blocks`.
#[allow(clippy::too_many_arguments)]
pub fn build_blocks(
    a: &CollArgs,
    nodes: &Nodes,
    via: &Via,
    rails: &Rails,
    picks: &[Pick],
    len: &dyn Fn(usize, usize) -> usize,
    send: &[Block],
    recv: &[Block],
) -> Schedule {
    let g = nodes.of[a.rank];
    let fw = |h: usize| picks[h] == Pick::Forwarders;
    let others = || (0..nodes.count()).filter(move |&h| h != g);
    if others().all(fw) {
        pxn::build_blocks(a, nodes, via, len, send, recv)
    } else if !others().any(fw) {
        rails::build_blocks(a, nodes, rails, len, send, recv)
    } else {
        mixed(a, nodes, via, rails, &fw, len, send, recv)
    }
}

/// What [`build_blocks`] takes from node `g`, for the debug log: "forwarders", "rail
/// aggregators", or both with the nodes of each ("forwarders to nodes 1 3, rail aggregators
/// to nodes 2").
pub fn describe(picks: &[Pick], g: usize) -> String {
    let to = |want: bool| -> Vec<String> {
        (0..picks.len())
            .filter(|&h| h != g && (picks[h] == Pick::Forwarders) == want)
            .map(|h| h.to_string())
            .collect()
    };
    let (f, r) = (to(true), to(false));
    match (f.is_empty(), r.is_empty()) {
        (_, true) => Pick::Forwarders.name().to_string(),
        (true, false) => Pick::Rails.name().to_string(),
        (false, false) => format!(
            "{} to nodes {}, {} to nodes {}",
            Pick::Forwarders.name(),
            f.join(" "),
            Pick::Rails.name(),
            r.join(" ")
        ),
    }
}

/// The schedule of a node with pairs of both kinds (module docs): the forwarders to the nodes
/// `h` with `fw(h)`, the rail aggregators to the others.
#[allow(clippy::too_many_arguments)]
fn mixed(
    a: &CollArgs,
    nodes: &Nodes,
    via: &Via,
    rails: &Rails,
    fw: &dyn Fn(usize) -> bool,
    len: &dyn Fn(usize, usize) -> usize,
    send: &[Block],
    recv: &[Block],
) -> Schedule {
    let (r, n) = (a.rank, a.size);
    let mut b = Builder::new();
    let (src, mut tmp) = input_blocks(&mut b, a, len, send, recv);
    let mut alloc = |l: usize| {
        tmp += l;
        tmp - l
    };
    let dst = |s: usize| Region::recv(recv[s].off, len(s, r));
    let g = nodes.of[r];
    let members = &nodes.ranks[g];
    let remote: Vec<usize> = (0..n).filter(|&d| nodes.of[d] != g).collect();
    // The rank of my node that puts the block from member s for remote d on the network.
    let carrier = |s: usize, d: usize| match fw(nodes.of[d]) {
        true => via.get(s, d),
        false => rails.sender(nodes, g, rails.rail(d)),
    };
    let my_rail = rails.rail(r);
    let my_recv_agg = rails.receiver(g, my_rail).expect("a rank on its own rail");
    // What the third epoch carries for member d: the blocks from the remote ranks of the
    // aggregators' nodes, ascending.
    let relayed = |d: usize| -> Vec<(usize, usize)> {
        remote
            .iter()
            .filter(|&&s| !fw(nodes.of[s]))
            .map(|&s| (s, len(s, d)))
            .collect()
    };

    // Epoch 1, inside the node: to each other member t, my block for t and those t carries.
    let gathered = gather_in_node(
        &mut b, &mut alloc, r, members, &remote, &carrier, &src, len, &dst,
    );
    if !a.in_place {
        b.copy(src[r], dst(r));
    }
    b.wait();
    gathered.unpack_own(&mut b, r, len, &dst);
    let held = |s: usize, d: usize| gathered.held(r, &src, len, s, d);

    // Epoch 2, between nodes: what I send.
    for (h, hm) in nodes.ranks.iter().enumerate() {
        if h == g {
            continue;
        }
        if fw(h) {
            // One message per destination I forward for: the blocks of the members whose
            // forwarder I am, ascending.
            for &d in hm {
                let blocks: Vec<Region> = members
                    .iter()
                    .copied()
                    .filter(|&s| via.get(s, d) == r)
                    .map(|s| held(s, d))
                    .collect();
                send_packed(&mut b, &mut alloc, d, &blocks);
            }
        } else {
            // One message per rail q of h I aggregate for, to h's aggregator on q: the blocks
            // for h's ranks on q (ascending) from every member (ascending).
            for q in rails.rails_of(h) {
                if rails.sender(nodes, g, q) != r {
                    continue;
                }
                let to = rails.receiver(h, q).expect("a rail of h");
                let blocks: Vec<Region> = hm
                    .iter()
                    .copied()
                    .filter(|&d| rails.rail(d) == q)
                    .flat_map(|d| members.iter().map(move |&s| (s, d)))
                    .map(|(s, d)| held(s, d))
                    .collect();
                send_packed(&mut b, &mut alloc, to, &blocks);
            }
        }
    }
    // Epoch 2: what I receive from other nodes.
    let mine_on_rail: Vec<usize> = members
        .iter()
        .copied()
        .filter(|&d| rails.rail(d) == my_rail)
        .collect();
    let is_receiver = my_recv_agg == r;
    let mut unpack = Vec::new();
    // (destination, sender, offset in Tmp) of each block an aggregator received.
    let mut arrived: Vec<(usize, usize, usize)> = Vec::new();
    for (h, hm) in nodes.ranks.iter().enumerate() {
        if h == g {
            continue;
        }
        if fw(h) {
            // From each rank p of h that forwards for me: the blocks of its node's senders
            // it forwards, ascending.
            for &p in hm {
                let from: Vec<usize> = hm.iter().copied().filter(|&s| via.get(s, r) == p).collect();
                let total: usize = from.iter().map(|&s| len(s, r)).sum();
                match from.len() {
                    0 => {}
                    1 => b.recv_nz(p, dst(from[0])),
                    _ if total == 0 => {}
                    _ => {
                        let at = alloc(total);
                        b.recv(p, Region::tmp(at, total));
                        unpack.push((at, from));
                    }
                }
            }
        } else if is_receiver {
            // From h's aggregator for my rail: the blocks for my node's ranks on my rail
            // (ascending) from every rank of h (ascending).
            let p = rails.sender(nodes, h, my_rail);
            let total: usize = mine_on_rail
                .iter()
                .flat_map(|&d| hm.iter().map(move |&s| len(s, d)))
                .sum();
            let at = alloc(total);
            b.recv_nz(p, Region::tmp(at, total));
            let mut k = at;
            for &d in &mine_on_rail {
                for &s in hm {
                    arrived.push((d, s, k));
                    k += len(s, d);
                }
            }
        }
    }
    // The third epoch's receive, from my rail's receiving aggregator.
    let mut unpack_late = None;
    if !is_receiver {
        let from: Vec<(usize, usize)> = relayed(r).into_iter().filter(|&(_, l)| l > 0).collect();
        match from.len() {
            0 => {}
            1 => b.recv(my_recv_agg, dst(from[0].0)),
            _ => {
                let total: usize = from.iter().map(|&(_, l)| l).sum();
                let at = alloc(total);
                b.recv(my_recv_agg, Region::tmp(at, total));
                unpack_late = Some((at, from));
            }
        }
    }
    b.wait();
    for (at, from) in unpack {
        let mut k = at;
        for s in from {
            b.copy(Region::tmp(k, len(s, r)), dst(s));
            k += len(s, r);
        }
    }
    if let Some((at, from)) = unpack_late {
        let mut k = at;
        for (s, l) in from {
            b.copy(Region::tmp(k, l), dst(s));
            k += l;
        }
    }
    if is_receiver {
        let at_of = |d: usize, s: usize| -> usize {
            arrived
                .iter()
                .find(|&&(x, y, _)| x == d && y == s)
                .map(|&(_, _, k)| k)
                .expect("arrived block")
        };
        for (s, l) in relayed(r) {
            b.copy(Region::tmp(at_of(r, s), l), dst(s));
        }
        // Epoch 3: each other rank of my node on my rail gets its blocks from the remote
        // ranks of the aggregators' nodes.
        for &d in mine_on_rail.iter().filter(|&&d| d != r) {
            let blocks: Vec<Region> = relayed(d)
                .into_iter()
                .filter(|&(_, l)| l > 0)
                .map(|(s, l)| Region::tmp(at_of(d, s), l))
                .collect();
            send_packed(&mut b, &mut alloc, d, &blocks);
        }
    }
    b.tmp_at_least(tmp);
    b.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coll::alltoall::pxn::tests::{lcg, rail_rule, run_built, shapes};
    use crate::coll::schedule::Step;
    use std::collections::BTreeSet;

    /// A pick for every pair of nodes, the same both ways: bit `i` of `mask` for the `i`-th
    /// pair (g < h, lexicographic) takes the forwarders.
    fn pair_picks(count: usize, mask: usize) -> Vec<Vec<Pick>> {
        let pairs: Vec<(usize, usize)> = (0..count)
            .flat_map(|g| (g + 1..count).map(move |h| (g, h)))
            .collect();
        let fw = |g: usize, h: usize| {
            let i = pairs.iter().position(|&x| x == (g.min(h), g.max(h)));
            i.is_some_and(|i| mask >> i & 1 == 1)
        };
        (0..count)
            .map(|g| {
                (0..count)
                    .map(|h| match g != h && fw(g, h) {
                        true => Pick::Forwarders,
                        false => Pick::Rails,
                    })
                    .collect()
            })
            .collect()
    }

    /// Runs every rank's schedule of [`build_blocks`] with the picks of its node and checks
    /// every block arrived (`run_built`); returns the schedules.
    fn run(
        nodes: &Nodes,
        via: &Via,
        rails: &Rails,
        picks: &[Vec<Pick>],
        len: &dyn Fn(usize, usize) -> usize,
        in_place: bool,
        name: &str,
    ) -> Vec<Schedule> {
        run_built(nodes.of.len(), len, in_place, name, &|a, send, recv| {
            let g = nodes.of[a.rank];
            build_blocks(a, nodes, via, rails, &picks[g], len, send, recv)
        })
    }

    /// The network messages (sender, receiver) the pair's schedule sends from node `g` to
    /// node `h` where every block is at least one byte: one per (forwarder, destination), or
    /// one per rail of `h` from `g`'s aggregator for it to `h`'s.
    fn expected(
        nodes: &Nodes,
        via: &Via,
        rails: &Rails,
        pick: Pick,
        g: usize,
        h: usize,
    ) -> BTreeSet<(usize, usize)> {
        let (gm, hm) = (&nodes.ranks[g], &nodes.ranks[h]);
        match pick {
            Pick::Forwarders => gm
                .iter()
                .flat_map(|&s| hm.iter().map(move |&d| (via.get(s, d), d)))
                .collect(),
            _ => rails
                .rails_of(h)
                .into_iter()
                .map(|q| (rails.sender(nodes, g, q), rails.receiver(h, q).unwrap()))
                .collect(),
        }
    }

    /// Every shape of 3 nodes (every third), every assignment of the two schedules to its 3
    /// pairs of nodes (so some nodes run the mixed schedule, others a pure one, next to each
    /// other), blocks of varying lengths with empty ones, in place and not: every block
    /// arrives (the simulator's synchronous sends also find any deadlock), and the messages
    /// between two nodes are exactly those of the pair's schedule.
    #[test]
    fn every_block_arrives_with_a_schedule_per_pair_of_nodes() {
        let mut seed = 17u64;
        let mut mixed_nodes = 0;
        for (i, (name, nodes, rail)) in shapes().into_iter().enumerate() {
            if nodes.count() != 3 || i % 3 != 0 {
                continue;
            }
            let n = nodes.of.len();
            let via = rail_rule(&nodes, &rail);
            let rails = Rails::new(&nodes, &rail);
            let lens: Vec<usize> = (0..n * n)
                .map(|_| match lcg(&mut seed) % 4 {
                    0 => 0,
                    k => lcg(&mut seed) % (7 * k),
                })
                .collect();
            for mask in 0..8 {
                let picks = pair_picks(3, mask);
                let what = format!("{name} mask {mask:03b}");
                run(
                    &nodes,
                    &via,
                    &rails,
                    &picks,
                    &|s, d| lens[s * n + d],
                    false,
                    &what,
                );
                let sym = |s: usize, d: usize| lens[s.min(d) * n + s.max(d)];
                run(&nodes, &via, &rails, &picks, &sym, true, &what);
                // Blocks of at least one byte: the network messages are the pairs' own.
                let ones = run(
                    &nodes,
                    &via,
                    &rails,
                    &picks,
                    &|s, d| 1 + lens[s * n + d],
                    false,
                    &what,
                );
                let mut got = BTreeSet::new();
                for (r, s) in ones.iter().enumerate() {
                    for st in &s.steps {
                        if let Step::Send { peer, .. } = *st {
                            if nodes.of[peer] != nodes.of[r] {
                                assert!(got.insert((r, peer)), "{what}: {r} -> {peer} twice");
                            }
                        }
                    }
                }
                let mut want = BTreeSet::new();
                for (g, pg) in picks.iter().enumerate() {
                    for h in (0..3).filter(|&h| h != g) {
                        want.extend(expected(&nodes, &via, &rails, pg[h], g, h));
                    }
                    let kinds: BTreeSet<bool> = (0..3)
                        .filter(|&h| h != g)
                        .map(|h| pg[h] == Pick::Forwarders)
                        .collect();
                    mixed_nodes += usize::from(kinds.len() == 2);
                }
                assert_eq!(got, want, "{what}");
            }
        }
        assert!(mixed_nodes > 100, "{mixed_nodes} mixed nodes");
    }

    /// 4 nodes of 1-4 ranks (unequal) on 2 rails, random picks per pair: every block arrives.
    #[test]
    fn four_nodes_of_unequal_sizes_with_random_picks() {
        let mut seed = 23u64;
        for round in 0..40 {
            let per: Vec<usize> = (0..4).map(|_| 1 + lcg(&mut seed) % 4).collect();
            let node_of: Vec<usize> = (0..4)
                .flat_map(|g| std::iter::repeat_n(g, per[g]))
                .collect();
            let nodes = Nodes::new(&node_of);
            let n = node_of.len();
            let rail: Vec<usize> = (0..n)
                .map(|r| {
                    nodes.ranks[nodes.of[r]]
                        .iter()
                        .position(|&x| x == r)
                        .unwrap()
                        % 2
                })
                .collect();
            let via = rail_rule(&nodes, &rail);
            let rails = Rails::new(&nodes, &rail);
            let picks = pair_picks(4, lcg(&mut seed) % 64);
            let lens: Vec<usize> = (0..n * n).map(|_| lcg(&mut seed) % 9).collect();
            let what = format!("round {round} {per:?}");
            run(
                &nodes,
                &via,
                &rails,
                &picks,
                &|s, d| lens[s * n + d],
                false,
                &what,
            );
            let sym = |s: usize, d: usize| lens[s.min(d) * n + s.max(d)];
            run(&nodes, &via, &rails, &picks, &sym, true, &what);
        }
    }

    /// A node whose pairs all take one schedule runs that schedule's builder as it is.
    #[test]
    fn uniform_picks_take_the_pure_schedules() {
        let nodes = Nodes::new(&[0, 0, 0, 1, 1, 1, 2, 2, 2]);
        let rail = [0, 1, 0, 0, 1, 0, 0, 1, 0];
        let via = rail_rule(&nodes, &rail);
        let rails = Rails::new(&nodes, &rail);
        let blocks: Vec<Block> = (0..9).map(|i| Block::new(i * 5, 5)).collect();
        for r in 0..9 {
            let a = CollArgs::new(r, 9, 5);
            let len = |_: usize, _: usize| 5;
            let fw = vec![Pick::Forwarders; 3];
            let ra = vec![Pick::Rails; 3];
            assert_eq!(
                build_blocks(&a, &nodes, &via, &rails, &fw, &len, &blocks, &blocks),
                pxn::build_blocks(&a, &nodes, &via, &len, &blocks, &blocks)
            );
            assert_eq!(
                build_blocks(&a, &nodes, &via, &rails, &ra, &len, &blocks, &blocks),
                rails::build_blocks(&a, &nodes, &rails, &len, &blocks, &blocks)
            );
            // The own node's entry is not read.
            let mut own = fw.clone();
            own[nodes.of[r]] = Pick::Rails;
            assert_eq!(
                build_blocks(&a, &nodes, &via, &rails, &own, &len, &blocks, &blocks),
                pxn::build_blocks(&a, &nodes, &via, &len, &blocks, &blocks)
            );
        }
        let p = pair_picks(3, 0b001);
        assert_eq!(
            describe(&p[0], 0),
            "forwarders to nodes 1, rail aggregators to nodes 2"
        );
        assert_eq!(describe(&p[2], 2), "rail aggregators");
        assert_eq!(describe(&pair_picks(3, 0b111)[1], 1), "forwarders");
    }
}
