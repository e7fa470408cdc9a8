//! Throughput of the TCP network backend against raw TCP, over loopback, in one process:
//!
//!   cargo run --release --example net-bench -- [--threads T] [--socks S] [--streams N]
//!       [--window W] [--mib MIB] [--sizes 65536,1048576,...]
//!
//! For each message size: raw TCP with one stream (a sender and a receiver thread over one
//! blocking connection), raw TCP with N streams (N such pairs, each message split evenly), and
//! the backend (`TcpNet` with T helper threads x S sockets per thread, W messages in flight),
//! its messages bulk data (`TAG_BULK`) twice: striped over the data sockets above 20 KiB
//! (`GPUMPI_NET_TCP_STRIPE=1`), and written and read on the control socket by the calling
//! thread (`GPUMPI_NET_TCP_STRIPE=0`).
//! Each point moves about MIB MiB. Prints GB/s (1e9 bytes per second) of payload.

use mpi_abi::transport::net::ifname::Family;
use mpi_abi::transport::net::tcp::{Stripe, TcpConfig, TcpNet};
use mpi_abi::transport::net::{MemKind, Net, RecvBuf, Request, TAG_BULK};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

struct Args {
    threads: usize,
    socks: usize,
    streams: usize,
    window: usize,
    mib: usize,
    sizes: Vec<usize>,
}

fn args() -> Args {
    let mut a = Args {
        threads: 2,
        socks: 2,
        streams: 4,
        window: 8,
        mib: 1024,
        sizes: vec![64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20],
    };
    let v: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < v.len() {
        let val = v.get(i + 1).cloned().unwrap_or_default();
        let num = || {
            val.parse::<usize>()
                .unwrap_or_else(|_| panic!("{}: a number", v[i]))
        };
        match v[i].as_str() {
            "--threads" => a.threads = num(),
            "--socks" => a.socks = num(),
            "--streams" => a.streams = num(),
            "--window" => a.window = num(),
            "--mib" => a.mib = num(),
            "--sizes" => a.sizes = val.split(',').map(|s| s.parse().expect("size")).collect(),
            o => panic!("unknown argument {o}"),
        }
        i += 2;
    }
    a
}

fn iters(a: &Args, size: usize) -> usize {
    ((a.mib << 20) / size).max(4)
}

/// Raw TCP: `streams` blocking connections, each carrying 1/streams of every message.
fn raw(size: usize, n: usize, streams: usize) -> f64 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let part = size.div_ceil(streams);
    let t0 = Instant::now();
    std::thread::scope(|sc| {
        for _ in 0..streams {
            let mut s = TcpStream::connect(addr).unwrap();
            let (mut r, _) = l.accept().unwrap();
            s.set_nodelay(true).unwrap();
            sc.spawn(move || {
                let b = vec![1u8; part];
                for _ in 0..n {
                    s.write_all(&b).unwrap();
                }
            });
            sc.spawn(move || {
                let mut b = vec![0u8; part];
                for _ in 0..n {
                    r.read_exact(&mut b).unwrap();
                }
            });
        }
    });
    (part * streams * n) as f64 / t0.elapsed().as_secs_f64() / 1e9
}

fn backend(net: &TcpNet, size: usize, n: usize, window: usize) -> f64 {
    let (h, mut l) = net.listen(0).unwrap();
    let mut c = net.connect(0, &h).unwrap();
    let (mut s, mut r) = (None, None);
    while s.is_none() || r.is_none() {
        s = s.or(c.poll().unwrap());
        r = r.or(l.accept().unwrap());
    }
    let (mut s, mut r) = (s.unwrap(), r.unwrap());
    let sb = vec![1u8; size * window];
    let mut rb = vec![0u8; size * window];
    let smr = s.reg_mr(sb.as_ptr(), sb.len(), MemKind::Host).unwrap();
    let rmr = r.reg_mr(rb.as_ptr(), rb.len(), MemKind::Host).unwrap();
    let rbase = rb.as_mut_ptr();
    let mut sq: Vec<Option<Request>> = vec![None; window];
    let mut rq: Vec<Option<Request>> = vec![None; window];
    let (mut posted_s, mut posted_r, mut done_r) = (0, 0, 0);
    let t0 = Instant::now();
    while done_r < n {
        for w in 0..window {
            if rq[w].is_none() && posted_r < n {
                // SAFETY: slot w of rb is not in use by another request; rb outlives r.
                let b = RecvBuf {
                    ptr: unsafe { rbase.add(w * size) },
                    size,
                    tag: TAG_BULK,
                    mr: rmr,
                };
                // SAFETY: as above.
                rq[w] = unsafe { r.irecv(&[b]) }.unwrap();
                posted_r += rq[w].is_some() as usize;
            }
            if sq[w].is_none() && posted_s < n {
                // SAFETY: slot w of sb is not modified; sb outlives s.
                sq[w] = unsafe { s.isend(sb[w * size..].as_ptr(), size, TAG_BULK, smr) }.unwrap();
                posted_s += sq[w].is_some() as usize;
            }
            if let Some(q) = sq[w] {
                if s.test(q).unwrap().is_some() {
                    sq[w] = None;
                }
            }
            if let Some(q) = rq[w] {
                if r.test(q, &mut [0]).unwrap() {
                    rq[w] = None;
                    done_r += 1;
                }
            }
        }
        std::thread::yield_now();
    }
    (size * n) as f64 / t0.elapsed().as_secs_f64() / 1e9
}

fn main() {
    let a = args();
    let cfg = TcpConfig {
        ifname: Some("=lo".into()),
        family: Family::V4,
        threads: a.threads,
        socks_per_thread: a.socks,
        connect_timeout: Duration::from_secs(5),
        accept_timeout: Duration::from_secs(5),
        stripe: Stripe::On,
    };
    let net = TcpNet::new(cfg.clone(), b"net-bench").unwrap();
    let inline = TcpNet::new(
        TcpConfig {
            stripe: Stripe::Off,
            ..cfg
        },
        b"net-bench",
    )
    .unwrap();
    println!(
        "# loopback 127.0.0.1; backend {}x{} sockets, window {}; raw N = {} streams; GB/s",
        a.threads, a.socks, a.window, a.streams
    );
    println!(
        "{:>10} {:>9} {:>9} {:>9} {:>8} {:>9} {:>8}",
        "bytes", "raw-1", "raw-N", "striped", "vs raw-N", "inline", "vs raw-N"
    );
    for &size in &a.sizes {
        let n = iters(&a, size);
        let r1 = raw(size, n, 1);
        let rn = raw(size, n, a.streams);
        let b = backend(&net, size, n, a.window);
        let i = backend(&inline, size, n, a.window);
        println!(
            "{size:>10} {r1:>9.2} {rn:>9.2} {b:>9.2} {:>7.0}% {i:>9.2} {:>7.0}%",
            100.0 * b / rn,
            100.0 * i / rn
        );
    }
}
