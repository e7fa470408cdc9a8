//! Engine tests over the in-process transport: single-threaded pairs driven alternately (exact
//! control over interleavings) and multi-rank runs with one thread per rank.

use super::*;
use crate::standard::consts::{
    MPI_ANY_SOURCE as ANY_SRC, MPI_ANY_TAG as ANY_TAG, MPI_ERR_TRUNCATE,
};
use crate::transport::inproc::InprocTransport;

const LIMIT: usize = 4096;

fn group(n: usize, cap_msgs: usize, maxp: usize, cma: bool) -> Vec<Engine> {
    InprocTransport::group(n, cap_msgs, maxp, cma)
        .into_iter()
        .enumerate()
        .map(|(r, t)| {
            Engine::with_config(
                Box::new(t),
                r,
                n,
                EngineConfig {
                    eager_limit: LIMIT,
                    cma_min: Some(0),
                    push_min: usize::MAX,
                    share: true,
                },
            )
        })
        .collect()
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn send_args(buf: &[u8], dst: usize, src_rank: i32, tag: i32, sync: bool) -> SendArgs {
    SendArgs {
        buf: buf.as_ptr(),
        len: buf.len(),
        dst_world: dst,
        ctx: 7,
        src_rank,
        tag,
        sync,
        dev: None,
        note: None,
    }
}

fn send(e: &mut Engine, buf: &[u8], dst: usize, src_rank: i32, tag: i32, sync: bool) -> ReqId {
    // SAFETY: every test keeps `buf` alive until the request is waited for.
    unsafe { e.isend(send_args(buf, dst, src_rank, tag, sync)).unwrap() }
}

fn recv(e: &mut Engine, buf: &mut [u8], src: i32, tag: i32) -> ReqId {
    // SAFETY: every test keeps `buf` alive and untouched until the request is waited for.
    unsafe { e.irecv(buf.as_mut_ptr(), buf.len(), 7, src, tag).unwrap() }
}

/// Progress every engine until `req` on engine `who` completes.
fn wait_on(es: &mut [Engine], who: usize, req: ReqId) -> Status {
    for _ in 0..10_000_000 {
        for (i, e) in es.iter_mut().enumerate() {
            if i != who {
                e.progress();
            }
        }
        if let Some(s) = es[who].test(req) {
            return s;
        }
    }
    panic!("request never completed");
}

fn spin(es: &mut [Engine], rounds: usize) {
    for _ in 0..rounds {
        for e in es.iter_mut() {
            e.progress();
        }
    }
}

const SIZES: &[usize] = &[0, 1, LIMIT - 1, LIMIT, LIMIT + 1, 10 << 20];

#[test]
fn self_send_all_sizes() {
    let mut es = group(1, 4, 1000, false);
    for &n in SIZES {
        for posted_first in [false, true] {
            let data = pattern(n, 3);
            let mut out = vec![0u8; n];
            let (s, r) = if posted_first {
                let r = recv(&mut es[0], &mut out, 0, 5);
                (send(&mut es[0], &data, 0, 0, 5, false), r)
            } else {
                let s = send(&mut es[0], &data, 0, 0, 5, false);
                (s, recv(&mut es[0], &mut out, 0, 5))
            };
            let st = wait_on(&mut es, 0, r);
            assert_eq!((st.source, st.tag, st.error, st.bytes), (0, 5, 0, n));
            wait_on(&mut es, 0, s);
            assert!(out == data, "self-send of {n} bytes corrupted");
        }
    }
    assert_eq!(es[0].live_requests(), 0);
}

fn boundaries(cma: bool) {
    // Tiny frames (1000 bytes) and 8-frame channels: eager messages fragment and the
    // pipelined rendezvous has to wait for space many times.
    let mut es = group(2, 8, 1000, cma);
    for &n in SIZES {
        for posted_first in [false, true] {
            let data = pattern(n, n as u8);
            let mut out = vec![0u8; n];
            let (s, r) = if posted_first {
                let r = recv(&mut es[1], &mut out, 0, 9);
                spin(&mut es, 2);
                (send(&mut es[0], &data, 1, 0, 9, false), r)
            } else {
                let s = send(&mut es[0], &data, 1, 0, 9, false);
                spin(&mut es, 3);
                (s, recv(&mut es[1], &mut out, 0, 9))
            };
            let st = wait_on(&mut es, 1, r);
            assert_eq!(
                (st.source, st.tag, st.error, st.bytes, st.cancelled),
                (0, 9, 0, n, false)
            );
            let ss = wait_on(&mut es, 0, s);
            assert_eq!(ss.bytes, n);
            assert!(
                out == data,
                "{n} bytes (cma {cma}, posted first {posted_first}) corrupted"
            );
        }
    }
    assert_eq!(es[0].live_requests() + es[1].live_requests(), 0);
}

#[test]
fn eager_rendezvous_boundaries_cma() {
    boundaries(true);
}

#[test]
fn eager_rendezvous_boundaries_pipelined() {
    boundaries(false);
}

#[test]
fn wildcards_and_non_overtaking() {
    let mut es = group(3, 64, 1000, true);
    let bufs: Vec<Vec<u8>> = (0..6).map(|i| vec![i as u8; 4 + i]).collect();
    // Rank 0 sends tags 1,2,3 (eager), then tag 1 again as a rendezvous message.
    let big = pattern(LIMIT * 3, 1);
    let mut sreqs: Vec<ReqId> = (0..3)
        .map(|i| send(&mut es[0], &bufs[i], 2, 0, i as i32 + 1, false))
        .collect();
    sreqs.push(send(&mut es[0], &big, 2, 0, 1, false));
    spin(&mut es, 3);
    // A specific tag skips earlier messages.
    let mut o3 = vec![0u8; 64];
    let st = {
        let r = recv(&mut es[2], &mut o3, 0, 3);
        wait_on(&mut es, 2, r)
    };
    assert_eq!((st.tag, st.bytes), (3, bufs[2].len()));
    // ANY_TAG takes the rest in send order.
    let mut o = vec![0u8; 64];
    let st = {
        let r = recv(&mut es[2], &mut o, 0, ANY_TAG);
        wait_on(&mut es, 2, r)
    };
    assert_eq!((st.tag, st.bytes), (1, bufs[0].len()));
    let st = {
        let r = recv(&mut es[2], &mut o, ANY_SRC, ANY_TAG);
        wait_on(&mut es, 2, r)
    };
    assert_eq!((st.source, st.tag, st.bytes), (0, 2, bufs[1].len()));
    let mut ob = vec![0u8; big.len()];
    let st = {
        let r = recv(&mut es[2], &mut ob, ANY_SRC, 1);
        wait_on(&mut es, 2, r)
    };
    assert_eq!((st.tag, st.bytes), (1, big.len()));
    assert!(ob == big);
    for s in sreqs {
        wait_on(&mut es, 0, s);
    }
    // ANY_SOURCE across two senders: each sender's messages stay in order.
    let mut reqs = vec![];
    for k in 0..5u8 {
        reqs.push(send(&mut es[0], std::slice::from_ref(&k), 2, 0, 4, false));
        reqs.push(send(
            &mut es[1],
            std::slice::from_ref(&(k + 100)),
            2,
            1,
            4,
            false,
        ));
    }
    let (mut last0, mut last1) = (None, None);
    for _ in 0..10 {
        let mut b = [0u8; 1];
        let st = {
            let r = recv(&mut es[2], &mut b, ANY_SRC, 4);
            wait_on(&mut es, 2, r)
        };
        let last = if st.source == 0 {
            &mut last0
        } else {
            &mut last1
        };
        if let Some(prev) = *last {
            assert!(b[0] > prev, "overtaking from source {}", st.source);
        }
        assert_eq!(b[0] >= 100, st.source == 1);
        *last = Some(b[0]);
    }
    for (i, r) in reqs.into_iter().enumerate() {
        wait_on(&mut es, i % 2, r);
    }
}

/// A send written straight into the transport ([`Engine::send_now`]) keeps MPI's order: it
/// is refused while anything to that rank is queued (a full channel, a rendezvous), and the
/// receiver matches every message, with wildcards, in the order sent.
#[test]
fn sends_at_once_keep_order_behind_queued_ones() {
    let mut es = group(3, 3, 64, true);
    let bufs: Vec<Vec<u8>> = (0..8u8).map(|i| vec![i; 1 + i as usize]).collect();
    // SAFETY (every send_now below): the buffers outlive the calls.
    unsafe {
        // Refused, with nothing left behind: synchronous, longer than a frame.
        assert!(!es[0].send_now(&send_args(&bufs[1], 2, 0, 1, true)));
        assert!(!es[0].send_now(&send_args(&[0u8; 65], 2, 0, 1, false)));
        assert_eq!(es[0].live_requests(), 0);
        // Three fit the channel; the fourth does not and is queued by the ordinary path;
        // then nothing may pass it.
        for (i, b) in bufs.iter().enumerate().take(3) {
            assert!(es[0].send_now(&send_args(b, 2, 0, i as i32, false)));
        }
        assert!(!es[0].send_now(&send_args(&bufs[3], 2, 0, 3, false)));
    }
    let queued = send(&mut es[0], &bufs[3], 2, 0, 3, false);
    // SAFETY: as above.
    assert!(!unsafe { es[0].send_now(&send_args(&bufs[4], 2, 0, 4, false)) });
    let later = send(&mut es[0], &bufs[4], 2, 0, 4, false);
    // Rank 1 writes at once too; the receiver's wildcards see each sender's order.
    // SAFETY: as above.
    assert!(unsafe { es[1].send_now(&send_args(&bufs[7], 2, 1, 9, false)) });
    let mut from0 = vec![];
    let mut got1 = false;
    for _ in 0..6 {
        let mut o = vec![0u8; 16];
        let st = {
            let r = recv(&mut es[2], &mut o, ANY_SRC, ANY_TAG);
            wait_on(&mut es, 2, r)
        };
        if st.source == 1 {
            assert_eq!((st.tag, &o[..st.bytes]), (9, &bufs[7][..]));
            got1 = true;
        } else {
            assert_eq!(&o[..st.bytes], &bufs[st.tag as usize][..]);
            from0.push(st.tag);
        }
    }
    assert!(got1);
    assert_eq!(from0, [0, 1, 2, 3, 4]);
    wait_on(&mut es, 0, queued);
    wait_on(&mut es, 0, later);
    for e in &es {
        assert_eq!(e.live_requests(), 0);
    }
}

/// A send to this rank written at once ([`Engine::send_now`]) is delivered before it returns,
/// to a posted receive or the unexpected queue, without a request; it is refused while an
/// earlier send to this rank waits in the loopback queue (a rendezvous), and the receives see
/// every message in the order sent.
#[test]
fn sends_to_self_at_once_keep_order_behind_the_loopback_queue() {
    let mut es = group(2, 4, 64, true);
    let small: Vec<Vec<u8>> = (0..4u8).map(|i| vec![i + 1; 3 + i as usize]).collect();
    let big = vec![7u8; LIMIT + 1];
    // Into a posted receive: complete at once.
    let mut o = vec![0u8; 16];
    let posted = recv(&mut es[0], &mut o, 0, 20);
    // SAFETY (every send_now below): the buffers outlive the calls.
    assert!(unsafe { es[0].send_now(&send_args(&small[0], 0, 0, 20, false)) });
    assert_eq!(es[0].test(posted).map(|s| s.bytes), Some(3));
    assert_eq!(&o[..3], &small[0][..]);
    // Into the unexpected queue; then a rendezvous waits in the loopback queue and a send
    // at once may not pass it.
    assert!(unsafe { es[0].send_now(&send_args(&small[1], 0, 0, 21, false)) });
    assert_eq!(es[0].live_requests(), 0);
    let rndv = send(&mut es[0], &big, 0, 0, 22, false);
    assert!(!unsafe { es[0].send_now(&send_args(&small[2], 0, 0, 23, false)) });
    let later = send(&mut es[0], &small[2], 0, 0, 23, false);
    let mut tags = vec![];
    for want in [&small[1], &big, &small[2]] {
        let mut o = vec![0u8; LIMIT + 8];
        let r = recv(&mut es[0], &mut o, 0, ANY_TAG);
        let st = wait_on(&mut es, 0, r);
        assert_eq!(&o[..st.bytes], &want[..]);
        tags.push(st.tag);
    }
    assert_eq!(tags, [21, 22, 23]);
    wait_on(&mut es, 0, rndv);
    wait_on(&mut es, 0, later);
    assert!(unsafe { es[0].send_now(&send_args(&small[3], 0, 0, 24, false)) });
    let mut o = vec![0u8; 16];
    let r = recv(&mut es[0], &mut o, ANY_SRC, 24);
    assert_eq!(wait_on(&mut es, 0, r).bytes, 6);
    // A receive posted on the very buffer then sent from (stream_api's MPI_Irecv and MPI_Send
    // of one int to self): the data arrives whole (debug builds check that no copy overlaps).
    let mut same = vec![9u8, 8, 7, 6];
    let r = recv(&mut es[0], &mut same, 0, 25);
    let args = SendArgs {
        buf: same.as_ptr(),
        ..send_args(&[0u8; 4], 0, 0, 25, false)
    };
    assert!(unsafe { es[0].send_now(&args) });
    assert_eq!(wait_on(&mut es, 0, r).bytes, 4);
    assert_eq!(same, [9, 8, 7, 6]);
    // Above the bound of the copy on the stack: the loopback queue, then the same result.
    let big_small = vec![3u8; SELF_NOW_MAX + 1];
    assert!(!unsafe { es[0].send_now(&send_args(&big_small, 0, 0, 26, false)) });
    assert_eq!(es[0].live_requests(), 0);
}

/// In-process frames that take payloads of up to `wide` bytes to rank 1 and `narrow` to any
/// other rank (as shared-memory rings beside the network's larger frames), recording the
/// payload length of every frame sent.
struct Widths {
    inner: InprocTransport,
    narrow: usize,
    wide: usize,
    sent: std::sync::Arc<std::sync::Mutex<Vec<(usize, usize)>>>,
}

impl Transport for Widths {
    fn max_payload(&self) -> usize {
        self.narrow
    }
    fn max_payload_to(&self, dst: usize) -> usize {
        if dst == 1 {
            self.wide
        } else {
            self.narrow
        }
    }
    fn try_send(&mut self, dst: usize, hdr: &Header, payload: &[u8]) -> bool {
        assert!(payload.len() <= self.max_payload_to(dst));
        let ok = self.inner.try_send(dst, hdr, payload);
        if ok {
            self.sent.lock().unwrap().push((dst, payload.len()));
        }
        ok
    }
    fn poll(&mut self, f: &mut dyn FnMut(usize, &Header, &[u8])) -> usize {
        self.inner.poll(f)
    }
}

/// An eager message goes in frames of the largest payload its destination takes
/// ([`Transport::max_payload_to`]): one frame where it fits (sent at once, without a request),
/// several of the common size to a peer that takes only that; the data arrives whole both ways.
#[test]
fn eager_frames_take_the_largest_payload_of_their_destination() {
    let (narrow, wide, len) = (16 << 10, 64 << 10, 40_000);
    let sent = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut es: Vec<Engine> = InprocTransport::group(2, 16, wide, false)
        .into_iter()
        .enumerate()
        .map(|(r, inner)| {
            let t = Widths {
                inner,
                narrow,
                wide,
                sent: sent.clone(),
            };
            let cfg = EngineConfig {
                eager_limit: wide,
                cma_min: None,
                push_min: usize::MAX,
                share: false,
            };
            Engine::with_config(Box::new(t), r, 2, cfg)
        })
        .collect();
    let (a, b) = (pattern(len, 1), pattern(len, 2));
    // SAFETY: the buffers outlive the calls (sent at once: nothing keeps the pointer).
    assert!(unsafe { es[0].send_now(&send_args(&a, 1, 0, 5, false)) });
    assert!(!unsafe { es[1].send_now(&send_args(&b, 0, 1, 5, false)) });
    let sb = send(&mut es[1], &b, 0, 1, 5, false);
    let (mut got_a, mut got_b) = (vec![0u8; len], vec![0u8; len]);
    let ra = recv(&mut es[1], &mut got_a, 0, 5);
    let rb = recv(&mut es[0], &mut got_b, 1, 5);
    assert_eq!(wait_on(&mut es, 1, ra).bytes, len);
    assert_eq!(wait_on(&mut es, 0, rb).bytes, len);
    wait_on(&mut es, 1, sb);
    assert!(got_a == a && got_b == b);
    let frames = sent.lock().unwrap().clone();
    let to = |d: usize| -> Vec<usize> { frames.iter().filter(|f| f.0 == d).map(|f| f.1).collect() };
    assert_eq!(to(1), [len]);
    assert_eq!(to(0), [narrow, narrow, len - 2 * narrow]);
}

/// An eager send from `e` to `dst`, complete (in the transport) before it returns: only `e`
/// makes progress.
fn sent(e: &mut Engine, buf: &[u8], dst: usize, src_rank: i32, tag: i32) {
    let id = send(e, buf, dst, src_rank, tag, false);
    assert!(
        (0..1000).any(|_| e.test(id).is_some()),
        "send never completed"
    );
}

fn recv_now(e: &mut Engine, buf: &mut [u8], src: i32, tag: i32) -> Option<Status> {
    // SAFETY: the buffer is valid to write for the call.
    let r = RecvArgs {
        buf: buf.as_mut_ptr(),
        cap: buf.len(),
        ctx: 7,
        src,
        tag,
    };
    unsafe { e.recv_now(&r, true) }
}

/// A receive without a request ([`Engine::recv_now`]) takes messages already here in MPI's
/// order: each sender's order under wildcards, the first match only, never one that an
/// earlier posted receive matches; it reports truncation and zero-byte messages as a posted
/// receive does, and takes what a probe saw.
#[test]
fn receives_at_once_match_in_order() {
    let mut es = group(3, 64, 1000, true);
    let m = |i: u8| vec![i; 4 + i as usize];
    // Two senders, interleaved: 0 sends tags 1, 2, 3; 1 sends tag 2.
    sent(&mut es[0], &m(1), 2, 0, 1);
    es[2].progress();
    sent(&mut es[1], &m(5), 2, 1, 2);
    es[2].progress();
    sent(&mut es[0], &m(2), 2, 0, 2);
    sent(&mut es[0], &m(3), 2, 0, 3);
    spin(&mut es, 3);
    let mut o = [0u8; 16];
    // A specific source and any tag: rank 0's first.
    let st = recv_now(&mut es[2], &mut o, 0, ANY_TAG).unwrap();
    assert_eq!((st.source, st.tag, st.error, st.bytes), (0, 1, 0, 5));
    assert_eq!(&o[..5], &m(1)[..]);
    // Any source, tag 2: rank 1's message arrived before rank 0's second.
    let st = recv_now(&mut es[2], &mut o, ANY_SRC, 2).unwrap();
    assert_eq!((st.source, st.tag, st.bytes), (1, 2, 9));
    assert_eq!(&o[..9], &m(5)[..]);
    // Any source, any tag: then rank 0's in its order; then nothing.
    for want in [2, 3] {
        let st = recv_now(&mut es[2], &mut o, ANY_SRC, ANY_TAG).unwrap();
        assert_eq!((st.source, st.tag, st.bytes), (0, want, 4 + want as usize));
        assert_eq!(&o[..st.bytes], &m(want as u8)[..]);
    }
    assert_eq!(recv_now(&mut es[2], &mut o, ANY_SRC, ANY_TAG), None);

    // Truncation: the bytes that fit, the rest of the buffer untouched.
    let long = pattern(40, 9);
    sent(&mut es[0], &long, 2, 0, 4);
    spin(&mut es, 2);
    let mut small = [0xeeu8; 12];
    let st = recv_now(&mut es[2], &mut small[..8], 0, 4).unwrap();
    assert_eq!((st.tag, st.error, st.bytes), (4, MPI_ERR_TRUNCATE, 8));
    assert_eq!(&small[..8], &long[..8]);
    assert_eq!(&small[8..], &[0xee; 4]);
    // Zero bytes, into a zero-byte buffer.
    sent(&mut es[1], &[], 2, 1, 5);
    spin(&mut es, 2);
    let st = recv_now(&mut es[2], &mut [], 1, 5).unwrap();
    assert_eq!((st.source, st.tag, st.error, st.bytes), (1, 5, 0, 0));

    // A probe sees the message the receive then takes.
    sent(&mut es[0], &m(6), 2, 0, 6);
    spin(&mut es, 2);
    let seen = es[2].iprobe(7, ANY_SRC, ANY_TAG).unwrap();
    let st = recv_now(&mut es[2], &mut o, ANY_SRC, ANY_TAG).unwrap();
    assert_eq!(st, seen);
    assert_eq!(&o[..st.bytes], &m(6)[..]);

    // A receive posted earlier takes the first message, the one at once the second.
    let mut first = [0u8; 16];
    let posted = recv(&mut es[2], &mut first, 0, ANY_TAG);
    sent(&mut es[0], &m(7), 2, 0, 7);
    sent(&mut es[0], &m(8), 2, 0, 8);
    spin(&mut es, 2);
    let st = recv_now(&mut es[2], &mut o, 0, ANY_TAG).unwrap();
    assert_eq!((st.tag, &o[..st.bytes]), (8, &m(8)[..]));
    let st = wait_on(&mut es, 2, posted);
    assert_eq!((st.tag, &first[..st.bytes]), (7, &m(7)[..]));

    // Messages not yet taken from the transport: a small receive looks once.
    sent(&mut es[1], &m(9), 2, 1, 9);
    let st = recv_now(&mut es[2], &mut o, 1, 9).unwrap();
    assert_eq!((st.tag, &o[..st.bytes]), (9, &m(9)[..]));
    for e in &es {
        assert_eq!(e.live_requests(), 0);
    }
}

fn direct(e: &mut Engine, buf: &mut [u8], src: i32, tag: i32) -> DirectStart {
    let r = RecvArgs {
        buf: buf.as_mut_ptr(),
        cap: buf.len(),
        ctx: 7,
        src,
        tag,
    };
    // SAFETY: every test keeps the buffer alive and untouched until the receive is done (or
    // abandons it).
    unsafe { e.recv_direct(&r).unwrap() }
}

/// Progress every engine until engine `who`'s receive waiting without a request is done:
/// `Ok` with its status, or `Err` with the request it became.
fn direct_wait(es: &mut [Engine], who: usize) -> Result<Status, ReqId> {
    for _ in 0..100_000 {
        for e in es.iter_mut() {
            e.progress();
        }
        if let Some(out) = es[who].direct_poll() {
            return out;
        }
    }
    panic!("the receive waiting without a request was never done");
}

/// A blocking receive waiting without a request ([`Engine::recv_direct`]) stands for the first
/// posted receive: it takes the first matching message before a receive posted after it, and
/// only one; messages it does not match are queued as unexpected ones; it reports truncation
/// as a posted receive does; a second such receive (another thread's) or one made while a
/// receive is posted is posted instead; a message already here is received at once; once
/// given up, nothing writes its buffer.
#[test]
fn blocking_receives_wait_without_a_request() {
    let mut es = group(3, 64, 1000, true);
    let m = |i: u8| vec![i; 4 + i as usize];
    let mut a = [0u8; 16];
    let mut b = [0u8; 16];
    let mut c = [0u8; 16];
    assert!(matches!(
        direct(&mut es[2], &mut a, ANY_SRC, 5),
        DirectStart::Waiting
    ));
    // Another thread's blocking receive, and a receive posted after the first: both posted.
    let DirectStart::Posted(second) = direct(&mut es[2], &mut b, ANY_SRC, 5) else {
        panic!("a second receive waiting without a request");
    };
    let third = recv(&mut es[2], &mut c, ANY_SRC, ANY_TAG);
    assert_eq!(es[2].direct_poll(), None);
    // A message it does not match (tag 4) goes to the posted receive that does; then the
    // three tag-5 messages in order: the waiting receive first.
    sent(&mut es[0], &m(1), 2, 0, 4);
    es[2].progress();
    sent(&mut es[1], &m(2), 2, 1, 5);
    es[2].progress();
    sent(&mut es[0], &m(3), 2, 0, 5);
    let st = direct_wait(&mut es, 2).expect("received without a request");
    assert_eq!((st.source, st.tag, st.error, st.bytes), (1, 5, 0, 6));
    assert_eq!(&a[..6], &m(2)[..]);
    assert_eq!(es[2].direct_poll(), None, "done once");
    let st = wait_on(&mut es, 2, third);
    assert_eq!((st.source, st.tag, &c[..st.bytes]), (0, 4, &m(1)[..]));
    let st = wait_on(&mut es, 2, second);
    assert_eq!((st.source, st.tag, &b[..st.bytes]), (0, 5, &m(3)[..]));

    // With a receive posted, a blocking one is posted behind it.
    let first = recv(&mut es[2], &mut b, 0, 6);
    let DirectStart::Posted(behind) = direct(&mut es[2], &mut a, 0, 6) else {
        panic!("waits without a request ahead of a posted receive");
    };
    sent(&mut es[0], &m(4), 2, 0, 6);
    sent(&mut es[0], &m(5), 2, 0, 6);
    assert_eq!(wait_on(&mut es, 2, first).bytes, 8);
    assert_eq!(wait_on(&mut es, 2, behind).bytes, 9);
    assert_eq!((&b[..8], &a[..9]), (&m(4)[..], &m(5)[..]));

    // Truncation: the bytes that fit, the rest of the buffer untouched.
    let long = pattern(40, 9);
    let mut small = [0xeeu8; 12];
    assert!(matches!(
        direct(&mut es[2], &mut small[..8], 0, 7),
        DirectStart::Waiting
    ));
    sent(&mut es[0], &long, 2, 0, 7);
    let st = direct_wait(&mut es, 2).unwrap();
    assert_eq!((st.tag, st.error, st.bytes), (7, MPI_ERR_TRUNCATE, 8));
    assert_eq!((&small[..8], &small[8..]), (&long[..8], &[0xee; 4][..]));

    // A message already here is received at once.
    sent(&mut es[1], &m(6), 2, 1, 8);
    spin(&mut es, 2);
    let DirectStart::Received(st) = direct(&mut es[2], &mut a, 1, 8) else {
        panic!("a message already here not received at once");
    };
    assert_eq!((st.source, st.tag, &a[..st.bytes]), (1, 8, &m(6)[..]));

    // Given up: the message that comes later is queued, the buffer untouched.
    let mut gone = [0x55u8; 16];
    assert!(matches!(
        direct(&mut es[2], &mut gone, 0, 9),
        DirectStart::Waiting
    ));
    es[2].direct_abandon();
    sent(&mut es[0], &m(7), 2, 0, 9);
    spin(&mut es, 2);
    assert_eq!(gone, [0x55; 16]);
    assert_eq!(
        recv_now(&mut es[2], &mut a, 0, 9).map(|s| s.bytes),
        Some(11)
    );
    for e in &es {
        assert_eq!(e.live_requests(), 0);
    }
}

/// A message that needs a request (synchronous, rendezvous, fragments still to come) makes the
/// receive waiting without one a posted request at the head of the queue, which then receives
/// it (and acknowledges a synchronous send); a later receive posted meanwhile, matching the
/// same messages, takes the next one.
#[test]
fn blocking_receives_become_requests_for_messages_that_need_one() {
    // 100-byte frames: a 250-byte eager message comes in three.
    let mut es = group(2, 8, 100, true);
    let sync = pattern(10, 1);
    let frags = pattern(250, 3);
    let big = pattern(LIMIT + 1, 2);
    for (i, msg) in [&sync, &frags, &big].into_iter().enumerate() {
        let mut got = vec![0u8; msg.len()];
        let mut next = [0u8; 8];
        assert!(matches!(
            direct(&mut es[1], &mut got, 0, ANY_TAG),
            DirectStart::Waiting
        ));
        let later = recv(&mut es[1], &mut next, 0, ANY_TAG);
        let s = send(&mut es[0], msg, 1, 0, i as i32, i == 0);
        let s2 = send(&mut es[0], &[7u8; 8], 1, 0, 50, false);
        let Err(id) = direct_wait(&mut es, 1) else {
            panic!("message {i} received without a request");
        };
        let st = wait_on(&mut es, 1, id);
        assert_eq!((st.tag, st.bytes), (i as i32, msg.len()));
        assert_eq!(&got, msg);
        assert!(wait_on(&mut es, 0, s).error == 0 && wait_on(&mut es, 0, s2).error == 0);
        let st = wait_on(&mut es, 1, later);
        assert_eq!((st.tag, next), (50, [7u8; 8]));
    }
    for e in &es {
        assert_eq!(e.live_requests(), 0);
    }
}

/// A message that needs a posted receive (synchronous, rendezvous, fragments still to come)
/// is left first in line by [`Engine::recv_now`]: a later simple one does not pass it, and
/// the posted receive takes it.
#[test]
fn receives_at_once_leave_what_needs_a_request() {
    // 100-byte frames, two to a channel: a 250-byte eager message waits for its last frame.
    let mut es = group(2, 2, 100, true);
    let sync = pattern(10, 1);
    let big = pattern(LIMIT + 1, 2);
    let frags = pattern(250, 3);
    let simple = pattern(5, 4);
    for (tag, data, is_sync) in [(1, &sync, true), (2, &big, false), (3, &frags, false)] {
        let s = send(&mut es[0], data, 1, 0, tag, is_sync);
        let later = send(&mut es[0], &simple, 1, 0, 4, false);
        es[1].progress();
        let mut o = vec![0u8; LIMIT + 1];
        assert_eq!(
            recv_now(&mut es[1], &mut o[..8], 0, ANY_TAG),
            None,
            "tag {tag}"
        );
        let r = recv(&mut es[1], &mut o, 0, ANY_TAG);
        let st = wait_on(&mut es, 1, r);
        assert_eq!((st.tag, st.bytes), (tag, data.len()));
        assert!(o[..st.bytes] == data[..]);
        wait_on(&mut es, 0, s);
        wait_on(&mut es, 0, later);
        let st = recv_now(&mut es[1], &mut o[..8], 0, ANY_TAG).unwrap();
        assert_eq!((st.tag, &o[..st.bytes]), (4, &simple[..]));
    }
    for e in &es {
        assert_eq!(e.live_requests(), 0);
    }
}

#[test]
fn posted_receives_match_in_post_order_and_contexts_are_separate() {
    let mut es = group(2, 64, 1000, true);
    let mut a = [0u8; 4];
    let mut b = [0u8; 4];
    let mut c = [0u8; 4];
    let ra = recv(&mut es[1], &mut a, ANY_SRC, ANY_TAG);
    let rb = recv(&mut es[1], &mut b, 0, 8);
    // Another context id with the same source and tag does not match.
    // SAFETY: c outlives the request.
    let rc = unsafe { es[1].irecv(c.as_mut_ptr(), 4, 99, 0, 8).unwrap() };
    let s1 = send(&mut es[0], b"1111", 1, 0, 8, false);
    let s2 = send(&mut es[0], b"2222", 1, 0, 8, false);
    assert_eq!(wait_on(&mut es, 1, ra).tag, 8);
    assert_eq!(wait_on(&mut es, 1, rb).tag, 8);
    assert_eq!((&a, &b), (b"1111", b"2222"));
    spin(&mut es, 5);
    assert!(es[1].test(rc).is_none());
    assert!(es[1].cancel(rc));
    assert!(es[1].test(rc).unwrap().cancelled);
    wait_on(&mut es, 0, s1);
    wait_on(&mut es, 0, s2);
    let _ = &mut c;
}

#[test]
fn probe_and_matched_probe() {
    let mut es = group(2, 64, 1000, false);
    assert!(es[1].iprobe(7, ANY_SRC, ANY_TAG).is_none());
    let m1 = pattern(300, 1);
    let m2 = pattern(LIMIT * 2, 2); // rendezvous
    let s1 = send(&mut es[0], &m1, 1, 0, 11, false);
    let s2 = send(&mut es[0], &m2, 1, 0, 11, false);
    spin(&mut es, 5);
    let st = es[1].iprobe(7, 0, 11).unwrap();
    assert_eq!((st.source, st.tag, st.bytes), (0, 11, 300));
    assert!(es[1].iprobe(7, 1, 11).is_none());
    assert!(es[1].iprobe(8, 0, 11).is_none());
    // improbe takes the first message out of matching...
    let (msg, st) = es[1].improbe(7, ANY_SRC, 11).unwrap();
    assert_eq!(st.bytes, 300);
    // ...so a probe now sees the second one, and so does a plain receive.
    assert_eq!(es[1].iprobe(7, ANY_SRC, ANY_TAG).unwrap().bytes, m2.len());
    let (msg2, st2) = es[1].improbe(7, 0, ANY_TAG).unwrap();
    assert_eq!(st2.bytes, m2.len());
    let mut o2 = vec![0u8; m2.len()];
    // SAFETY: o2 outlives the request.
    let r2 = unsafe { es[1].imrecv(msg2, o2.as_mut_ptr(), o2.len()).unwrap() };
    let mut o1 = vec![0u8; 300];
    // SAFETY: o1 outlives the request.
    let r1 = unsafe { es[1].imrecv(msg, o1.as_mut_ptr(), o1.len()).unwrap() };
    assert_eq!(wait_on(&mut es, 1, r1).bytes, 300);
    assert_eq!(wait_on(&mut es, 1, r2).bytes, m2.len());
    assert!(o1 == m1 && o2 == m2);
    // A message handle can be received only once.
    // SAFETY: error path, nothing is written.
    assert!(unsafe { es[1].imrecv(msg, o1.as_mut_ptr(), 1) }.is_err());
    wait_on(&mut es, 0, s1);
    wait_on(&mut es, 0, s2);
}

#[test]
fn cancel_receive_not_send() {
    let mut es = group(2, 64, 1000, true);
    let mut o = [0u8; 8];
    let r = recv(&mut es[1], &mut o, 0, 1);
    assert!(es[1].cancel(r));
    let st = es[1].test(r).unwrap();
    assert!(st.cancelled);
    // The message now goes to the unexpected queue, not to the cancelled receive.
    let s = send(&mut es[0], b"abcdefgh", 1, 0, 1, false);
    spin(&mut es, 3);
    assert_eq!(o, [0u8; 8]);
    assert!(!es[0].cancel(s));
    let st = wait_on(&mut es, 0, s);
    assert!(!st.cancelled);
    let r = recv(&mut es[1], &mut o, 0, 1);
    wait_on(&mut es, 1, r);
    assert_eq!(&o, b"abcdefgh");
    // A matched receive cannot be cancelled.
    let big = pattern(LIMIT * 2, 9);
    let mut ob = vec![0u8; big.len()];
    let r = recv(&mut es[1], &mut ob, 0, 2);
    let s = send(&mut es[0], &big, 1, 0, 2, false);
    es[1].progress();
    assert!(!es[1].cancel(r));
    assert!(!wait_on(&mut es, 1, r).cancelled);
    wait_on(&mut es, 0, s);
    assert!(ob == big);
}

fn truncation(cma: bool) {
    let mut es = group(2, 8, 1000, cma);
    for &n in &[10usize, 2500, LIMIT + 100, 100_000] {
        for posted_first in [true, false] {
            let data = pattern(n, 4);
            let cap = n / 2;
            let mut out = vec![0xEEu8; n];
            let (s, r) = if posted_first {
                let r = recv(&mut es[1], &mut out[..cap], 0, 3);
                (send(&mut es[0], &data, 1, 0, 3, false), r)
            } else {
                let s = send(&mut es[0], &data, 1, 0, 3, false);
                spin(&mut es, 4);
                (s, recv(&mut es[1], &mut out[..cap], 0, 3))
            };
            let st = wait_on(&mut es, 1, r);
            assert_eq!((st.error, st.bytes), (MPI_ERR_TRUNCATE, cap));
            assert!(out[..cap] == data[..cap]);
            assert!(
                out[cap..].iter().all(|&x| x == 0xEE),
                "wrote past the receive buffer"
            );
            assert_eq!(wait_on(&mut es, 0, s).error, 0);
        }
    }
    // Nothing is left over: a following message is received intact.
    let s = send(&mut es[0], b"next", 1, 0, 3, false);
    let mut o = [0u8; 4];
    let r = recv(&mut es[1], &mut o, 0, 3);
    assert_eq!(wait_on(&mut es, 1, r).error, 0);
    assert_eq!(&o, b"next");
    wait_on(&mut es, 0, s);
}

#[test]
fn truncation_cma() {
    truncation(true);
}

#[test]
fn truncation_pipelined() {
    truncation(false);
}

#[test]
fn sync_send_waits_for_match() {
    for n in [0usize, 8, 2500, LIMIT * 2] {
        for dst in [0usize, 1] {
            let mut es = group(2, 64, 1000, true);
            let data = pattern(n, 1);
            let s = send(&mut es[0], &data, dst, 0, 6, true);
            spin(&mut es, 20);
            assert!(
                es[0].test(s).is_none(),
                "sync send of {n} bytes to {dst} completed before a match"
            );
            let mut out = vec![0u8; n];
            let r = recv(&mut es[dst], &mut out, 0, 6);
            wait_on(&mut es, dst, r);
            wait_on(&mut es, 0, s);
            assert!(out == data);
        }
    }
}

#[test]
fn freed_requests_are_released() {
    let mut es = group(2, 64, 1000, false);
    let data = pattern(LIMIT * 3, 5);
    let s = send(&mut es[0], &data, 1, 0, 1, false);
    es[0].free(s);
    let mut out = vec![0u8; data.len()];
    let r = recv(&mut es[1], &mut out, 0, 1);
    wait_on(&mut es, 1, r);
    spin(&mut es, 5);
    assert!(out == data);
    assert_eq!(es[0].live_requests(), 0);
}

/// A detached send (eager frames still queued, or a rendezvous not yet matched) delivers the
/// data it had when detached, though its caller's buffer changes afterwards.
#[test]
fn detached_sends_no_longer_read_the_callers_buffer() {
    for len in [LIMIT, LIMIT * 3] {
        let mut es = group(2, 2, 1000, false);
        let want = pattern(len, 9);
        let mut data = want.clone();
        let s = send(&mut es[0], &data, 1, 0, 4, false);
        es[0].progress();
        es[0].detach(s);
        data.fill(0xee);
        es[0].free(s);
        let mut out = vec![0u8; len];
        let r = recv(&mut es[1], &mut out, 0, 4);
        wait_on(&mut es, 1, r);
        spin(&mut es, 5);
        assert!(out == want, "len {len}");
        assert_eq!(es[0].live_requests(), 0);
    }
}

/// `n` engines over real shared-memory transports in this process (one per thread in the tests).
fn shm_group(n: usize, ring: usize, cma: bool) -> Vec<Engine> {
    use crate::transport::shm::ShmTransport;
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let job = format!(
        "eng{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let mut ts: Vec<ShmTransport> = (0..n)
        .map(|r| ShmTransport::create_with(&job, r, n, ring, cma).unwrap())
        .collect();
    for t in ts.iter_mut() {
        t.attach_peers().unwrap();
    }
    for t in ts.iter_mut() {
        t.unlink();
    }
    ts.into_iter()
        .enumerate()
        .map(|(r, t)| {
            Engine::with_config(
                Box::new(t),
                r,
                n,
                EngineConfig {
                    eager_limit: LIMIT,
                    cma_min: Some(0),
                    push_min: usize::MAX,
                    share: true,
                },
            )
        })
        .collect()
}

/// Every rank sends to every other rank (mixed sizes, both protocols) from its own thread.
fn all_to_all_threads(n: usize, cma: bool) {
    all_to_all(group(n, 16, 2000, cma));
}

fn all_to_all(es: Vec<Engine>) {
    let n = es.len();
    let sizes = [0usize, 1, 100, LIMIT, LIMIT + 1, 70_000];
    let handles: Vec<_> = es
        .into_iter()
        .map(|mut e| {
            std::thread::spawn(move || {
                let me = e.world_rank();
                let sends: Vec<Vec<u8>> = sizes.iter().map(|&s| pattern(s, me as u8)).collect();
                let mut outs: Vec<Vec<u8>> = (0..n * sizes.len())
                    .map(|i| vec![0u8; sizes[i % sizes.len()]])
                    .collect();
                let mut reqs = vec![];
                for (i, o) in outs.iter_mut().enumerate() {
                    let (src, k) = (i / sizes.len(), i % sizes.len());
                    if src != me {
                        reqs.push(recv(&mut e, o, src as i32, k as i32));
                    }
                }
                for d in 0..n {
                    if d != me {
                        for (k, b) in sends.iter().enumerate() {
                            reqs.push(send(&mut e, b, d, me as i32, k as i32, k % 2 == 0));
                        }
                    }
                }
                for r in reqs {
                    let st = e.wait(r);
                    assert_eq!(st.error, 0);
                }
                for (i, o) in outs.iter().enumerate() {
                    let (src, k) = (i / sizes.len(), i % sizes.len());
                    if src != me {
                        assert!(
                            *o == pattern(sizes[k], src as u8),
                            "rank {me}: bad data from {src}, size {}",
                            sizes[k]
                        );
                    }
                }
                assert_eq!(e.live_requests(), 0);
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn threads_all_to_all_cma() {
    all_to_all_threads(4, true);
}

#[test]
fn threads_all_to_all_pipelined() {
    all_to_all_threads(3, false);
}

#[test]
fn shm_threads_all_to_all_five_ranks() {
    // Rings of 4 KiB (frames of up to 968 bytes): fragmentation and backpressure on every pair.
    all_to_all(shm_group(5, 4096, false));
    all_to_all(shm_group(4, 64 << 10, true));
    // Oversubscribed: 7 ranks on a 2-core machine must still finish quickly (back-off).
    all_to_all(shm_group(7, 16 << 10, true));
}

mod coll_exec {
    use super::*;
    use crate::coll::schedule::{BufId, Region, Schedule, Step};
    use crate::engine::coll::CollExec;
    use std::sync::Arc;

    fn reg(buf: BufId, off: usize, len: usize) -> Region {
        Region { buf, off, len }
    }

    /// A non-commutative byte op: inout = 2 * input + inout.
    fn op() -> crate::engine::coll::ReduceFn {
        Box::new(|a: &[u8], b: &mut [u8]| {
            for (x, y) in a.iter().zip(b.iter_mut()) {
                *y = x.wrapping_mul(2).wrapping_add(*y);
            }
            Ok(())
        })
    }

    #[test]
    fn local_steps_reduce_and_reduce_rev() {
        let mut es = group(1, 4, 1000, false);
        let send = [1u8, 2, 3, 4];
        let mut recv = [10u8, 20, 30, 40];
        let sched = Schedule {
            steps: vec![
                Step::Copy {
                    src: reg(BufId::Send, 0, 4),
                    dst: reg(BufId::Tmp, 0, 4),
                },
                // recv = 2*tmp + recv
                Step::Reduce {
                    src: reg(BufId::Tmp, 0, 4),
                    dst: reg(BufId::Recv, 0, 4),
                },
                // tmp = 2*tmp + recv   (dst op src with dst = tmp)
                Step::ReduceRev {
                    src: reg(BufId::Recv, 0, 4),
                    dst: reg(BufId::Tmp, 0, 4),
                },
                Step::Copy {
                    src: reg(BufId::Tmp, 0, 4),
                    dst: reg(BufId::Recv, 0, 4),
                },
            ],
            tmp_len: 4,
        };
        let peers: Arc<[usize]> = Arc::from(vec![0usize]);
        // SAFETY: send/recv outlive the executor.
        let mut x = unsafe {
            CollExec::new(
                sched,
                send.as_ptr(),
                recv.as_mut_ptr(),
                1,
                -10,
                peers,
                0,
                op(),
            )
        };
        assert!(x.advance(&mut es[0]).unwrap());
        // recv after Reduce: 2*s + r = 12, 24, 36, 48; tmp after ReduceRev: 2*s + that.
        assert_eq!(recv, [14, 28, 42, 56]);
    }

    /// Naive allreduce: everyone sends its vector to everyone, then reduces in rank order with
    /// ReduceRev (dst = dst op src), so the non-commutative op is applied as ((x0 op x1) op x2)...
    fn allreduce_schedule(n: usize, me: usize, len: usize) -> Schedule {
        let mut steps = vec![];
        for p in 0..n {
            if p != me {
                steps.push(Step::Send {
                    peer: p,
                    src: reg(BufId::Send, 0, len),
                });
                steps.push(Step::Recv {
                    peer: p,
                    dst: reg(BufId::Tmp, p * len, len),
                });
            }
        }
        steps.push(Step::Copy {
            src: reg(BufId::Send, 0, len),
            dst: reg(BufId::Tmp, me * len, len),
        });
        steps.push(Step::Wait);
        steps.push(Step::Copy {
            src: reg(BufId::Tmp, 0, len),
            dst: reg(BufId::Recv, 0, len),
        });
        for p in 1..n {
            steps.push(Step::ReduceRev {
                src: reg(BufId::Tmp, p * len, len),
                dst: reg(BufId::Recv, 0, len),
            });
        }
        Schedule {
            steps,
            tmp_len: n * len,
        }
    }

    fn expected(n: usize, len: usize, seed: u8) -> Vec<u8> {
        let mut acc = pattern(len, seed);
        for p in 1..n {
            let xp = pattern(len, seed.wrapping_add(p as u8));
            for i in 0..len {
                acc[i] = acc[i].wrapping_mul(2).wrapping_add(xp[i]);
            }
        }
        acc
    }

    fn on_threads(n: usize, cma: bool, body: fn(&mut Engine)) {
        let es = group(n, 16, 1500, cma);
        let hs: Vec<_> = es
            .into_iter()
            .map(|mut e| {
                std::thread::spawn(move || {
                    body(&mut e);
                    // Let peers finish before this engine goes away.
                    for _ in 0..1000 {
                        e.progress();
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
    }

    #[test]
    fn allreduce_schedule_over_threads() {
        on_threads(4, false, |e| {
            let (n, me, len) = (4, e.world_rank(), 5000);
            let mine = pattern(len, me as u8);
            let mut out = vec![0u8; len];
            let peers: Arc<[usize]> = Arc::from((0..n).collect::<Vec<_>>());
            // SAFETY: mine/out outlive the executor.
            let mut x = unsafe {
                CollExec::new(
                    allreduce_schedule(n, me, len),
                    mine.as_ptr(),
                    out.as_mut_ptr(),
                    3,
                    -5,
                    peers,
                    me,
                    op(),
                )
            };
            let mut b = Backoff::new();
            while !x.advance(e).unwrap() {
                if e.progress() {
                    b.reset()
                } else {
                    b.snooze()
                }
            }
            assert!(
                out == expected(n, len, 0),
                "rank {me}: wrong allreduce result"
            );
        });
    }

    #[test]
    fn overlapping_nonblocking_collectives() {
        on_threads(3, true, |e| {
            let (n, me) = (3, e.world_rank());
            let (l1, l2) = (100, 9000);
            let a = pattern(l1, me as u8);
            let b = pattern(l2, 50 + me as u8);
            let mut oa = vec![0u8; l1];
            let mut ob = vec![0u8; l2];
            let peers: Arc<[usize]> = Arc::from((0..n).collect::<Vec<_>>());
            // SAFETY: the buffers outlive the collectives (waited for below).
            let (x1, x2) = unsafe {
                (
                    CollExec::new(
                        allreduce_schedule(n, me, l1),
                        a.as_ptr(),
                        oa.as_mut_ptr(),
                        3,
                        -5,
                        peers.clone(),
                        me,
                        op(),
                    ),
                    CollExec::new(
                        allreduce_schedule(n, me, l2),
                        b.as_ptr(),
                        ob.as_mut_ptr(),
                        3,
                        -6,
                        peers,
                        me,
                        op(),
                    ),
                )
            };
            // Start in opposite orders on different ranks: tags keep them apart.
            let (r1, r2) = if me % 2 == 0 {
                let r2 = e.start_coll(x2);
                (e.start_coll(x1), r2)
            } else {
                let r1 = e.start_coll(x1);
                (r1, e.start_coll(x2))
            };
            assert_eq!(e.wait(r2).error, 0);
            assert_eq!(e.wait(r1).error, 0);
            assert!(oa == expected(n, l1, 0));
            assert!(ob == expected(n, l2, 50));
            assert_eq!(e.live_requests(), 0);
        });
    }

    #[test]
    fn collective_truncation_is_reported() {
        let mut es = group(2, 16, 1500, true);
        let peers: Arc<[usize]> = Arc::from(vec![0usize, 1]);
        let big = [1u8; 8];
        let mut small = [0u8; 4];
        let s0 = Schedule {
            steps: vec![
                Step::Send {
                    peer: 1,
                    src: reg(BufId::Send, 0, 8),
                },
                Step::Wait,
            ],
            tmp_len: 0,
        };
        let s1 = Schedule {
            steps: vec![
                Step::Recv {
                    peer: 0,
                    dst: reg(BufId::Recv, 0, 4),
                },
                Step::Wait,
            ],
            tmp_len: 0,
        };
        // SAFETY: buffers outlive the executors.
        let (x0, x1) = unsafe {
            (
                CollExec::new(
                    s0,
                    big.as_ptr(),
                    std::ptr::null_mut(),
                    3,
                    -7,
                    peers.clone(),
                    0,
                    op(),
                ),
                CollExec::new(
                    s1,
                    std::ptr::null(),
                    small.as_mut_ptr(),
                    3,
                    -7,
                    peers,
                    1,
                    op(),
                ),
            )
        };
        let r0 = es[0].start_coll(x0);
        let r1 = es[1].start_coll(x1);
        assert_eq!(wait_on(&mut es, 1, r1).error, MPI_ERR_TRUNCATE);
        assert_eq!(wait_on(&mut es, 0, r0).error, 0);
        assert_eq!(small, [1u8; 4]);
    }
}

#[test]
fn zero_byte_messages_with_null_buffers() {
    for dst in [0usize, 1] {
        let mut es = group(2, 8, 1000, false);
        for posted_first in [true, false] {
            let a = SendArgs {
                buf: std::ptr::null(),
                len: 0,
                dst_world: dst,
                ctx: 7,
                src_rank: 0,
                tag: 1,
                sync: true,
                dev: None,
                note: None,
            };
            let mut rr = None;
            if posted_first {
                // SAFETY: a zero-byte receive never touches its buffer.
                rr = Some(unsafe { es[dst].irecv(std::ptr::null_mut(), 0, 7, 0, 1).unwrap() });
            }
            // SAFETY: a zero-byte send never reads its buffer.
            let s = unsafe { es[0].isend(a).unwrap() };
            spin(&mut es, 3);
            // SAFETY: as above.
            let r = rr.unwrap_or_else(|| unsafe {
                es[dst].irecv(std::ptr::null_mut(), 0, 7, 0, 1).unwrap()
            });
            let st = wait_on(&mut es, dst, r);
            assert_eq!((st.bytes, st.error, st.tag), (0, 0, 1));
            wait_on(&mut es, 0, s);
        }
        // A non-empty message into a zero-byte receive is truncated, not written.
        let s = send(&mut es[0], b"xyz", dst, 0, 2, false);
        // SAFETY: a zero-capacity receive never writes.
        let r = unsafe { es[dst].irecv(std::ptr::null_mut(), 0, 7, 0, 2).unwrap() };
        assert_eq!(wait_on(&mut es, dst, r).error, MPI_ERR_TRUNCATE);
        wait_on(&mut es, 0, s);
    }
}

/// Host-memory stand-in for the device copies: "device memory" is host memory registered as
/// such; exports are (address, length); peer copies are memcpy that report done after a few
/// polls (or fail when told to); a pipe numbers its messages in chunks of [`fake_dev::CHUNK`]
/// bytes in the order the receiver takes them, and the sender's side of message `start` copies
/// into that receive's buffer (the receiver's side is done only after that).
pub(super) mod fake_dev {
    use super::devcopy::{pending, DevCopy, Pending, EXPORT_BYTES};
    use std::cell::Cell;
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    /// Bytes per pipe chunk: an engine test message spans several.
    pub const CHUNK: usize = 4096;

    /// One pipe (sender -> receiver): the next chunk number, and the receives taken from it
    /// by their first chunk: (buffer, length, whether the sender's copy ran).
    #[derive(Default)]
    struct Pipe {
        next: u64,
        takes: HashMap<u64, (usize, usize, Arc<AtomicBool>)>,
    }

    #[derive(Default)]
    pub struct Book {
        /// Ranges that count as device memory.
        pub device: Vec<(usize, usize)>,
        pub reads: usize,
        pub writes: usize,
        /// The next read reports failure when polled; the next write fails when issued.
        pub fail_read: bool,
        pub fail_write: bool,
        /// Senders get no pipe (they stage); receivers fail to open one (they ask for streams).
        pub no_pipe: bool,
        pub fail_pipe_recv: bool,
        /// Receivers answer that the sender's buffer is not worth mapping (stream it).
        pub not_worth_mapping: bool,
        pub offers: usize,
        /// Pipes by (sender, receiver).
        pipes: HashMap<(usize, usize), Pipe>,
    }

    #[derive(Clone, Default)]
    pub struct Fake(pub Arc<Mutex<Book>>);

    struct Later {
        left: Cell<u32>,
        fail: bool,
    }

    impl Pending for Later {
        fn done(&self) -> Result<bool, String> {
            if self.left.get() > 0 {
                self.left.set(self.left.get() - 1);
                return Ok(false);
            }
            if self.fail {
                Err("injected copy failure".into())
            } else {
                Ok(true)
            }
        }
    }

    /// One side of a piped message: done a few polls after the sender's copy ran.
    struct Side {
        copied: Arc<AtomicBool>,
        left: Cell<u32>,
    }

    impl Side {
        fn after(copied: Arc<AtomicBool>) -> Box<dyn Pending> {
            pending(Side {
                copied,
                left: Cell::new(3),
            })
        }
    }

    impl Pending for Side {
        fn done(&self) -> Result<bool, String> {
            if !self.copied.load(Ordering::Acquire) {
                return Ok(false);
            }
            if self.left.get() > 0 {
                self.left.set(self.left.get() - 1);
                return Ok(false);
            }
            Ok(true)
        }
    }

    pub fn export(addr: usize, len: usize) -> [u8; EXPORT_BYTES] {
        let mut e = [0u8; EXPORT_BYTES];
        e[..8].copy_from_slice(&(addr as u64).to_le_bytes());
        e[8..16].copy_from_slice(&(len as u64).to_le_bytes());
        e
    }

    fn decode(e: &[u8]) -> (usize, usize) {
        let w = |i: usize| u64::from_le_bytes(e[i..i + 8].try_into().unwrap()) as usize;
        (w(0), w(8))
    }

    impl Fake {
        /// A peer copy of `len` bytes from `src` to `dst` (`cap`: the export's length): a
        /// write that is told to fail fails when issued, a read when polled; otherwise the
        /// bytes move now and the copy reports done after three polls.
        unsafe fn copy(
            &self,
            src: usize,
            dst: usize,
            len: usize,
            cap: usize,
            write: bool,
        ) -> Result<Option<Box<dyn Pending>>, String> {
            if len > cap {
                return Err("longer than the export".into());
            }
            let mut b = self.0.lock().unwrap();
            let fail = std::mem::take(if write {
                &mut b.fail_write
            } else {
                &mut b.fail_read
            });
            if write && fail {
                return Err("injected mapping failure".into());
            }
            *(if write { &mut b.writes } else { &mut b.reads }) += 1;
            if !fail {
                std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, len);
            }
            Ok((len > 0).then(|| {
                pending(Later {
                    left: Cell::new(3),
                    fail,
                })
            }))
        }
    }

    impl DevCopy for Fake {
        fn export_range(&self, addr: usize, len: usize) -> Option<Box<[u8]>> {
            let b = self.0.lock().unwrap();
            b.device
                .iter()
                .any(|&(a, l)| addr >= a && addr + len <= a + l)
                .then(|| export(addr, len).to_vec().into_boxed_slice())
        }

        fn worth_mapping(
            &self,
            _peer: usize,
            _export: &[u8],
            _dst: usize,
            _dev: bool,
            _len: usize,
        ) -> bool {
            !self.0.lock().unwrap().not_worth_mapping
        }

        unsafe fn read(
            &self,
            _peer: usize,
            e: &[u8],
            dst: usize,
            _dev: bool,
            len: usize,
        ) -> Result<Option<Box<dyn Pending>>, String> {
            let (src, cap) = decode(e);
            self.copy(src, dst, len, cap, false)
        }

        unsafe fn write(
            &self,
            _peer: usize,
            e: &[u8],
            src: usize,
            len: usize,
        ) -> Result<Option<Box<dyn Pending>>, String> {
            let (dst, cap) = decode(e);
            self.copy(src, dst, len, cap, true)
        }

        fn pipe_offer(&self, me: usize, peer: usize) -> Option<Box<[u8]>> {
            let mut b = self.0.lock().unwrap();
            if b.no_pipe {
                return None;
            }
            b.offers += 1;
            b.pipes.entry((me, peer)).or_default();
            Some(CHUNK.to_le_bytes().to_vec().into_boxed_slice())
        }

        unsafe fn pipe_recv(
            &self,
            me: usize,
            peer: usize,
            desc: &[u8],
            dst: usize,
            _dev: bool,
            len: usize,
        ) -> Result<(u64, Box<dyn Pending>), String> {
            assert_eq!(desc, CHUNK.to_le_bytes(), "the sender's pipe descriptor");
            let mut b = self.0.lock().unwrap();
            if std::mem::take(&mut b.fail_pipe_recv) {
                return Err("injected pipe failure".into());
            }
            let pipe = b.pipes.get_mut(&(peer, me)).ok_or("no pipe offered")?;
            let start = pipe.next;
            pipe.next += len.div_ceil(CHUNK).max(1) as u64;
            let copied = Arc::new(AtomicBool::new(false));
            pipe.takes.insert(start, (dst, len, copied.clone()));
            Ok((start, Side::after(copied)))
        }

        unsafe fn pipe_send(
            &self,
            me: usize,
            peer: usize,
            start: u64,
            src: usize,
            len: usize,
        ) -> Result<Box<dyn Pending>, String> {
            let mut b = self.0.lock().unwrap();
            let pipe = b.pipes.get_mut(&(me, peer)).ok_or("no pipe offered")?;
            let (dst, cap, copied) = pipe.takes.remove(&start).ok_or("no receive numbered so")?;
            assert_eq!(len, cap, "the sender writes what the receiver takes");
            std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, len);
            copied.store(true, Ordering::Release);
            Ok(Side::after(Arc::new(AtomicBool::new(true))))
        }

        unsafe fn fill(
            &self,
            dst: usize,
            len: usize,
            read: &mut dyn FnMut(usize, &mut [u8]) -> bool,
        ) -> Result<bool, String> {
            Ok(read(0, std::slice::from_raw_parts_mut(dst as *mut u8, len)))
        }

        fn staging(&self, _dst: usize, _len: usize) -> Option<super::devcopy::HostStage> {
            None
        }

        unsafe fn htod(&self, dst: usize, data: &[u8]) -> Result<(), String> {
            std::ptr::copy_nonoverlapping(data.as_ptr(), dst as *mut u8, data.len());
            Ok(())
        }

        unsafe fn dtoh(&self, src: usize, len: usize) -> Result<Vec<u8>, String> {
            Ok(std::slice::from_raw_parts(src as *const u8, len).to_vec())
        }
    }
}

/// Two engines with the fake device copies and a push threshold.
fn dev_pair(push_min: usize) -> (Vec<Engine>, fake_dev::Fake) {
    dev_group(2, 8, LIMIT, push_min)
}

/// `n` engines of one node (the in-process transport, `slots` queue slots per pair) sharing
/// buffers (CUDA IPC faked) with the fake device copies, an eager limit and a push threshold.
pub(super) fn dev_group(
    n: usize,
    slots: usize,
    eager_limit: usize,
    push_min: usize,
) -> (Vec<Engine>, fake_dev::Fake) {
    let fake = fake_dev::Fake::default();
    let es = InprocTransport::group(n, slots, 1000, false)
        .into_iter()
        .enumerate()
        .map(|(r, t)| {
            let mut e = Engine::with_config(
                Box::new(t),
                r,
                n,
                EngineConfig {
                    eager_limit,
                    cma_min: Some(0),
                    push_min,
                    share: true,
                },
            );
            e.set_device_copies(Box::new(fake.clone()));
            e
        })
        .collect();
    (es, fake)
}

/// A device send of `src` (registered as device memory) from rank 0 into receive buffer `dst`
/// of rank 1 (device memory when `dev`), the receive posted first or not, the send buffer
/// exported (CUDA IPC) or, when `pipe`, not. Returns the receive's status.
fn dev_message(
    es: &mut [Engine],
    fake: &fake_dev::Fake,
    src: &[u8],
    dst: &mut [u8],
    dev: bool,
    posted_first: bool,
    pipe: bool,
) -> Status {
    {
        let mut b = fake.0.lock().unwrap();
        b.device = vec![(src.as_ptr() as usize, src.len())];
        if dev {
            b.device.push((dst.as_ptr() as usize, dst.len()));
        }
    }
    let post = |e: &mut Engine, dst: &mut [u8]| {
        // SAFETY: dst outlives the request, which is waited for below.
        unsafe {
            e.irecv_dev(dst.as_mut_ptr(), dst.len(), dev, 7, 0, 5)
                .unwrap()
        }
    };
    let mut r = posted_first.then(|| post(&mut es[1], dst));
    let a = SendArgs {
        buf: src.as_ptr(),
        len: src.len(),
        dst_world: 1,
        ctx: 7,
        src_rank: 0,
        tag: 5,
        sync: false,
        dev: Some(if pipe {
            DevSend::Pipe
        } else {
            DevSend::Ipc(fake_dev::export(src.as_ptr() as usize, src.len()))
        }),
        note: None,
    };
    // SAFETY: src outlives the request, which is waited for below.
    let s = unsafe { es[0].isend(a).unwrap() };
    spin(es, 2);
    let r = r.take().unwrap_or_else(|| post(&mut es[1], dst));
    let st = wait_on(es, 1, r);
    assert_eq!(wait_on(es, 0, s).error, 0, "the send completes cleanly");
    assert_eq!(es[0].live_requests() + es[1].live_requests(), 0);
    st
}

/// Device rendezvous: from the push threshold on the sender writes (PUT/DONE), below it the
/// receiver reads; a host receive buffer is always read; copies finish a few polls after they
/// start; truncation writes only what fits.
#[test]
fn device_rendezvous_push_and_pull() {
    let len = 3 * LIMIT + 5;
    let src = pattern(len, 9);
    for (push_min, dev, pushed) in [
        (0, true, true),
        (LIMIT, true, true),
        (len + 1, true, false),
        (usize::MAX, true, false),
        (0, false, false),
    ] {
        for posted_first in [true, false] {
            let (mut es, fake) = dev_pair(push_min);
            let mut dst = vec![0u8; len];
            let st = dev_message(&mut es, &fake, &src, &mut dst, dev, posted_first, false);
            assert_eq!((st.error, st.bytes, st.source, st.tag), (0, len, 0, 5));
            assert!(
                dst == src,
                "push_min {push_min} dev {dev}: every byte lands"
            );
            let b = fake.0.lock().unwrap();
            assert_eq!(
                (b.writes, b.reads),
                if pushed { (1, 0) } else { (0, 1) },
                "push_min {push_min} dev {dev} posted_first {posted_first}"
            );
        }
    }
    // Truncated: the push writes what fits and leaves the rest of nothing else touched.
    let (mut es, fake) = dev_pair(0);
    let mut dst = vec![0xeeu8; len];
    let cap = LIMIT + 3;
    let st = dev_message(&mut es, &fake, &src, &mut dst[..cap], true, true, false);
    assert_eq!((st.error, st.bytes), (MPI_ERR_TRUNCATE, cap));
    assert_eq!(dst[..cap], src[..cap]);
    assert!(dst[cap..].iter().all(|&b| b == 0xee));
    assert_eq!(fake.0.lock().unwrap().writes, 1);
}

/// A sender that cannot map the receiver's buffer, and a pull whose copy fails, fall back to
/// streamed data (staged from the device): the message still arrives whole.
#[test]
fn device_rendezvous_falls_back_to_streaming() {
    let len = 5 * LIMIT + 1;
    let src = pattern(len, 3);
    for push in [true, false] {
        let (mut es, fake) = dev_pair(if push { 0 } else { usize::MAX });
        {
            let mut b = fake.0.lock().unwrap();
            b.fail_write = push;
            b.fail_read = !push;
        }
        let mut dst = vec![0u8; len];
        let st = dev_message(&mut es, &fake, &src, &mut dst, true, true, false);
        assert_eq!((st.error, st.bytes), (0, len));
        assert!(
            dst == src,
            "push {push}: streamed instead, every byte lands"
        );
        let b = fake.0.lock().unwrap();
        assert_eq!((b.writes, b.reads), if push { (0, 0) } else { (0, 1) });
    }
}

/// A pulled device message whose buffer the receiver does not map yet (a small message from a
/// buffer not seen before) is streamed by its sender, into device and host receive buffers,
/// posted first or not: no peer copy is made, every byte lands.
#[test]
fn device_rendezvous_not_worth_mapping_is_streamed() {
    let len = LIMIT / 2 + 3;
    let src = pattern(len, 17);
    for dev in [true, false] {
        for posted_first in [true, false] {
            let (mut es, fake) = dev_pair(usize::MAX);
            fake.0.lock().unwrap().not_worth_mapping = true;
            let mut dst = vec![0u8; len];
            let st = dev_message(&mut es, &fake, &src, &mut dst, dev, posted_first, false);
            assert_eq!((st.error, st.bytes, st.source, st.tag), (0, len, 0, 5));
            assert!(
                dst == src,
                "dev {dev} posted_first {posted_first}: every byte lands"
            );
            let b = fake.0.lock().unwrap();
            assert_eq!(
                (b.writes, b.reads),
                (0, 0),
                "streamed, not copied peer to peer"
            );
        }
    }
}

/// Piped device rendezvous (the sender's buffer not exportable): into device and host receive
/// buffers, posted first or not, truncated; the message spans many pipe slots; no peer copy is
/// made, one pipe is offered per message.
#[test]
fn piped_device_rendezvous() {
    let len = 5 * fake_dev::CHUNK + 77;
    let src = pattern(len, 21);
    for dev in [true, false] {
        for posted_first in [true, false] {
            let (mut es, fake) = dev_pair(0);
            let mut dst = vec![0u8; len];
            let st = dev_message(&mut es, &fake, &src, &mut dst, dev, posted_first, true);
            assert_eq!((st.error, st.bytes, st.source, st.tag), (0, len, 0, 5));
            assert!(
                dst == src,
                "dev {dev} posted_first {posted_first}: every byte lands"
            );
            let b = fake.0.lock().unwrap();
            assert_eq!((b.reads, b.writes, b.offers), (0, 0, 1));
        }
    }
    let (mut es, fake) = dev_pair(0);
    let mut dst = vec![0xeeu8; len];
    let cap = 2 * fake_dev::CHUNK + 3;
    let st = dev_message(&mut es, &fake, &src, &mut dst[..cap], true, true, true);
    assert_eq!((st.error, st.bytes), (MPI_ERR_TRUNCATE, cap));
    assert_eq!(dst[..cap], src[..cap]);
    assert!(
        dst[cap..].iter().all(|&b| b == 0xee),
        "nothing past the receive buffer"
    );
}

/// Without a pipe the sender stages its device buffer and sends a host message; a receiver
/// that cannot open the pipe asks for the data streamed (staged by the sender): both arrive.
#[test]
fn piped_rendezvous_fallbacks() {
    let len = 3 * fake_dev::CHUNK + 9;
    let src = pattern(len, 5);
    for (no_pipe, fail_recv) in [(true, false), (false, true)] {
        let (mut es, fake) = dev_pair(0);
        {
            let mut b = fake.0.lock().unwrap();
            b.no_pipe = no_pipe;
            b.fail_pipe_recv = fail_recv;
        }
        let mut dst = vec![0u8; len];
        let st = dev_message(&mut es, &fake, &src, &mut dst, !no_pipe, true, true);
        assert_eq!((st.error, st.bytes), (0, len));
        assert!(
            dst == src,
            "no_pipe {no_pipe} fail_recv {fail_recv}: every byte lands"
        );
        assert_eq!(fake.0.lock().unwrap().offers, usize::from(!no_pipe));
    }
}

/// Several piped messages in flight both ways, received in another order than sent (the
/// receiver numbers them in the order it matches them), of lengths from one byte to many
/// slots: each lands whole in its own buffer.
#[test]
fn piped_messages_in_any_match_order() {
    let (mut es, fake) = dev_pair(0);
    let lens = [
        LIMIT + 1,
        9 * fake_dev::CHUNK + 1,
        2 * LIMIT,
        3 * LIMIT + 4095,
    ];
    let srcs: Vec<Vec<Vec<u8>>> = (0..2)
        .map(|r| {
            lens.iter()
                .enumerate()
                .map(|(i, &n)| pattern(n, (r * 10 + i) as u8))
                .collect()
        })
        .collect();
    fake.0.lock().unwrap().device = srcs
        .iter()
        .flatten()
        .map(|v| (v.as_ptr() as usize, v.len()))
        .collect();
    let mut dsts: Vec<Vec<Vec<u8>>> = (0..2)
        .map(|_| lens.iter().map(|&n| vec![0u8; n]).collect())
        .collect();
    let mut sends = Vec::new();
    for r in 0..2 {
        for (i, v) in srcs[r].iter().enumerate() {
            let a = SendArgs {
                buf: v.as_ptr(),
                len: v.len(),
                dst_world: 1 - r,
                ctx: 7,
                src_rank: r as i32,
                tag: i as i32,
                sync: false,
                dev: Some(DevSend::Pipe),
                note: None,
            };
            // SAFETY: the buffers outlive the requests, waited for below.
            sends.push((r, unsafe { es[r].isend(a).unwrap() }));
        }
    }
    spin(&mut es, 3);
    let mut recvs = Vec::new();
    for r in 0..2 {
        for i in [2usize, 0, 3, 1] {
            let d = &mut dsts[r][i];
            // SAFETY: as above.
            let q = unsafe {
                es[r]
                    .irecv_dev(
                        d.as_mut_ptr(),
                        d.len(),
                        i % 2 == 0,
                        7,
                        (1 - r) as i32,
                        i as i32,
                    )
                    .unwrap()
            };
            recvs.push((r, q));
        }
    }
    for (r, q) in recvs {
        assert_eq!(wait_on(&mut es, r, q).error, 0);
    }
    for (r, q) in sends {
        assert_eq!(wait_on(&mut es, r, q).error, 0);
    }
    for r in 0..2 {
        for i in 0..lens.len() {
            assert!(
                dsts[r][i] == srcs[1 - r][i],
                "rank {r} message {i} lands whole"
            );
        }
    }
    assert_eq!(fake.0.lock().unwrap().offers, 8);
}

/// Shared reads ([`super::coop`]): both ranks copy chunks of one large host message.
mod shared_read {
    use super::*;
    use crate::engine::coop::{CHUNK, MIN_BYTES};

    const BIG: usize = 8 * CHUNK + 123;

    fn slots_in_use(e: &Engine, peer: usize) -> u64 {
        e.st.slots_busy[peer]
    }

    #[test]
    fn the_sender_writes_chunks_once_the_receiver_opens_the_slot() {
        let mut es = group(2, 16, 2000, true);
        let data = pattern(BIG, 5);
        let mut out = vec![0u8; BIG];
        let s = send(&mut es[0], &data, 1, 0, 1, false);
        assert_eq!(slots_in_use(&es[0], 1), 1);
        es[1].progress(); // the RTS arrives before a receive: unexpected
        let r = recv(&mut es[1], &mut out, 0, 1); // matches: the slot opens
        es[0].progress(); // the sender claims every chunk and writes it
        assert!(out == data, "the sender wrote the whole message");
        assert!(!es[0].is_done(s), "the send waits for the receiver's FIN");
        let st = wait_on(&mut es, 1, r);
        assert_eq!((st.error, st.bytes), (0, BIG));
        wait_on(&mut es, 0, s);
        assert_eq!(slots_in_use(&es[0], 1), 0, "FIN frees the slot");
    }

    #[test]
    fn a_sender_outside_mpi_leaves_every_chunk_to_the_receiver() {
        let mut es = group(2, 16, 2000, true);
        let data = pattern(BIG, 9);
        let mut out = vec![0u8; BIG];
        let r = recv(&mut es[1], &mut out, 0, 1);
        let s = send(&mut es[0], &data, 1, 0, 1, false);
        let mut rounds = 0;
        while !es[1].is_done(r) {
            es[1].progress();
            rounds += 1;
            assert!(
                rounds < 1000,
                "the receiver waits for a sender that is not copying"
            );
        }
        assert_eq!(es[1].test(r).unwrap().error, 0);
        assert!(out == data);
        wait_on(&mut es, 0, s);
        assert_eq!(slots_in_use(&es[0], 1), 0);
    }

    #[test]
    fn crowded_ranks_read_alone() {
        let mut es = group(2, 16, 2000, true);
        es[1].set_crowded(true);
        let data = pattern(BIG, 3);
        let mut out = vec![0u8; BIG];
        let s = send(&mut es[0], &data, 1, 0, 1, false);
        es[1].progress();
        let r = recv(&mut es[1], &mut out, 0, 1);
        es[0].progress();
        assert!(
            out.iter().all(|&b| b == 0),
            "the sender wrote into a plain read"
        );
        wait_on(&mut es, 1, r);
        assert!(out == data);
        wait_on(&mut es, 0, s);
        assert_eq!(slots_in_use(&es[0], 1), 0);
    }

    #[test]
    fn a_truncated_shared_read_takes_what_fits() {
        let mut es = group(2, 16, 2000, true);
        let data = pattern(BIG, 1);
        let cap = MIN_BYTES + CHUNK / 2 + 3;
        let mut out = vec![0u8; cap + 10];
        let s = send(&mut es[0], &data, 1, 0, 1, false);
        es[1].progress();
        let r = recv(&mut es[1], &mut out[..cap], 0, 1);
        es[0].progress();
        let st = wait_on(&mut es, 1, r);
        assert_eq!((st.error, st.bytes), (MPI_ERR_TRUNCATE, cap));
        assert!(out[..cap] == data[..cap] && out[cap..].iter().all(|&b| b == 0));
        wait_on(&mut es, 0, s);
    }

    /// More sends in flight than slots, from one reused buffer into one reused buffer: those
    /// without a slot are plain reads, and every slot is free again afterwards.
    #[test]
    fn more_messages_than_slots() {
        let mut es = group(2, 200, 2000, true);
        let n = crate::transport::shm::COPY_SLOTS + 6;
        let data = pattern(MIN_BYTES, 4);
        let mut out = vec![0u8; MIN_BYTES];
        let rs: Vec<ReqId> = (0..n).map(|_| recv(&mut es[1], &mut out, 0, 2)).collect();
        let ss: Vec<ReqId> = (0..n)
            .map(|_| send(&mut es[0], &data, 1, 0, 2, false))
            .collect();
        assert_eq!(slots_in_use(&es[0], 1), u64::MAX);
        // Alternate single progress calls: the sender helps with whatever is open.
        for r in rs {
            assert_eq!(wait_on(&mut es, 1, r).error, 0);
        }
        for s in ss {
            wait_on(&mut es, 0, s);
        }
        assert!(out == data);
        assert_eq!(slots_in_use(&es[0], 1), 0);
        assert_eq!(es[0].live_requests() + es[1].live_requests(), 0);
    }

    /// Two threads over shared memory with real single copies (this process reads and writes
    /// itself): windows of large messages into distinct buffers, both ranks progressing at
    /// once, so chunks go both ways.
    #[test]
    fn shm_threads_windowed_large_messages() {
        let es = shm_group(2, 64 << 10, true);
        let sizes = [MIN_BYTES, BIG, 3 << 20];
        let handles: Vec<_> = es
            .into_iter()
            .map(|mut e| {
                std::thread::spawn(move || {
                    let me = e.world_rank();
                    for round in 0..4u8 {
                        if me == 0 {
                            let bufs: Vec<Vec<u8>> =
                                sizes.iter().map(|&n| pattern(n, round)).collect();
                            let ss: Vec<ReqId> = bufs
                                .iter()
                                .enumerate()
                                .map(|(k, b)| send(&mut e, b, 1, 0, k as i32, false))
                                .collect();
                            for s in ss {
                                assert_eq!(e.wait(s).error, 0);
                            }
                        } else {
                            let mut outs: Vec<Vec<u8>> =
                                sizes.iter().map(|&n| vec![0u8; n]).collect();
                            let rs: Vec<ReqId> = outs
                                .iter_mut()
                                .enumerate()
                                .map(|(k, o)| recv(&mut e, o, 0, k as i32))
                                .collect();
                            for r in rs {
                                assert_eq!(e.wait(r).error, 0);
                            }
                            for (k, o) in outs.iter().enumerate() {
                                assert!(*o == pattern(sizes[k], round), "round {round} size {k}");
                            }
                        }
                    }
                    assert_eq!(e.live_requests(), 0);
                    e
                })
            })
            .collect();
        let es: Vec<Engine> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert_eq!(es[0].st.slots_busy[1], 0);
    }
}

fn send_noted(e: &mut Engine, buf: &[u8], dst: usize, tag: i32, note: Note) -> ReqId {
    let a = SendArgs {
        buf: buf.as_ptr(),
        len: buf.len(),
        dst_world: dst,
        ctx: 7,
        src_rank: e.world_rank() as i32,
        tag,
        sync: false,
        dev: None,
        note: Some(note),
    };
    // SAFETY: every test keeps `buf` alive until the request is waited for.
    unsafe { e.isend(a).unwrap() }
}

/// A note travels with eager messages of one and several frames, rendezvous messages and
/// messages to this rank, posted before or after the message came, and takes no data bytes;
/// messages without one have none. Unexpected messages show theirs.
#[test]
fn notes_travel_beside_the_data() {
    let maxp = 256;
    for size in [
        0,
        1,
        100,
        maxp - NOTE_BYTES,
        maxp,
        3 * maxp + 5,
        LIMIT + 1,
        50_000,
    ] {
        for (dst, pre_post) in [(1, true), (1, false), (0, true), (0, false)] {
            let mut es = group(2, 64, maxp, true);
            let note: Note = std::array::from_fn(|i| (i as u8) ^ (size as u8));
            let data = pattern(size, 3);
            let mut out = vec![0u8; size];
            let r = pre_post.then(|| recv(&mut es[dst], &mut out, 0, 9));
            let s = send_noted(&mut es[0], &data, dst, 9, note);
            let r = match r {
                Some(r) => r,
                None => {
                    spin(&mut es, 4);
                    if size <= LIMIT {
                        let waiting = es[dst].unexpected_notes(7, 9);
                        assert_eq!(waiting, vec![(0, note)], "size {size}");
                        assert!(es[dst].unexpected_notes(7, 8).is_empty());
                    }
                    recv(&mut es[dst], &mut out, 0, 9)
                }
            };
            let mut got = None;
            for _ in 0..1_000_000 {
                spin(&mut es, 1);
                if es[dst].is_done(r) {
                    got = Some(es[dst].note(r));
                    break;
                }
            }
            assert_eq!(got, Some(Some(note)), "size {size} to {dst}");
            let st = wait_on(&mut es, dst, r);
            assert_eq!((st.error, st.bytes), (MPI_SUCCESS, size), "size {size}");
            assert_eq!(out, data, "size {size} to {dst}");
            wait_on(&mut es, 0, s);
            // Without a note: none.
            let r = recv(&mut es[1], &mut out, 0, 10);
            let s = send(&mut es[0], &data, 1, 0, 10, false);
            wait_on(&mut es, 0, s);
            while !es[1].is_done(r) {
                spin(&mut es, 1);
            }
            assert_eq!(es[1].note(r), None);
            wait_on(&mut es, 1, r);
        }
    }
}

/// Messages of a collective call the receiver gave up (`Engine::refuse`): a rendezvous sent
/// before (waiting unexpected) or after is refused with the receiver's note and completes with
/// MPI_ERR_OTHER; a complete eager message is dropped; other tags and contexts are untouched,
/// and a context forgotten (its communicator freed) is received again.
#[test]
fn messages_of_a_given_up_call_are_refused() {
    let mut es = group(2, 8, 1000, false);
    let note: Note = std::array::from_fn(|i| i as u8 ^ 0x5a);
    let big = pattern(3 * LIMIT, 1);
    let small = pattern(100, 2);
    // Before the call is given up: waits unexpected, then refused.
    let early = send(&mut es[0], &big, 1, 0, 9, false);
    let eager = send(&mut es[0], &small, 1, 0, 9, false);
    wait_on(&mut es, 0, eager);
    spin(&mut es, 4);
    assert!(es[1].iprobe(7, 0, 9).is_some());
    es[1].refuse(7, 9, Some(note));
    assert!(
        es[1].iprobe(7, 0, 9).is_none(),
        "the call's messages are gone"
    );
    assert_eq!(es[0].refused(early), None, "not answered yet");
    while !es[0].is_done(early) {
        spin(&mut es, 1);
    }
    assert_eq!(es[0].refused(early), Some(Some(note)));
    let st = wait_on(&mut es, 0, early);
    assert_eq!(st.error, crate::standard::consts::MPI_ERR_OTHER);
    // After: refused at arrival (rendezvous), dropped (eager); another tag is received.
    let late = send(&mut es[0], &big, 1, 0, 9, false);
    let eager = send(&mut es[0], &small, 1, 0, 9, false);
    let other = send(&mut es[0], &small, 1, 0, 10, false);
    while !es[0].is_done(late) {
        spin(&mut es, 1);
    }
    assert_eq!(es[0].refused(late), Some(Some(note)));
    wait_on(&mut es, 0, late);
    wait_on(&mut es, 0, eager);
    wait_on(&mut es, 0, other);
    spin(&mut es, 4);
    assert!(es[1].iprobe(7, 0, 9).is_none());
    let mut out = vec![0u8; 100];
    let r = recv(&mut es[1], &mut out, 0, 10);
    assert_eq!(wait_on(&mut es, 1, r).error, MPI_SUCCESS);
    assert_eq!(out, small);
    // The communicator is freed: its context's calls count from 0 again.
    es[1].forget_refused(7);
    let s = send(&mut es[0], &big, 1, 0, 9, false);
    let mut out = vec![0u8; big.len()];
    let r = recv(&mut es[1], &mut out, 0, 9);
    assert_eq!(wait_on(&mut es, 1, r).error, MPI_SUCCESS);
    assert_eq!(out, big);
    assert_eq!(wait_on(&mut es, 0, s).error, MPI_SUCCESS);
    assert_eq!(es[0].live_requests() + es[1].live_requests(), 0);
}

/// A rank asks a rank of another node for its record of a call (`Engine::ask_record`): the
/// answer is what that rank's own ring holds, nothing while it has none; asking again drops
/// the earlier answer.
#[test]
fn records_are_asked_of_another_engine() {
    use crate::coll::CollKind;
    use collcheck::{Path, Record, Rings, AREA};
    let mut es = group(2, 8, 1000, false);
    let area: &'static mut [u64] = Box::leak(vec![0u64; 2 * AREA / 8].into_boxed_slice());
    let start = area.as_mut_ptr() as usize;
    // Each engine maps only its own ring, as on two nodes.
    let rings: Vec<Rings> = (0..2)
        .map(|r| {
            let bases: Vec<usize> = (0..2)
                .map(|i| if i == r { start + i * AREA } else { 0 })
                .collect();
            // SAFETY: leaked, zeroed, aligned memory of two rings, never freed.
            unsafe { Rings::new(Box::leak(bases.into_boxed_slice()), r) }
        })
        .collect();
    for (e, r) in es.iter_mut().zip(&rings) {
        e.set_records(*r);
    }
    es[0].ask_record(1, 6, 3);
    spin(&mut es, 4);
    assert_eq!(es[0].told_record(1, 6, 3), None, "rank 1 has no record yet");
    let theirs = Record::new(6, 3, CollKind::Reduce, 1, 32, Path::Schedule);
    rings[1].publish(&theirs);
    es[0].ask_record(1, 6, 3);
    spin(&mut es, 4);
    assert_eq!(es[0].told_record(1, 6, 3), Some(theirs));
    assert_eq!(es[0].told_record(1, 6, 4), None);
    assert_eq!(es[0].told_record(0, 6, 3), None);
    es[0].ask_record(1, 6, 4);
    spin(&mut es, 4);
    assert_eq!(es[0].told_record(1, 6, 4), None, "another call");
    es[0].ask_record(1, 6, 3);
    assert_eq!(
        es[0].told_record(1, 6, 3),
        None,
        "asked again: the answer is dropped"
    );
    spin(&mut es, 4);
    assert_eq!(es[0].told_record(1, 6, 3), Some(theirs));
    assert_eq!(es[0].live_requests() + es[1].live_requests(), 0);
}

/// Device copies faked in host memory whose copies finish `delay` after they start and move
/// their bytes only when first seen done (a buffer used before its copy finished shows in the
/// data), counting the copies in flight: the pipelined path between nodes (`devnet`) is tested
/// with it.
pub(super) mod slow_dev {
    use super::devcopy::{pending, DevCopy, HostStage, Pending};
    use std::cell::Cell;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    /// Copies in flight now and at most, and copies started, per direction.
    #[derive(Default)]
    pub struct Counts {
        pub dtoh_now: AtomicUsize,
        pub dtoh_peak: AtomicUsize,
        pub dtoh: AtomicUsize,
        pub htod_now: AtomicUsize,
        pub htod_peak: AtomicUsize,
        pub htod: AtomicUsize,
        /// Whole copies (`DevCopy::htod`, `DevCopy::dtoh`, `DevCopy::dtoh_stage`: staging,
        /// eager data).
        pub whole: AtomicUsize,
        /// Of those, the sends staged in the device copies' own memory (`DevCopy::dtoh_stage`).
        pub staged: AtomicUsize,
        /// Device-to-device copies (`DevCopy::dtod`).
        pub dtod: AtomicUsize,
    }

    /// `delay`: how long a copy takes; `fail`: every copy fails when polled.
    #[derive(Clone, Default)]
    pub struct Slow {
        pub counts: Arc<Counts>,
        pub delay: Duration,
        pub fail: bool,
    }

    struct Later {
        until: Instant,
        fail: bool,
        job: Cell<Option<(usize, usize, usize)>>,
        counts: Arc<Counts>,
        htod: bool,
    }

    impl Pending for Later {
        fn done(&self) -> Result<bool, String> {
            if Instant::now() < self.until {
                return Ok(false);
            }
            if self.fail {
                return Err("injected copy failure".into());
            }
            if let Some((s, d, n)) = self.job.take() {
                // SAFETY: the engine keeps both ranges until the copy is seen done.
                unsafe { std::ptr::copy_nonoverlapping(s as *const u8, d as *mut u8, n) };
                let now = if self.htod {
                    &self.counts.htod_now
                } else {
                    &self.counts.dtoh_now
                };
                now.fetch_sub(1, SeqCst);
            }
            Ok(true)
        }
    }

    impl Slow {
        /// Copies taking `delay`.
        pub fn new(delay: Duration) -> Slow {
            Slow {
                delay,
                ..Default::default()
            }
        }

        fn later(&self, s: usize, d: usize, n: usize, htod: bool) -> Box<dyn Pending> {
            let c = &self.counts;
            let (now, peak, all) = if htod {
                (&c.htod_now, &c.htod_peak, &c.htod)
            } else {
                (&c.dtoh_now, &c.dtoh_peak, &c.dtoh)
            };
            let v = now.fetch_add(1, SeqCst) + 1;
            peak.fetch_max(v, SeqCst);
            all.fetch_add(1, SeqCst);
            pending(Later {
                until: Instant::now() + self.delay,
                fail: self.fail,
                job: Cell::new(Some((s, d, n))),
                counts: c.clone(),
                htod,
            })
        }
    }

    impl DevCopy for Slow {
        fn export_range(&self, _: usize, _: usize) -> Option<Box<[u8]>> {
            None
        }
        unsafe fn read(
            &self,
            _: usize,
            _: &[u8],
            _: usize,
            _: bool,
            _: usize,
        ) -> Result<Option<Box<dyn Pending>>, String> {
            Err("no peer copies between nodes".into())
        }
        unsafe fn write(
            &self,
            _: usize,
            _: &[u8],
            _: usize,
            _: usize,
        ) -> Result<Option<Box<dyn Pending>>, String> {
            Err("no peer copies between nodes".into())
        }
        fn pipe_offer(&self, _: usize, _: usize) -> Option<Box<[u8]>> {
            None
        }
        unsafe fn pipe_recv(
            &self,
            _: usize,
            _: usize,
            _: &[u8],
            _: usize,
            _: bool,
            _: usize,
        ) -> Result<(u64, Box<dyn Pending>), String> {
            Err("no pipe between nodes".into())
        }
        unsafe fn pipe_send(
            &self,
            _: usize,
            _: usize,
            _: u64,
            _: usize,
            _: usize,
        ) -> Result<Box<dyn Pending>, String> {
            Err("no pipe between nodes".into())
        }
        unsafe fn fill(
            &self,
            _: usize,
            _: usize,
            _: &mut dyn FnMut(usize, &mut [u8]) -> bool,
        ) -> Result<bool, String> {
            Err("no single-copy reads between nodes".into())
        }
        fn staging(&self, _: usize, len: usize) -> Option<HostStage> {
            Some(Box::new(vec![0u8; len]))
        }
        unsafe fn htod(&self, dst: usize, data: &[u8]) -> Result<(), String> {
            self.counts.whole.fetch_add(1, SeqCst);
            std::ptr::copy_nonoverlapping(data.as_ptr(), dst as *mut u8, data.len());
            Ok(())
        }
        unsafe fn dtoh(&self, src: usize, len: usize) -> Result<Vec<u8>, String> {
            self.counts.whole.fetch_add(1, SeqCst);
            Ok(std::slice::from_raw_parts(src as *const u8, len).to_vec())
        }
        unsafe fn dtod(&self, dst: usize, src: usize, len: usize) -> Result<(), String> {
            self.counts.dtod.fetch_add(1, SeqCst);
            std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, len);
            Ok(())
        }
        unsafe fn dtoh_stage(&self, src: usize, len: usize) -> Result<HostStage, String> {
            self.counts.staged.fetch_add(1, SeqCst);
            self.dtoh(src, len).map(|v| Box::new(v) as HostStage)
        }
        unsafe fn dtoh_start(
            &self,
            src: usize,
            dst: *mut u8,
            len: usize,
        ) -> Result<Box<dyn Pending>, String> {
            Ok(self.later(src, dst as usize, len, false))
        }
        unsafe fn htod_start(
            &self,
            dst: usize,
            src: *const u8,
            len: usize,
        ) -> Result<Box<dyn Pending>, String> {
            Ok(self.later(src as usize, dst, len, true))
        }
    }
}

/// A device receive of an eager message of many frames gathers them in the device copies'
/// staging memory and copies the message to the device once (each device copy has a fixed
/// cost of microseconds), every byte in place.
#[test]
fn a_device_receive_of_many_frames_is_one_device_copy() {
    let mut es = group(2, 64, 256, false);
    let dev = slow_dev::Slow::default();
    let counts = dev.counts.clone();
    es[1].set_device_copies(Box::new(dev));
    let data = pattern(LIMIT, 9);
    let mut out = vec![0u8; LIMIT];
    // SAFETY: `out` outlives the receive, which is waited for below.
    let r = unsafe { es[1].irecv_dev(out.as_mut_ptr(), LIMIT, true, 7, 0, 4) }.unwrap();
    let s = send(&mut es[0], &data, 1, 0, 4, false);
    assert_eq!(wait_on(&mut es, 1, r).bytes, LIMIT);
    wait_on(&mut es, 0, s);
    assert!(out == data, "every byte lands");
    assert_eq!(
        counts.whole.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "{} frames, one device copy",
        LIMIT / 256
    );
}

/// A matched receive given up in flight writes the rest of its data into a buffer of its
/// own, not the caller's.
#[test]
fn a_detached_receive_leaves_the_callers_buffer() {
    let maxp = 256;
    let mut es = group(2, 2, maxp, false);
    let data = pattern(3000, 5);
    let mut out = vec![0u8; 3000];
    let r = recv(&mut es[1], &mut out, 0, 4);
    let s = send(&mut es[0], &data, 1, 0, 4, false);
    // The first frames only (the channel holds two), then the receive is given up.
    es[0].progress();
    es[1].progress();
    assert!(!es[1].is_done(r));
    es[1].detach(r);
    es[1].free(r);
    let seen = out.clone();
    wait_on(&mut es, 0, s);
    spin(&mut es, 100);
    assert_eq!(out, seen, "nothing written after the detach");
    assert_ne!(&out[..], &data[..]);
    assert_eq!(es[1].live_requests(), 0);
}

/// Device messages between two ranks on different "nodes": the engine over the network frames
/// of the TCP backend on loopback, with device copies faked in host memory whose copies finish
/// later (a chunk's bytes move only when its copy is first seen done, so a buffer used before
/// its copy finished shows in the data).
pub(super) mod net_device {
    use super::devnet::PipeConfig;
    use super::slow_dev::{Counts, Slow};
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    const CHUNK: usize = 8192;
    const DEPTH: usize = 3;

    /// Runs `body(engine, rank)` on two ranks joined by the TCP backend on loopback, each
    /// with its own pipeline settings and a [`Slow`] device; returns each rank's counts.
    fn pair(cfgs: [PipeConfig; 2], body: fn(&mut Engine, usize)) -> [Arc<Counts>; 2] {
        let (c, _) = pair_bulk(cfgs, None, body);
        c
    }

    /// A bulk transfer a rank handed its transport: a send (else a receive), from or into
    /// device memory, its bytes.
    pub(in crate::engine) type Handed = Arc<std::sync::Mutex<Vec<(bool, bool, usize)>>>;

    /// Network frames that say their bulk transfers take device memory (`claim`) as a backend
    /// registering it with the NIC would (GPUDirect RDMA): the buffers of the [`Slow`] device
    /// are host memory, which the TCP backend below moves; every bulk transfer handed over is
    /// recorded. Device buffers of `refuse` bytes or more do not register (as VMM memory
    /// without the GPUDirect RDMA flag): the registration check says so, and one handed over
    /// anyway fails the test (a real backend's registration would end the job).
    pub(in crate::engine) struct ClaimDev {
        pub(in crate::engine) inner: crate::transport::net::frames::NetFrames,
        pub(in crate::engine) claim: bool,
        pub(in crate::engine) refuse: usize,
        pub(in crate::engine) handed: Handed,
    }

    impl Transport for ClaimDev {
        fn max_payload(&self) -> usize {
            self.inner.max_payload()
        }
        fn try_send(&mut self, dst: usize, hdr: &Header, payload: &[u8]) -> bool {
            self.inner.try_send(dst, hdr, payload)
        }
        fn poll(&mut self, f: &mut dyn FnMut(usize, &Header, &[u8])) -> usize {
            self.inner.poll(f)
        }
        fn same_node(&self, peer: usize) -> bool {
            self.inner.same_node(peer)
        }
        fn has_channel(&self, peer: usize) -> bool {
            self.inner.has_channel(peer)
        }
        fn bulk_min(&self, peer: usize) -> Option<usize> {
            self.inner.bulk_min(peer)
        }
        fn net_direct(&self, peer: usize) -> bool {
            self.inner.net_direct(peer)
        }
        fn bulk_device(&self, peer: usize) -> bool {
            self.claim && self.inner.bulk_min(peer).is_some()
        }
        fn device_registration(&self) -> Option<crate::transport::RegCheck> {
            let refuse = self.refuse;
            Some(Arc::new(move |_, len| {
                if len >= refuse {
                    Err(format!("{len} bytes of memory the NIC cannot register"))
                } else {
                    Ok(())
                }
            }))
        }
        unsafe fn bulk_send(
            &mut self,
            dst: usize,
            id: u64,
            data: *const u8,
            len: usize,
            dev: bool,
        ) -> bool {
            assert!(
                !dev || self.claim,
                "device memory handed to a transport that said no"
            );
            assert!(
                !dev || len < self.refuse,
                "a device buffer that does not register handed over ({len} bytes)"
            );
            self.handed.lock().unwrap().push((true, dev, len));
            // SAFETY: the caller's contract (the fake device's memory is host memory).
            unsafe { self.inner.bulk_send(dst, id, data, len, false) }
        }
        unsafe fn bulk_recv(
            &mut self,
            src: usize,
            id: u64,
            buf: *mut u8,
            len: usize,
            dev: bool,
        ) -> bool {
            assert!(
                !dev || self.claim,
                "device memory handed to a transport that said no"
            );
            assert!(
                !dev || len < self.refuse,
                "a device buffer that does not register handed over ({len} bytes)"
            );
            self.handed.lock().unwrap().push((false, dev, len));
            // SAFETY: as above.
            unsafe { self.inner.bulk_recv(src, id, buf, len, false) }
        }
        fn bulk_poll(&mut self, f: &mut dyn FnMut(crate::transport::BulkDone)) -> usize {
            self.inner.bulk_poll(f)
        }
    }

    /// [`pair`] with bulk transfers from [`BULK_MIN`] bytes on, each rank's transport saying
    /// `claim[rank]` of device memory in them ([`ClaimDev`]; `None`: plain frames, no bulk
    /// transfers). Returns each rank's counts and the bulk transfers it handed over.
    fn pair_bulk(
        cfgs: [PipeConfig; 2],
        claim: Option<[bool; 2]>,
        body: fn(&mut Engine, usize),
    ) -> ([Arc<Counts>; 2], [Handed; 2]) {
        pair_refusing(cfgs, claim, [usize::MAX; 2], body)
    }

    /// [`pair_bulk`] where rank `r`'s device buffers of `refuse[r]` bytes or more do not
    /// register ([`ClaimDev`]).
    fn pair_refusing(
        cfgs: [PipeConfig; 2],
        claim: Option<[bool; 2]>,
        refuse: [usize; 2],
        body: fn(&mut Engine, usize),
    ) -> ([Arc<Counts>; 2], [Handed; 2]) {
        let mut joins = Vec::new();
        let all = crate::transport::net::lazy_tests::loopback_frames(
            2,
            2,
            Duration::from_secs(5),
            b"engine-net-device",
        );
        let handed: [Handed; 2] = Default::default();
        for (me, mut frames) in all.into_iter().enumerate() {
            let cfg = cfgs[me];
            let tp: Box<dyn Transport> = match claim {
                None => Box::new(frames),
                Some(c) => {
                    frames.set_bulk_min(Some(BULK_MIN));
                    Box::new(ClaimDev {
                        inner: frames,
                        claim: c[me],
                        refuse: refuse[me],
                        handed: handed[me].clone(),
                    })
                }
            };
            joins.push(std::thread::spawn(move || {
                let mut e = Engine::with_config(
                    tp,
                    me,
                    2,
                    EngineConfig {
                        eager_limit: LIMIT,
                        cma_min: None,
                        push_min: usize::MAX,
                        share: false,
                    },
                );
                let dev = Slow::new(Duration::from_micros(300));
                let counts = dev.counts.clone();
                e.set_device_copies(Box::new(dev));
                e.set_net_pipeline(cfg);
                body(&mut e, me);
                assert_eq!(e.live_requests(), 0, "rank {me}: no request left behind");
                counts
            }));
        }
        let out: Vec<Arc<Counts>> = joins.into_iter().map(|j| j.join().unwrap()).collect();
        ([out[0].clone(), out[1].clone()], handed)
    }

    fn wait(e: &mut Engine, r: ReqId) -> Status {
        let end = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(s) = e.test(r) {
                return s;
            }
            assert!(Instant::now() < end, "request never completed");
        }
    }

    fn dsend(e: &mut Engine, buf: &[u8], tag: i32, dev: bool) -> ReqId {
        let a = SendArgs {
            buf: buf.as_ptr(),
            len: buf.len(),
            dst_world: 1,
            ctx: 7,
            src_rank: 0,
            tag,
            sync: false,
            dev: dev.then_some(DevSend::Pipe),
            note: None,
        };
        // SAFETY: every caller waits for the request before `buf` goes.
        unsafe { e.isend(a).unwrap() }
    }

    fn drecv(e: &mut Engine, buf: &mut [u8], tag: i32, dev: bool) -> ReqId {
        // SAFETY: every caller waits for the request before `buf` goes.
        unsafe {
            e.irecv_dev(buf.as_mut_ptr(), buf.len(), dev, 7, 0, tag)
                .unwrap()
        }
    }

    const SIZES: &[usize] = &[
        0,
        1,
        LIMIT,
        LIMIT + 1,
        CHUNK,
        CHUNK * DEPTH + 5,
        100_003,
        (1 << 20) + 123,
        4 << 20,
    ];

    const ON: PipeConfig = PipeConfig {
        on: true,
        chunk: CHUNK,
        depth: DEPTH,
    };
    const OFF: PipeConfig = PipeConfig {
        on: false,
        chunk: CHUNK,
        depth: DEPTH,
    };

    /// Every size, device or host memory on either side: every byte lands, in order.
    fn every_size(e: &mut Engine, me: usize) {
        sizes_and_mixes(e, me, SIZES)
    }

    /// The sizes that take a bulk transfer (at least [`BULK_MIN`]).
    const BIG: &[usize] = &[BULK_MIN, 100_003, (1 << 20) + 123, 4 << 20];
    const BULK_MIN: usize = 64 << 10;

    fn big_sizes(e: &mut Engine, me: usize) {
        sizes_and_mixes(e, me, BIG)
    }

    /// Rank 0 sends each size to rank 1 device to device, device to host and host to device
    /// (in this order); every byte lands.
    fn sizes_and_mixes(e: &mut Engine, me: usize, sizes: &[usize]) {
        for &len in sizes {
            for (sdev, rdev) in [(true, true), (true, false), (false, true)] {
                let src = pattern(len, len as u8 ^ 0x5a);
                if me == 0 {
                    let s = dsend(e, &src, 3, sdev);
                    assert_eq!(wait(e, s).error, 0);
                } else {
                    let mut dst = vec![0u8; len];
                    let r = drecv(e, &mut dst, 3, rdev);
                    let st = wait(e, r);
                    assert_eq!((st.error, st.bytes), (0, len));
                    assert!(dst == src, "len {len} send dev {sdev} recv dev {rdev}");
                }
            }
        }
    }

    #[test]
    fn device_messages_between_nodes_every_size() {
        let [tx, rx] = pair([ON, ON], every_size);
        // The 4 MiB message alone is 512 chunks: copies overlapped on both sides, never more
        // than the depth at once.
        let (tp, rp) = (tx.dtoh_peak.load(SeqCst), rx.htod_peak.load(SeqCst));
        assert!(
            (2..=DEPTH).contains(&tp),
            "sender copies in flight at most: {tp}"
        );
        assert!(
            (2..=DEPTH).contains(&rp),
            "receiver copies in flight at most: {rp}"
        );
        assert!(tx.dtoh.load(SeqCst) >= (4 << 20) / CHUNK);
    }

    /// A sender or receiver with the pipeline off (the whole-message staging) meets one with
    /// it on: the same data.
    #[test]
    fn pipelined_and_staged_ends_work_together() {
        let [tx, _] = pair([OFF, ON], every_size);
        assert_eq!(
            tx.dtoh.load(SeqCst),
            0,
            "a staging sender copies whole buffers"
        );
        let [_, rx] = pair([ON, OFF], every_size);
        assert_eq!(
            rx.htod.load(SeqCst),
            0,
            "a staging receiver copies whole messages"
        );
        pair([OFF, OFF], every_size);
    }

    /// A device message below the bulk threshold to another node goes eagerly, in one frame:
    /// the sender stages its buffer once, in the device copies' own staging memory
    /// (`DevCopy::dtoh_stage`: page-locked and reused in the library), and the receiver copies
    /// the frame to the device once, with no pipeline or chunk copies at either end.
    #[test]
    fn an_eager_device_message_is_staged_once_and_copied_once() {
        let ([tx, rx], _) = pair_bulk([ON, ON], Some([false, false]), |e, me| {
            let len = 32 << 10;
            let src = pattern(len, 0x33);
            if me == 0 {
                let s = dsend(e, &src, 5, true);
                wait(e, s);
                let r = e.device_net_report().expect("a device message moved");
                assert!(r.starts_with("send buffers staged whole 1 (32768 B"), "{r}");
            } else {
                let mut got = vec![0u8; len];
                let r = drecv(e, &mut got, 5, true);
                assert_eq!(wait(e, r).bytes, len);
                assert!(got == src, "every byte lands");
                let r = e.device_net_report().expect("a device message moved");
                assert!(
                    r.starts_with("copies of received data to the device 1 (32768 B"),
                    "{r}"
                );
            }
        });
        let c = |a: &AtomicUsize| a.load(SeqCst);
        assert_eq!(
            (c(&tx.staged), c(&tx.whole), c(&tx.dtoh)),
            (1, 1, 0),
            "the sender: one staged copy (staged, whole, chunks)"
        );
        assert_eq!(
            (c(&rx.whole), c(&rx.htod)),
            (1, 0),
            "the receiver: one copy (whole, chunks)"
        );
    }

    /// Several device messages in flight at once, received in posting order with ANY_TAG:
    /// they match in the order sent and each gets its own data; a truncated device receive
    /// gets what fits and MPI_ERR_TRUNCATE; a cancelled device receive takes nothing.
    #[test]
    fn order_truncation_and_cancel_between_nodes() {
        pair([ON, ON], |e, me| {
            let lens = [300_000usize, 5000, 70_000, 1 << 20, 9000];
            let bufs: Vec<Vec<u8>> = lens
                .iter()
                .enumerate()
                .map(|(i, &l)| pattern(l, i as u8))
                .collect();
            if me == 0 {
                let reqs: Vec<ReqId> = bufs
                    .iter()
                    .enumerate()
                    .map(|(i, b)| dsend(e, b, i as i32, true))
                    .collect();
                for r in reqs {
                    assert_eq!(wait(e, r).error, 0);
                }
                let big = pattern(200_000, 77);
                let s = dsend(e, &big, 50, true);
                assert_eq!(wait(e, s).error, 0, "the sender of a truncated message");
                let after = pattern(20_000, 78);
                let s = dsend(e, &after, 51, true);
                assert_eq!(wait(e, s).error, 0);
            } else {
                let mut got: Vec<Vec<u8>> = lens.iter().map(|&l| vec![0u8; l]).collect();
                let reqs: Vec<ReqId> = got
                    .iter_mut()
                    .map(|g| unsafe {
                        // SAFETY: the buffers outlive the requests, waited for below.
                        e.irecv_dev(g.as_mut_ptr(), g.len(), true, 7, 0, ANY_TAG)
                            .unwrap()
                    })
                    .collect();
                for (i, r) in reqs.into_iter().enumerate() {
                    let st = wait(e, r);
                    assert_eq!((st.error, st.tag, st.bytes), (0, i as i32, lens[i]));
                }
                assert!(got == bufs, "each message into its own receive, in order");
                // A receive posted and cancelled before anything matched it.
                let mut never = vec![0u8; 100_000];
                let c = drecv(e, &mut never, 51, true);
                assert!(e.cancel(c));
                let st = wait(e, c);
                assert!(st.cancelled);
                let mut small = vec![0xeeu8; 150_000];
                let r = drecv(e, &mut small, 50, true);
                let st = wait(e, r);
                let big = pattern(200_000, 77);
                assert_eq!((st.error, st.bytes), (MPI_ERR_TRUNCATE, 150_000));
                assert!(small[..] == big[..150_000], "the bytes that fit");
                let mut after = vec![0u8; 20_000];
                let r = drecv(e, &mut after, 51, true);
                assert_eq!(wait(e, r).error, 0);
                assert!(after == pattern(20_000, 78) && never.iter().all(|&b| b == 0));
            }
        });
    }

    /// The bulk transfers of [`big_sizes`] a rank handed over: (sends from device memory,
    /// sends from host memory, receives into device memory, receives into host memory).
    fn tally(h: &Handed) -> (usize, usize, usize, usize) {
        let h = h.lock().unwrap();
        let n = |send: bool, dev: bool| h.iter().filter(|t| t.0 == send && t.1 == dev).count();
        (
            n(true, true),
            n(true, false),
            n(false, true),
            n(false, false),
        )
    }

    /// Both ranks' transports take device memory in bulk transfers: every device message of
    /// at least the bulk threshold goes as one bulk transfer between the buffers, whichever end
    /// is device memory, with no device copy at either end (nothing staged, nothing
    /// pipelined); smaller ones take the pipeline. Every byte lands either way.
    #[test]
    fn device_messages_between_nodes_go_as_gdr_bulk_transfers_where_both_can() {
        let ([tx, rx], [ht, hr]) = pair_bulk([ON, ON], Some([true, true]), big_sizes);
        let n = BIG.len();
        // Device to device and device to host: from the device; host to device: from the host.
        assert_eq!(tally(&ht), (2 * n, n, 0, 0));
        // Device to device and host to device: into the device.
        assert_eq!(tally(&hr), (0, 0, 2 * n, n));
        for (who, c) in [("sender", &tx), ("receiver", &rx)] {
            let copies = [&c.dtoh, &c.htod, &c.whole].map(|a| a.load(SeqCst));
            assert_eq!(
                copies,
                [0, 0, 0],
                "{who}: no device copy (dtoh, htod, whole)"
            );
        }
        // Every size (the small ones pipelined or eager), a sender with the pipeline off too.
        let ([tx, _], [ht, _]) = pair_bulk([ON, ON], Some([true, true]), every_size);
        assert!(
            tx.dtoh.load(SeqCst) + tx.whole.load(SeqCst) > 0,
            "the sizes below the threshold go through host memory (eagerly or pipelined)"
        );
        assert_eq!(
            tally(&ht).0,
            2 * SIZES.iter().filter(|&&z| z >= BULK_MIN).count()
        );
        pair_bulk([OFF, ON], Some([true, true]), every_size);
        pair_bulk([ON, OFF], Some([true, true]), every_size);
    }

    /// One end's transport cannot take device memory: a device buffer at that end takes the
    /// pipeline through host memory, a host buffer there still takes the bulk transfer with a
    /// device buffer at the other end; neither end ever hands device memory to a transport
    /// that said no (`ClaimDev` checks).
    #[test]
    fn a_device_end_whose_transport_cannot_takes_the_pipeline() {
        let n = BIG.len();
        // The receiver cannot: device to host goes from the device, the rest is pipelined.
        let ([tx, rx], [ht, hr]) = pair_bulk([ON, ON], Some([true, false]), big_sizes);
        assert_eq!(tally(&ht), (n, 0, 0, 0));
        assert_eq!(tally(&hr), (0, 0, 0, n));
        assert!(tx.dtoh.load(SeqCst) > 0 && rx.htod.load(SeqCst) > 0);
        // The sender cannot: host to device goes into the device, the rest is pipelined.
        let ([tx, rx], [ht, hr]) = pair_bulk([ON, ON], Some([false, true]), big_sizes);
        assert_eq!(tally(&ht), (0, n, 0, 0));
        assert_eq!(tally(&hr), (0, 0, n, 0));
        assert!(tx.dtoh.load(SeqCst) > 0 && rx.htod.load(SeqCst) > 0);
        // Neither: every device message is pipelined (no host-to-host message here).
        let (_, [ht, hr]) = pair_bulk([ON, ON], Some([false, false]), big_sizes);
        assert_eq!((tally(&ht), tally(&hr)), ((0, 0, 0, 0), (0, 0, 0, 0)));
        // Neither, with the sender's pipeline off: staged whole, as before.
        let ([tx, _], [ht, _]) = pair_bulk([OFF, ON], Some([true, false]), big_sizes);
        assert_eq!(
            tally(&ht),
            (n, 0, 0, 0),
            "device to host still from the device"
        );
        assert!(tx.whole.load(SeqCst) > 0 && tx.dtoh.load(SeqCst) == 0);
    }

    /// Both transports take device memory, but one end's device buffers of 1 MiB or more do
    /// not register (as VMM memory without the GPUDirect RDMA flag): a message with such a
    /// buffer takes the pipeline through host memory, every byte intact, whichever end it is
    /// at; the smaller ones, and those whose device end is the other one, still go as
    /// GPUDirect RDMA bulk transfers. No buffer that does not register reaches the transport
    /// (`ClaimDev` checks): the sender offers only its buffers that register, the receiver
    /// answers `BULK` only into its own.
    #[test]
    fn a_device_buffer_that_does_not_register_takes_the_pipeline() {
        const NO: usize = 1 << 20;
        let n = BIG.len();
        let small = BIG.iter().filter(|&&z| z < NO).count();
        assert!(small > 0 && small < n);
        // The receiver's large buffers: device to device and host to device of those are
        // pipelined; device to host still goes from the device (every size).
        let ([tx, rx], [ht, hr]) =
            pair_refusing([ON, ON], Some([true, true]), [usize::MAX, NO], big_sizes);
        assert_eq!(tally(&ht), (small + n, small, 0, 0));
        assert_eq!(tally(&hr), (0, 0, 2 * small, n));
        assert!(tx.dtoh.load(SeqCst) > 0 && rx.htod.load(SeqCst) > 0);
        // The sender's large buffers: device to device and device to host of those are
        // pipelined; host to device still goes into the device (every size).
        let ([tx, rx], [ht, hr]) =
            pair_refusing([ON, ON], Some([true, true]), [NO, usize::MAX], big_sizes);
        assert_eq!(tally(&ht), (2 * small, n, 0, 0));
        assert_eq!(tally(&hr), (0, 0, small + n, small));
        assert!(tx.dtoh.load(SeqCst) > 0 && rx.htod.load(SeqCst) > 0);
        // A sender staging whole (its pipeline off) and every size, at either end.
        let ([tx, _], _) =
            pair_refusing([OFF, ON], Some([true, true]), [NO, usize::MAX], every_size);
        assert!(tx.whole.load(SeqCst) > 0);
        pair_refusing([ON, ON], Some([true, true]), [usize::MAX, NO], every_size);
    }
}
