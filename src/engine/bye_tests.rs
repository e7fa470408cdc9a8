//! Goodbyes ([`super::bye`]): over the in-process transport (one thread, exact interleavings)
//! and over network frames whose connections open on first use (the `WATCH` question).

use super::*;
use crate::standard::consts::{MPI_ANY_SOURCE as ANY, MPI_ERR_OTHER};
use crate::transport::inproc::InprocTransport;
use crate::transport::net::lazy_tests::loopback_frames;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const LIMIT: usize = 4096;
const CFG: EngineConfig = EngineConfig {
    eager_limit: LIMIT,
    cma_min: Some(0),
    push_min: usize::MAX,
    share: false,
};

/// Context 7: the world (ranks 0, 1, 2); context 8: world ranks 0 and 2; context 9: no
/// point-to-point context (a collective one).
fn members(ctx: u32) -> Option<Arc<[usize]>> {
    match ctx {
        7 => Some(Arc::from(&[0usize, 1, 2][..])),
        8 => Some(Arc::from(&[0usize, 2][..])),
        _ => None,
    }
}

fn group(n: usize) -> Vec<Engine> {
    InprocTransport::group(n, 64, 1000, false)
        .into_iter()
        .enumerate()
        .map(|(r, t)| {
            let mut e = Engine::with_config(Box::new(t), r, n, CFG);
            e.set_members(Box::new(members));
            e
        })
        .collect()
}

fn send(e: &mut Engine, buf: &[u8], dst: usize, ctx: u32, src_rank: i32, tag: i32) -> ReqId {
    let a = SendArgs {
        buf: buf.as_ptr(),
        len: buf.len(),
        dst_world: dst,
        ctx,
        src_rank,
        tag,
        sync: false,
        dev: None,
        note: None,
    };
    // SAFETY: every test keeps `buf` alive until the request is waited for.
    unsafe { e.isend(a).unwrap() }
}

fn recv(e: &mut Engine, buf: &mut [u8], ctx: u32, src: i32, tag: i32) -> ReqId {
    // SAFETY: every test keeps `buf` alive and untouched until the request completes.
    unsafe { e.irecv(buf.as_mut_ptr(), buf.len(), ctx, src, tag).unwrap() }
}

fn spin(es: &mut [Engine]) {
    for _ in 0..100 {
        for e in es.iter_mut() {
            e.progress();
        }
    }
}

fn failed(source: i32, tag: i32) -> Status {
    Status {
        source,
        tag,
        error: MPI_ERR_OTHER,
        finalized: true,
        ..Status::default()
    }
}

/// Rank 2 sends rank 0 two messages (one in fragments), then says goodbye. Rank 0's receives
/// posted before that only rank 2 could match fail, the one rank 1 can still match does not;
/// the messages sent before the goodbye are received after it; a later receive from rank 2
/// fails at once, and MPI_ANY_SOURCE fails once every other rank said goodbye. Collective
/// contexts are never failed.
#[test]
fn receives_only_finalized_ranks_can_match_fail() {
    let mut es = group(3);
    let (small, frags) = (
        vec![5u8; 10],
        (0..3000).map(|i| i as u8).collect::<Vec<_>>(),
    );
    let mut bufs = [[0u8; 16]; 4];
    let [b_early, b_pair, b_world, b_coll] = &mut bufs;
    let early = recv(&mut es[0], b_early, 7, 2, 99);
    let pair_any = recv(&mut es[0], b_pair, 8, ANY, 99);
    let world_any = recv(&mut es[0], b_world, 7, ANY, 99);
    let coll = recv(&mut es[0], b_coll, 9, 2, 99);
    let s1 = send(&mut es[2], &small, 0, 7, 2, 1);
    let s2 = send(&mut es[2], &frags, 0, 7, 2, 2);
    es[2].goodbye();
    spin(&mut es);
    assert!(es[2].test(s1).is_some() && es[2].test(s2).is_some());
    assert_eq!(es[0].test(early), Some(failed(2, 99)));
    assert_eq!(es[0].test(pair_any), Some(failed(ANY, 99)));
    assert_eq!(es[0].test(world_any), None, "rank 1 can still send it");
    assert_eq!(
        es[0].test(coll),
        None,
        "a collective context is never failed"
    );
    assert!(es[0].finalized(2) && !es[0].finalized(1));
    // Sent before the goodbye: still received, in order.
    let mut got = vec![0u8; 3000];
    let r = recv(&mut es[0], &mut got[..10], 7, 2, 1);
    assert_eq!(es[0].test(r).map(|s| (s.error, s.bytes)), Some((0, 10)));
    assert_eq!(got[..10], small[..]);
    let r = recv(&mut es[0], &mut got, 7, 2, 2);
    assert_eq!(es[0].test(r).map(|s| (s.error, s.bytes)), Some((0, 3000)));
    assert_eq!(got, frags);
    // Made later: fails at once; probes find the same.
    let r = recv(&mut es[0], &mut got, 7, 2, 98);
    assert_eq!(es[0].test(r), Some(failed(2, 98)));
    assert_eq!(es[0].finalized_source(7, 2), Some(2));
    assert_eq!(es[0].finalized_source(8, 1), Some(1));
    assert_eq!(es[0].finalized_source(7, 1), None);
    assert_eq!(es[0].finalized_source(7, ANY), None);
    assert_eq!(es[0].finalized_source(9, 2), None);
    // Rank 1 has not finalized: its message matches the MPI_ANY_SOURCE receive.
    let s = send(&mut es[1], &small, 0, 7, 1, 99);
    spin(&mut es);
    assert!(es[1].test(s).is_some());
    let st = es[0].test(world_any).expect("rank 1's message");
    assert_eq!((st.source, st.error, st.finalized), (1, 0, false));
    // Once rank 1 said goodbye too, MPI_ANY_SOURCE on the world fails.
    let late_any = recv(&mut es[0], b_world, 7, ANY, 97);
    assert_eq!(es[0].test(late_any), None);
    es[1].goodbye();
    spin(&mut es);
    assert_eq!(es[0].test(late_any), Some(failed(ANY, 97)));
    assert_eq!(es[0].finalized_source(7, ANY), Some(ANY));
    assert!(es[0].cancel(coll));
    es[0].free(coll);
    for e in &es {
        assert_eq!(e.live_requests(), 0);
    }
}

/// A receive that posts after the goodbye still takes a message that arrived before it, and a
/// rank's own goodbye changes nothing for its own receives.
#[test]
fn goodbye_keeps_messages_and_own_receives() {
    let mut es = group(2);
    let msg = [9u8; 4];
    let s = send(&mut es[1], &msg, 0, 7, 1, 4);
    es[1].goodbye();
    es[0].goodbye();
    spin(&mut es);
    assert!(es[1].test(s).is_some());
    let mut got = [0u8; 4];
    let r = recv(&mut es[0], &mut got, 7, 1, 4);
    assert_eq!(
        es[0].test(r).map(|s| (s.error, s.finalized)),
        Some((0, false))
    );
    assert_eq!(got, msg);
    // Rank 1 hears rank 0's goodbye: its receive from rank 0 fails; from itself it does not.
    let r = recv(&mut es[1], &mut got, 7, 0, 4);
    assert_eq!(es[1].test(r), Some(failed(0, 4)));
    assert_eq!(es[1].finalized_source(7, 1), None);
}

/// Two ranks on nodes of their own; rank 1 never sends to rank 0, so no connection from it
/// exists, and its goodbye goes nowhere. Rank 0's receive from it waits, asks it (`WATCH`) and
/// fails when the answer comes.
#[test]
fn a_waiting_receive_asks_an_unconnected_rank_for_its_goodbye() {
    let mut es: Vec<Engine> = loopback_frames(2, 1, Duration::from_secs(5), b"engine-bye")
        .into_iter()
        .enumerate()
        .map(|(me, f)| {
            let mut e = Engine::with_config(Box::new(f), me, 2, CFG);
            e.set_members(Box::new(|ctx| {
                (ctx == 7).then(|| Arc::from(&[0usize, 1][..]))
            }));
            e
        })
        .collect();
    let done = &AtomicBool::new(false);
    let mut e1 = es.pop().unwrap();
    let mut e0 = es.pop().unwrap();
    std::thread::scope(|s| {
        s.spawn(move || {
            e1.goodbye();
            while !done.load(Ordering::Acquire) {
                e1.progress();
                std::thread::yield_now();
            }
            // Closes (as at MPI_Finalize) while rank 0 does.
            drop(e1);
        });
        let mut buf = [0u8; 8];
        let r = recv(&mut e0, &mut buf, 7, 1, 3);
        let end = Instant::now() + Duration::from_secs(30);
        let st = loop {
            if let Some(st) = e0.test(r) {
                break st;
            }
            assert!(Instant::now() < end, "the receive never failed");
            std::thread::yield_now();
        };
        done.store(true, Ordering::Release);
        assert_eq!(st, failed(1, 3));
        drop(e0);
    });
}

/// A blocking receive waiting without a request ([`Engine::recv_direct`]) fails like a posted
/// one when the only rank that could match it says goodbye, and once a goodbye was heard a
/// blocking receive is posted (so that the goodbyes already heard are checked at once).
#[test]
fn goodbyes_fail_receives_waiting_without_a_request() {
    let mut es = group(3);
    let mut got = [0u8; 4];
    let r = RecvArgs {
        buf: got.as_mut_ptr(),
        cap: got.len(),
        ctx: 8,
        src: 1,
        tag: 3,
    };
    // SAFETY: `got` outlives the receive, which completes (fails) below.
    let start = unsafe { es[0].recv_direct(&r) }.unwrap();
    assert!(matches!(start, DirectStart::Waiting));
    es[2].goodbye();
    spin(&mut es);
    let Some(Err(id)) = es[0].direct_poll() else {
        panic!("the goodbye left the receive waiting without a request");
    };
    assert_eq!(es[0].test(id), Some(failed(1, 3)));
    // SAFETY: as above.
    let DirectStart::Posted(id) = unsafe { es[0].recv_direct(&r) }.unwrap() else {
        panic!("waits without a request after a goodbye");
    };
    assert_eq!(es[0].test(id), Some(failed(1, 3)));
}
