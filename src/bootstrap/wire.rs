//! The wire protocol between our `mpirun`'s wire-up server and its clients
//! (the ranks), over a Unix stream socket.
//!
//! Every message is one frame: `u32 length (LE)` of the body, then the body:
//! `u8 kind` followed by the fields of that kind. Integers are little endian;
//! byte strings and text are `u32 length + bytes`. Frames larger than
//! [`MAX_FRAME`] are refused. Decoding never panics on any input.
//!
//! Conversation (client = C, server = S):
//! - S `Challenge{nonce}`: the server's first frame on every connection (16 fresh random
//!   bytes). The client's first message proves it knows the job secret with [`proof`] (a keyed
//!   MAC of the nonce); the secret itself never crosses the connection.
//! - C `Hello{version, rank, pid, proof}` -> S `Welcome{node_ranks, appnum}` or `Error`.
//! - C `Fence{puts}` (every key/value put since the previous fence, in one
//!   message) -> S, once every rank has fenced, `FenceDone{kvs}` with the puts
//!   of all ranks since the previous fence: one round trip per fence.
//! - C `Abort{rank, proof, code, msg}`, as the first message of a fresh connection (so that it
//!   gets through while another thread of the rank waits in a fence) -> S `Ok` (or `Error` for a
//!   bad proof), and the server tells the launcher, which ends the job.
//! - C `Finalize` -> S `Ok`; a client that disconnects without it is dead.
//!
//! The same server also listens on TCP when a job spans hosts; there the other peer can be a
//! node daemon (`mpirun --gpumpi-daemon`, [`super::daemon`]) that starts a host's ranks:
//! - D `DaemonHello{version, node, proof, build}` -> S `Launch{program, args, cwd, ranks}` (each
//!   rank with its environment) or `Error` (bad secret, another gpumpi version, unknown node).
//! - D `Started{rank, pid}` or `SpawnFailed{rank, code, msg}` per rank, then `Output{rank, stderr,
//!   data}` (one line of a rank's stdout or stderr) and `Exited{rank, status}` (the raw wait
//!   status, sent after the rank's output).
//! - S `Kill{signal}`: signal every rank's process group, SIGKILL after a grace period. The
//!   server closing the connection (mpirun done, or killed) makes the daemon SIGKILL whatever
//!   still runs and exit.

use crate::transport::net::auth::{ct_eq, random, Key};
use std::io::{self, Read, Write};

/// Largest accepted frame body.
pub const MAX_FRAME: usize = 64 << 20;
/// The largest first frame (`Hello`, or a standalone `Abort`) of a connection not yet
/// authenticated: what an unauthenticated peer can make the server allocate.
pub const MAX_PREAUTH_FRAME: usize = 64 << 10;
/// Bumped on any incompatible change; `Hello` carries it.
pub const PROTOCOL_VERSION: u32 = 2;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    Hello {
        version: u32,
        rank: u32,
        pid: u32,
        /// [`proof`] of the job secret for the connection's challenge.
        proof: Vec<u8>,
    },
    Welcome {
        node_ranks: Vec<u32>,
        appnum: u32,
    },
    Fence {
        puts: Vec<(String, Vec<u8>)>,
    },
    FenceDone {
        kvs: Vec<(u32, String, Vec<u8>)>,
    },
    Abort {
        rank: u32,
        proof: Vec<u8>,
        code: i32,
        msg: String,
    },
    Finalize,
    Ok,
    Error {
        msg: String,
    },
    DaemonHello {
        version: u32,
        node: u32,
        proof: Vec<u8>,
        /// The gpumpi version the daemon was built from (must equal mpirun's).
        build: String,
    },
    Launch {
        program: String,
        args: Vec<String>,
        cwd: String,
        /// Each rank of the node and the variables to set in its environment.
        ranks: Vec<(u32, Vec<(String, String)>)>,
    },
    Started {
        rank: u32,
        pid: u32,
    },
    SpawnFailed {
        rank: u32,
        code: i32,
        msg: String,
    },
    Output {
        rank: u32,
        stderr: bool,
        data: Vec<u8>,
    },
    Exited {
        rank: u32,
        status: i32,
    },
    Kill {
        signal: i32,
    },
    /// The server's first frame on every connection: a fresh random nonce.
    Challenge {
        nonce: Vec<u8>,
    },
}

const K_HELLO: u8 = 1;
const K_WELCOME: u8 = 2;
const K_FENCE: u8 = 3;
const K_FENCE_DONE: u8 = 4;
const K_ABORT: u8 = 5;
const K_FINALIZE: u8 = 6;
const K_OK: u8 = 7;
const K_ERROR: u8 = 8;
const K_DAEMON_HELLO: u8 = 9;
const K_LAUNCH: u8 = 10;
const K_STARTED: u8 = 11;
const K_SPAWN_FAILED: u8 = 12;
const K_OUTPUT: u8 = 13;
const K_EXITED: u8 = 14;
const K_KILL: u8 = 15;
const K_CHALLENGE: u8 = 16;

fn put_u32(b: &mut Vec<u8>, v: u32) {
    b.extend_from_slice(&v.to_le_bytes());
}
fn put_bytes(b: &mut Vec<u8>, v: &[u8]) {
    put_u32(b, v.len() as u32);
    b.extend_from_slice(v);
}

impl Msg {
    /// The whole frame: length prefix and body.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; 4];
        match self {
            Msg::Hello {
                version,
                rank,
                pid,
                proof,
            } => {
                b.push(K_HELLO);
                put_u32(&mut b, *version);
                put_u32(&mut b, *rank);
                put_u32(&mut b, *pid);
                put_bytes(&mut b, proof);
            }
            Msg::Welcome { node_ranks, appnum } => {
                b.push(K_WELCOME);
                put_u32(&mut b, *appnum);
                put_u32(&mut b, node_ranks.len() as u32);
                for r in node_ranks {
                    put_u32(&mut b, *r);
                }
            }
            Msg::Fence { puts } => {
                b.push(K_FENCE);
                put_u32(&mut b, puts.len() as u32);
                for (k, v) in puts {
                    put_bytes(&mut b, k.as_bytes());
                    put_bytes(&mut b, v);
                }
            }
            Msg::FenceDone { kvs } => {
                b.push(K_FENCE_DONE);
                put_u32(&mut b, kvs.len() as u32);
                for (r, k, v) in kvs {
                    put_u32(&mut b, *r);
                    put_bytes(&mut b, k.as_bytes());
                    put_bytes(&mut b, v);
                }
            }
            Msg::Abort {
                rank,
                proof,
                code,
                msg,
            } => {
                b.push(K_ABORT);
                put_u32(&mut b, *rank);
                put_bytes(&mut b, proof);
                put_u32(&mut b, *code as u32);
                put_bytes(&mut b, msg.as_bytes());
            }
            Msg::Finalize => b.push(K_FINALIZE),
            Msg::Ok => b.push(K_OK),
            Msg::Error { msg } => {
                b.push(K_ERROR);
                put_bytes(&mut b, msg.as_bytes());
            }
            Msg::DaemonHello {
                version,
                node,
                proof,
                build,
            } => {
                b.push(K_DAEMON_HELLO);
                put_u32(&mut b, *version);
                put_u32(&mut b, *node);
                put_bytes(&mut b, proof);
                put_bytes(&mut b, build.as_bytes());
            }
            Msg::Launch {
                program,
                args,
                cwd,
                ranks,
            } => {
                b.push(K_LAUNCH);
                put_bytes(&mut b, program.as_bytes());
                put_u32(&mut b, args.len() as u32);
                for a in args {
                    put_bytes(&mut b, a.as_bytes());
                }
                put_bytes(&mut b, cwd.as_bytes());
                put_u32(&mut b, ranks.len() as u32);
                for (r, env) in ranks {
                    put_u32(&mut b, *r);
                    put_u32(&mut b, env.len() as u32);
                    for (k, v) in env {
                        put_bytes(&mut b, k.as_bytes());
                        put_bytes(&mut b, v.as_bytes());
                    }
                }
            }
            Msg::Started { rank, pid } => {
                b.push(K_STARTED);
                put_u32(&mut b, *rank);
                put_u32(&mut b, *pid);
            }
            Msg::SpawnFailed { rank, code, msg } => {
                b.push(K_SPAWN_FAILED);
                put_u32(&mut b, *rank);
                put_u32(&mut b, *code as u32);
                put_bytes(&mut b, msg.as_bytes());
            }
            Msg::Output { rank, stderr, data } => {
                b.push(K_OUTPUT);
                put_u32(&mut b, *rank);
                b.push(u8::from(*stderr));
                put_bytes(&mut b, data);
            }
            Msg::Exited { rank, status } => {
                b.push(K_EXITED);
                put_u32(&mut b, *rank);
                put_u32(&mut b, *status as u32);
            }
            Msg::Kill { signal } => {
                b.push(K_KILL);
                put_u32(&mut b, *signal as u32);
            }
            Msg::Challenge { nonce } => {
                b.push(K_CHALLENGE);
                put_bytes(&mut b, nonce);
            }
        }
        let len = (b.len() - 4) as u32;
        b[..4].copy_from_slice(&len.to_le_bytes());
        b
    }

    /// Decode one frame body (without its length prefix).
    pub fn decode(body: &[u8]) -> Result<Msg, String> {
        let mut c = Cursor { b: body, pos: 0 };
        let kind = c.u8()?;
        let m = match kind {
            K_HELLO => Msg::Hello {
                version: c.u32()?,
                rank: c.u32()?,
                pid: c.u32()?,
                proof: c.bytes()?.to_vec(),
            },
            K_WELCOME => {
                let appnum = c.u32()?;
                let n = c.count(4)?;
                let mut node_ranks = Vec::with_capacity(n);
                for _ in 0..n {
                    node_ranks.push(c.u32()?);
                }
                Msg::Welcome { node_ranks, appnum }
            }
            K_FENCE => {
                let n = c.count(8)?;
                let mut puts = Vec::with_capacity(n);
                for _ in 0..n {
                    puts.push((c.text()?, c.bytes()?.to_vec()));
                }
                Msg::Fence { puts }
            }
            K_FENCE_DONE => {
                let n = c.count(12)?;
                let mut kvs = Vec::with_capacity(n);
                for _ in 0..n {
                    kvs.push((c.u32()?, c.text()?, c.bytes()?.to_vec()));
                }
                Msg::FenceDone { kvs }
            }
            K_ABORT => Msg::Abort {
                rank: c.u32()?,
                proof: c.bytes()?.to_vec(),
                code: c.u32()? as i32,
                msg: c.text()?,
            },
            K_FINALIZE => Msg::Finalize,
            K_OK => Msg::Ok,
            K_ERROR => Msg::Error { msg: c.text()? },
            K_DAEMON_HELLO => Msg::DaemonHello {
                version: c.u32()?,
                node: c.u32()?,
                proof: c.bytes()?.to_vec(),
                build: c.text()?,
            },
            K_LAUNCH => {
                let program = c.text()?;
                let n = c.count(4)?;
                let mut args = Vec::with_capacity(n);
                for _ in 0..n {
                    args.push(c.text()?);
                }
                let cwd = c.text()?;
                let n = c.count(8)?;
                let mut ranks = Vec::with_capacity(n);
                for _ in 0..n {
                    let r = c.u32()?;
                    let k = c.count(8)?;
                    let mut env = Vec::with_capacity(k);
                    for _ in 0..k {
                        env.push((c.text()?, c.text()?));
                    }
                    ranks.push((r, env));
                }
                Msg::Launch {
                    program,
                    args,
                    cwd,
                    ranks,
                }
            }
            K_STARTED => Msg::Started {
                rank: c.u32()?,
                pid: c.u32()?,
            },
            K_SPAWN_FAILED => Msg::SpawnFailed {
                rank: c.u32()?,
                code: c.u32()? as i32,
                msg: c.text()?,
            },
            K_OUTPUT => Msg::Output {
                rank: c.u32()?,
                stderr: match c.u8()? {
                    0 => false,
                    1 => true,
                    x => return Err(format!("output stream flag {x} is not 0 or 1")),
                },
                data: c.bytes()?.to_vec(),
            },
            K_EXITED => Msg::Exited {
                rank: c.u32()?,
                status: c.u32()? as i32,
            },
            K_KILL => Msg::Kill {
                signal: c.u32()? as i32,
            },
            K_CHALLENGE => Msg::Challenge {
                nonce: c.bytes()?.to_vec(),
            },
            k => return Err(format!("unknown message kind {k}")),
        };
        if c.pos != body.len() {
            return Err(format!(
                "{} trailing bytes after message kind {kind}",
                body.len() - c.pos
            ));
        }
        Ok(m)
    }
}

struct Cursor<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.b.len() - self.pos < n {
            return Err(format!(
                "truncated message: need {n} bytes at offset {}",
                self.pos
            ));
        }
        let s = &self.b[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, String> {
        let s = self.take(4)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }
    fn bytes(&mut self) -> Result<&'a [u8], String> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    fn text(&mut self) -> Result<String, String> {
        String::from_utf8(self.bytes()?.to_vec()).map_err(|_| "text field is not UTF-8".to_string())
    }
    /// An element count, checked against the bytes left (each element needs at least `min` bytes)
    /// so that a hostile count cannot make us allocate.
    fn count(&mut self, min: usize) -> Result<usize, String> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min) > self.b.len() - self.pos {
            return Err(format!("count {n} exceeds the message size"));
        }
        Ok(n)
    }
}

/// Read one frame body. `Ok(None)` on a clean end of stream before a frame starts.
pub fn read_frame(r: &mut impl Read) -> io::Result<Option<Vec<u8>>> {
    read_frame_max(r, MAX_FRAME)
}

/// [`read_frame`] refusing frames longer than `max` bytes (before allocating them).
pub fn read_frame_max(r: &mut impl Read, max: usize) -> io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match r.read(&mut len[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "end of stream inside a frame header",
                ))
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let len = u32::from_le_bytes(len) as usize;
    if len > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {len} bytes exceeds the limit"),
        ));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    Ok(Some(body))
}

/// Read and decode one message; end of stream and garbage are errors.
pub fn read_msg(r: &mut impl Read) -> io::Result<Msg> {
    read_msg_max(r, MAX_FRAME)
}

/// [`read_msg`] refusing frames longer than `max` bytes.
pub fn read_msg_max(r: &mut impl Read, max: usize) -> io::Result<Msg> {
    match read_frame_max(r, max)? {
        None => Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed",
        )),
        Some(body) => Msg::decode(&body).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e)),
    }
}

pub fn write_msg(w: &mut impl Write, m: &Msg) -> io::Result<()> {
    w.write_all(&m.encode())?;
    w.flush()
}

/// Bytes of the server's challenge nonce.
pub const NONCE_BYTES: usize = 16;

/// What a client proves it knows the job secret with: a keyed MAC (`transport::net::auth`,
/// SipHash-2-4, 128 bits) of the connection's challenge `nonce` and the kind of first message
/// (`what`: "hello", "abort", "daemon"), keyed by the secret. The secret never crosses the
/// connection, and an answer recorded on one connection fits no other (the nonce is fresh).
pub fn proof(secret: &[u8], nonce: &[u8], what: &str) -> Vec<u8> {
    Key::from_secret(secret)
        .mac(&[b"gpumpi-wireup", what.as_bytes(), nonce])
        .to_vec()
}

/// Whether `got` is the [`proof`] of `secret` for `nonce` and `what` (constant time).
pub fn proof_ok(secret: &[u8], nonce: &[u8], what: &str, got: &[u8]) -> bool {
    ct_eq(&proof(secret, nonce, what), got)
}

/// A fresh challenge nonce from the kernel.
pub fn nonce() -> io::Result<Vec<u8>> {
    random::<NONCE_BYTES>().map(|n| n.to_vec())
}

/// The client's side of a new connection: reads the server's challenge and returns its nonce.
pub fn read_challenge(r: &mut impl Read) -> io::Result<Vec<u8>> {
    match read_msg_max(r, MAX_PREAUTH_FRAME)? {
        Msg::Challenge { nonce } if nonce.len() == NONCE_BYTES => Ok(nonce),
        m => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("expected the server's challenge, got {m:?} (another gpumpi version?)"),
        )),
    }
}

/// Lower-case hex, for passing the secret through the environment.
pub fn to_hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub fn from_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rng::XorShift;

    fn samples() -> Vec<Msg> {
        vec![
            Msg::Hello {
                version: PROTOCOL_VERSION,
                rank: 3,
                pid: 4242,
                proof: vec![1, 2, 3, 255],
            },
            Msg::Welcome {
                node_ranks: vec![0, 1, 2],
                appnum: 0,
            },
            Msg::Fence {
                puts: vec![("addr".into(), b"xyz".to_vec()), ("empty".into(), vec![])],
            },
            Msg::Fence { puts: vec![] },
            Msg::FenceDone {
                kvs: vec![(0, "a".into(), vec![9; 100]), (7, "b".into(), vec![])],
            },
            Msg::Abort {
                rank: 2,
                proof: vec![1; 4],
                code: -3,
                msg: "bad thing".into(),
            },
            Msg::Finalize,
            Msg::Ok,
            Msg::Error { msg: "no".into() },
            Msg::DaemonHello {
                version: PROTOCOL_VERSION,
                node: 1,
                proof: vec![5; 32],
                build: "0.1.0".into(),
            },
            Msg::Challenge { nonce: vec![3; 16] },
            Msg::Launch {
                program: "./a.out".into(),
                args: vec!["-x".into(), String::new()],
                cwd: "/tmp".into(),
                ranks: vec![
                    (
                        2,
                        vec![("A".into(), "1".into()), ("B".into(), String::new())],
                    ),
                    (3, vec![]),
                ],
            },
            Msg::Started { rank: 2, pid: 77 },
            Msg::SpawnFailed {
                rank: 3,
                code: 127,
                msg: "not found".into(),
            },
            Msg::Output {
                rank: 2,
                stderr: true,
                data: b"line\n".to_vec(),
            },
            Msg::Exited { rank: 3, status: 9 },
            Msg::Kill { signal: 15 },
        ]
    }

    #[test]
    fn roundtrip_every_kind() {
        for m in samples() {
            let frame = m.encode();
            let mut r = &frame[..];
            assert_eq!(read_msg(&mut r).unwrap(), m);
            assert!(r.is_empty());
        }
    }

    #[test]
    fn truncated_and_trailing_are_errors() {
        for m in samples() {
            let frame = m.encode();
            let body = &frame[4..];
            for cut in 0..body.len() {
                assert!(Msg::decode(&body[..cut]).is_err(), "{m:?} cut at {cut}");
            }
            let mut long = body.to_vec();
            long.push(0);
            assert!(Msg::decode(&long).is_err());
        }
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut rng = XorShift(0x9e3779b97f4a7c15);
        for i in 0..20000 {
            let n = (rng.next() % 64) as usize;
            let mut b = rng.bytes(n);
            if i % 2 == 0 && !b.is_empty() {
                b[0] = (b[0] % 15) + 1; // a valid kind, so the field decoders get exercised
            }
            let _ = Msg::decode(&b);
        }
        // Mutations of valid messages.
        for m in samples() {
            let frame = m.encode();
            for _ in 0..500 {
                let mut b = frame[4..].to_vec();
                let at = (rng.next() as usize) % b.len();
                b[at] = rng.next() as u8;
                let _ = Msg::decode(&b);
            }
        }
    }

    #[test]
    fn huge_counts_do_not_allocate() {
        let mut b = vec![K_FENCE_DONE];
        b.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(Msg::decode(&b).unwrap_err().contains("exceeds"));
        let mut f = (MAX_FRAME as u32 + 1).to_le_bytes().to_vec();
        f.push(K_OK);
        assert!(read_frame(&mut &f[..]).is_err());
    }

    #[test]
    fn hex_roundtrip() {
        let b = vec![0u8, 1, 0xab, 0xff];
        assert_eq!(to_hex(&b), "0001abff");
        assert_eq!(from_hex("0001abff").unwrap(), b);
        assert!(from_hex("0g").is_none());
        assert!(from_hex("abc").is_none());
        assert!(from_hex("é1").is_none());
    }
}
