//! The engine over network frames whose connections open on first use
//! (`transport::net::links`): three ranks, each on a node of its own (one thread each, the TCP
//! backend on loopback).

use super::*;
use crate::standard::consts::MPI_ANY_SOURCE;
use crate::transport::net::lazy_tests::loopback_frames;
use std::time::{Duration, Instant};

const LIMIT: usize = 4096;

fn engines(n: usize) -> Vec<Engine> {
    engines_with(n, None)
}

/// `n` engines whose network frames offer bulk transfers from `bulk_min` bytes on.
fn engines_with(n: usize, bulk_min: Option<usize>) -> Vec<Engine> {
    loopback_frames(n, 2, Duration::from_secs(5), b"engine-lazy")
        .into_iter()
        .enumerate()
        .map(|(me, mut frames)| {
            frames.set_bulk_min(bulk_min);
            Engine::with_config(
                Box::new(frames),
                me,
                n,
                EngineConfig {
                    eager_limit: LIMIT,
                    cma_min: None,
                    push_min: usize::MAX,
                    share: false,
                },
            )
        })
        .collect()
}

fn wait(e: &mut Engine, r: ReqId) -> Status {
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(s) = e.test(r) {
            return s;
        }
        assert!(Instant::now() < end, "request never completed");
    }
}

fn data(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
        .collect()
}

/// Rank 2 posts two `MPI_ANY_SOURCE` receives before anyone talked to it; rank 0 sends it a
/// rendezvous message (its reply, the CTS, makes rank 2 dial rank 0) and rank 1 an eager one.
/// Ranks 0 and 1 never talk; every engine is then dropped (as at `MPI_Finalize`) at once, and
/// no close waits for a peer it never connected to.
#[test]
fn any_source_hears_ranks_that_were_never_connected() {
    let big = LIMIT * 20;
    let es = engines(3);
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for (me, mut e) in es.into_iter().enumerate() {
            s.spawn(move || {
                match me {
                    2 => {
                        let mut a = vec![0u8; big];
                        let mut b = vec![0u8; big];
                        // SAFETY: both buffers outlive the waits below.
                        let ra = unsafe { e.irecv(a.as_mut_ptr(), big, 7, MPI_ANY_SOURCE, 3) };
                        let rb = unsafe { e.irecv(b.as_mut_ptr(), big, 7, MPI_ANY_SOURCE, 3) };
                        let sa = wait(&mut e, ra.unwrap());
                        let sb = wait(&mut e, rb.unwrap());
                        let mut got = [(sa.source, sa.bytes, a), (sb.source, sb.bytes, b)];
                        got.sort_by_key(|g| g.0);
                        assert_eq!((got[0].0, got[0].1), (0, big));
                        assert_eq!((got[1].0, got[1].1), (1, 100));
                        assert!(got[0].2 == data(big, 0), "rank 0's data");
                        assert!(got[1].2[..100] == data(100, 1), "rank 1's data");
                    }
                    _ => {
                        let buf = data(if me == 0 { big } else { 100 }, me as u8);
                        let a = SendArgs {
                            buf: buf.as_ptr(),
                            len: buf.len(),
                            dst_world: 2,
                            ctx: 7,
                            src_rank: me as i32,
                            tag: 3,
                            sync: false,
                            dev: None,
                            note: None,
                        };
                        // SAFETY: `buf` outlives the wait.
                        let r = unsafe { e.isend(a).unwrap() };
                        assert_eq!(wait(&mut e, r).bytes, buf.len());
                    }
                }
                assert_eq!(e.live_requests(), 0);
                drop(e);
            });
        }
    });
    let t = t0.elapsed();
    assert!(
        t < Duration::from_secs(8),
        "the job took {t:?} (a close waited?)"
    );
}

/// A message of `len` bytes whose first 8 bytes are its sequence number `seq` and the rest a
/// pattern of the sender `from`.
fn numbered(len: usize, from: usize, seq: u64) -> Vec<u8> {
    let mut v = data(len, from as u8 ^ seq as u8);
    v[..8].copy_from_slice(&seq.to_le_bytes());
    v
}

fn send_args(buf: &[u8], dst: usize, me: usize, tag: i32) -> SendArgs {
    SendArgs {
        buf: buf.as_ptr(),
        len: buf.len(),
        dst_world: dst,
        ctx: 9,
        src_rank: me as i32,
        tag,
        sync: false,
        dev: None,
        note: None,
    }
}

/// Large messages between ranks on different nodes move as bulk transfers (many in flight,
/// from a reused buffer, to `MPI_ANY_SOURCE` receives, truncated), with MPI's matching: each
/// sender's messages arrive in order, a truncated receive gets the bytes that fit and
/// `MPI_ERR_TRUNCATE`, and messages below the threshold still go as frames.
#[test]
fn large_messages_between_nodes_move_as_bulk_transfers() {
    const MIN: usize = 256 << 10;
    const N: u64 = 12;
    const REUSED: usize = 8;
    let size = |from: usize, seq: u64| MIN + (seq as usize * 97_003 + from * 13) % (2 << 20);
    let es = engines_with(3, Some(MIN));
    std::thread::scope(|s| {
        for (me, mut e) in es.into_iter().enumerate() {
            s.spawn(move || {
                if me == 2 {
                    let cap = MIN + (2 << 20);
                    let mut bufs: Vec<Vec<u8>> = (0..2 * N).map(|_| vec![0u8; cap]).collect();
                    // SAFETY (every receive below): the buffers outlive the waits.
                    let rs: Vec<ReqId> = bufs
                        .iter_mut()
                        .map(|b| {
                            unsafe { e.irecv(b.as_mut_ptr(), cap, 9, MPI_ANY_SOURCE, 5) }.unwrap()
                        })
                        .collect();
                    let mut seen = [0u64; 2];
                    for (r, b) in rs.into_iter().zip(&bufs) {
                        let st = wait(&mut e, r);
                        let from = st.source as usize;
                        let seq = u64::from_le_bytes(b[..8].try_into().unwrap());
                        assert_eq!(seq, seen[from], "rank {from}'s messages in order");
                        seen[from] += 1;
                        assert_eq!(st.bytes, size(from, seq));
                        assert!(
                            b[..st.bytes] == numbered(st.bytes, from, seq),
                            "bytes of {from}/{seq}"
                        );
                    }
                    // Rank 0's sends of one reused buffer.
                    let mut r = vec![0u8; 3 << 20];
                    for _ in 0..REUSED {
                        let q = unsafe { e.irecv(r.as_mut_ptr(), r.len(), 9, 0, 6) }.unwrap();
                        let st = wait(&mut e, q);
                        assert_eq!(st.bytes, 3 << 20);
                        assert!(r == data(3 << 20, 66), "the reused buffer's bytes");
                    }
                    // Truncated: 1 MiB into 512 KiB.
                    let mut t = vec![0u8; 512 << 10];
                    let q = unsafe { e.irecv(t.as_mut_ptr(), t.len(), 9, 1, 7) }.unwrap();
                    let st = wait(&mut e, q);
                    assert_eq!((st.error, st.bytes), (MPI_ERR_TRUNCATE, 512 << 10));
                    assert!(
                        t[..] == data(1 << 20, 77)[..512 << 10],
                        "the bytes that fit"
                    );
                    // Below the threshold: frames.
                    let mut small = vec![0u8; MIN - 1];
                    let q = unsafe { e.irecv(small.as_mut_ptr(), small.len(), 9, 1, 8) }.unwrap();
                    assert_eq!(wait(&mut e, q).bytes, MIN - 1);
                    assert!(small == data(MIN - 1, 88));
                    assert_eq!(e.bulk_transfers(), 2 * N + REUSED as u64 + 1);
                } else {
                    let msgs: Vec<Vec<u8>> = (0..N).map(|q| numbered(size(me, q), me, q)).collect();
                    // SAFETY (every send below): the buffers outlive the waits.
                    let mut rs: Vec<ReqId> = msgs
                        .iter()
                        .map(|m| unsafe { e.isend(send_args(m, 2, me, 5)) }.unwrap())
                        .collect();
                    let reused = data(3 << 20, 66);
                    let trunc = data(1 << 20, 77);
                    let small = data(MIN - 1, 88);
                    if me == 0 {
                        for _ in 0..REUSED {
                            rs.push(unsafe { e.isend(send_args(&reused, 2, me, 6)) }.unwrap());
                        }
                    } else {
                        rs.push(unsafe { e.isend(send_args(&trunc, 2, me, 7)) }.unwrap());
                        rs.push(unsafe { e.isend(send_args(&small, 2, me, 8)) }.unwrap());
                    }
                    for r in rs {
                        assert_eq!(wait(&mut e, r).error, MPI_SUCCESS);
                    }
                    let bulk = if me == 0 { N + REUSED as u64 } else { N + 1 };
                    assert_eq!(e.bulk_transfers(), bulk);
                }
                assert_eq!(e.live_requests(), 0);
                drop(e);
            });
        }
    });
}

/// A collective schedule given up while a bulk transfer writes into its receive buffer (the
/// call's peer ran something else and sent what the schedule had matched) returns only once
/// the transfer has ended: its caller may free the buffer as soon as the call returns.
#[test]
fn a_given_up_schedule_returns_after_its_bulk_transfer_ended() {
    use crate::coll::schedule::{BufId, Region, Schedule, Step};
    const MIN: usize = 64 << 10;
    const LEN: usize = 48 << 20;
    let es = engines_with(2, Some(MIN));
    std::thread::scope(|s| {
        for (me, mut e) in es.into_iter().enumerate() {
            s.spawn(move || {
                if me == 0 {
                    let d = data(LEN, 42);
                    let a = SendArgs {
                        ctx: 1,
                        tag: -10,
                        ..send_args(&d, 1, 0, 0)
                    };
                    // SAFETY: `d` outlives the wait.
                    let r = unsafe { e.isend(a) }.unwrap();
                    assert_eq!(wait(&mut e, r).error, MPI_SUCCESS);
                } else {
                    let mut out = vec![0u8; LEN];
                    let sched = Schedule {
                        steps: vec![
                            Step::Recv {
                                peer: 0,
                                dst: Region::new(BufId::Recv, 0, LEN),
                            },
                            Step::Wait,
                        ],
                        tmp_len: 0,
                    };
                    // SAFETY: `out` outlives the executor; the schedule sends nothing.
                    let mut x = unsafe {
                        coll::CollExec::new(
                            sched,
                            std::ptr::null(),
                            out.as_mut_ptr(),
                            1,
                            -10,
                            std::sync::Arc::from(vec![0usize, 1]),
                            1,
                            Box::new(|_: &[u8], _: &mut [u8]| Ok(())),
                        )
                    };
                    // Until the receive has matched and its bulk transfer is under way.
                    let end = Instant::now() + Duration::from_secs(30);
                    let bulk = |e: &Engine| {
                        e.st.reqs.ids().into_iter().any(|id| {
                            matches!(e.st.reqs.get(id),
                                Some(Req { kind: ReqKind::Recv(rs), done: false, .. }) if rs.bulk)
                        })
                    };
                    while !bulk(&e) {
                        assert!(!x.advance(&mut e).unwrap(), "ended before it was given up");
                        assert!(Instant::now() < end, "no bulk transfer started");
                    }
                    x.abandon(&mut e);
                    assert_eq!(
                        e.live_requests(),
                        0,
                        "a transfer outlived the given-up call"
                    );
                    assert!(
                        out == data(LEN, 42),
                        "every byte was written before the return"
                    );
                    assert_eq!(e.bulk_transfers(), 1);
                }
                drop(e);
            });
        }
    });
}

/// With bulk transfers off (`GPUMPI_NET_BULK_MIN=off`), large messages between nodes are
/// streamed as frames and arrive the same.
#[test]
fn without_bulk_transfers_large_messages_stream_as_frames() {
    let es = engines_with(2, None);
    std::thread::scope(|s| {
        for (me, mut e) in es.into_iter().enumerate() {
            s.spawn(move || {
                let m = data(3 << 20, 3);
                if me == 0 {
                    // SAFETY: the buffer outlives the wait.
                    let r = unsafe { e.isend(send_args(&m, 1, 0, 1)) }.unwrap();
                    wait(&mut e, r);
                } else {
                    let mut b = vec![0u8; m.len()];
                    // SAFETY: as above.
                    let r = unsafe { e.irecv(b.as_mut_ptr(), b.len(), 9, 0, 1) }.unwrap();
                    assert_eq!(wait(&mut e, r).bytes, m.len());
                    assert!(b == m);
                }
                assert_eq!(e.bulk_transfers(), 0);
                drop(e);
            });
        }
    });
}

/// Up to an off-node peer's bulk threshold, at most `OFF_NODE_EAGER_MAX` (that many without
/// bulk transfers), messages go eagerly: a standard send completes before its receive is
/// posted (its data waits at the receiver, unexpected) and a synchronous one only after; from
/// the threshold on, or above `OFF_NODE_EAGER_MAX`, a send waits for its receiver.
#[test]
fn below_the_bulk_threshold_messages_to_another_node_go_eagerly() {
    use std::sync::atomic::{AtomicBool, Ordering};
    // (bulk threshold, sizes sent eagerly, sizes that wait for the receiver)
    let cases: [(Option<usize>, &[usize], &[usize]); 3] = [
        (
            Some(64 << 10),
            &[LIMIT + 1, 32 << 10, (64 << 10) - 1],
            &[64 << 10],
        ),
        (
            Some(1 << 20),
            &[OFF_NODE_EAGER_MAX],
            &[OFF_NODE_EAGER_MAX + 1],
        ),
        (
            None,
            &[LIMIT + 1, OFF_NODE_EAGER_MAX],
            &[OFF_NODE_EAGER_MAX + 1, 1 << 20],
        ),
    ];
    for (min, eager, waits) in cases {
        let es = engines_with(2, min);
        let sent = AtomicBool::new(false);
        let sent = &sent;
        std::thread::scope(|s| {
            for (me, mut e) in es.into_iter().enumerate() {
                s.spawn(move || {
                    let sizes: Vec<usize> = eager.iter().chain(waits).copied().collect();
                    let msgs: Vec<Vec<u8>> = sizes.iter().map(|&n| data(n, n as u8)).collect();
                    if me == 0 {
                        // SAFETY (every send below): the buffers outlive the waits.
                        let early: Vec<ReqId> = msgs[..eager.len()]
                            .iter()
                            .map(|m| unsafe { e.isend(send_args(m, 1, 0, 1)) }.unwrap())
                            .collect();
                        for r in early {
                            assert_eq!(wait(&mut e, r).error, MPI_SUCCESS);
                        }
                        let mut sync = send_args(&msgs[eager.len() - 1], 1, 0, 2);
                        sync.sync = true;
                        let mut late: Vec<ReqId> = vec![unsafe { e.isend(sync) }.unwrap()];
                        late.extend(
                            msgs[eager.len()..]
                                .iter()
                                .map(|m| unsafe { e.isend(send_args(m, 1, 0, 3)) }.unwrap()),
                        );
                        // The receiver posts nothing before `sent`: none of these can end.
                        for _ in 0..2000 {
                            for &r in &late {
                                assert!(
                                    e.test(r).is_none(),
                                    "{min:?}: a send completed before its receive was posted"
                                );
                            }
                        }
                        sent.store(true, Ordering::Release);
                        for r in late {
                            assert_eq!(wait(&mut e, r).error, MPI_SUCCESS);
                        }
                    } else {
                        let end = Instant::now() + Duration::from_secs(60);
                        while !sent.load(Ordering::Acquire) {
                            assert!(Instant::now() < end, "{min:?}: the sender never got on");
                            e.progress();
                        }
                        let mut sync_buf = vec![0u8; msgs[eager.len() - 1].len()];
                        let mut bufs: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0u8; n]).collect();
                        // SAFETY (every receive below): the buffers outlive the waits.
                        let mut rs: Vec<ReqId> = bufs
                            .iter_mut()
                            .enumerate()
                            .map(|(i, b)| {
                                let tag = if i < eager.len() { 1 } else { 3 };
                                unsafe { e.irecv(b.as_mut_ptr(), b.len(), 9, 0, tag) }.unwrap()
                            })
                            .collect();
                        rs.push(
                            unsafe { e.irecv(sync_buf.as_mut_ptr(), sync_buf.len(), 9, 0, 2) }
                                .unwrap(),
                        );
                        for r in rs {
                            assert_eq!(wait(&mut e, r).error, MPI_SUCCESS);
                        }
                        for (b, m) in bufs.iter().zip(&msgs) {
                            assert!(b == m, "{min:?}: the bytes of {} B", m.len());
                        }
                        assert!(sync_buf == msgs[eager.len() - 1]);
                    }
                    assert_eq!(e.live_requests(), 0);
                    drop(e);
                });
            }
        });
    }
}
