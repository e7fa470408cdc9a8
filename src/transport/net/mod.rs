//! The network transport interface: how bytes move between ranks on different nodes.
//!
//! The contract mirrors the semantics of NCCL's net plugins (`ncclNet_v8`/`v9`), so that TCP
//! ([`tcp`]), ibverbs and external plugins are backends of one interface, chosen at run time by
//! `GPUMPI_NET` ([`open`]; ibverbs is [`ib`]):
//! - A backend lists **devices** (one per usable interface) with their [`Props`]: name, speed,
//!   which memory it can send from ([`PtrSupport`]), how many receives may be grouped.
//! - **Connection set-up** is one-way and nonblocking. The receiving side calls
//!   [`Net::listen`] and gets an opaque [`Handle`] (at most [`HANDLE_BYTES`] bytes) that the
//!   engine exchanges through the bootstrap; the sending side calls [`Net::connect`] with it.
//!   [`Listener::accept`] and [`Connector::poll`] return `Ok(None)` ("not yet") until the
//!   connection is established, so one thread can set up many connections at once. The result
//!   is a [`SendComm`] on one side and a [`RecvComm`] on the other; a bidirectional pair of
//!   ranks holds one of each. Set-up is authenticated with the job secret given to [`open`]: a
//!   stray connection to a listening port cannot become a comm.
//! - **Memory registration** ([`SendComm::reg_mr`], [`RecvComm::reg_mr`]): every buffer passed
//!   to `isend`/`irecv` lies inside a registered region. TCP registers host memory only; a
//!   backend that registers device memory says so ([`Net::device_memory`]).
//! - **Tagged operations**: [`SendComm::isend`] posts one message with a tag;
//!   [`RecvComm::irecv`] posts a *group* of up to [`Props::max_recvs`] receives, each with its
//!   own buffer, capacity and tag. Messages of one comm are matched in order: each message
//!   goes to the oldest posted group that still has an unmatched receive, to the receive of
//!   that group with the same tag. A message larger than its receive is an error
//!   (truncation), as is a tag that the group does not hold. Both calls return `Ok(None)` when
//!   the request cannot be posted yet: all request slots are busy, or (a backend with
//!   receiver-posted credits, as ibverbs and NCCL's net_ib) the receiver has not posted the
//!   receive for this message yet. The caller tests older requests, lets its own receives
//!   progress, and retries: the data path allocates nothing.
//! - **test**: [`SendComm::test`] / [`RecvComm::test`] return `Ok(None)` while a request is in
//!   flight, then its size(s) once; a send is complete when its buffer may be reused.
//! - **Both directions on one connection** (optional, [`SendComm::reverse`],
//!   [`RecvComm::reverse`]): a backend may carry messages the other way on a connection, so
//!   that a pair of ranks that talk both ways holds one connection (replies then carry the
//!   transport's acknowledgements: on TCP a pure ACK segment per message fewer each way).
//!   Each end takes the other direction from its own comm: the accepting side's
//!   `RecvComm::reverse` gives a `SendComm`, the dialing side's `SendComm::reverse` the
//!   `RecvComm` that receives from it. The caller decides whether it uses the other direction
//!   (dropping an unused reverse `SendComm` closes it, and the peer's receive on it fails);
//!   the comms of one connection close independently.
//! - **Close** is `Drop` of a comm or listener. Errors ([`NetError`]) name the peer's address;
//!   a peer that closes mid-message is an error, never a hang.
//!
//! Who drives progress: the calling thread, through `isend`/`irecv`/`test`, plus whatever the
//! backend documents (TCP starts helper threads per comm that move the data; see [`tcp`]).

pub mod auth;
pub mod frames;
pub mod ib;
pub mod ifname;
#[cfg(test)]
pub(crate) mod lazy_tests;
pub mod links;
pub mod tcp;

use std::fmt;

/// Most bytes of a [`Handle`] (as `NCCL_NET_HANDLE_MAXSIZE`).
pub const HANDLE_BYTES: usize = 128;

/// Tag of messages that carry bulk data (large payloads moved once, straight between user
/// buffers): a backend may move them differently from other messages (TCP stripes them over
/// its data sockets where it sends smaller messages on the control socket). Both ends see the
/// tag, so a choice made by it is the same at both.
pub const TAG_BULK: i32 = 2;

/// The opaque connection handle [`Net::listen`] returns, exchanged through the bootstrap.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Handle(pub [u8; HANDLE_BYTES]);

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The handle carries an authentication token: never print it whole.
        write!(f, "Handle({:02x?}..)", &self.0[..8])
    }
}

/// Writes a socket address into a handle the way the socket-based set-up of every backend
/// does: byte 6 the family (4 or 6), bytes 10..12 the port, 12..28 the address, 28..32 the IPv6
/// scope id.
pub(crate) fn put_addr(h: &mut [u8; HANDLE_BYTES], addr: std::net::SocketAddr) {
    use std::net::SocketAddr;
    h[10..12].copy_from_slice(&addr.port().to_le_bytes());
    match addr {
        SocketAddr::V4(a) => {
            h[6] = 4;
            h[12..16].copy_from_slice(&a.ip().octets());
        }
        SocketAddr::V6(a) => {
            h[6] = 6;
            h[12..28].copy_from_slice(&a.ip().octets());
            h[28..32].copy_from_slice(&a.scope_id().to_le_bytes());
        }
    }
}

/// The socket address [`put_addr`] wrote; `Err(family)` for an unknown family byte.
pub(crate) fn get_addr(h: &[u8; HANDLE_BYTES]) -> Result<std::net::SocketAddr, u8> {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6};
    let port = u16::from_le_bytes([h[10], h[11]]);
    match h[6] {
        4 => Ok(SocketAddr::new(
            IpAddr::V4(Ipv4Addr::new(h[12], h[13], h[14], h[15])),
            port,
        )),
        6 => {
            let ip: [u8; 16] = h[12..28].try_into().unwrap();
            let scope = u32::from_le_bytes(h[28..32].try_into().unwrap());
            Ok(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(ip),
                port,
                0,
                scope,
            )))
        }
        f => Err(f),
    }
}

/// Which memory a device can send from and receive into.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct PtrSupport {
    pub host: bool,
    pub cuda: bool,
    pub dmabuf: bool,
}

/// Properties of one device ([`Net::devices`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Props {
    /// Interface name (`eth0`, `mlx5_0`).
    pub name: String,
    /// The address the device listens on, as text.
    pub addr: String,
    /// Link speed in Mbit/s (the backend's guess where the system does not say).
    pub speed_mbps: u32,
    pub ptr_support: PtrSupport,
    /// Most receives one [`RecvComm::irecv`] may group.
    pub max_recvs: usize,
    /// Most requests in flight per comm ([`SendComm::isend`] / [`RecvComm::irecv`] return
    /// `Ok(None)` beyond it).
    pub max_requests: usize,
}

/// Memory kind of a region passed to `reg_mr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemKind {
    Host,
    Cuda,
}

/// A registered memory region (opaque to the caller).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mr(pub u64);

/// A request in flight on one comm: a slot and its generation (a stale id is an error).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    pub slot: u32,
    pub gen: u32,
}

/// One receive of a group posted with [`RecvComm::irecv`].
#[derive(Clone, Copy, Debug)]
pub struct RecvBuf {
    pub ptr: *mut u8,
    /// Capacity in bytes; a larger message is a truncation error.
    pub size: usize,
    pub tag: i32,
    pub mr: Mr,
}

/// An error of the network layer; the message names the operation and the peer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetError {
    pub msg: String,
}

impl NetError {
    pub fn new(msg: impl Into<String>) -> Self {
        NetError { msg: msg.into() }
    }
}

impl fmt::Display for NetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.msg)
    }
}

impl std::error::Error for NetError {}

pub type NetResult<T> = Result<T, NetError>;

/// A network backend: its devices and connection set-up.
pub trait Net: Send + Sync {
    /// Backend name (`tcp`, `ib`), as `GPUMPI_NET` spells it.
    fn name(&self) -> &'static str;
    /// The usable devices, in preference order.
    fn devices(&self) -> &[Props];
    /// Starts listening on device `dev`; the handle goes to the peer that will connect.
    fn listen(&self, dev: usize) -> NetResult<(Handle, Box<dyn Listener>)>;
    /// Starts connecting from device `dev` to the listener that produced `handle`.
    fn connect(&self, dev: usize, handle: &Handle) -> NetResult<Box<dyn Connector>>;
    /// Whether every device's comms register device memory ([`MemKind::Cuda`]) so that the
    /// NIC reads and writes it directly (GPUDirect RDMA): the engine then moves device
    /// buffers between nodes without staging them in host memory (`frames::gdr_choice`).
    /// Default: no.
    fn device_memory(&self) -> bool {
        false
    }
    /// The check whether one device buffer registers on device `dev`
    /// ([`crate::transport::Transport::device_registration`]); `None`: no check. Default: none
    /// (a backend without [`Net::device_memory`] is never asked to register device memory).
    fn device_registration(&self, _dev: usize) -> Option<crate::transport::RegCheck> {
        None
    }
    /// Tells the backend how much CPU the ranks of the job have: the fewest thousandths of a
    /// CPU any rank has to itself (`coll::pieces::milli_cpus`), before any connection opens.
    /// A backend that moves data with helper threads uses them only where they get CPUs of
    /// their own. Default: ignored.
    fn set_rank_cpus(&mut self, _least_milli: usize) {}
}

/// The receiving end of connection set-up.
pub trait Listener: Send {
    /// One established, authenticated connection, or `Ok(None)` if none is ready yet.
    /// May be called again for more connections to the same handle.
    fn accept(&mut self) -> NetResult<Option<Box<dyn RecvComm>>>;
}

/// The sending end of connection set-up.
pub trait Connector: Send {
    /// The established connection, or `Ok(None)` while set-up goes on. Set-up that does not
    /// finish in the backend's time limit is an error naming the address.
    fn poll(&mut self) -> NetResult<Option<Box<dyn SendComm>>>;
}

/// What a waiting thread can sleep on until a comm may make progress ([`SendComm::wait_on`],
/// [`RecvComm::wait_on`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitOn {
    /// Nothing in flight: the comm does not move until the caller posts more.
    Idle,
    /// The comm moves once this descriptor is ready for these `poll` events (its requests
    /// progress only in the caller's `isend`/`irecv`/`test`).
    Fd(std::os::fd::RawFd, i16),
    /// Progress comes from elsewhere too (helper threads, a completion queue): only polling
    /// the comm's requests sees it.
    Polled,
}

/// Appends the descriptors of `waits` to `out` (a wait that sleeps in `poll` on them); `false`
/// when one of them progresses on no descriptor ([`WaitOn::Polled`]).
pub(crate) fn wait_fds(
    waits: impl IntoIterator<Item = WaitOn>,
    out: &mut Vec<crate::sys::socket::PollFd>,
) -> bool {
    for w in waits {
        match w {
            WaitOn::Idle => {}
            WaitOn::Fd(fd, events) => out.push(crate::sys::socket::PollFd {
                fd,
                events,
                revents: 0,
            }),
            WaitOn::Polled => return false,
        }
    }
    true
}

/// The sending side of one connection.
pub trait SendComm: Send {
    fn reg_mr(&mut self, ptr: *const u8, len: usize, kind: MemKind) -> NetResult<Mr>;
    fn dereg_mr(&mut self, mr: Mr) -> NetResult<()>;
    /// Posts one message; `Ok(None)` when it cannot be posted yet (every request slot busy, or
    /// no receive posted by the peer for it on a credit-based backend): retry later.
    ///
    /// # Safety
    /// `data..data+size` must be readable, lie in `mr`, and stay unchanged until
    /// [`SendComm::test`] reports the request complete (or the comm is dropped).
    unsafe fn isend(
        &mut self,
        data: *const u8,
        size: usize,
        tag: i32,
        mr: Mr,
    ) -> NetResult<Option<Request>>;
    /// `Ok(Some(size))` once the request is complete (its slot is then free), `Ok(None)` before.
    fn test(&mut self, req: Request) -> NetResult<Option<usize>>;
    /// The peer's address, as errors name it.
    fn peer(&self) -> String;
    /// What a waiting thread can sleep on until this comm may progress. Default:
    /// [`WaitOn::Polled`].
    fn wait_on(&self) -> WaitOn {
        WaitOn::Polled
    }
    /// The receiving end of this connection's other direction, where the backend can carry
    /// messages both ways on one connection (see the module documentation); `Ok(None)` where
    /// it cannot, for a comm that is itself the other direction of one, and after the first
    /// call. Default: `Ok(None)`.
    fn reverse(&mut self) -> NetResult<Option<Box<dyn RecvComm>>> {
        Ok(None)
    }
}

/// The receiving side of one connection.
pub trait RecvComm: Send {
    fn reg_mr(&mut self, ptr: *const u8, len: usize, kind: MemKind) -> NetResult<Mr>;
    fn dereg_mr(&mut self, mr: Mr) -> NetResult<()>;
    /// Posts a group of receives; `Ok(None)` when every request slot is busy.
    ///
    /// # Safety
    /// Each `ptr..ptr+size` must be writable, lie in its `mr`, and not be accessed by anyone
    /// else until [`RecvComm::test`] reports the group complete (or the comm is dropped).
    unsafe fn irecv(&mut self, bufs: &[RecvBuf]) -> NetResult<Option<Request>>;
    /// `Ok(true)` once every receive of the group is complete, with the received sizes written
    /// to `sizes` (one per receive of the group); `Ok(false)` before.
    fn test(&mut self, req: Request, sizes: &mut [usize]) -> NetResult<bool>;
    /// The peer's address, as errors name it.
    fn peer(&self) -> String;
    /// What a waiting thread can sleep on until this comm may progress (a message arriving).
    /// Default: [`WaitOn::Polled`].
    fn wait_on(&self) -> WaitOn {
        WaitOn::Polled
    }
    /// The sending end of this connection's other direction, as [`SendComm::reverse`].
    /// Dropping it unused closes that direction: the peer's receive on it fails (so a peer
    /// that waits for a message there learns that none comes). Default: `Ok(None)`.
    fn reverse(&mut self) -> NetResult<Option<Box<dyn SendComm>>> {
        Ok(None)
    }
}

/// The backends in automatic-selection order: the first that opens and has a device wins.
const BACKENDS: &[(&str, OpenFn)] = &[
    ("ib", |secret| Ok(Box::new(ib::IbNet::from_env(secret)?))),
    ("tcp", |secret| Ok(Box::new(tcp::TcpNet::from_env(secret)?))),
];

/// Opens one backend with the job secret.
type OpenFn = fn(&[u8]) -> NetResult<Box<dyn Net>>;

/// Opens the backend `GPUMPI_NET` names (unset: the first of [`BACKENDS`] that opens with at
/// least one device). `secret` is the job's shared secret: connection set-up proves
/// knowledge of it.
pub fn open(secret: &[u8]) -> NetResult<Box<dyn Net>> {
    open_named(crate::config::snapshot().net.backend.as_deref(), secret)
}

fn open_named(want: Option<&str>, secret: &[u8]) -> NetResult<Box<dyn Net>> {
    if let Some(w) = want
        .map(str::trim)
        .filter(|w| !w.is_empty() && *w != "auto")
    {
        let Some((_, ctor)) = BACKENDS.iter().find(|(n, _)| n.eq_ignore_ascii_case(w)) else {
            let names: Vec<_> = BACKENDS.iter().map(|(n, _)| *n).collect();
            return Err(NetError::new(format!(
                "GPUMPI_NET={w}: unknown network backend (known: {})",
                names.join(", ")
            )));
        };
        let net = ctor(secret)?;
        tracing::info!(backend = net.name(), devices = ?net.devices(), "network backend (GPUMPI_NET)");
        return Ok(net);
    }
    let mut why = Vec::new();
    for (name, ctor) in BACKENDS {
        match ctor(secret) {
            Ok(net) if !net.devices().is_empty() => {
                tracing::info!(backend = net.name(), devices = ?net.devices(), "network backend");
                return Ok(net);
            }
            Ok(_) => why.push(format!("{name}: no device")),
            Err(e) => why.push(format!("{name}: {e}")),
        }
    }
    Err(NetError::new(format!(
        "no network backend available ({})",
        why.join("; ")
    )))
}

/// The address `ip` with any port (scope `scope` for IPv6 link-local addresses): what a backend
/// binds its listening or outgoing sockets to.
pub(crate) fn any_port(ip: std::net::IpAddr, scope: u32) -> std::net::SocketAddr {
    match ip {
        std::net::IpAddr::V4(a) => std::net::SocketAddr::new(std::net::IpAddr::V4(a), 0),
        std::net::IpAddr::V6(a) => {
            std::net::SocketAddr::V6(std::net::SocketAddrV6::new(a, 0, 0, scope))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_backend_is_an_error_naming_the_known_ones() {
        let e = open_named(Some("carrier-pigeon"), b"s").err().unwrap();
        assert!(
            e.msg.contains("GPUMPI_NET=carrier-pigeon") && e.msg.contains("tcp"),
            "{e}"
        );
    }

    #[test]
    fn tcp_opens_by_name() {
        // Any machine running the tests has at least loopback; the default filter falls back
        // to it when nothing else exists.
        let net = open_named(Some("TCP"), b"s").unwrap();
        assert_eq!(net.name(), "tcp");
        assert!(!net.devices().is_empty());
        assert!(net.devices()[0].ptr_support.host && !net.devices()[0].ptr_support.cuda);
    }
}
