//! Every hierarchical collective on synthetic node maps (1 to 8 ranks per node, uneven,
//! interleaved), executed by the simulator with synchronous sends and checked against a direct
//! computation, with awkward counts, in place and every root.

use super::*;
use crate::coll::sim::{simulate, RankBufs};
use crate::coll::tests::{gen, sum_op as sum};

/// Node label of each rank: blocks, uneven blocks, round-robin, scattered.
fn maps() -> Vec<Vec<usize>> {
    let blocks = |sizes: &[usize]| -> Vec<usize> {
        sizes
            .iter()
            .enumerate()
            .flat_map(|(i, &k)| std::iter::repeat_n(i, k))
            .collect()
    };
    vec![
        blocks(&[2, 2]),
        blocks(&[1, 1, 1]),
        blocks(&[3, 3]),
        blocks(&[1, 4]),
        blocks(&[3, 1, 2]),
        blocks(&[8, 8]),
        blocks(&[1, 8, 2, 5]),
        blocks(&[7, 1]),
        (0..8).map(|r| r % 2).collect(),
        (0..7).map(|r| r % 3).collect(),
        (0..6).map(|r| r % 2).collect(),
        vec![2, 0, 0, 1, 2, 2, 0, 1, 1, 0],
        vec![5, 5, 9, 5, 9, 9, 9, 9, 9],
    ]
}

/// Builds every rank's schedule (reduce takes in place at the root only) and runs them.
fn run(
    kind: CollKind,
    labels: &[usize],
    bytes: usize,
    root: usize,
    in_place: bool,
    mut bufs: Vec<RankBufs>,
) -> Vec<RankBufs> {
    let n = labels.len();
    let nodes = Nodes::new(labels);
    let scheds: Vec<Schedule> = (0..n)
        .map(|r| {
            let a = CollArgs {
                rank: r,
                size: n,
                root,
                bytes,
                send_blocks: &[],
                recv_blocks: &[],
                elem_size: if kind.is_reduction() { 4 } else { 1 },
                // Reduce takes MPI_IN_PLACE at the root only.
                in_place: in_place && (kind != CollKind::Reduce || r == root),
                commutative: true,
                nodes: nodes.count(),
            };
            build(kind, &a, &nodes).unwrap_or_else(|e| panic!("{kind:?} rank {r}: {e:?}"))
        })
        .collect();
    simulate(&scheds, &mut bufs, 4, &sum);
    bufs
}

const COUNTS: [usize; 4] = [0, 1, 3, 17];

#[test]
fn node_maps_number_nodes_by_lowest_rank() {
    let n = Nodes::new(&[7, 3, 7, 1, 3]);
    assert_eq!(n.of, [0, 1, 0, 2, 1]);
    assert_eq!(n.ranks, [vec![0, 2], vec![1, 4], vec![3]]);
    assert!(n.worth_it());
    assert!(!Nodes::new(&[1, 2, 3]).worth_it());
    assert!(!Nodes::new(&[1, 1, 1]).worth_it());
}

#[test]
fn allreduce() {
    for labels in maps() {
        let n = labels.len();
        for count in COUNTS {
            let len = count * 4;
            for in_place in [false, true] {
                let inputs: Vec<Vec<u8>> = (0..n).map(|r| gen(r, len, 1)).collect();
                let bufs = (0..n)
                    .map(|r| match in_place {
                        true => RankBufs {
                            send: vec![],
                            recv: inputs[r].clone(),
                        },
                        false => RankBufs {
                            send: inputs[r].clone(),
                            recv: vec![0xEE; len],
                        },
                    })
                    .collect();
                let want = inputs[1..]
                    .iter()
                    .fold(inputs[0].clone(), |a, x| sum(&a, x));
                let out = run(CollKind::Allreduce, &labels, len, 0, in_place, bufs);
                for (r, b) in out.iter().enumerate() {
                    assert_eq!(
                        b.recv, want,
                        "{labels:?} count {count} in_place {in_place} rank {r}"
                    );
                }
            }
        }
    }
}

#[test]
fn bcast() {
    for labels in maps() {
        let n = labels.len();
        for count in COUNTS {
            for root in 0..n {
                let data = gen(root, count, 2);
                let bufs = (0..n)
                    .map(|r| RankBufs {
                        send: vec![],
                        recv: if r == root {
                            data.clone()
                        } else {
                            vec![0xEE; count]
                        },
                    })
                    .collect();
                let out = run(CollKind::Bcast, &labels, count, root, false, bufs);
                for (r, b) in out.iter().enumerate() {
                    assert_eq!(
                        b.recv, data,
                        "{labels:?} count {count} root {root} rank {r}"
                    );
                }
            }
        }
    }
}

#[test]
fn reduce() {
    for labels in maps() {
        let n = labels.len();
        for count in COUNTS {
            let len = count * 4;
            for root in 0..n {
                for in_place in [false, true] {
                    let inputs: Vec<Vec<u8>> = (0..n).map(|r| gen(r, len, 3)).collect();
                    // A Recv that is not significant (off the root) is empty: never touched.
                    let bufs = (0..n)
                        .map(|r| match (r == root, in_place) {
                            (true, true) => RankBufs {
                                send: vec![],
                                recv: inputs[r].clone(),
                            },
                            (true, false) => RankBufs {
                                send: inputs[r].clone(),
                                recv: vec![0xEE; len],
                            },
                            (false, _) => RankBufs {
                                send: inputs[r].clone(),
                                recv: vec![],
                            },
                        })
                        .collect();
                    let want = inputs[1..]
                        .iter()
                        .fold(inputs[0].clone(), |a, x| sum(&a, x));
                    let out = run(CollKind::Reduce, &labels, len, root, in_place, bufs);
                    assert_eq!(
                        out[root].recv, want,
                        "{labels:?} count {count} root {root} in_place {in_place}"
                    );
                }
            }
        }
    }
}

#[test]
fn allgather() {
    for labels in maps() {
        let n = labels.len();
        for bs in COUNTS {
            for in_place in [false, true] {
                let blocks: Vec<Vec<u8>> = (0..n).map(|r| gen(r, bs, 4)).collect();
                let want: Vec<u8> = blocks.concat();
                let bufs = (0..n)
                    .map(|r| {
                        let mut recv = vec![0xEE; n * bs];
                        if in_place {
                            recv[r * bs..(r + 1) * bs].copy_from_slice(&blocks[r]);
                        }
                        RankBufs {
                            send: if in_place { vec![] } else { blocks[r].clone() },
                            recv,
                        }
                    })
                    .collect();
                let out = run(CollKind::Allgather, &labels, bs, 0, in_place, bufs);
                for (r, b) in out.iter().enumerate() {
                    assert_eq!(
                        b.recv, want,
                        "{labels:?} bytes {bs} in_place {in_place} rank {r}"
                    );
                }
            }
        }
    }
}

#[test]
fn alltoall() {
    for labels in maps() {
        let n = labels.len();
        for bs in COUNTS {
            for in_place in [false, true] {
                // Block (s, d): what rank s sends to rank d.
                let block = |s: usize, d: usize| gen(s * 64 + d, bs, 5);
                let input = |s: usize| (0..n).flat_map(|d| block(s, d)).collect::<Vec<u8>>();
                let bufs = (0..n)
                    .map(|r| match in_place {
                        true => RankBufs {
                            send: vec![],
                            recv: input(r),
                        },
                        false => RankBufs {
                            send: input(r),
                            recv: vec![0xEE; n * bs],
                        },
                    })
                    .collect();
                let out = run(CollKind::Alltoall, &labels, bs, 0, in_place, bufs);
                for (d, b) in out.iter().enumerate() {
                    let want: Vec<u8> = (0..n).flat_map(|s| block(s, d)).collect();
                    assert_eq!(
                        b.recv, want,
                        "{labels:?} bytes {bs} in_place {in_place} rank {d}"
                    );
                }
            }
        }
    }
}

/// Only leaders talk across nodes: every message between ranks of different nodes has a
/// node's leader at both ends (for the unrooted collectives, the node's lowest rank).
#[test]
fn only_leaders_cross_nodes() {
    for labels in maps() {
        let n = labels.len();
        let nodes = Nodes::new(&labels);
        let leader = |r: usize| nodes.ranks[nodes.of[r]][0] == r;
        let blocks = leak((0..n).map(|r| Block::new(r * 8, 8)).collect());
        for kind in [
            CollKind::Allreduce,
            CollKind::Allgather,
            CollKind::Alltoall,
            CollKind::Allgatherv,
            CollKind::ReduceScatter,
            CollKind::ReduceScatterBlock,
        ] {
            for r in 0..n {
                let a = CollArgs {
                    elem_size: if kind.is_reduction() { 4 } else { 1 },
                    recv_blocks: blocks,
                    ..CollArgs::new(r, n, 64)
                };
                let s = build(kind, &a, &nodes).unwrap();
                for st in &s.steps {
                    if let Step::Send { peer, .. } | Step::Recv { peer, .. } = *st {
                        if nodes.of[peer] != nodes.of[r] {
                            assert!(
                                leader(r) && leader(peer),
                                "{kind:?} {labels:?}: rank {r} talks to {peer} across nodes"
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn refuses_what_it_cannot_do() {
    let nodes = Nodes::new(&[0, 0, 1, 1]);
    let mut a = CollArgs::new(0, 4, 16);
    a.elem_size = 4;
    a.commutative = false;
    assert!(build(CollKind::Allreduce, &a, &nodes).is_err());
    a.commutative = true;
    assert!(build(CollKind::Scan, &a, &nodes).is_err());
    assert!(build(CollKind::Allreduce, &a, &Nodes::new(&[0, 1])).is_err());
    assert!(supports(CollKind::Gather, false) && !supports(CollKind::Gatherv, false));
    assert!(supports(CollKind::Gatherv, true) && supports(CollKind::Scatterv, true));
    assert!(!supports(CollKind::Alltoallv, true));
    // Gatherv and scatterv need the node's counts (build_v); nothing else takes them.
    assert!(build(CollKind::Gatherv, &a, &nodes).is_err());
    assert!(build_v(CollKind::Gather, &a, &nodes, &[16, 16], usize::MAX).is_err());
    // A leader told lengths of another node size, or a length of its own that is not its
    // count, refuses.
    let a = CollArgs {
        root: 2,
        ..CollArgs::new(0, 4, 16)
    };
    assert!(build_v(CollKind::Gatherv, &a, &nodes, &[16], usize::MAX).is_err());
    assert!(build_v(CollKind::Scatterv, &a, &nodes, &[8, 16], usize::MAX).is_err());
    assert!(build_v(CollKind::Scatterv, &a, &nodes, &[16, 8], usize::MAX).is_ok());
}

/// Builds every rank's schedule from `args(rank)` and runs them.
fn run_with(
    kind: CollKind,
    labels: &[usize],
    args: &dyn Fn(usize) -> CollArgs<'static>,
    mut bufs: Vec<RankBufs>,
) -> Vec<RankBufs> {
    let nodes = Nodes::new(labels);
    let scheds: Vec<Schedule> = (0..labels.len())
        .map(|r| {
            build(kind, &args(r), &nodes).unwrap_or_else(|e| panic!("{kind:?} rank {r}: {e:?}"))
        })
        .collect();
    simulate(&scheds, &mut bufs, 4, &sum);
    bufs
}

/// Leaks `v` for the `'static` blocks of a test's arguments.
fn leak(v: Vec<Block>) -> &'static [Block] {
    Box::leak(v.into_boxed_slice())
}

#[test]
fn gather() {
    for labels in maps() {
        let n = labels.len();
        for bs in COUNTS {
            for root in 0..n {
                for in_place in [false, true] {
                    let blocks: Vec<Vec<u8>> = (0..n).map(|r| gen(r, bs, 6)).collect();
                    let bufs = (0..n)
                        .map(|r| match (r == root, in_place) {
                            (true, true) => {
                                let mut recv = vec![0xEE; n * bs];
                                recv[r * bs..(r + 1) * bs].copy_from_slice(&blocks[r]);
                                RankBufs { send: vec![], recv }
                            }
                            (true, false) => RankBufs {
                                send: blocks[r].clone(),
                                recv: vec![0xEE; n * bs],
                            },
                            (false, _) => RankBufs {
                                send: blocks[r].clone(),
                                recv: vec![],
                            },
                        })
                        .collect();
                    let args = |r: usize| CollArgs {
                        root,
                        in_place: in_place && r == root,
                        ..CollArgs::new(r, n, bs)
                    };
                    let out = run_with(CollKind::Gather, &labels, &args, bufs);
                    assert_eq!(
                        out[root].recv,
                        blocks.concat(),
                        "{labels:?} bytes {bs} root {root} in_place {in_place}"
                    );
                }
            }
        }
    }
}

#[test]
fn scatter() {
    for labels in maps() {
        let n = labels.len();
        for bs in COUNTS {
            for root in 0..n {
                for in_place in [false, true] {
                    let blocks: Vec<Vec<u8>> = (0..n).map(|r| gen(r, bs, 7)).collect();
                    let bufs = (0..n)
                        .map(|r| match (r == root, in_place) {
                            // In place, the root's own block stays in its send buffer.
                            (true, true) => RankBufs {
                                send: blocks.concat(),
                                recv: vec![],
                            },
                            (true, false) => RankBufs {
                                send: blocks.concat(),
                                recv: vec![0xEE; bs],
                            },
                            (false, _) => RankBufs {
                                send: vec![],
                                recv: vec![0xEE; bs],
                            },
                        })
                        .collect();
                    let args = |r: usize| CollArgs {
                        root,
                        in_place: in_place && r == root,
                        ..CollArgs::new(r, n, bs)
                    };
                    let out = run_with(CollKind::Scatter, &labels, &args, bufs);
                    for (r, b) in out.iter().enumerate() {
                        if r == root && in_place {
                            continue;
                        }
                        assert_eq!(
                            b.recv, blocks[r],
                            "{labels:?} bytes {bs} root {root} in_place {in_place} rank {r}"
                        );
                    }
                }
            }
        }
    }
}

/// Per-rank lengths for the v collectives: every count scaled by a pattern with zeros.
fn vlens(n: usize, count: usize, unit: usize) -> Vec<usize> {
    (0..n)
        .map(|r| ((r * 7 + count) % 5) * count * unit)
        .collect()
}

#[test]
fn allgatherv() {
    for labels in maps() {
        let n = labels.len();
        for count in COUNTS {
            let lens = vlens(n, count, 1);
            // Three layouts of Recv: back to back in rank order, reversed with gaps of 2 bytes,
            // and back to back from an offset.
            let mut layouts = Vec::new();
            let prefix: Vec<usize> = lens
                .iter()
                .scan(0, |s, &l| Some(std::mem::replace(s, *s + l)))
                .collect();
            layouts.push(
                (0..n)
                    .map(|r| Block::new(prefix[r], lens[r]))
                    .collect::<Vec<_>>(),
            );
            let mut off = 2;
            let mut rev = vec![Block::default(); n];
            for r in (0..n).rev() {
                rev[r] = Block::new(off, lens[r]);
                off += lens[r] + 2;
            }
            layouts.push(rev);
            layouts.push((0..n).map(|r| Block::new(prefix[r] + 3, lens[r])).collect());
            for layout in layouts {
                let extent = layout.iter().map(|b| b.off + b.len).max().unwrap() + 2;
                let blocks: Vec<Vec<u8>> = (0..n).map(|r| gen(r, lens[r], 8)).collect();
                let mut want = vec![0xEE; extent];
                for r in 0..n {
                    want[layout[r].off..layout[r].off + lens[r]].copy_from_slice(&blocks[r]);
                }
                let layout = leak(layout);
                for in_place in [false, true] {
                    let bufs = (0..n)
                        .map(|r| {
                            let mut recv = vec![0xEE; extent];
                            if in_place {
                                let b = layout[r];
                                recv[b.off..b.off + b.len].copy_from_slice(&blocks[r]);
                            }
                            RankBufs {
                                send: if in_place { vec![] } else { blocks[r].clone() },
                                recv,
                            }
                        })
                        .collect();
                    let args = |r: usize| CollArgs {
                        in_place,
                        recv_blocks: layout,
                        ..CollArgs::new(r, n, 0)
                    };
                    let out = run_with(CollKind::Allgatherv, &labels, &args, bufs);
                    for (r, b) in out.iter().enumerate() {
                        assert_eq!(
                            b.recv, want,
                            "{labels:?} {layout:?} in_place {in_place} rank {r}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn reduce_scatter() {
    for labels in maps() {
        let n = labels.len();
        for count in COUNTS {
            for block in [false, true] {
                let kind = match block {
                    true => CollKind::ReduceScatterBlock,
                    false => CollKind::ReduceScatter,
                };
                let lens = match block {
                    true => vec![count * 4; n],
                    false => vlens(n, count, 4),
                };
                let total: usize = lens.iter().sum();
                let rb = leak(lens.iter().map(|&l| Block::new(0, l)).collect());
                for in_place in [false, true] {
                    let inputs: Vec<Vec<u8>> = (0..n).map(|r| gen(r, total, 9)).collect();
                    let all = inputs[1..]
                        .iter()
                        .fold(inputs[0].clone(), |a, x| sum(&a, x));
                    let bufs = (0..n)
                        .map(|r| {
                            let mut recv = vec![0xEE; total.max(lens[r]) + 4];
                            if in_place {
                                recv[..total].copy_from_slice(&inputs[r]);
                            }
                            RankBufs {
                                send: if in_place { vec![] } else { inputs[r].clone() },
                                recv,
                            }
                        })
                        .collect();
                    let args = |r: usize| CollArgs {
                        in_place,
                        elem_size: 4,
                        recv_blocks: if block { &[] } else { rb },
                        ..CollArgs::new(r, n, if block { count * 4 } else { 0 })
                    };
                    let out = run_with(kind, &labels, &args, bufs);
                    let mut at = 0;
                    for (r, b) in out.iter().enumerate() {
                        let what = format!(
                            "{kind:?} {labels:?} count {count} in_place {in_place} rank {r}"
                        );
                        assert_eq!(b.recv[..lens[r]], all[at..at + lens[r]], "{what}");
                        if !in_place {
                            assert!(
                                b.recv[lens[r]..].iter().all(|&x| x == 0xEE),
                                "{what}: past its block"
                            );
                        }
                        at += lens[r];
                    }
                }
            }
        }
    }
}

/// Messages that cross nodes in one call, over all ranks (each Send step whose peer is on
/// another node).
fn crossings(scheds: &[Schedule], nodes: &Nodes) -> usize {
    scheds
        .iter()
        .enumerate()
        .map(|(r, s)| {
            s.steps
                .iter()
                .filter(
                    |st| matches!(st, Step::Send { peer, .. } if nodes.of[*peer] != nodes.of[r]),
                )
                .count()
        })
        .sum()
}

/// Gather and scatter move each node's data in exactly one message between its leader and
/// the root, for every root, where the flat binomial tree sends more wherever a node holds
/// more than one subtree.
#[test]
fn gather_and_scatter_cross_once_per_node() {
    for labels in maps() {
        let n = labels.len();
        let nodes = Nodes::new(&labels);
        for kind in [CollKind::Gather, CollKind::Scatter] {
            for root in 0..n {
                let args = |r: usize| CollArgs {
                    root,
                    ..CollArgs::new(r, n, 8)
                };
                let hier: Vec<Schedule> = (0..n)
                    .map(|r| build(kind, &args(r), &nodes).unwrap())
                    .collect();
                let flat: Vec<Schedule> = (0..n)
                    .map(|r| crate::coll::build(kind, &args(r)).unwrap().1)
                    .collect();
                // Every message across nodes is between the root and another node's leader.
                for (r, s) in hier.iter().enumerate() {
                    for st in &s.steps {
                        if let Step::Send { peer, .. } | Step::Recv { peer, .. } = *st {
                            if nodes.of[peer] != nodes.of[r] {
                                let other = if r == root { peer } else { r };
                                assert!(
                                    (r == root || peer == root)
                                        && nodes.ranks[nodes.of[other]][0] == other,
                                    "{kind:?} {labels:?} root {root}: {r} talks to {peer}"
                                );
                            }
                        }
                    }
                }
                let (h, f) = (crossings(&hier, &nodes), crossings(&flat, &nodes));
                assert_eq!(h, nodes.count() - 1, "{kind:?} {labels:?} root {root}");
                assert!(
                    h <= f,
                    "{kind:?} {labels:?} root {root}: {h} crossings, flat {f}"
                );
            }
        }
    }
}

/// The collectives left flat across nodes already send each block across at most one node
/// boundary: alltoallv at most one message per ordered pair of ranks on different nodes,
/// gatherv and scatterv one per rank off the root's node, straight between it and the root.
#[test]
fn flat_v_collectives_cross_once_per_pair() {
    for labels in maps() {
        let n = labels.len();
        let nodes = Nodes::new(&labels);
        let blocks = leak((0..n).map(|r| Block::new(r * 8, 8)).collect());
        let sends = |s: &Schedule, r: usize| -> Vec<usize> {
            s.steps
                .iter()
                .filter_map(|st| match *st {
                    Step::Send { peer, .. } if nodes.of[peer] != nodes.of[r] => Some(peer),
                    _ => None,
                })
                .collect()
        };
        for r in 0..n {
            let a = CollArgs {
                send_blocks: blocks,
                recv_blocks: blocks,
                ..CollArgs::new(r, n, 8)
            };
            let (_, s) = crate::coll::build(CollKind::Alltoallv, &a).unwrap();
            let mut peers = sends(&s, r);
            let all = peers.len();
            peers.sort();
            peers.dedup();
            assert_eq!(peers.len(), all, "alltoallv {labels:?} rank {r}: {peers:?}");
        }
        for root in 0..n {
            let off_node = (0..n).filter(|&r| nodes.of[r] != nodes.of[root]).count();
            for kind in [CollKind::Gatherv, CollKind::Scatterv] {
                let mut total = 0;
                for r in 0..n {
                    let a = CollArgs {
                        root,
                        send_blocks: blocks,
                        recv_blocks: blocks,
                        ..CollArgs::new(r, n, 8)
                    };
                    let (_, s) = crate::coll::build(kind, &a).unwrap();
                    let peers = sends(&s, r);
                    assert!(
                        peers.iter().all(|&p| p == root || r == root),
                        "{kind:?} {labels:?} root {root}: rank {r} sends across nodes to {peers:?}"
                    );
                    total += peers.len();
                }
                assert_eq!(total, off_node, "{kind:?} {labels:?} root {root}");
            }
        }
    }
}

/// Runs the count exchange of a gatherv/scatterv (`lens_schedule`) on every rank with
/// `lens[r]` as rank r's length, and returns what each rank passes to `build_v` (the members'
/// lengths at a leader of a node without the root, nothing elsewhere). Checks what crosses
/// nodes: nothing for gatherv, one message from the root to each leader that needs the
/// lengths for scatterv.
fn told_lens(kind: CollKind, nodes: &Nodes, root: usize, lens: &[usize]) -> Vec<Vec<usize>> {
    let n = lens.len();
    let scheds: Vec<Schedule> = (0..n)
        .map(|r| lens_schedule(kind, nodes, r, root))
        .collect();
    let mut bufs: Vec<RankBufs> = (0..n)
        .map(|r| RankBufs {
            send: match (kind, r == root) {
                (CollKind::Scatterv, true) => root_lens(nodes, root, |s| lens[s]),
                _ => encode_len(lens[r]).to_vec(),
            },
            recv: vec![0xEE; lens_recv_bytes(nodes, r)],
        })
        .collect();
    simulate(&scheds, &mut bufs, 1, &sum);
    let rn = nodes.of[root];
    let told = (0..nodes.count())
        .filter(|&j| j != rn && nodes.ranks[j].len() > 1)
        .count();
    let want = match kind {
        CollKind::Scatterv => told,
        _ => 0,
    };
    assert_eq!(crossings(&scheds, nodes), want, "{kind:?} {nodes:?}");
    (0..n)
        .map(|r| {
            let g = nodes.of[r];
            let leads = nodes.ranks[g][0] == r && r != root;
            match leads && g != rn && nodes.ranks[g].len() > 1 {
                true => decode_lens(&bufs[r].recv),
                false => Vec::new(),
            }
        })
        .collect()
}

/// Layouts of the root's blocks for lengths `lens`: back to back in rank order, reversed with
/// gaps of 3 bytes, and odd ranks before even ones (both descending) from an offset of 5.
fn v_layouts(lens: &[usize]) -> Vec<Vec<Block>> {
    let n = lens.len();
    let place = |order: Vec<usize>, start: usize, gap: usize| {
        let mut out = vec![Block::default(); n];
        let mut off = start;
        for r in order {
            out[r] = Block::new(off, lens[r]);
            off += lens[r] + gap;
        }
        out
    };
    let odd_even: Vec<usize> = (0..n)
        .rev()
        .filter(|r| r % 2 == 1)
        .chain((0..n).rev().filter(|r| r % 2 == 0))
        .collect();
    vec![
        place((0..n).collect(), 0, 0),
        place((0..n).rev().collect(), 3, 3),
        place(odd_even, 5, 0),
    ]
}

/// Block lengths of the v tests: the pattern of `vlens` (zeros included), every rank but the
/// root's node empty, and only the last rank non-empty.
fn v_lens_cases(n: usize, count: usize) -> Vec<Vec<usize>> {
    let mut last = vec![0; n];
    last[n - 1] = count;
    vec![vlens(n, count, 1), vec![0; n], last]
}

/// The `relay` values of the v tests for blocks of up to `count` bytes: every block through
/// its leader, none (a flat schedule), and those below `8 count` bytes per node (a mix).
fn relays(count: usize) -> [usize; 3] {
    [usize::MAX, 0, 8 * count]
}

/// Builds every rank's gatherv/scatterv schedule with `relay` through the count exchange,
/// checks that every message across nodes is one between the root and a node's leader (one
/// per node with data through the leader, none from the root's node) or the straight one of a
/// block that does not go through the leader, and runs them.
fn run_v(
    kind: CollKind,
    labels: &[usize],
    (root, relay): (usize, usize),
    lens: &[usize],
    args: &dyn Fn(usize) -> CollArgs<'static>,
    mut bufs: Vec<RankBufs>,
) -> Vec<RankBufs> {
    let nodes = Nodes::new(labels);
    let told = told_lens(kind, &nodes, root, lens);
    let scheds: Vec<Schedule> = (0..labels.len())
        .map(|r| {
            build_v(kind, &args(r), &nodes, &told[r], relay)
                .unwrap_or_else(|e| panic!("{kind:?} rank {r}: {e:?}"))
        })
        .collect();
    let rn = nodes.of[root];
    let via = |r: usize| {
        let m = nodes.ranks[nodes.of[r]].len();
        nodes.of[r] != rn && m > 1 && through_leader(lens[r], m, relay)
    };
    for (r, s) in scheds.iter().enumerate() {
        for st in &s.steps {
            if let Step::Send { peer, .. } | Step::Recv { peer, .. } = *st {
                if nodes.of[peer] != nodes.of[r] {
                    let other = if r == root { peer } else { r };
                    assert!(
                        (r == root || peer == root)
                            && (nodes.ranks[nodes.of[other]][0] == other || !via(other)),
                        "{kind:?} {labels:?} root {root} relay {relay}: {r} talks to {peer}"
                    );
                }
            }
        }
    }
    // One message per node with data through its leader, one per block that goes straight.
    let packed = (0..nodes.count())
        .filter(|&j| j != rn && nodes.ranks[j].iter().any(|&r| lens[r] > 0 && via(r)))
        .count();
    let straight = (0..lens.len())
        .filter(|&r| nodes.of[r] != rn && lens[r] > 0 && !via(r))
        .count();
    assert_eq!(
        crossings(&scheds, &nodes),
        packed + straight,
        "{kind:?} {labels:?} root {root} relay {relay} {lens:?}"
    );
    // Without a threshold, only the blocks of nodes of one rank go straight.
    if relay == usize::MAX {
        let one = |r: usize| nodes.ranks[nodes.of[r]].len() == 1;
        let alone = (0..lens.len()).filter(|&r| nodes.of[r] != rn && lens[r] > 0 && one(r));
        assert_eq!(
            straight,
            alone.count(),
            "{kind:?} {labels:?} root {root} {lens:?}"
        );
    }
    simulate(&scheds, &mut bufs, 1, &sum);
    bufs
}

#[test]
fn gatherv() {
    for labels in maps() {
        let n = labels.len();
        for count in COUNTS {
            for lens in v_lens_cases(n, count) {
                for layout in v_layouts(&lens) {
                    let extent = layout.iter().map(|b| b.off + b.len).max().unwrap() + 3;
                    let blocks: Vec<Vec<u8>> = (0..n).map(|r| gen(r, lens[r], 9)).collect();
                    let mut want = vec![0xEE; extent];
                    for r in 0..n {
                        want[layout[r].off..layout[r].off + layout[r].len]
                            .copy_from_slice(&blocks[r]);
                    }
                    let layout = leak(layout);
                    for (root, relay) in (0..n).flat_map(|t| relays(count).map(|x| (t, x))) {
                        for in_place in [false, true] {
                            let bufs = (0..n)
                                .map(|r| match (r == root, in_place) {
                                    (true, true) => {
                                        let mut recv = vec![0xEE; extent];
                                        let b = layout[r];
                                        recv[b.off..b.off + b.len].copy_from_slice(&blocks[r]);
                                        RankBufs { send: vec![], recv }
                                    }
                                    (true, false) => RankBufs {
                                        send: blocks[r].clone(),
                                        recv: vec![0xEE; extent],
                                    },
                                    (false, _) => RankBufs {
                                        send: blocks[r].clone(),
                                        recv: vec![],
                                    },
                                })
                                .collect();
                            // Only the root has the blocks; every other rank its own count.
                            let args = |r: usize| CollArgs {
                                root,
                                in_place: in_place && r == root,
                                recv_blocks: if r == root { layout } else { &[] },
                                ..CollArgs::new(
                                    r,
                                    n,
                                    if in_place && r == root { 0 } else { lens[r] },
                                )
                            };
                            let out = run_v(
                                CollKind::Gatherv,
                                &labels,
                                (root, relay),
                                &lens,
                                &args,
                                bufs,
                            );
                            assert_eq!(
                                out[root].recv, want,
                                "{labels:?} {lens:?} {layout:?} root {root} relay {relay} in_place {in_place}"
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn scatterv() {
    for labels in maps() {
        let n = labels.len();
        for count in COUNTS {
            for lens in v_lens_cases(n, count) {
                for layout in v_layouts(&lens) {
                    let extent = layout.iter().map(|b| b.off + b.len).max().unwrap() + 3;
                    let blocks: Vec<Vec<u8>> = (0..n).map(|r| gen(r, lens[r], 10)).collect();
                    let mut send = vec![0xDD; extent];
                    for r in 0..n {
                        send[layout[r].off..layout[r].off + layout[r].len]
                            .copy_from_slice(&blocks[r]);
                    }
                    let layout = leak(layout);
                    for (root, relay) in (0..n).flat_map(|t| relays(count).map(|x| (t, x))) {
                        for in_place in [false, true] {
                            // Two bytes past each count show a write beyond it.
                            let bufs = (0..n)
                                .map(|r| RankBufs {
                                    send: if r == root { send.clone() } else { vec![] },
                                    recv: vec![0xEE; lens[r] + 2],
                                })
                                .collect();
                            let args = |r: usize| CollArgs {
                                root,
                                in_place: in_place && r == root,
                                send_blocks: if r == root { layout } else { &[] },
                                ..CollArgs::new(r, n, lens[r])
                            };
                            let out = run_v(
                                CollKind::Scatterv,
                                &labels,
                                (root, relay),
                                &lens,
                                &args,
                                bufs,
                            );
                            for (r, b) in out.iter().enumerate() {
                                let mut want = vec![0xEE; lens[r] + 2];
                                if !(r == root && in_place) {
                                    want[..lens[r]].copy_from_slice(&blocks[r]);
                                }
                                assert_eq!(
                                    b.recv, want,
                                    "{labels:?} {lens:?} {layout:?} root {root} relay {relay} in_place {in_place} rank {r}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}
