//! Alltoall between nodes through one aggregator per (node, rail): every block from a rank of
//! node `g` to a rank `d` of another node leaves `g` from the lowest rank of `g` on `d`'s rail
//! ([`Rails::sender`]; the node's lowest rank where `g` has no rank on that rail) and reaches
//! `d` through the lowest rank of `d`'s node on `d`'s rail ([`Rails::receiver`]). So the
//! network carries one message per (sending node, receiving node, rail of the receiving node),
//! on that rail, where the forwarder schedule (`pxn`) sends one per (forwarder, destination):
//! fewer, larger network operations, by the square of the number of local ranks per rail
//! (each of a rail's `k` ranks sends to each of the rail's `k` ranks of another node).
//!
//! Three epochs:
//! 1. inside the node: each rank sends each other rank `t` of its node one message, its block
//!    for `t` followed by its blocks for the remote ranks whose blocks `t` sends (ascending);
//! 2. between nodes: each sending aggregator sends, per other node `h` and rail `q` it serves,
//!    one message to `h`'s aggregator on `q`: the blocks of every rank of its node (ascending)
//!    for each rank of `h` on `q` (ascending, destination-major);
//! 3. inside the node: each receiving aggregator sends each other rank of its node on its rail
//!    one message with the blocks from every remote rank (ascending); such a rank posts that
//!    receive in epoch 1, after its receive of the aggregator's own block, so it waits once.
//!
//! Block lengths are given per (sender, destination) by `len`, which every rank must know for
//! the blocks it sends, carries or receives: for an alltoall every block is the same length;
//! for an alltoallv the ranks of a node first tell each other their counts
//! (`dispatch::schedule`).

use super::{gather_in_node, input_blocks};
use crate::coll::hier::Nodes;
use crate::coll::schedule::{Builder, Region};
use crate::coll::{Block, CollArgs, Schedule};

/// The aggregators of a communicator over `nodes` whose ranks are on rails `rail`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rails {
    /// `lowest[g][q]`: the lowest rank of node `g` on rail `q`, if any.
    lowest: Vec<Vec<Option<usize>>>,
    rail: Vec<usize>,
}

impl Rails {
    pub fn new(nodes: &Nodes, rail: &[usize]) -> Rails {
        let nrails = rail.iter().copied().max().map_or(0, |m| m + 1);
        let lowest = nodes
            .ranks
            .iter()
            .map(|m| {
                (0..nrails)
                    .map(|q| m.iter().copied().find(|&x| rail[x] == q))
                    .collect()
            })
            .collect();
        Rails {
            lowest,
            rail: rail.to_vec(),
        }
    }

    pub fn rail(&self, r: usize) -> usize {
        self.rail[r]
    }

    /// The rank of node `g` that sends its blocks for ranks on rail `q` of other nodes: its
    /// lowest rank on `q`, else (the node has no rank there) its lowest rank.
    pub fn sender(&self, nodes: &Nodes, g: usize, q: usize) -> usize {
        self.lowest[g][q].unwrap_or(nodes.ranks[g][0])
    }

    /// The rank of node `h` that receives the blocks for its ranks on rail `q` (`None`: no
    /// rank of `h` is on `q`).
    pub fn receiver(&self, h: usize, q: usize) -> Option<usize> {
        self.lowest[h].get(q).copied().flatten()
    }

    /// The rails with a rank on node `h`, ascending.
    pub fn rails_of(&self, h: usize) -> Vec<usize> {
        (0..self.lowest[h].len())
            .filter(|&q| self.lowest[h][q].is_some())
            .collect()
    }
}

/// The schedule of rank `a.rank`: its block for `d` is `len(r, d)` bytes at `send[d].off` in
/// `Send` (`recv[d].off` in `Recv` when in place), the block from `s` lands at `recv[s].off`.
pub fn build_blocks(
    a: &CollArgs,
    nodes: &Nodes,
    rails: &Rails,
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
    let out_via = |d: usize| rails.sender(nodes, g, rails.rail(d));
    let my_rail = rails.rail(r);
    let my_recv_agg = rails.receiver(g, my_rail).expect("a rank on its own rail");
    // Remote senders in ascending order: what one message of epoch 3 carries for `d`.
    let from_remote =
        |d: usize| -> Vec<(usize, usize)> { remote.iter().map(|&s| (s, len(s, d))).collect() };

    // Epoch 1, inside the node: to each other member t, my block for t and those t sends on.
    let gathered = gather_in_node(
        &mut b,
        &mut alloc,
        r,
        members,
        &remote,
        &|_, d| out_via(d),
        &src,
        len,
        &dst,
    );
    // Epoch 3's receive of a rank that is not its rail's receiving aggregator.
    let mut unpack_late = None;
    if my_recv_agg != r {
        let from = from_remote(r);
        let total: usize = from.iter().map(|&(_, l)| l).sum();
        match from.iter().filter(|&&(_, l)| l > 0).count() {
            0 => {}
            1 => {
                let (s, _) = *from.iter().find(|&&(_, l)| l > 0).expect("one block");
                b.recv(my_recv_agg, dst(s));
            }
            _ => {
                let at = alloc(total);
                b.recv(my_recv_agg, Region::tmp(at, total));
                unpack_late = Some((at, from));
            }
        }
    }
    if !a.in_place {
        b.copy(src[r], dst(r));
    }
    b.wait();
    gathered.unpack_own(&mut b, r, len, &dst);
    let held = |s: usize, d: usize| gathered.held(r, &src, len, s, d);
    let is_sender = remote.iter().any(|&d| out_via(d) == r);
    let is_receiver = my_recv_agg == r;
    if !is_sender && !is_receiver {
        if let Some((at, from)) = unpack_late {
            b.wait();
            let mut k = at;
            for (s, l) in from {
                b.copy(Region::tmp(k, l), dst(s));
                k += l;
            }
        }
        b.tmp_at_least(tmp);
        return b.finish();
    }
    // Epoch 2, between nodes: per other node h and rail q of h that I send for, one message
    // to h's aggregator on q.
    for (h, hm) in nodes.ranks.iter().enumerate() {
        if h == g {
            continue;
        }
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
            let total: usize = blocks.iter().map(|x| x.len).sum();
            match blocks.iter().filter(|x| x.len > 0).count() {
                0 => {}
                1 => b.send(to, *blocks.iter().find(|x| x.len > 0).expect("one")),
                _ => {
                    let at = alloc(total);
                    let mut k = at;
                    for x in blocks {
                        b.copy(x, Region::tmp(k, x.len));
                        k += x.len;
                    }
                    b.send(to, Region::tmp(at, total));
                }
            }
        }
    }
    // As the receiving aggregator of my rail: one message from each other node's sender for
    // my rail, blocks for my node's ranks on my rail (ascending), from each of its ranks.
    let mine_on_rail: Vec<usize> = members
        .iter()
        .copied()
        .filter(|&d| rails.rail(d) == my_rail)
        .collect();
    // (destination, sender) -> offset in Tmp of each received block.
    let mut arrived: Vec<(usize, usize, usize)> = Vec::new();
    if is_receiver {
        for (h, hm) in nodes.ranks.iter().enumerate() {
            if h == g {
                continue;
            }
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
    b.wait();
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
        for &s in &remote {
            b.copy(Region::tmp(at_of(r, s), len(s, r)), dst(s));
        }
        // Epoch 3: each other rank of my node on my rail gets its blocks from every remote rank.
        for &d in mine_on_rail.iter().filter(|&&d| d != r) {
            let from: Vec<(usize, usize)> =
                from_remote(d).into_iter().filter(|&(_, l)| l > 0).collect();
            match from.len() {
                0 => {}
                1 => b.send(d, Region::tmp(at_of(d, from[0].0), from[0].1)),
                _ => {
                    let total: usize = from.iter().map(|&(_, l)| l).sum();
                    let at = alloc(total);
                    let mut k = at;
                    for (s, l) in from {
                        b.copy(Region::tmp(at_of(d, s), l), Region::tmp(k, l));
                        k += l;
                    }
                    b.send(d, Region::tmp(at, total));
                }
            }
        }
    }
    b.tmp_at_least(tmp);
    b.finish()
}

/// Alltoall (`a.bytes` per pair) through the aggregators of `rails`.
pub fn build(a: &CollArgs, nodes: &Nodes, rails: &Rails) -> Schedule {
    let blocks: Vec<Block> = (0..a.size)
        .map(|i| Block::new(i * a.bytes, a.bytes))
        .collect();
    let len = a.bytes;
    build_blocks(a, nodes, rails, &|_, _| len, &blocks, &blocks)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coll::alltoall::pxn::tests::{
        lcg, network, rail_rule, run as run_forwarders, run_built, shapes,
    };
    use crate::coll::schedule::Step;

    /// `pxn::tests::run_built` over the rail aggregators' schedule.
    fn run(
        nodes: &Nodes,
        rails: &Rails,
        len: &dyn Fn(usize, usize) -> usize,
        in_place: bool,
        name: &str,
    ) -> Vec<Schedule> {
        run_built(nodes.of.len(), len, in_place, name, &|a, send, recv| {
            build_blocks(a, nodes, rails, len, send, recv)
        })
    }

    /// Every rank's network messages: (sender, receiver).
    fn net_msgs(nodes: &Nodes, scheds: &[Schedule]) -> Vec<(usize, usize)> {
        let mut v = Vec::new();
        for (r, s) in scheds.iter().enumerate() {
            for st in &s.steps {
                if let Step::Send { peer, .. } = *st {
                    if nodes.of[peer] != nodes.of[r] {
                        v.push((r, peer));
                    }
                }
            }
        }
        v
    }

    #[test]
    fn every_block_arrives_once_with_one_message_per_node_pair_and_rail() {
        for (name, nodes, rail) in shapes() {
            let rails = Rails::new(&nodes, &rail);
            let has = |g: usize, q: usize| nodes.ranks[g].iter().any(|&x| rail[x] == q);
            for (len, in_place) in [(3, false), (8, true)] {
                let scheds = run(&nodes, &rails, &|_, _| len, in_place, &name);
                let msgs = net_msgs(&nodes, &scheds);
                // One message per (sending node, receiving node, rail of the receiving node).
                let mut want = 0;
                for h in 0..nodes.count() {
                    let q_of_h = (0..8).filter(|&q| has(h, q)).count();
                    want += (nodes.count() - 1) * q_of_h;
                }
                assert_eq!(msgs.len(), want, "{name}");
                for &(s, d) in &msgs {
                    // On the receiver's rail wherever the sending node has a rank there.
                    if has(nodes.of[s], rail[d]) {
                        assert_eq!(rail[s], rail[d], "{name}: {s} -> {d} crosses rails");
                    }
                }
                // Every block between nodes crosses the network once.
                let (_, blocks) = network(&nodes, &scheds, len);
                let n = nodes.of.len();
                let remote = (0..n)
                    .flat_map(|s| (0..n).map(move |d| (s, d)))
                    .filter(|&(s, d)| nodes.of[s] != nodes.of[d])
                    .count();
                assert_eq!(blocks, remote, "{name}");
                // Never more network messages than the forwarders' schedule.
                let fw = run_forwarders(&nodes, &rail_rule(&nodes, &rail), len, in_place, &name);
                assert!(msgs.len() <= network(&nodes, &fw, len).0, "{name}");
                // At most one message from a rank to a peer per epoch: no rank sends a peer
                // more than twice (epochs 1 and 3 inside the node).
                for (r, s) in scheds.iter().enumerate() {
                    for p in 0..n {
                        let k = s
                            .steps
                            .iter()
                            .filter(|st| matches!(st, Step::Send { peer, .. } if *peer == p))
                            .count();
                        let most = if nodes.of[p] == nodes.of[r] { 2 } else { 1 };
                        assert!(k <= most, "{name}: rank {r} sends {k} messages to {p}");
                    }
                }
            }
        }
    }

    #[test]
    fn local_ranks_per_rail_divide_the_forwarders_network_messages() {
        // Every node has `per_rail` ranks on each of `rails` rails: N (N-1) R messages, the
        // forwarders' N (N-1) R per_rail^2 (each of a rail's per_rail ranks sends to each of
        // the rail's ranks on the other nodes) divided by per_rail^2.
        for nodes_n in 2..=3 {
            for nrails in 1..=4 {
                for per_rail in 1..=3 {
                    let per = nrails * per_rail;
                    let node_of: Vec<usize> = (0..nodes_n * per).map(|r| r / per).collect();
                    let nodes = Nodes::new(&node_of);
                    let rail: Vec<usize> = (0..nodes_n * per).map(|r| r % per % nrails).collect();
                    let what = format!("{nodes_n}x{per} on {nrails} rails");
                    let scheds = run(&nodes, &Rails::new(&nodes, &rail), &|_, _| 4, false, &what);
                    let ours = net_msgs(&nodes, &scheds).len();
                    assert_eq!(ours, nodes_n * (nodes_n - 1) * nrails, "{what}");
                    let fw = run_forwarders(&nodes, &rail_rule(&nodes, &rail), 4, false, &what);
                    assert_eq!(
                        network(&nodes, &fw, 4).0,
                        ours * per_rail * per_rail,
                        "{what}"
                    );
                }
            }
        }
    }

    #[test]
    fn blocks_of_any_length_arrive() {
        // Alltoallv-like: every (sender, destination) its own length, zeros included.
        let mut seed = 3u64;
        for (i, (name, nodes, rail)) in shapes().into_iter().enumerate() {
            if i % 5 != 0 {
                continue;
            }
            let n = nodes.of.len();
            let lens: Vec<usize> = (0..n * n)
                .map(|_| match lcg(&mut seed) % 4 {
                    0 => 0,
                    k => lcg(&mut seed) % (7 * k),
                })
                .collect();
            let rails = Rails::new(&nodes, &rail);
            run(&nodes, &rails, &|s, d| lens[s * n + d], false, &name);
            // In place: the block from s to d and from d to s are the same size.
            let sym = |s: usize, d: usize| lens[s.min(d) * n + s.max(d)];
            run(&nodes, &rails, &sym, true, &name);
            run(&nodes, &rails, &|_, _| 0, false, &name);
        }
    }
}
