//! The ibverbs network backend over the libibverbs test double (`tests/support/fake_ibverbs.c`,
//! built here with cc and loaded through `GPUMPI_IBVERBS_LIB`): both ends of each connection
//! live in this process (set-up over loopback TCP, data by the double's RDMA writes). Sizes
//! 0 B..64 MiB, many messages in flight, striping over 1..8 queue pairs, grouped receives, RoCE
//! GID choice, and the errors: truncation, a tag the group lacks, a peer closing, bad handles,
//! a wrong secret, mismatched settings and MTUs. Faults of the double (queue pair to error,
//! remote access error, CQ overrun, port down, no device, RLIMIT_MEMLOCK) run in child
//! processes of this binary (the double reads its fault once per process), each ending with a
//! clear error, no hang, and its fabric file removed.

#[path = "support/fake_ib.rs"]
mod fake_ib;
#[path = "support/netcheck.rs"]
mod netcheck;

use mpi_abi::engine::devcopy;
use mpi_abi::transport::net::ib::{IbConfig, IbNet};
use mpi_abi::transport::net::ifname::Family;
use mpi_abi::transport::net::{Handle, MemKind, Net, NetError, RecvBuf, Request, HANDLE_BYTES};
use netcheck::*;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

const SECRET: &[u8] = b"net-ib-test-secret";
const DEVICES: &str = "fib0,fib1:mtu=1024,roce0:link=eth,down0:state=down";

/// Points this process at the double (once, before the first use of libibverbs).
fn setup() -> &'static fake_ib::Fabric {
    static F: OnceLock<fake_ib::Fabric> = OnceLock::new();
    F.get_or_init(|| {
        let lib = fake_ib::lib().expect("building the libibverbs test double");
        let f = fake_ib::Fabric::new("net_ib");
        if std::env::var_os("NET_IB_CHILD").is_none() {
            std::env::set_var("GPUMPI_IBVERBS_LIB", &lib);
            std::env::set_var("FAKEIBV_FABRIC", &f.path);
            std::env::set_var("FAKEIBV_DEVICES", DEVICES);
            // Map the fabric, then remove its name: every user is in this process, and a
            // static is never dropped.
            IbNet::new(cfg("=fib0", 1), SECRET).unwrap();
            std::fs::remove_file(&f.path).unwrap();
        }
        f
    })
}

fn cfg(hca: &str, qps: usize) -> IbConfig {
    IbConfig {
        hca: Some(hca.into()),
        gid_index: None,
        mtu: 0,
        qps,
        relaxed_ordering: "auto".into(),
        gdr: "auto".into(),
        gdr_flush: "auto".into(),
        ifname: Some("=lo".into()),
        family: Family::V4,
        connect_timeout: Duration::from_secs(5),
        accept_timeout: Duration::from_secs(5),
    }
}

fn net(hca: &str, qps: usize) -> IbNet {
    setup();
    IbNet::new(cfg(hca, qps), SECRET).unwrap()
}

#[test]
fn devices_ports_and_links() {
    let n = net("", 2);
    let names: Vec<_> = n.devices().iter().map(|d| d.name.clone()).collect();
    // The inactive port of down0 is skipped when nothing names it.
    assert_eq!(names, ["fib0:1", "fib1:1", "roce0:1"]);
    assert!(n
        .devices()
        .iter()
        .all(|d| d.ptr_support.host && d.addr == "127.0.0.1"));
    assert_eq!(n.name(), "ib");
    // GPUMPI_IB_HCA syntax: exact, exclusion.
    let only = net("=fib1", 1);
    assert_eq!(only.devices().len(), 1);
    assert_eq!(only.devices()[0].name, "fib1:1");
    let ex = net("^fib,down", 1);
    assert_eq!(ex.devices()[0].name, "roce0:1");
    // A port named explicitly that is down is an error naming it.
    setup();
    let e = IbNet::new(cfg("down0", 1), SECRET).err().unwrap();
    assert!(
        e.msg.contains("port down") && e.msg.contains("down0:1 is DOWN"),
        "{e}"
    );
    let e = IbNet::new(cfg("=nosuch", 1), SECRET).err().unwrap();
    assert!(
        e.msg.contains("selects none") && e.msg.contains("fib0"),
        "{e}"
    );
    let e = IbNet::new(cfg("", 9), SECRET).err().unwrap();
    assert!(e.msg.contains("GPUMPI_IB_QPS_PER_CONN=9"), "{e}");
}

#[test]
fn sizes_over_infiniband_and_roce() {
    for hca in ["=fib0", "=roce0"] {
        let n = net(hca, 2);
        let (mut s, mut r) = pair(&n);
        let sizes = [
            0usize,
            1,
            7,
            4096,
            65_536,
            131_073,
            1 << 20,
            (4 << 20) + 3,
            64 << 20,
        ];
        let msgs: Vec<_> = sizes
            .iter()
            .enumerate()
            .map(|(i, &z)| (i as i32, z))
            .collect();
        xfer(&mut *s, &mut *r, &msgs, 1);
        xfer(&mut *s, &mut *r, &msgs, 4);
    }
}

#[test]
fn roce_gid_index_auto_and_set() {
    setup();
    // The double's RoCE port: index 0 RoCE v1 link-local, 1 RoCE v2 link-local, 2 RoCE v2
    // IPv4-mapped, 3 empty. Auto picks 2; 1 works when set; 3 (empty) and 9 (outside) fail.
    let mut c = cfg("=roce0", 1);
    c.gid_index = Some(1);
    let n = IbNet::new(c.clone(), SECRET).unwrap();
    let (mut s, mut r) = pair(&n);
    xfer(&mut *s, &mut *r, &[(1, 1000)], 1);
    c.gid_index = Some(3);
    let e = IbNet::new(c.clone(), SECRET).err().unwrap();
    assert!(
        e.msg.contains("GPUMPI_IB_GID_INDEX=3") && e.msg.contains("empty"),
        "{e}"
    );
    c.gid_index = Some(9);
    let e = IbNet::new(c, SECRET).err().unwrap();
    assert!(
        e.msg
            .contains("outside the GID table of roce0:1 (4 entries)"),
        "{e}"
    );
}

#[test]
fn striping_over_queue_pairs_and_many_in_flight() {
    for qps in [1, 3, 8] {
        let n = net("=fib0", qps);
        let (mut s, mut r) = pair(&n);
        let msgs: Vec<_> = (0..200)
            .map(|i| (i % 5, [0, 10, 200_000, 1 << 20, 3_000_001][i as usize % 5]))
            .collect();
        xfer(&mut *s, &mut *r, &msgs, 32);
    }
}

#[test]
fn grouped_receives_match_by_tag() {
    let n = net("=fib0", 2);
    let (mut s, mut r) = pair(&n);
    check_grouped_receives(&mut *s, &mut *r);
}

#[test]
fn tag_outside_the_group_is_an_error() {
    let n = net("=fib0", 1);
    let (mut s, mut r) = pair(&n);
    check_tag_outside_the_group(&mut *s, &mut *r);
}

#[test]
fn truncation_is_an_error() {
    let n = net("=fib0", 2);
    let (mut s, mut r) = pair(&n);
    check_truncation(&mut *s, &mut *r);
}

#[test]
fn a_peer_closing_is_an_error_naming_it() {
    let n = net("=fib0", 2);
    // The sender goes away while a receive is posted.
    let (s, mut r) = pair(&n);
    let mut rb = vec![0u8; 1 << 20];
    let rmr = r.reg_mr(rb.as_ptr(), rb.len(), MemKind::Host).unwrap();
    // SAFETY: rb outlives r.
    let rq = unsafe {
        r.irecv(&[RecvBuf {
            ptr: rb.as_mut_ptr(),
            size: rb.len(),
            tag: 0,
            mr: rmr,
        }])
    }
    .unwrap()
    .unwrap();
    drop(s);
    let end = deadline();
    let e = loop {
        assert!(Instant::now() < end, "no error after the sender closed");
        match r.test(rq, &mut [0]) {
            Err(e) => break e,
            Ok(done) => assert!(!done),
        }
    };
    assert!(
        e.msg.contains("closed the connection") && e.msg.contains("127.0.0.1:"),
        "{e}"
    );
    // The receiver goes away: the sender's next send fails naming it.
    let (mut s, r) = pair(&n);
    let peer = s.peer();
    drop(r);
    let sb = vec![1u8; 4096];
    let smr = s.reg_mr(sb.as_ptr(), sb.len(), MemKind::Host).unwrap();
    let end = deadline();
    let e = loop {
        assert!(Instant::now() < end, "no error after the receiver closed");
        // SAFETY: sb outlives s.
        match unsafe { s.isend(sb.as_ptr(), sb.len(), 0, smr) } {
            Err(e) => break e,
            Ok(q) => assert!(q.is_none(), "a send without a posted receive"),
        }
    };
    assert!(e.msg.contains(&peer), "{e}");
}

#[test]
fn what_arrived_before_the_sender_closed_completes() {
    // The frames layer's ending: a sender writes its last messages and closes at once; the
    // receiver, which re-posts a receive after each message (a credit write to the sender),
    // still gets those messages although the credit writes that follow fail, and only a
    // receive that nothing can fill reports the sender gone.
    let n = net("=fib0", 2);
    let (mut s, mut r) = pair(&n);
    let mut rb = vec![0u8; 3 * 4096];
    let rmr = r.reg_mr(rb.as_ptr(), rb.len(), MemKind::Host).unwrap();
    let post = |r: &mut Box<dyn mpi_abi::transport::net::RecvComm>, rb: &mut [u8], i: usize| {
        // SAFETY: rb outlives r; each receive has its own 4 KiB.
        unsafe {
            r.irecv(&[RecvBuf {
                ptr: rb[i * 4096..].as_mut_ptr(),
                size: 4096,
                tag: 0,
                mr: rmr,
            }])
        }
        .unwrap()
        .unwrap()
    };
    let q0 = post(&mut r, &mut rb, 0);
    let q1 = post(&mut r, &mut rb, 1);
    let sb = pattern(7, 4096);
    let smr = s.reg_mr(sb.as_ptr(), sb.len(), MemKind::Host).unwrap();
    let end = deadline();
    for len in [4096, 0] {
        // SAFETY: sb outlives s.
        let q = loop {
            assert!(Instant::now() < end, "send not taken");
            if let Some(q) = unsafe { s.isend(sb.as_ptr(), len, 0, smr) }.unwrap() {
                break q;
            }
        };
        while s.test(q).unwrap().is_none() {
            assert!(Instant::now() < end, "send not done");
        }
    }
    drop(s);
    // A receive posted after the sender closed: its credit write fails.
    let q2 = post(&mut r, &mut rb, 2);
    for (q, want) in [(q0, 4096), (q1, 0)] {
        let mut size = [usize::MAX];
        loop {
            assert!(
                Instant::now() < end,
                "a message that arrived does not complete"
            );
            match r.test(q, &mut size) {
                Ok(true) => break,
                Ok(false) => {}
                Err(e) => panic!("a message that arrived failed: {e}"),
            }
        }
        assert_eq!(size[0], want);
    }
    assert_eq!(&rb[..4096], &sb[..]);
    let e = loop {
        assert!(
            Instant::now() < end,
            "no error for a receive nothing can fill"
        );
        match r.test(q2, &mut [0]) {
            Err(e) => break e,
            Ok(done) => assert!(!done),
        }
    };
    assert!(e.msg.contains("127.0.0.1:"), "{e}");
}

#[test]
fn bad_handles_secrets_and_settings() {
    let n = net("=fib0", 2);
    let e = n.connect(0, &Handle([0; HANDLE_BYTES])).err().unwrap();
    assert!(e.msg.contains("not an ibverbs connection handle"), "{e}");
    let e = n.connect(7, &Handle([0; HANDLE_BYTES])).err().unwrap();
    assert!(e.msg.contains("no device 7"), "{e}");
    // A wrong secret: the listener drops the connection, the connector says so.
    let other = IbNet::new(cfg("=fib0", 2), b"another job").unwrap();
    let e = pair2(&other, &n).err().unwrap();
    assert!(e.msg.contains("closed the connection during set-up"), "{e}");
    // Queue pairs per connection differ: both ends fail naming both values.
    let four = IbNet::new(cfg("=fib0", 4), SECRET).unwrap();
    let e = pair2(&four, &n).err().unwrap();
    assert!(
        e.msg.contains("GPUMPI_IB_QPS_PER_CONN") && e.msg.contains('4') && e.msg.contains('2'),
        "{e}"
    );
    // MTU: fib1 runs at 1024, fib0 at 4096: unset, the path MTU is 1024 and data flows; a
    // GPUMPI_IB_MTU of 4096 is an MTU mismatch naming both.
    let small = net("=fib1", 2);
    let (mut s, mut r) = pair2(&small, &n).unwrap();
    xfer(&mut *s, &mut *r, &[(0, 100_000)], 1);
    let mut c = cfg("=fib0", 2);
    c.mtu = 5;
    let big = IbNet::new(c.clone(), SECRET).unwrap();
    let mut c1 = cfg("=fib1", 2);
    c1.mtu = 5;
    let small5 = IbNet::new(c1, SECRET).unwrap();
    let e = pair2(&small5, &big).err().unwrap();
    assert!(
        e.msg.contains("MTU mismatch") && e.msg.contains("4096") && e.msg.contains("1024"),
        "{e}"
    );
    // InfiniBand against RoCE.
    let roce = net("=roce0", 2);
    let e = pair2(&roce, &n).err().unwrap();
    assert!(e.msg.contains("link layers differ"), "{e}");
}

#[test]
fn registration_rules_and_cache() {
    let n = net("=fib0", 1);
    let (mut s, _r) = pair(&n);
    let b = vec![0u8; 1 << 16];
    let m1 = s.reg_mr(b.as_ptr(), b.len(), MemKind::Host).unwrap();
    // The same host buffer again: the cached region.
    let m2 = s.reg_mr(b.as_ptr(), 100, MemKind::Host).unwrap();
    assert_eq!(m1, m2);
    s.dereg_mr(m1).unwrap();
    s.dereg_mr(m2).unwrap();
    assert!(s.dereg_mr(m1).unwrap_err().msg.contains("unknown region"));
    // A send outside its region is refused.
    let m = s.reg_mr(b.as_ptr(), 16, MemKind::Host).unwrap();
    // SAFETY: refused before the buffer is used.
    let e = unsafe { s.isend(b.as_ptr(), 17, 0, m) }.unwrap_err();
    assert!(e.msg.contains("outside its memory region"), "{e}");
    // Device memory without a GPUDirect path (no CUDA here) is refused with the reason.
    if !n.devices()[0].ptr_support.cuda {
        let e = s.reg_mr(b.as_ptr(), 16, MemKind::Cuda).unwrap_err();
        assert!(e.msg.contains("device memory cannot be registered"), "{e}");
    }
}

// ---------------------------------------------------------------------------------------------
// Faults, in child processes.

/// Runs `scenario` in a child process of this test binary with `env`; returns its output.
fn child(scenario: &str, env: &[(&str, &str)]) -> String {
    let lib = fake_ib::lib().unwrap();
    let fabric = fake_ib::Fabric::new(&format!("child-{scenario}"));
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "fault_child",
        "--include-ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("NET_IB_CHILD", scenario)
    .env("GPUMPI_IBVERBS_LIB", &lib)
    .env("FAKEIBV_FABRIC", &fabric.path)
    .env("FAKEIBV_DEVICES", "fib0");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let start = Instant::now();
    let out = cmd.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "child {scenario} failed:\n{text}");
    assert!(
        start.elapsed() < Duration::from_secs(60),
        "child {scenario} took too long"
    );
    assert!(text.contains(&format!("CHILD {scenario} OK")), "{text}");
    drop(fabric);
    assert!(
        !std::path::Path::new(&format!(
            "/dev/shm/gpumpi-fakeibv-child-{scenario}-{}",
            std::process::id()
        ))
        .exists(),
        "fabric left behind"
    );
    text
}

/// Sends until one end fails (the fault), then drops that end and waits for the other end to
/// fail too (it must notice, not hang). Returns both messages, the first end's first.
fn run_until_error(n: &IbNet, size: usize) -> String {
    let (mut s, mut r) = pair(n);
    let sb = pattern(1, size);
    let mut rb = vec![0u8; size];
    let smr = s.reg_mr(sb.as_ptr(), size, MemKind::Host).unwrap();
    let rmr = r.reg_mr(rb.as_ptr(), size, MemKind::Host).unwrap();
    let end = deadline();
    let mut rq: Option<Request> = None;
    let mut sq: Option<Request> = None;
    let first: Result<NetError, NetError> = 'outer: loop {
        assert!(Instant::now() < end, "hang instead of an error");
        if rq.is_none() {
            // SAFETY: rb outlives the comms (dropped at the end of this function).
            match unsafe {
                r.irecv(&[RecvBuf {
                    ptr: rb.as_mut_ptr(),
                    size,
                    tag: 0,
                    mr: rmr,
                }])
            } {
                Ok(q) => rq = q,
                Err(e) => break 'outer Err(e),
            }
        }
        if sq.is_none() {
            // SAFETY: sb outlives the comms.
            match unsafe { s.isend(sb.as_ptr(), size, 0, smr) } {
                Ok(q) => sq = q,
                Err(e) => break 'outer Ok(e),
            }
        }
        if let Some(q) = sq {
            match s.test(q) {
                Ok(Some(_)) => sq = None,
                Ok(None) => {}
                Err(e) => break 'outer Ok(e),
            }
        }
        if let Some(q) = rq {
            match r.test(q, &mut [0]) {
                Ok(true) => rq = None,
                Ok(false) => {}
                Err(e) => break 'outer Err(e),
            }
        }
    };
    let end = deadline();
    let (a, b) = match first {
        Ok(e) => {
            // The sender failed: the receiver must fail once the sender is gone.
            drop(s);
            let e2 = loop {
                assert!(
                    Instant::now() < end,
                    "the receiver hangs after the sender failed"
                );
                let q = match rq {
                    Some(q) => q,
                    // SAFETY: as above.
                    None => match unsafe {
                        r.irecv(&[RecvBuf {
                            ptr: rb.as_mut_ptr(),
                            size,
                            tag: 0,
                            mr: rmr,
                        }])
                    } {
                        Ok(Some(q)) => q,
                        Ok(None) => continue,
                        Err(e) => break e,
                    },
                };
                rq = Some(q);
                match r.test(q, &mut [0]) {
                    Ok(true) => rq = None,
                    Ok(false) => {}
                    Err(e) => break e,
                }
            };
            (e, e2)
        }
        Err(e) => {
            drop(r);
            let e2 = loop {
                assert!(
                    Instant::now() < end,
                    "the sender hangs after the receiver failed"
                );
                if let Some(q) = sq {
                    match s.test(q) {
                        Ok(Some(_)) => sq = None,
                        Ok(None) => {}
                        Err(e) => break e,
                    }
                } else {
                    // SAFETY: as above.
                    match unsafe { s.isend(sb.as_ptr(), size, 0, smr) } {
                        Ok(q) => sq = q,
                        Err(e) => break e,
                    }
                }
            };
            (e, e2)
        }
    };
    format!("{a} // then: {b}")
}

#[test]
#[ignore = "run by the fault tests in a child process"]
fn fault_child() {
    let Ok(sc) = std::env::var("NET_IB_CHILD") else {
        return;
    };
    setup();
    if sc.starts_with("gdr_flush") {
        gdr_flush_child(sc == "gdr_flush_on");
        println!("CHILD {sc} OK");
        return;
    }
    if sc == "gdr_unregistrable" {
        gdr_unregistrable_child();
        println!("CHILD {sc} OK");
        return;
    }
    if sc == "gdr_engine" {
        gdr_engine_child();
        println!("CHILD {sc} OK");
        return;
    }
    if sc == "gdr_coll" {
        gdr_coll_child();
        println!("CHILD {sc} OK");
        return;
    }
    if sc == "frames_sender_ends" {
        frames_sender_ends_child();
        println!("CHILD {sc} OK");
        return;
    }
    let msg = match sc.as_str() {
        "port_down" | "no_device" => IbNet::new(cfg("", 1), SECRET).err().unwrap().msg,
        "memlock" => {
            let mut lim = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            // SAFETY: plain getrlimit/setrlimit on this child process (soft limit lowered).
            unsafe {
                assert_eq!(libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim), 0);
                lim.rlim_cur = 1 << 20;
                assert_eq!(libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim), 0);
            }
            let n = net("", 1);
            let (mut s, _r) = pair(&n);
            let big = vec![0u8; 4 << 20];
            s.reg_mr(big.as_ptr(), big.len(), MemKind::Host)
                .unwrap_err()
                .msg
        }
        _ => run_until_error(&net("", 2), 300_000),
    };
    println!("ERROR: {msg}");
    println!("CHILD {sc} OK");
}

#[test]
fn frames_from_a_sender_that_ended_are_all_taken() {
    let out = child("frames_sender_ends", &[]);
    assert!(out.contains("CHILD frames_sender_ends OK"), "{out}");
}

/// The frames layer over the backend (in a child process: a network error there ends the
/// process): rank 1 sends rank 0 three frames, the last two written while rank 0 is not
/// polling, then closes (its goodbye follows them) and its queue pairs go away. Rank 0 then
/// takes the frames: it re-posts each frame's receive as it takes it (a credit write to rank 1
/// that fails), and the failure seen while taking the next frame must not end it: every frame
/// and the goodbye were written before rank 1 closed.
fn frames_sender_ends_child() {
    use mpi_abi::transport::net::frames::NetFrames;
    use mpi_abi::transport::net::links::Links;
    use mpi_abi::transport::{Header, Transport};
    let accept = Duration::from_secs(5);
    let nets: Vec<Box<dyn Net>> = (0..2)
        .map(|_| Box::new(net("", 1)) as Box<dyn Net>)
        .collect();
    let ls: Vec<_> = nets.iter().map(|n| n.listen(0).unwrap()).collect();
    let handles: Vec<Option<Handle>> = ls.iter().map(|l| Some(l.0)).collect();
    let mut fs: Vec<NetFrames> = nets
        .into_iter()
        .zip(ls)
        .enumerate()
        .map(|(me, (n, (_, l)))| {
            let mut hs = handles.clone();
            hs[me] = None;
            NetFrames::new(Links::new(n, 0, l, me, hs, accept), me, 2)
        })
        .collect();
    let mut got: Vec<(i32, Vec<u8>)> = Vec::new();
    let end = deadline();
    for tag in 1..=3 {
        let h = Header {
            tag,
            ..Default::default()
        };
        let body = vec![tag as u8; 100];
        while !fs[1].try_send(0, &h, &body) {
            assert!(Instant::now() < end, "rank 1 never reached rank 0");
            fs[0].poll(&mut |_, h, p| got.push((h.tag, p.to_vec())));
            fs[1].poll(&mut |_, _, _| {});
        }
        // The first frame opens the connection (rank 0 polls to accept it); the others are
        // only written out.
        while tag == 1 && got.is_empty() {
            assert!(Instant::now() < end, "the first frame never arrived");
            fs[0].poll(&mut |_, h, p| got.push((h.tag, p.to_vec())));
            fs[1].poll(&mut |_, _, _| {});
        }
        for _ in 0..4 {
            fs[1].poll(&mut |_, _, _| {});
        }
    }
    // Rank 1 closes: nothing to wait for (rank 0 never sent to it), so it says goodbye and
    // its comms are gone.
    drop(fs.pop());
    while got.len() < 3 {
        assert!(Instant::now() < end, "frames never arrived: {got:?}");
        fs[0].poll(&mut |_, h, p| got.push((h.tag, p.to_vec())));
    }
    for (i, (tag, body)) in got.iter().enumerate() {
        assert_eq!(*tag, i as i32 + 1);
        assert_eq!(body, &vec![*tag as u8; 100]);
    }
    drop(fs);
}

/// GPUDirect RDMA against the double, in a child process (the hook is process-wide): host
/// memory registered as device memory through the dma-buf entry point
/// (`host_memory_as_device_for_tests`), messages written by RDMA straight into the "device"
/// receive buffer. With the flush on, each completed receive in device memory was preceded by
/// exactly one RDMA read of one byte of its buffer, after the data's writes (the double's
/// trace, in execution order); host receives, empty messages and `GPUMPI_IB_GDR_FLUSH=0` have
/// none. Every byte lands either way.
fn gdr_flush_child(on: bool) {
    mpi_abi::transport::net::ib::host_memory_as_device_for_tests(true);
    let mut c = cfg("", 2);
    c.gdr = "dmabuf".into();
    c.gdr_flush = if on { "1" } else { "0" }.into();
    let n = IbNet::new(c, SECRET).unwrap();
    let p = &n.devices()[0].ptr_support;
    assert!(
        p.dmabuf && p.cuda,
        "the dma-buf path through the hook: {p:?}"
    );
    let (mut s, mut r) = pair(&n);
    let trace = std::env::var("FAKEIBV_TRACE").unwrap();
    for (len, dev) in [
        (300_000usize, true),
        (4096, true),
        (0, true),
        (5000, false),
        (1, true),
    ] {
        let src = pattern(len as u64 + 7, len + 1);
        let mut dst = vec![0u8; len + 8];
        let sm = s.reg_mr(src.as_ptr(), src.len(), MemKind::Cuda).unwrap();
        let kind = if dev { MemKind::Cuda } else { MemKind::Host };
        let rm = r.reg_mr(dst.as_ptr(), dst.len(), kind).unwrap();
        let _ = std::fs::remove_file(&trace);
        let rb = RecvBuf {
            ptr: dst.as_mut_ptr(),
            size: dst.len(),
            tag: 3,
            mr: rm,
        };
        let end = deadline();
        // SAFETY: dst outlives the request, tested to completion below.
        let q = loop {
            if let Some(q) = unsafe { r.irecv(&[rb]) }.unwrap() {
                break q;
            }
            assert!(Instant::now() < end);
        };
        // SAFETY: src outlives the request, tested to completion below.
        let sq = loop {
            if let Some(q) = unsafe { s.isend(src.as_ptr(), len, 3, sm) }.unwrap() {
                break q;
            }
            assert!(Instant::now() < end);
        };
        let (mut sent, mut got) = (false, false);
        let mut sizes = [0usize];
        while !(sent && got) {
            sent = sent || s.test(sq).unwrap().is_some();
            got = got || r.test(q, &mut sizes).unwrap();
            assert!(Instant::now() < end, "transfer hangs");
        }
        assert_eq!(sizes[0], len);
        assert!(dst[..len] == src[..len], "len {len}: every byte lands");
        let lines: Vec<String> = std::fs::read_to_string(&trace)
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect();
        let read = format!("read {:#x} 1", dst.as_ptr() as usize);
        let reads: Vec<usize> = (0..lines.len()).filter(|&i| lines[i] == read).collect();
        let last_write = lines.iter().rposition(|l| l.starts_with("write_imm"));
        if on && dev && len > 0 {
            assert_eq!(reads.len(), 1, "len {len}: one flush read: {lines:?}");
            assert!(
                last_write.is_some_and(|w| w < reads[0]),
                "the flush follows the data: {lines:?}"
            );
        } else {
            assert!(
                !lines.iter().any(|l| l.starts_with("read")),
                "len {len} dev {dev} flush {on}: no read: {lines:?}"
            );
        }
        s.dereg_mr(sm).unwrap();
        r.dereg_mr(rm).unwrap();
    }
}

/// The engine's device copies over host memory (its "device" buffers are host memory, which
/// the backend registers as device memory through the test hook), counting every copy: a
/// message that takes the GPUDirect RDMA path makes none.
struct HostDev(Arc<AtomicUsize>);

impl devcopy::DevCopy for HostDev {
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
    ) -> Result<Option<Box<dyn devcopy::Pending>>, String> {
        Err("no peer copies between nodes".into())
    }
    unsafe fn write(
        &self,
        _: usize,
        _: &[u8],
        _: usize,
        _: usize,
    ) -> Result<Option<Box<dyn devcopy::Pending>>, String> {
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
    ) -> Result<(u64, Box<dyn devcopy::Pending>), String> {
        Err("no pipe between nodes".into())
    }
    unsafe fn pipe_send(
        &self,
        _: usize,
        _: usize,
        _: u64,
        _: usize,
        _: usize,
    ) -> Result<Box<dyn devcopy::Pending>, String> {
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
    fn staging(&self, _: usize, _: usize) -> Option<devcopy::HostStage> {
        None
    }
    unsafe fn htod(&self, dst: usize, data: &[u8]) -> Result<(), String> {
        self.0.fetch_add(1, SeqCst);
        // SAFETY: the engine passes a range of its receive buffer (host memory here).
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst as *mut u8, data.len()) };
        Ok(())
    }
    unsafe fn dtoh(&self, src: usize, len: usize) -> Result<Vec<u8>, String> {
        self.0.fetch_add(1, SeqCst);
        // SAFETY: the engine passes a range of its send buffer (host memory here).
        Ok(unsafe { std::slice::from_raw_parts(src as *const u8, len) }.to_vec())
    }
}

const GDR_SIZES: [usize; 5] = [20_000, 65_536, 100_003, (1 << 20) + 3, 8 << 20];
const GDR_MIXES: [(bool, bool); 3] = [(true, true), (true, false), (false, true)];
const GDR_BULK_MIN: usize = 64 << 10;

/// Rank `me` of `n` as an engine over network frames on the ibverbs backend `net` (listening
/// on `l`; the peers' handles `hs`, `None` for itself): bulk transfers from [`GDR_BULK_MIN`]
/// bytes on, from and into device memory where the backend registers it (`auto`); device
/// copies go through [`HostDev`], counted in the returned counter.
fn gdr_engine(
    net: IbNet,
    l: Box<dyn mpi_abi::transport::net::Listener>,
    me: usize,
    n: usize,
    hs: Vec<Option<Handle>>,
) -> (mpi_abi::engine::Engine, Arc<AtomicUsize>) {
    use mpi_abi::engine::{Engine, EngineConfig};
    use mpi_abi::transport::net::frames::{gdr_choice, NetFrames};
    use mpi_abi::transport::net::links::Links;
    let can = net.device_memory();
    let links = Links::new(Box::new(net), 0, l, me, hs, Duration::from_secs(5));
    let mut frames = NetFrames::new(links, me, n);
    frames.set_bulk_min(Some(GDR_BULK_MIN));
    frames.set_bulk_device(gdr_choice("auto", "ib", can).unwrap().0);
    let mut e = Engine::with_config(
        Box::new(frames),
        me,
        n,
        EngineConfig {
            eager_limit: 16 << 10,
            cma_min: None,
            push_min: usize::MAX,
            share: false,
        },
    );
    let copies = Arc::new(AtomicUsize::new(0));
    e.set_device_copies(Box::new(HostDev(copies.clone())));
    (e, copies)
}

/// Two engines, each on a node of its own, over network frames on the ibverbs backend (the
/// double) with device memory registered through the dma-buf entry point (the test hook) and
/// the GPUDirect flush on. `gdr[rank]`: that rank's backend registers device memory
/// (`GPUMPI_IB_GDR=dmabuf`, else `0`); bulk transfers from [`GDR_BULK_MIN`] bytes on. Rank 0
/// sends every size of [`GDR_SIZES`] in every mix of [`GDR_MIXES`] (device or host memory at
/// each end) to rank 1, which checks every byte. Returns each rank's device copies and bulk
/// transfers.
fn gdr_engines(gdr: [bool; 2]) -> [(usize, u64); 2] {
    use mpi_abi::engine::{devnet::PipeConfig, DevSend, Engine, SendArgs};
    let nets: Vec<IbNet> = gdr
        .iter()
        .map(|&on| {
            let mut c = cfg("", 2);
            c.gdr = if on { "dmabuf" } else { "0" }.into();
            c.gdr_flush = "1".into();
            IbNet::new(c, SECRET).unwrap()
        })
        .collect();
    let ls: Vec<_> = nets.iter().map(|n| n.listen(0).unwrap()).collect();
    let handles: Vec<Option<Handle>> = ls.iter().map(|l| Some(l.0)).collect();
    let mut joins = Vec::new();
    for (me, (net, (_, l))) in nets.into_iter().zip(ls).enumerate() {
        let mut hs = handles.clone();
        hs[me] = None;
        assert_eq!(net.device_memory(), gdr[me]);
        joins.push(std::thread::spawn(move || {
            let (mut e, copies) = gdr_engine(net, l, me, 2, hs);
            e.set_net_pipeline(PipeConfig {
                on: true,
                chunk: 1 << 16,
                depth: 2,
            });
            let wait = |e: &mut Engine, r| {
                let end = deadline();
                loop {
                    if let Some(st) = e.test(r) {
                        return st;
                    }
                    assert!(Instant::now() < end, "rank {me}: request never completed");
                }
            };
            for &len in &GDR_SIZES {
                for (k, &(sdev, rdev)) in GDR_MIXES.iter().enumerate() {
                    let src = pattern(len as u64 * 3 + k as u64, len);
                    if me == 0 {
                        let a = SendArgs {
                            buf: src.as_ptr(),
                            len,
                            dst_world: 1,
                            ctx: 5,
                            src_rank: 0,
                            tag: k as i32,
                            sync: false,
                            dev: sdev.then_some(DevSend::Pipe),
                            note: None,
                        };
                        // SAFETY: `src` outlives the wait.
                        let r = unsafe { e.isend(a) }.unwrap();
                        assert_eq!(wait(&mut e, r).error, 0);
                    } else {
                        let mut dst = vec![0u8; len + 8];
                        // SAFETY: `dst` outlives the wait.
                        let r =
                            unsafe { e.irecv_dev(dst.as_mut_ptr(), len + 8, rdev, 5, 0, k as i32) }
                                .unwrap();
                        let st = wait(&mut e, r);
                        assert_eq!((st.error, st.bytes), (0, len));
                        assert!(
                            dst[..len] == src[..],
                            "len {len} send dev {sdev} recv dev {rdev}: every byte lands"
                        );
                    }
                }
            }
            assert_eq!(e.live_requests(), 0);
            let out = (copies.load(SeqCst), e.bulk_transfers());
            drop(e);
            out
        }));
    }
    let out: Vec<(usize, u64)> = joins.into_iter().map(|j| j.join().unwrap()).collect();
    [out[0], out[1]]
}

/// The engine's GPUDirect RDMA path over the ibverbs backend and the double, in a child
/// process (the hook is process-wide): with both backends registering device memory, every
/// message of at least the bulk threshold, device or host memory at either end, is one bulk
/// transfer and no device copy is made for it at either end, and each one into device memory
/// is flushed once (the double's trace); below the threshold the pipeline through host
/// memory. With the receiver's backend unable to (`GPUMPI_IB_GDR=0`), only the device-to-host
/// messages go as bulk transfers (from the device), the others are pipelined through host
/// memory. Every byte lands in every case.
fn gdr_engine_child() {
    mpi_abi::transport::net::ib::host_memory_as_device_for_tests(true);
    let trace = std::env::var("FAKEIBV_TRACE").unwrap();
    let big = GDR_SIZES.iter().filter(|&&z| z >= GDR_BULK_MIN).count();
    let small = GDR_SIZES.len() - big;
    let _ = std::fs::remove_file(&trace);
    let [(c0, b0), (c1, b1)] = gdr_engines([true, true]);
    assert_eq!(
        (b0, b1),
        (3 * big as u64, 3 * big as u64),
        "one bulk transfer per big message"
    );
    // Below the threshold: device-to-device and device-to-host pipelined at the sender
    // (1 chunk copy each, 20_000 < 64 KiB chunk), device-to-device and host-to-device at the
    // receiver. Nothing else.
    assert_eq!(
        (c0, c1),
        (2 * small, 2 * small),
        "device copies only below the threshold"
    );
    let flushes = std::fs::read_to_string(&trace)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("read ") && l.ends_with(" 1"))
        .count();
    assert_eq!(
        flushes,
        2 * big,
        "one flush per bulk transfer into device memory"
    );
    let [(c0, b0), (c1, b1)] = gdr_engines([true, false]);
    assert_eq!((b0, b1), (big as u64, big as u64), "device to host only");
    assert!(
        c0 > 0 && c1 > 0,
        "the rest pipelined through host memory: {c0} {c1}"
    );
    println!("gdr_engine: bulk {b0}/{b1}, copies {c0}/{c1}");
}

/// A schedule's Tmp as device memory (host memory the backend registers as device memory).
struct VecDev(Vec<u8>);

impl mpi_abi::engine::coll::DevBuf for VecDev {
    fn addr(&self) -> usize {
        self.0.as_ptr() as usize
    }
    fn bytes(&self) -> usize {
        self.0.len()
    }
}

/// Collective schedules on device operands (`engine::coll::OnDevice`) between 4 engines on
/// nodes of their own over the ibverbs backend and the double, in a child process (the
/// device-memory hook is process-wide): alltoall flat, alltoall through PXN forwarders (the
/// schedule for 2 nodes of 2 ranks), allgather and allreduce (wrapping byte sums, reduced by
/// the device reduction), blocks of 128 KiB (the allreduce: a vector of 512 KiB). Every byte lands; every message is one bulk
/// transfer (GPUDirect RDMA: the engine makes no host copy for it), each flushed once where
/// it lands in device memory; the only device copies are the schedules' copy steps.
fn gdr_coll_child() {
    use mpi_abi::coll::alltoall::pxn::{self, Via};
    use mpi_abi::coll::hier::Nodes;
    use mpi_abi::coll::schedule::{Schedule, Step};
    use mpi_abi::coll::{CollArgs, CollKind};
    use mpi_abi::engine::coll::{CollExec, DevBuf, OnDevice};
    const N: usize = 4;
    const B: usize = 128 << 10;
    mpi_abi::transport::net::ib::host_memory_as_device_for_tests(true);
    let trace = std::env::var("FAKEIBV_TRACE").unwrap();
    let _ = std::fs::remove_file(&trace);
    let val = |r: usize, k: usize| (r * 131 + k * 7 + k / 251) as u8;
    // (name, schedule of rank r, send bytes, receive bytes, expected result of rank r)
    type Sched = fn(usize) -> Schedule;
    let cases: [(&str, Sched); 4] = [
        ("alltoall", |r| {
            let mut a = CollArgs::new(r, N, B);
            a.nodes = 2;
            mpi_abi::coll::build(CollKind::Alltoall, &a).unwrap().1
        }),
        ("alltoall pxn", |r| {
            let mut a = CollArgs::new(r, N, B);
            a.nodes = 2;
            let nodes = Nodes::new(&[0, 0, 1, 1]);
            let via = Via::new(&nodes, |s, d| (s / 2) * 2 + d % 2);
            pxn::build(&a, &nodes, &via)
        }),
        ("allgather", |r| {
            let mut a = CollArgs::new(r, N, B);
            a.nodes = 2;
            mpi_abi::coll::build(CollKind::Allgather, &a).unwrap().1
        }),
        ("allreduce", |r| {
            // A vector of N blocks: whatever it is cut into stays bulk-sized.
            let mut a = CollArgs::new(r, N, N * B);
            a.nodes = 2;
            mpi_abi::coll::build(CollKind::Allreduce, &a).unwrap().1
        }),
    ];
    let nets: Vec<IbNet> = (0..N)
        .map(|_| {
            let mut c = cfg("", 2);
            c.gdr = "dmabuf".into();
            c.gdr_flush = "1".into();
            IbNet::new(c, SECRET).unwrap()
        })
        .collect();
    let ls: Vec<_> = nets.iter().map(|n| n.listen(0).unwrap()).collect();
    let handles: Vec<Option<Handle>> = ls.iter().map(|l| Some(l.0)).collect();
    let mut joins = Vec::new();
    for (me, (net, (_, l))) in nets.into_iter().zip(ls).enumerate() {
        let mut hs = handles.clone();
        hs[me] = None;
        assert!(net.device_memory(), "the backend registers device memory");
        joins.push(std::thread::spawn(move || {
            let (mut e, copies) = gdr_engine(net, l, me, N, hs);
            let mut msgs = (0u64, 0u64);
            for (i, (name, build)) in cases.iter().enumerate() {
                let sched = build(me);
                let kind = *name;
                let (slen, rlen) = match kind {
                    "allgather" => (B, N * B),
                    "allreduce" => (N * B, N * B),
                    _ => (N * B, N * B),
                };
                let send: Vec<u8> = (0..slen).map(|k| val(me, k)).collect();
                let mut recv = vec![0xEEu8; rlen];
                let want: Vec<u8> = match kind {
                    "allgather" => (0..rlen).map(|k| val(k / B, k % B)).collect(),
                    "allreduce" => (0..N * B)
                        .map(|k| (0..N).fold(0u8, |a, r| a.wrapping_add(val(r, k))))
                        .collect(),
                    _ => (0..rlen).map(|k| val(k / B, me * B + k % B)).collect(),
                };
                let copy_steps = sched
                    .steps
                    .iter()
                    .filter(|s| matches!(s, Step::Copy { src, .. } if src.len > 0))
                    .count();
                for st in &sched.steps {
                    match st {
                        Step::Send { src, .. } => {
                            assert!(src.len >= GDR_BULK_MIN, "{kind}: bulk-sized messages");
                            msgs.0 += 1;
                        }
                        Step::Recv { .. } => msgs.1 += 1,
                        _ => {}
                    }
                }
                let tmp = (sched.tmp_len > 0)
                    .then(|| Box::new(VecDev(vec![0u8; sched.tmp_len])) as Box<dyn DevBuf>);
                let add = |i: &[u8], o: &mut [u8]| {
                    for (x, y) in i.iter().zip(o.iter_mut()) {
                        *y = y.wrapping_add(*x);
                    }
                };
                let dev_reduce: mpi_abi::engine::coll::DevReduceFn = Box::new(move |i, o, len| {
                    // SAFETY: the fake device's memory is host memory; the executor passes
                    // non-overlapping regions of `len` bytes.
                    unsafe {
                        add(
                            std::slice::from_raw_parts(i as *const u8, len),
                            std::slice::from_raw_parts_mut(o as *mut u8, len),
                        )
                    };
                    Ok(())
                });
                let before = copies.load(SeqCst);
                // SAFETY: the buffers outlive the executor, which finishes below; they count
                // as device memory for the test hook and the fake device copies.
                let mut x = unsafe {
                    CollExec::new(
                        sched,
                        send.as_ptr(),
                        recv.as_mut_ptr(),
                        5,
                        -100 - i as i32,
                        Arc::from((0..N).collect::<Vec<_>>()),
                        me,
                        Box::new(move |i: &[u8], o: &mut [u8]| {
                            add(i, o);
                            Ok(())
                        }),
                    )
                    .on_device(OnDevice {
                        send: true,
                        recv: true,
                        tmp,
                        reduce: Some(dev_reduce),
                        commutative: true,
                    })
                    .unwrap()
                };
                let end = deadline();
                while !x.advance(&mut e).unwrap() {
                    assert!(Instant::now() < end, "rank {me}: {kind} never completed");
                }
                drop(x);
                assert!(recv == want, "rank {me}: {kind}: every byte lands");
                assert_eq!(
                    copies.load(SeqCst) - before,
                    2 * copy_steps,
                    "rank {me}: {kind}: no host copy but the copy steps' (through the host here)"
                );
            }
            assert_eq!(
                e.bulk_transfers(),
                msgs.0 + msgs.1,
                "rank {me}: every message one bulk transfer"
            );
            assert_eq!(e.live_requests(), 0);
            drop(e);
            msgs.1
        }));
    }
    let recvs: u64 = joins.into_iter().map(|j| j.join().unwrap()).sum();
    let flushes = std::fs::read_to_string(&trace)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("read ") && l.ends_with(" 1"))
        .count() as u64;
    assert_eq!(
        flushes, recvs,
        "one flush per bulk transfer into device memory"
    );
    println!("gdr_coll: {recvs} device messages by GPUDirect RDMA");
}

/// Device buffers the NIC cannot register, over the double (`FAKEIBV_FAULT=dmabuf_refuse=N`:
/// dma-buf registrations of [`GDR_REFUSE`] bytes or more fail, as for VMM memory without the
/// GPUDirect RDMA flag), in a child process: both backends register device memory, yet a
/// message whose device buffer (at either end) is that large takes the pipeline through host
/// memory instead of ending the job; the smaller ones from the threshold on still go as one
/// bulk transfer each, flushed where they land in device memory. Every byte lands.
fn gdr_unregistrable_child() {
    mpi_abi::transport::net::ib::host_memory_as_device_for_tests(true);
    let trace = std::env::var("FAKEIBV_TRACE").unwrap();
    let _ = std::fs::remove_file(&trace);
    let ok = GDR_SIZES
        .iter()
        .filter(|&&z| (GDR_BULK_MIN..GDR_REFUSE).contains(&z))
        .count();
    assert!(ok > 0 && GDR_SIZES.iter().any(|&z| z >= GDR_REFUSE));
    let [(c0, b0), (c1, b1)] = gdr_engines([true, true]);
    assert_eq!(
        (b0, b1),
        (3 * ok as u64, 3 * ok as u64),
        "bulk transfers only for the buffers that register"
    );
    assert!(
        c0 > 0 && c1 > 0,
        "the rest pipelined through host memory: {c0} {c1}"
    );
    let flushes = std::fs::read_to_string(&trace)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("read ") && l.ends_with(" 1"))
        .count();
    assert_eq!(
        flushes,
        2 * ok,
        "one flush per bulk transfer into device memory"
    );
    println!("gdr_unregistrable: bulk {b0}/{b1}, copies {c0}/{c1}");
}

/// The size from which the double refuses to register device memory in
/// [`gdr_unregistrable_child`].
const GDR_REFUSE: usize = 1 << 20;

#[test]
fn device_buffers_the_nic_cannot_register_take_the_host_pipeline() {
    let trace = format!(
        "{}/fakeibv-trace-gdr-unregistrable-{}",
        env!("CARGO_TARGET_TMPDIR"),
        std::process::id()
    );
    let fault = format!("dmabuf_refuse={GDR_REFUSE}");
    let out = child(
        "gdr_unregistrable",
        &[("FAKEIBV_TRACE", &trace), ("FAKEIBV_FAULT", &fault)],
    );
    let _ = std::fs::remove_file(&trace);
    assert!(out.contains("CHILD gdr_unregistrable OK"), "{out}");
}

#[test]
fn engine_moves_device_buffers_between_nodes_by_gpudirect_rdma() {
    let trace = format!(
        "{}/fakeibv-trace-gdr-engine-{}",
        env!("CARGO_TARGET_TMPDIR"),
        std::process::id()
    );
    let out = child("gdr_engine", &[("FAKEIBV_TRACE", &trace)]);
    let _ = std::fs::remove_file(&trace);
    assert!(out.contains("CHILD gdr_engine OK"), "{out}");
}

#[test]
fn device_collectives_between_nodes_move_by_gpudirect_rdma() {
    let trace = format!(
        "{}/fakeibv-trace-gdr-coll-{}",
        env!("CARGO_TARGET_TMPDIR"),
        std::process::id()
    );
    let out = child("gdr_coll", &[("FAKEIBV_TRACE", &trace)]);
    let _ = std::fs::remove_file(&trace);
    assert!(out.contains("CHILD gdr_coll OK"), "{out}");
}

#[test]
fn gdr_receives_are_flushed_before_they_complete() {
    for (sc, on) in [("gdr_flush_on", true), ("gdr_flush_off", false)] {
        let trace = format!(
            "{}/fakeibv-trace-{sc}-{}",
            env!("CARGO_TARGET_TMPDIR"),
            std::process::id()
        );
        let out = child(sc, &[("FAKEIBV_TRACE", &trace)]);
        let _ = std::fs::remove_file(&trace);
        assert!(out.contains(&format!("CHILD {sc} OK")), "flush {on}: {out}");
    }
}

#[test]
fn fault_qp_to_error() {
    let out = child("qp_error", &[("FAKEIBV_FAULT", "qp_error=5")]);
    assert!(
        out.contains("retry counter exceeded") && out.contains("127.0.0.1"),
        "{out}"
    );
    assert!(out.contains("// then: ib:"), "{out}");
}

#[test]
fn fault_remote_access_error() {
    let out = child("remote_access", &[("FAKEIBV_FAULT", "remote_access=4")]);
    assert!(
        out.contains("remote access error") || out.contains("flushed"),
        "{out}"
    );
    assert!(out.contains("// then: ib:"), "{out}");
}

#[test]
fn fault_cq_overrun() {
    let out = child("cq_overrun", &[("FAKEIBV_FAULT", "cq_overrun")]);
    assert!(out.contains("completion queue overrun"), "{out}");
}

#[test]
fn fault_port_down() {
    let out = child("port_down", &[("FAKEIBV_FAULT", "port_down")]);
    assert!(out.contains("port down: fib0:1 is DOWN"), "{out}");
}

#[test]
fn fault_no_device() {
    let out = child("no_device", &[("FAKEIBV_DEVICES", "")]);
    assert!(out.contains("no RDMA device"), "{out}");
}

#[test]
fn fault_memlock_too_low() {
    let out = child("memlock", &[("FAKEIBV_FAULT", "memlock")]);
    assert!(
        out.contains("RLIMIT_MEMLOCK is 1048576 bytes soft") && out.contains("ulimit -l unlimited"),
        "{out}"
    );
}

#[test]
fn a_missing_libibverbs_is_a_clear_error() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "missing_lib_child",
            "--include-ignored",
            "--nocapture",
        ])
        .env("NET_IB_CHILD", "missing")
        .env("GPUMPI_IBVERBS_LIB", "/nonexistent/libibverbs.so.1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("cannot load /nonexistent/libibverbs.so.1"),
        "{text}"
    );
}

#[test]
#[ignore = "run by a_missing_libibverbs_is_a_clear_error in a child process"]
fn missing_lib_child() {
    if std::env::var_os("NET_IB_CHILD").is_none() {
        return;
    }
    let e = IbNet::new(cfg("", 1), SECRET).err().unwrap();
    println!("ERROR: {e}");
}

#[path = "support/skip.rs"]
mod skip;

/// On the GPU machine: device memory registered through the dma-buf path (a real dma-buf
/// descriptor from `cuMemGetHandleForAddressRange`, handed to the double's `ibv_reg_dmabuf_mr`,
/// which checks that it is an open descriptor), and a buffer freed and reallocated at the same
/// address registered anew (never the stale cache entry). The double cannot move device
/// memory between processes, so no data moves here.
#[test]
fn gpu_dmabuf_registration_through_the_double() {
    use mpi_abi::sys::cuda;
    const T: &str = "net_ib::gpu_dmabuf_registration_through_the_double";
    let n = match cuda::load() {
        Ok((_, n)) => n,
        Err(e) => return skip::gpu_skip(T, &format!("no CUDA: {e}")),
    };
    if n < 1 {
        return skip::gpu_skip(T, "no CUDA device");
    }
    if !cuda::dmabuf_supported() {
        return skip::gpu_skip(T, "device 0 does not export dma-bufs");
    }
    setup();
    let ctx = cuda::primary_context(0).unwrap();
    let mut c = cfg("=fib0", 1);
    c.gdr = "dmabuf".into();
    let net = IbNet::new(c, SECRET).unwrap();
    assert!(net.devices()[0].ptr_support.dmabuf && net.devices()[0].ptr_support.cuda);
    let (mut s, _r) = pair(&net);
    let len = 4 << 20;
    let (first, again, second) = cuda::with_context(ctx, || {
        let p = cuda::mem_alloc(len)?;
        let m1 = s.reg_mr(p as *const u8, len, MemKind::Cuda).unwrap();
        let m1b = s
            .reg_mr((p + 4096) as *const u8, 100, MemKind::Cuda)
            .unwrap();
        s.dereg_mr(m1).unwrap();
        s.dereg_mr(m1b).unwrap();
        // SAFETY: p came from mem_alloc and is no longer registered (the cached region is
        // evicted at the next lookup of a new buffer over its range).
        unsafe { cuda::mem_free(p) };
        let q = cuda::mem_alloc(len)?;
        let m2 = s.reg_mr(q as *const u8, len, MemKind::Cuda).unwrap();
        println!("first buffer {p:#x}, second {q:#x}");
        s.dereg_mr(m2).unwrap();
        // SAFETY: as above.
        unsafe { cuda::mem_free(q) };
        Ok((m1, m1b, m2))
    })
    .unwrap();
    assert_eq!(
        first, again,
        "a range inside a registered buffer hits its region"
    );
    assert_ne!(
        first, second,
        "a reallocated buffer must not hit the stale registration"
    );
}
