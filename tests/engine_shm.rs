//! Multi-process tests of the engine over the shared-memory transport. Each test re-runs this
//! test binary as rank 1 (the variable ENGINE_SHM_TEST_CHILD selects the child role; it is a
//! test-harness variable, not a library setting) while the test itself acts as rank 0.
//!
//! The ignored test `shm_pingpong_bench` prints latency and bandwidth:
//! `cargo test --release --test engine_shm -- --ignored --nocapture shm_pingpong_bench`.

use mpi_abi::engine::{Engine, EngineConfig, ReqId, SendArgs, Status};
use mpi_abi::transport::shm::ShmTransport;
use std::process::Command;
use std::time::{Duration, Instant};

const CHILD: &str = "ENGINE_SHM_TEST_CHILD";
const LIMIT: usize = 16 << 10;

struct Opts {
    cma: bool,
    ring: usize,
    /// Largest message of the workload.
    max: usize,
}

fn seg_path(job: &str, r: usize) -> String {
    format!("/dev/shm/gpumpi-{job}-{r}")
}

/// create / fence / attach / fence / unlink, with file-based fences (the child goes through
/// `ShmTransport::establish` and the registered variables, the parent through the explicit calls).
fn setup(job: &str, me: usize, o: &Opts, use_env: bool) -> (Engine, bool) {
    let peer = 1 - me;
    let mark = |r: usize, phase: u32| {
        format!(
            "{}/gpumpi-test-{job}-fence{phase}-{r}",
            std::env::temp_dir().display()
        )
    };
    let mut phase = 0u32;
    let mut fence = || {
        phase += 1;
        std::fs::write(mark(me, phase), b"").unwrap();
        let t0 = Instant::now();
        while !std::path::Path::new(&mark(peer, phase)).exists() {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "peer never reached fence {phase}"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    };
    let t = if use_env {
        ShmTransport::establish(job, me, 2, &mut fence).unwrap()
    } else {
        let mut t = ShmTransport::create_with(job, me, 2, o.ring, o.cma).unwrap();
        fence().unwrap();
        t.attach_peers().unwrap();
        fence().unwrap();
        t.unlink();
        t
    };
    let cma = t.cma_to(peer);
    let mut e = Engine::with_config(
        Box::new(t),
        me,
        2,
        EngineConfig {
            eager_limit: LIMIT,
            cma_min: Some(0),
            push_min: usize::MAX,
            share: true,
        },
    );
    // Once we hear from the peer, it is past both fences: remove our markers.
    let s = isend(&mut e, &[], peer, 0, false);
    let r = irecv(&mut e, &mut [], peer, 0);
    e.wait(s);
    e.wait(r);
    for ph in 1..=2 {
        let _ = std::fs::remove_file(mark(me, ph));
    }
    (e, cma)
}

fn isend(e: &mut Engine, b: &[u8], dst: usize, tag: i32, sync: bool) -> ReqId {
    let me = e.world_rank() as i32;
    let a = SendArgs {
        buf: b.as_ptr(),
        len: b.len(),
        dst_world: dst,
        ctx: 1,
        src_rank: me,
        tag,
        sync,
        dev: None,
        note: None,
    };
    // SAFETY: callers wait for the request before dropping the buffer.
    unsafe { e.isend(a).unwrap() }
}

fn irecv(e: &mut Engine, b: &mut [u8], src: usize, tag: i32) -> ReqId {
    // SAFETY: callers wait for the request before touching the buffer.
    unsafe {
        e.irecv(b.as_mut_ptr(), b.len(), 1, src as i32, tag)
            .unwrap()
    }
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| {
            (i as u8)
                .wrapping_mul(13)
                .wrapping_add(seed)
                .wrapping_add((i >> 12) as u8)
        })
        .collect()
}

/// The workload both ranks run: echo of every boundary size, a sync send, a flood of small
/// unexpected messages (backpressure when the ring is tiny).
fn workload(e: &mut Engine, me: usize, max: usize) {
    let peer = 1 - me;
    let sizes = [0usize, 1, 8, LIMIT - 1, LIMIT, LIMIT + 1, 1 << 20, 10 << 20];
    for (k, &n) in sizes.iter().enumerate().filter(|(_, &n)| n <= max) {
        let tag = k as i32 + 10;
        let mut buf = vec![0u8; n];
        if me == 0 {
            let data = pattern(n, k as u8);
            let s = isend(e, &data, peer, tag, false);
            let r = irecv(e, &mut buf, peer, tag);
            e.wait(s);
            let st: Status = e.wait(r);
            assert_eq!(
                (st.bytes, st.error, st.source, st.tag),
                (n, 0, peer as i32, tag)
            );
            assert!(buf == data, "echo of {n} bytes corrupted");
        } else {
            let r = irecv(e, &mut buf, peer, tag);
            assert_eq!(e.wait(r).bytes, n);
            let s = isend(e, &buf, peer, tag, false);
            e.wait(s);
        }
    }
    // Sync send: completes only after the receiver matched. The receiver posts its receive only
    // after telling the sender that the message has arrived (unmatched) and hearing back that
    // the send was still incomplete then: the order is fixed by messages, not by timing.
    let arrived = |e: &mut Engine, tag: i32| {
        let t0 = Instant::now();
        while e.iprobe(1, peer as i32, tag).is_none() {
            e.progress();
            assert!(
                t0.elapsed() < Duration::from_secs(120),
                "no message with tag {tag} (hang)"
            );
        }
    };
    if me == 0 {
        let s = isend(e, b"sync", peer, 50, true);
        arrived(e, 52); // the receiver has the message, unmatched
        assert!(
            e.test(s).is_none(),
            "sync send completed before the receive was posted"
        );
        let r = irecv(e, &mut [], peer, 52);
        e.wait(r);
        let go = isend(e, &[], peer, 51, false); // now post your receive
        e.wait(go);
        e.wait(s);
    } else {
        arrived(e, 50);
        let here = isend(e, &[], peer, 52, false);
        let go = irecv(e, &mut [], peer, 51);
        e.wait(go);
        let mut b = [0u8; 4];
        let r = irecv(e, &mut b, peer, 50);
        e.wait(r);
        e.wait(here);
        assert_eq!(&b, b"sync");
    }
    // Flood: 2000 small messages sent before the receiver posts anything.
    let n = 2000usize;
    if me == 0 {
        let bufs: Vec<[u8; 40]> = (0..n).map(|i| [(i % 251) as u8; 40]).collect();
        let reqs: Vec<ReqId> = bufs.iter().map(|b| isend(e, b, peer, 60, false)).collect();
        for r in reqs {
            e.wait(r);
        }
    } else {
        std::thread::sleep(Duration::from_millis(30));
        for i in 0..n {
            let mut b = [0u8; 40];
            let r = irecv(e, &mut b, peer, 60);
            e.wait(r);
            assert_eq!(b, [(i % 251) as u8; 40], "flood message {i} out of order");
        }
    }
    // Final handshake so neither side leaves while the other still reads its memory.
    let s = isend(e, &[], peer, 99, false);
    let r = irecv(e, &mut [], peer, 99);
    e.wait(s);
    e.wait(r);
    assert_eq!(e.live_requests(), 0);
}

/// Returns true when this process is the child (the test body is then done).
fn run(name: &str, o: Opts, child_env: &[(&str, &str)]) {
    if let Ok(job) = std::env::var(CHILD) {
        // Child: rank 1, configured through the registered GPUMPI_* variables.
        let (mut e, cma) = setup(&job, 1, &o, true);
        assert_eq!(cma, o.cma && cma_expected(), "child CMA state");
        workload(&mut e, 1, o.max);
        return;
    }
    let job = format!("t{}-{name}", std::process::id());
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, &job);
    for (k, v) in child_env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let (mut e, cma) = setup(&job, 0, &o, false);
    if !o.cma {
        assert!(!cma);
    } else if !cma {
        eprintln!("note: CMA refused by this kernel/container; the pipelined path was tested");
    }
    workload(&mut e, 0, o.max);
    let st = child.wait().unwrap();
    assert!(st.success(), "child rank failed: {st}");
    assert!(
        !std::path::Path::new(&seg_path(&job, 0)).exists(),
        "segment left in /dev/shm"
    );
    assert!(
        !std::path::Path::new(&seg_path(&job, 1)).exists(),
        "segment left in /dev/shm"
    );
}

fn cma_expected() -> bool {
    // Whether this machine allows process_vm_readv at all (the child's probe result must match).
    let v = 5u64;
    let mut out = 0u64;
    let local = libc::iovec {
        iov_base: &mut out as *mut u64 as *mut libc::c_void,
        iov_len: 8,
    };
    let remote = libc::iovec {
        iov_base: &v as *const u64 as *mut libc::c_void,
        iov_len: 8,
    };
    // SAFETY: reads 8 bytes of our own stack into a local.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    n == 8 && out == 5
}

#[test]
fn shm_two_processes_cma() {
    run(
        "shm_two_processes_cma",
        Opts {
            cma: true,
            ring: 128 << 10,
            max: 10 << 20,
        },
        &[("GPUMPI_SHM_CMA", "1"), ("GPUMPI_SHM_RING_BYTES", "128k")],
    );
}

#[test]
fn shm_two_processes_no_cma() {
    run(
        "shm_two_processes_no_cma",
        Opts {
            cma: false,
            ring: 128 << 10,
            max: 10 << 20,
        },
        &[("GPUMPI_SHM_CMA", "0"), ("GPUMPI_SHM_RING_BYTES", "128k")],
    );
}

#[test]
fn shm_two_processes_tiny_ring_backpressure() {
    run(
        "shm_two_processes_tiny_ring_backpressure",
        Opts {
            cma: false,
            ring: 2048,
            max: 1 << 20,
        },
        &[("GPUMPI_SHM_CMA", "0"), ("GPUMPI_SHM_RING_BYTES", "2k")],
    );
}

/// Latency and bandwidth between two processes. Run with --release --ignored --nocapture.
#[test]
#[ignore]
fn shm_pingpong_bench() {
    let name = "shm_pingpong_bench";
    let cma = std::env::var("BENCH_CMA").map_or(true, |v| v != "0");
    let o = Opts {
        cma,
        ring: 128 << 10,
        max: 10 << 20,
    };
    let child = std::env::var(CHILD).ok();
    let me = if child.is_some() { 1 } else { 0 };
    let mut proc_child = None;
    let job = match child {
        Some(j) => j,
        None => {
            let job = format!("b{}", std::process::id());
            let c = Command::new(std::env::current_exe().unwrap())
                .args([
                    name,
                    "--exact",
                    "--nocapture",
                    "--test-threads=1",
                    "--ignored",
                ])
                .env(CHILD, &job)
                .env("GPUMPI_SHM_CMA", if cma { "1" } else { "0" })
                .env(
                    "BENCH_CMA_MIN",
                    std::env::var("BENCH_CMA_MIN").unwrap_or_else(|_| "0".into()),
                )
                .spawn()
                .unwrap();
            proc_child = Some(c);
            job
        }
    };
    let (mut e, got_cma) = setup(&job, me, &o, me == 1);
    if let Ok(v) = std::env::var("BENCH_CMA_MIN") {
        e.set_cma_min(Some(v.parse().unwrap()));
    }
    let peer = 1 - me;
    let wait = |e: &mut Engine, r: ReqId| e.wait(r);
    for &n in &[
        8usize,
        1024,
        16 << 10,
        64 << 10,
        1 << 20,
        4 << 20,
        16 << 20,
        64 << 20,
    ] {
        let iters = if n <= 1024 {
            20000
        } else if n <= (64 << 10) {
            2000
        } else {
            50
        };
        let sbuf = vec![1u8; n];
        let mut rbuf = vec![0u8; n];
        let mut t0 = Instant::now();
        for i in 0..iters + iters / 10 {
            if i == iters / 10 {
                t0 = Instant::now();
            }
            if me == 0 {
                let s = isend(&mut e, &sbuf, peer, 1, false);
                wait(&mut e, s);
                let r = irecv(&mut e, &mut rbuf, peer, 1);
                wait(&mut e, r);
            } else {
                let r = irecv(&mut e, &mut rbuf, peer, 1);
                wait(&mut e, r);
                let s = isend(&mut e, &sbuf, peer, 1, false);
                wait(&mut e, s);
            }
        }
        let dt = t0.elapsed().as_secs_f64();
        if me == 0 {
            let one_way = dt / iters as f64 / 2.0;
            println!(
                "pingpong cma={got_cma} {n:>9} B: one-way {:8.3} us, {:8.1} MB/s",
                one_way * 1e6,
                n as f64 / one_way / 1e6
            );
        }
    }
    let s = isend(&mut e, &[], peer, 99, false);
    let r = irecv(&mut e, &mut [], peer, 99);
    e.wait(s);
    e.wait(r);
    if let Some(mut c) = proc_child {
        assert!(c.wait().unwrap().success());
    }
}

/// Software overhead of the eager path: two engines over shm in ONE thread, alternating, so no
/// cross-core latency or scheduling is included. Run with --release --ignored --nocapture.
#[test]
#[ignore]
fn shm_single_thread_overhead_bench() {
    let job = format!("o{}", std::process::id());
    let mut a = ShmTransport::create_with(&job, 0, 2, 128 << 10, true).unwrap();
    let mut b = ShmTransport::create_with(&job, 1, 2, 128 << 10, true).unwrap();
    a.attach_peers().unwrap();
    b.attach_peers().unwrap();
    a.unlink();
    b.unlink();
    let cfg = EngineConfig {
        eager_limit: LIMIT,
        cma_min: Some(0),
        push_min: usize::MAX,
        share: true,
    };
    let mut es = [
        Engine::with_config(Box::new(a), 0, 2, cfg),
        Engine::with_config(Box::new(b), 1, 2, cfg),
    ];
    for &n in &[8usize, 1024, 8192] {
        let sbuf = vec![1u8; n];
        let mut rbuf = vec![0u8; n];
        let iters = 200_000;
        let t0 = Instant::now();
        let c0 = cpu_time();
        for _ in 0..iters {
            for (from, to) in [(0usize, 1usize), (1, 0)] {
                let r = irecv(&mut es[to], &mut rbuf, from, 1);
                let s = isend(&mut es[from], &sbuf, to, 1, false);
                assert!(es[from].test(s).is_some());
                loop {
                    if es[to].test(r).is_some() {
                        break;
                    }
                }
            }
        }
        let per = t0.elapsed().as_secs_f64() / (2 * iters) as f64;
        let cpu = (cpu_time() - c0) / (2 * iters) as f64;
        println!(
            "single-thread send+recv {n:>5} B: {:.3} us wall, {:.3} us CPU per message",
            per * 1e6,
            cpu * 1e6
        );
    }
}

fn cpu_time() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}
