//! Test helper for `tests/mpirun.rs` (MPI programs cannot be linked yet): uses
//! `bootstrap::init()` directly. Every rank puts a value, fences, reads every
//! peer's value and prints `rank R/N pid P job J local L/LS peers v0,v1,...`.
//! Then a fence (every line is printed before anyone misbehaves) and, by option
//! (each names the rank that misbehaves; the others wait in a
//! second fence that never completes, to be killed by mpirun):
//!   --exit R CODE    rank R exits with CODE
//!   --kill R         rank R kills itself with SIGKILL
//!   --abort R CODE   rank R aborts through the bootstrap
//!   --abort-thread R CODE  rank R waits in a fence that cannot complete while another of its
//!                    threads aborts (the others sleep)
//!   --nofinalize R   rank R exits 0 without finalizing
//!   --drop-conn R    rank R shuts its sockets down (as a broken library would) and sleeps
//!   --hang           every rank sleeps forever
//!   --shm            every rank creates `/dev/shm/gpumpi-<job>-helper-<rank>` first
//!   --lines K        every rank prints K long lines (checks line-atomic forwarding)
//!   --stderr         also print one line to stderr
//!   --long K         every rank also puts a K-byte value and checks every peer's
//!   --method         every rank first prints `method M rank R/N`: the bootstrap method that
//!                    `bootstrap::init` chose (the same `choose` over the environment)
//! Without a misbehaviour option: a second fence, finalize, exit 0.

use mpi_abi::bootstrap;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let b = match bootstrap::init() {
        Ok(b) => b,
        Err(e) => {
            eprintln!("helper: bootstrap init failed: {e}");
            std::process::exit(3);
        }
    };
    let (rank, size) = (b.rank(), b.size());
    if args.iter().any(|a| a == "--method") {
        let forced = mpi_abi::config::get("GPUMPI_BOOTSTRAP");
        let (m, _) = bootstrap::choose(forced.as_deref(), bootstrap::Method::detect)
            .expect("init chose a method with the same inputs");
        println!("method {} rank {rank}/{size}", m.name());
    }
    let arg = |name: &str, k: usize| -> Option<String> {
        args.iter()
            .position(|a| a == name)
            .map(|i| args.get(i + k).cloned().unwrap_or_default())
    };
    let num =
        |name: &str, k: usize| arg(name, k).map(|v| v.parse::<i64>().expect("numeric argument"));
    if arg("--shm", 0).is_some() {
        std::fs::write(
            format!("/dev/shm/gpumpi-{}-helper-{rank}", b.job_id()),
            b"x",
        )
        .unwrap();
    }
    let long = |r: usize, k: usize| -> Vec<u8> { (0..k).map(|i| (i * 31 + r * 7) as u8).collect() };
    let long_len = num("--long", 1).map(|k| k as usize);
    if let Some(k) = long_len {
        b.put("long", &long(rank, k));
    }
    b.put("val", format!("v{rank}").as_bytes());
    b.fence().expect("fence");
    if let Some(k) = long_len {
        for q in 0..size {
            assert_eq!(
                b.get(q, "long").expect("get long"),
                long(q, k),
                "long value of rank {q}"
            );
        }
        assert!(
            b.get((rank + 1) % size, "no-such-key").is_err(),
            "a key nobody put"
        );
        println!("rank {rank}: {size} long values of {k} bytes ok");
    }
    let peers: Vec<String> = (0..size)
        .map(|q| String::from_utf8(b.get(q, "val").expect("get")).unwrap())
        .collect();
    println!(
        "rank {rank}/{size} pid {} job {} local {}/{} peers {}",
        std::process::id(),
        b.job_id(),
        b.local_rank(),
        b.local_size(),
        peers.join(",")
    );
    if arg("--stderr", 0).is_some() {
        eprintln!("rank {rank} says hello on stderr");
    }
    if let Some(k) = num("--lines", 1) {
        let body: String = std::iter::repeat_n((b'a' + rank as u8) as char, 3000).collect();
        for i in 0..k {
            println!("L {rank} {i} {body}");
        }
    }
    use std::io::Write;
    std::io::stdout().flush().unwrap();
    // Every rank has printed its line before anyone misbehaves.
    b.fence().expect("fence after printing");
    let me = |name: &str| num(name, 1) == Some(rank as i64);
    if arg("--hang", 0).is_some() {
        loop {
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
    }
    if me("--exit") {
        std::process::exit(num("--exit", 2).unwrap() as i32);
    }
    if me("--kill") {
        // SAFETY: plain kill(2) of this process.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    }
    if me("--abort") {
        b.abort(
            num("--abort", 2).unwrap() as i32,
            &format!("helper rank {rank} gives up"),
        );
    }
    if arg("--abort-thread", 0).is_some() {
        if me("--abort-thread") {
            let b: &'static (dyn bootstrap::Bootstrap + Send) = Box::leak(b);
            let code = num("--abort-thread", 2).unwrap() as i32;
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(200));
                b.abort(code, "abort from a second thread");
            });
            let _ = b.fence();
        }
        loop {
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
    }
    if me("--drop-conn") {
        for e in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
            let is_socket = std::fs::read_link(e.path())
                .is_ok_and(|t| t.to_string_lossy().starts_with("socket:"));
            if let (true, Ok(fd)) = (is_socket, e.file_name().to_string_lossy().parse::<i32>()) {
                // SAFETY: shutdown(2) on a socket descriptor this process owns; it stays open.
                unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
            }
        }
        loop {
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
    }
    if me("--nofinalize") {
        std::process::exit(0);
    }
    b.fence().expect("second fence");
    b.finalize().expect("finalize");
}
