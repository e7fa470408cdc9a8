//! The GPU collective plans, run for every rank on host memory by `simulate` (which also
//! rejects plans whose concurrent steps race), against a direct reference.

use super::*;

fn sum_i32(a: &[u8], b: &[u8]) -> Vec<u8> {
    let x = i32::from_le_bytes(a.try_into().unwrap());
    let y = i32::from_le_bytes(b.try_into().unwrap());
    x.wrapping_add(y).to_le_bytes().to_vec()
}

fn pattern(rank: usize, len: usize, salt: u8) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u8)
                .wrapping_mul(7)
                .wrapping_add(rank as u8 * 31)
                .wrapping_add(salt)
        })
        .collect()
}

fn ints(b: &[u8]) -> Vec<i32> {
    b.chunks(4)
        .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Expected receive buffers of every rank.
fn reference(s: &Shape, send: &[Vec<u8>], recv: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let n = s.nranks;
    let b = s.bytes;
    // In place applies to every rank, except for reduce, where only the root has it.
    let input = |p: usize| {
        if s.in_place && (s.kind != CollKind::Reduce || p == s.root) {
            recv[p].clone()
        } else {
            send[p].clone()
        }
    };
    let reduce_all = |off: usize, len: usize| -> Vec<u8> {
        let mut acc = input(0)[off..off + len].to_vec();
        for p in 1..n {
            let v = input(p);
            acc = acc
                .chunks(4)
                .zip(v[off..off + len].chunks(4))
                .flat_map(|(a, b)| sum_i32(a, b))
                .collect();
        }
        acc
    };
    (0..n)
        .map(|me| {
            let mut out = recv[me].clone();
            match s.kind {
                CollKind::Allreduce => out[..b].copy_from_slice(&reduce_all(0, b)),
                CollKind::Reduce => {
                    if me == s.root {
                        out[..b].copy_from_slice(&reduce_all(0, b))
                    }
                }
                CollKind::ReduceScatterBlock => out[..b].copy_from_slice(&reduce_all(me * b, b)),
                CollKind::Bcast => out[..b].copy_from_slice(&recv[s.root][..b]),
                CollKind::Allgather => {
                    for p in 0..n {
                        let blk = if s.in_place {
                            recv[p][p * b..(p + 1) * b].to_vec()
                        } else {
                            send[p][..b].to_vec()
                        };
                        out[p * b..(p + 1) * b].copy_from_slice(&blk);
                    }
                }
                CollKind::Alltoall => {
                    for p in 0..n {
                        out[p * b..(p + 1) * b].copy_from_slice(&send[p][me * b..(me + 1) * b]);
                    }
                }
                k => panic!("no reference for {k:?}"),
            }
            out
        })
        .collect()
}

fn buffers(s: &Shape) -> (usize, usize) {
    let (n, b) = (s.nranks, s.bytes);
    match s.kind {
        CollKind::Allreduce | CollKind::Reduce | CollKind::Bcast => (b, b),
        CollKind::ReduceScatterBlock => (n * b, if s.in_place { n * b } else { b }),
        CollKind::Allgather => (b, n * b),
        CollKind::Alltoall => (n * b, n * b),
        _ => unreachable!(),
    }
}

const CASES: [(CollKind, Algo); 21] = [
    (CollKind::Allreduce, Algo::TwoShotFused),
    (CollKind::Allreduce, Algo::TwoShotRingPush),
    (CollKind::Allgather, Algo::RingPushCe),
    (CollKind::Alltoall, Algo::Ring),
    (CollKind::Allreduce, Algo::TwoShotPullCe),
    (CollKind::Allreduce, Algo::TwoShotRing),
    (CollKind::Allreduce, Algo::TwoShotRingCe),
    (CollKind::Alltoall, Algo::RingCe),
    (CollKind::Alltoall, Algo::RingPushCe),
    (CollKind::Alltoall, Algo::PullCe),
    (CollKind::Allreduce, Algo::OneShot),
    (CollKind::Allreduce, Algo::TwoShot),
    (CollKind::Allreduce, Algo::TwoShotPush),
    (CollKind::Allreduce, Algo::TwoShotCe),
    (CollKind::Alltoall, Algo::Direct),
    (CollKind::Alltoall, Algo::DirectCe),
    (CollKind::Alltoall, Algo::Pull),
    (CollKind::Allgather, Algo::Direct),
    (CollKind::Bcast, Algo::Pull),
    (CollKind::Reduce, Algo::Direct),
    (CollKind::ReduceScatterBlock, Algo::Direct),
];

#[test]
fn every_plan_matches_the_reference_without_races() {
    let mut ran = 0;
    for (kind, algo) in CASES {
        for n in 1..=8 {
            // 3360 = 4 x 840: equal 16-byte aligned chunks for every n (two_shot_ring_push).
            for elems in [1usize, 3, 4, 5, 17, 64, 1001, 3360] {
                for in_place in [false, true] {
                    for root in [0, n - 1] {
                        let shape = Shape {
                            kind,
                            nranks: n,
                            rank: 0,
                            root,
                            bytes: elems * 4,
                            elem: 4,
                            in_place,
                        };
                        let (sl, rl) = buffers(&shape);
                        let mut send: Vec<Vec<u8>> = (0..n).map(|p| pattern(p, sl, 1)).collect();
                        let mut recv: Vec<Vec<u8>> = (0..n).map(|p| pattern(p, rl, 101)).collect();
                        let want = reference(&shape, &send, &recv);
                        let r = simulate(shape, algo, &mut send, &mut recv, &sum_i32);
                        if r.is_none() {
                            // Only the documented exclusions may refuse.
                            let unequal =
                                (1..n).any(|p| chunk(elems, n, p, 4).1 != chunk(elems, n, 0, 4).1);
                            let ring_push =
                                (kind, algo) == (CollKind::Allreduce, Algo::TwoShotRingPush);
                            assert!(
                                ring_push && (in_place || unequal)
                                    || in_place
                                        && matches!(
                                            (kind, algo),
                                            (CollKind::Allreduce, Algo::OneShot)
                                                | (CollKind::Alltoall, _)
                                                | (CollKind::ReduceScatterBlock, _)
                                        ),
                                "{kind:?} {algo:?} refused n={n} in_place={in_place}"
                            );
                            continue;
                        }
                        for p in 0..n {
                            assert_eq!(
                                ints(&recv[p]),
                                ints(&want[p]),
                                "{kind:?} {algo:?} n={n} elems={elems} in_place={in_place} root={root} rank {p}"
                            );
                        }
                        ran += 1;
                    }
                }
            }
        }
    }
    assert!(ran > 500, "{ran} cases");
}

/// The ring variants' copies: at every position k, no rank is read (pull) or written (push)
/// by two ranks, so each link direction carries one copy at a time while the ranks keep pace.
#[test]
fn ring_copies_form_a_permutation_at_every_position() {
    for (kind, algo) in [
        (CollKind::Alltoall, Algo::RingCe),
        (CollKind::Alltoall, Algo::RingPushCe),
        (CollKind::Allreduce, Algo::TwoShotRingCe),
        (CollKind::Allreduce, Algo::TwoShotRing),
        (CollKind::Allreduce, Algo::TwoShotRingPush),
        (CollKind::Allgather, Algo::RingPushCe),
    ] {
        for n in 2..=8 {
            let rings: Vec<Vec<(Ref, Ref, usize)>> = (0..n)
                .map(|rank| {
                    let shape = Shape {
                        kind,
                        nranks: n,
                        rank,
                        root: 0,
                        bytes: 64 * n,
                        elem: 4,
                        in_place: false,
                    };
                    plan(&shape, algo)
                        .unwrap()
                        .into_iter()
                        .find_map(|s| match s {
                            Step::CopyCeRing(v) => Some(v),
                            _ => None,
                        })
                        .expect("a ring step")
                })
                .collect();
            for (rank, r) in rings.iter().enumerate() {
                assert_eq!(r.len(), n - 1, "{algo:?} n={n}: one copy per peer");
                assert!(r
                    .iter()
                    .all(|(d, s, _)| (d.rank == rank) != (s.rank == rank)));
            }
            for k in 0..n - 1 {
                // The remote end of copy k of every rank.
                let mut remote: Vec<usize> = rings
                    .iter()
                    .enumerate()
                    .map(|(rank, r)| {
                        let (d, s, _) = r[k];
                        if d.rank == rank {
                            s.rank
                        } else {
                            d.rank
                        }
                    })
                    .collect();
                remote.sort();
                assert_eq!(
                    remote,
                    (0..n).collect::<Vec<_>>(),
                    "{algo:?} n={n} copy {k}"
                );
            }
        }
    }
}

#[test]
fn the_race_check_catches_one_shot_in_place() {
    // The plan refuses in place; a plan that did not would race: simulate the would-be plan
    // by hand (rank 0 writes its buffer while rank 1 reads it).
    let shape = Shape {
        kind: CollKind::Allreduce,
        nranks: 2,
        rank: 0,
        root: 0,
        bytes: 16,
        elem: 4,
        in_place: true,
    };
    assert!(plan(&shape, Algo::OneShot).is_none());
    // Two-shot's phase 2 reading a chunk the owner writes in the same phase must be caught:
    // build such a plan by removing the barrier from two-shot.
    let steps: Vec<Vec<Step>> = (0..2)
        .map(|rank| {
            plan(&Shape { rank, ..shape }, Algo::TwoShot)
                .unwrap()
                .into_iter()
                .filter(|s| *s != Step::Barrier)
                .collect()
        })
        .collect();
    let phase: Vec<&[Step]> = steps.iter().map(|p| p.as_slice()).collect();
    assert!(
        race(&phase, 4).is_some(),
        "without its barrier two-shot races"
    );
    // One rank's main-stream steps are ordered, but a CopyCe runs beside them.
    let me = |off| r(0, Buf::Recv, off);
    let red = Step::Reduce {
        dst: me(0),
        also: Vec::new(),
        srcs: vec![me(0)],
        elems: 4,
    };
    let ordered = [red.clone(), Step::Copy(vec![(me(0), me(16), 16)])];
    assert!(race(&[&ordered], 4).is_none());
    let beside = [red, Step::CopyCe(vec![(me(0), me(16), 16)])];
    assert!(race(&[&beside], 4).is_some(), "a CopyCe runs beside");
}

#[test]
fn chunks_tile_the_vector_aligned() {
    for elems in [0usize, 1, 3, 4, 5, 100, 1 << 20, (1 << 20) + 3] {
        for n in 1..=8 {
            let mut next = 0;
            for i in 0..n {
                let (s, l) = chunk(elems, n, i, 4);
                assert_eq!(s, next.min(elems));
                if l > 0 && s + l < elems {
                    assert_eq!(l % 4, 0);
                }
                assert!(s % 4 == 0 || l == 0);
                next = s + l;
            }
            assert_eq!(next, elems);
        }
    }
}

#[test]
fn table_parses_and_selects_by_size_and_ranks() {
    let rows = parse_table(DEFAULT_TABLE).unwrap();
    use CollKind as K;
    for (kind, n, bytes, want) in [
        (K::Allreduce, 4, 8, Algo::OneShot),
        (K::Allreduce, 4, 128 << 10, Algo::OneShot),
        (K::Allreduce, 4, 256 << 10, Algo::TwoShotFused),
        (K::Allreduce, 4, 32 << 20, Algo::TwoShotFused),
        (K::Allreduce, 4, 64 << 20, Algo::TwoShotRing),
        (K::Allreduce, 4, 128 << 20, Algo::TwoShotRingPush),
        (K::Allreduce, 4, 512 << 20, Algo::TwoShotRingPush),
        (K::Allreduce, 16, 8, Algo::Staged),
        (K::Alltoall, 4, 16, Algo::Direct),
        (K::Alltoall, 4, 128 << 20, Algo::RingPushCe),
        (K::Allgather, 4, 16 << 20, Algo::RingPushCe),
        (K::Bcast, 4, 16, Algo::Pull),
        (K::Scan, 4, 16, Algo::Staged),
    ] {
        assert_eq!(
            select_from(&rows, kind, n, bytes),
            want,
            "{kind:?} n={n} bytes={bytes}"
        );
    }
    assert!(
        parse_table("allgather ring_ce").is_err(),
        "ring_ce serves alltoall only"
    );
    assert!(
        parse_table("allreduce pull").is_err(),
        "pull does not serve allreduce"
    );
    // In place, one-shot declines and the next row serves; a `staged` row stops the search.
    let shape = |bytes, in_place| Shape {
        kind: CollKind::Allreduce,
        nranks: 4,
        rank: 1,
        root: 0,
        bytes,
        elem: 4,
        in_place,
    };
    assert_eq!(
        plan_from(&rows, &shape(64 << 10, false)).unwrap().0,
        Algo::OneShot
    );
    assert_eq!(
        plan_from(&rows, &shape(64 << 10, true)).unwrap().0,
        Algo::TwoShotFused
    );
    // Large: the copy-engine two-shot, except in place or with unequal chunks (the ring).
    assert_eq!(
        plan_from(&rows, &shape(512 << 20, false)).unwrap().0,
        Algo::TwoShotRingPush
    );
    assert_eq!(
        plan_from(&rows, &shape(512 << 20, true)).unwrap().0,
        Algo::TwoShotRing
    );
    assert_eq!(
        plan_from(&rows, &shape((512 << 20) + 4, false)).unwrap().0,
        Algo::TwoShotRing
    );
    let only_one = parse_table("allreduce one_shot\nallreduce staged\nallreduce two_shot").unwrap();
    assert!(plan_from(&only_one, &shape(64, true)).is_none());
    assert!(parse_table("allreduce bytes<x one_shot").is_err());
    assert!(parse_table("nosuch one_shot").is_err());
}
