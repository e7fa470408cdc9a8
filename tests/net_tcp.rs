//! The TCP network backend over loopback (127.0.0.1 and ::1): both ends of each connection live
//! in this process and are driven from one thread (the backend's helper threads move the data).
//! Sizes 0 B..64 MiB, many messages in flight, grouped receives, threads x sockets settings,
//! and the errors: truncation, a tag the group lacks, a peer closing mid-message, bad handles,
//! a wrong secret, stray connections, refused and stalled set-up.

#[path = "support/netcheck.rs"]
mod netcheck;
#[path = "support/skip.rs"]
mod skip;

use mpi_abi::transport::net::ifname::Family;
use mpi_abi::transport::net::tcp::{Stripe, TcpConfig, TcpNet};
use mpi_abi::transport::net::{Handle, MemKind, Net, RecvBuf, Request, WaitOn, HANDLE_BYTES};
use netcheck::*;
use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

const SECRET: &[u8] = b"net-tcp-test-secret";

fn cfg(family: Family, threads: usize, socks: usize) -> TcpConfig {
    TcpConfig {
        ifname: Some("=lo".into()),
        family,
        threads,
        socks_per_thread: socks,
        connect_timeout: Duration::from_secs(5),
        accept_timeout: Duration::from_secs(5),
        stripe: Stripe::Auto,
    }
}

/// The backend on loopback, or `None` (with a recorded skip) where the family has no
/// loopback address (IPv6 disabled).
fn net_on(test: &str, family: Family, threads: usize, socks: usize) -> Option<TcpNet> {
    match TcpNet::new(cfg(family, threads, socks), SECRET) {
        Ok(n) => Some(n),
        Err(e) if family == Family::V6 => {
            skip::skip(test, &format!("no IPv6 loopback: {e}"));
            None
        }
        Err(e) => panic!("{e}"),
    }
}

const SIZES: &[usize] = &[
    0,
    1,
    7,
    4095,
    4096,
    16383,
    16384,
    16385,
    20479,
    20480,
    20481,
    65535,
    65536,
    65537,
    100_000,
    1 << 20,
    (3 << 20) + 5,
    16 << 20,
    64 << 20,
];

#[test]
fn sizes_ipv4() {
    let net = net_on("sizes_ipv4", Family::V4, 2, 2).unwrap();
    assert_eq!(net.devices()[0].addr, "127.0.0.1");
    let (mut s, mut r) = pair(&net);
    let msgs: Vec<(i32, usize)> = SIZES.iter().map(|&n| (7, n)).collect();
    xfer(&mut *s, &mut *r, &msgs, 1);
    xfer(&mut *s, &mut *r, &msgs, 8);
}

#[test]
fn sizes_ipv6() {
    let Some(net) = net_on("sizes_ipv6", Family::V6, 2, 2) else {
        return;
    };
    assert_eq!(net.devices()[0].addr, "::1");
    let (mut s, mut r) = pair(&net);
    let msgs: Vec<(i32, usize)> = SIZES.iter().map(|&n| (-3, n)).collect();
    xfer(&mut *s, &mut *r, &msgs, 4);
}

#[test]
fn threads_x_sockets_settings() {
    for (t, k) in [(1, 1), (1, 3), (3, 1), (4, 4), (16, 4)] {
        let net = net_on("threads_x_sockets_settings", Family::V4, t, k).unwrap();
        let (mut s, mut r) = pair(&net);
        let msgs: Vec<(i32, usize)> = [0, 1, 65537, 1 << 20, (5 << 20) + 3, 300_000]
            .iter()
            .map(|&n| (1, n))
            .collect();
        xfer(&mut *s, &mut *r, &msgs, 32);
    }
    let e = TcpNet::new(cfg(Family::V4, 17, 1), SECRET).err().unwrap();
    assert!(e.msg.contains("GPUMPI_NET_TCP_THREADS=17"), "{e}");
    let e = TcpNet::new(cfg(Family::V4, 8, 9), SECRET).err().unwrap();
    assert!(e.msg.contains("64 sockets"), "{e}");
}

#[test]
fn many_messages_in_flight() {
    let net = net_on("many_messages_in_flight", Family::V4, 2, 2).unwrap();
    let (mut s, mut r) = pair(&net);
    let mut x = 12345u64;
    let msgs: Vec<(i32, usize)> = (0..600)
        .map(|i| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let n = match i % 4 {
                0 => (x >> 33) as usize % 64,
                1 => (x >> 33) as usize % 8192,
                2 => (x >> 33) as usize % 200_000,
                _ => (x >> 33) as usize % (1 << 20),
            };
            (i, n)
        })
        .collect();
    xfer(&mut *s, &mut *r, &msgs, 32);
    // Beyond the slots: isend says "not yet" instead of allocating.
    let b = [0u8; 8];
    let mr = s.reg_mr(b.as_ptr(), 8, MemKind::Host).unwrap();
    let mut reqs = Vec::new();
    // SAFETY: b outlives every request (they are completed below).
    while let Some(q) = unsafe { s.isend(b.as_ptr(), 8, 0, mr) }.unwrap() {
        reqs.push(q);
    }
    assert_eq!(reqs.len(), net.devices()[0].max_requests);
    let mut rb = vec![0u8; 8 * reqs.len()];
    let rmr = r.reg_mr(rb.as_ptr(), rb.len(), MemKind::Host).unwrap();
    for (i, _) in reqs.iter().enumerate() {
        let b = RecvBuf {
            ptr: rb[8 * i..].as_mut_ptr(),
            size: 8,
            tag: 0,
            mr: rmr,
        };
        // SAFETY: rb outlives the request, completed right after.
        let q = unsafe { r.irecv(&[b]) }.unwrap().unwrap();
        let mut sz = [0];
        let end = deadline();
        while !r.test(q, &mut sz).unwrap() {
            assert!(Instant::now() < end);
        }
    }
    for q in reqs {
        let end = deadline();
        while s.test(q).unwrap().is_none() {
            assert!(Instant::now() < end);
        }
        let e = s.test(q).unwrap_err();
        assert!(
            e.msg.contains("not a send request in flight"),
            "a completed request is stale: {e}"
        );
    }
}

/// Posts one group and sends `sends` (tag, size); returns the group's sizes or the error.

#[test]
fn grouped_receives_match_by_tag() {
    let net = net_on("grouped_receives_match_by_tag", Family::V4, 2, 2).unwrap();
    let (mut s, mut r) = pair(&net);
    check_grouped_receives(&mut *s, &mut *r);
}

#[test]
fn tag_outside_the_group_is_an_error() {
    let net = net_on("tag_outside_the_group_is_an_error", Family::V4, 1, 2).unwrap();
    let (mut s, mut r) = pair(&net);
    check_tag_outside_the_group(&mut *s, &mut *r);
}

#[test]
fn truncation_is_an_error() {
    let net = net_on("truncation_is_an_error", Family::V4, 2, 2).unwrap();
    let (mut s, mut r) = pair(&net);
    check_truncation(&mut *s, &mut *r);
}

#[test]
fn sender_closing_mid_message_is_an_error_naming_it() {
    let net = net_on("sender_closing_mid_message", Family::V4, 2, 2).unwrap();
    let (mut s, mut r) = pair(&net);
    let n = 64 << 20;
    let mut rb = vec![0u8; n];
    let rmr = r.reg_mr(rb.as_ptr(), n, MemKind::Host).unwrap();
    // SAFETY: rb outlives r (dropped at the end of the test, after the error).
    let rq = unsafe {
        r.irecv(&[RecvBuf {
            ptr: rb.as_mut_ptr(),
            size: n,
            tag: 0,
            mr: rmr,
        }])
    }
    .unwrap()
    .unwrap();
    let sb = vec![1u8; n];
    let smr = s.reg_mr(sb.as_ptr(), n, MemKind::Host).unwrap();
    // SAFETY: sb outlives s.
    let sq = unsafe { s.isend(sb.as_ptr(), n, 0, smr) }.unwrap().unwrap();
    assert_eq!(s.test(sq).unwrap(), None, "64 MiB cannot be out already");
    drop(s);
    let end = Instant::now() + Duration::from_secs(30);
    let e = loop {
        assert!(Instant::now() < end, "no error after the peer closed");
        match r.test(rq, &mut [0]) {
            Err(e) => break e,
            Ok(done) => assert!(!done, "a message completed although its sender closed"),
        }
    };
    assert!(
        e.msg.contains("closed the connection") && e.msg.contains("127.0.0.1:"),
        "{e}"
    );
}

#[test]
fn receiver_closing_is_an_error_at_the_sender() {
    let net = net_on("receiver_closing", Family::V4, 1, 1).unwrap();
    let (mut s, r) = pair(&net);
    let peer = s.peer();
    let n = 64 << 20;
    let sb = vec![1u8; n];
    let smr = s.reg_mr(sb.as_ptr(), n, MemKind::Host).unwrap();
    // SAFETY: sb outlives s.
    let sq = unsafe { s.isend(sb.as_ptr(), n, 0, smr) }.unwrap().unwrap();
    drop(r);
    let end = Instant::now() + Duration::from_secs(30);
    let e = loop {
        assert!(Instant::now() < end, "no error after the receiver closed");
        match s.test(sq) {
            Err(e) => break e,
            Ok(done) => assert_eq!(done, None),
        }
    };
    assert!(e.msg.contains(&peer), "{e}");
}

#[test]
fn bad_handles_and_secrets() {
    let net = net_on("bad_handles_and_secrets", Family::V4, 1, 2).unwrap();
    let e = net.connect(0, &Handle([0; HANDLE_BYTES])).err().unwrap();
    assert!(e.msg.contains("not a TCP connection handle"), "{e}");
    let e = net.connect(5, &Handle([0; HANDLE_BYTES])).err().unwrap();
    assert!(e.msg.contains("no device 5"), "{e}");
    assert!(net.listen(3).is_err());

    // A listener gone: refused at once, naming the address.
    let (h, l) = net.listen(0).unwrap();
    drop(l);
    let t0 = Instant::now();
    let mut c = net.connect(0, &h).unwrap();
    let e = loop {
        match c.poll() {
            Err(e) => break e,
            Ok(s) => assert!(s.is_none()),
        }
        assert!(t0.elapsed() < Duration::from_secs(5));
    };
    assert!(
        e.msg.contains("127.0.0.1:") && e.msg.contains("refused"),
        "{e}"
    );

    // A different job secret: the listener refuses; the connector says so; the listener stays
    // usable for the right peer.
    let other = TcpNet::new(cfg(Family::V4, 1, 2), b"another job").unwrap();
    let (h, mut l) = net.listen(0).unwrap();
    let mut c = other.connect(0, &h).unwrap();
    let end = deadline();
    let e = loop {
        assert!(l.accept().unwrap().is_none(), "a wrong secret made a comm");
        match c.poll() {
            Err(e) => break e,
            Ok(s) => assert!(s.is_none()),
        }
        assert!(Instant::now() < end);
    };
    assert!(e.msg.contains("authentication"), "{e}");
    let mut c = net.connect(0, &h).unwrap();
    let (mut s, mut r) = (None, None);
    while s.is_none() || r.is_none() {
        assert!(Instant::now() < end);
        s = s.or(c.poll().unwrap());
        r = r.or(l.accept().unwrap());
    }
    xfer(&mut *s.unwrap(), &mut *r.unwrap(), &[(0, 100)], 1);
}

#[test]
fn stray_connections_cannot_inject_data() {
    let net = net_on("stray_connections", Family::V4, 1, 1).unwrap();
    let (h, mut l) = net.listen(0).unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{}", u16::from_le_bytes([h.0[10], h.0[11]]))
        .parse()
        .unwrap();
    // Strays: one writing a megabyte of garbage, one sending a hello-sized block of zeros, one
    // that stays silent.
    let mut big = TcpStream::connect(addr).unwrap();
    big.set_nonblocking(true).unwrap();
    let junk = vec![0x47u8; 1 << 20];
    let mut written = 0;
    let mut zeros = TcpStream::connect(addr).unwrap();
    zeros.write_all(&[0u8; 64]).unwrap();
    let _silent = TcpStream::connect(addr).unwrap();
    let mut c = net.connect(0, &h).unwrap();
    let (mut s, mut r) = (None, None);
    let end = deadline();
    while s.is_none() || r.is_none() {
        assert!(Instant::now() < end);
        if written < junk.len() {
            written += big.write(&junk[written..]).unwrap_or(0);
        }
        s = s.or(c.poll().unwrap());
        r = r.or(l.accept().unwrap());
    }
    // The listener read one hello's worth from the garbage writer and closed it: more writes
    // fail (reset), where a socket still being read would merely fill up and block.
    big.set_nonblocking(false).unwrap();
    big.set_write_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let e = loop {
        if let Err(e) = big.write(&junk) {
            break e;
        }
    };
    assert!(
        matches!(
            e.kind(),
            std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
        ),
        "the garbage writer was not cut off: {e}"
    );
    let (mut s, mut r) = (s.unwrap(), r.unwrap());
    xfer(&mut *s, &mut *r, &[(9, 1000), (9, 0), (9, 200_000)], 3);
    assert!(l.accept().unwrap().is_none());
}

#[test]
fn stalled_set_up_fails_in_time() {
    // A plain TCP listener that never answers the handshake.
    let mut c = cfg(Family::V4, 1, 1);
    c.accept_timeout = Duration::from_secs(1);
    let net = TcpNet::new(c, SECRET).unwrap();
    let mute = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = mute.local_addr().unwrap().port();
    let (mut h, _l) = net.listen(0).unwrap();
    h.0[10..12].copy_from_slice(&port.to_le_bytes());
    let t0 = Instant::now();
    let mut conn = net.connect(0, &h).unwrap();
    let e = loop {
        match conn.poll() {
            Err(e) => break e,
            Ok(s) => assert!(s.is_none()),
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "set-up did not time out"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    assert!(
        e.msg.contains(&format!("127.0.0.1:{port}")) && e.msg.contains("handshake"),
        "{e}"
    );
    assert!(t0.elapsed() >= Duration::from_secs(1));
}

#[test]
fn registration_rules() {
    let net = net_on("registration_rules", Family::V4, 1, 1).unwrap();
    let (mut s, mut r) = pair(&net);
    let e = s.reg_mr(std::ptr::null(), 8, MemKind::Cuda).unwrap_err();
    assert!(e.msg.contains("host memory only"), "{e}");
    let b = [0u8; 100];
    let mr = s.reg_mr(b.as_ptr(), 50, MemKind::Host).unwrap();
    // SAFETY: refused before any use of the buffer.
    let e = unsafe { s.isend(b.as_ptr(), 60, 0, mr) }.unwrap_err();
    assert!(e.msg.contains("outside its registration"), "{e}");
    s.dereg_mr(mr).unwrap();
    assert!(s.dereg_mr(mr).is_err());
    // SAFETY: refused before any use of the buffer.
    assert!(unsafe { s.isend(b.as_ptr(), 10, 0, mr) }
        .unwrap_err()
        .msg
        .contains("not registered"));
    let e = r.test(Request { slot: 3, gen: 9 }, &mut [0]).unwrap_err();
    assert!(e.msg.contains("not a receive request"), "{e}");
    assert!(r.test(Request { slot: 999, gen: 0 }, &mut [0]).is_err());
}

/// Which payloads follow their header on the control socket: every message of the engine's
/// frames; bulk data only up to the small limit where the comm stripes (larger bulk data is
/// striped), every bulk payload where it does not.
#[test]
fn frames_go_inline_and_bulk_data_is_striped_where_the_comm_stripes() {
    use mpi_abi::transport::net::frames::SLOT_BYTES;
    use mpi_abi::transport::net::tcp::{goes_inline, INLINE_BULK_MAX};
    use mpi_abi::transport::net::TAG_BULK;
    for stripe in [false, true] {
        assert!(goes_inline(0, SLOT_BYTES, stripe));
        assert!(goes_inline(0, 32 << 10, stripe));
        assert!(!goes_inline(0, 1 << 20, stripe));
        assert!(goes_inline(TAG_BULK, INLINE_BULK_MAX, stripe));
    }
    assert!(!goes_inline(TAG_BULK, INLINE_BULK_MAX + 1, true));
    assert!(!goes_inline(TAG_BULK, 64 << 10, true));
    for n in [INLINE_BULK_MAX + 1, 64 << 10, 1 << 20, 64 << 20] {
        assert!(goes_inline(TAG_BULK, n, false), "{n}");
    }
}

/// A sender that does not stripe (`GPUMPI_NET_TCP_STRIPE=0`, or `auto` where the ranks have
/// no CPUs to spare) writes a bulk payload of any size on the control socket itself: with the
/// receiver not reading, a 64 MiB bulk send waits on its control socket (`WaitOn::Fd`), never
/// on a helper thread, while a striping sender's waits on its helpers (`WaitOn::Polled`). The
/// receiver follows each header's mark, so bulk messages of every size, mixed with frame
/// messages and with messages above the frames' size (striped whatever the setting), arrive
/// intact at both settings, in windows of 1 and 16.
#[test]
fn bulk_payloads_go_on_the_control_socket_where_the_sender_does_not_stripe() {
    use mpi_abi::transport::net::TAG_BULK;
    for (stripe, helpers) in [(Stripe::Off, false), (Stripe::On, true)] {
        let mut c = cfg(Family::V4, 2, 2);
        c.stripe = stripe;
        let net = TcpNet::new(c, SECRET).unwrap();
        let (mut s, mut r) = pair(&net);
        let n = 64 << 20;
        let big = pattern(5, n);
        let mr = s.reg_mr(big.as_ptr(), n, MemKind::Host).unwrap();
        // SAFETY: `big` outlives the request, completed below before it drops.
        let q = unsafe { s.isend(big.as_ptr(), n, TAG_BULK, mr) }
            .unwrap()
            .unwrap();
        match s.wait_on() {
            WaitOn::Polled => assert!(helpers, "{stripe:?}: a bulk payload went to a helper"),
            WaitOn::Fd(..) => assert!(!helpers, "{stripe:?}: a bulk payload went inline"),
            WaitOn::Idle => panic!("{stripe:?}: 64 MiB sent to a receiver that read nothing"),
        }
        let mut got = vec![0u8; n];
        let rmr = r.reg_mr(got.as_ptr(), n, MemKind::Host).unwrap();
        let rb = RecvBuf {
            ptr: got.as_mut_ptr(),
            size: n,
            tag: TAG_BULK,
            mr: rmr,
        };
        // SAFETY: `got` outlives the request, completed below.
        let rq = unsafe { r.irecv(&[rb]) }.unwrap().unwrap();
        let end = Instant::now() + Duration::from_secs(60);
        let (mut sent, mut recvd) = (false, false);
        while !(sent && recvd) {
            assert!(Instant::now() < end, "{stripe:?}: 64 MiB did not arrive");
            if !sent {
                sent = s.test(q).unwrap().is_some();
            }
            let mut sz = [0usize];
            if !recvd && r.test(rq, &mut sz).unwrap() {
                assert_eq!(sz[0], n);
                recvd = true;
            }
        }
        assert!(
            got == big,
            "{stripe:?}: the 64 MiB bulk payload arrived damaged"
        );
        s.dereg_mr(mr).unwrap();
        r.dereg_mr(rmr).unwrap();
        let msgs: Vec<(i32, usize)> = [0, 1, 20480, 20481, 65536, 300_000, 1 << 20, (3 << 20) + 5]
            .iter()
            .flat_map(|&n| [(TAG_BULK, n), (3, n.min(200_000)), (4, n)])
            .collect();
        xfer(&mut *s, &mut *r, &msgs, 1);
        xfer(&mut *s, &mut *r, &msgs, 16);
    }
}

/// Every message of the engine's frames (up to `frames::SLOT_BYTES`) is written by the calling
/// thread on the control socket, never handed to a helper thread, and a write the socket cut
/// short is resumed by `test` once that socket is writable. With the receiver not reading, the
/// sender sends frame-sized messages until its control socket is full: all the while its comm
/// says it waits on that socket being writable (`WaitOn::Fd` with `POLLOUT`), never on a helper
/// (`WaitOn::Polled`). Then the receiver takes the messages; each time the sender waits on its
/// socket, that socket turns writable once the receiver has read what arrived, and `test`
/// completes the sends; every byte arrives.
#[test]
fn frame_messages_are_written_inline_and_a_cut_write_resumes_when_writable() {
    use mpi_abi::sys::socket::{poll, PollFd, POLLOUT};
    use mpi_abi::transport::net::frames::SLOT_BYTES;
    let net = net_on("frame_messages_inline", Family::V4, 2, 2).unwrap();
    let (mut s, mut r) = pair(&net);
    let slots = net.devices()[0].max_requests;
    let bufs: Vec<Vec<u8>> = (0..slots)
        .map(|i| pattern(i as u64 + 7, SLOT_BYTES))
        .collect();
    let mrs: Vec<_> = bufs
        .iter()
        .map(|b| s.reg_mr(b.as_ptr(), b.len(), MemKind::Host).unwrap())
        .collect();
    // Sends (buffer index) in order; requests in flight per buffer.
    let mut sent: Vec<usize> = Vec::new();
    let mut inflight: Vec<Option<Request>> = vec![None; slots];
    let mut full = false;
    let mut total = 0usize;
    while !full {
        assert!(
            total < 1 << 30,
            "1 GiB sent to a receiver that reads nothing, and the socket never filled"
        );
        for i in 0..slots {
            if let Some(q) = inflight[i] {
                if s.test(q).unwrap().is_none() {
                    continue;
                }
                inflight[i] = None;
            }
            // SAFETY: bufs[i] outlives the request, completed before the buffers drop.
            let q = unsafe {
                s.isend(
                    bufs[i].as_ptr(),
                    SLOT_BYTES,
                    1000 + sent.len() as i32,
                    mrs[i],
                )
            };
            inflight[i] = Some(q.unwrap().expect("a free request slot"));
            sent.push(i);
            total += SLOT_BYTES;
            match s.wait_on() {
                WaitOn::Polled => panic!("a message of {SLOT_BYTES} bytes went to a helper thread"),
                WaitOn::Fd(_, ev) => {
                    assert_eq!(ev, POLLOUT);
                    full = true;
                    break;
                }
                WaitOn::Idle => {}
            }
        }
    }
    let mut rbuf = vec![0u8; SLOT_BYTES];
    let rmr = r.reg_mr(rbuf.as_ptr(), rbuf.len(), MemKind::Host).unwrap();
    let mut resumed = 0;
    for (k, &i) in sent.iter().enumerate() {
        let b = RecvBuf {
            ptr: rbuf.as_mut_ptr(),
            size: SLOT_BYTES,
            tag: 1000 + k as i32,
            mr: rmr,
        };
        // SAFETY: rbuf outlives the request, completed below.
        let q = unsafe { r.irecv(&[b]) }.unwrap().unwrap();
        let mut sz = [0];
        let end = deadline();
        while !r.test(q, &mut sz).unwrap() {
            assert!(Instant::now() < end, "message {k} never arrived");
            if let WaitOn::Fd(fd, ev) = s.wait_on() {
                // Whatever arrived is read: the sender's socket has room again.
                let mut p = [PollFd {
                    fd,
                    events: ev,
                    revents: 0,
                }];
                if poll(&mut p, 0).unwrap() == 1 {
                    resumed += 1;
                    for q in inflight.iter_mut() {
                        if q.is_some_and(|q| s.test(q).unwrap().is_some()) {
                            *q = None;
                        }
                    }
                }
            }
        }
        assert_eq!(sz[0], SLOT_BYTES);
        assert!(rbuf == bufs[i], "message {k} arrived corrupted");
    }
    assert!(resumed > 0, "the sender's socket never turned writable");
    for q in inflight.into_iter().flatten() {
        let end = deadline();
        while s.test(q).unwrap().is_none() {
            assert!(Instant::now() < end);
        }
    }
    assert_eq!(s.wait_on(), WaitOn::Idle);
}

/// A caller that tests only the last of many requests in flight still completes it: while the
/// socket is full (sender) or empty (receiver), tests of requests other than the one whose
/// bytes move next skip the kernel, but only for a bounded number of tests, so the earlier
/// messages keep moving. 32 payloads of 2 MiB (more than the socket buffers hold together) on
/// the control socket, each read straight into its receive with the next header behind it;
/// every payload arrives intact and in order.
#[test]
fn testing_only_the_last_request_moves_the_earlier_ones() {
    use mpi_abi::transport::net::TAG_BULK;
    let mut c = cfg(Family::V4, 1, 1);
    c.stripe = Stripe::Off;
    let net = TcpNet::new(c, SECRET).unwrap();
    let (mut s, mut r) = pair(&net);
    const K: usize = 32;
    const N: usize = 2 << 20;
    let out: Vec<Vec<u8>> = (0..K).map(|i| pattern(100 + i as u64, N)).collect();
    let mut got: Vec<Vec<u8>> = (0..K).map(|_| vec![0u8; N]).collect();
    let smr: Vec<_> = out
        .iter()
        .map(|b| s.reg_mr(b.as_ptr(), N, MemKind::Host).unwrap())
        .collect();
    let rmr: Vec<_> = got
        .iter()
        .map(|b| r.reg_mr(b.as_ptr(), N, MemKind::Host).unwrap())
        .collect();
    let mut rq = Vec::new();
    for (b, mr) in got.iter_mut().zip(&rmr) {
        let rb = RecvBuf {
            ptr: b.as_mut_ptr(),
            size: N,
            tag: TAG_BULK,
            mr: *mr,
        };
        // SAFETY: `got` outlives the requests, all completed below.
        rq.push(unsafe { r.irecv(&[rb]) }.unwrap().unwrap());
    }
    let mut sq = Vec::new();
    for (b, mr) in out.iter().zip(&smr) {
        // SAFETY: `out` outlives the requests, all completed below.
        sq.push(
            unsafe { s.isend(b.as_ptr(), N, TAG_BULK, *mr) }
                .unwrap()
                .unwrap(),
        );
    }
    let end = deadline();
    let (mut sent, mut recvd) = (false, false);
    while !(sent && recvd) {
        assert!(
            Instant::now() < end,
            "the last of {K} messages did not complete while only it was tested"
        );
        if !sent {
            sent = s.test(sq[K - 1]).unwrap().is_some();
        }
        let mut sz = [0usize];
        if !recvd && r.test(rq[K - 1], &mut sz).unwrap() {
            assert_eq!(sz[0], N);
            recvd = true;
        }
    }
    for i in 0..K - 1 {
        assert_eq!(
            s.test(sq[i]).unwrap(),
            Some(N),
            "send {i} after the last one completed"
        );
        let mut sz = [0usize];
        assert!(
            r.test(rq[i], &mut sz).unwrap(),
            "receive {i} after the last one completed"
        );
        assert_eq!(sz[0], N);
    }
    for (i, (g, o)) in got.iter().zip(&out).enumerate() {
        assert!(g == o, "message {i} arrived damaged or out of order");
    }
}

/// The other direction of a connection ([`SendComm::reverse`], [`RecvComm::reverse`]): handed
/// out once per end, it carries every size inline (bulk data too) while the first direction
/// carries its own traffic, and dropping its sending comm ends a receive posted on it with an
/// error naming the peer, while the first direction goes on.
#[test]
fn the_other_direction_of_a_connection_carries_every_size_and_closes_on_its_own() {
    use mpi_abi::transport::net::TAG_BULK;
    let net = net_on("the_other_direction", Family::V4, 2, 2).unwrap();
    let (mut s, mut r) = pair(&net);
    let mut back_s = r.reverse().unwrap().expect("tcp carries both directions");
    let mut back_r = s.reverse().unwrap().expect("tcp carries both directions");
    assert!(s.reverse().unwrap().is_none() && r.reverse().unwrap().is_none());
    assert!(back_s.reverse().unwrap().is_none() && back_r.reverse().unwrap().is_none());
    let msgs: Vec<(i32, usize)> = SIZES.iter().map(|&n| (7, n)).collect();
    let bulk: Vec<(i32, usize)> = SIZES.iter().map(|&n| (TAG_BULK, n)).collect();
    xfer(&mut *back_s, &mut *back_r, &msgs, 8);
    xfer(&mut *back_s, &mut *back_r, &bulk, 4);
    xfer(&mut *s, &mut *r, &msgs, 8);
    xfer(&mut *back_s, &mut *back_r, &msgs[..10], 1);
    let peer = back_r.peer();
    drop(back_s);
    let mut rb = vec![0u8; 64];
    let rmr = back_r.reg_mr(rb.as_ptr(), 64, MemKind::Host).unwrap();
    // SAFETY: rb outlives back_r (dropped at the end of the test).
    let rq = unsafe {
        back_r.irecv(&[RecvBuf {
            ptr: rb.as_mut_ptr(),
            size: 64,
            tag: 0,
            mr: rmr,
        }])
    }
    .unwrap()
    .unwrap();
    let end = Instant::now() + Duration::from_secs(30);
    let e = loop {
        assert!(
            Instant::now() < end,
            "no error after the other direction closed"
        );
        match back_r.test(rq, &mut [0]) {
            Err(e) => break e,
            Ok(done) => assert!(!done, "a message arrived on a direction nobody sent on"),
        }
    };
    assert!(
        e.msg.contains("closed the connection") && e.msg.contains(&peer),
        "{e}"
    );
    xfer(&mut *s, &mut *r, &msgs[..10], 2);
}
