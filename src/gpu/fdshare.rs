//! The file-descriptor service behind CUDA IPC of VMM memory (`cuMemCreate` allocations made
//! with `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`): such an allocation is shared as a POSIX
//! file descriptor, which only the kernel can carry from one process to another. A process that
//! exports one starts this service: a thread accepting connections on the abstract Unix socket
//! [`socket_name`]`(its pid)`. An importer connects, sends a [`Request`] naming the allocation
//! (its range and the driver's buffer id, all from the peer's `ipc::Export`), and gets
//! the descriptor back (`SCM_RIGHTS`) or the exporter's reason for refusing.
//!
//! Contract:
//! - The service answers on its own thread, so an importer never waits for the exporter's
//!   application threads (they may be blocked in the same collective).
//! - Only processes of the same user are answered (`SO_PEERCRED`); the provider decides what
//!   may be exported (gpumpi's: only allocations it advertised itself, still holding the same
//!   buffer id). Descriptors are created per request and closed once sent: the exporter keeps
//!   none, so exporting never keeps a freed allocation alive.
//! - A request and its answer take one connection; every read is bounded by a timeout, so a
//!   dead peer costs an error, never a hang.

use crate::sys::fdpass;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::time::Duration;

const MAGIC: u32 = u32::from_le_bytes(*b"GFD1");
const REQUEST_BYTES: usize = 32;
/// Longest refusal message sent back.
const MAX_MESSAGE: usize = 512;
const TIMEOUT: Duration = Duration::from_secs(10);

/// Which allocation an importer asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// Start and size of the allocation in the exporter's address space.
    pub base: u64,
    pub size: u64,
    /// The driver's buffer id of that allocation, as the exporter described it.
    pub buffer_id: u64,
}

impl Request {
    fn to_bytes(self) -> [u8; REQUEST_BYTES] {
        let mut b = [0u8; REQUEST_BYTES];
        b[..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[8..16].copy_from_slice(&self.base.to_le_bytes());
        b[16..24].copy_from_slice(&self.buffer_id.to_le_bytes());
        b[24..32].copy_from_slice(&self.size.to_le_bytes());
        b
    }
    fn from_bytes(b: &[u8; REQUEST_BYTES]) -> Option<Request> {
        if b[..4] != MAGIC.to_le_bytes() {
            return None;
        }
        Some(Request {
            base: u64::from_le_bytes(b[8..16].try_into().unwrap()),
            buffer_id: u64::from_le_bytes(b[16..24].try_into().unwrap()),
            size: u64::from_le_bytes(b[24..32].try_into().unwrap()),
        })
    }
}

/// What the exporter hands out: a new descriptor for the allocation, or why not.
pub type Provider = Box<dyn Fn(&Request) -> Result<OwnedFd, String> + Send + Sync>;

/// The abstract socket name of process `pid`'s service (per user: two users' jobs on one node
/// never meet).
pub fn socket_name(pid: u32) -> String {
    format!("gpumpi-cumem-{}-{pid}", fdpass::my_uid())
}

fn addr(name: &str) -> io::Result<SocketAddr> {
    SocketAddr::from_abstract_name(name.as_bytes())
}

/// Start the service on `name` with `provider` (a thread that lives as long as the process).
pub fn serve(name: &str, provider: Provider) -> io::Result<()> {
    let l = UnixListener::bind_addr(&addr(name)?)?;
    let me = fdpass::my_uid();
    std::thread::Builder::new()
        .name("gpumpi-cumem-fd".into())
        .spawn(move || {
            for c in l.incoming() {
                let Ok(c) = c else { continue };
                if let Err(e) = answer(&c, me, &provider) {
                    tracing::debug!("cuMem descriptor service: {e}");
                }
            }
        })?;
    Ok(())
}

fn answer(c: &UnixStream, me: u32, provider: &Provider) -> io::Result<()> {
    c.set_read_timeout(Some(TIMEOUT))?;
    c.set_write_timeout(Some(TIMEOUT))?;
    let uid = fdpass::peer_uid(c)?;
    let mut b = [0u8; REQUEST_BYTES];
    fdpass::recv_exact(c, &mut b)?;
    let r = if uid != me {
        Err(format!("refused: the asking process runs as user {uid}"))
    } else {
        match Request::from_bytes(&b) {
            Some(req) => provider(&req),
            None => Err("not a gpumpi cuMem descriptor request".into()),
        }
    };
    match r {
        Ok(fd) => fdpass::send(c, &0u32.to_le_bytes(), Some(fd.as_raw_fd())),
        Err(why) => {
            let why = &why.as_bytes()[..why.len().min(MAX_MESSAGE)];
            let mut m = Vec::with_capacity(8 + why.len());
            m.extend_from_slice(&1u32.to_le_bytes());
            m.extend_from_slice(&(why.len() as u32).to_le_bytes());
            m.extend_from_slice(why);
            fdpass::send(c, &m, None)
        }
    }
}

/// Ask the service `name` for the descriptor of `req`'s allocation.
pub fn fetch(name: &str, req: &Request) -> Result<OwnedFd, String> {
    let fail = |what: &str, e: io::Error| format!("cuMem descriptor from {name}: {what}: {e}");
    let c = UnixStream::connect_addr(&addr(name).map_err(|e| fail("address", e))?)
        .map_err(|e| fail("connect", e))?;
    c.set_read_timeout(Some(TIMEOUT))
        .and_then(|_| c.set_write_timeout(Some(TIMEOUT)))
        .map_err(|e| fail("timeout", e))?;
    fdpass::send(&c, &req.to_bytes(), None).map_err(|e| fail("request", e))?;
    let mut status = [0u8; 4];
    let fd = fdpass::recv_exact(&c, &mut status).map_err(|e| fail("answer", e))?;
    if u32::from_le_bytes(status) == 0 {
        return fd.ok_or_else(|| format!("cuMem descriptor from {name}: no descriptor came"));
    }
    let mut len = [0u8; 4];
    fdpass::recv_exact(&c, &mut len).map_err(|e| fail("answer", e))?;
    let len = (u32::from_le_bytes(len) as usize).min(MAX_MESSAGE);
    let mut why = vec![0u8; len];
    fdpass::recv_exact(&c, &mut why).map_err(|e| fail("answer", e))?;
    Err(format!(
        "cuMem descriptor from {name}: {}",
        String::from_utf8_lossy(&why)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, Write};

    fn name(tag: &str) -> String {
        format!("gpumpi-test-{tag}-{}", std::process::id())
    }

    /// A provider handing out an unlinked file holding the request's buffer id as text; buffer
    /// id 0 is refused.
    fn files() -> Provider {
        Box::new(|r: &Request| {
            if r.buffer_id == 0 {
                return Err(format!("buffer at {:#x} is not exported", r.base));
            }
            let f = crate::sys::fdpass::unlinked_file(
                &format!("fdshare-{}", r.buffer_id),
                format!("buffer {} at {:#x}", r.buffer_id, r.base).as_bytes(),
            )
            .map_err(|e| e.to_string())?;
            Ok(f.into())
        })
    }

    fn contents(fd: OwnedFd) -> String {
        let mut f = std::fs::File::from(fd);
        f.rewind().unwrap();
        let mut s = String::new();
        f.read_to_string(&mut s).unwrap();
        s
    }

    #[test]
    fn importers_get_descriptors_from_the_service_thread() {
        let n = name("ok");
        serve(&n, files()).unwrap();
        // Several importers at once, each several requests.
        let hs: Vec<_> = (1..=4u64)
            .map(|t| {
                let n = n.clone();
                std::thread::spawn(move || {
                    for k in 0..5u64 {
                        let id = t * 100 + k;
                        let r = Request {
                            base: 0x7f00_0000_0000 + id,
                            size: 1 << 21,
                            buffer_id: id,
                        };
                        let fd = fetch(&n, &r).unwrap();
                        assert_eq!(contents(fd), format!("buffer {id} at {:#x}", r.base));
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
    }

    #[test]
    fn refusals_and_bad_requests_come_back_as_errors() {
        let n = name("no");
        serve(&n, files()).unwrap();
        let e = fetch(
            &n,
            &Request {
                base: 0x1000,
                size: 1 << 21,
                buffer_id: 0,
            },
        )
        .unwrap_err();
        assert!(e.contains("buffer at 0x1000 is not exported"), "{e}");
        // Garbage instead of a request.
        let c = UnixStream::connect_addr(&addr(&n).unwrap()).unwrap();
        (&c).write_all(&[7u8; REQUEST_BYTES]).unwrap();
        let mut st = [0u8; 4];
        assert!(fdpass::recv_exact(&c, &mut st).unwrap().is_none());
        assert_eq!(u32::from_le_bytes(st), 1);
        // Binding the same name twice fails (one service per process).
        assert!(serve(&n, files()).is_err());
    }

    #[test]
    fn nobody_listening_is_an_error_not_a_hang() {
        let e = fetch(
            &name("absent"),
            &Request {
                base: 0,
                size: 0,
                buffer_id: 1,
            },
        )
        .unwrap_err();
        assert!(e.contains("connect"), "{e}");
    }

    #[test]
    fn request_bytes_round_trip() {
        let r = Request {
            base: 0x7fff_1234_0000,
            size: 3 << 21,
            buffer_id: 42,
        };
        assert_eq!(Request::from_bytes(&r.to_bytes()), Some(r));
        assert_eq!(Request::from_bytes(&[0u8; REQUEST_BYTES]), None);
    }
}
