//! The wire-up server embedded in `mpirun`: listens on a Unix socket, and on TCP as well when
//! the job has ranks on other hosts; one thread per client connection (jobs are small and each
//! thread mostly sleeps in a blocking read), shared state under one mutex. It reports what the
//! launcher must act on (aborts, lost ranks) as [`Event`]s on a channel, and hands the
//! authenticated connections of node daemons to the launcher ([`Server::daemons`]). Both
//! listeners share one bound on connections that have not yet presented the secret.

use super::stream::Stream;
use super::wire::{self, Msg};
use std::net::{SocketAddr, TcpListener, TcpStream};
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
    /// The node index of each rank.
    node_of: Vec<usize>,
    /// Node indices that may present a daemon hello (nodes started through a launch agent).
    daemon_nodes: Vec<usize>,
    daemons: Mutex<Sender<(usize, Stream)>>,
    st: Mutex<State>,
    cv: Condvar,
    events: Mutex<Sender<Event>>,
    stop: AtomicBool,
    /// Connections accepted whose first frame has not been read yet.
    preauth: AtomicUsize,
}

pub struct Server {
    path: PathBuf,
    tcp: Option<SocketAddr>,
    shared: Arc<Shared>,
    events: Receiver<Event>,
    daemons: Receiver<(usize, Stream)>,
}

/// Where a job's ranks run, as the server needs it.
pub struct Layout {
    /// The node index of each rank (all 0 on one node).
    pub node_of: Vec<usize>,
    /// The nodes whose daemon may connect.
    pub daemon_nodes: Vec<usize>,
}

impl Server {
    /// Listen on `path` (which must not exist) for a job of `size` ranks on one node.
    pub fn start(path: &Path, size: usize, secret: Vec<u8>) -> std::io::Result<Server> {
        let layout = Layout {
            node_of: vec![0; size],
            daemon_nodes: Vec::new(),
        };
        Self::start_with(path, None, layout, secret)
    }

    /// Listen on `path` and, when given, on `tcp` (a bound listener) for a job laid out as
    /// `layout`.
    pub fn start_with(
        path: &Path,
        tcp: Option<TcpListener>,
        layout: Layout,
        secret: Vec<u8>,
    ) -> std::io::Result<Server> {
        let listener = UnixListener::bind(path)?;
        let tcp_addr = match &tcp {
            Some(l) => Some(l.local_addr()?),
            None => None,
        };
        let size = layout.node_of.len();
        let (tx, rx) = channel();
        let (dtx, drx) = channel();
        let shared = Arc::new(Shared {
            secret,
            size,
            node_of: layout.node_of,
            daemon_nodes: layout.daemon_nodes,
            daemons: Mutex::new(dtx),
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
            .spawn(move || accept_loop(&sh, listener.incoming().map(|c| c.map(Stream::Unix))))?;
        if let Some(l) = tcp {
            let sh = shared.clone();
            thread::Builder::new()
                .name("gpumpi-wireup-tcp".into())
                .spawn(move || {
                    accept_loop(
                        &sh,
                        l.incoming().map(|c| {
                            let c = c?;
                            c.set_nodelay(true)?;
                            Ok(Stream::Tcp(c))
                        }),
                    )
                })?;
        }
        Ok(Server {
            path: path.to_path_buf(),
            tcp: tcp_addr,
            shared,
            events: rx,
            daemons: drx,
        })
    }

    pub fn events(&self) -> &Receiver<Event> {
        &self.events
    }

    /// Authenticated daemon connections: (node index, connection), after the daemon's hello
    /// (which the launcher answers with the node's `Launch`).
    pub fn daemons(&self) -> &Receiver<(usize, Stream)> {
        &self.daemons
    }

    /// The TCP address the server listens on, if any.
    pub fn tcp_addr(&self) -> Option<SocketAddr> {
        self.tcp
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
        // Wake the accept loops so that they see `stop`.
        let _ = UnixStream::connect(&self.path);
        if let Some(a) = self.tcp {
            let _ = TcpStream::connect_timeout(&a, Duration::from_secs(1));
        }
        // Later clients get a clear "no such file" instead of a connection nobody serves.
        let _ = std::fs::remove_file(&self.path);
    }
}

fn send_event(sh: &Shared, e: Event) {
    let _ = sh.events.lock().unwrap().send(e);
}

/// The refusal of a client whose proof of the job secret does not match.
const BAD_SECRET: &str = "bad secret (its proof of the job secret does not match the challenge)";

/// Accepts connections until the server stops; each gets a thread.
fn accept_loop(sh: &Arc<Shared>, incoming: impl Iterator<Item = std::io::Result<Stream>>) {
    for conn in incoming {
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
}

fn serve(sh: &Shared, mut s: Stream) {
    let _ = s.set_read_timeout(Some(HELLO_TIMEOUT));
    let _ = s.set_write_timeout(Some(HELLO_TIMEOUT));
    // Every connection starts with a fresh challenge; the client's first frame answers it with
    // a MAC keyed by the secret (wire::proof), so the secret never crosses the connection.
    // Until the answer is checked, a peer gets one small frame and a few seconds.
    let first = wire::nonce().and_then(|nonce| {
        wire::write_msg(
            &mut s,
            &Msg::Challenge {
                nonce: nonce.clone(),
            },
        )?;
        Ok((nonce, wire::read_msg_max(&mut s, wire::MAX_PREAUTH_FRAME)?))
    });
    sh.preauth.fetch_sub(1, Ordering::AcqRel);
    let _ = s.set_write_timeout(None);
    let (nonce, first) = match first {
        Ok((nonce, m)) => (nonce, Ok(m)),
        Err(e) => (Vec::new(), Err(e)),
    };
    let rank = match first {
        Ok(Msg::Hello {
            version,
            rank,
            pid,
            proof,
        }) => {
            let refuse = |s: &mut Stream, why: String| {
                tracing::warn!("wire-up server: refused a client: {why}");
                let _ = wire::write_msg(s, &Msg::Error { msg: why });
            };
            if !wire::proof_ok(&sh.secret, &nonce, "hello", &proof) {
                return refuse(&mut s, BAD_SECRET.into());
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
            let node = sh.node_of[rank];
            let welcome = Msg::Welcome {
                node_ranks: (0..sh.size)
                    .filter(|&r| sh.node_of[r] == node)
                    .map(|r| r as u32)
                    .collect(),
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
            proof,
            code,
            msg,
        }) => {
            // A standalone abort on a fresh connection.
            let reply = if !wire::proof_ok(&sh.secret, &nonce, "abort", &proof) {
                Msg::Error {
                    msg: BAD_SECRET.into(),
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
        Ok(Msg::DaemonHello {
            version,
            node,
            proof,
            build,
        }) => {
            let why = if !wire::proof_ok(&sh.secret, &nonce, "daemon", &proof) {
                Some(BAD_SECRET.to_string())
            } else if version != wire::PROTOCOL_VERSION || build != env!("CARGO_PKG_VERSION") {
                Some(format!(
                    "the daemon is gpumpi {build} (protocol {version}), mpirun is gpumpi {} \
                     (protocol {}): install the same version on every host",
                    env!("CARGO_PKG_VERSION"),
                    wire::PROTOCOL_VERSION
                ))
            } else if !sh.daemon_nodes.contains(&(node as usize)) {
                Some(format!("node {node} is not started through a launch agent"))
            } else {
                None
            };
            match why {
                Some(why) => {
                    tracing::warn!("wire-up server: refused a daemon: {why}");
                    let _ = wire::write_msg(&mut s, &Msg::Error { msg: why });
                }
                None => {
                    let _ = s.set_read_timeout(None);
                    let _ = sh.daemons.lock().unwrap().send((node as usize, s));
                }
            }
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
            // On the rank's authenticated connection: the proof answers its challenge.
            Msg::Abort {
                proof, code, msg, ..
            } if wire::proof_ok(&sh.secret, &nonce, "abort", &proof) => {
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
        let nonce = wire::read_challenge(&mut s).unwrap();
        let h = Msg::Hello {
            version: wire::PROTOCOL_VERSION,
            rank,
            pid: 1,
            proof: wire::proof(secret, &nonce, "hello"),
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
                msg: BAD_SECRET.into()
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
            let nonce = wire::read_challenge(&mut a).unwrap();
            let m = Msg::Abort {
                rank: 0,
                proof: wire::proof(&secret, &nonce, "abort"),
                code: 3,
                msg: "boom".into(),
            };
            wire::write_msg(&mut a, &m).unwrap();
            wire::read_msg(&mut a).unwrap()
        };
        assert_eq!(
            abort(vec![2; 8]),
            Msg::Error {
                msg: BAD_SECRET.into()
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

    /// Over TCP (ranks and daemons on other hosts): the client answers a fresh challenge with a
    /// MAC, so no frame from the client contains the secret; a client with another secret, or
    /// one replaying an answer recorded on another connection, is refused with a clear error.
    #[test]
    fn tcp_clients_prove_the_secret_without_sending_it() {
        let (path, dir) = tmp_sock("tcp");
        let secret = vec![0x5e; 32];
        let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = tcp.local_addr().unwrap();
        let layout = Layout {
            node_of: vec![0, 1],
            daemon_nodes: vec![1],
        };
        let srv = Server::start_with(&path, Some(tcp), layout, secret.clone()).unwrap();
        let connect = || {
            let mut s = TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let nonce = wire::read_challenge(&mut s).unwrap();
            (s, nonce)
        };
        let hello = |s: &mut TcpStream, proof: Vec<u8>| {
            let h = Msg::Hello {
                version: wire::PROTOCOL_VERSION,
                rank: 1,
                pid: 1,
                proof,
            };
            let frame = h.encode();
            assert!(!frame.windows(secret.len()).any(|w| w == secret));
            s.write_all(&frame).unwrap();
            wire::read_msg(s).unwrap()
        };
        // Another job's secret, the secret itself sent in the clear (a client that skips the challenge), and
        // an answer to another connection's challenge: refused.
        let (mut s, nonce) = connect();
        let r = hello(&mut s, wire::proof(&[0x5f; 32], &nonce, "hello"));
        assert_eq!(
            r,
            Msg::Error {
                msg: BAD_SECRET.into()
            }
        );
        let (mut s, _) = connect();
        let mut m = Msg::Hello {
            version: wire::PROTOCOL_VERSION,
            rank: 1,
            pid: 1,
            proof: secret.clone(),
        };
        wire::write_msg(&mut s, &m).unwrap();
        assert_eq!(
            wire::read_msg(&mut s).unwrap(),
            Msg::Error {
                msg: BAD_SECRET.into()
            }
        );
        let (_s, old) = connect();
        let (mut s, nonce) = connect();
        assert_ne!(old, nonce, "every connection gets a fresh challenge");
        let r = hello(&mut s, wire::proof(&secret, &old, "hello"));
        assert_eq!(
            r,
            Msg::Error {
                msg: BAD_SECRET.into()
            }
        );
        // A daemon's proof does not pass for a rank's hello (the kind of message is bound).
        let (mut s, nonce) = connect();
        let r = hello(&mut s, wire::proof(&secret, &nonce, "daemon"));
        assert_eq!(
            r,
            Msg::Error {
                msg: BAD_SECRET.into()
            }
        );
        assert_eq!(srv.rank_state(1), RankState::NotConnected);
        // The right answer: welcome.
        let (mut s, nonce) = connect();
        if let Msg::Hello { proof, .. } = &mut m {
            *proof = wire::proof(&secret, &nonce, "hello");
        }
        wire::write_msg(&mut s, &m).unwrap();
        assert!(matches!(
            wire::read_msg(&mut s).unwrap(),
            Msg::Welcome { .. }
        ));
        assert_eq!(srv.rank_state(1), RankState::Connected);
        // A daemon with a wrong secret: refused; with the right one, handed to the launcher.
        let daemon = |secret: &[u8]| {
            let (mut s, nonce) = connect();
            let d = Msg::DaemonHello {
                version: wire::PROTOCOL_VERSION,
                node: 1,
                proof: wire::proof(secret, &nonce, "daemon"),
                build: env!("CARGO_PKG_VERSION").into(),
            };
            wire::write_msg(&mut s, &d).unwrap();
            s
        };
        let mut s = daemon(&[1; 32]);
        assert_eq!(
            wire::read_msg(&mut s).unwrap(),
            Msg::Error {
                msg: BAD_SECRET.into()
            }
        );
        let _s = daemon(&secret);
        let (node, _) = srv.daemons().recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(node, 1);
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
        wire::read_challenge(&mut s).unwrap();
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
