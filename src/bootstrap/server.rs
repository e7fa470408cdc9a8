//! The wire-up server embedded in `mpirun`: listens on a Unix socket, one
//! thread per client connection (jobs are small and each thread mostly sleeps
//! in a blocking read), shared state under one mutex. It reports what the
//! launcher must act on (aborts, lost ranks) as [`Event`]s on a channel.

use super::wire::{self, Msg};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::Duration;

/// How long a new connection may take to present its `Hello`.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// How many connections may wait for their first (unauthenticated) frame at once.
const MAX_PREAUTH: usize = 256;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A rank called abort(code, msg) through the bootstrap.
    Abort { rank: usize, code: i32, msg: String },
    /// A rank that had said hello closed its connection without finalizing.
    Lost { rank: usize },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RankState {
    NotConnected,
    Connected,
    Finalized,
    Lost,
}

struct State {
    ranks: Vec<RankState>,
    /// Fence generation; bumps when the last rank arrives.
    gen: u64,
    arrived: usize,
    pending: Vec<(u32, String, Vec<u8>)>,
    /// The encoded `FenceDone` frame of the last completed generation.
    reply: Arc<Vec<u8>>,
    shutdown: bool,
}

struct Shared {
    secret: Vec<u8>,
    size: usize,
    st: Mutex<State>,
    cv: Condvar,
    events: Mutex<Sender<Event>>,
    stop: AtomicBool,
    /// Connections accepted whose first frame has not been read yet.
    preauth: AtomicUsize,
}

pub struct Server {
    path: PathBuf,
    shared: Arc<Shared>,
    events: Receiver<Event>,
}

impl Server {
    /// Listen on `path` (which must not exist) for a job of `size` ranks.
    pub fn start(path: &Path, size: usize, secret: Vec<u8>) -> std::io::Result<Server> {
        let listener = UnixListener::bind(path)?;
        let (tx, rx) = channel();
        let shared = Arc::new(Shared {
            secret,
            size,
            st: Mutex::new(State {
                ranks: vec![RankState::NotConnected; size],
                gen: 0,
                arrived: 0,
                pending: Vec::new(),
                reply: Arc::new(Vec::new()),
                shutdown: false,
            }),
            cv: Condvar::new(),
            events: Mutex::new(tx),
            stop: AtomicBool::new(false),
            preauth: AtomicUsize::new(0),
        });
        let sh = shared.clone();
        thread::Builder::new()
            .name("gpumpi-wireup".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    if sh.stop.load(Ordering::Acquire) {
                        break;
                    }
                    match conn {
                        // At most MAX_PREAUTH connections wait for their first frame at once:
                        // with MAX_PREAUTH_FRAME each, that bounds what unauthenticated peers
                        // make the server hold; more are closed at once.
                        Ok(_) if sh.preauth.load(Ordering::Acquire) >= MAX_PREAUTH => {
                            tracing::warn!("wire-up server: too many unauthenticated connections");
                        }
                        Ok(s) => {
                            sh.preauth.fetch_add(1, Ordering::AcqRel);
                            let conn_sh = sh.clone();
                            let spawned = thread::Builder::new()
                                .name("gpumpi-wireup-conn".into())
                                .spawn(move || serve(&conn_sh, s));
                            if spawned.is_err() {
                                sh.preauth.fetch_sub(1, Ordering::AcqRel);
                            }
                        }
                        Err(e) => tracing::warn!("wire-up server: accept failed: {e}"),
                    }
                }
            })?;
        Ok(Server {
            path: path.to_path_buf(),
            shared,
            events: rx,
        })
    }

    pub fn events(&self) -> &Receiver<Event> {
        &self.events
    }

    pub fn rank_state(&self, rank: usize) -> RankState {
        self.shared.st.lock().unwrap().ranks[rank]
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.st.lock().unwrap().shutdown = true;
        self.shared.cv.notify_all();
        // Wake the accept loop so that it sees `stop`.
        let _ = UnixStream::connect(&self.path);
        // Later clients get a clear "no such file" instead of a connection nobody serves.
        let _ = std::fs::remove_file(&self.path);
    }
}

fn send_event(sh: &Shared, e: Event) {
    let _ = sh.events.lock().unwrap().send(e);
}

/// Constant-time comparison of the presented secret.
fn secret_ok(expected: &[u8], got: &[u8]) -> bool {
    expected.len() == got.len()
        && expected
            .iter()
            .zip(got)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

fn serve(sh: &Shared, mut s: UnixStream) {
    let _ = s.set_read_timeout(Some(HELLO_TIMEOUT));
    // Until the secret is checked, a peer gets one small frame and a few seconds.
    let first = wire::read_msg_max(&mut s, wire::MAX_PREAUTH_FRAME);
    sh.preauth.fetch_sub(1, Ordering::AcqRel);
    let rank = match first {
        Ok(Msg::Hello {
            version,
            rank,
            pid,
            secret,
        }) => {
            let refuse = |s: &mut UnixStream, why: String| {
                tracing::warn!("wire-up server: refused a client: {why}");
                let _ = wire::write_msg(s, &Msg::Error { msg: why });
            };
            if !secret_ok(&sh.secret, &secret) {
                return refuse(&mut s, "bad secret".into());
            }
            if version != wire::PROTOCOL_VERSION {
                return refuse(
                    &mut s,
                    format!(
                        "protocol version {version}, server speaks {}",
                        wire::PROTOCOL_VERSION
                    ),
                );
            }
            let rank = rank as usize;
            if rank >= sh.size {
                return refuse(
                    &mut s,
                    format!("rank {rank} is out of range for a job of {} ranks", sh.size),
                );
            }
            {
                let mut st = sh.st.lock().unwrap();
                if st.ranks[rank] != RankState::NotConnected {
                    drop(st);
                    return refuse(&mut s, format!("rank {rank} has already connected"));
                }
                st.ranks[rank] = RankState::Connected;
            }
            tracing::debug!("wire-up server: rank {rank} (pid {pid}) connected");
            let welcome = Msg::Welcome {
                node_ranks: (0..sh.size as u32).collect(),
                appnum: 0,
            };
            if wire::write_msg(&mut s, &welcome).is_err() {
                lost(sh, rank);
                return;
            }
            rank
        }
        Ok(Msg::Abort {
            rank,
            secret,
            code,
            msg,
        }) => {
            // A standalone abort on a fresh connection.
            let reply = if !secret_ok(&sh.secret, &secret) {
                Msg::Error {
                    msg: "bad secret".into(),
                }
            } else if rank as usize >= sh.size {
                Msg::Error {
                    msg: format!("rank {rank} is out of range for a job of {} ranks", sh.size),
                }
            } else {
                send_event(
                    sh,
                    Event::Abort {
                        rank: rank as usize,
                        code,
                        msg,
                    },
                );
                Msg::Ok
            };
            let _ = wire::write_msg(&mut s, &reply);
            return;
        }
        Ok(other) => {
            tracing::warn!("wire-up server: first message was not Hello: {other:?}");
            let _ = wire::write_msg(
                &mut s,
                &Msg::Error {
                    msg: "expected Hello".into(),
                },
            );
            return;
        }
        Err(e) => {
            tracing::warn!("wire-up server: bad or missing Hello: {e}");
            return;
        }
    };
    let _ = s.set_read_timeout(None);
    loop {
        let m = match wire::read_msg(&mut s) {
            Ok(m) => m,
            Err(e) => {
                tracing::debug!("wire-up server: rank {rank}: {e}");
                lost(sh, rank);
                return;
            }
        };
        match m {
            Msg::Fence { puts } => {
                let reply = {
                    let mut st = sh.st.lock().unwrap();
                    st.pending
                        .extend(puts.into_iter().map(|(k, v)| (rank as u32, k, v)));
                    st.arrived += 1;
                    let my_gen = st.gen;
                    if st.arrived == sh.size {
                        let kvs = std::mem::take(&mut st.pending);
                        st.reply = Arc::new(Msg::FenceDone { kvs }.encode());
                        st.arrived = 0;
                        st.gen += 1;
                        sh.cv.notify_all();
                    }
                    while st.gen == my_gen && !st.shutdown {
                        st = sh.cv.wait(st).unwrap();
                    }
                    if st.gen == my_gen {
                        return; // shutting down
                    }
                    st.reply.clone()
                };
                if std::io::Write::write_all(&mut s, &reply).is_err() {
                    lost(sh, rank);
                    return;
                }
            }
            Msg::Abort {
                secret, code, msg, ..
            } if secret_ok(&sh.secret, &secret) => {
                send_event(sh, Event::Abort { rank, code, msg });
                let _ = wire::write_msg(&mut s, &Msg::Ok);
                // Keep the connection open: the launcher kills the rank.
            }
            Msg::Finalize => {
                sh.st.lock().unwrap().ranks[rank] = RankState::Finalized;
                let _ = wire::write_msg(&mut s, &Msg::Ok);
                return;
            }
            other => {
                tracing::warn!("wire-up server: rank {rank} sent an unexpected {other:?}");
                let _ = wire::write_msg(
                    &mut s,
                    &Msg::Error {
                        msg: "unexpected message".into(),
                    },
                );
                lost(sh, rank);
                return;
            }
        }
    }
}

fn lost(sh: &Shared, rank: usize) {
    let mut st = sh.st.lock().unwrap();
    if st.ranks[rank] == RankState::Connected {
        st.ranks[rank] = RankState::Lost;
        drop(st);
        send_event(sh, Event::Lost { rank });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rng::XorShift;
    use std::io::{Read, Write};

    fn tmp_sock(tag: &str) -> (PathBuf, PathBuf) {
        let dir = std::env::temp_dir().join(format!("gpumpi-test-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        (dir.join("s"), dir)
    }

    fn hello(path: &Path, rank: u32, secret: &[u8]) -> (UnixStream, Msg) {
        let mut s = UnixStream::connect(path).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let h = Msg::Hello {
            version: wire::PROTOCOL_VERSION,
            rank,
            pid: 1,
            secret: secret.to_vec(),
        };
        wire::write_msg(&mut s, &h).unwrap();
        let r = wire::read_msg(&mut s).unwrap();
        (s, r)
    }

    #[test]
    fn fence_exchanges_all_puts_in_one_round_trip() {
        let (path, dir) = tmp_sock("fence");
        let n = 5;
        let srv = Server::start(&path, n, vec![7; 32]).unwrap();
        let hs: Vec<_> = (0..n)
            .map(|r| {
                let path = path.clone();
                thread::spawn(move || {
                    let (mut s, w) = hello(&path, r as u32, &[7; 32]);
                    assert_eq!(
                        w,
                        Msg::Welcome {
                            node_ranks: (0..n as u32).collect(),
                            appnum: 0
                        }
                    );
                    for round in 0..3u8 {
                        let puts = vec![(format!("k{round}"), vec![r as u8, round])];
                        wire::write_msg(&mut s, &Msg::Fence { puts }).unwrap();
                        match wire::read_msg(&mut s).unwrap() {
                            Msg::FenceDone { mut kvs } => {
                                kvs.sort();
                                let want: Vec<_> = (0..n as u32)
                                    .map(|q| (q, format!("k{round}"), vec![q as u8, round]))
                                    .collect();
                                assert_eq!(kvs, want);
                            }
                            m => panic!("{m:?}"),
                        }
                    }
                    wire::write_msg(&mut s, &Msg::Finalize).unwrap();
                    assert_eq!(wire::read_msg(&mut s).unwrap(), Msg::Ok);
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        for r in 0..n {
            assert_eq!(srv.rank_state(r), RankState::Finalized);
        }
        assert!(srv.events().try_recv().is_err());
        drop(srv);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn bad_secret_duplicate_and_out_of_range_are_refused() {
        let (path, dir) = tmp_sock("refuse");
        let srv = Server::start(&path, 2, vec![1; 32]).unwrap();
        let (_s, r) = hello(&path, 0, &[2; 32]);
        assert_eq!(
            r,
            Msg::Error {
                msg: "bad secret".into()
            }
        );
        let (_s, r) = hello(&path, 5, &[1; 32]);
        assert!(
            matches!(r, Msg::Error { ref msg } if msg.contains("out of range")),
            "{r:?}"
        );
        let (_s0, r) = hello(&path, 0, &[1; 32]);
        assert!(matches!(r, Msg::Welcome { .. }));
        let (_s, r) = hello(&path, 0, &[1; 32]);
        assert!(
            matches!(r, Msg::Error { ref msg } if msg.contains("already")),
            "{r:?}"
        );
        assert_eq!(srv.rank_state(1), RankState::NotConnected);
        drop(srv);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn abort_and_lost_are_reported() {
        let (path, dir) = tmp_sock("events");
        let srv = Server::start(&path, 2, vec![1; 8]).unwrap();
        let (mut s0, _) = hello(&path, 0, &[1; 8]);
        let (s1, _) = hello(&path, 1, &[1; 8]);
        // Rank 0 waits in a fence; its abort comes on a fresh connection.
        wire::write_msg(&mut s0, &Msg::Fence { puts: vec![] }).unwrap();
        let abort = |secret: Vec<u8>| {
            let mut a = UnixStream::connect(&path).unwrap();
            let m = Msg::Abort {
                rank: 0,
                secret,
                code: 3,
                msg: "boom".into(),
            };
            wire::write_msg(&mut a, &m).unwrap();
            wire::read_msg(&mut a).unwrap()
        };
        assert_eq!(
            abort(vec![2; 8]),
            Msg::Error {
                msg: "bad secret".into()
            }
        );
        assert_eq!(abort(vec![1; 8]), Msg::Ok);
        let e = srv.events().recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(
            e,
            Event::Abort {
                rank: 0,
                code: 3,
                msg: "boom".into()
            }
        );
        drop(s1);
        let e = srv.events().recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(e, Event::Lost { rank: 1 });
        assert_eq!(srv.rank_state(1), RankState::Lost);
        drop(srv);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn random_bytes_never_break_the_server() {
        let (path, dir) = tmp_sock("fuzz");
        let srv = Server::start(&path, 1, vec![5; 16]).unwrap();
        let mut rng = XorShift(12345);
        for i in 0..200 {
            let mut s = UnixStream::connect(&path).unwrap();
            let n = (rng.next() % 200) as usize;
            let mut b = rng.bytes(n);
            if i % 3 == 0 && b.len() >= 5 {
                // A plausible length prefix so the decoder sees the garbage body.
                let len = (b.len() - 4) as u32;
                b[..4].copy_from_slice(&len.to_le_bytes());
            }
            let _ = s.write_all(&b);
        }
        // Garbage after a good hello: the rank counts as lost, nothing panics.
        let (mut s, r) = hello(&path, 0, &[5; 16]);
        assert!(matches!(r, Msg::Welcome { .. }));
        s.write_all(&[3, 0, 0, 0, 99, 1, 2]).unwrap();
        let e = srv.events().recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(e, Event::Lost { rank: 0 });
        drop(srv);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn unauthenticated_peers_get_one_small_frame() {
        let (path, dir) = tmp_sock("preauth");
        let srv = Server::start(&path, 1, vec![6; 16]).unwrap();
        // A first frame announcing 1 MiB is refused before anything is allocated or read:
        // the server closes the connection (the peer sees end of stream, not a reply).
        let mut s = UnixStream::connect(&path).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(&(1u32 << 20).to_le_bytes()).unwrap();
        let mut buf = [0u8; 8];
        assert_eq!(s.read(&mut buf).unwrap(), 0, "connection must be closed");
        const { assert!(wire::MAX_PREAUTH_FRAME < 1 << 20) };
        // Idle unauthenticated connections beyond the cap are closed at once.
        let idle: Vec<UnixStream> = (0..MAX_PREAUTH)
            .map(|_| UnixStream::connect(&path).unwrap())
            .collect();
        std::thread::sleep(Duration::from_millis(200));
        let mut extra = UnixStream::connect(&path).unwrap();
        extra
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        assert_eq!(extra.read(&mut buf).unwrap(), 0, "over the cap: closed");
        drop(idle);
        std::thread::sleep(Duration::from_millis(200));
        // The job's own rank still connects.
        let (_s, r) = hello(&path, 0, &[6; 16]);
        assert!(matches!(r, Msg::Welcome { .. }), "{r:?}");
        drop(srv);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
