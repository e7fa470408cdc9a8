//! The engine's framed messages ([`Transport`]) to ranks on other nodes, over a network
//! backend ([`Net`]).
//!
//! Per off-node peer this rank holds one [`SendComm`] (to it) and one [`RecvComm`] (from it),
//! each with [`SLOTS`] preallocated, registered buffers of [`SLOT_BYTES`]. A network message
//! (tag [`TAG_FRAME`]) carries one or more frames, each a record: its payload length (u32,
//! then 4 zero bytes), the 48-byte [`Header`], the payload, zero bytes up to a multiple of 8.
//! - **Send and aggregation**: [`Transport::try_send`] appends the frame to the peer's open
//!   slot (the one being filled) when it fits, else posts the open slot and opens the next
//!   free one; `false` when every slot is in flight (the engine keeps the frame and retries).
//!   A frame to a peer with no send in flight is posted at once; otherwise it waits in the
//!   open slot until [`Transport::poll`] (which posts every open slot first) or until the slot
//!   is full, so the frames written to a busy peer between two polls (all local ranks' frames
//!   that a PXN forwarder passes on, or the fragments of large messages) travel as one network
//!   operation of up to [`SLOT_BYTES`] (as Nagle's rule does for TCP segments).
//!   Slots are freed in posting order as the backend reports them complete.
//! - **Receive**: every receive slot is posted at set-up and re-posted after its frames are
//!   delivered. Messages are delivered in posting order (the backend matches a comm's
//!   messages to the oldest posted receive) and the frames of one in record order, so a
//!   sender's frames arrive in the order it sent them, as the engine's matching requires.
//! - **Set-up** ([`NetFrames::connect`], collective over the job, at `MPI_Init`): each rank
//!   listens once, its handle travels through the bootstrap, and it connects to every off-node
//!   peer; the first message of each connection carries the sender's world rank (tag
//!   [`TAG_HELLO`]), which names the accepted comm. Set-up is authenticated with the job
//!   secret by the backend.
//! - **Close** (drop, at `MPI_Finalize`, after its barrier: collective): each rank waits for
//!   its frames in flight, sends every peer an empty message (goodbye: no frame is empty), and
//!   waits for every peer's goodbye before the comms close, so that no rank sees a peer close
//!   a connection while it still has receives posted (which the backend reports as an error).
//!   Frames that arrive meanwhile (sends nobody received) are dropped.
//! - **Errors**: a network error (a peer that closed, a truncated frame) ends this process
//!   with a message naming the peer, as MPI's default error handler would: the transport
//!   contract has no error path, and a job that lost a connection cannot go on.
//!
//! Counters ([`Counters`]: frames and bytes each way, network operations, aggregated ones,
//! operations to a peer on another rail) are logged when the transport is dropped
//! (`MPI_Finalize`), at info level (`GPUMPI_DEBUG=1`): the tests read them to check that
//! off-node traffic went over the network, and on which rails.

use super::{MemKind, Mr, Net, NetError, NetResult, RecvBuf, RecvComm, Request, SendComm};
use crate::transport::{Header, Transport, HEADER_BYTES};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Message buffers per direction and peer.
pub const SLOTS: usize = 8;
/// Largest payload of one frame.
pub const MAX_PAYLOAD: usize = 64 << 10;
/// Bytes before a frame's header in a message: the payload length and 4 zero bytes.
const REC_PREFIX: usize = 8;
/// Most frames of the largest payload one network message holds.
const AGG_FRAMES: usize = 4;
/// Bytes of one message buffer: [`AGG_FRAMES`] full frames.
pub const SLOT_BYTES: usize = AGG_FRAMES * (REC_PREFIX + HEADER_BYTES + MAX_PAYLOAD);

/// Bytes a frame of `payload` bytes takes in a message.
fn record_len(payload: usize) -> usize {
    (REC_PREFIX + HEADER_BYTES + payload + 7) & !7
}

/// What this rank sent over the network (see the module documentation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Frames and payload bytes sent.
    pub frames: u64,
    pub bytes: u64,
    /// Network operations (messages) sent; those carrying more than one frame.
    pub ops: u64,
    pub aggregated: u64,
    /// Operations sent to a peer on another rail than this rank's.
    pub cross_rail: u64,
    /// Frames and payload bytes received.
    pub frames_in: u64,
    pub bytes_in: u64,
}
/// Tag of the engine's frames.
const TAG_FRAME: i32 = 0;
/// Tag of the first message of a connection: the sender's world rank.
const TAG_HELLO: i32 = 1;
/// Most frames one [`Transport::poll`] delivers per peer.
const POLL_BUDGET: usize = 32;

/// The send side to one peer: frame slots, posted in a ring, freed in order.
struct Tx {
    comm: Box<dyn SendComm>,
    mr: Mr,
    buf: Vec<u8>,
    /// Posted requests, oldest first, with their slot.
    inflight: VecDeque<(usize, Request)>,
    /// Slot opened next.
    next: usize,
    /// The slot being filled: its index, bytes and frames written (not yet posted).
    open: Option<(usize, usize, u32)>,
}

/// The receive side from one peer: every slot posted, delivered in posting order.
struct Rx {
    comm: Box<dyn RecvComm>,
    mr: Mr,
    buf: Vec<u8>,
    posted: VecDeque<(usize, Request)>,
    /// The peer said goodbye (an empty message): nothing more comes, nothing is tested.
    bye: bool,
}

/// Frames to and from the off-node peers. See the module documentation.
pub struct NetFrames {
    me: usize,
    /// Bytes of one message buffer.
    frame: usize,
    tx: Vec<Option<Tx>>,
    /// Peers whose send slot is open (posted by the next poll).
    open: Vec<usize>,
    /// Rail of every rank and of this one, when known (for [`Counters::cross_rail`]).
    rails: Option<(usize, Vec<usize>)>,
    rx: Vec<Option<Rx>>,
    /// Off-node peers, polled round-robin from `next`.
    remote: Vec<usize>,
    next: usize,
    counts: Counters,
    /// This rank has said goodbye to every peer: a peer closing its end is its own goodbye.
    closing: bool,
    /// Kept for the life of the comms (closed last).
    _net: Box<dyn Net>,
}

/// Ends the process on a network error: see the module documentation.
fn fatal(me: usize, e: NetError) -> ! {
    let msg = format!("gpumpi: rank {me}: network transport failed: {e}");
    tracing::error!("{msg}");
    eprintln!("{msg}");
    std::process::exit(1)
}

impl NetFrames {
    /// Connects this rank (`me` of `size`) to every rank of `remote` through device `dev` of
    /// `net`: `listener` is this rank's (its handle already published), `handle_of(p)` peer
    /// `p`'s. Collective over the ranks of `remote` and this one; fails after `timeout` naming
    /// the missing peers.
    #[allow(clippy::too_many_arguments)]
    pub fn connect(
        net: Box<dyn Net>,
        dev: usize,
        mut listener: Box<dyn super::Listener>,
        me: usize,
        size: usize,
        remote: &[usize],
        handle_of: &dyn Fn(usize) -> NetResult<super::Handle>,
        timeout: Duration,
    ) -> NetResult<NetFrames> {
        let frame = SLOT_BYTES;
        let slots = SLOTS.min(net.devices().get(dev).map_or(SLOTS, |d| d.max_requests));
        let mut conns = Vec::with_capacity(remote.len());
        for &p in remote {
            conns.push((p, net.connect(dev, &handle_of(p)?)?));
        }
        let mut tx: Vec<Option<Tx>> = (0..size).map(|_| None).collect();
        let mut rx: Vec<Option<Rx>> = (0..size).map(|_| None).collect();
        let hello = (me as u64).to_le_bytes();
        // Accepted comms whose hello has not arrived: comm, its buffer, the request.
        let mut greeting: Vec<(Box<dyn RecvComm>, Box<[u8; 8]>, Mr, Request)> = Vec::new();
        // Connected comms whose hello is in flight (`None`: not posted yet, the backend had no
        // request slot or no receive posted by the peer yet).
        let mut saying: Vec<(usize, Box<dyn SendComm>, Mr, Option<Request>)> = Vec::new();
        let (mut sent, mut heard) = (0, 0);
        let end = Instant::now() + timeout;
        while sent < remote.len() || heard < remote.len() {
            let mut moved = false;
            let mut i = 0;
            while i < conns.len() {
                match conns[i].1.poll()? {
                    Some(mut c) => {
                        let p = conns.swap_remove(i).0;
                        let mr = c.reg_mr(hello.as_ptr(), hello.len(), MemKind::Host)?;
                        saying.push((p, c, mr, None));
                        moved = true;
                    }
                    None => i += 1,
                }
            }
            let mut i = 0;
            while i < saying.len() {
                let Some(q) = saying[i].3 else {
                    let mr = saying[i].2;
                    let c = &mut saying[i].1;
                    // SAFETY: `hello` lives until set-up ends, after every hello completed.
                    saying[i].3 = unsafe { c.isend(hello.as_ptr(), hello.len(), TAG_HELLO, mr) }?;
                    moved |= saying[i].3.is_some();
                    i += 1;
                    continue;
                };
                match saying[i].1.test(q)? {
                    Some(_) => {
                        let (p, mut c, mr, _) = saying.swap_remove(i);
                        c.dereg_mr(mr)?;
                        tx[p] = Some(Tx::new(c, frame, slots)?);
                        sent += 1;
                        moved = true;
                    }
                    None => i += 1,
                }
            }
            if heard + greeting.len() < remote.len() {
                if let Some(mut c) = listener.accept()? {
                    let mut b = Box::new([0u8; 8]);
                    let mr = c.reg_mr(b.as_ptr(), 8, MemKind::Host)?;
                    let rb = RecvBuf {
                        ptr: b.as_mut_ptr(),
                        size: 8,
                        tag: TAG_HELLO,
                        mr,
                    };
                    // SAFETY: the boxed buffer moves with the comm into `greeting` and is read
                    // only after the receive completed.
                    let q = unsafe { c.irecv(&[rb]) }?
                        .ok_or_else(|| NetError::new("net: no request slot for the hello"))?;
                    greeting.push((c, b, mr, q));
                    moved = true;
                }
            }
            let mut i = 0;
            while i < greeting.len() {
                let mut n = [0usize];
                let q = greeting[i].3;
                if greeting[i].0.test(q, &mut n)? {
                    let (mut c, b, mr, _) = greeting.swap_remove(i);
                    c.dereg_mr(mr)?;
                    let p = u64::from_le_bytes(*b) as usize;
                    if n[0] != 8 || !remote.contains(&p) || rx[p].is_some() {
                        return Err(NetError::new(format!(
                            "net: rank {me}: unexpected hello from {} (rank {p})",
                            c.peer()
                        )));
                    }
                    rx[p] = Some(Rx::new(c, frame, slots)?);
                    heard += 1;
                    moved = true;
                } else {
                    i += 1;
                }
            }
            if Instant::now() > end {
                let missing: Vec<usize> = remote
                    .iter()
                    .copied()
                    .filter(|&p| tx[p].is_none() || rx[p].is_none())
                    .collect();
                return Err(NetError::new(format!(
                    "net: rank {me}: connections with ranks {missing:?} not set up within {:?}",
                    timeout
                )));
            }
            if !moved {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        tracing::debug!(
            "net: rank {me}: connected to {} off-node peers ({slots} buffers of {frame} bytes each way)",
            remote.len()
        );
        Ok(NetFrames {
            me,
            frame,
            tx,
            rx,
            open: Vec::new(),
            rails: None,
            remote: remote.to_vec(),
            next: 0,
            counts: Counters::default(),
            closing: false,
            _net: net,
        })
    }

    /// What went over the network so far.
    pub fn counts(&self) -> Counters {
        self.counts
    }

    /// Records this rank's rail and every rank's, so that operations to another rail are
    /// counted.
    pub fn set_rails(&mut self, mine: usize, rail_of: Vec<usize>) {
        self.rails = Some((mine, rail_of));
    }

    /// Posts peer `dst`'s open slot; `false` when the backend had no request slot (it stays
    /// open and is posted by a later poll).
    fn post_open(&mut self, dst: usize) -> bool {
        let me = self.me;
        let frame = self.frame;
        let t = self.tx[dst]
            .as_mut()
            .expect("net: open slot of a rank on this node");
        let Some((s, used, n)) = t.open else {
            return true;
        };
        let f = &t.buf[s * frame..s * frame + used];
        // SAFETY: the slot lies in the registered buffer and is not written again until the
        // backend reports this send complete (`reap`).
        match unsafe { t.comm.isend(f.as_ptr(), used, TAG_FRAME, t.mr) } {
            Ok(Some(q)) => {
                t.inflight.push_back((s, q));
                t.open = None;
                let c = &mut self.counts;
                c.ops += 1;
                c.aggregated += (n > 1) as u64;
                if let Some((mine, rail_of)) = &self.rails {
                    c.cross_rail += (rail_of[dst] != *mine) as u64;
                }
                true
            }
            Ok(None) => false,
            Err(e) => fatal(me, e),
        }
    }

    /// Posts every open slot (see the module documentation).
    fn flush(&mut self) {
        let mut i = 0;
        while i < self.open.len() {
            if self.post_open(self.open[i]) {
                self.open.swap_remove(i);
            } else {
                i += 1;
            }
        }
    }
}

impl Tx {
    fn new(mut comm: Box<dyn SendComm>, frame: usize, slots: usize) -> NetResult<Tx> {
        let buf = vec![0u8; frame * slots];
        let mr = comm.reg_mr(buf.as_ptr(), buf.len(), MemKind::Host)?;
        Ok(Tx {
            comm,
            mr,
            buf,
            inflight: VecDeque::with_capacity(slots),
            next: 0,
            open: None,
        })
    }

    /// Frees the slots whose sends completed, oldest first.
    fn reap(&mut self) -> NetResult<()> {
        while let Some(&(_, q)) = self.inflight.front() {
            if self.comm.test(q)?.is_none() {
                break;
            }
            self.inflight.pop_front();
        }
        Ok(())
    }
}

impl Rx {
    fn new(mut comm: Box<dyn RecvComm>, frame: usize, slots: usize) -> NetResult<Rx> {
        let buf = vec![0u8; frame * slots];
        let mr = comm.reg_mr(buf.as_ptr(), buf.len(), MemKind::Host)?;
        let mut rx = Rx {
            comm,
            mr,
            buf,
            posted: VecDeque::with_capacity(slots),
            bye: false,
        };
        for s in 0..slots {
            rx.post(s, frame)?;
        }
        Ok(rx)
    }

    fn post(&mut self, slot: usize, frame: usize) -> NetResult<()> {
        let rb = RecvBuf {
            // SAFETY: slot < slots: the frame lies inside `buf`.
            ptr: unsafe { self.buf.as_mut_ptr().add(slot * frame) },
            size: frame,
            tag: TAG_FRAME,
            mr: self.mr,
        };
        // SAFETY: `buf` lives as long as the comm (dropped after it, see NetFrames' fields)
        // and a slot is read only after its receive completed, then posted again.
        match unsafe { self.comm.irecv(&[rb]) }? {
            Some(q) => {
                self.posted.push_back((slot, q));
                Ok(())
            }
            None => Err(NetError::new(format!(
                "net: no request slot for a frame receive from {}",
                self.comm.peer()
            ))),
        }
    }
}

impl Transport for NetFrames {
    fn max_payload(&self) -> usize {
        MAX_PAYLOAD
    }

    /// Every peer of this transport is on another node.
    fn same_node(&self, peer: usize) -> bool {
        peer == self.me
    }

    fn try_send(&mut self, dst: usize, hdr: &Header, payload: &[u8]) -> bool {
        let me = self.me;
        let frame = self.frame;
        debug_assert!(payload.len() <= MAX_PAYLOAD);
        let need = record_len(payload.len());
        let full = self.tx[dst]
            .as_ref()
            .expect("net: try_send to a rank on this node")
            .open
            .is_some_and(|(_, used, _)| used + need > frame);
        if full && !self.post_open(dst) {
            return false;
        }
        let t = self.tx[dst]
            .as_mut()
            .expect("net: try_send to a rank on this node");
        if let Err(e) = t.reap() {
            fatal(me, e);
        }
        let (s, used, n) = match t.open {
            Some(o) => o,
            None => {
                let slots = t.buf.len() / frame;
                if t.inflight.len() == slots {
                    return false;
                }
                let s = t.next;
                t.next = (s + 1) % slots;
                self.open.push(dst);
                (s, 0, 0)
            }
        };
        let at = s * frame + used;
        let r = &mut t.buf[at..at + need];
        r[..4].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        r[4..REC_PREFIX].fill(0);
        // SAFETY: Header is repr(C) plain data of HEADER_BYTES bytes.
        let hb =
            unsafe { std::slice::from_raw_parts(hdr as *const Header as *const u8, HEADER_BYTES) };
        r[REC_PREFIX..REC_PREFIX + HEADER_BYTES].copy_from_slice(hb);
        let body = REC_PREFIX + HEADER_BYTES;
        r[body..body + payload.len()].copy_from_slice(payload);
        r[body + payload.len()..].fill(0);
        t.open = Some((s, used + need, n + 1));
        let idle = t.inflight.is_empty();
        self.counts.frames += 1;
        self.counts.bytes += payload.len() as u64;
        // Nothing in flight to this peer: no reason to wait for more frames.
        if idle && self.post_open(dst) {
            if let Some(i) = self.open.iter().position(|&p| p == dst) {
                self.open.swap_remove(i);
            }
        }
        true
    }

    fn poll(&mut self, f: &mut dyn FnMut(usize, &Header, &[u8])) -> usize {
        self.flush();
        let n = self.remote.len();
        let mut delivered = 0;
        for i in 0..n {
            let p = self.remote[(self.next + i) % n];
            // Sends progress through `test` (the backend writes headers from this thread).
            if let Some(t) = self.tx[p].as_mut() {
                match t.reap() {
                    Err(e) if !self.closing => fatal(self.me, e),
                    _ => {}
                }
            }
            let Some(r) = self.rx[p].as_mut().filter(|r| !r.bye) else {
                continue;
            };
            for _ in 0..POLL_BUDGET {
                let Some(&(s, q)) = r.posted.front() else {
                    break;
                };
                let mut size = [0usize];
                match r.comm.test(q, &mut size) {
                    Ok(true) => {}
                    Ok(false) => break,
                    Err(_) if self.closing => {
                        r.bye = true;
                        break;
                    }
                    Err(e) => fatal(self.me, e),
                }
                r.posted.pop_front();
                if size[0] == 0 {
                    r.bye = true;
                    break;
                }
                let mut m = &r.buf[s * self.frame..s * self.frame + size[0]];
                while !m.is_empty() {
                    let len = match m.get(..4) {
                        Some(b) => u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize,
                        None => 0,
                    };
                    let need = record_len(len);
                    if m.len() < REC_PREFIX + HEADER_BYTES + len {
                        fatal(
                            self.me,
                            NetError::new(format!("net: short frame from {}", r.comm.peer())),
                        );
                    }
                    // SAFETY: a record's header is a Header (plain data, any bit pattern
                    // valid); read unaligned from the byte buffer.
                    let hdr: Header = unsafe {
                        std::ptr::read_unaligned(m[REC_PREFIX..].as_ptr() as *const Header)
                    };
                    let body = REC_PREFIX + HEADER_BYTES;
                    f(p, &hdr, &m[body..body + len]);
                    self.counts.frames_in += 1;
                    self.counts.bytes_in += len as u64;
                    delivered += 1;
                    m = &m[need.min(m.len())..];
                }
                if let Err(e) = r.post(s, self.frame) {
                    fatal(self.me, e);
                }
            }
        }
        if n > 0 {
            self.next = (self.next + 1) % n;
        }
        delivered
    }
}

impl NetFrames {
    /// The goodbye exchange of the module documentation; gives up after `limit`.
    fn close(&mut self, limit: Duration) -> NetResult<()> {
        let end = Instant::now() + limit;
        let me = self.me;
        let peers = self.remote.clone();
        let mut said = Vec::new();
        let mut sink = |_: usize, _: &Header, _: &[u8]| {};
        while !self.open.is_empty() {
            self.flush();
            if Instant::now() > end {
                return Err(NetError::new(format!(
                    "net: rank {me}: frames not posted within {limit:?}"
                )));
            }
        }
        for &p in &peers {
            let t = self.tx[p]
                .as_mut()
                .expect("net: off-node peer without a send comm");
            while !t.inflight.is_empty() {
                t.reap()?;
                if Instant::now() > end {
                    return Err(NetError::new(format!(
                        "net: rank {me}: frames to rank {p} not sent within {limit:?}"
                    )));
                }
                std::thread::yield_now();
            }
            loop {
                let t = self.tx[p]
                    .as_mut()
                    .expect("net: off-node peer without a send comm");
                // SAFETY: an empty message reads nothing.
                if let Some(q) = unsafe { t.comm.isend(t.buf.as_ptr(), 0, TAG_FRAME, t.mr) }? {
                    said.push((p, q, false));
                    break;
                }
                t.reap()?;
                // A backend with receiver-posted credits (ibverbs) takes the goodbye once the
                // peer has a receive posted for it: keep this rank's receives moving meanwhile.
                self.poll(&mut sink);
                if Instant::now() > end {
                    return Err(NetError::new(format!(
                        "net: rank {me}: goodbye to rank {p} not posted within {limit:?}"
                    )));
                }
            }
        }
        // A peer closes only after our goodbye and its own were sent; the backend may report
        // its close before its goodbye (the receives posted behind it see the end).
        self.closing = true;
        loop {
            self.poll(&mut sink);
            let mut done = true;
            for (p, q, ok) in said.iter_mut() {
                // A completed request reports its size once (its slot is then reused).
                if !*ok {
                    let t = self.tx[*p]
                        .as_mut()
                        .expect("net: off-node peer without a send comm");
                    *ok = t.comm.test(*q).map_or(true, |n| n.is_some());
                }
                done &= *ok;
            }
            done &= peers
                .iter()
                .all(|&p| self.rx[p].as_ref().is_some_and(|r| r.bye));
            if done {
                return Ok(());
            }
            if Instant::now() > end {
                return Err(NetError::new(format!(
                    "net: rank {me}: goodbye of the off-node peers not received within {limit:?}"
                )));
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    }
}

impl Drop for NetFrames {
    fn drop(&mut self) {
        if let Err(e) = self.close(Duration::from_secs(10)) {
            tracing::warn!("{e}");
        }
        let c = self.counts;
        let (fs, bs, fr, br) = (c.frames, c.bytes, c.frames_in, c.bytes_in);
        if fs == 0 && fr == 0 {
            tracing::info!("net: rank {}: no frames went over the network", self.me);
        } else {
            tracing::info!(
                "net: rank {}: {fs} frames ({bs} payload bytes) sent and {fr} frames ({br} bytes) received over the network, {} off-node peers",
                self.me,
                self.remote.len()
            );
        }
        let rail = self.rails.as_ref().map_or(0, |r| r.0);
        tracing::info!(
            "net: rank {} rail {rail}: {} network sends ({} aggregated), {} cross-rail, {fs} frames, {bs} bytes",
            self.me,
            c.ops,
            c.aggregated,
            c.cross_rail
        );
    }
}
