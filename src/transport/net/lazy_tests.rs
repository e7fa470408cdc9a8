//! Connections on first use ([`super::links`], [`super::frames`]): ranks of one process, each on
//! a node of its own, over the TCP backend on loopback, driven from one thread (the backend's
//! helper threads move the bytes) and closed from one thread each (the close is collective over
//! the connected peers).

use super::frames::{Counters, NetFrames};
use super::ifname::Family;
use super::links::Links;
use super::tcp::{Stripe, TcpConfig, TcpNet};
use super::{Handle, Net};
use crate::transport::{Header, Transport};
use std::time::{Duration, Instant};

/// `n` ranks; `accept`: the backend's accept time limit (and the links' patience).
fn ranks(n: usize, accept: Duration) -> Vec<NetFrames> {
    loopback_frames(n, 1, accept, b"lazy-links")
}

/// Network frames of `n` ranks, each its own node, over the TCP backend on loopback
/// (`socks` sockets per connection, one helper thread): connections open on first use.
/// `accept`: the backend's accept time limit and the links' patience.
pub(crate) fn loopback_frames(
    n: usize,
    socks: usize,
    accept: Duration,
    secret: &[u8],
) -> Vec<NetFrames> {
    let nets: Vec<Box<dyn Net>> = (0..n)
        .map(|_| {
            let cfg = TcpConfig {
                ifname: Some("=lo".into()),
                family: Family::V4,
                threads: 1,
                socks_per_thread: socks,
                connect_timeout: Duration::from_secs(5),
                accept_timeout: accept,
                stripe: Stripe::Auto,
            };
            Box::new(TcpNet::new(cfg, secret).unwrap()) as Box<dyn Net>
        })
        .collect();
    let ls: Vec<_> = nets.iter().map(|n| n.listen(0).unwrap()).collect();
    let handles: Vec<Option<Handle>> = ls.iter().map(|l| Some(l.0)).collect();
    nets.into_iter()
        .zip(ls)
        .enumerate()
        .map(|(me, (net, (_, l)))| {
            let mut hs = handles.clone();
            hs[me] = None;
            NetFrames::new(Links::new(net, 0, l, me, hs, accept), me, n)
        })
        .collect()
}

/// Frames each rank received: (source, tag, payload).
type Got = Vec<Vec<(usize, i32, Vec<u8>)>>;

/// Polls the ranks in `which` once, appending what they received to `got`.
fn poll(fs: &mut [NetFrames], which: &[usize], got: &mut Got) {
    for &i in which {
        fs[i].poll(&mut |s, h, p| got[i].push((s, h.tag, p.to_vec())));
    }
}

fn all(n: usize) -> Vec<usize> {
    (0..n).collect()
}

/// Sends one frame `src` -> `dst` with `tag`, polling every rank until the transport takes it.
fn send(fs: &mut [NetFrames], got: &mut Got, src: usize, dst: usize, tag: i32, data: &[u8]) {
    let h = Header {
        tag,
        ..Default::default()
    };
    let end = Instant::now() + Duration::from_secs(20);
    while !fs[src].try_send(dst, &h, data) {
        assert!(Instant::now() < end, "rank {src} never reached rank {dst}");
        poll(fs, &all(fs.len()), got);
    }
}

/// Polls every rank until `done(got)`.
fn until(fs: &mut [NetFrames], got: &mut Got, done: impl Fn(&Got) -> bool) {
    let end = Instant::now() + Duration::from_secs(20);
    while !done(got) {
        assert!(Instant::now() < end, "frames never arrived: {got:?}");
        poll(fs, &all(fs.len()), got);
    }
}

/// Connections opened, accepted, and used the other way.
fn conns(c: Counters) -> (u64, u64, u64) {
    (c.opened, c.accepted, c.reversed)
}

/// Closes every rank at once (one thread each, as `MPI_Finalize` runs in every process);
/// returns the slowest close.
fn close(fs: Vec<NetFrames>) -> Duration {
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for f in fs {
            s.spawn(move || drop(f));
        }
    });
    t0.elapsed()
}

#[test]
fn only_the_pairs_that_talk_connect() {
    let mut fs = ranks(3, Duration::from_secs(5));
    let mut got: Got = vec![Vec::new(); 3];
    send(&mut fs, &mut got, 0, 1, 10, b"zero to one");
    until(&mut fs, &mut got, |g| g[1].len() == 1);
    send(&mut fs, &mut got, 1, 0, 11, b"one to zero");
    send(&mut fs, &mut got, 1, 2, 12, b"one to two");
    until(&mut fs, &mut got, |g| g[0].len() == 1 && g[2].len() == 1);
    assert_eq!(got[1], vec![(0, 10, b"zero to one".to_vec())]);
    assert_eq!(got[0], vec![(1, 11, b"one to zero".to_vec())]);
    assert_eq!(got[2], vec![(1, 12, b"one to two".to_vec())]);
    // Ranks 0 and 2 never exchanged anything: no connection between them either way. Rank 1
    // answered rank 0 on the connection rank 0 opened.
    assert_eq!(conns(fs[0].counts()), (1, 0, 1));
    assert_eq!(conns(fs[1].counts()), (1, 1, 1));
    assert_eq!(conns(fs[2].counts()), (0, 1, 0));
    // More traffic on the same pairs opens nothing new.
    for k in 0..20u8 {
        send(&mut fs, &mut got, 0, 1, 20, &[k; 100]);
    }
    until(&mut fs, &mut got, |g| g[1].len() == 21);
    assert!(got[1][1..]
        .iter()
        .enumerate()
        .all(|(k, f)| *f == (0, 20, vec![k as u8; 100])));
    assert_eq!(conns(fs[0].counts()), (1, 0, 1));
    assert_eq!(conns(fs[1].counts()), (1, 1, 1));
    // Closing waits only for connected peers: nowhere near the 10 s close limit.
    let t = close(fs);
    assert!(t < Duration::from_secs(5), "close took {t:?}");
}

/// A rank that answers a peer which dialed it sends on that connection's other direction: a
/// pair that talks both ways holds one connection. Frames keep their order each way (of every
/// size a frame has, up to the largest aggregated message), interleaved or in bursts, and the
/// pair closes at once.
#[test]
fn an_answer_goes_back_on_the_connection_its_question_came_on() {
    use super::frames::MAX_PAYLOAD;
    let mut fs = ranks(2, Duration::from_secs(5));
    let mut got: Got = vec![Vec::new(); 2];
    send(&mut fs, &mut got, 0, 1, 1, b"question");
    until(&mut fs, &mut got, |g| g[1].len() == 1);
    send(&mut fs, &mut got, 1, 0, 2, b"answer");
    until(&mut fs, &mut got, |g| g[0].len() == 1);
    assert_eq!(got[0], vec![(1, 2, b"answer".to_vec())]);
    assert_eq!(conns(fs[0].counts()), (1, 0, 1));
    assert_eq!(conns(fs[1].counts()), (0, 1, 1));
    let sizes = [0, 1, 8, 200, 4096, 60_000, MAX_PAYLOAD];
    let body = |k: usize, from: usize| -> Vec<u8> {
        let n = sizes[k % sizes.len()];
        (0..n).map(|i| (i * 13 + k * 7 + from) as u8).collect()
    };
    // Interleaved, then a burst each way (aggregated into large messages).
    for k in 0..30 {
        send(&mut fs, &mut got, 0, 1, 10 + k as i32, &body(k, 0));
        send(&mut fs, &mut got, 1, 0, 10 + k as i32, &body(k, 1));
    }
    for k in 30..90 {
        send(&mut fs, &mut got, 1, 0, 10 + k as i32, &body(k, 1));
    }
    for k in 30..90 {
        send(&mut fs, &mut got, 0, 1, 10 + k as i32, &body(k, 0));
    }
    until(&mut fs, &mut got, |g| g[0].len() == 91 && g[1].len() == 91);
    for k in 0..90 {
        assert!(
            got[1][k + 1] == (0, 10 + k as i32, body(k, 0)),
            "frame {k} to rank 1"
        );
        assert!(
            got[0][k + 1] == (1, 10 + k as i32, body(k, 1)),
            "frame {k} to rank 0"
        );
    }
    assert_eq!(conns(fs[0].counts()), (1, 0, 1));
    assert_eq!(conns(fs[1].counts()), (0, 1, 1));
    let t = close(fs);
    assert!(t < Duration::from_secs(5), "close took {t:?}");
}

/// Two ranks that start sending to each other at once end up on one connection, the lower
/// rank's: whichever way the race between their dials goes, every frame arrives once and in
/// order, and later frames both ways stay on that connection.
#[test]
fn ranks_that_start_sending_to_each_other_at_once_keep_one_connection() {
    for round in 0..5 {
        let mut fs = ranks(2, Duration::from_secs(5));
        let mut got: Got = vec![Vec::new(); 2];
        let h = Header {
            tag: 5,
            ..Default::default()
        };
        // Both dial before either polled.
        assert!(!fs[0].try_send(1, &h, b"from 0"));
        assert!(!fs[1].try_send(0, &h, b"from 1"));
        send(&mut fs, &mut got, 0, 1, 5, b"from 0");
        send(&mut fs, &mut got, 1, 0, 5, b"from 1");
        for k in 0..10u8 {
            send(&mut fs, &mut got, 0, 1, 6, &[k; 40]);
            send(&mut fs, &mut got, 1, 0, 6, &[k; 50]);
        }
        until(&mut fs, &mut got, |g| g[0].len() == 11 && g[1].len() == 11);
        assert_eq!(got[0][0], (1, 5, b"from 1".to_vec()), "round {round}");
        assert_eq!(got[1][0], (0, 5, b"from 0".to_vec()), "round {round}");
        for k in 0..10usize {
            assert_eq!(got[0][k + 1], (1, 6, vec![k as u8; 50]), "round {round}");
            assert_eq!(got[1][k + 1], (0, 6, vec![k as u8; 40]), "round {round}");
        }
        // Rank 0 opened the connection both use; rank 1 either gave up its dial in flight
        // or moved off its own connection (which rank 0 then accepted).
        let (c0, c1) = (conns(fs[0].counts()), conns(fs[1].counts()));
        assert_eq!(
            (c0.0, c0.2, c1.1, c1.2),
            (1, 1, 1, 1),
            "round {round}: {c0:?} {c1:?}"
        );
        assert_eq!(c0.1, c1.0, "round {round}: {c0:?} {c1:?}");
        let t = close(fs);
        assert!(
            t < Duration::from_secs(5),
            "round {round}: close took {t:?}"
        );
    }
}

/// The higher rank of a pair that dialed each other, whose own connection was up and carrying
/// frames when it accepted the lower rank's, moves its frames to the other direction of the
/// lower rank's connection: the frames on its own connection are delivered first, then the
/// rest, in order, and both close at once.
#[test]
fn a_rank_that_moves_to_its_peers_connection_keeps_its_frames_in_order() {
    let mut fs = ranks(2, Duration::from_secs(5));
    let mut got: Got = vec![Vec::new(); 2];
    let h = |tag| Header {
        tag,
        ..Default::default()
    };
    // Rank 1 dials rank 0; once its connection is up (rank 0 has accepted it but not polled
    // since, so it has not read rank 1's hello), rank 0 dials rank 1 too.
    assert!(!fs[1].try_send(0, &h(1), b"first"));
    let end = Instant::now() + Duration::from_secs(20);
    while fs[1].counts().opened == 0 {
        assert!(Instant::now() < end, "rank 1's dial never completed");
        poll(&mut fs, &[0, 1], &mut got);
    }
    let mut k = 0i32;
    while k < 5 && fs[1].try_send(0, &h(100 + k), &[k as u8; 300]) {
        k += 1;
    }
    assert!(!fs[0].try_send(1, &h(2), b"from 0"), "rank 0 dials");
    // Frames from rank 1 before, during and after the move; rank 0's too.
    send(&mut fs, &mut got, 0, 1, 2, b"from 0");
    for _ in 0..60 {
        send(&mut fs, &mut got, 1, 0, 100 + k, &[k as u8; 300]);
        k += 1;
        poll(&mut fs, &[0, 1], &mut got);
    }
    until(&mut fs, &mut got, |g| {
        g[0].len() == k as usize && g[1].len() == 1
    });
    assert_eq!(got[1], vec![(0, 2, b"from 0".to_vec())]);
    for (i, f) in got[0].iter().enumerate() {
        let want = (1, 100 + i as i32, vec![i as u8; 300]);
        assert!(
            *f == want,
            "frame {i} from rank 1: {:?}",
            (f.0, f.1, f.2.len())
        );
    }
    let (c0, c1) = (conns(fs[0].counts()), conns(fs[1].counts()));
    assert_eq!((c0, c1), ((1, 1, 1), (1, 1, 1)));
    for j in 0..10u8 {
        send(&mut fs, &mut got, 0, 1, 7, &[j; 20]);
        send(&mut fs, &mut got, 1, 0, 7, &[j; 30]);
    }
    until(&mut fs, &mut got, |g| {
        g[0].len() == k as usize + 10 && g[1].len() == 11
    });
    for j in 0..10usize {
        assert_eq!(got[0][k as usize + j], (1, 7, vec![j as u8; 30]));
        assert_eq!(got[1][1 + j], (0, 7, vec![j as u8; 20]));
    }
    let t = close(fs);
    assert!(t < Duration::from_secs(5), "close took {t:?}");
}

#[test]
fn eager_set_up_connects_every_pair_before_any_frame() {
    let fs = ranks(3, Duration::from_secs(5));
    let mut fs: Vec<NetFrames> = std::thread::scope(|s| {
        let js: Vec<_> = fs
            .into_iter()
            .enumerate()
            .map(|(me, mut f)| {
                s.spawn(move || {
                    let peers: Vec<usize> = (0..3).filter(|&p| p != me).collect();
                    f.connect_all(&peers, Duration::from_secs(20)).unwrap();
                    f
                })
            })
            .collect();
        js.into_iter().map(|j| j.join().unwrap()).collect()
    });
    for f in &fs {
        assert_eq!(conns(f.counts()), (2, 2, 0));
    }
    let mut got: Got = vec![Vec::new(); 3];
    send(&mut fs, &mut got, 2, 0, 3, b"late");
    until(&mut fs, &mut got, |g| g[0].len() == 1);
    assert_eq!(got[0], vec![(2, 3, b"late".to_vec())]);
    assert_eq!(conns(fs[2].counts()), (2, 2, 0));
    let t = close(fs);
    assert!(t < Duration::from_secs(5), "close took {t:?}");
}

#[test]
fn a_peer_busy_past_the_accept_limit_is_dialed_again() {
    let limit = Duration::from_millis(500);
    let mut fs = ranks(2, limit);
    let mut got: Got = vec![Vec::new(); 2];
    let h = Header {
        tag: 9,
        ..Default::default()
    };
    // Rank 1 makes no progress for three accept limits: rank 0's dial times out (twice) and is
    // made again, instead of failing the job.
    let end = Instant::now() + 3 * limit;
    while Instant::now() < end {
        assert!(!fs[0].try_send(1, &h, b"patient"));
        poll(&mut fs, &[0], &mut got);
        std::thread::sleep(Duration::from_millis(5));
    }
    send(&mut fs, &mut got, 0, 1, 9, b"patient");
    until(&mut fs, &mut got, |g| g[1].len() == 1);
    assert_eq!(got[1], vec![(0, 9, b"patient".to_vec())]);
    assert_eq!(conns(fs[0].counts()), (1, 0, 0));
    assert_eq!(conns(fs[1].counts()), (0, 1, 0));
    close(fs);
}

#[test]
fn ranks_that_never_talked_close_at_once() {
    let fs = ranks(3, Duration::from_secs(5));
    for f in &fs {
        assert_eq!(conns(f.counts()), (0, 0, 0));
    }
    let t = close(fs);
    assert!(t < Duration::from_secs(2), "close took {t:?}");
}

#[test]
fn questions_to_a_rank_that_has_ended_are_dropped() {
    // Rank 1 ends (its listener closes) before rank 0 ever dials it. A frame marked
    // FLAG_UNLESS_GONE (a collective's question or answer) is then dropped: try_send takes it
    // once the dial has failed, and takes the next such frame at once, with no connection.
    let mut fs = ranks(2, Duration::from_secs(5));
    let gone = fs.pop().unwrap();
    drop(gone);
    let mut got: Got = vec![Vec::new(); 1];
    let h = Header {
        flags: crate::transport::FLAG_UNLESS_GONE,
        tag: 7,
        ..Default::default()
    };
    let end = Instant::now() + Duration::from_secs(20);
    while !fs[0].try_send(1, &h, b"question") {
        assert!(
            Instant::now() < end,
            "the frame to the ended rank was never dropped"
        );
        poll(&mut fs, &[0], &mut got);
    }
    assert!(
        fs[0].try_send(1, &h, b"again"),
        "a later question is dropped at once"
    );
    assert_eq!(conns(fs[0].counts()), (0, 0, 0));
    close(fs);
}

/// Bulk transfers ([`Transport::bulk_send`]) between two ranks: a second connection opened by
/// the first bulk send, transfers of several sizes matched in the order each side queued
/// them (receives queued before the lane exists wait for it, and more than the backend's
/// request slots are queued at once), each reported once with its id, and frames unaffected
/// meanwhile.
#[test]
fn bulk_transfers_match_in_queue_order_over_their_own_connection() {
    use crate::transport::BulkDone;
    let mut fs = loopback_frames(2, 2, Duration::from_secs(5), b"bulk-lane");
    for f in &mut fs {
        f.set_bulk_min(Some(1 << 20));
    }
    assert_eq!(fs[0].bulk_min(1), Some(1 << 20));
    assert_eq!(fs[0].bulk_min(0), None, "no bulk transfers with itself");
    let sizes: Vec<usize> = (0..40).map(|i| (1 << 20) + i * 4099).collect();
    let msgs: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(k, &n)| (0..n).map(|i| (i * 7 + k * 31) as u8).collect())
        .collect();
    let mut bufs: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0u8; n]).collect();
    // Receives first (rank 1 has no lane from rank 0 yet), then the sends.
    for (k, b) in bufs.iter_mut().enumerate() {
        // SAFETY: the buffers outlive the transfers (checked complete below).
        assert!(unsafe { fs[1].bulk_recv(0, 100 + k as u64, b.as_mut_ptr(), b.len(), false) });
    }
    for (k, m) in msgs.iter().enumerate() {
        // SAFETY: as above.
        assert!(unsafe { fs[0].bulk_send(1, 200 + k as u64, m.as_ptr(), m.len(), false) });
    }
    let mut got: Got = vec![Vec::new(); 2];
    send(&mut fs, &mut got, 0, 1, 4, b"beside the bulk data");
    let mut done: Vec<Vec<BulkDone>> = vec![Vec::new(); 2];
    let end = Instant::now() + Duration::from_secs(60);
    while done[0].len() + done[1].len() < 2 * sizes.len() || got[1].is_empty() {
        assert!(Instant::now() < end, "bulk transfers never completed");
        poll(&mut fs, &all(2), &mut got);
        for (i, f) in fs.iter_mut().enumerate() {
            f.bulk_poll(&mut |d| done[i].push(d));
        }
    }
    assert_eq!(got[1], vec![(0, 4, b"beside the bulk data".to_vec())]);
    let mut sent: Vec<(u64, usize)> = done[0]
        .iter()
        .map(|d| {
            assert!(d.send && d.peer == 1);
            (d.id, d.bytes)
        })
        .collect();
    sent.sort_unstable();
    let want: Vec<(u64, usize)> = (0..sizes.len())
        .map(|k| (200 + k as u64, sizes[k]))
        .collect();
    assert_eq!(sent, want);
    let mut recvd: Vec<(u64, usize)> = done[1]
        .iter()
        .map(|d| {
            assert!(!d.send && d.peer == 0);
            (d.id, d.bytes)
        })
        .collect();
    recvd.sort_unstable();
    let want: Vec<(u64, usize)> = (0..sizes.len())
        .map(|k| (100 + k as u64, sizes[k]))
        .collect();
    assert_eq!(recvd, want);
    for k in 0..sizes.len() {
        assert!(bufs[k] == msgs[k], "bulk message {k}'s bytes");
    }
    let (c0, c1) = (fs[0].counts(), fs[1].counts());
    assert_eq!((c0.bulk_sends, c1.bulk_recvs), (40, 40));
    assert_eq!(c0.bulk_bytes, sizes.iter().sum::<usize>() as u64);
    assert_eq!(c1.bulk_bytes_in, c0.bulk_bytes);
    // The frame connection is counted as before; the bulk lane apart.
    assert_eq!(conns(c0), (1, 0, 0));
    assert_eq!(conns(c1), (0, 1, 0));
    let t = close(fs);
    assert!(t < Duration::from_secs(5), "close took {t:?}");
}

/// A peer whose bulk lane closes in the middle of a transfer to this rank is an error naming
/// that peer's rank (never a wait for bytes that will not come).
#[test]
fn a_peer_that_closes_mid_transfer_is_an_error_naming_it() {
    let mut fs = loopback_frames(2, 2, Duration::from_secs(5), b"bulk-cut");
    let n = 256 << 20;
    let src = vec![5u8; n];
    let mut dst = vec![0u8; n];
    // SAFETY: the buffer outlives the frames (dropped at the end of the test).
    assert!(unsafe { fs[0].bulk_send(1, 2, src.as_ptr(), n, false) });
    let mut got: Got = vec![Vec::new(); 2];
    let end = Instant::now() + Duration::from_secs(20);
    // Until the send is with the backend (its lane up): far more than the sockets hold.
    while fs[0].bulk_state(1).0 == 0 || !fs[1].bulk_state(0).2 {
        assert!(Instant::now() < end, "the transfer never started");
        poll(&mut fs, &all(2), &mut got);
        fs[0].try_bulk_poll(&mut |_| {}).unwrap();
    }
    // The sender's lane goes (as when its process dies), its transfer in flight; then the
    // receiver asks for it.
    fs[0].cut_bulk_lane(1, true);
    // SAFETY: as above.
    assert!(unsafe { fs[1].bulk_recv(0, 1, dst.as_mut_ptr(), n, false) });
    let e = loop {
        assert!(Instant::now() < end, "the receiver never noticed");
        match fs[1].try_bulk_poll(&mut |d| panic!("a cut transfer completed: {d:?}")) {
            Ok(_) => std::thread::sleep(Duration::from_millis(1)),
            Err(e) => break e,
        }
    };
    assert!(
        e.msg.contains("rank 1: bulk data with rank 0"),
        "the error names the peer: {e}"
    );
    fs[1].cut_bulk_lane(0, true);
    close(fs);
    drop((src, dst));
}

/// The TCP backend cannot take device memory: its frames offer no device bulk transfers and
/// refuse one (nothing queued); `GPUMPI_NET_GDR` decides from what the backend can, and `1`
/// where it cannot is an error naming the backend.
#[test]
fn device_bulk_transfers_only_where_the_backend_registers_device_memory() {
    use super::frames::gdr_choice;
    let mut fs = loopback_frames(2, 1, Duration::from_secs(5), b"bulk-dev");
    fs[0].set_bulk_min(Some(1 << 16));
    assert!(!fs[0].backend().device_memory());
    assert!(!fs[0].bulk_device(1));
    let b = vec![0u8; 1 << 20];
    // SAFETY: refused before anything is queued.
    assert!(!unsafe { fs[0].bulk_send(1, 1, b.as_ptr(), b.len(), true) });
    assert_eq!(fs[0].bulk_state(1), (0, 0, false));
    fs[0].set_bulk_device(true);
    assert!(fs[0].bulk_device(1) && !fs[0].bulk_device(0));
    fs[0].set_bulk_min(None);
    assert!(
        !fs[0].bulk_device(1),
        "no device bulk transfers without bulk transfers"
    );
    assert!(gdr_choice("", "ib", true).unwrap().0);
    assert!(!gdr_choice("auto", "tcp", false).unwrap().0);
    assert!(gdr_choice("auto", "tcp", false)
        .unwrap()
        .1
        .contains("tcp backend cannot"));
    assert!(!gdr_choice("0", "ib", true).unwrap().0);
    assert!(gdr_choice(" 1 ", "ib", true).unwrap().0);
    let e = gdr_choice("1", "tcp", false).unwrap_err();
    assert!(e.contains("GPUMPI_NET_GDR=1") && e.contains("tcp"), "{e}");
    assert!(gdr_choice("yes", "ib", true)
        .unwrap_err()
        .contains("expected auto, 0 or 1"));
}
