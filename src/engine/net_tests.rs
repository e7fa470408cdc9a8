//! The engine over network frames whose connections open on first use
//! (`transport::net::links`): three ranks, each on a node of its own (one thread each, the TCP
//! backend on loopback).

use super::*;
use crate::standard::consts::MPI_ANY_SOURCE;
use crate::transport::net::lazy_tests::loopback_frames;
use std::time::{Duration, Instant};

const LIMIT: usize = 4096;

fn engines(n: usize) -> Vec<Engine> {
    loopback_frames(n, 2, Duration::from_secs(5), b"engine-lazy")
        .into_iter()
        .enumerate()
        .map(|(me, frames)| {
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
