//! Every collective x every algorithm x ranks 1..=17 x awkward counts x in-place, executed by
//! the simulator and compared with a direct reference computation. Reductions run with a
//! commutative op (wrapping i32 sum) and, for rank-ordered algorithms, a non-commutative one
//! (composition of affine maps x -> a*x + b over u32, which only matches in rank order).

#![allow(clippy::needless_range_loop)]

use super::sim::{simulate, RankBufs};
use super::*;

const RANKS: std::ops::RangeInclusive<usize> = 1..=17;
const COUNTS: [usize; 5] = [0, 1, 3, 17, 1001];
const SENTINEL: u8 = 0xEE;

fn all_ranks() -> Vec<usize> {
    RANKS.collect()
}

// ---------- ops ----------

pub(super) fn sum_op(l: &[u8], r: &[u8]) -> Vec<u8> {
    l.chunks(4)
        .zip(r.chunks(4))
        .flat_map(|(a, b)| {
            let x = i32::from_le_bytes(a.try_into().unwrap())
                .wrapping_add(i32::from_le_bytes(b.try_into().unwrap()));
            x.to_le_bytes()
        })
        .collect()
}

/// (a1, b1) op (a2, b2) = (a1 a2, a2 b1 + b2): apply the left map, then the right one.
fn affine_op(l: &[u8], r: &[u8]) -> Vec<u8> {
    let w = |s: &[u8], i: usize| u32::from_le_bytes(s[i..i + 4].try_into().unwrap());
    l.chunks(8)
        .zip(r.chunks(8))
        .flat_map(|(x, y)| {
            let (a1, b1, a2, b2) = (w(x, 0), w(x, 4), w(y, 0), w(y, 4));
            let mut out = a1.wrapping_mul(a2).to_le_bytes().to_vec();
            out.extend_from_slice(&a2.wrapping_mul(b1).wrapping_add(b2).to_le_bytes());
            out
        })
        .collect()
}

#[derive(Clone, Copy)]
struct Op {
    es: usize,
    commutative: bool,
    f: fn(&[u8], &[u8]) -> Vec<u8>,
}

const SUM: Op = Op {
    es: 4,
    commutative: true,
    f: sum_op,
};
const AFFINE: Op = Op {
    es: 8,
    commutative: false,
    f: affine_op,
};

#[test]
fn affine_op_is_not_commutative_but_associative() {
    let x = gen(0, 8, 1);
    let y = gen(1, 8, 2);
    let z = gen(2, 8, 3);
    assert_ne!(affine_op(&x, &y), affine_op(&y, &x));
    assert_eq!(
        affine_op(&affine_op(&x, &y), &z),
        affine_op(&x, &affine_op(&y, &z))
    );
}

// ---------- data ----------

fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51afd7ed558ccd);
    x ^= x >> 33;
    x
}

/// Deterministic bytes for (rank, salt); every 8-byte element has an odd low word (so affine
/// maps stay invertible and order mistakes cannot hide behind zeros).
pub(super) fn gen(rank: usize, len: usize, salt: u64) -> Vec<u8> {
    (0..len)
        .map(|i| {
            let v = mix((rank as u64) << 40 ^ (i as u64) << 8 ^ salt) as u8;
            if i % 8 == 0 {
                v | 1
            } else {
                v
            }
        })
        .collect()
}

fn fold(inputs: &[Vec<u8>], f: fn(&[u8], &[u8]) -> Vec<u8>) -> Vec<u8> {
    let mut acc = inputs[0].clone();
    for x in &inputs[1..] {
        acc = f(&acc, x);
    }
    acc
}

// ---------- harness ----------

/// Per-rank arguments owned by the test.
#[derive(Clone, Default)]
struct Owned {
    root: usize,
    bytes: usize,
    sb: Vec<Block>,
    rb: Vec<Block>,
    es: usize,
    in_place: bool,
    commutative: bool,
}

fn run(
    kind: CollKind,
    algo: &str,
    n: usize,
    args: &[Owned],
    mut bufs: Vec<RankBufs>,
    op: Option<Op>,
) -> Vec<RankBufs> {
    let scheds: Vec<Schedule> = (0..n)
        .map(|r| {
            let o = &args[r];
            let a = CollArgs {
                rank: r,
                size: n,
                root: o.root,
                bytes: o.bytes,
                send_blocks: &o.sb,
                recv_blocks: &o.rb,
                elem_size: o.es.max(1),
                in_place: o.in_place,
                commutative: o.commutative,
                nodes: 1,
            };
            build_with(kind, algo, &a)
                .unwrap_or_else(|e| panic!("{} {algo} n={n}: {e}", kind.name()))
        })
        .collect();
    let f = op.map(|o| o.f).unwrap_or(sum_op);
    let es = op.map(|o| o.es).unwrap_or(1);
    simulate(&scheds, &mut bufs, es, &|l: &[u8], r: &[u8]| f(l, r));
    bufs
}

fn algos(kind: CollKind) -> Vec<&'static str> {
    algorithms(kind).map(|a| a.name).collect()
}

fn ordered(kind: CollKind, algo: &str) -> bool {
    algorithm(kind, algo).unwrap().ordered
}

fn roots(n: usize) -> Vec<usize> {
    let mut v = vec![0, n - 1, n / 2];
    v.sort();
    v.dedup();
    v
}

fn ctx(kind: CollKind, algo: &str, n: usize, count: usize, extra: &str) -> String {
    format!("{} {algo} n={n} count={count} {extra}", kind.name())
}

// ---------- tests ----------

#[test]
fn barrier() {
    for n in RANKS {
        let args = vec![Owned::default(); n];
        let s = build_with(CollKind::Barrier, "dissemination", &CollArgs::new(0, n, 0)).unwrap();
        assert_eq!(s.sends(), (n as f64).log2().ceil() as usize);
        run(
            CollKind::Barrier,
            "dissemination",
            n,
            &args,
            vec![RankBufs::default(); n],
            None,
        );
    }
}

#[test]
fn bcast() {
    bcast_with(&all_ranks(), &COUNTS);
}

fn bcast_with(ranks: &[usize], counts: &[usize]) {
    for algo in algos(CollKind::Bcast) {
        for n in ranks.iter().copied() {
            for count in counts.iter().copied() {
                for root in roots(n) {
                    let args = vec![
                        Owned {
                            root,
                            bytes: count,
                            ..Default::default()
                        };
                        n
                    ];
                    let data = gen(root, count, 1);
                    let bufs = (0..n)
                        .map(|r| RankBufs {
                            send: vec![],
                            recv: if r == root {
                                data.clone()
                            } else {
                                vec![SENTINEL; count]
                            },
                        })
                        .collect();
                    let out = run(CollKind::Bcast, algo, n, &args, bufs, None);
                    for (r, b) in out.iter().enumerate() {
                        assert_eq!(
                            b.recv,
                            data,
                            "{} rank {r}",
                            ctx(CollKind::Bcast, algo, n, count, &format!("root={root}"))
                        );
                    }
                }
            }
        }
    }
}

/// Reductions to one vector: reduce, allreduce, scan, exscan.
fn vector_reduction(kind: CollKind, ranks: &[usize], counts: &[usize]) {
    for algo in algos(kind) {
        for op in [SUM, AFFINE] {
            if !op.commutative && !ordered(kind, algo) {
                continue;
            }
            for n in ranks.iter().copied() {
                for count in counts.iter().copied() {
                    let len = count * op.es;
                    let rts = if kind == CollKind::Reduce {
                        roots(n)
                    } else {
                        vec![0]
                    };
                    for root in rts {
                        for in_place in [false, true] {
                            let inputs: Vec<Vec<u8>> = (0..n).map(|r| gen(r, len, 7)).collect();
                            let args: Vec<Owned> = (0..n)
                                .map(|r| Owned {
                                    root,
                                    bytes: len,
                                    es: op.es,
                                    in_place: in_place && (kind != CollKind::Reduce || r == root),
                                    commutative: op.commutative,
                                    ..Default::default()
                                })
                                .collect();
                            let bufs = (0..n)
                                .map(|r| {
                                    if args[r].in_place {
                                        RankBufs {
                                            send: vec![],
                                            recv: inputs[r].clone(),
                                        }
                                    } else {
                                        RankBufs {
                                            send: inputs[r].clone(),
                                            recv: vec![SENTINEL; len],
                                        }
                                    }
                                })
                                .collect();
                            let out = run(kind, algo, n, &args, bufs, Some(op));
                            let c = ctx(
                                kind,
                                algo,
                                n,
                                count,
                                &format!("root={root} in_place={in_place} comm={}", op.commutative),
                            );
                            for r in 0..n {
                                let expect = match kind {
                                    CollKind::Allreduce => fold(&inputs, op.f),
                                    CollKind::Reduce if r == root => fold(&inputs, op.f),
                                    CollKind::Reduce => continue,
                                    CollKind::Scan => fold(&inputs[..=r], op.f),
                                    CollKind::Exscan if r == 0 => {
                                        if args[0].in_place {
                                            inputs[0].clone()
                                        } else {
                                            vec![SENTINEL; len]
                                        }
                                    }
                                    CollKind::Exscan => fold(&inputs[..r], op.f),
                                    _ => unreachable!(),
                                };
                                assert!(out[r].recv == expect, "{c} rank {r}: wrong result");
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn reduce() {
    vector_reduction(CollKind::Reduce, &all_ranks(), &COUNTS);
}

#[test]
fn allreduce() {
    vector_reduction(CollKind::Allreduce, &all_ranks(), &COUNTS);
}

#[test]
fn scan() {
    vector_reduction(CollKind::Scan, &all_ranks(), &COUNTS);
}

#[test]
fn exscan() {
    vector_reduction(CollKind::Exscan, &all_ranks(), &COUNTS);
}

/// Per-rank result lengths (elements) of reduce_scatter tests: varied, some zero.
fn rs_counts(n: usize, count: usize) -> Vec<usize> {
    (0..n)
        .map(|i| {
            if count == 0 {
                0
            } else {
                (count + 7 * i) % (count + 3)
            }
        })
        .collect()
}

fn reduce_scatter_kind(kind: CollKind, ranks: &[usize], counts: &[usize]) {
    for algo in algos(kind) {
        for op in [SUM, AFFINE] {
            if !op.commutative && !ordered(kind, algo) {
                continue;
            }
            for n in ranks.iter().copied() {
                for count in counts.iter().copied() {
                    for in_place in [false, true] {
                        let cnts: Vec<usize> = if kind == CollKind::ReduceScatterBlock {
                            vec![count; n]
                        } else {
                            rs_counts(n, count)
                        };
                        let lens: Vec<usize> = cnts.iter().map(|c| c * op.es).collect();
                        let total: usize = lens.iter().sum();
                        let rb: Vec<Block> = if kind == CollKind::ReduceScatterBlock {
                            vec![]
                        } else {
                            lens.iter().map(|&l| Block::new(0, l)).collect()
                        };
                        let inputs: Vec<Vec<u8>> = (0..n).map(|r| gen(r, total, 11)).collect();
                        let args = vec![
                            Owned {
                                bytes: count * op.es,
                                rb,
                                es: op.es,
                                in_place,
                                commutative: op.commutative,
                                ..Default::default()
                            };
                            n
                        ];
                        let bufs = (0..n)
                            .map(|r| {
                                if in_place {
                                    RankBufs {
                                        send: vec![],
                                        recv: inputs[r].clone(),
                                    }
                                } else {
                                    RankBufs {
                                        send: inputs[r].clone(),
                                        recv: vec![SENTINEL; lens[r]],
                                    }
                                }
                            })
                            .collect();
                        let out = run(kind, algo, n, &args, bufs, Some(op));
                        let full = fold(&inputs, op.f);
                        let mut off = 0;
                        for r in 0..n {
                            let c = ctx(
                                kind,
                                algo,
                                n,
                                count,
                                &format!("in_place={in_place} comm={}", op.commutative),
                            );
                            assert!(
                                out[r].recv[..lens[r]] == full[off..off + lens[r]],
                                "{c} rank {r}: wrong result"
                            );
                            off += lens[r];
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn reduce_scatter() {
    reduce_scatter_kind(CollKind::ReduceScatter, &all_ranks(), &COUNTS);
}

#[test]
fn reduce_scatter_block() {
    reduce_scatter_kind(CollKind::ReduceScatterBlock, &all_ranks(), &COUNTS);
}

#[test]
fn gather_scatter() {
    gather_scatter_with(&all_ranks(), &COUNTS);
}

fn gather_scatter_with(ranks: &[usize], counts: &[usize]) {
    for (kind, algo) in [
        (CollKind::Gather, "binomial"),
        (CollKind::Scatter, "binomial"),
    ] {
        for n in ranks.iter().copied() {
            for count in counts.iter().copied() {
                for root in roots(n) {
                    for in_place in [false, true] {
                        let blocks: Vec<Vec<u8>> = (0..n).map(|r| gen(r, count, 3)).collect();
                        let whole: Vec<u8> = blocks.concat();
                        let args: Vec<Owned> = (0..n)
                            .map(|r| Owned {
                                root,
                                bytes: count,
                                in_place: in_place && r == root,
                                ..Default::default()
                            })
                            .collect();
                        let c = ctx(
                            kind,
                            algo,
                            n,
                            count,
                            &format!("root={root} in_place={in_place}"),
                        );
                        if kind == CollKind::Gather {
                            let bufs = (0..n)
                                .map(|r| {
                                    if r != root {
                                        return RankBufs {
                                            send: blocks[r].clone(),
                                            recv: vec![],
                                        };
                                    }
                                    let mut recv = vec![SENTINEL; n * count];
                                    if in_place {
                                        recv[r * count..(r + 1) * count]
                                            .copy_from_slice(&blocks[r]);
                                        RankBufs { send: vec![], recv }
                                    } else {
                                        RankBufs {
                                            send: blocks[r].clone(),
                                            recv,
                                        }
                                    }
                                })
                                .collect();
                            let out = run(kind, algo, n, &args, bufs, None);
                            assert!(out[root].recv == whole, "{c}");
                        } else {
                            let bufs = (0..n)
                                .map(|r| {
                                    if r == root {
                                        RankBufs {
                                            send: whole.clone(),
                                            recv: if in_place {
                                                vec![]
                                            } else {
                                                vec![SENTINEL; count]
                                            },
                                        }
                                    } else {
                                        RankBufs {
                                            send: vec![],
                                            recv: vec![SENTINEL; count],
                                        }
                                    }
                                })
                                .collect();
                            let out = run(kind, algo, n, &args, bufs, None);
                            for r in 0..n {
                                if !(in_place && r == root) {
                                    assert!(out[r].recv == blocks[r], "{c} rank {r}");
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Blocks with varied lengths and gaps between them (left untouched by the collective).
fn v_blocks(n: usize, count: usize, salt: usize) -> (Vec<Block>, usize) {
    let mut off = 0;
    let v = (0..n)
        .map(|i| {
            let len = if count == 0 {
                0
            } else {
                (count + 5 * i + salt) % (count + 2)
            };
            let b = Block::new(off + (i % 2), len);
            off += len + (i % 2);
            b
        })
        .collect();
    (v, off)
}

#[test]
fn gatherv_scatterv() {
    gatherv_scatterv_with(&all_ranks(), &COUNTS);
}

fn gatherv_scatterv_with(ranks: &[usize], counts: &[usize]) {
    for kind in [CollKind::Gatherv, CollKind::Scatterv] {
        for n in ranks.iter().copied() {
            for count in counts.iter().copied() {
                for root in roots(n) {
                    for in_place in [false, true] {
                        let (blocks, total) = v_blocks(n, count, root);
                        let data: Vec<Vec<u8>> = (0..n).map(|r| gen(r, blocks[r].len, 5)).collect();
                        let mut whole = vec![SENTINEL; total];
                        for (b, d) in blocks.iter().zip(&data) {
                            whole[b.off..b.off + b.len].copy_from_slice(d);
                        }
                        let args: Vec<Owned> = (0..n)
                            .map(|r| Owned {
                                root,
                                bytes: blocks[r].len,
                                sb: blocks.clone(),
                                rb: blocks.clone(),
                                in_place: in_place && r == root,
                                ..Default::default()
                            })
                            .collect();
                        let c = ctx(
                            kind,
                            "linear",
                            n,
                            count,
                            &format!("root={root} in_place={in_place}"),
                        );
                        if kind == CollKind::Gatherv {
                            let bufs = (0..n)
                                .map(|r| {
                                    if r != root {
                                        return RankBufs {
                                            send: data[r].clone(),
                                            recv: vec![],
                                        };
                                    }
                                    let mut recv = vec![SENTINEL; total];
                                    if in_place {
                                        let b = blocks[r];
                                        recv[b.off..b.off + b.len].copy_from_slice(&data[r]);
                                        RankBufs { send: vec![], recv }
                                    } else {
                                        RankBufs {
                                            send: data[r].clone(),
                                            recv,
                                        }
                                    }
                                })
                                .collect();
                            let out = run(kind, "linear", n, &args, bufs, None);
                            assert!(out[root].recv == whole, "{c}");
                        } else {
                            let bufs = (0..n)
                                .map(|r| {
                                    let recv = if in_place && r == root {
                                        vec![]
                                    } else {
                                        vec![SENTINEL; blocks[r].len]
                                    };
                                    RankBufs {
                                        send: if r == root { whole.clone() } else { vec![] },
                                        recv,
                                    }
                                })
                                .collect();
                            let out = run(kind, "linear", n, &args, bufs, None);
                            for r in 0..n {
                                if !(in_place && r == root) {
                                    assert!(out[r].recv == data[r], "{c} rank {r}");
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn allgather_allgatherv() {
    allgather_allgatherv_with(&all_ranks(), &COUNTS);
}

fn allgather_allgatherv_with(ranks: &[usize], counts: &[usize]) {
    for kind in [CollKind::Allgather, CollKind::Allgatherv] {
        for algo in algos(kind) {
            for n in ranks.iter().copied() {
                for count in counts.iter().copied() {
                    for in_place in [false, true] {
                        let (blocks, total) = if kind == CollKind::Allgather {
                            (
                                (0..n).map(|i| Block::new(i * count, count)).collect(),
                                n * count,
                            )
                        } else {
                            v_blocks(n, count, 1)
                        };
                        let data: Vec<Vec<u8>> = (0..n).map(|r| gen(r, blocks[r].len, 9)).collect();
                        let mut whole = vec![SENTINEL; total];
                        for (b, d) in blocks.iter().zip(&data) {
                            whole[b.off..b.off + b.len].copy_from_slice(d);
                        }
                        let args: Vec<Owned> = (0..n)
                            .map(|r| Owned {
                                bytes: blocks[r].len,
                                rb: blocks.clone(),
                                in_place,
                                ..Default::default()
                            })
                            .collect();
                        let bufs = (0..n)
                            .map(|r| {
                                let mut recv = vec![SENTINEL; total];
                                if in_place {
                                    let b = blocks[r];
                                    recv[b.off..b.off + b.len].copy_from_slice(&data[r]);
                                    RankBufs { send: vec![], recv }
                                } else {
                                    RankBufs {
                                        send: data[r].clone(),
                                        recv,
                                    }
                                }
                            })
                            .collect();
                        let out = run(kind, algo, n, &args, bufs, None);
                        for r in 0..n {
                            assert!(
                                out[r].recv == whole,
                                "{} rank {r}",
                                ctx(kind, algo, n, count, &format!("in_place={in_place}"))
                            );
                        }
                    }
                }
            }
        }
    }
}

/// Bytes that rank s sends to rank d in the alltoallv tests.
fn a2a_len(s: usize, d: usize, count: usize) -> usize {
    if count == 0 {
        0
    } else {
        (count + 3 * s + d) % (count + 2)
    }
}

#[test]
fn alltoall_all_variants() {
    alltoall_all_variants_with(&all_ranks(), &COUNTS);
}

fn alltoall_all_variants_with(ranks: &[usize], counts: &[usize]) {
    for kind in [CollKind::Alltoall, CollKind::Alltoallv, CollKind::Alltoallw] {
        for algo in algos(kind) {
            for n in ranks.iter().copied() {
                for count in counts.iter().copied() {
                    for in_place in [false, true] {
                        let regular = kind == CollKind::Alltoall;
                        let len = |s: usize, d: usize| {
                            if regular {
                                count
                            } else if in_place {
                                a2a_len(s.min(d), s.max(d), count)
                            } else {
                                a2a_len(s, d, count)
                            }
                        };
                        // layout[r][p]: where rank r keeps the block for/from peer p (gaps for v).
                        let lay = |r: usize, send: bool| -> (Vec<Block>, usize) {
                            let mut off = 0;
                            let v = (0..n)
                                .map(|p| {
                                    let l = if send { len(r, p) } else { len(p, r) };
                                    let gap = if regular { 0 } else { (p + r) % 2 };
                                    let b = Block::new(off + gap, l);
                                    off += l + gap;
                                    b
                                })
                                .collect();
                            (v, off)
                        };
                        let msg = |s: usize, d: usize| gen(s * 64 + d, len(s, d), 13);
                        let mut args = Vec::new();
                        let mut bufs = Vec::new();
                        for r in 0..n {
                            let (sb, stot) = lay(r, true);
                            let (rb, rtot) = lay(r, false);
                            let mut send = vec![SENTINEL; stot];
                            for (p, b) in sb.iter().enumerate() {
                                send[b.off..b.off + b.len].copy_from_slice(&msg(r, p));
                            }
                            if in_place {
                                assert_eq!(sb, rb);
                                bufs.push(RankBufs {
                                    send: vec![],
                                    recv: send,
                                });
                            } else {
                                bufs.push(RankBufs {
                                    send,
                                    recv: vec![SENTINEL; rtot],
                                });
                            }
                            args.push(Owned {
                                bytes: count,
                                sb,
                                rb,
                                in_place,
                                ..Default::default()
                            });
                        }
                        let out = run(kind, algo, n, &args, bufs, None);
                        for r in 0..n {
                            let (rb, rtot) = lay(r, false);
                            let mut expect = vec![SENTINEL; rtot];
                            for (p, b) in rb.iter().enumerate() {
                                expect[b.off..b.off + b.len].copy_from_slice(&msg(p, r));
                            }
                            assert!(
                                out[r].recv == expect,
                                "{} rank {r}",
                                ctx(kind, algo, n, count, &format!("in_place={in_place}"))
                            );
                        }
                    }
                }
            }
        }
    }
}

/// Larger communicators (deeper trees, more halving steps, non-power-of-two folds of 2^5).
#[test]
fn larger_communicators() {
    let (ranks, counts) = ([31, 32, 33], [3, 67]);
    bcast_with(&ranks, &counts);
    for k in [
        CollKind::Reduce,
        CollKind::Allreduce,
        CollKind::Scan,
        CollKind::Exscan,
    ] {
        vector_reduction(k, &ranks, &counts);
    }
    reduce_scatter_kind(CollKind::ReduceScatter, &ranks, &counts);
    gather_scatter_with(&ranks, &counts);
    allgather_allgatherv_with(&ranks, &counts);
    alltoall_all_variants_with(&ranks, &counts);
}

// ---------- schedule properties ----------

#[test]
fn reductions_split_on_element_boundaries() {
    // The simulator asserts this for every Reduce; here also for elements of odd size.
    for n in RANKS {
        for (kind, algo) in [
            (CollKind::Allreduce, "rabenseifner"),
            (CollKind::Allreduce, "ring"),
            (CollKind::Reduce, "rabenseifner"),
            (CollKind::ReduceScatterBlock, "recursive_halving"),
        ] {
            let mut a = CollArgs::new(n - 1, n, 12 * 37);
            a.elem_size = 12;
            let s = build_with(kind, algo, &a).unwrap();
            for st in &s.steps {
                if let Step::Reduce { dst, .. } | Step::ReduceRev { dst, .. } = st {
                    assert_eq!(dst.len % 12, 0, "{} {algo} n={n}: {dst:?}", kind.name());
                }
            }
        }
    }
}

#[test]
fn scalable_message_counts() {
    // log-depth algorithms send O(log n) messages per rank, rings O(n).
    let n = 16;
    let cnt = |kind, algo: &str, bytes| {
        build_with(kind, algo, &CollArgs::new(5, n, bytes))
            .unwrap()
            .sends()
    };
    assert_eq!(cnt(CollKind::Allreduce, "recursive_doubling", 64), 4);
    assert_eq!(cnt(CollKind::Allreduce, "rabenseifner", 4096), 8);
    assert_eq!(cnt(CollKind::Allreduce, "ring", 4096), 30);
    assert_eq!(cnt(CollKind::Allgather, "bruck", 8), 4);
    assert_eq!(cnt(CollKind::Alltoall, "bruck", 8), 4);
    assert!(cnt(CollKind::Bcast, "binomial", 8) <= 4);
}

#[test]
fn extents_match_the_documented_layout() {
    for n in [1, 5, 8] {
        for algo in algos(CollKind::Allreduce) {
            let s = build_with(CollKind::Allreduce, algo, &CollArgs::new(n - 1, n, 400)).unwrap();
            assert_eq!(s.extent(BufId::Recv), 400, "{algo} n={n}");
            assert_eq!(s.extent(BufId::Send), 400, "{algo} n={n}");
            assert!(s.extent(BufId::Tmp) <= s.tmp_len);
        }
        let mut a = CollArgs::new(0, n, 400);
        a.in_place = true;
        let s = build_with(CollKind::Allreduce, "ring", &a).unwrap();
        assert_eq!(s.extent(BufId::Send), 0, "in place never reads Send");
    }
}

#[test]
fn schedule_display() {
    let s = build_with(
        CollKind::Allreduce,
        "recursive_doubling",
        &CollArgs::new(0, 2, 8),
    )
    .unwrap();
    assert_eq!(
        s.to_string(),
        "tmp_len 8\ncopy send[0..8] -> recv[0..8]\nsend 1 recv[0..8]\nrecv 1 tmp[0..8]\nwait\nreduce_rev tmp[0..8] -> recv[0..8]\n"
    );
}

#[test]
fn validation_errors() {
    let blocks = [Block::new(0, 4), Block::new(4, 4)];
    let mut g = CollArgs::new(0, 2, 5);
    g.recv_blocks = &blocks;
    assert_eq!(
        build_with(CollKind::Gatherv, "linear", &g)
            .unwrap_err()
            .class,
        crate::standard::consts::MPI_ERR_TRUNCATE
    );
    g.bytes = 3;
    assert!(build_with(CollKind::Gatherv, "linear", &g).is_ok());
    let a = CollArgs::new(4, 4, 8);
    assert!(
        build_with(CollKind::Allreduce, "ring", &a).is_err(),
        "rank out of range"
    );
    let mut a = CollArgs::new(0, 4, 10);
    a.elem_size = 4;
    assert_eq!(
        build_with(CollKind::Allreduce, "ring", &a)
            .unwrap_err()
            .class,
        crate::standard::consts::MPI_ERR_COUNT
    );
    let mut a = CollArgs::new(0, 4, 8);
    a.commutative = false;
    assert_eq!(
        build_with(CollKind::Allreduce, "ring", &a)
            .unwrap_err()
            .class,
        crate::standard::consts::MPI_ERR_OP
    );
    assert!(build_with(CollKind::Allreduce, "nope", &CollArgs::new(0, 4, 8)).is_err());
    let mut a = CollArgs::new(0, 4, 8);
    a.root = 9;
    assert_eq!(
        build_with(CollKind::Bcast, "binomial", &a)
            .unwrap_err()
            .class,
        crate::standard::consts::MPI_ERR_ROOT
    );
    assert!(
        build_with(CollKind::Allgatherv, "ring", &CollArgs::new(0, 4, 8)).is_err(),
        "missing blocks"
    );
}

// ---------- selection ----------

#[test]
fn default_table_parses_and_covers_every_collective() {
    let rows = select::parse_table(select::DEFAULT_TABLE).unwrap();
    for k in CollKind::ALL {
        assert!(rows.iter().any(|r| r.kind == k), "no row for {}", k.name());
    }
}

#[test]
fn selection_by_size_ranks_and_commutativity() {
    let rows = select::parse_table(select::DEFAULT_TABLE).unwrap();
    let pick = |kind, n, bytes, comm: bool| {
        let mut a = CollArgs::new(0, n, bytes);
        a.commutative = comm;
        select::select_from(&rows, None, kind, &a).name
    };
    assert_eq!(pick(CollKind::Allreduce, 16, 8, true), "recursive_doubling");
    assert_eq!(
        pick(CollKind::Allreduce, 16, 64 << 10, true),
        "rabenseifner"
    );
    assert_eq!(pick(CollKind::Allreduce, 16, 64 << 20, true), "ring");
    assert_eq!(
        pick(CollKind::Allreduce, 16, 64 << 20, false),
        "rabenseifner",
        "ring reorders operands"
    );
    // Across nodes: a large vector goes around a ring, whatever the rank count; small
    // vectors, non-commutative ops and calls inside one node keep their rows.
    let across = |n, bytes, comm: bool, nodes| {
        let mut a = CollArgs::new(0, n, bytes);
        a.commutative = comm;
        a.nodes = nodes;
        select::select_from(&rows, None, CollKind::Allreduce, &a).name
    };
    assert_eq!(across(2, 1 << 20, true, 2), "ring");
    assert_eq!(across(2, 1 << 20, true, 1), "recursive_doubling");
    assert_eq!(across(16, 1 << 20, true, 4), "ring");
    assert_eq!(across(2, 8, true, 2), "recursive_doubling");
    assert_eq!(across(2, 1 << 20, false, 2), "recursive_doubling");
    // Up to 32 KiB between nodes recursive doubling's fewer steps win; inside one node and from
    // 32 KiB on Rabenseifner keeps the mid sizes.
    assert_eq!(across(4, 16 << 10, true, 4), "recursive_doubling");
    assert_eq!(across(16, (32 << 10) - 1, true, 4), "recursive_doubling");
    assert_eq!(across(16, 32 << 10, true, 4), "rabenseifner");
    assert_eq!(across(16, 16 << 10, true, 1), "rabenseifner");
    assert!(select::parse_table("allreduce nodes>1 nodes<=8 ring\n").is_ok());
    assert_eq!(pick(CollKind::Bcast, 16, 8, true), "binomial");
    assert_eq!(
        pick(CollKind::Bcast, 16, 1 << 20, true),
        "scatter_ring_allgather"
    );
    assert_eq!(
        pick(CollKind::Bcast, 16, 64 << 10, true),
        "scatter_recursive_doubling_allgather"
    );
    assert_eq!(
        pick(CollKind::Bcast, 12, 64 << 10, true),
        "scatter_ring_allgather"
    );
    assert_eq!(pick(CollKind::Allgather, 16, 8, true), "recursive_doubling");
    assert_eq!(pick(CollKind::Allgather, 12, 8, true), "bruck");
    assert_eq!(pick(CollKind::Alltoall, 16, 8, true), "bruck");
    assert_eq!(pick(CollKind::Alltoall, 16, 1 << 20, true), "pairwise");
    assert_eq!(
        pick(CollKind::ReduceScatterBlock, 16, 8, false),
        "recursive_halving_ordered"
    );
    assert_eq!(
        pick(CollKind::ReduceScatterBlock, 16, 1 << 20, false),
        "pairwise"
    );
    assert_eq!(
        pick(CollKind::ReduceScatterBlock, 16, 8, true),
        "recursive_halving"
    );
    // Every selection for every size is buildable and never reorders a non-commutative op.
    for k in CollKind::ALL.iter().filter(|k| k.is_reduction()) {
        for bytes in [0, 8, 1 << 12, 1 << 20, 1 << 26] {
            for n in [1, 2, 3, 8, 100] {
                let mut a = CollArgs::new(0, n, bytes);
                a.commutative = false;
                assert!(select::select_from(&rows, None, *k, &a).ordered);
            }
        }
    }
}

#[test]
fn forcing_and_custom_tables() {
    let rows = select::parse_table("allreduce nranks>=4 bytes<=1k ring\nallreduce rabenseifner\n")
        .unwrap();
    let a = CollArgs::new(0, 8, 512);
    assert_eq!(
        select::select_from(&rows, None, CollKind::Allreduce, &a).name,
        "ring"
    );
    assert_eq!(
        select::select_from(&rows, None, CollKind::Allreduce, &CollArgs::new(0, 2, 512)).name,
        "rabenseifner"
    );
    assert_eq!(
        select::select_from(&rows, Some("recursive_doubling"), CollKind::Allreduce, &a).name,
        "recursive_doubling"
    );
    assert_eq!(
        select::select_from(&rows, Some("bogus"), CollKind::Allreduce, &a).name,
        "ring"
    );
    let mut nc = a;
    nc.commutative = false;
    assert_eq!(
        select::select_from(&rows, Some("ring"), CollKind::Allreduce, &nc).name,
        "rabenseifner"
    );
    // A collective missing from the table falls back to its first algorithm.
    assert_eq!(
        select::select_from(&rows, None, CollKind::Bcast, &a).name,
        "binomial"
    );
    for bad in [
        "allreduce",
        "allreduce bytes<1q ring",
        "frobnicate ring",
        "allreduce bytes<8 bogus",
        "allreduce size<3 ring",
    ] {
        assert!(
            select::parse_table(bad).is_err(),
            "{bad:?} should not parse"
        );
    }
    assert!(select::parse_table(
        "# only a comment\n\n  alltoall pof2 !pof2 bytes>=1m pairwise # trailing\n"
    )
    .is_ok());
}

#[test]
fn build_uses_the_table() {
    let (name, s) = build(CollKind::Allreduce, &CollArgs::new(0, 4, 16)).unwrap();
    assert!(algorithm(CollKind::Allreduce, name).is_some());
    assert!(s.sends() > 0);
}

// ---------- simulator self-checks ----------

#[test]
#[should_panic(expected = "deadlock")]
fn sim_detects_deadlock() {
    let s = Schedule {
        steps: vec![
            Step::Recv {
                peer: 1,
                dst: Region::recv(0, 1),
            },
            Step::Wait,
        ],
        tmp_len: 0,
    };
    let t = Schedule {
        steps: vec![
            Step::Recv {
                peer: 0,
                dst: Region::recv(0, 1),
            },
            Step::Wait,
        ],
        tmp_len: 0,
    };
    let mut bufs = vec![
        RankBufs {
            send: vec![],
            recv: vec![0]
        };
        2
    ];
    simulate(&[s, t], &mut bufs, 1, &|l: &[u8], _: &[u8]| l.to_vec());
}

#[test]
#[should_panic(expected = "deadlock")]
fn sim_synchronous_sends_expose_send_send_cycles() {
    // Both ranks send, wait, then receive: fine with buffering, a deadlock with rendezvous.
    let s = |peer| Schedule {
        steps: vec![
            Step::Send {
                peer,
                src: Region::recv(0, 1),
            },
            Step::Wait,
            Step::Recv {
                peer,
                dst: Region::recv(1, 1),
            },
            Step::Wait,
        ],
        tmp_len: 0,
    };
    let scheds = [s(1), s(0)];
    let mut bufs = vec![
        RankBufs {
            send: vec![],
            recv: vec![1, 0]
        };
        2
    ];
    let id = |l: &[u8], _: &[u8]| l.to_vec();
    super::sim::simulate_mode(&scheds, &mut bufs, 1, &id, super::sim::SendMode::Buffered);
    assert_eq!(bufs[0].recv, [1, 1]);
    simulate(&scheds, &mut bufs, 1, &id);
}

#[test]
#[should_panic(expected = "unconsumed")]
fn sim_detects_unconsumed_messages() {
    let s = Schedule {
        steps: vec![
            Step::Send {
                peer: 1,
                src: Region::recv(0, 1),
            },
            Step::Wait,
        ],
        tmp_len: 0,
    };
    let mut bufs = vec![
        RankBufs {
            send: vec![],
            recv: vec![0]
        };
        2
    ];
    let id = |l: &[u8], _: &[u8]| l.to_vec();
    let scheds = [s, Schedule::default()];
    super::sim::simulate_mode(&scheds, &mut bufs, 1, &id, super::sim::SendMode::Buffered);
}

#[test]
#[should_panic(expected = "pending receive")]
fn sim_detects_use_before_wait() {
    let s = Schedule {
        steps: vec![
            Step::Send {
                peer: 1,
                src: Region::recv(0, 1),
            },
            Step::Wait,
        ],
        tmp_len: 0,
    };
    let t = Schedule {
        steps: vec![
            Step::Recv {
                peer: 0,
                dst: Region::recv(0, 1),
            },
            Step::Copy {
                src: Region::recv(0, 1),
                dst: Region::recv(1, 1),
            },
            Step::Wait,
        ],
        tmp_len: 0,
    };
    let mut bufs = vec![
        RankBufs {
            send: vec![],
            recv: vec![0, 0]
        };
        2
    ];
    simulate(&[s, t], &mut bufs, 1, &|l: &[u8], _: &[u8]| l.to_vec());
}

#[test]
#[should_panic(expected = "expects")]
fn sim_detects_length_mismatch() {
    let s = Schedule {
        steps: vec![
            Step::Send {
                peer: 1,
                src: Region::recv(0, 2),
            },
            Step::Wait,
        ],
        tmp_len: 0,
    };
    let t = Schedule {
        steps: vec![
            Step::Recv {
                peer: 0,
                dst: Region::recv(0, 1),
            },
            Step::Wait,
        ],
        tmp_len: 0,
    };
    let mut bufs = vec![
        RankBufs {
            send: vec![],
            recv: vec![0, 0]
        };
        2
    ];
    simulate(&[s, t], &mut bufs, 1, &|l: &[u8], _: &[u8]| l.to_vec());
}
