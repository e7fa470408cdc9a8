//! The ibverbs backend of the network interface (`GPUMPI_NET=ib`; contract in
//! `transport::net`). InfiniBand and RoCE through libibverbs, loaded at run time
//! (`sys::ibverbs`); verified only against the test double `tests/support/fake_ibverbs.c`.
//!
//! - **Devices**: one per active port of the RDMA devices `GPUMPI_IB_HCA` selects (one rail per
//!   NIC port), with its link layer (InfiniBand: LID routing; Ethernet: RoCE, a GID chosen by
//!   `GPUMPI_IB_GID_INDEX`, [`select::choose_gid`]). A port named in `GPUMPI_IB_HCA` that is
//!   not active is an error; unnamed inactive ports are skipped.
//! - **Set-up** (out of band over TCP on the interface `GPUMPI_NET_IFNAME` selects, as NCCL's
//!   net_ib does): the listener sends a random challenge, the connector answers with its queue
//!   pairs, port, GID, settings and a MAC of the challenge under the job secret; the listener
//!   checks the MAC and the settings (queue pairs per connection, `GPUMPI_IB_MTU`, link
//!   layer), brings its queue pairs to RTR/RTS and answers with its own (or with an error that
//!   both ends report); the connector brings its queue pairs up and confirms with one byte.
//!   The TCP socket stays open as the liveness signal of the peer.
//! - **Data path** ([`comm`]): `GPUMPI_IB_QPS_PER_CONN` reliable-connected queue pairs per
//!   connection; RDMA write with immediate with receiver-posted credits (NCCL's net_ib
//!   pattern); completions are polled, never waited for.
//! - **Registration**: host memory with `ibv_reg_mr` (or `ibv_reg_mr_iova2` with relaxed
//!   ordering, `GPUMPI_IB_RELAXED_ORDERING`), device memory by dma-buf or peer memory
//!   ([`select::gdr_path`]), through a cache keyed by buffer identity ([`regcache`]).

pub mod comm;
pub mod regcache;
pub mod select;

use super::auth::{self, Key};
use super::ifname::{self, Family};
use super::{
    Connector, Handle, Listener, MemKind, Mr, Net, NetError, NetResult, Props, PtrSupport,
    RecvComm, SendComm, HANDLE_BYTES,
};
use crate::sys::ibverbs::{self as ibv, Context, Dest, MemRegion, Pd, Qp, RegKind, Verbs};
use crate::sys::socket as sock;
use regcache::RegCache;
use select::{GdrFacts, GdrPath, GidInfo, HcaSpec};
use std::io::{self, ErrorKind};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use comm::{MAX_QPS, MAX_RECVS, MAX_REQUESTS};

const HANDLE_MAGIC: &[u8; 4] = b"GMIB";
/// Wire version of handle and set-up messages.
const VERSION: u16 = 1;
const NONCE: usize = 16;
const HELLO: usize = 256;
const READY: u8 = 0x5a;

fn err(msg: impl Into<String>) -> NetError {
    NetError::new(msg)
}

/// Settings of the backend ([`IbConfig::from_env`] reads `GPUMPI_IB_*`).
#[derive(Clone, Debug)]
pub struct IbConfig {
    pub hca: Option<String>,
    pub gid_index: Option<i32>,
    /// `IBV_MTU_*`, 0 = unset.
    pub mtu: u32,
    pub qps: usize,
    pub relaxed_ordering: String,
    pub gdr: String,
    /// `GPUMPI_IB_GDR_FLUSH` ([`select::gdr_flush`]).
    pub gdr_flush: String,
    /// Interface and family of the out-of-band set-up socket.
    pub ifname: Option<String>,
    pub family: Family,
    pub connect_timeout: Duration,
    pub accept_timeout: Duration,
}

impl IbConfig {
    /// The settings of the configuration snapshot ([`crate::config::NetConfig`]).
    pub fn from_env() -> NetResult<IbConfig> {
        let c = &crate::config::snapshot().net;
        let gid_index = c.ib_gid_index.clone().map_err(err)?;
        let mtu = match &c.ib_mtu {
            None => 0,
            Some(m) => m
                .trim()
                .parse::<u32>()
                .ok()
                .and_then(select::mtu_enum)
                .ok_or_else(|| {
                    err(format!(
                        "ib: GPUMPI_IB_MTU={m}: expected 256, 512, 1024, 2048 or 4096"
                    ))
                })?,
        };
        let family = Family::parse(&c.family).ok_or_else(|| {
            err(format!(
                "GPUMPI_NET_FAMILY={}: expected 4, 6 or any",
                c.family
            ))
        })?;
        Ok(IbConfig {
            hca: c.ib_hca.clone(),
            gid_index,
            mtu,
            qps: c.ib_qps,
            relaxed_ordering: c.ib_relaxed_ordering.clone(),
            gdr: c.ib_gdr.clone(),
            gdr_flush: c.ib_gdr_flush.clone(),
            ifname: c.ifname.clone(),
            family,
            connect_timeout: c.connect_timeout,
            accept_timeout: c.accept_timeout,
        })
    }
}

/// One rail: an open device port with its protection domain and registration cache.
pub(crate) struct Port {
    pub ctx: Arc<Context>,
    pub pd: Arc<Pd>,
    pub port: u8,
    pub lid: u16,
    pub roce: bool,
    pub gid_index: i32,
    pub gid: [u8; 16],
    pub active_mtu: u32,
    pub relaxed: bool,
    pub gdr: GdrPath,
    /// Received device data is flushed before a receive completes ([`select::gdr_flush`]).
    pub flush: bool,
    pub cache: Mutex<RegCache<MemRegion>>,
}

impl Port {
    fn label(&self) -> String {
        format!("{}:{}", self.ctx.name(), self.port)
    }
}

/// The ibverbs backend.
pub struct IbNet {
    cfg: IbConfig,
    key: Key,
    ports: Vec<Arc<Port>>,
    props: Vec<Props>,
    /// The address the set-up sockets listen on.
    oob: IpAddr,
    oob_scope: u32,
}

const PORT_STATES: [&str; 6] = ["NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER"];

fn speed_mbps(a: &ibv::PortAttr) -> u32 {
    let lane = match a.active_speed {
        1 => 2_500,
        2 => 5_000,
        4 | 8 => 10_000,
        16 => 14_000,
        32 => 25_000,
        64 => 50_000,
        128 => 100_000,
        _ => 10_000,
    };
    let width = match a.active_width {
        1 => 1,
        2 => 4,
        4 => 8,
        8 => 12,
        16 => 2,
        _ => 1,
    };
    lane * width
}

impl IbNet {
    pub fn from_env(secret: &[u8]) -> NetResult<IbNet> {
        IbNet::new(IbConfig::from_env()?, secret)
    }

    pub fn new(cfg: IbConfig, secret: &[u8]) -> NetResult<IbNet> {
        if cfg.qps == 0 || cfg.qps > MAX_QPS {
            return Err(err(format!(
                "ib: GPUMPI_IB_QPS_PER_CONN={}: expected 1..={MAX_QPS}",
                cfg.qps
            )));
        }
        let v: &'static Verbs = ibv::verbs().map_err(|e| err(format!("ib: {e}")))?;
        let relaxed =
            select::relaxed_ordering(&cfg.relaxed_ordering, v.has_iova2()).map_err(err)?;
        let spec = HcaSpec::parse(cfg.hca.as_deref().unwrap_or("")).map_err(err)?;
        let names = v.device_names();
        if names.is_empty() {
            return Err(err(format!("ib: no RDMA device ({} lists none)", v.path())));
        }
        let facts = GdrFacts {
            ib_dmabuf: v.has_dmabuf(),
            cuda_dmabuf: crate::sys::cuda::dmabuf_supported() || host_as_device(),
            peermem: select::peermem_loaded(),
        };
        let (gdr, gdr_why) = select::gdr_path(&cfg.gdr, facts).map_err(err)?;
        let flush = select::gdr_flush(&cfg.gdr_flush, gdr, oldest_gpu()).map_err(err)?;
        let mut ports = Vec::new();
        let mut down = Vec::new();
        for name in &names {
            let Ok(ctx) = Context::open(v, name) else {
                continue;
            };
            let mut pd: Option<Arc<Pd>> = None;
            for port in 1..=2u8 {
                let Ok(a) = ctx.query_port(port) else { break };
                if !spec.selects(name, port) {
                    continue;
                }
                if a.state != ibv::PORT_ACTIVE {
                    down.push(format!(
                        "{name}:{port} is {}",
                        PORT_STATES.get(a.state as usize).unwrap_or(&"?")
                    ));
                    continue;
                }
                let roce = a.link_layer == ibv::LINK_LAYER_ETHERNET;
                let label = format!("{name}:{port}");
                let gids: Vec<GidInfo> = (0..a.gid_tbl_len.min(256))
                    .filter_map(|i| {
                        ctx.query_gid(port, i).map(|g| GidInfo {
                            index: i,
                            gid: g,
                            gid_type: ctx.gid_type(port, i),
                        })
                    })
                    .collect();
                let gid_index =
                    select::choose_gid(&label, roce, a.gid_tbl_len, &gids, cfg.gid_index)
                        .map_err(err)?;
                let gid = gids
                    .iter()
                    .find(|g| g.index == gid_index)
                    .map_or([0; 16], |g| g.gid);
                let pd = match &pd {
                    Some(p) => p.clone(),
                    None => {
                        let p = Pd::new(&ctx).map_err(|e| err(format!("ib: {e}")))?;
                        pd = Some(p.clone());
                        p
                    }
                };
                tracing::info!(port = %label, link = if roce { "RoCE" } else { "InfiniBand" },
                    gid_index, mtu = select::mtu_bytes(a.active_mtu), relaxed, gdr = %gdr_why,
                    gdr_flush = flush, "ib: rail");
                ports.push((
                    Arc::new(Port {
                        ctx: ctx.clone(),
                        pd,
                        port,
                        lid: a.lid,
                        roce,
                        gid_index,
                        gid,
                        active_mtu: a.active_mtu,
                        relaxed,
                        gdr,
                        flush,
                        cache: Mutex::new(RegCache::new(64)),
                    }),
                    speed_mbps(&a),
                ));
            }
        }
        if ports.is_empty() {
            let why = if down.is_empty() {
                format!(
                    "GPUMPI_IB_HCA={} selects none of the devices ({})",
                    cfg.hca.as_deref().unwrap_or(""),
                    names.join(", ")
                )
            } else {
                format!("port down: {}", down.join(", "))
            };
            return Err(err(format!("ib: no usable RDMA port ({why})")));
        }
        if spec.names_devices() && !down.is_empty() {
            return Err(err(format!(
                "ib: port down: {} (named in GPUMPI_IB_HCA)",
                down.join(", ")
            )));
        }
        let all = sock::interfaces().map_err(|e| err(format!("ib: getifaddrs: {e}")))?;
        let chosen = ifname::select(&all, cfg.ifname.as_deref(), cfg.family);
        let Some(oob) = chosen.first() else {
            return Err(err(format!(
                "ib: GPUMPI_NET_IFNAME={} selects no interface for connection set-up",
                cfg.ifname.as_deref().unwrap_or("")
            )));
        };
        let props = ports
            .iter()
            .map(|(p, speed)| Props {
                name: p.label(),
                addr: oob.addr.to_string(),
                speed_mbps: *speed,
                ptr_support: PtrSupport {
                    host: true,
                    cuda: gdr != GdrPath::Staging,
                    dmabuf: gdr == GdrPath::DmaBuf,
                },
                max_recvs: MAX_RECVS,
                max_requests: MAX_REQUESTS,
            })
            .collect();
        Ok(IbNet {
            oob: oob.addr,
            oob_scope: oob.scope_id,
            key: Key::from_secret(secret),
            ports: ports.into_iter().map(|(p, _)| p).collect(),
            props,
            cfg,
        })
    }

    fn port(&self, dev: usize) -> NetResult<&Arc<Port>> {
        self.ports.get(dev).ok_or_else(|| {
            err(format!(
                "ib: no device {dev} ({} devices)",
                self.ports.len()
            ))
        })
    }
}

/// The compute capability of the oldest GPU CUDA shows this process (`None`: no CUDA).
fn oldest_gpu() -> Option<(i32, i32)> {
    let (_, n) = crate::sys::cuda::load().ok()?;
    (0..n)
        .filter_map(|d| crate::sys::cuda::compute_capability(d).ok())
        .min()
}

static HOST_AS_DEVICE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Test hook: host memory registered as device memory (`MemKind::Cuda`) takes the dma-buf
/// path (`ibv_reg_dmabuf_mr` with a descriptor of `/dev/null` and the buffer's address as its
/// IOVA), so the GPUDirect data path and its flush run against the libibverbs test double on
/// a machine without a GPU. Set before the backend opens; never set by the library.
#[doc(hidden)]
pub fn host_memory_as_device_for_tests(on: bool) {
    HOST_AS_DEVICE.store(on, std::sync::atomic::Ordering::SeqCst);
}

fn host_as_device() -> bool {
    HOST_AS_DEVICE.load(std::sync::atomic::Ordering::SeqCst)
}

/// Registers `ptr..ptr+len` on `port` through its cache; the key is the `Mr` handed out.
pub(crate) fn reg(port: &Port, ptr: *const u8, len: usize, kind: MemKind) -> NetResult<Mr> {
    let addr = ptr as usize;
    let id = match kind {
        MemKind::Host => 0,
        MemKind::Cuda => {
            if port.gdr == GdrPath::Staging {
                return Err(err(format!(
                    "ib: {}: device memory cannot be registered (no GPUDirect RDMA path; the \
                     caller stages it through host memory)",
                    port.label()
                )));
            }
            if host_as_device() {
                1
            } else {
                crate::sys::cuda::pointer_buffer_id(addr).max(1)
            }
        }
    };
    // Refusals are remembered only for buffers CUDA names (a real buffer id: never reused).
    let named = kind == MemKind::Cuda && !host_as_device() && id > 1;
    let mut cache = port.cache.lock().unwrap();
    let (hit, stale) = cache.lookup(addr, len, id);
    drop(stale);
    if let Some(k) = hit {
        return Ok(Mr(k));
    }
    if named {
        if let Some(why) = cache.refusal(addr, len, id) {
            return Err(err(why.to_string()));
        }
    }
    let access = ibv::ACCESS_LOCAL_WRITE | ibv::ACCESS_REMOTE_WRITE | ibv::ACCESS_REMOTE_READ;
    let (how, access) = if port.relaxed {
        (RegKind::Iova2, access | ibv::ACCESS_RELAXED_ORDERING)
    } else {
        (RegKind::Plain, access)
    };
    let region = match (kind, port.gdr) {
        (MemKind::Cuda, GdrPath::DmaBuf) => {
            let page = 4096usize;
            let base = addr & !(page - 1);
            let span = (addr + len.max(1)).next_multiple_of(page) - base;
            let fd = if host_as_device() {
                std::fs::File::open("/dev/null")
                    .map(std::os::fd::OwnedFd::from)
                    .map_err(|e| e.to_string())
            } else {
                crate::sys::cuda::dmabuf_fd(base, span).map_err(|e| e.to_string())
            }
            .map_err(|e| {
                let why = format!("ib: {}: dma-buf export: {e}", port.label());
                if named {
                    cache.refuse(addr, len, id, why.clone());
                }
                err(why)
            })?;
            let r = MemRegion::register(
                &port.pd,
                addr as u64,
                len,
                access,
                RegKind::DmaBuf {
                    fd: fd.as_raw_fd(),
                    offset: (addr - base) as u64,
                },
            );
            drop(fd);
            r
        }
        _ => MemRegion::register(&port.pd, addr as u64, len, access, how),
    }
    .map_err(|e| {
        let ne = reg_error(port, len, &e);
        // Out of pinned memory or resources is not the buffer's fault: asked again next time.
        if named && e.errno != libc::ENOMEM && e.errno != libc::EAGAIN {
            cache.refuse(addr, len, id, ne.msg.clone());
        }
        ne
    })?;
    let (k, trimmed) = cache.insert(addr, len, id, region);
    drop(trimmed);
    Ok(Mr(k))
}

/// The message of a failed registration; `ENOMEM` names `RLIMIT_MEMLOCK` and how to raise it.
fn reg_error(port: &Port, len: usize, e: &ibv::RegError) -> NetError {
    if e.errno == libc::ENOMEM {
        let (soft, hard) = ibv::memlock_limit();
        let show = |v: Option<u64>| v.map_or("unlimited".to_string(), |b| format!("{b} bytes"));
        return err(format!(
            "ib: {}: {} of {len} bytes failed: {} (RLIMIT_MEMLOCK is {} soft, {} hard: the \
             pinned memory limit is too low. Raise it: `ulimit -l unlimited` in the shell that \
             starts the job, `* - memlock unlimited` in /etc/security/limits.conf, \
             LimitMEMLOCK=infinity for a systemd service (slurmd), `--ulimit memlock=-1` for \
             docker)",
            port.label(),
            e.call,
            e.msg,
            show(soft),
            show(hard)
        ));
    }
    err(format!(
        "ib: {}: {} of {len} bytes failed: {}",
        port.label(),
        e.call,
        e.msg
    ))
}

pub(crate) fn dereg(port: &Port, mr: Mr) -> NetResult<()> {
    let r = port.cache.lock().unwrap().release(mr.0);
    match r {
        Ok(region) => {
            drop(region);
            Ok(())
        }
        Err(regcache::UnknownKey) => Err(err(format!(
            "ib: {}: dereg_mr of an unknown region {}",
            port.label(),
            mr.0
        ))),
    }
}

/// Whether region `mr` is device memory (registered as `MemKind::Cuda`).
pub(crate) fn mr_is_device(port: &Port, mr: Mr) -> bool {
    port.cache
        .lock()
        .unwrap()
        .id_of(mr.0)
        .is_some_and(|id| id != 0)
}

/// The lkey/rkey and range of a registered region.
pub(crate) fn mr_keys(port: &Port, mr: Mr) -> Option<(u32, u32, u64, usize)> {
    let c = port.cache.lock().unwrap();
    c.get(mr.0).map(|m| (m.lkey, m.rkey, m.addr, m.len))
}

// ---------------------------------------------------------------------------------------------
// Handle and set-up messages.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct HandleData {
    addr: SocketAddr,
    token: [u8; 16],
}

impl HandleData {
    fn encode(&self) -> Handle {
        let mut h = [0u8; HANDLE_BYTES];
        h[0..4].copy_from_slice(HANDLE_MAGIC);
        h[4..6].copy_from_slice(&VERSION.to_le_bytes());
        super::put_addr(&mut h, self.addr);
        h[32..48].copy_from_slice(&self.token);
        Handle(h)
    }

    fn decode(h: &Handle) -> NetResult<HandleData> {
        let h = &h.0;
        if &h[0..4] != HANDLE_MAGIC {
            return Err(err(
                "ib: not an ibverbs connection handle (bad magic: the peer uses another \
                 GPUMPI_NET backend?)",
            ));
        }
        let v = u16::from_le_bytes([h[4], h[5]]);
        if v != VERSION {
            return Err(err(format!(
                "ib: connection handle of wire version {v}, this gpumpi speaks {VERSION}"
            )));
        }
        let addr = super::get_addr(h)
            .map_err(|f| err(format!("ib: connection handle with bad family {f}")))?;
        let port = addr.port();
        if port == 0 {
            return Err(err("ib: corrupt connection handle (port 0)"));
        }
        Ok(HandleData {
            addr,
            token: h[32..48].try_into().unwrap(),
        })
    }
}

/// What each end tells the other at set-up.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub(crate) struct PeerInfo {
    pub nqps: u8,
    pub mtu_setting: u8,
    pub active_mtu: u8,
    pub link_roce: bool,
    pub lid: u16,
    pub gid: [u8; 16],
    pub qpns: [u32; MAX_QPS],
    pub psn: u32,
    /// The region the peer writes into (the sender's credit FIFO, the receiver's size slots).
    pub buf_addr: u64,
    pub buf_rkey: u32,
    /// Path MTU the listener chose (in its answer).
    pub path_mtu: u8,
    pub label: String,
}

impl PeerInfo {
    fn encode(&self, out: &mut [u8]) {
        out[0] = self.nqps;
        out[1] = self.mtu_setting;
        out[2] = self.active_mtu;
        out[3] = self.link_roce as u8;
        out[4..6].copy_from_slice(&self.lid.to_le_bytes());
        out[6] = self.path_mtu;
        out[8..24].copy_from_slice(&self.gid);
        for (i, q) in self.qpns.iter().enumerate() {
            out[24 + 4 * i..28 + 4 * i].copy_from_slice(&q.to_le_bytes());
        }
        out[56..60].copy_from_slice(&self.psn.to_le_bytes());
        out[60..64].copy_from_slice(&self.buf_rkey.to_le_bytes());
        out[64..72].copy_from_slice(&self.buf_addr.to_le_bytes());
        let l = self.label.as_bytes();
        let n = l.len().min(63);
        out[72] = n as u8;
        out[73..73 + n].copy_from_slice(&l[..n]);
    }

    fn decode(b: &[u8]) -> PeerInfo {
        let mut qpns = [0u32; MAX_QPS];
        for (i, q) in qpns.iter_mut().enumerate() {
            *q = u32::from_le_bytes(b[24 + 4 * i..28 + 4 * i].try_into().unwrap());
        }
        let n = (b[72] as usize).min(63);
        PeerInfo {
            nqps: b[0],
            mtu_setting: b[1],
            active_mtu: b[2],
            link_roce: b[3] != 0,
            lid: u16::from_le_bytes([b[4], b[5]]),
            path_mtu: b[6],
            gid: b[8..24].try_into().unwrap(),
            qpns,
            psn: u32::from_le_bytes(b[56..60].try_into().unwrap()),
            buf_rkey: u32::from_le_bytes(b[60..64].try_into().unwrap()),
            buf_addr: u64::from_le_bytes(b[64..72].try_into().unwrap()),
            label: String::from_utf8_lossy(&b[73..73 + n]).into_owned(),
        }
    }
}

/// Body offset inside a 256-byte hello/answer: [magic 4][version 2][status 1][pad 1]
/// [mac 16][body 144][message or padding].
const BODY: usize = 24;
const BODY_LEN: usize = 144;
const MSG: usize = BODY + BODY_LEN;

fn hello_mac(key: &Key, token: &[u8; 16], nonce: &[u8; NONCE], body: &[u8]) -> [u8; 16] {
    key.mac(&[
        b"gpumpi-ib-hello",
        token,
        nonce,
        body,
        &VERSION.to_le_bytes(),
    ])
}

/// Checks the settings both ends must share; the error names both.
fn check_settings(mine: &PeerInfo, theirs: &PeerInfo, peer: &str) -> NetResult<u32> {
    if mine.nqps != theirs.nqps {
        return Err(err(format!(
            "ib: settings differ between nodes: GPUMPI_IB_QPS_PER_CONN is {} here ({}) and {} \
             at {peer} ({}); set the same value everywhere",
            mine.nqps, mine.label, theirs.nqps, theirs.label
        )));
    }
    if mine.link_roce != theirs.link_roce {
        let l = |r: bool| if r { "Ethernet (RoCE)" } else { "InfiniBand" };
        return Err(err(format!(
            "ib: link layers differ: {} is {} and {} at {peer} is {}; choose ports of one \
             fabric with GPUMPI_IB_HCA",
            mine.label,
            l(mine.link_roce),
            theirs.label,
            l(theirs.link_roce)
        )));
    }
    select::path_mtu(
        mine.active_mtu as u32,
        theirs.active_mtu as u32,
        mine.mtu_setting as u32,
        theirs.mtu_setting as u32,
        &format!("{peer} ({})", theirs.label),
    )
    .map_err(err)
}

/// Brings `qps` to RTR and RTS towards `peer`.
fn connect_qps(port: &Port, qps: &[Qp], peer: &PeerInfo, mtu: u32) -> NetResult<()> {
    for (i, qp) in qps.iter().enumerate() {
        let d = Dest {
            qpn: peer.qpns[i],
            psn: peer.psn,
            lid: peer.lid,
            gid: peer.gid,
            global: port.roce,
        };
        qp.to_rtr(port.port, &d, mtu, port.gid_index as u8)
            .map_err(|e| err(format!("ib: {e}")))?;
        qp.to_rts(peer.psn, 18, 7)
            .map_err(|e| err(format!("ib: {e}")))?;
    }
    Ok(())
}

fn would_block(e: &io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted)
}

/// A nonblocking exchange of fixed-size messages on one socket.
struct Io {
    buf: Vec<u8>,
    done: usize,
}

impl Io {
    fn new(n: usize) -> Io {
        Io {
            buf: vec![0; n],
            done: 0,
        }
    }
    fn of(b: Vec<u8>) -> Io {
        Io { buf: b, done: 0 }
    }
    /// Reads until full: `Ok(true)` when complete.
    fn read(&mut self, s: &TcpStream, peer: &str) -> NetResult<bool> {
        while self.done < self.buf.len() {
            match sock::recv_nb(s.as_raw_fd(), &mut self.buf[self.done..]) {
                Ok(0) => {
                    return Err(err(format!(
                        "ib: {peer} closed the connection during set-up: not a gpumpi ib \
                         listener for this handle, or it refused the authentication or the \
                         settings"
                    )))
                }
                Ok(n) => self.done += n,
                Err(e) if would_block(&e) => return Ok(false),
                Err(e) => return Err(err(format!("ib: set-up with {peer}: {e}"))),
            }
        }
        Ok(true)
    }
    fn write(&mut self, s: &TcpStream, peer: &str) -> NetResult<bool> {
        while self.done < self.buf.len() {
            match sock::send_nb(s.as_raw_fd(), &self.buf[self.done..]) {
                Ok(n) => self.done += n,
                Err(e) if would_block(&e) => return Ok(false),
                Err(e) => return Err(err(format!("ib: set-up with {peer}: {e}"))),
            }
        }
        Ok(true)
    }
}

impl Net for IbNet {
    fn name(&self) -> &'static str {
        "ib"
    }

    fn devices(&self) -> &[Props] {
        &self.props
    }

    /// Where the GPUDirect registration path is dma-buf or peer memory ([`select::gdr_path`]).
    fn device_memory(&self) -> bool {
        !self.ports.is_empty() && self.ports.iter().all(|p| p.gdr != GdrPath::Staging)
    }

    /// Registers the buffer as device memory on the port through its cache and releases it:
    /// a device region stays cached unused (keyed by the buffer's identity), so the bulk
    /// transfer's own registration of the same range or a part of it is a cache hit. A buffer
    /// the NIC cannot register (VMM memory without the GPUDirect RDMA flag: no dma-buf export;
    /// managed or pool memory) fails here, with the reason.
    fn device_registration(&self, dev: usize) -> Option<crate::transport::RegCheck> {
        let port = self.port(dev).ok()?.clone();
        Some(std::sync::Arc::new(move |addr, len| {
            let mr =
                reg(&port, addr as *const u8, len, MemKind::Cuda).map_err(|e| e.to_string())?;
            dereg(&port, mr).map_err(|e| e.to_string())
        }))
    }

    fn listen(&self, dev: usize) -> NetResult<(Handle, Box<dyn Listener>)> {
        let port = self.port(dev)?.clone();
        let bind = super::any_port(self.oob, self.oob_scope);
        let l = TcpListener::bind(bind).map_err(|e| err(format!("ib: listen on {bind}: {e}")))?;
        l.set_nonblocking(true)
            .map_err(|e| err(format!("ib: listen on {bind}: {e}")))?;
        let addr = l
            .local_addr()
            .map_err(|e| err(format!("ib: listen on {bind}: {e}")))?;
        let token = auth::random::<16>().map_err(|e| err(format!("ib: /dev/urandom: {e}")))?;
        let hd = HandleData { addr, token };
        Ok((
            hd.encode(),
            Box::new(IbListen {
                l,
                hd,
                key: self.key,
                port,
                cfg: self.cfg.clone(),
                pending: Vec::new(),
            }),
        ))
    }

    fn connect(&self, dev: usize, handle: &Handle) -> NetResult<Box<dyn Connector>> {
        let port = self.port(dev)?.clone();
        let hd = HandleData::decode(handle)?;
        let s = sock::connect_nonblocking(&hd.addr, None)
            .map_err(|e| err(format!("ib: connect to {}: {e}", hd.addr)))?;
        let now = Instant::now();
        Ok(Box::new(IbConnect {
            s: Some(s),
            hd,
            key: self.key,
            port,
            cfg: self.cfg.clone(),
            state: CState::Connecting,
            io: Io::new(NONCE),
            side: None,
            connect_deadline: now + self.cfg.connect_timeout,
            deadline: now + self.cfg.connect_timeout + self.cfg.accept_timeout,
        }))
    }
}

fn my_info(port: &Port, cfg: &IbConfig, side: &comm::Side) -> PeerInfo {
    let mut qpns = [0u32; MAX_QPS];
    for (i, q) in side.qps.iter().enumerate() {
        qpns[i] = q.qpn;
    }
    let (buf_addr, buf_rkey) = side.exposed();
    PeerInfo {
        nqps: cfg.qps as u8,
        mtu_setting: cfg.mtu as u8,
        active_mtu: port.active_mtu as u8,
        link_roce: port.roce,
        lid: port.lid,
        gid: port.gid,
        qpns,
        psn: side.psn,
        buf_addr,
        buf_rkey,
        path_mtu: 0,
        label: format!("{}@{}", port.label(), hostname()),
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum CState {
    Connecting,
    ReadNonce,
    WriteHello,
    ReadAnswer,
    WriteReady,
}

struct IbConnect {
    s: Option<TcpStream>,
    hd: HandleData,
    key: Key,
    port: Arc<Port>,
    cfg: IbConfig,
    state: CState,
    io: Io,
    side: Option<comm::Side>,
    connect_deadline: Instant,
    deadline: Instant,
}

impl Connector for IbConnect {
    fn poll(&mut self) -> NetResult<Option<Box<dyn SendComm>>> {
        let peer = self.hd.addr.to_string();
        let Some(s) = self.s.as_ref() else {
            return Err(err(format!("ib: connection to {peer} already failed")));
        };
        loop {
            match self.state {
                CState::Connecting => {
                    let mut p = [sock::PollFd {
                        fd: s.as_raw_fd(),
                        events: sock::POLLOUT,
                        revents: 0,
                    }];
                    sock::poll(&mut p, 0).map_err(|e| err(format!("ib: poll: {e}")))?;
                    if p[0].revents == 0 {
                        if Instant::now() > self.connect_deadline {
                            return Err(err(format!(
                                "ib: connect to {peer}: no answer within {:?}",
                                self.cfg.connect_timeout
                            )));
                        }
                        return Ok(None);
                    }
                    if let Ok(Some(e)) | Err(e) = s.take_error() {
                        return Err(err(format!("ib: connect to {peer}: {e}")));
                    }
                    let _ = s.set_nodelay(true);
                    self.state = CState::ReadNonce;
                    self.io = Io::new(NONCE);
                }
                CState::ReadNonce => {
                    if !self.io.read(s, &peer)? {
                        break;
                    }
                    let nonce: [u8; NONCE] = self.io.buf[..].try_into().unwrap();
                    let side = comm::Side::new(&self.port, self.cfg.qps, comm::Role::Send)?;
                    let info = my_info(&self.port, &self.cfg, &side);
                    let mut h = vec![0u8; HELLO];
                    h[0..4].copy_from_slice(HANDLE_MAGIC);
                    h[4..6].copy_from_slice(&VERSION.to_le_bytes());
                    info.encode(&mut h[BODY..BODY + BODY_LEN]);
                    let mac =
                        hello_mac(&self.key, &self.hd.token, &nonce, &h[BODY..BODY + BODY_LEN]);
                    h[8..24].copy_from_slice(&mac);
                    self.side = Some(side);
                    self.io = Io::of(h);
                    self.state = CState::WriteHello;
                }
                CState::WriteHello => {
                    if !self.io.write(s, &peer)? {
                        break;
                    }
                    self.io = Io::new(HELLO);
                    self.state = CState::ReadAnswer;
                }
                CState::ReadAnswer => {
                    if !self.io.read(s, &peer)? {
                        break;
                    }
                    let a = std::mem::take(&mut self.io.buf);
                    if &a[0..4] != HANDLE_MAGIC {
                        return Err(err(format!("ib: {peer} answered garbage during set-up")));
                    }
                    if a[6] != 0 {
                        let m = String::from_utf8_lossy(&a[MSG..])
                            .trim_end_matches('\0')
                            .to_string();
                        self.s = None;
                        return Err(err(format!("ib: {peer} refused the connection: {m}")));
                    }
                    let theirs = PeerInfo::decode(&a[BODY..BODY + BODY_LEN]);
                    let side = self.side.as_mut().unwrap();
                    let mine = my_info(&self.port, &self.cfg, side);
                    let mtu = check_settings(&mine, &theirs, &peer)?;
                    connect_qps(&self.port, &side.qps, &theirs, mtu)?;
                    side.set_remote(theirs.buf_addr, theirs.buf_rkey);
                    self.io = Io::of(vec![READY]);
                    self.state = CState::WriteReady;
                }
                CState::WriteReady => {
                    if !self.io.write(s, &peer)? {
                        break;
                    }
                    let s = self.s.take().unwrap();
                    let side = self.side.take().unwrap();
                    return Ok(Some(Box::new(comm::IbSend::new(
                        side,
                        self.port.clone(),
                        s,
                        peer,
                    ))));
                }
            }
        }
        if Instant::now() > self.deadline {
            return Err(err(format!(
                "ib: {peer} did not complete the gpumpi set-up within {:?}",
                self.cfg.connect_timeout + self.cfg.accept_timeout
            )));
        }
        Ok(None)
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum LState {
    WriteNonce,
    ReadHello,
    WriteAnswer,
    ReadReady,
}

struct PendingConn {
    s: TcpStream,
    peer: String,
    state: LState,
    nonce: [u8; NONCE],
    io: Io,
    side: Option<comm::Side>,
    /// The answer is a refusal: fail once it is written.
    refusal: Option<NetError>,
    since: Instant,
}

struct IbListen {
    l: TcpListener,
    hd: HandleData,
    key: Key,
    port: Arc<Port>,
    cfg: IbConfig,
    pending: Vec<PendingConn>,
}

/// Outcome of one step of a pending connection.
enum Step {
    Wait,
    Drop,
    Done(Box<dyn RecvComm>),
}

impl IbListen {
    fn step(&self, p: &mut PendingConn) -> NetResult<Step> {
        loop {
            match p.state {
                LState::WriteNonce => {
                    if !p.io.write(&p.s, &p.peer)? {
                        return Ok(Step::Wait);
                    }
                    p.io = Io::new(HELLO);
                    p.state = LState::ReadHello;
                }
                LState::ReadHello => {
                    if !p.io.read(&p.s, &p.peer)? {
                        return Ok(Step::Wait);
                    }
                    let h = std::mem::take(&mut p.io.buf);
                    let body = &h[BODY..BODY + BODY_LEN];
                    let mac = hello_mac(&self.key, &self.hd.token, &p.nonce, body);
                    if &h[0..4] != HANDLE_MAGIC || !auth::ct_eq(&mac, &h[8..24]) {
                        // A stray or mistaken connection: closed alone.
                        return Ok(Step::Drop);
                    }
                    let theirs = PeerInfo::decode(body);
                    let mut a = vec![0u8; HELLO];
                    a[0..4].copy_from_slice(HANDLE_MAGIC);
                    a[4..6].copy_from_slice(&VERSION.to_le_bytes());
                    // Any failure from here on is answered to the peer, so that both ends
                    // report it.
                    let set_up = comm::Side::new(&self.port, self.cfg.qps, comm::Role::Recv)
                        .and_then(|side| {
                            let mine = my_info(&self.port, &self.cfg, &side);
                            let mtu = check_settings(&mine, &theirs, &p.peer)?;
                            connect_qps(&self.port, &side.qps, &theirs, mtu)?;
                            Ok((side, mine, mtu))
                        });
                    match set_up {
                        Ok((mut side, mut mine, mtu)) => {
                            mine.path_mtu = mtu as u8;
                            mine.encode(&mut a[BODY..BODY + BODY_LEN]);
                            side.set_remote(theirs.buf_addr, theirs.buf_rkey);
                            p.side = Some(side);
                        }
                        Err(e) => {
                            a[6] = 1;
                            let m = e.msg.as_bytes();
                            let n = m.len().min(HELLO - MSG);
                            a[MSG..MSG + n].copy_from_slice(&m[..n]);
                            p.refusal = Some(e);
                        }
                    }
                    p.io = Io::of(a);
                    p.state = LState::WriteAnswer;
                }
                LState::WriteAnswer => {
                    if !p.io.write(&p.s, &p.peer)? {
                        return Ok(Step::Wait);
                    }
                    if let Some(e) = p.refusal.take() {
                        return Err(e);
                    }
                    p.io = Io::new(1);
                    p.state = LState::ReadReady;
                }
                LState::ReadReady => {
                    if !p.io.read(&p.s, &p.peer)? {
                        return Ok(Step::Wait);
                    }
                    if p.io.buf[0] != READY {
                        return Ok(Step::Drop);
                    }
                    let s = p.s.try_clone().map_err(|e| err(format!("ib: {e}")))?;
                    let side = p.side.take().unwrap();
                    return Ok(Step::Done(Box::new(comm::IbRecv::new(
                        side,
                        self.port.clone(),
                        s,
                        p.peer.clone(),
                    )?)));
                }
            }
        }
    }
}

/// Most connections being set up at once on one listener.
const MAX_PENDING: usize = 64;

impl Listener for IbListen {
    fn accept(&mut self) -> NetResult<Option<Box<dyn RecvComm>>> {
        loop {
            match self.l.accept() {
                Ok((s, addr)) => {
                    if s.set_nonblocking(true).is_err() {
                        continue;
                    }
                    let _ = s.set_nodelay(true);
                    let nonce = auth::random::<NONCE>()
                        .map_err(|e| err(format!("ib: /dev/urandom: {e}")))?;
                    if self.pending.len() >= MAX_PENDING {
                        self.pending.remove(0);
                    }
                    self.pending.push(PendingConn {
                        s,
                        peer: addr.to_string(),
                        state: LState::WriteNonce,
                        nonce,
                        io: Io::of(nonce.to_vec()),
                        side: None,
                        refusal: None,
                        since: Instant::now(),
                    });
                }
                Err(e) if would_block(&e) => break,
                Err(e) => return Err(err(format!("ib: accept on {}: {e}", self.hd.addr))),
            }
        }
        let mut i = 0;
        while i < self.pending.len() {
            let mut p = self.pending.swap_remove(i);
            let r = self.step(&mut p);
            match r {
                Ok(Step::Wait) if p.since.elapsed() < self.cfg.accept_timeout => {
                    self.pending.push(p);
                    let last = self.pending.len() - 1;
                    self.pending.swap(i, last);
                    i += 1;
                }
                Ok(Step::Wait) | Ok(Step::Drop) => {}
                Ok(Step::Done(c)) => return Ok(Some(c)),
                // An authenticated peer this end refused (settings, MTU, resources): the
                // refusal was sent; the job cannot go on.
                Err(e) if p.state == LState::WriteAnswer => return Err(e),
                // A connection that broke before authenticating, or a peer that went away:
                // closed alone, the listener goes on.
                Err(_) => {}
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handle_and_peer_info_round_trip() {
        let hd = HandleData {
            addr: "127.0.0.1:4242".parse().unwrap(),
            token: [7; 16],
        };
        assert_eq!(HandleData::decode(&hd.encode()).unwrap(), hd);
        assert!(HandleData::decode(&Handle([0; HANDLE_BYTES]))
            .unwrap_err()
            .msg
            .contains("not an ibverbs connection handle"));
        let mut qpns = [0; MAX_QPS];
        qpns[..3].copy_from_slice(&[0x101, 0x102, 0x103]);
        let p = PeerInfo {
            nqps: 3,
            mtu_setting: 4,
            active_mtu: 5,
            link_roce: true,
            lid: 9,
            gid: [3; 16],
            qpns,
            psn: 77,
            buf_addr: 0x0dea_dbee_f000,
            buf_rkey: 0x1234,
            path_mtu: 4,
            label: "mlx5_0:1@node-a".into(),
        };
        let mut b = [0u8; BODY_LEN];
        p.encode(&mut b);
        assert_eq!(PeerInfo::decode(&b), p);
    }

    #[test]
    fn mismatched_settings_name_both_ends() {
        let a = PeerInfo {
            nqps: 2,
            active_mtu: 5,
            label: "a:1@x".into(),
            ..Default::default()
        };
        let b = PeerInfo {
            nqps: 4,
            label: "b:1@y".into(),
            ..a.clone()
        };
        let e = check_settings(&a, &b, "10.0.0.2:5").unwrap_err();
        assert!(
            e.msg.contains("GPUMPI_IB_QPS_PER_CONN is 2 here") && e.msg.contains("4 at 10.0.0.2:5"),
            "{e}"
        );
        let c = PeerInfo {
            link_roce: true,
            ..a.clone()
        };
        assert!(check_settings(&a, &c, "p")
            .unwrap_err()
            .msg
            .contains("link layers differ"));
        let d = PeerInfo {
            active_mtu: 3,
            ..a.clone()
        };
        assert_eq!(check_settings(&a, &d, "p"), Ok(3));
    }
}
