//! Alltoall between nodes through PXN forwarders, with the forwarder's messages to one remote
//! rank combined into one: every block from rank `s` to rank `d` on another node leaves the
//! node from one rank, [`Via::get`]`(s, d)` (the local rank on `d`'s rail that the PXN plan
//! names, or `s` itself where it sends directly), and a forwarder sends everything it carries
//! for one destination as one message.
//!
//! Two epochs:
//! 1. inside the node: each rank sends each other rank `t` of its node one message, its block
//!    for `t` followed by its blocks for the remote ranks `t` forwards for it (ascending);
//! 2. between nodes: each rank sends each remote rank `d` it carries blocks for one message,
//!    the blocks of the senders `s` of its node with `via(s, d)` = itself, in ascending `s`;
//!    `d` receives from each rank `p` of another node the blocks of the senders `p` carries for
//!    it, and unpacks them.
//!
//! So the network carries one message per (forwarder, destination) pair: with PXN the local
//! ranks of a rail share their messages to a remote rank, and the operations of one alltoall
//! are those of the PXN plan with aggregation (`topo::pxn::alltoall`). A forwarder must know
//! the length of every block it carries: in an alltoall (or a piece of one) every block has
//! the same length; in an alltoallv the ranks of a node tell each other theirs first
//! (`counts`). A message that holds a single block goes straight from the sender's buffer into
//! the receiver's (no copy); packed ones go through `Tmp`; empty ones are not sent.

use super::{gather_in_node, input_blocks};
use crate::coll::hier::Nodes;
use crate::coll::schedule::{Builder, Region};
use crate::coll::{Block, CollArgs, Schedule};

/// The rank that puts each block between nodes on the network: `of[s * n + d]` for the block
/// from `s` to `d` (communicator ranks; entries between ranks of one node are unused).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Via {
    n: usize,
    of: Vec<u32>,
}

impl Via {
    /// The table of `f(s, d)` over the `n` ranks of a communicator whose nodes are `nodes`.
    /// `f(s, d)` must lie on `s`'s node (checked: else `s` itself).
    pub fn new(nodes: &Nodes, f: impl Fn(usize, usize) -> usize) -> Via {
        let n = nodes.of.len();
        let mut of = vec![0u32; n * n];
        for s in 0..n {
            for d in 0..n {
                let p = if nodes.of[s] == nodes.of[d] {
                    s
                } else {
                    let p = f(s, d);
                    if p < n && nodes.of[p] == nodes.of[s] {
                        p
                    } else {
                        s
                    }
                };
                of[s * n + d] = p as u32;
            }
        }
        Via { n, of }
    }

    /// The rank that sends `s`'s block for `d` over the network.
    pub fn get(&self, s: usize, d: usize) -> usize {
        self.of[s * self.n + d] as usize
    }

    /// Whether some block leaves through a rank other than its sender.
    pub fn forwards(&self) -> bool {
        (0..self.n).any(|s| (0..self.n).any(|d| self.get(s, d) != s))
    }
}

/// One message to `to` carrying `blocks` in order: a single block is sent where it lies,
/// several are first packed into scratch from `alloc`; none, or only empty ones, send nothing
/// (the receiver knows the same lengths and posts nothing either).
pub(super) fn send_packed(
    b: &mut Builder,
    alloc: &mut impl FnMut(usize) -> usize,
    to: usize,
    blocks: &[Region],
) {
    let total: usize = blocks.iter().map(|x| x.len).sum();
    match blocks {
        [] => {}
        [one] => b.send_nz(to, *one),
        _ if total == 0 => {}
        _ => {
            let at = alloc(total);
            let mut k = at;
            for blk in blocks {
                b.copy(*blk, Region::tmp(k, blk.len));
                k += blk.len;
            }
            b.send(to, Region::tmp(at, total));
        }
    }
}

/// The schedule of rank `a.rank` for an alltoall whose block from `s` to `d` is `len(s, d)`
/// bytes: `send[d]` in `Send` (`recv[d]` in `Recv` when in place) goes to `d`, `recv[s]`
/// comes from `s`. Rank `r` asks `len` only for blocks from or to a rank of its node (its own
/// counts and those the count exchange tells it, `counts::NodeLens`), and every rank that
/// asks for the same block must get the same length.
pub fn build_blocks(
    a: &CollArgs,
    nodes: &Nodes,
    via: &Via,
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
    // Epoch 1, inside the node: to each other member t, my block for t and those t carries.
    let gathered = gather_in_node(
        &mut b,
        &mut alloc,
        r,
        members,
        &remote,
        &|s, d| via.get(s, d),
        &src,
        len,
        &dst,
    );
    if !a.in_place {
        b.copy(src[r], dst(r));
    }
    b.wait();
    let held = |s: usize, d: usize| gathered.held(r, &src, len, s, d);
    gathered.unpack_own(&mut b, r, len, &dst);
    // Epoch 2, between nodes: one message per remote rank I carry blocks for.
    for &d in &remote {
        let from: Vec<usize> = members
            .iter()
            .copied()
            .filter(|&s| via.get(s, d) == r)
            .collect();
        let blocks: Vec<Region> = from.iter().map(|&s| held(s, d)).collect();
        send_packed(&mut b, &mut alloc, d, &blocks);
    }
    // One message from each remote rank p that carries blocks for me.
    let mut unpack = Vec::new();
    for &p in &remote {
        let from: Vec<usize> = nodes.ranks[nodes.of[p]]
            .iter()
            .copied()
            .filter(|&s| via.get(s, r) == p)
            .collect();
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
    b.wait();
    for (at, from) in unpack {
        let mut k = at;
        for &s in &from {
            b.copy(Region::tmp(k, len(s, r)), dst(s));
            k += len(s, r);
        }
    }
    b.tmp_at_least(tmp);
    b.finish()
}

/// Alltoall (`a.bytes` per pair) through the forwarders of `via`.
pub fn build(a: &CollArgs, nodes: &Nodes, via: &Via) -> Schedule {
    let blocks: Vec<Block> = (0..a.size)
        .map(|i| Block::new(i * a.bytes, a.bytes))
        .collect();
    if a.bytes == 0 {
        return Builder::new().finish();
    }
    build_blocks(a, nodes, via, &|_, _| a.bytes, &blocks, &blocks)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::coll::schedule::Step;
    use crate::coll::sim::{simulate, RankBufs};

    /// Deterministic pseudo-random numbers (an LCG), for irregular layouts.
    pub(crate) fn lcg(seed: &mut u64) -> usize {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (*seed >> 33) as usize
    }

    /// A forwarder rule of the PXN plan's kind: the block from `s` to `d` on another rail
    /// leaves through a rank of `s`'s node on `d`'s rail (the `k mod m`-th of the `m` there, `d`
    /// being the `k`-th of its node on that rail), or through `s` where none is there.
    pub(crate) fn rail_rule(nodes: &Nodes, rail: &[usize]) -> Via {
        Via::new(nodes, |s, d| {
            if rail[s] == rail[d] {
                return s;
            }
            let on = |g: usize| -> Vec<usize> {
                nodes.ranks[g]
                    .iter()
                    .copied()
                    .filter(|&x| rail[x] == rail[d])
                    .collect()
            };
            let cand = on(nodes.of[s]);
            if cand.is_empty() {
                return s;
            }
            let k = on(nodes.of[d]).iter().position(|&x| x == d).unwrap();
            cand[k % cand.len()]
        })
    }

    /// Every shape: 2-3 nodes of 1-8 ranks on 1-8 rails, round-robin, in blocks or at random
    /// (so that some nodes miss rails), ranks of a node consecutive or interleaved.
    pub(crate) fn shapes() -> Vec<(String, Nodes, Vec<usize>)> {
        let mut out = Vec::new();
        let mut seed = 11u64;
        for nodes in 2..=3 {
            for per in 1..=8 {
                for rails in 1..=8 {
                    let n = nodes * per;
                    let random: Vec<usize> = (0..n).map(|_| lcg(&mut seed) % rails).collect();
                    for (how, node_of) in [
                        ("blocked", (0..n).map(|r| r / per).collect::<Vec<_>>()),
                        ("cyclic", (0..n).map(|r| r % nodes).collect()),
                    ] {
                        let nd = Nodes::new(&node_of);
                        let local = |r: usize| nd.ranks[nd.of[r]].iter().position(|&x| x == r);
                        let rr: Vec<usize> = (0..n).map(|r| local(r).unwrap() % rails).collect();
                        let bl: Vec<usize> =
                            (0..n).map(|r| local(r).unwrap() * rails / per).collect();
                        for (kind, rail) in [("rr", rr), ("block", bl), ("random", random.clone())]
                        {
                            out.push((
                                format!("{nodes}x{per} {how} {kind}/{rails} {rail:?}"),
                                nd.clone(),
                                rail,
                            ));
                        }
                    }
                }
            }
        }
        out
    }

    /// Runs every rank's schedule and checks each block arrived where it belongs; returns the
    /// schedules.
    pub(crate) fn run(
        nodes: &Nodes,
        via: &Via,
        len: usize,
        in_place: bool,
        name: &str,
    ) -> Vec<Schedule> {
        let n = nodes.of.len();
        let block = |s: usize, d: usize| -> Vec<u8> {
            (0..len).map(|i| (s * 31 + d * 7 + i) as u8).collect()
        };
        let input = |s: usize| (0..n).flat_map(|d| block(s, d)).collect::<Vec<u8>>();
        let mut bufs: Vec<RankBufs> = (0..n)
            .map(|r| match in_place {
                true => RankBufs {
                    send: vec![],
                    recv: input(r),
                },
                false => RankBufs {
                    send: input(r),
                    recv: vec![0xEE; n * len],
                },
            })
            .collect();
        let scheds: Vec<Schedule> = (0..n)
            .map(|r| {
                let a = CollArgs {
                    in_place,
                    ..CollArgs::new(r, n, len)
                };
                build(&a, nodes, via)
            })
            .collect();
        simulate(&scheds, &mut bufs, 1, &|_, _| unreachable!("no reduction"));
        for (d, b) in bufs.iter().enumerate() {
            let want: Vec<u8> = (0..n).flat_map(|s| block(s, d)).collect();
            assert_eq!(
                b.recv, want,
                "{name} len {len} in place {in_place} rank {d}"
            );
        }
        scheds
    }

    /// (network messages, blocks they carry) of every rank's schedule together.
    pub(crate) fn network(nodes: &Nodes, scheds: &[Schedule], len: usize) -> (usize, usize) {
        let mut ops = 0;
        let mut blocks = 0;
        for (r, s) in scheds.iter().enumerate() {
            for st in &s.steps {
                if let Step::Send { peer, src } = *st {
                    if nodes.of[peer] != nodes.of[r] {
                        ops += 1;
                        blocks += src.len / len;
                    }
                }
            }
        }
        (ops, blocks)
    }

    #[test]
    fn every_block_arrives_once_with_one_message_per_forwarder_and_destination() {
        for (name, nodes, rail) in shapes() {
            let n = nodes.of.len();
            let via = rail_rule(&nodes, &rail);
            let direct = Via::new(&nodes, |s, _| s);
            let remote: Vec<(usize, usize)> = (0..n)
                .flat_map(|s| (0..n).map(move |d| (s, d)))
                .filter(|&(s, d)| nodes.of[s] != nodes.of[d])
                .collect();
            for (len, in_place) in [(3, false), (8, true)] {
                let scheds = run(&nodes, &via, len, in_place, &name);
                let (ops, blocks) = network(&nodes, &scheds, len);
                // Every block between nodes crosses the network once.
                assert_eq!(blocks, remote.len(), "{name}");
                // One message per (forwarder, destination) pair.
                let pairs: std::collections::BTreeSet<(usize, usize)> =
                    remote.iter().map(|&(s, d)| (via.get(s, d), d)).collect();
                assert_eq!(ops, pairs.len(), "{name}");
                for (r, s) in scheds.iter().enumerate() {
                    let mut peers: Vec<usize> = s
                        .steps
                        .iter()
                        .filter_map(|st| match *st {
                            Step::Send { peer, .. } => Some(peer),
                            _ => None,
                        })
                        .collect();
                    let all = peers.len();
                    peers.sort();
                    peers.dedup();
                    assert_eq!(peers.len(), all, "{name}: rank {r} sends twice to a peer");
                    for &p in &peers {
                        // Network messages stay on the destination's rail where the node has
                        // a rank there.
                        let has = nodes.ranks[nodes.of[r]].iter().any(|&x| rail[x] == rail[p]);
                        if nodes.of[p] != nodes.of[r] && has {
                            assert_eq!(rail[r], rail[p], "{name}: {r} -> {p} crosses rails");
                        }
                    }
                }
                // Without forwarders: one message per pair of ranks on different nodes.
                let d = run(&nodes, &direct, len, in_place, &name);
                assert_eq!(network(&nodes, &d, len), (remote.len(), remote.len()));
            }
        }
    }

    #[test]
    fn local_ranks_per_rail_divide_the_network_messages() {
        // Every node has `per_rail` ranks on each of `rails` rails: each remote rank gets one
        // message from each rank of its rail on every other node, instead of one per rank.
        for nodes_n in 2..=3 {
            for rails in 1..=4 {
                for per_rail in 1..=2 {
                    let per = rails * per_rail;
                    let node_of: Vec<usize> = (0..nodes_n * per).map(|r| r / per).collect();
                    let nodes = Nodes::new(&node_of);
                    let rail: Vec<usize> = (0..nodes_n * per).map(|r| r % per % rails).collect();
                    let via = rail_rule(&nodes, &rail);
                    let scheds = run(&nodes, &via, 4, false, "balanced");
                    let remote = nodes_n * per * (nodes_n - 1) * per;
                    assert_eq!(
                        network(&nodes, &scheds, 4),
                        (remote / rails, remote),
                        "{nodes_n}x{per} on {rails} rails"
                    );
                }
            }
        }
    }

    #[test]
    fn random_forwarders_deliver_too() {
        // Any rank of the sender's node may forward (and a rank outside it is refused).
        let mut seed = 5u64;
        for per in 1..=6 {
            for nodes_n in 2..=3 {
                let node_of: Vec<usize> =
                    (0..nodes_n * per).map(|r| (r * 7 / 3) % nodes_n).collect();
                let nodes = Nodes::new(&node_of);
                let n = node_of.len();
                let pick: Vec<usize> = (0..n * n).map(|_| lcg(&mut seed) % n).collect();
                let via = Via::new(&nodes, |s, d| pick[s * n + d]);
                for s in 0..n {
                    for d in 0..n {
                        assert_eq!(nodes.of[via.get(s, d)], nodes.of[s]);
                    }
                }
                run(&nodes, &via, 5, false, "random");
                run(&nodes, &via, 2, true, "random");
            }
        }
    }

    /// [`run_built`] over the forwarders' schedule.
    fn run_blocks(
        nodes: &Nodes,
        via: &Via,
        len: &dyn Fn(usize, usize) -> usize,
        in_place: bool,
        name: &str,
    ) -> Vec<Schedule> {
        run_built(nodes.of.len(), len, in_place, name, &|a, send, recv| {
            build_blocks(a, nodes, via, len, send, recv)
        })
    }

    /// A schedule from a rank's arguments and its send and receive blocks.
    pub(crate) type BuildFn<'a> = dyn Fn(&CollArgs, &[Block], &[Block]) -> Schedule + 'a;

    /// Runs every rank's schedule (`build` from its arguments and its send and receive blocks)
    /// over blocks of `len(s, d)` bytes between `n` ranks (packed in rank order in each buffer)
    /// and checks each block arrived where it belongs; returns the schedules.
    pub(crate) fn run_built(
        n: usize,
        len: &dyn Fn(usize, usize) -> usize,
        in_place: bool,
        name: &str,
        build: &BuildFn,
    ) -> Vec<Schedule> {
        let block = |s: usize, d: usize| -> Vec<u8> {
            (0..len(s, d)).map(|i| (s * 31 + d * 7 + i) as u8).collect()
        };
        let layout = |lens: &dyn Fn(usize) -> usize| -> Vec<Block> {
            let mut off = 0;
            (0..n)
                .map(|x| {
                    let b = Block::new(off, lens(x));
                    off += lens(x);
                    b
                })
                .collect()
        };
        let mut bufs = Vec::with_capacity(n);
        let mut scheds = Vec::with_capacity(n);
        for r in 0..n {
            let (send, recv) = if in_place {
                // In place, the send and receive blocks of one peer are the same size.
                let b = layout(&|x| len(r, x));
                (b.clone(), b)
            } else {
                (layout(&|d| len(r, d)), layout(&|s| len(s, r)))
            };
            let input: Vec<u8> = (0..n).flat_map(|d| block(r, d)).collect();
            let rlen: usize = recv.iter().map(|b| b.len).sum();
            bufs.push(match in_place {
                true => RankBufs {
                    send: vec![],
                    recv: input,
                },
                false => RankBufs {
                    send: input,
                    recv: vec![0xEE; rlen],
                },
            });
            let a = CollArgs {
                in_place,
                ..CollArgs::new(r, n, 0)
            };
            scheds.push(build(&a, &send, &recv));
        }
        simulate(&scheds, &mut bufs, 1, &|_, _| unreachable!("no reduction"));
        for (d, b) in bufs.iter().enumerate() {
            let want: Vec<u8> = (0..n).flat_map(|s| block(s, d)).collect();
            assert_eq!(b.recv, want, "{name} in place {in_place} rank {d}");
        }
        scheds
    }

    #[test]
    fn blocks_of_any_length_arrive_through_the_forwarders() {
        // Alltoallv-like: every (sender, destination) its own length, zeros included.
        let mut seed = 9u64;
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
            let via = rail_rule(&nodes, &rail);
            run_blocks(&nodes, &via, &|s, d| lens[s * n + d], false, &name);
            // In place: the block from s to d and from d to s are the same size.
            let sym = |s: usize, d: usize| lens[s.min(d) * n + s.max(d)];
            run_blocks(&nodes, &via, &sym, true, &name);
            // Nothing at all: no message.
            let none = run_blocks(&nodes, &via, &|_, _| 0, false, &name);
            assert!(
                none.iter().all(|s| s
                    .steps
                    .iter()
                    .all(|st| !matches!(st, Step::Send { .. } | Step::Recv { .. }))),
                "{name}: empty blocks sent"
            );
            // Lengths of at least one byte: one network message per (forwarder,
            // destination), as with equal blocks.
            let ones = run_blocks(&nodes, &via, &|s, d| 1 + lens[s * n + d], false, &name);
            let pairs: std::collections::BTreeSet<(usize, usize)> = (0..n)
                .flat_map(|s| (0..n).map(move |d| (s, d)))
                .filter(|&(s, d)| nodes.of[s] != nodes.of[d])
                .map(|(s, d)| (via.get(s, d), d))
                .collect();
            let ops = ones
                .iter()
                .enumerate()
                .flat_map(|(r, s)| s.steps.iter().map(move |st| (r, st)))
                .filter(|(r, st)| {
                    matches!(st, Step::Send { peer, .. } if nodes.of[*peer] != nodes.of[*r])
                })
                .count();
            assert_eq!(ops, pairs.len(), "{name}");
        }
    }
}
