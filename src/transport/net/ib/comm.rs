//! The data path of the ibverbs backend: RDMA write with immediate into receiver-posted
//! buffers (NCCL's net_ib pattern).
//!
//! - **Credits**: the receiver posts a group of receives by RDMA-writing one FIFO entry per
//!   receive (address, rkey, capacity, tag, sequence number) into the sender's FIFO slot
//!   `seq % MAX_REQUESTS`. The sender reads its FIFO (volatile loads of memory the NIC writes);
//!   `isend` answers `Ok(None)` until the entry of the next group has arrived, so no data moves
//!   without a posted receive.
//! - **Data**: the sender writes the message size into the receiver's size slot of that
//!   receive (on queue pair 0), then the payload as RDMA writes with immediate, striped over
//!   the connection's queue pairs (pieces of at least [`MIN_STRIPE`] bytes, at most 1 GiB);
//!   the immediate names the slot, the receive of the group and whether it is the first piece.
//!   On one queue pair writes land in order, so when the first piece's completion arrives the
//!   size is in place; the receiver computes the number of pieces from the size and counts
//!   completions. Every receive work request is re-posted as soon as it completes.
//! - **GPUDirect flush**: where the port flushes ([`super::select::gdr_flush`], before
//!   Hopper), a completed group with a receive in device memory completes only after an RDMA
//!   read of one byte of that buffer on a queue pair connected to itself (NCCL's GDR flush):
//!   the read is ordered after the NIC's writes into the buffer, so once it is done the GPU
//!   sees every byte.
//! - **Errors**: a truncated message (the sender writes the size and an empty first piece), a
//!   tag the group lacks (a marker instead of the size), any completion with an error status
//!   (remote access, retry exceeded, flush) and a completion queue overrun fail the connection
//!   with a message naming the peer; a peer whose set-up socket closed (it died or dropped its
//!   comm) is noticed by a nonblocking read every [`LIVENESS_EVERY`] calls that find no
//!   completion. Completions are polled: nothing sleeps or blocks.

use super::{mr_keys, Port};
use crate::sys::ibverbs::{
    self as ibv, Cq, MemRegion, NicMem, Op, Qp, RegKind, Sge, Wc, WC_RECV_RDMA_WITH_IMM,
};
use crate::transport::net::{
    MemKind, Mr, NetError, NetResult, RecvBuf, RecvComm, Request, SendComm,
};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::Arc;

/// Requests in flight per comm (credit slots).
pub const MAX_REQUESTS: usize = 32;
/// Most receives in one group.
pub const MAX_RECVS: usize = 8;
/// Most queue pairs per connection.
pub const MAX_QPS: usize = 8;
/// Smallest piece of a striped message.
pub const MIN_STRIPE: usize = 128 << 10;
/// Largest piece (one work request).
const MAX_PIECE: usize = 1 << 30;
/// Calls without a completion between two checks of the peer's set-up socket.
const LIVENESS_EVERY: u32 = 64;

const ENTRY: usize = 32;
const SLOT_BYTES: usize = ENTRY * MAX_RECVS;
const FIFO_BYTES: usize = SLOT_BYTES * MAX_REQUESTS;
const SIZES_BYTES: usize = 8 * MAX_RECVS * MAX_REQUESTS;
/// Receive work requests posted per queue pair.
const RECV_WRS: usize = MAX_REQUESTS * MAX_RECVS;
/// A size slot not written yet.
const NO_SIZE: u64 = u64::MAX;
/// A size slot holding "the message's tag is not in the group" (the tag in the low bits).
const BAD_TAG: u64 = 1 << 62;
/// Work request ids of the receiver's FIFO writes.
const FIFO_WR: u64 = 1 << 62;
/// Immediate bit: the first piece of a message.
const IMM_HEAD: u32 = 1 << 8;

fn err(msg: impl Into<String>) -> NetError {
    NetError::new(msg)
}

/// Pieces of a message of `size` bytes over `nqps` queue pairs, and the piece length.
pub fn pieces(size: usize, nqps: usize) -> (usize, usize) {
    if size == 0 {
        return (1, 0);
    }
    let chunk = size
        .div_ceil(nqps)
        .next_multiple_of(64)
        .clamp(MIN_STRIPE, MAX_PIECE);
    (size.div_ceil(chunk), chunk)
}

/// The name of a work completion status.
fn wc_status(s: u32) -> &'static str {
    match s {
        1 => "local length error",
        2 => "local QP operation error",
        4 => "local protection error",
        5 => "work request flushed: the queue pair went to the error state (a failure at this end or the peer)",
        8 => "local access error",
        9 => "remote invalid request",
        10 => "remote access error (rkey or range not registered at the peer)",
        11 => "remote operation error",
        12 => "transport retry counter exceeded (peer unreachable or gone)",
        13 => "RNR retry counter exceeded (no receive posted at the peer)",
        _ => "error",
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Role {
    Send,
    Recv,
}

/// One end's verbs objects of a connection, created during set-up.
pub struct Side {
    pub qps: Vec<Qp>,
    exposed_mr: MemRegion,
    staging_mr: MemRegion,
    /// What the peer writes into: the sender's FIFO, the receiver's size slots.
    exposed: NicMem,
    /// What this end writes from: the sender's sizes, the receiver's FIFO entries.
    staging: NicMem,
    cq: Arc<Cq>,
    pub psn: u32,
    remote_addr: u64,
    remote_rkey: u32,
}

/// A connection's queue pairs go to the error state before they are destroyed: their
/// outstanding work requests are flushed first.
impl Drop for Side {
    fn drop(&mut self) {
        for q in &self.qps {
            let _ = q.to_error();
        }
    }
}

impl Side {
    pub(crate) fn new(port: &Port, nqps: usize, role: Role) -> NetResult<Side> {
        let e = |m: String| err(format!("ib: {m}"));
        let cq_entries = match role {
            Role::Send => 4 * RECV_WRS,
            Role::Recv => nqps * RECV_WRS + 2 * MAX_REQUESTS,
        };
        let cq = Cq::new(&port.ctx, cq_entries).map_err(e)?;
        let (exposed_len, staging_len) = match role {
            Role::Send => (FIFO_BYTES, SIZES_BYTES),
            Role::Recv => (SIZES_BYTES, FIFO_BYTES),
        };
        let exposed = NicMem::new(exposed_len);
        let staging = NicMem::new(staging_len);
        let access = ibv::ACCESS_LOCAL_WRITE | ibv::ACCESS_REMOTE_WRITE | ibv::ACCESS_REMOTE_READ;
        let reg = |m: &NicMem| {
            MemRegion::register(&port.pd, m.addr(), m.len(), access, RegKind::Plain)
                .map_err(|r| super::reg_error(port, m.len(), &r))
        };
        let exposed_mr = reg(&exposed)?;
        let staging_mr = reg(&staging)?;
        let mut qps = Vec::with_capacity(nqps);
        for _ in 0..nqps {
            let qp = Qp::new_rc(&port.pd, &cq, 2 * RECV_WRS as u32, RECV_WRS as u32).map_err(e)?;
            qp.to_init(port.port).map_err(e)?;
            if role == Role::Recv {
                let ids: Vec<u64> = vec![qps.len() as u64; RECV_WRS];
                qp.post_recv_empty(&ids).map_err(e)?;
            }
            qps.push(qp);
        }
        let psn = u32::from_le_bytes(
            crate::transport::net::auth::random::<4>().map_err(|x| e(x.to_string()))?,
        ) & 0xff_ffff;
        if role == Role::Recv {
            for i in 0..MAX_REQUESTS * MAX_RECVS {
                exposed.store(8 * i, NO_SIZE);
            }
        }
        Ok(Side {
            qps,
            exposed_mr,
            staging_mr,
            exposed,
            staging,
            cq,
            psn,
            remote_addr: 0,
            remote_rkey: 0,
        })
    }

    /// The address and rkey of the memory the peer writes into.
    pub fn exposed(&self) -> (u64, u32) {
        (self.exposed.addr(), self.exposed_mr.rkey)
    }

    pub fn set_remote(&mut self, addr: u64, rkey: u32) {
        self.remote_addr = addr;
        self.remote_rkey = rkey;
    }
}

/// The peer's liveness through the set-up socket, and the comm's failure.
struct Link {
    sock: TcpStream,
    peer: String,
    idle: u32,
    failed: Option<NetError>,
}

impl Link {
    fn check(&mut self) -> NetResult<()> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        Ok(())
    }

    fn fail(&mut self, msg: String) -> NetError {
        let e = self.failed.get_or_insert_with(|| err(msg)).clone();
        e
    }

    /// Called when a poll found nothing: every LIVENESS_EVERY calls, reads the socket.
    fn idle(&mut self) -> NetResult<()> {
        self.idle += 1;
        if self.idle < LIVENESS_EVERY {
            return Ok(());
        }
        self.idle = 0;
        let mut b = [0u8; 16];
        match crate::sys::socket::recv_nb(self.sock.as_raw_fd(), &mut b) {
            Ok(0) => Err(self.fail(format!(
                "ib: {} closed the connection (the peer process ended or closed its comm)",
                self.peer
            ))),
            Err(e)
                if e.kind() != std::io::ErrorKind::WouldBlock
                    && e.kind() != std::io::ErrorKind::Interrupted =>
            {
                Err(self.fail(format!("ib: connection to {} lost: {e}", self.peer)))
            }
            _ => Ok(()),
        }
    }

    fn wc_error(&mut self, wc: &Wc, what: &str) -> NetError {
        self.fail(format!(
            "ib: {what} with {} failed: {} (status {}, qp {:#x})",
            self.peer,
            wc_status(wc.status),
            wc.status,
            wc.qp_num
        ))
    }
}

fn reg_in(port: &Port, ptr: *const u8, len: usize, kind: MemKind) -> NetResult<Mr> {
    super::reg(port, ptr, len, kind)
}

/// Checks that `ptr..ptr+len` lies in `mr`; its lkey and rkey.
fn keys(port: &Port, mr: Mr, ptr: usize, len: usize, op: &str) -> NetResult<(u32, u32)> {
    let (lkey, rkey, addr, mlen) = mr_keys(port, mr)
        .ok_or_else(|| err(format!("ib: {op}: unknown memory region {}", mr.0)))?;
    if (ptr as u64) < addr || ptr as u64 + len as u64 > addr + mlen as u64 {
        return Err(err(format!(
            "ib: {op}: buffer {ptr:#x}+{len} is outside its memory region {addr:#x}+{mlen}"
        )));
    }
    Ok((lkey, rkey))
}

// ---------------------------------------------------------------------------------------------
// Sender.

/// One receive of a posted group as the FIFO announces it: address, rkey, capacity, tag.
type Posted = (u64, u32, usize, i32);

/// One batch of completions of `side`'s completion queue into `wc`; a failed poll fails the
/// connection (`dir`: "to" on the sending side, "from" on the receiving side).
fn poll_completions(side: &Side, wc: &mut [Wc], link: &mut Link, dir: &str) -> NetResult<usize> {
    side.cq
        .poll(wc)
        .map_err(|e| link.fail(format!("ib: {e} (connection {dir} {})", link.peer)))
}

#[derive(Clone, Copy, Default)]
struct SendSlot {
    busy: bool,
    gen: u32,
    expect: usize,
    done: usize,
    size: usize,
}

pub struct IbSend {
    side: Side,
    port: Arc<Port>,
    link: Link,
    slots: [SendSlot; MAX_REQUESTS],
    next_req: u32,
    /// Sequence number of the receive group being filled (from 1), and which of its
    /// receives have a message.
    gseq: u64,
    matched: u8,
    wc: Vec<Wc>,
}

impl IbSend {
    pub(crate) fn new(side: Side, port: Arc<Port>, sock: TcpStream, peer: String) -> IbSend {
        IbSend {
            side,
            port,
            link: Link {
                sock,
                peer,
                idle: 0,
                failed: None,
            },
            slots: [SendSlot::default(); MAX_REQUESTS],
            next_req: 0,
            gseq: 1,
            matched: 0,
            wc: vec![Wc::default(); 64],
        }
    }

    /// The entries of the next group if the receiver has posted it: (addr, rkey, cap, tag).
    fn group(&self) -> Option<([Posted; MAX_RECVS], usize)> {
        let slot = ((self.gseq - 1) % MAX_REQUESTS as u64) as usize;
        let f = &self.side.exposed;
        let base = slot * SLOT_BYTES;
        let w3 = f.load(base + 24);
        if w3 >> 8 != self.gseq {
            return None;
        }
        let n = (w3 & 0xff) as usize;
        let mut out = [(0, 0, 0, 0); MAX_RECVS];
        for (i, o) in out.iter_mut().enumerate().take(n.min(MAX_RECVS)) {
            let e = base + i * ENTRY;
            if f.load(e + 24) >> 8 != self.gseq {
                return None;
            }
            let w1 = f.load(e + 8);
            *o = (
                f.load(e),
                w1 as u32,
                f.load(e + 16) as usize,
                (w1 >> 32) as u32 as i32,
            );
        }
        Some((out, n.min(MAX_RECVS)))
    }

    fn progress(&mut self) -> NetResult<bool> {
        let mut any = false;
        loop {
            let n = poll_completions(&self.side, &mut self.wc, &mut self.link, "to")?;
            for i in 0..n {
                let wc = self.wc[i];
                if wc.status != ibv::WC_SUCCESS {
                    return Err(self.link.wc_error(&wc, "RDMA write"));
                }
                let s = (wc.wr_id >> 32) as usize % MAX_REQUESTS;
                self.slots[s].done += 1;
                any = true;
            }
            if n < self.wc.len() {
                return Ok(any);
            }
        }
    }

    /// Writes a size-slot value for receive `idx` of group slot `gslot`, then an empty first
    /// piece so that the receiver looks at it.
    fn post_marker(&mut self, gslot: usize, idx: usize, v: u64, req: usize) -> NetResult<()> {
        let off = 8 * (gslot * MAX_RECVS + idx);
        self.side.staging.store(off, v);
        let ops = [
            Op {
                wr_id: 0,
                opcode: ibv::WR_RDMA_WRITE,
                local: Sge {
                    addr: self.side.staging.addr() + off as u64,
                    length: 8,
                    lkey: self.side.staging_mr.lkey,
                },
                remote_addr: self.side.remote_addr + off as u64,
                rkey: self.side.remote_rkey,
                imm: 0,
                signaled: false,
            },
            Op {
                wr_id: (req as u64) << 32,
                opcode: ibv::WR_RDMA_WRITE_WITH_IMM,
                local: Sge::default(),
                remote_addr: 0,
                rkey: 0,
                imm: gslot as u32 | (idx as u32) << 5 | IMM_HEAD,
                signaled: true,
            },
        ];
        // SAFETY: the staging word lies in `staging_mr` and lives as long as the comm; the
        // empty write names no memory.
        unsafe { self.side.qps[0].post_send(&ops) }
            .map_err(|e| self.link.fail(format!("{e} (to {})", self.link.peer)))
    }
}

impl SendComm for IbSend {
    fn reg_mr(&mut self, ptr: *const u8, len: usize, kind: MemKind) -> NetResult<Mr> {
        reg_in(&self.port, ptr, len, kind)
    }

    fn dereg_mr(&mut self, mr: Mr) -> NetResult<()> {
        super::dereg(&self.port, mr)
    }

    unsafe fn isend(
        &mut self,
        data: *const u8,
        size: usize,
        tag: i32,
        mr: Mr,
    ) -> NetResult<Option<Request>> {
        self.link.check()?;
        let (lkey, _) = keys(&self.port, mr, data as usize, size, "isend")?;
        let rs = self.next_req as usize % MAX_REQUESTS;
        if self.slots[rs].busy {
            return Ok(None);
        }
        let Some((entries, n)) = self.group() else {
            if !self.progress()? {
                self.link.idle()?;
            }
            return Ok(None);
        };
        let gslot = ((self.gseq - 1) % MAX_REQUESTS as u64) as usize;
        let gen = self.next_req;
        self.next_req = self.next_req.wrapping_add(1);
        let Some(idx) = (0..n).find(|&i| self.matched & (1 << i) == 0 && entries[i].3 == tag)
        else {
            let tags: Vec<i32> = (0..n)
                .filter(|&i| self.matched & (1 << i) == 0)
                .map(|i| entries[i].3)
                .collect();
            let idx = (0..n).find(|&i| self.matched & (1 << i) == 0).unwrap_or(0);
            self.slots[rs] = SendSlot {
                busy: true,
                gen,
                expect: 1,
                done: 0,
                size,
            };
            self.post_marker(gslot, idx, BAD_TAG | tag as u32 as u64, rs)?;
            self.link.fail(format!(
                "ib: a message with tag {tag} to {}: the posted receive group holds tags {tags:?}",
                self.link.peer
            ));
            return Ok(Some(Request {
                slot: rs as u32,
                gen,
            }));
        };
        let (raddr, rkey, cap, _) = entries[idx];
        self.matched |= 1 << idx;
        if self.matched.count_ones() as usize == n {
            self.gseq += 1;
            self.matched = 0;
        }
        if size > cap {
            self.slots[rs] = SendSlot {
                busy: true,
                gen,
                expect: 1,
                done: 0,
                size,
            };
            self.post_marker(gslot, idx, size as u64, rs)?;
            self.link.fail(format!(
                "ib: message of {size} bytes to {} truncated: the receive holds {cap} bytes",
                self.link.peer
            ));
            return Ok(Some(Request {
                slot: rs as u32,
                gen,
            }));
        }
        let nq = self.side.qps.len();
        let (np, chunk) = pieces(size, nq);
        let off = 8 * (gslot * MAX_RECVS + idx);
        self.side.staging.store(off, size as u64);
        let mut per_qp: Vec<smallvec::SmallVec<[Op; 4]>> = vec![Default::default(); nq];
        per_qp[0].push(Op {
            wr_id: 0,
            opcode: ibv::WR_RDMA_WRITE,
            local: Sge {
                addr: self.side.staging.addr() + off as u64,
                length: 8,
                lkey: self.side.staging_mr.lkey,
            },
            remote_addr: self.side.remote_addr + off as u64,
            rkey: self.side.remote_rkey,
            imm: 0,
            signaled: false,
        });
        for k in 0..np {
            let start = k * chunk;
            let len = chunk.min(size - start.min(size));
            per_qp[k % nq].push(Op {
                wr_id: (rs as u64) << 32 | k as u64,
                opcode: ibv::WR_RDMA_WRITE_WITH_IMM,
                local: Sge {
                    addr: data as u64 + start as u64,
                    length: len as u32,
                    lkey,
                },
                remote_addr: raddr + start as u64,
                rkey,
                imm: gslot as u32 | (idx as u32) << 5 | if k == 0 { IMM_HEAD } else { 0 },
                signaled: true,
            });
        }
        self.slots[rs] = SendSlot {
            busy: true,
            gen,
            expect: np,
            done: 0,
            size,
        };
        for (q, ops) in per_qp.iter().enumerate() {
            // SAFETY: the caller's contract (isend): `data..data+size` lies in `mr` and stays
            // unchanged until the request completes; the size word lies in `staging_mr`.
            if let Err(e) = unsafe { self.side.qps[q].post_send(ops) } {
                return Err(self.link.fail(format!("{e} (to {})", self.link.peer)));
            }
        }
        Ok(Some(Request {
            slot: rs as u32,
            gen,
        }))
    }

    fn test(&mut self, req: Request) -> NetResult<Option<usize>> {
        self.link.check()?;
        let s = req.slot as usize;
        if s >= MAX_REQUESTS || !self.slots[s].busy || self.slots[s].gen != req.gen {
            return Err(err(format!("ib: test of a stale send request {req:?}")));
        }
        if !self.progress()? && self.slots[s].done < self.slots[s].expect {
            self.link.idle()?;
        }
        self.link.check()?;
        let sl = &mut self.slots[s];
        if sl.done >= sl.expect {
            sl.busy = false;
            return Ok(Some(sl.size));
        }
        Ok(None)
    }

    fn peer(&self) -> String {
        self.link.peer.clone()
    }
}

// ---------------------------------------------------------------------------------------------
// Receiver.

#[derive(Clone, Copy, Default)]
struct RecvSlot {
    busy: bool,
    gen: u32,
    n: usize,
    caps: [usize; MAX_RECVS],
    head: [bool; MAX_RECVS],
    got: [usize; MAX_RECVS],
    /// The first receive of the group in device memory (address, rkey), to flush.
    device: Option<(u64, u32)>,
    /// The flush read was posted; it completed.
    flushing: bool,
    flushed: bool,
}

/// The loopback queue pair of the GPUDirect flush and the host byte its reads land in.
struct Flush {
    qp: Qp,
    cq: Arc<Cq>,
    _host: NicMem,
    host_mr: MemRegion,
    host_addr: u64,
}

impl Flush {
    fn new(port: &Port) -> NetResult<Flush> {
        let e = |m: String| err(format!("ib: GPUDirect flush queue pair: {m}"));
        let cq = Cq::new(&port.ctx, 2 * MAX_REQUESTS).map_err(e)?;
        let qp = Qp::new_rc(&port.pd, &cq, MAX_REQUESTS as u32, 1).map_err(e)?;
        qp.to_init(port.port).map_err(e)?;
        let me = ibv::Dest {
            qpn: qp.qpn,
            psn: 0,
            lid: port.lid,
            gid: port.gid,
            global: port.roce,
        };
        qp.to_rtr(port.port, &me, port.active_mtu, port.gid_index as u8)
            .map_err(e)?;
        qp.to_rts(0, 18, 7).map_err(e)?;
        let host = NicMem::new(64);
        let host_mr = MemRegion::register(
            &port.pd,
            host.addr(),
            host.len(),
            ibv::ACCESS_LOCAL_WRITE,
            RegKind::Plain,
        )
        .map_err(|r| super::reg_error(port, host.len(), &r))?;
        Ok(Flush {
            qp,
            cq,
            host_addr: host.addr(),
            _host: host,
            host_mr,
        })
    }
}

pub struct IbRecv {
    side: Side,
    port: Arc<Port>,
    link: Link,
    slots: [RecvSlot; MAX_REQUESTS],
    /// Sequence number of the next group (from 1).
    seq: u64,
    wc: Vec<Wc>,
    flush: Option<Flush>,
}

impl IbRecv {
    pub(crate) fn new(
        side: Side,
        port: Arc<Port>,
        sock: TcpStream,
        peer: String,
    ) -> NetResult<IbRecv> {
        Ok(IbRecv {
            side,
            link: Link {
                sock,
                peer,
                idle: 0,
                failed: None,
            },
            slots: [RecvSlot::default(); MAX_REQUESTS],
            seq: 1,
            wc: vec![Wc::default(); 64],
            flush: if port.flush && port.gdr != super::GdrPath::Staging {
                Some(Flush::new(&port)?)
            } else {
                None
            },
            port,
        })
    }

    /// Whether group `slot`'s flush read is done: posts it the first time, then polls.
    fn flushed(&mut self, slot: usize) -> NetResult<bool> {
        let Some(f) = &self.flush else {
            return Ok(true);
        };
        let s = &mut self.slots[slot];
        let Some((addr, rkey)) = s.device else {
            return Ok(true);
        };
        if !s.flushing {
            let op = Op {
                wr_id: slot as u64,
                opcode: ibv::WR_RDMA_READ,
                local: Sge {
                    addr: f.host_addr,
                    length: 1,
                    lkey: f.host_mr.lkey,
                },
                remote_addr: addr,
                rkey,
                imm: 0,
                signaled: true,
            };
            // SAFETY: the read lands in the flush's registered host byte, which nobody reads;
            // its source is the group's registered receive buffer.
            unsafe { f.qp.post_send(&[op]) }.map_err(|e| {
                self.link.fail(format!(
                    "{e} (GPUDirect flush of data from {})",
                    self.link.peer
                ))
            })?;
            s.flushing = true;
        }
        let mut wc = [Wc::default(); 8];
        loop {
            let n =
                f.cq.poll(&mut wc)
                    .map_err(|e| self.link.fail(format!("ib: GPUDirect flush: {e}")))?;
            for w in &wc[..n] {
                if w.status != ibv::WC_SUCCESS {
                    return Err(self.link.wc_error(w, "GPUDirect flush read of data"));
                }
                self.slots[w.wr_id as usize % MAX_REQUESTS].flushed = true;
            }
            if n < wc.len() {
                break;
            }
        }
        Ok(self.slots[slot].flushed)
    }

    /// Takes every completion of the receive side. A failed one (a credit write to a peer
    /// that has gone, the receives flushed after it) fails the link, but the completions
    /// around it are still counted: what arrived before the failure stays arrived.
    fn progress(&mut self) -> NetResult<bool> {
        let mut any = false;
        let mut failed = None;
        loop {
            let n = poll_completions(&self.side, &mut self.wc, &mut self.link, "from")?;
            for i in 0..n {
                let wc = self.wc[i];
                if wc.status != ibv::WC_SUCCESS {
                    let what = if wc.wr_id & FIFO_WR != 0 {
                        "credit write"
                    } else {
                        "receive"
                    };
                    let e = self.link.wc_error(&wc, what);
                    failed.get_or_insert(e);
                    continue;
                }
                any = true;
                if wc.wr_id & FIFO_WR != 0 {
                    continue;
                }
                if wc.opcode == WC_RECV_RDMA_WITH_IMM {
                    let q = wc.wr_id as usize;
                    if let Some(qp) = self.side.qps.get(q) {
                        qp.post_recv_empty(&[q as u64]).map_err(|e| {
                            self.link.fail(format!("{e} (from {})", self.link.peer))
                        })?;
                    }
                    let imm = u32::from_be(wc.imm_data);
                    let slot = (imm & 31) as usize;
                    let idx = ((imm >> 5) & 7) as usize;
                    let s = &mut self.slots[slot];
                    s.got[idx] += 1;
                    if imm & IMM_HEAD != 0 {
                        s.head[idx] = true;
                    }
                }
            }
            if n < self.wc.len() {
                return failed.map_or(Ok(any), Err);
            }
        }
    }

    /// Whether group `slot` is complete, with its sizes.
    fn complete(&mut self, slot: usize, sizes: &mut [usize]) -> NetResult<bool> {
        let s = self.slots[slot];
        let nq = self.side.qps.len();
        for i in 0..s.n {
            if !s.head[i] {
                return Ok(false);
            }
            let v = self.side.exposed.load(8 * (slot * MAX_RECVS + i));
            if v != NO_SIZE && v & BAD_TAG != 0 {
                return Err(self.link.fail(format!(
                    "ib: {} sent a message with tag {} that the posted receive group does not hold",
                    self.link.peer, v as u32 as i32
                )));
            }
            let size = v as usize;
            if size > s.caps[i] {
                return Err(self.link.fail(format!(
                    "ib: message of {size} bytes from {} truncated: the receive holds {} bytes",
                    self.link.peer, s.caps[i]
                )));
            }
            if s.got[i] < pieces(size, nq).0 {
                return Ok(false);
            }
        }
        for (i, out) in sizes.iter_mut().enumerate().take(s.n) {
            *out = self.side.exposed.load(8 * (slot * MAX_RECVS + i)) as usize;
        }
        Ok(true)
    }
}

impl RecvComm for IbRecv {
    fn reg_mr(&mut self, ptr: *const u8, len: usize, kind: MemKind) -> NetResult<Mr> {
        reg_in(&self.port, ptr, len, kind)
    }

    fn dereg_mr(&mut self, mr: Mr) -> NetResult<()> {
        super::dereg(&self.port, mr)
    }

    unsafe fn irecv(&mut self, bufs: &[RecvBuf]) -> NetResult<Option<Request>> {
        self.link.check()?;
        if bufs.is_empty() || bufs.len() > MAX_RECVS {
            return Err(err(format!(
                "ib: irecv with a group of {} receives (1..={MAX_RECVS})",
                bufs.len()
            )));
        }
        let slot = ((self.seq - 1) % MAX_REQUESTS as u64) as usize;
        if self.slots[slot].busy {
            if !self.progress()? {
                self.link.idle()?;
            }
            return Ok(None);
        }
        let mut caps = [0usize; MAX_RECVS];
        let mut device = None;
        let st = &self.side.staging;
        for (i, b) in bufs.iter().enumerate() {
            let (_, rkey) = keys(&self.port, b.mr, b.ptr as usize, b.size, "irecv")?;
            if device.is_none() && b.size > 0 && super::mr_is_device(&self.port, b.mr) {
                device = Some((b.ptr as u64, rkey));
            }
            caps[i] = b.size;
            let e = slot * SLOT_BYTES + i * ENTRY;
            st.store(e, b.ptr as u64);
            st.store(e + 8, rkey as u64 | (b.tag as u32 as u64) << 32);
            st.store(e + 16, b.size as u64);
            st.store(e + 24, self.seq << 8 | bufs.len() as u64);
            self.side.exposed.store(8 * (slot * MAX_RECVS + i), NO_SIZE);
        }
        let op = Op {
            wr_id: FIFO_WR | slot as u64,
            opcode: ibv::WR_RDMA_WRITE,
            local: Sge {
                addr: st.addr() + (slot * SLOT_BYTES) as u64,
                length: (bufs.len() * ENTRY) as u32,
                lkey: self.side.staging_mr.lkey,
            },
            remote_addr: self.side.remote_addr + (slot * SLOT_BYTES) as u64,
            rkey: self.side.remote_rkey,
            imm: 0,
            signaled: true,
        };
        // SAFETY: the entries lie in `staging_mr` and are not rewritten before this slot is
        // reused (after its group completed, which follows this write).
        unsafe { self.side.qps[0].post_send(&[op]) }.map_err(|e| {
            self.link
                .fail(format!("{e} (credit to {})", self.link.peer))
        })?;
        let gen = self.seq as u32;
        self.slots[slot] = RecvSlot {
            busy: true,
            gen,
            n: bufs.len(),
            caps,
            device,
            ..Default::default()
        };
        self.seq += 1;
        Ok(Some(Request {
            slot: slot as u32,
            gen,
        }))
    }

    fn test(&mut self, req: Request, sizes: &mut [usize]) -> NetResult<bool> {
        let s = req.slot as usize;
        if s >= MAX_REQUESTS || !self.slots[s].busy || self.slots[s].gen != req.gen {
            return Err(err(format!("ib: test of a stale receive request {req:?}")));
        }
        // A group whose messages all arrived completes even when the link failed after them
        // (a sender may end once its last message is written, and this side's credit writes
        // to it then fail): only a receive still waiting reports the failure.
        let moved = if self.link.failed.is_some() {
            Ok(false)
        } else {
            self.progress()
        };
        if self.complete(s, sizes)? {
            let n = self.slots[s].n;
            if sizes[..n].iter().any(|&z| z > 0) && !self.flushed(s)? {
                return Ok(false);
            }
            self.slots[s].busy = false;
            return Ok(true);
        }
        self.link.check()?;
        let moved = moved?;
        if !moved {
            self.link.idle()?;
        }
        Ok(false)
    }

    fn peer(&self) -> String {
        self.link.peer.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_cover_the_message() {
        assert_eq!(pieces(0, 4), (1, 0));
        assert_eq!(pieces(1, 4), (1, MIN_STRIPE));
        assert_eq!(pieces(MIN_STRIPE, 2), (1, MIN_STRIPE));
        assert_eq!(pieces(MIN_STRIPE + 1, 2).0, 2);
        let (n, c) = pieces(64 << 20, 4);
        assert_eq!((n, c), (4, 16 << 20));
        let (n, c) = pieces(5 << 30, 2);
        assert!(c <= MAX_PIECE && n * c >= 5 << 30 && (n - 1) * c < 5 << 30);
        for size in [1usize, 1000, 300_000, (1 << 20) + 1, 64 << 20] {
            for q in 1..=MAX_QPS {
                let (n, c) = pieces(size, q);
                assert!(n * c >= size && (n - 1) * c < size, "{size} {q}");
            }
        }
    }
}
