//! The TCP backend of the network interface (see the contract in `transport::net`).
//!
//! Shape (after NCCL's socket transport):
//! - **Devices**: one per interface chosen by `GPUMPI_NET_IFNAME` / `GPUMPI_NET_FAMILY`
//!   ([`super::ifname`]); IPv4 and IPv6.
//! - **A connection** is one control socket plus `threads x socks` data sockets
//!   (`GPUMPI_NET_TCP_THREADS`, `GPUMPI_NET_TCP_SOCKS`; the listener's values travel in the
//!   handle, so both ends agree). All sockets are nonblocking with `TCP_NODELAY`.
//! - **Set-up**: the connector opens every socket at once; for each, the listener sends a
//!   16-byte random challenge, the connector answers with a 64-byte hello (socket role,
//!   connection id, and the MAC of the challenge and the handle's token under the job secret,
//!   [`super::auth`]), and the listener confirms with one byte. The listener reads at most 64
//!   bytes from a socket before it is authenticated, keeps at most [`MAX_PENDING`] such
//!   sockets and drops any that does not finish within the accept timeout; a failed check
//!   closes that socket only.
//! - **Data path**: `isend` writes a 16-byte header (tag, size, whether the payload follows
//!   inline) to the control socket (from the calling thread, during `isend`/`test`). A payload
//!   of at most [`INLINE_MAX`] bytes (any message of the engine's frames), and every bulk
//!   payload where the ranks have no CPUs to spare for helper threads ([`stripes_bulk`]),
//!   follows its header on the control socket (straight from the caller's buffer: one
//!   `sendmsg` writes the headers and payloads of every message queued; what the socket does
//!   not take is written by a later `test`), and the
//!   receiver takes it into the matched buffer while it tests (one `recv` reads up to
//!   64 KiB of headers and inline payloads ahead; a payload larger than what was read
//!   ahead is read straight into the receive buffer, with the next message's header behind
//!   it in the same `readv`). While the socket is full (sending) or empty (receiving),
//!   only the test of the request whose bytes move next calls the kernel, so a caller that
//!   tests every request in flight makes one call per pass, not one per request: a small
//!   message never waits for a helper thread to wake up at either end (two thread wake-ups
//!   cost more than the whole loopback round trip). A larger payload is split into at most
//!   one piece per data socket (pieces of at least [`MIN_CHUNK`] bytes), each piece handed to
//!   the helper thread that owns its socket. Pieces go to sockets round-robin over messages; the
//!   receiver reads headers in order and computes the same split from the same sizes, so every
//!   data socket carries the same sequence of pieces at both ends. Helper threads (started per
//!   comm, joined at drop) move bytes with nonblocking `send`/`recv`, wait in `poll` on their
//!   sockets and an `eventfd` when they cannot progress, and count finished pieces per request
//!   slot. Requests live in [`MAX_REQUESTS`] preallocated slots; queues are preallocated:
//!   the data path allocates nothing and never sleeps on a timer.
//! - **Waiting**: a comm tells a caller that waits for it what to sleep on (`wait_on`): its
//!   control socket (readable for a receiver, writable for a sender with bytes left to
//!   write) while only the calling thread moves it, "polled" while a helper thread owes
//!   pieces (those complete on no descriptor the caller sees).
//! - **Both directions on one connection** ([`SendComm::reverse`], [`RecvComm::reverse`]):
//!   the other direction of a connection is a comm on the same control socket (a duplicated
//!   descriptor) with no data sockets and no helper threads, so every message on it travels
//!   inline, whatever its size. The frames of a pair of ranks that talk both ways so share
//!   one TCP connection, and each reply carries the acknowledgement of the message before
//!   it: with one connection per direction every message costs a pure ACK segment on the
//!   other connection, and a ping-pong between two network namespaces of one machine took
//!   9.7-11.4 us one way against 5.7-6.6 on one connection (benches/NOTES.md). A reverse
//!   sending comm shuts the socket's sending side when dropped (its descriptor is not the
//!   socket's last), so the peer's receive on it ends.
//! - **Errors** name the peer's address: a connection closed mid-message, a truncated receive,
//!   a tag the posted group does not hold, a set-up that does not finish in time. A peer that
//!   closes after its last message is not an error until a receive waits for a message that
//!   will not come: the messages it sent before are delivered first.

use super::auth::{self, Key};
use super::ifname::{self, Family};
use super::{
    Connector, Handle, Listener, MemKind, Mr, Net, NetError, NetResult, Props, PtrSupport, RecvBuf,
    RecvComm, Request, SendComm, WaitOn, HANDLE_BYTES,
};
use crate::sys::socket::{self as sock, EventFd, IfAddr, PollFd, POLLIN, POLLOUT};
use std::collections::VecDeque;
use std::io::{self, ErrorKind};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Requests in flight per comm (as `NCCL_NET_MAX_REQUESTS`).
pub const MAX_REQUESTS: usize = 32;
/// Most receives in one group.
pub const MAX_RECVS: usize = 8;
/// Smallest piece a message is split into across data sockets.
pub const MIN_CHUNK: usize = 64 << 10;
/// Largest payload sent on the control socket behind its header instead of by a helper
/// thread (part of the wire protocol: both ends decide by the header's tag and size, see
/// [`goes_inline`]): room for the largest message of the engine's frames (`frames::SLOT_BYTES`, a
/// little over 256 KiB), so that no frame waits for a thread to wake up at either end.
pub const INLINE_MAX: usize = 257 << 10;
/// Largest bulk payload ([`super::TAG_BULK`]) sent on the control socket where bulk data is
/// striped ([`stripes_bulk`]): larger bulk data is split over the data sockets by the helper
/// threads, which on a many-core host moves windows of 64-256 KiB transfers faster than one
/// stream (benches/NOTES.md).
pub const INLINE_BULK_MAX: usize = 20 << 10;

/// Whether a payload of `size` bytes with `tag` follows its header on the control socket
/// (else the helper threads move it over the data sockets); `stripe`: the comm stripes bulk
/// data ([`stripes_bulk`]), else every bulk payload goes inline. The sender decides and says
/// so in the header, so the ends need not agree on `stripe`.
pub fn goes_inline(tag: i32, size: usize, stripe: bool) -> bool {
    if tag == super::TAG_BULK {
        !stripe || size <= INLINE_BULK_MAX
    } else {
        size <= INLINE_MAX
    }
}

/// `GPUMPI_NET_TCP_STRIPE`: how bulk payloads travel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stripe {
    /// Striped where the ranks have the CPUs for it ([`stripes_bulk`]).
    Auto,
    /// Always striped over the data sockets (above [`INLINE_BULK_MAX`]).
    On,
    /// Always on the control socket, written and read by the calling threads.
    Off,
}

impl Stripe {
    /// `auto`, `1`/`on`, `0`/`off`; `None` for anything else.
    pub fn parse(v: &str) -> Option<Stripe> {
        match v.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Some(Stripe::Auto),
            "1" | "on" | "yes" | "true" => Some(Stripe::On),
            "0" | "off" | "no" | "false" => Some(Stripe::Off),
            _ => None,
        }
    }
}

/// Whether a sending comm with `threads` helper threads stripes bulk payloads over its data
/// sockets. Striping hands each payload to helper threads (a wake-up and a hand-over per
/// message at each end) so that several sockets move at once: that pays only where the
/// helpers run beside the calling thread, each on a CPU of its own. So `auto` stripes where
/// every rank of the job has at least `1 + threads` CPUs to itself (`least_milli`, in
/// thousandths: the calling thread and the helpers of one direction), and sends bulk data
/// on the control socket from the calling thread otherwise (one stream, no thread hops: on
/// 1 CPU per rank 1.3-3x the bandwidth of striping from 64 KiB to 16 MiB, while on a 64-core
/// host striping was 1.5x faster at 64 KiB; benches/NOTES.md). Unknown CPUs: striped.
pub fn stripes_bulk(mode: Stripe, least_milli: Option<usize>, threads: usize) -> bool {
    match mode {
        Stripe::On => true,
        Stripe::Off => false,
        Stripe::Auto => least_milli.is_none_or(|m| m >= (1 + threads) * 1000),
    }
}
/// Bytes a receiver reads ahead from its control socket at once.
const READ_AHEAD: usize = 64 << 10;
/// After an inline payload larger than this, a receiver reads the next header alone instead
/// of reading ahead: reading ahead saves a `recv` call per message (about a microsecond) but
/// copies the payload bytes it took from the read-ahead buffer into the receive once more;
/// at memory-copy rates of ~10 GB/s that copy costs more than the call from about 10 KiB
/// on. A comm that carries large inline payloads (bulk data that is not striped) so reads
/// each payload straight from the socket into its receive.
const READ_AHEAD_AFTER_MAX: usize = 8 << 10;
/// Most data sockets per connection.
pub const MAX_SOCKS: usize = 64;
/// Most unauthenticated sockets a listener keeps (room for two connections being set up at once;
/// past it the oldest is dropped).
pub const MAX_PENDING: usize = 2 * (MAX_SOCKS + 1);

const HANDLE_MAGIC: &[u8; 4] = b"GMNT";
const HELLO_MAGIC: &[u8; 4] = b"GMNH";
/// Wire version of handle, hello and headers: both ends must agree.
const VERSION: u16 = 4;
const NONCE: usize = 16;
const HELLO: usize = 64;
/// A message header: tag (bytes 0-3), flags (byte 4), size (bytes 8-15).
const HDR: usize = 16;
/// Header flag: the payload follows the header on the control socket.
const HDR_INLINE: u8 = 1;
const ACK: u8 = 0xa5;

/// Settings of the backend; [`TcpConfig::from_env`] reads them from `GPUMPI_NET_*`.
#[derive(Clone, Debug)]
pub struct TcpConfig {
    pub ifname: Option<String>,
    pub family: Family,
    pub threads: usize,
    pub socks_per_thread: usize,
    /// Time for the TCP connection itself (an unreachable address fails within it).
    pub connect_timeout: Duration,
    /// Time for the peer to accept and authenticate once connected.
    pub accept_timeout: Duration,
    /// `GPUMPI_NET_TCP_STRIPE`: how bulk payloads travel ([`stripes_bulk`]).
    pub stripe: Stripe,
}

impl TcpConfig {
    /// The settings of the configuration snapshot ([`crate::config::NetConfig`]).
    pub fn from_env() -> NetResult<TcpConfig> {
        let c = &crate::config::snapshot().net;
        let family = Family::parse(&c.family).ok_or_else(|| {
            NetError::new(format!(
                "GPUMPI_NET_FAMILY={}: expected 4, 6 or any",
                c.family
            ))
        })?;
        Ok(TcpConfig {
            ifname: c.ifname.clone(),
            family,
            threads: c.tcp_threads,
            socks_per_thread: c.tcp_socks,
            connect_timeout: c.connect_timeout,
            accept_timeout: c.accept_timeout,
            stripe: Stripe::parse(&c.tcp_stripe).ok_or_else(|| {
                NetError::new(format!(
                    "GPUMPI_NET_TCP_STRIPE={}: expected auto, 1 or 0",
                    c.tcp_stripe
                ))
            })?,
        })
    }

    fn check(&self) -> NetResult<()> {
        let n = self.threads * self.socks_per_thread;
        if self.threads == 0 || self.socks_per_thread == 0 || n > MAX_SOCKS || self.threads > 16 {
            return Err(NetError::new(format!(
                "tcp: GPUMPI_NET_TCP_THREADS={} x GPUMPI_NET_TCP_SOCKS={}: need 1..=16 threads \
                 and 1..={MAX_SOCKS} sockets in all",
                self.threads, self.socks_per_thread
            )));
        }
        Ok(())
    }
}

struct Dev {
    addr: IfAddr,
    props: Props,
}

/// The TCP backend: its devices, settings and the key derived from the job secret.
pub struct TcpNet {
    cfg: TcpConfig,
    /// The fewest thousandths of a CPU a rank of the job has ([`Net::set_rank_cpus`]).
    rank_cpus: Option<usize>,
    key: Key,
    devs: Vec<Dev>,
    props: Vec<Props>,
}

fn err(msg: impl Into<String>) -> NetError {
    NetError::new(msg)
}

fn link_speed(name: &str) -> u32 {
    std::fs::read_to_string(format!("/sys/class/net/{name}/speed"))
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .filter(|&s| s > 0)
        .map_or(10_000, |s| s.min(u32::MAX as i64) as u32)
}

impl TcpNet {
    pub fn from_env(secret: &[u8]) -> NetResult<TcpNet> {
        TcpNet::new(TcpConfig::from_env()?, secret)
    }

    pub fn new(cfg: TcpConfig, secret: &[u8]) -> NetResult<TcpNet> {
        cfg.check()?;
        let all = sock::interfaces().map_err(|e| err(format!("tcp: getifaddrs: {e}")))?;
        let chosen = ifname::select(&all, cfg.ifname.as_deref(), cfg.family);
        if chosen.is_empty() {
            if let Some(spec) = &cfg.ifname {
                let names: Vec<_> = all.iter().map(|a| a.name.as_str()).collect();
                return Err(err(format!(
                    "tcp: GPUMPI_NET_IFNAME={spec} selects no interface that is up with a {} \
                     address (interfaces: {})",
                    match cfg.family {
                        Family::Any => "usable",
                        Family::V4 => "IPv4",
                        Family::V6 => "IPv6",
                    },
                    names.join(", ")
                )));
            }
        }
        let devs: Vec<Dev> = chosen
            .into_iter()
            .map(|a| Dev {
                props: Props {
                    name: a.name.clone(),
                    addr: a.addr.to_string(),
                    speed_mbps: link_speed(&a.name),
                    ptr_support: PtrSupport {
                        host: true,
                        cuda: false,
                        dmabuf: false,
                    },
                    max_recvs: MAX_RECVS,
                    max_requests: MAX_REQUESTS,
                },
                addr: a,
            })
            .collect();
        let props = devs.iter().map(|d| d.props.clone()).collect();
        Ok(TcpNet {
            cfg,
            rank_cpus: None,
            key: Key::from_secret(secret),
            devs,
            props,
        })
    }

    fn dev(&self, dev: usize) -> NetResult<&Dev> {
        self.devs.get(dev).ok_or_else(|| {
            err(format!(
                "tcp: no device {dev} ({} devices)",
                self.devs.len()
            ))
        })
    }
}

/// What a handle carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct HandleData {
    addr: SocketAddr,
    threads: u8,
    socks_per_thread: u8,
    token: [u8; 16],
}

impl HandleData {
    fn encode(&self) -> Handle {
        let mut h = [0u8; HANDLE_BYTES];
        h[0..4].copy_from_slice(HANDLE_MAGIC);
        h[4..6].copy_from_slice(&VERSION.to_le_bytes());
        h[7] = self.threads;
        h[8] = self.socks_per_thread;
        super::put_addr(&mut h, self.addr);
        h[32..48].copy_from_slice(&self.token);
        Handle(h)
    }

    fn decode(h: &Handle) -> NetResult<HandleData> {
        let h = &h.0;
        if &h[0..4] != HANDLE_MAGIC {
            return Err(err("tcp: not a TCP connection handle (bad magic)"));
        }
        let v = u16::from_le_bytes([h[4], h[5]]);
        if v != VERSION {
            return Err(err(format!(
                "tcp: connection handle of wire version {v}, this gpumpi speaks {VERSION} \
                 (different gpumpi versions on the two nodes?)"
            )));
        }
        let addr = super::get_addr(h).map_err(|f| {
            err(format!(
                "tcp: connection handle with bad address family {f}"
            ))
        })?;
        let port = addr.port();
        let (threads, socks) = (h[7], h[8]);
        let n = threads as usize * socks as usize;
        if threads == 0 || socks == 0 || n > MAX_SOCKS || port == 0 {
            return Err(err(format!(
                "tcp: corrupt connection handle ({threads} threads x {socks} sockets, port {port})"
            )));
        }
        Ok(HandleData {
            addr,
            threads,
            socks_per_thread: socks,
            token: h[32..48].try_into().unwrap(),
        })
    }
}

fn hello_mac(key: &Key, token: &[u8; 16], nonce: &[u8; NONCE], role: u8, conn: u64) -> [u8; 16] {
    key.mac(&[
        b"gpumpi-tcp-hello",
        token,
        nonce,
        &[role],
        &conn.to_le_bytes(),
        &VERSION.to_le_bytes(),
    ])
}

impl Net for TcpNet {
    fn name(&self) -> &'static str {
        "tcp"
    }

    fn devices(&self) -> &[Props] {
        &self.props
    }

    fn listen(&self, dev: usize) -> NetResult<(Handle, Box<dyn Listener>)> {
        let d = self.dev(dev)?;
        let bind = super::any_port(d.addr.addr, d.addr.scope_id);
        let l = TcpListener::bind(bind)
            .map_err(|e| err(format!("tcp: listen on {bind} ({}): {e}", d.props.name)))?;
        l.set_nonblocking(true)
            .map_err(|e| err(format!("tcp: listen on {bind}: {e}")))?;
        let addr = l
            .local_addr()
            .map_err(|e| err(format!("tcp: listen on {bind}: {e}")))?;
        let token = auth::random::<16>().map_err(|e| err(format!("tcp: /dev/urandom: {e}")))?;
        let hd = HandleData {
            addr,
            threads: self.cfg.threads as u8,
            socks_per_thread: self.cfg.socks_per_thread as u8,
            token,
        };
        tracing::debug!(%addr, dev = %d.props.name, "tcp: listening");
        let lis = TcpListen {
            l,
            addr,
            key: self.key,
            hd,
            timeout: self.cfg.accept_timeout,
            pending: Vec::with_capacity(MAX_PENDING),
            groups: Vec::new(),
        };
        Ok((hd.encode(), Box::new(lis)))
    }

    fn set_rank_cpus(&mut self, least_milli: usize) {
        self.rank_cpus = Some(least_milli);
    }

    fn connect(&self, dev: usize, handle: &Handle) -> NetResult<Box<dyn Connector>> {
        let d = self.dev(dev)?;
        let hd = HandleData::decode(handle)?;
        // Leave through the device's address (its rail, where source routing is set up), when
        // it can reach the peer's address at all (same family, both loopback or neither).
        let (a, b) = (d.addr.addr, hd.addr.ip());
        let from = (a.is_ipv4() == b.is_ipv4() && a.is_loopback() == b.is_loopback())
            .then(|| super::any_port(a, d.addr.scope_id));
        let conn_id = u64::from_le_bytes(
            auth::random::<8>().map_err(|e| err(format!("tcp: /dev/urandom: {e}")))?,
        );
        let n = 1 + hd.threads as usize * hd.socks_per_thread as usize;
        let mut socks = Vec::with_capacity(n);
        for _ in 0..n {
            let s = sock::connect_nonblocking(&hd.addr, from.as_ref())
                .map_err(|e| err(format!("tcp: connect to {}: {e}", hd.addr)))?;
            socks.push(ConnSock {
                s,
                state: CState::Connecting,
                buf: [0; HELLO],
                done: 0,
            });
        }
        let now = Instant::now();
        let stripe = stripes_bulk(self.cfg.stripe, self.rank_cpus, hd.threads as usize);
        tracing::debug!(peer = %hd.addr, stripe, rank_cpus = ?self.rank_cpus,
            "tcp: bulk data {}", if stripe { "striped over the data sockets" } else { "on the control socket" });
        Ok(Box::new(TcpConnect {
            hd,
            stripe,
            key: self.key,
            conn_id,
            socks,
            connect_deadline: now + self.cfg.connect_timeout,
            connect_timeout: self.cfg.connect_timeout,
            accept_timeout: self.cfg.accept_timeout,
            accept_deadline: None,
        }))
    }
}

// ---------------------------------------------------------------------------------------------
// Connection set-up.

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum CState {
    Connecting,
    ReadNonce,
    WriteHello,
    ReadAck,
    Done,
}

struct ConnSock {
    s: TcpStream,
    state: CState,
    buf: [u8; HELLO],
    done: usize,
}

struct TcpConnect {
    hd: HandleData,
    /// The comm stripes bulk payloads ([`stripes_bulk`]).
    stripe: bool,
    key: Key,
    conn_id: u64,
    /// Index 0: control; 1..: data sockets.
    socks: Vec<ConnSock>,
    connect_deadline: Instant,
    connect_timeout: Duration,
    accept_timeout: Duration,
    accept_deadline: Option<Instant>,
}

fn would_block(e: &io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted)
}

impl TcpConnect {
    fn step(&mut self, i: usize) -> NetResult<()> {
        let addr = self.hd.addr;
        let c = &mut self.socks[i];
        let fd = c.s.as_raw_fd();
        loop {
            match c.state {
                CState::Connecting => {
                    let mut p = [PollFd {
                        fd,
                        events: POLLOUT,
                        revents: 0,
                    }];
                    sock::poll(&mut p, 0).map_err(|e| err(format!("tcp: poll: {e}")))?;
                    if p[0].revents == 0 {
                        return Ok(());
                    }
                    if let Ok(Some(e)) | Err(e) = c.s.take_error() {
                        return Err(err(format!("tcp: connect to {addr}: {e}")));
                    }
                    c.s.set_nodelay(true)
                        .map_err(|e| err(format!("tcp: {addr}: {e}")))?;
                    c.state = CState::ReadNonce;
                    c.done = 0;
                }
                CState::ReadNonce => match sock::recv_nb(fd, &mut c.buf[c.done..NONCE]) {
                    Ok(0) => return Err(closed_in_setup(addr)),
                    Ok(n) => {
                        c.done += n;
                        if c.done == NONCE {
                            let nonce: [u8; NONCE] = c.buf[..NONCE].try_into().unwrap();
                            let role = i as u8;
                            let mut h = [0u8; HELLO];
                            h[0..4].copy_from_slice(HELLO_MAGIC);
                            h[4..6].copy_from_slice(&VERSION.to_le_bytes());
                            h[6] = role;
                            h[8..16].copy_from_slice(&self.conn_id.to_le_bytes());
                            h[16..32].copy_from_slice(&hello_mac(
                                &self.key,
                                &self.hd.token,
                                &nonce,
                                role,
                                self.conn_id,
                            ));
                            c.buf = h;
                            c.done = 0;
                            c.state = CState::WriteHello;
                        }
                    }
                    Err(e) if would_block(&e) => return Ok(()),
                    Err(e) => return Err(err(format!("tcp: handshake with {addr}: {e}"))),
                },
                CState::WriteHello => match sock::send_nb(fd, &c.buf[c.done..]) {
                    Ok(n) => {
                        c.done += n;
                        if c.done == HELLO {
                            c.state = CState::ReadAck;
                        }
                    }
                    Err(e) if would_block(&e) => return Ok(()),
                    Err(e) => return Err(err(format!("tcp: handshake with {addr}: {e}"))),
                },
                CState::ReadAck => {
                    let mut b = [0u8; 1];
                    match sock::recv_nb(fd, &mut b) {
                        Ok(1) if b[0] == ACK => c.state = CState::Done,
                        Ok(_) => return Err(closed_in_setup(addr)),
                        Err(e) if would_block(&e) => return Ok(()),
                        Err(e) => return Err(err(format!("tcp: handshake with {addr}: {e}"))),
                    }
                }
                CState::Done => return Ok(()),
            }
        }
    }
}

fn closed_in_setup(addr: SocketAddr) -> NetError {
    err(format!(
        "tcp: {addr} closed the connection during set-up: not a gpumpi listener for this \
         handle, or it refused the authentication (a different job secret)"
    ))
}

impl Connector for TcpConnect {
    fn poll(&mut self) -> NetResult<Option<Box<dyn SendComm>>> {
        for i in 0..self.socks.len() {
            self.step(i)?;
        }
        let now = Instant::now();
        if self.socks.iter().any(|c| c.state == CState::Connecting) {
            if now > self.connect_deadline {
                return Err(err(format!(
                    "tcp: connect to {}: no answer within {:?} (unreachable address, or a \
                     firewall dropping it?)",
                    self.hd.addr, self.connect_timeout
                )));
            }
            return Ok(None);
        }
        let deadline = *self
            .accept_deadline
            .get_or_insert(now + self.accept_timeout);
        if self.socks.iter().any(|c| c.state != CState::Done) {
            if now > deadline {
                return Err(err(format!(
                    "tcp: {} accepted the TCP connection but did not complete the gpumpi \
                     handshake within {:?}",
                    self.hd.addr, self.accept_timeout
                )));
            }
            return Ok(None);
        }
        let socks: Vec<TcpStream> = self.socks.drain(..).map(|c| c.s).collect();
        let comm = Comm::start(socks, self.hd, self.hd.addr.to_string(), Dir::Send)?;
        Ok(Some(Box::new(TcpSend::new(comm, self.stripe))))
    }
}

struct Pending {
    s: TcpStream,
    peer: SocketAddr,
    nonce: [u8; NONCE],
    sent: usize,
    buf: [u8; HELLO],
    got: usize,
    since: Instant,
}

struct Group {
    conn: u64,
    peer: SocketAddr,
    socks: Vec<Option<TcpStream>>,
    since: Instant,
}

struct TcpListen {
    l: TcpListener,
    addr: SocketAddr,
    key: Key,
    hd: HandleData,
    timeout: Duration,
    pending: Vec<Pending>,
    groups: Vec<Group>,
}

enum Check {
    Wait,
    Drop(String),
    Ok { role: usize, conn: u64 },
}

impl TcpListen {
    fn check(&self, p: &mut Pending) -> Check {
        let fd = p.s.as_raw_fd();
        while p.sent < NONCE {
            match sock::send_nb(fd, &p.nonce[p.sent..]) {
                Ok(n) => p.sent += n,
                Err(e) if would_block(&e) => return Check::Wait,
                Err(e) => return Check::Drop(e.to_string()),
            }
        }
        while p.got < HELLO {
            match sock::recv_nb(fd, &mut p.buf[p.got..]) {
                Ok(0) => return Check::Drop("closed before its hello".into()),
                Ok(n) => p.got += n,
                Err(e) if would_block(&e) => return Check::Wait,
                Err(e) => return Check::Drop(e.to_string()),
            }
        }
        let b = &p.buf;
        if &b[0..4] != HELLO_MAGIC {
            return Check::Drop("not a gpumpi hello".into());
        }
        let v = u16::from_le_bytes([b[4], b[5]]);
        if v != VERSION {
            return Check::Drop(format!("wire version {v}, this gpumpi speaks {VERSION}"));
        }
        let role = b[6];
        let conn = u64::from_le_bytes(b[8..16].try_into().unwrap());
        let want = hello_mac(&self.key, &self.hd.token, &p.nonce, role, conn);
        if !auth::ct_eq(&want, &b[16..32]) {
            return Check::Drop("authentication failed (different job secret or handle)".into());
        }
        let nsocks = self.hd.threads as usize * self.hd.socks_per_thread as usize;
        if role as usize > nsocks {
            return Check::Drop(format!("socket role {role} out of range"));
        }
        Check::Ok {
            role: role as usize,
            conn,
        }
    }
}

impl Listener for TcpListen {
    fn accept(&mut self) -> NetResult<Option<Box<dyn RecvComm>>> {
        // A nonblocking accept with nothing queued still makes (and frees) a socket in the
        // kernel, several microseconds: ask whether a connection waits first.
        let mut pfd = [PollFd {
            fd: self.l.as_raw_fd(),
            events: POLLIN,
            revents: 0,
        }];
        let queued = !matches!(sock::poll(&mut pfd, 0), Ok(0)) || pfd[0].revents != 0;
        loop {
            if !queued {
                break;
            }
            match self.l.accept() {
                Ok((s, peer)) => {
                    if self.pending.len() == MAX_PENDING {
                        let old = self.pending.remove(0);
                        tracing::warn!(peer = %old.peer, listener = %self.addr,
                            "tcp: too many unauthenticated connections; dropping the oldest");
                    }
                    let nonce = auth::random::<NONCE>()
                        .map_err(|e| err(format!("tcp: /dev/urandom: {e}")))?;
                    let _ = s.set_nonblocking(true);
                    let _ = s.set_nodelay(true);
                    let p = Pending {
                        s,
                        peer,
                        nonce,
                        sent: 0,
                        buf: [0; HELLO],
                        got: 0,
                        since: Instant::now(),
                    };
                    self.pending.push(p);
                }
                Err(e) if would_block(&e) => break,
                Err(e) => {
                    // Per-connection failures (ECONNABORTED, EMFILE) leave the listener usable.
                    tracing::warn!(listener = %self.addr, "tcp: accept: {e}");
                    break;
                }
            }
        }
        let nsocks = self.hd.threads as usize * self.hd.socks_per_thread as usize;
        let now = Instant::now();
        let mut i = 0;
        while i < self.pending.len() {
            let mut p = self.pending.swap_remove(i);
            match self.check(&mut p) {
                Check::Wait if now.duration_since(p.since) > self.timeout => {
                    tracing::warn!(peer = %p.peer, listener = %self.addr,
                        "tcp: dropping a connection that sent no valid hello in {:?}", self.timeout);
                }
                Check::Wait => {
                    self.pending.push(p);
                    let last = self.pending.len() - 1;
                    self.pending.swap(i, last);
                    i += 1;
                }
                Check::Drop(why) => {
                    tracing::warn!(peer = %p.peer, listener = %self.addr, "tcp: rejected connection: {why}");
                }
                Check::Ok { role, conn } => {
                    if sock::send_nb(p.s.as_raw_fd(), &[ACK]).ok() != Some(1) {
                        continue;
                    }
                    let gi = match self.groups.iter().position(|g| g.conn == conn) {
                        Some(g) => g,
                        None => {
                            self.groups.push(Group {
                                conn,
                                peer: p.peer,
                                socks: (0..=nsocks).map(|_| None).collect(),
                                since: now,
                            });
                            self.groups.len() - 1
                        }
                    };
                    let g = &mut self.groups[gi];
                    if role == 0 {
                        g.peer = p.peer;
                    }
                    g.socks[role] = Some(p.s);
                }
            }
        }
        self.groups.retain(|g| {
            now.duration_since(g.since) <= self.timeout || g.socks.iter().all(Option::is_some)
        });
        if let Some(gi) = self
            .groups
            .iter()
            .position(|g| g.socks.iter().all(Option::is_some))
        {
            let g = self.groups.swap_remove(gi);
            let socks: Vec<TcpStream> = g.socks.into_iter().map(Option::unwrap).collect();
            let comm = Comm::start(socks, self.hd, g.peer.to_string(), Dir::Recv)?;
            return Ok(Some(Box::new(TcpRecv::new(comm))));
        }
        Ok(None)
    }
}

// ---------------------------------------------------------------------------------------------
// Helper threads and the shared state of one comm.

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Dir {
    Send,
    Recv,
}

/// One piece of one message on one data socket: an address range of the caller's buffer.
#[derive(Clone, Copy, Debug)]
struct Task {
    ptr: usize,
    len: usize,
    done: usize,
    slot: u32,
}

/// State shared by a comm and its helper threads.
struct Shared {
    /// Finished pieces per request slot.
    done: [AtomicU32; MAX_REQUESTS],
    failed: AtomicBool,
    error: Mutex<Option<String>>,
    peer: String,
}

impl Shared {
    fn new(peer: String) -> Arc<Shared> {
        Arc::new(Shared {
            done: std::array::from_fn(|_| AtomicU32::new(0)),
            failed: AtomicBool::new(false),
            error: Mutex::new(None),
            peer,
        })
    }

    fn fail(&self, msg: String) {
        let mut e = self.error.lock().unwrap_or_else(|p| p.into_inner());
        if e.is_none() {
            *e = Some(msg);
        }
        self.failed.store(true, Ordering::Release);
    }

    fn check(&self) -> NetResult<()> {
        if self.failed.load(Ordering::Acquire) {
            let e = self.error.lock().unwrap_or_else(|p| p.into_inner());
            return Err(err(e.clone().unwrap_or_default()));
        }
        Ok(())
    }
}

/// What one helper thread shares with the comm: a task queue per socket it owns.
struct HelperShared {
    queues: Mutex<Vec<VecDeque<Task>>>,
    sleeping: AtomicBool,
    stop: AtomicBool,
    wake: EventFd,
}

struct Helper {
    hs: Arc<HelperShared>,
    join: Option<JoinHandle<()>>,
}

fn helper_loop(socks: Vec<TcpStream>, dir: Dir, hs: Arc<HelperShared>, sh: Arc<Shared>) {
    let n = socks.len();
    let mut cur: Vec<Option<Task>> = vec![None; n];
    let mut pfds: Vec<PollFd> = Vec::with_capacity(n + 1);
    let what = if dir == Dir::Send {
        "sending to"
    } else {
        "receiving from"
    };
    while !hs.stop.load(Ordering::Acquire) {
        if cur.iter().any(Option::is_none) {
            let mut q = hs.queues.lock().unwrap_or_else(|p| p.into_inner());
            for (c, q) in cur.iter_mut().zip(q.iter_mut()) {
                if c.is_none() {
                    *c = q.pop_front();
                }
            }
        }
        let mut progressed = false;
        for (i, c) in cur.iter_mut().enumerate() {
            let Some(t) = c else { continue };
            let fd = socks[i].as_raw_fd();
            let rest = t.len - t.done;
            let r = match dir {
                Dir::Send => {
                    // SAFETY: the range lies in the buffer the caller passed to isend, which
                    // stays valid and unchanged until the request completes (isend's
                    // contract); the request cannot complete before this piece is counted.
                    let b =
                        unsafe { std::slice::from_raw_parts((t.ptr + t.done) as *const u8, rest) };
                    sock::send_nb(fd, b)
                }
                Dir::Recv => {
                    // SAFETY: the range lies in a buffer passed to irecv, writable and not
                    // accessed by anyone else until the group completes (irecv's contract).
                    let b = unsafe {
                        std::slice::from_raw_parts_mut((t.ptr + t.done) as *mut u8, rest)
                    };
                    sock::recv_nb(fd, b)
                }
            };
            match r {
                Ok(0) => {
                    sh.fail(format!(
                        "tcp: {} closed the connection in the middle of a message ({} of {} \
                         bytes of a piece {})",
                        sh.peer,
                        t.done,
                        t.len,
                        if dir == Dir::Send { "sent" } else { "received" }
                    ));
                    return;
                }
                Ok(k) => {
                    progressed = true;
                    t.done += k;
                    if t.done == t.len {
                        sh.done[t.slot as usize].fetch_add(1, Ordering::AcqRel);
                        *c = None;
                    }
                }
                Err(e) if would_block(&e) => {}
                Err(e) => {
                    sh.fail(format!(
                        "tcp: error {what} {} in the middle of a message: {e}",
                        sh.peer
                    ));
                    return;
                }
            }
        }
        if progressed {
            continue;
        }
        // No progress: wait for a socket to become ready, or for a new task or stop (eventfd).
        hs.sleeping.store(true, Ordering::SeqCst);
        let queued = {
            let q = hs.queues.lock().unwrap_or_else(|p| p.into_inner());
            cur.iter()
                .zip(q.iter())
                .any(|(c, q)| c.is_none() && !q.is_empty())
        };
        if queued || hs.stop.load(Ordering::SeqCst) {
            hs.sleeping.store(false, Ordering::SeqCst);
            continue;
        }
        pfds.clear();
        pfds.push(PollFd {
            fd: hs.wake.fd(),
            events: POLLIN,
            revents: 0,
        });
        let ev = if dir == Dir::Send { POLLOUT } else { POLLIN };
        for (i, c) in cur.iter().enumerate() {
            if c.is_some() {
                pfds.push(PollFd {
                    fd: socks[i].as_raw_fd(),
                    events: ev,
                    revents: 0,
                });
            }
        }
        if let Err(e) = sock::poll(&mut pfds, -1) {
            sh.fail(format!("tcp: poll on the sockets of {}: {e}", sh.peer));
            return;
        }
        hs.sleeping.store(false, Ordering::SeqCst);
        if pfds[0].revents != 0 {
            hs.wake.clear();
        }
    }
}

/// The part common to both directions: the control socket, the helpers, the registrations.
struct Comm {
    sh: Arc<Shared>,
    ctrl: TcpStream,
    helpers: Vec<Helper>,
    threads: usize,
    nsocks: usize,
    /// The data socket of the next message's first piece.
    next_sock: usize,
    mrs: Vec<Option<(usize, usize)>>,
    /// The other direction of this connection was handed out, or this comm is that other
    /// direction: [`Comm::reversed`] gives no (further) comm.
    no_reverse: bool,
    /// Shut the socket's sending side on drop: this is the sending comm of a connection's
    /// other direction, and the receiving comm of the connection keeps the socket open.
    shut_write: bool,
}

impl Comm {
    fn start(mut socks: Vec<TcpStream>, hd: HandleData, peer: String, dir: Dir) -> NetResult<Comm> {
        let threads = hd.threads as usize;
        let nsocks = threads * hd.socks_per_thread as usize;
        let data = socks.split_off(1);
        let ctrl = socks.pop().unwrap();
        let sh = Shared::new(peer);
        // Socket s belongs to thread s % threads, as its (s / threads)-th socket.
        let mut per: Vec<Vec<TcpStream>> = (0..threads).map(|_| Vec::new()).collect();
        for (s, st) in data.into_iter().enumerate() {
            per[s % threads].push(st);
        }
        // The comm exists before its helpers start, so that a failure half-way stops (Drop)
        // the helpers already started.
        let mut comm = Comm {
            sh: sh.clone(),
            ctrl,
            helpers: Vec::with_capacity(threads),
            threads,
            nsocks,
            next_sock: 0,
            mrs: Vec::new(),
            no_reverse: false,
            shut_write: false,
        };
        for (t, mine) in per.into_iter().enumerate() {
            let hs = Arc::new(HelperShared {
                queues: Mutex::new(
                    (0..mine.len())
                        .map(|_| VecDeque::with_capacity(MAX_REQUESTS))
                        .collect(),
                ),
                sleeping: AtomicBool::new(false),
                stop: AtomicBool::new(false),
                wake: EventFd::new().map_err(|e| err(format!("tcp: eventfd: {e}")))?,
            });
            let (hs2, sh2) = (hs.clone(), sh.clone());
            let name = format!(
                "gpumpi-net-{}{t}",
                if dir == Dir::Send { "tx" } else { "rx" }
            );
            let join = std::thread::Builder::new()
                .name(name)
                .spawn(move || helper_loop(mine, dir, hs2, sh2))
                .map_err(|e| err(format!("tcp: cannot start a helper thread: {e}")))?;
            comm.helpers.push(Helper {
                hs,
                join: Some(join),
            });
        }
        Ok(comm)
    }

    /// The comm of this connection's other direction (`dir`), once: the control socket
    /// duplicated, no data sockets, no helper threads (see the module documentation).
    fn reversed(&mut self, dir: Dir) -> NetResult<Option<Comm>> {
        if self.no_reverse {
            return Ok(None);
        }
        let ctrl = self.ctrl.try_clone().map_err(|e| {
            err(format!(
                "tcp: connection with {}: cannot open its other direction: {e}",
                self.sh.peer
            ))
        })?;
        self.no_reverse = true;
        Ok(Some(Comm {
            sh: Shared::new(self.sh.peer.clone()),
            ctrl,
            helpers: Vec::new(),
            threads: 0,
            nsocks: 0,
            next_sock: 0,
            mrs: Vec::new(),
            no_reverse: true,
            shut_write: dir == Dir::Send,
        }))
    }

    fn reg_mr(&mut self, ptr: *const u8, len: usize, kind: MemKind) -> NetResult<Mr> {
        if kind != MemKind::Host {
            return Err(err(
                "tcp: reg_mr: device memory cannot be registered (the TCP backend sends host \
                 memory only; stage device buffers through host memory)",
            ));
        }
        let r = Some((ptr as usize, len));
        let i = match self.mrs.iter().position(Option::is_none) {
            Some(i) => {
                self.mrs[i] = r;
                i
            }
            None => {
                self.mrs.push(r);
                self.mrs.len() - 1
            }
        };
        Ok(Mr(i as u64))
    }

    fn dereg_mr(&mut self, mr: Mr) -> NetResult<()> {
        match self.mrs.get_mut(mr.0 as usize) {
            Some(m @ Some(_)) => {
                *m = None;
                Ok(())
            }
            _ => Err(err(format!("tcp: dereg_mr: {mr:?} is not registered"))),
        }
    }

    fn check_mr(&self, op: &str, ptr: usize, size: usize, mr: Mr) -> NetResult<()> {
        match self.mrs.get(mr.0 as usize) {
            Some(Some((b, l)))
                if size == 0
                    || (ptr >= *b && ptr.checked_add(size).is_some_and(|e| e <= b + l)) =>
            {
                Ok(())
            }
            Some(Some((b, l))) => Err(err(format!(
                "tcp: {op}: buffer {ptr:#x}+{size} is outside its registration {b:#x}+{l}"
            ))),
            _ => Err(err(format!("tcp: {op}: {mr:?} is not registered"))),
        }
    }

    /// Whether a helper thread still owes pieces to one of the `active` request slots whose
    /// piece counts are `pieces` (its progress is seen only by polling), or the comm failed.
    fn helpers_owe(&self, slots: impl Iterator<Item = (bool, u32)>) -> bool {
        self.sh.failed.load(Ordering::Acquire)
            || slots.enumerate().any(|(i, (active, pieces))| {
                active && pieces > 0 && self.sh.done[i].load(Ordering::Acquire) < pieces
            })
    }

    /// Splits a message of `size` bytes into pieces and hands them to the helpers; returns the
    /// number of pieces. Both ends call this with the same sizes in the same order.
    fn post_pieces(&mut self, ptr: usize, size: usize, slot: u32) -> u32 {
        let (pieces, piece) = split(size, self.nsocks);
        for i in 0..pieces {
            let off = i * piece;
            let len = piece.min(size - off);
            let s = (self.next_sock + i) % self.nsocks;
            let h = &self.helpers[s % self.threads];
            h.hs.queues.lock().unwrap_or_else(|p| p.into_inner())[s / self.threads].push_back(
                Task {
                    ptr: ptr + off,
                    len,
                    done: 0,
                    slot,
                },
            );
            if h.hs.sleeping.swap(false, Ordering::SeqCst) {
                h.hs.wake.signal();
            }
        }
        self.next_sock = (self.next_sock + pieces) % self.nsocks;
        pieces as u32
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        for h in &self.helpers {
            h.hs.stop.store(true, Ordering::SeqCst);
            h.hs.wake.signal();
        }
        for h in &mut self.helpers {
            if let Some(j) = h.join.take() {
                let _ = j.join();
            }
        }
        if self.shut_write {
            let _ = self.ctrl.shutdown(Shutdown::Write);
        }
    }
}

/// `(pieces, piece length)` of a message of `size` bytes over `nsocks` sockets: pieces of at
/// least [`MIN_CHUNK`] bytes (but one piece for a smaller message), 4 KiB-aligned, at most one
/// per socket.
fn split(size: usize, nsocks: usize) -> (usize, usize) {
    if size == 0 {
        return (0, 0);
    }
    let want = size.div_ceil(MIN_CHUNK).clamp(1, nsocks);
    let piece = size.div_ceil(want).next_multiple_of(4096);
    (size.div_ceil(piece), piece)
}

// ---------------------------------------------------------------------------------------------
// The sending side.

#[derive(Clone, Copy, Default)]
struct SendSlot {
    gen: u32,
    active: bool,
    size: usize,
    pieces: u32,
    /// Control-stream offset just past this message's header.
    hdr_end: u64,
}

/// One message's bytes on the control socket: its header and, for a payload of at most
/// [`INLINE_MAX`] bytes, the payload (read from the caller's buffer as it is written).
#[derive(Clone, Copy)]
struct CtrlItem {
    hdr: [u8; HDR],
    /// The request slot of the message.
    slot: u32,
    ptr: usize,
    len: usize,
    /// Bytes of `hdr` then payload written so far.
    off: usize,
}

struct TcpSend {
    c: Comm,
    /// Bulk payloads are striped over the data sockets, else inline ([`goes_inline`]).
    stripe: bool,
    slots: [SendSlot; MAX_REQUESTS],
    /// Control bytes not yet written, in order (at most one item per request in flight).
    out: VecDeque<CtrlItem>,
    /// Control bytes written so far.
    written: u64,
    queued: u64,
    /// The last flush left bytes queued: the socket buffer was full.
    full: bool,
    /// Tests since the last flush that skipped it ([`SendComm::test`]).
    skips: u32,
}

impl TcpSend {
    fn new(c: Comm, stripe: bool) -> Self {
        TcpSend {
            c,
            stripe,
            slots: [SendSlot::default(); MAX_REQUESTS],
            out: VecDeque::with_capacity(MAX_REQUESTS),
            written: 0,
            queued: 0,
            full: false,
            skips: 0,
        }
    }

    /// Writes the queued control bytes (headers and inline payloads, straight from the
    /// callers' buffers) in as few `sendmsg` calls as the socket takes: every queued message
    /// in one call (up to [`sock::MAX_IOV`] slices), and no second call once a call wrote
    /// less than it was given (the socket buffer is full: the call would only say so).
    fn flush(&mut self) -> NetResult<()> {
        let fd = self.c.ctrl.as_raw_fd();
        while !self.out.is_empty() {
            let mut bufs: [&[u8]; sock::MAX_IOV] = [&[]; sock::MAX_IOV];
            let (mut k, mut total) = (0, 0);
            for it in self.out.iter() {
                if k + 2 > sock::MAX_IOV {
                    break;
                }
                let h = &it.hdr[it.off.min(HDR)..];
                let skip = it.off.saturating_sub(HDR);
                // SAFETY: the payload lies in the buffer passed to isend, valid and unchanged
                // until the request completes, which it cannot before these bytes are written.
                let p = unsafe {
                    std::slice::from_raw_parts((it.ptr + skip) as *const u8, it.len - skip)
                };
                for b in [h, p] {
                    if !b.is_empty() {
                        bufs[k] = b;
                        k += 1;
                        total += b.len();
                    }
                }
            }
            match sock::sendv_nb(fd, &bufs[..k]) {
                Ok(n) => {
                    self.written += n as u64;
                    let mut left = n;
                    while left > 0 {
                        let it = self
                            .out
                            .front_mut()
                            .expect("bytes written of a queued item");
                        let t = left.min(HDR + it.len - it.off);
                        it.off += t;
                        left -= t;
                        if it.off == HDR + it.len {
                            self.out.pop_front();
                        }
                    }
                    if n < total {
                        break;
                    }
                }
                Err(e) if would_block(&e) => break,
                Err(e) => {
                    self.c.sh.fail(format!(
                        "tcp: control connection to {}: {e}",
                        self.c.sh.peer
                    ));
                    break;
                }
            }
        }
        self.full = !self.out.is_empty();
        self.skips = 0;
        self.c.sh.check()
    }
}

impl SendComm for TcpSend {
    fn reg_mr(&mut self, ptr: *const u8, len: usize, kind: MemKind) -> NetResult<Mr> {
        self.c.reg_mr(ptr, len, kind)
    }

    fn dereg_mr(&mut self, mr: Mr) -> NetResult<()> {
        self.c.dereg_mr(mr)
    }

    unsafe fn isend(
        &mut self,
        data: *const u8,
        size: usize,
        tag: i32,
        mr: Mr,
    ) -> NetResult<Option<Request>> {
        self.c.sh.check()?;
        self.c.check_mr("isend", data as usize, size, mr)?;
        let Some(slot) = self.slots.iter().position(|s| !s.active) else {
            return Ok(None);
        };
        let mut hdr = [0u8; HDR];
        hdr[0..4].copy_from_slice(&tag.to_le_bytes());
        hdr[8..16].copy_from_slice(&(size as u64).to_le_bytes());
        // A comm without data sockets (a connection's other direction) sends everything inline.
        let inline = if self.c.nsocks == 0 || goes_inline(tag, size, self.stripe) {
            hdr[4] = HDR_INLINE;
            size
        } else {
            0
        };
        self.out.push_back(CtrlItem {
            hdr,
            slot: slot as u32,
            ptr: data as usize,
            len: inline,
            off: 0,
        });
        self.queued += (HDR + inline) as u64;
        self.c.sh.done[slot].store(0, Ordering::Release);
        let pieces = if inline == size {
            0
        } else {
            self.c.post_pieces(data as usize, size, slot as u32)
        };
        let s = &mut self.slots[slot];
        *s = SendSlot {
            gen: s.gen.wrapping_add(1),
            active: true,
            size,
            pieces,
            hdr_end: self.queued,
        };
        let req = Request {
            slot: slot as u32,
            gen: s.gen,
        };
        self.flush()?;
        Ok(Some(req))
    }

    fn wait_on(&self) -> WaitOn {
        if self
            .c
            .helpers_owe(self.slots.iter().map(|s| (s.active, s.pieces)))
        {
            WaitOn::Polled
        } else if self.out.is_empty() {
            WaitOn::Idle
        } else {
            WaitOn::Fd(self.c.ctrl.as_raw_fd(), POLLOUT)
        }
    }

    fn test(&mut self, req: Request) -> NetResult<Option<usize>> {
        let s = match self.slots.get(req.slot as usize) {
            Some(s) if s.active && s.gen == req.gen => *s,
            _ => {
                return Err(err(format!(
                    "tcp: test: {req:?} is not a send request in flight"
                )))
            }
        };
        // A caller tests every request in flight at each pass (the engine's bulk transfers):
        // while the socket is full, only the test of the message whose bytes go next writes,
        // so that a pass makes one `sendmsg` that the socket refuses, not one per request.
        // Any other test writes too after [`MAX_REQUESTS`] tests that did not, so that a
        // caller testing only a later request still moves the ones before it.
        let next = self.out.front().is_some_and(|it| it.slot == req.slot);
        if !self.full || next || self.skips >= MAX_REQUESTS as u32 {
            self.flush()?;
        } else {
            self.skips += 1;
            self.c.sh.check()?;
        }
        let done = self.c.sh.done[req.slot as usize].load(Ordering::Acquire);
        if self.written >= s.hdr_end && done == s.pieces {
            self.slots[req.slot as usize].active = false;
            return Ok(Some(s.size));
        }
        Ok(None)
    }

    fn peer(&self) -> String {
        self.c.sh.peer.clone()
    }

    fn reverse(&mut self) -> NetResult<Option<Box<dyn RecvComm>>> {
        Ok(self
            .c
            .reversed(Dir::Recv)?
            .map(|c| Box::new(TcpRecv::new(c)) as Box<dyn RecvComm>))
    }
}

// ---------------------------------------------------------------------------------------------
// The receiving side.

#[derive(Clone, Copy)]
struct RecvSlot {
    gen: u32,
    active: bool,
    n: usize,
    bufs: [(usize, usize, i32); MAX_RECVS],
    matched: [bool; MAX_RECVS],
    sizes: [usize; MAX_RECVS],
    nmatched: usize,
    pieces: u32,
}

impl Default for RecvSlot {
    fn default() -> Self {
        RecvSlot {
            gen: 0,
            active: false,
            n: 0,
            bufs: [(0, 0, 0); MAX_RECVS],
            matched: [false; MAX_RECVS],
            sizes: [0; MAX_RECVS],
            nmatched: 0,
            pieces: 0,
        }
    }
}

struct TcpRecv {
    c: Comm,
    slots: [RecvSlot; MAX_REQUESTS],
    /// Posted groups that still have unmatched receives, oldest first.
    order: VecDeque<u32>,
    /// Bytes read ahead from the control socket, `rbuf[rpos..rend]` not yet used: one `recv`
    /// takes a header with its inline payload (and whatever follows), not one call for each.
    rbuf: Box<[u8]>,
    rpos: usize,
    rend: usize,
    /// The payload being read from the control socket: (request slot, next byte, bytes left).
    inline: Option<(u32, usize, usize)>,
    /// The last inline payload was larger than [`READ_AHEAD_AFTER_MAX`]: the next header is
    /// read alone.
    big_last: bool,
    /// The peer closed the control socket after its last message: the messages it sent are
    /// still delivered, and a receive that no message will reach fails when tested.
    closed: bool,
    /// The last read from the control socket found it empty (cleared by any read that got
    /// bytes).
    dry: bool,
    /// Tests since the socket was last read that skipped reading it ([`RecvComm::test`]).
    skips: u32,
}

impl TcpRecv {
    fn new(c: Comm) -> Self {
        TcpRecv {
            c,
            slots: [RecvSlot::default(); MAX_REQUESTS],
            order: VecDeque::with_capacity(MAX_REQUESTS),
            rbuf: vec![0u8; READ_AHEAD].into_boxed_slice(),
            rpos: 0,
            rend: 0,
            inline: None,
            big_last: false,
            closed: false,
            dry: false,
            skips: 0,
        }
    }

    /// Reads the rest of an inline payload, from the read-ahead bytes first, then straight
    /// from the control socket; `Ok(false)` while bytes are still missing.
    fn read_inline(&mut self) -> NetResult<bool> {
        while let Some((slot, ptr, left)) = self.inline {
            if left == 0 {
                self.inline = None;
                break;
            }
            // SAFETY: the range lies in the matched receive buffer of an active group, writable
            // and untouched by anyone else until the group completes (irecv's contract).
            let b = unsafe { std::slice::from_raw_parts_mut(ptr as *mut u8, left) };
            let have = (self.rend - self.rpos).min(left);
            if have > 0 {
                b[..have].copy_from_slice(&self.rbuf[self.rpos..self.rpos + have]);
                self.rpos += have;
                self.inline = Some((slot, ptr + have, left - have));
                continue;
            }
            // The read-ahead bytes are used up: the next header is read behind the payload in
            // the same call (one call per message, not two), and only the header, so that no
            // payload byte is copied out of the read-ahead buffer.
            (self.rpos, self.rend) = (0, 0);
            match sock::recv2_nb(self.c.ctrl.as_raw_fd(), b, &mut self.rbuf[..HDR]) {
                Ok(0) => {
                    self.c.sh.fail(format!(
                        "tcp: {} closed the connection in the middle of a message ({left} \
                         bytes missing)",
                        self.c.sh.peer
                    ));
                    return self.c.sh.check().map(|()| false);
                }
                Ok(n) if n > left => {
                    self.dry = false;
                    self.rend = n - left;
                    self.inline = Some((slot, ptr + left, 0));
                }
                Ok(n) => {
                    self.dry = false;
                    self.inline = Some((slot, ptr + n, left - n));
                }
                Err(e) if would_block(&e) => {
                    self.dry = true;
                    return Ok(false);
                }
                Err(e) => {
                    self.c.sh.fail(format!(
                        "tcp: control connection from {}: {e}",
                        self.c.sh.peer
                    ));
                    return self.c.sh.check().map(|()| false);
                }
            }
        }
        Ok(true)
    }

    /// Reads message headers while a posted group waits for one, and matches them; reads
    /// inline payloads into their receives.
    fn progress(&mut self) -> NetResult<()> {
        self.c.sh.check()?;
        if !self.read_inline()? {
            return Ok(());
        }
        while let Some(&slot) = self.order.front() {
            while self.rend - self.rpos < HDR {
                if self.rpos > 0 {
                    self.rbuf.copy_within(self.rpos..self.rend, 0);
                    self.rend -= self.rpos;
                    self.rpos = 0;
                }
                let want = match self.big_last {
                    true => HDR - (self.rend - self.rpos),
                    false => READ_AHEAD - self.rend,
                };
                let to = self.rend + want;
                match sock::recv_nb(self.c.ctrl.as_raw_fd(), &mut self.rbuf[self.rend..to]) {
                    Ok(0) if self.rend == 0 => {
                        self.closed = true;
                        return Ok(());
                    }
                    Ok(0) => {
                        self.c.sh.fail(format!(
                            "tcp: {} closed the connection in the middle of a message header",
                            self.c.sh.peer
                        ));
                        return self.c.sh.check();
                    }
                    Ok(n) => {
                        self.dry = false;
                        self.rend += n;
                    }
                    Err(e) if would_block(&e) => {
                        self.dry = true;
                        return Ok(());
                    }
                    Err(e) => {
                        self.c.sh.fail(format!(
                            "tcp: control connection from {}: {e}",
                            self.c.sh.peer
                        ));
                        return self.c.sh.check();
                    }
                }
            }
            let h = &self.rbuf[self.rpos..self.rpos + HDR];
            let tag = i32::from_le_bytes(h[0..4].try_into().unwrap());
            let size = u64::from_le_bytes(h[8..16].try_into().unwrap()) as usize;
            let inline = h[4] & HDR_INLINE != 0;
            self.rpos += HDR;
            let s = &mut self.slots[slot as usize];
            let n = s.n;
            let Some(e) = (0..n).find(|&e| !s.matched[e] && s.bufs[e].2 == tag) else {
                let tags: Vec<i32> = (0..n)
                    .filter(|&e| !s.matched[e])
                    .map(|e| s.bufs[e].2)
                    .collect();
                self.c.sh.fail(format!(
                    "tcp: message with tag {tag} from {} matches no receive of the posted group \
                     (unmatched tags {tags:?})",
                    self.c.sh.peer
                ));
                return self.c.sh.check();
            };
            let (ptr, cap, _) = s.bufs[e];
            if size > cap {
                self.c.sh.fail(format!(
                    "tcp: message truncated: {} sent {size} bytes with tag {tag}, the receive \
                     holds {cap}",
                    self.c.sh.peer
                ));
                return self.c.sh.check();
            }
            s.matched[e] = true;
            s.sizes[e] = size;
            s.nmatched += 1;
            if s.nmatched == n {
                self.order.pop_front();
            }
            if inline {
                self.big_last = size > READ_AHEAD_AFTER_MAX;
                self.inline = Some((slot, ptr, size));
                if !self.read_inline()? {
                    return Ok(());
                }
                continue;
            }
            if self.c.nsocks == 0 {
                self.c.sh.fail(format!(
                    "tcp: {} sent a {size}-byte message for data sockets on a connection's \
                     other direction, which has none",
                    self.c.sh.peer
                ));
                return self.c.sh.check();
            }
            let p = self.c.post_pieces(ptr, size, slot);
            self.slots[slot as usize].pieces += p;
        }
        Ok(())
    }
}

impl RecvComm for TcpRecv {
    fn reg_mr(&mut self, ptr: *const u8, len: usize, kind: MemKind) -> NetResult<Mr> {
        self.c.reg_mr(ptr, len, kind)
    }

    fn dereg_mr(&mut self, mr: Mr) -> NetResult<()> {
        self.c.dereg_mr(mr)
    }

    unsafe fn irecv(&mut self, bufs: &[RecvBuf]) -> NetResult<Option<Request>> {
        self.c.sh.check()?;
        if bufs.is_empty() || bufs.len() > MAX_RECVS {
            return Err(err(format!(
                "tcp: irecv: a group of {} receives (1..={MAX_RECVS})",
                bufs.len()
            )));
        }
        for b in bufs {
            self.c.check_mr("irecv", b.ptr as usize, b.size, b.mr)?;
        }
        let Some(slot) = self.slots.iter().position(|s| !s.active) else {
            return Ok(None);
        };
        self.c.sh.done[slot].store(0, Ordering::Release);
        let s = &mut self.slots[slot];
        let gen = s.gen.wrapping_add(1);
        *s = RecvSlot {
            gen,
            active: true,
            n: bufs.len(),
            ..RecvSlot::default()
        };
        for (i, b) in bufs.iter().enumerate() {
            s.bufs[i] = (b.ptr as usize, b.size, b.tag);
        }
        self.order.push_back(slot as u32);
        self.progress()?;
        Ok(Some(Request {
            slot: slot as u32,
            gen,
        }))
    }

    fn wait_on(&self) -> WaitOn {
        if self.closed
            || self
                .c
                .helpers_owe(self.slots.iter().map(|s| (s.active, s.pieces)))
        {
            WaitOn::Polled
        } else if self.order.is_empty() && self.inline.is_none() {
            WaitOn::Idle
        } else {
            WaitOn::Fd(self.c.ctrl.as_raw_fd(), POLLIN)
        }
    }

    fn test(&mut self, req: Request, sizes: &mut [usize]) -> NetResult<bool> {
        let ok =
            matches!(self.slots.get(req.slot as usize), Some(s) if s.active && s.gen == req.gen);
        if !ok {
            return Err(err(format!(
                "tcp: test: {req:?} is not a receive request in flight"
            )));
        }
        // A caller tests every receive in flight at each pass (the engine's bulk transfers):
        // while the socket is empty, only the test of the receive that reads from it next
        // reads, so that a pass makes one `recv` that finds nothing, not one per request. Any
        // other test reads too after [`MAX_REQUESTS`] tests that did not.
        let next = match self.inline {
            Some((slot, ..)) => slot == req.slot,
            None => self.order.front() == Some(&req.slot),
        };
        if !self.dry || next || self.skips >= MAX_REQUESTS as u32 {
            self.skips = 0;
            self.progress()?;
        } else {
            self.skips += 1;
            self.c.sh.check()?;
        }
        let s = &self.slots[req.slot as usize];
        let done = self.c.sh.done[req.slot as usize].load(Ordering::Acquire);
        let reading = self.inline.is_some_and(|(slot, ..)| slot == req.slot);
        if s.nmatched == s.n && done == s.pieces && !reading {
            for (o, v) in sizes.iter_mut().zip(&s.sizes[..s.n]) {
                *o = *v;
            }
            self.slots[req.slot as usize].active = false;
            return Ok(true);
        }
        if self.closed && s.nmatched < s.n {
            return Err(err(format!(
                "tcp: {} closed the connection while a receive was posted",
                self.c.sh.peer
            )));
        }
        Ok(false)
    }

    fn peer(&self) -> String {
        self.c.sh.peer.clone()
    }

    fn reverse(&mut self) -> NetResult<Option<Box<dyn SendComm>>> {
        Ok(self
            .c
            .reversed(Dir::Send)?
            .map(|c| Box::new(TcpSend::new(c, false)) as Box<dyn SendComm>))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `auto` stripes bulk data only where every rank has a CPU for the calling thread and
    /// one for each helper thread of a direction; unknown CPUs keep the striping; `1` and `0`
    /// override.
    #[test]
    fn bulk_data_is_striped_only_where_the_helpers_have_cpus_of_their_own() {
        // 2 ranks on a 2-CPU machine: 1 CPU each (the VM of benches/NOTES.md).
        assert!(!stripes_bulk(Stripe::Auto, Some(1000), 2));
        // Half a CPU each (4 ranks on 2 CPUs), and one CPU short of the helpers.
        assert!(!stripes_bulk(Stripe::Auto, Some(500), 2));
        assert!(!stripes_bulk(Stripe::Auto, Some(2999), 2));
        assert!(stripes_bulk(Stripe::Auto, Some(3000), 2));
        // 4 ranks on a 64-core host: 16 CPUs each.
        assert!(stripes_bulk(Stripe::Auto, Some(16_000), 2));
        // One helper needs 2 CPUs; 16 helpers need 17.
        assert!(stripes_bulk(Stripe::Auto, Some(2000), 1));
        assert!(!stripes_bulk(Stripe::Auto, Some(16_000), 16));
        assert!(stripes_bulk(Stripe::Auto, None, 2));
        for m in [None, Some(0), Some(1000), Some(64_000)] {
            assert!(stripes_bulk(Stripe::On, m, 2));
            assert!(!stripes_bulk(Stripe::Off, m, 2));
        }
        assert_eq!(Stripe::parse(""), Some(Stripe::Auto));
        assert_eq!(Stripe::parse(" AUTO"), Some(Stripe::Auto));
        assert_eq!(Stripe::parse("1"), Some(Stripe::On));
        assert_eq!(Stripe::parse("0"), Some(Stripe::Off));
        assert_eq!(Stripe::parse("off"), Some(Stripe::Off));
        assert_eq!(Stripe::parse("2"), None);
    }

    #[test]
    fn split_covers_the_message_with_at_most_one_piece_per_socket() {
        for nsocks in [1, 2, 3, 4, 8, 64] {
            for size in [
                1,
                4095,
                4096,
                65535,
                65536,
                65537,
                200_000,
                1 << 20,
                (63 << 16) + 1,
                64 << 20,
            ] {
                let (pieces, piece) = split(size, nsocks);
                assert!(pieces >= 1 && pieces <= nsocks, "{size} {nsocks}: {pieces}");
                assert!(piece % 4096 == 0 && (pieces - 1) * piece < size && pieces * piece >= size);
                if size > MIN_CHUNK && nsocks > 1 {
                    assert!(
                        pieces > 1,
                        "{size} over {nsocks} sockets stays in one piece"
                    );
                }
            }
        }
        assert_eq!(split(0, 4), (0, 0));
    }

    /// A listener that hands each accepted connection out one call late, so that a test can
    /// act between the backend's accept and the caller's first use of the connection.
    struct Late {
        inner: Box<dyn Listener>,
        held: Option<Box<dyn RecvComm>>,
    }

    impl Listener for Late {
        fn accept(&mut self) -> NetResult<Option<Box<dyn RecvComm>>> {
            if let Some(c) = self.held.take() {
                return Ok(Some(c));
            }
            self.held = self.inner.accept()?;
            Ok(None)
        }
    }

    /// A dialer that completes the set-up at the socket level, then closes every socket with
    /// the listener's confirmation unread (the kernel then resets the connection instead of
    /// closing it), as a rank does that gives up a dial (at `MPI_Finalize`, or to dial again)
    /// after the listener accepted it: the accepting side drops that connection, which never
    /// carried its hello, and is not failed by it.
    #[test]
    fn a_dial_reset_after_the_listener_accepted_it_is_dropped() {
        use crate::transport::net::links::{Link, Links};
        use std::io::{Read, Write};
        let cfg = TcpConfig {
            ifname: Some("=lo".into()),
            family: Family::V4,
            threads: 1,
            socks_per_thread: 1,
            connect_timeout: Duration::from_secs(5),
            accept_timeout: Duration::from_secs(5),
            stripe: Stripe::Auto,
        };
        let net = TcpNet::new(cfg, b"reset-after-accept").unwrap();
        let key = net.key;
        let (h, l) = net.listen(0).unwrap();
        let hd = HandleData::decode(&h).unwrap();
        let late = Late {
            inner: l,
            held: None,
        };
        let mut links = Links::new(
            Box::new(net),
            0,
            Box::new(late),
            0,
            vec![None, Some(h)],
            Duration::from_secs(5),
        );
        let mut out = Vec::new();
        let progress =
            |links: &mut Links, out: &mut Vec<Link>| links.progress(true, &|_, _| false, out);
        // The control socket and one data socket, connected (the kernel queues them for the
        // listener), then the listener's challenges.
        let mut socks: Vec<TcpStream> = (0..2)
            .map(|_| TcpStream::connect(hd.addr).unwrap())
            .collect();
        progress(&mut links, &mut out).unwrap();
        let conn = 0x5eed_u64;
        for (role, s) in socks.iter_mut().enumerate() {
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut nonce = [0u8; NONCE];
            s.read_exact(&mut nonce).unwrap();
            let mut hello = [0u8; HELLO];
            hello[0..4].copy_from_slice(HELLO_MAGIC);
            hello[4..6].copy_from_slice(&VERSION.to_le_bytes());
            hello[6] = role as u8;
            hello[8..16].copy_from_slice(&conn.to_le_bytes());
            hello[16..32].copy_from_slice(&hello_mac(&key, &hd.token, &nonce, role as u8, conn));
            s.write_all(&hello).unwrap();
        }
        // The listener confirms both sockets and completes the connection (held by `Late`).
        progress(&mut links, &mut out).unwrap();
        assert!(out.is_empty());
        for s in &socks {
            let mut b = [0u8; 1];
            assert_eq!(
                s.peek(&mut b).unwrap(),
                1,
                "the listener confirmed the socket"
            );
            assert_eq!(b[0], ACK);
        }
        drop(socks);
        // The accepted connection reaches the links, reset: dropped, and nothing waits for it.
        progress(&mut links, &mut out).unwrap();
        progress(&mut links, &mut out).unwrap();
        assert!(out.is_empty());
        assert!(links.accepted().is_empty());
        assert!(!links.busy());
    }

    #[test]
    fn handle_round_trips_and_rejects_garbage() {
        for addr in ["127.0.0.1:5000", "[::1]:6000", "[fe80::1%3]:7"] {
            let hd = HandleData {
                addr: addr.parse().unwrap(),
                threads: 2,
                socks_per_thread: 3,
                token: [7; 16],
            };
            assert_eq!(HandleData::decode(&hd.encode()).unwrap(), hd);
        }
        let e = HandleData::decode(&Handle([0; HANDLE_BYTES])).unwrap_err();
        assert!(e.msg.contains("bad magic"), "{e}");
        let hd = HandleData {
            addr: "127.0.0.1:1".parse().unwrap(),
            threads: 1,
            socks_per_thread: 1,
            token: [0; 16],
        };
        let mut h = hd.encode();
        h.0[4] = 9;
        assert!(HandleData::decode(&h)
            .unwrap_err()
            .msg
            .contains("different gpumpi versions"));
        let mut h = hd.encode();
        h.0[7] = 65;
        assert!(HandleData::decode(&h).unwrap_err().msg.contains("corrupt"));
    }
}
