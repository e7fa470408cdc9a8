//! The node daemon: `mpirun --gpumpi-daemon`, started on another host through the launch agent
//! (`ssh HOST mpirun --gpumpi-daemon`), runs that host's ranks for mpirun.
//!
//! It reads one line from its stdin, `SERVER NODE SECRET` (mpirun's wire-up address
//! `tcp://IP:PORT`, its node index, the job secret in hex: the secret never appears on a
//! command line), connects back to mpirun, answers its challenge with a proof of the secret
//! (`wire::proof`; the secret never crosses the network) in a `DaemonHello`, and gets
//! the node's `Launch` (program, arguments, working directory, each rank's environment).
//! It starts the ranks as mpirun does on its own host (own process group, killed when the
//! daemon dies, CPU binding by local rank), forwards their output line by line and their exit
//! statuses, and obeys `Kill`. When the connection to mpirun ends before its ranks do (mpirun
//! killed, host unreachable), or the daemon itself gets SIGINT/SIGTERM/SIGHUP, it SIGKILLs
//! every rank's process group and exits: nothing is left running on the host.

use super::procs::{self, Proc};
use super::stream::Stream;
use super::wire::{self, Msg};
use crate::config;
use std::io::BufRead;
use std::os::unix::process::ExitStatusExt;
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The argument that selects daemon mode (the only one it takes).
pub const DAEMON_ARG: &str = "--gpumpi-daemon";
/// How long the daemon waits for mpirun to close the connection after its last rank ended.
const LINGER: Duration = Duration::from_secs(10);

/// What the thread reading mpirun's connection reports.
enum FromMpirun {
    Kill(i32),
    Gone(String),
}

/// Entry point of daemon mode; returns the daemon's exit code (non-zero: see its stderr, which
/// the launch agent carries back to mpirun).
pub fn main() -> i32 {
    procs::install_signal_handlers();
    let host = super::node::host_name();
    let fail = |msg: String| {
        eprintln!("gpumpi daemon on {host}: {msg}");
        1
    };
    let mut line = String::new();
    if let Err(e) = std::io::stdin().lock().read_line(&mut line) {
        return fail(format!("cannot read the launch line from stdin: {e}"));
    }
    let words: Vec<&str> = line.split_whitespace().collect();
    let (server, node, secret) = match words[..] {
        [s, n, k] => match (n.parse::<u32>(), wire::from_hex(k)) {
            (Ok(n), Some(k)) => (s.to_string(), n, k),
            _ => return fail("the launch line on stdin is malformed".into()),
        },
        _ => {
            return fail(format!(
                "expected `SERVER NODE SECRET` on stdin, got {} words (run by mpirun only)",
                words.len()
            ))
        }
    };
    let timeout = Duration::from_secs(config::get_usize("GPUMPI_BOOTSTRAP_TIMEOUT").max(1) as u64);
    let mut conn = match Stream::connect(&server, timeout) {
        Ok(c) => c,
        Err(e) => return fail(format!("cannot connect to mpirun at {server}: {e}")),
    };
    let _ = conn.set_read_timeout(Some(timeout));
    let launch = wire::read_challenge(&mut conn).and_then(|nonce| {
        let hello = Msg::DaemonHello {
            version: wire::PROTOCOL_VERSION,
            node,
            proof: wire::proof(&secret, &nonce, "daemon"),
            build: env!("CARGO_PKG_VERSION").into(),
        };
        wire::write_msg(&mut conn, &hello)?;
        wire::read_msg(&mut conn)
    });
    let (program, args, cwd, ranks) = match launch {
        Ok(Msg::Launch {
            program,
            args,
            cwd,
            ranks,
        }) => (program, args, cwd, ranks),
        Ok(Msg::Error { msg }) => return fail(format!("mpirun at {server} refused: {msg}")),
        Ok(m) => return fail(format!("unexpected reply from mpirun at {server}: {m:?}")),
        Err(e) => return fail(format!("no launch from mpirun at {server}: {e}")),
    };
    let _ = conn.set_read_timeout(None);
    if !cwd.is_empty() && std::path::Path::new(&cwd).is_dir() {
        let _ = std::env::set_current_dir(&cwd);
    }
    let reader = match conn.try_clone() {
        Ok(r) => r,
        Err(e) => return fail(format!("cannot clone the connection: {e}")),
    };
    let from_mpirun = listen(reader);
    let out = Arc::new(Mutex::new(conn));
    let send = |m: &Msg| {
        let _ = wire::write_msg(&mut *out.lock().unwrap(), m);
    };

    let n = ranks.len();
    let mut procs: Vec<Proc> = Vec::with_capacity(n);
    let mut outputs: Vec<(usize, [JoinHandle<()>; 2])> = Vec::new();
    let secret_hex = wire::to_hex(&secret);
    for (local, (rank, env)) in ranks.iter().enumerate() {
        let rank = *rank as usize;
        // The job secret from the launch line (mpirun does not send it over the network).
        let mut env = env.clone();
        env.push(("GPUMPI_SECRET".into(), secret_hex.clone()));
        let env = &env;
        match procs::spawn(&program, &args, env, false, procs::bind_set(n, local)) {
            Ok(mut child) => {
                let pid = child.id() as i32;
                send(&Msg::Started {
                    rank: rank as u32,
                    pid: pid as u32,
                });
                let fwd = |src: Box<dyn std::io::Read + Send>, stderr: bool| {
                    let out = out.clone();
                    std::thread::spawn(move || {
                        procs::read_lines(src, |l| {
                            let m = Msg::Output {
                                rank: rank as u32,
                                stderr,
                                data: l.to_vec(),
                            };
                            let _ = wire::write_msg(&mut *out.lock().unwrap(), &m);
                        })
                    })
                };
                let so = fwd(Box::new(child.stdout.take().unwrap()), false);
                let se = fwd(Box::new(child.stderr.take().unwrap()), true);
                outputs.push((rank, [so, se]));
                procs.push(Proc {
                    rank,
                    child,
                    pid,
                    status: None,
                });
            }
            Err(e) => {
                send(&Msg::SpawnFailed {
                    rank: rank as u32,
                    code: procs::spawn_error_code(&e),
                    msg: format!("{program:?}: {e}"),
                });
                break;
            }
        }
    }

    let mut kill_at: Option<Instant> = None;
    let mut reported = vec![false; procs.len()];
    loop {
        let sig = procs::take_signal();
        if sig != 0 {
            procs::terminate_all(&mut procs, libc::SIGKILL);
            return fail(format!(
                "received signal {sig}; killed the ranks of this host"
            ));
        }
        match from_mpirun.try_recv() {
            Ok(FromMpirun::Kill(s)) => {
                procs::signal_all(&procs, s);
                kill_at.get_or_insert(Instant::now() + procs::KILL_GRACE);
            }
            Ok(FromMpirun::Gone(why)) => {
                procs::terminate_all(&mut procs, libc::SIGKILL);
                if reported.iter().all(|&r| r) {
                    return 0; // mpirun closed the connection after the job ended
                }
                return fail(format!(
                    "lost the connection to mpirun at {server} ({why}); killed the ranks of this host"
                ));
            }
            Err(_) => {}
        }
        if kill_at.is_some_and(|t| Instant::now() >= t) {
            procs::signal_all(&procs, libc::SIGKILL);
        }
        procs::reap(&mut procs);
        for (i, p) in procs.iter().enumerate() {
            let Some(st) = p.status else { continue };
            if reported[i] {
                continue;
            }
            reported[i] = true;
            // The rank's output goes first: wait for its pipes to close (a grandchild that
            // kept them open gets a second).
            if let Some(pos) = outputs.iter().position(|(r, _)| *r == p.rank) {
                let (_, hs) = outputs.swap_remove(pos);
                let deadline = Instant::now() + Duration::from_secs(1);
                for h in hs {
                    while !h.is_finished() && Instant::now() < deadline {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                }
            }
            send(&Msg::Exited {
                rank: p.rank as u32,
                status: st.into_raw(),
            });
        }
        if reported.iter().all(|&r| r) {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    // Every rank is reported: wait for mpirun to close the connection.
    let t = Instant::now();
    while t.elapsed() < LINGER {
        match from_mpirun.recv_timeout(Duration::from_millis(50)) {
            Ok(FromMpirun::Gone(_)) | Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                return 0
            }
            _ => {}
        }
        if procs::take_signal() != 0 {
            return 0;
        }
    }
    0
}

/// A thread that reads mpirun's messages until the connection ends.
fn listen(mut conn: Stream) -> Receiver<FromMpirun> {
    let (tx, rx) = channel();
    std::thread::spawn(move || loop {
        match wire::read_msg(&mut conn) {
            Ok(Msg::Kill { signal }) => {
                let _ = tx.send(FromMpirun::Kill(signal));
            }
            Ok(m) => tracing::warn!("gpumpi daemon: unexpected message from mpirun: {m:?}"),
            Err(e) => {
                let _ = tx.send(FromMpirun::Gone(e.to_string()));
                return;
            }
        }
    });
    rx
}
