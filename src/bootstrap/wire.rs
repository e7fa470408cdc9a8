//! The wire protocol between our `mpirun`'s wire-up server and its clients
//! (the ranks), over a Unix stream socket.
//!
//! Every message is one frame: `u32 length (LE)` of the body, then the body:
//! `u8 kind` followed by the fields of that kind. Integers are little endian;
//! byte strings and text are `u32 length + bytes`. Frames larger than
//! [`MAX_FRAME`] are refused. Decoding never panics on any input.
//!
//! Conversation (client = C, server = S):
//! - C `Hello{version, rank, pid, secret}` -> S `Welcome{node_ranks, appnum}` or `Error`.
//! - C `Fence{puts}` (every key/value put since the previous fence, in one
//!   message) -> S, once every rank has fenced, `FenceDone{kvs}` with the puts
//!   of all ranks since the previous fence: one round trip per fence.
//! - C `Abort{rank, secret, code, msg}`, as the first message of a fresh connection (so that it
//!   gets through while another thread of the rank waits in a fence) -> S `Ok` (or `Error` for a
//!   bad secret), and the server tells the launcher, which ends the job.
//! - C `Finalize` -> S `Ok`; a client that disconnects without it is dead.

use std::io::{self, Read, Write};

/// Largest accepted frame body.
pub const MAX_FRAME: usize = 64 << 20;
/// The largest first frame (`Hello`, or a standalone `Abort`) of a connection not yet
/// authenticated: what an unauthenticated peer can make the server allocate.
pub const MAX_PREAUTH_FRAME: usize = 64 << 10;
/// Bumped on any incompatible change; `Hello` carries it.
pub const PROTOCOL_VERSION: u32 = 1;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    Hello {
        version: u32,
        rank: u32,
        pid: u32,
        secret: Vec<u8>,
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
        secret: Vec<u8>,
        code: i32,
        msg: String,
    },
    Finalize,
    Ok,
    Error {
        msg: String,
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
                secret,
            } => {
                b.push(K_HELLO);
                put_u32(&mut b, *version);
                put_u32(&mut b, *rank);
                put_u32(&mut b, *pid);
                put_bytes(&mut b, secret);
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
                secret,
                code,
                msg,
            } => {
                b.push(K_ABORT);
                put_u32(&mut b, *rank);
                put_bytes(&mut b, secret);
                put_u32(&mut b, *code as u32);
                put_bytes(&mut b, msg.as_bytes());
            }
            Msg::Finalize => b.push(K_FINALIZE),
            Msg::Ok => b.push(K_OK),
            Msg::Error { msg } => {
                b.push(K_ERROR);
                put_bytes(&mut b, msg.as_bytes());
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
                secret: c.bytes()?.to_vec(),
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
                secret: c.bytes()?.to_vec(),
                code: c.u32()? as i32,
                msg: c.text()?,
            },
            K_FINALIZE => Msg::Finalize,
            K_OK => Msg::Ok,
            K_ERROR => Msg::Error { msg: c.text()? },
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
                secret: vec![1, 2, 3, 255],
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
                secret: vec![1; 4],
                code: -3,
                msg: "bad thing".into(),
            },
            Msg::Finalize,
            Msg::Ok,
            Msg::Error { msg: "no".into() },
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
                b[0] = (b[0] % 9) + 1; // a valid kind, so the field decoders get exercised
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
