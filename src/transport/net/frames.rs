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
//!   [`Transport::try_send_held`] leaves a frame in the open slot even when nothing is in
//!   flight, until [`Transport::post_held`] or the next poll: a PXN forwarder writes its own
//!   frames to a peer it forwards for and the frames it passes on in one progress pass this
//!   way, so they leave as one operation; so does the engine with every queued protocol frame
//!   to a peer but the last (a pass's answers to a window of requests-to-send).
//!   Slots are freed in posting order as the backend reports them complete.
//! - **Receive**: every receive slot is posted at set-up and re-posted after its frames are
//!   delivered. Messages are delivered in posting order (the backend matches a comm's
//!   messages to the oldest posted receive) and the frames of one in record order, so a
//!   sender's frames arrive in the order it sent them, as the engine's matching requires.
//! - **Set-up** ([`super::links`]): each rank listens once at `MPI_Init` and its handle
//!   travels through the bootstrap; a connection to a peer is opened by the first frame
//!   written to it (the frame waits in the engine, [`Transport::try_send`] answering "full",
//!   until the connection is up) unless that peer dialed this rank first and this rank never
//!   dialed it: then the frame goes back on that connection's other direction, where the
//!   backend carries both (TCP; one connection per pair that talks both ways, and each
//!   reply carries the acknowledgement of the message before it), and the dialer's receive
//!   side takes it there. Two ranks that dial each other at once (a barrier's first round)
//!   keep the lower rank's connection for both directions: the higher rank gives up its dial
//!   if it is still in flight, or else sends a goodbye on its own connection behind the frames
//!   it carried and a hello marked "moved" ([`super::links::MOVED_BIT`]) on the other
//!   direction of the lower rank's, and the lower rank delivers the old connection's frames
//!   up to that goodbye before any of the new one's (the sender's order holds across the
//!   move; the old connection stays open, idle, until the transport closes). Connections
//!   from peers are accepted while this rank
//!   polls (every [`ACCEPT_EVERY`] polls, every poll while one is being set up). The first
//!   message of each connection carries the sender's world rank (tag
//!   [`super::links::TAG_HELLO`], from slot 0), which names the accepted comm. So a job opens
//!   only the connections its traffic needs; [`NetFrames::connect_all`] opens every one at
//!   once instead (`GPUMPI_NET_CONNECT=eager`). Set-up is authenticated with the job secret by
//!   the backend.
//! - **Close** (drop, at `MPI_Finalize`, after its barrier): each rank gives up its dials in
//!   flight (nothing was written to them), sends a goodbye (an empty message: no frame is
//!   empty) on every connection it dialed once its frames are out, and waits for the goodbye on
//!   every connection it accepted (accepting, meanwhile, connections still being set up) before
//!   the comms close. A rank says goodbye to a peer only once its bulk sends to it are
//!   complete, and closes only once its bulk receives are (a bulk lane carries no goodbye of
//!   its own: every message on it was asked for by its receiver). A receiver takes the goodbye
//!   as the end of that connection and tests it no more, so a sender may close once its
//!   goodbye is sent (the backend delivers what a peer sent before it closed); waiting for the
//!   goodbyes of its own senders keeps a rank's receives posted until they are done with it.
//!   A sender may so have closed while its last frames wait in the receiver's posted
//!   receives: the receiver's re-post of a taken frame's receive can then fail (with a
//!   credit-based backend it writes to the closed sender), and the receives still posted are
//!   taken before that failure counts (only if they run out before the goodbye).
//!   Frames that arrive meanwhile (sends nobody received) are dropped. A rank never waits for
//!   peers it has no connection with.
//! - **Bulk data** ([`Transport::bulk_send`], [`Transport::bulk_recv`]): the engine moves the
//!   data of large rendezvous messages (from [`NetFrames::set_bulk_min`] bytes on) as one
//!   backend message each (tag [`TAG_BULK`]), straight from the sender's buffer into the
//!   receiver's posted buffer, so the backend stripes it over its sockets or queue pairs; the
//!   frames carry the envelopes and the clear-to-send. They travel over a second connection
//!   per ordered pair of ranks (the bulk lane, [`super::links`]): the frame receives are
//!   always posted and a comm matches in order, so bulk data cannot share the frame
//!   connection. The lane is dialed by the first bulk send to a peer; each side keeps its
//!   transfers in a queue per peer, in the order the engine queued them, posts them in that
//!   order as the backend takes them (registering each buffer for the time of its transfer)
//!   and reports each once complete. A bulk receive queued before the peer's lane is
//!   accepted waits for it (accepting at every poll meanwhile). Where the backend registers
//!   device memory ([`super::Net::device_memory`], [`NetFrames::set_bulk_device`]), either end
//!   of a transfer may be a device buffer, registered as [`MemKind::Cuda`]: the NIC reads and
//!   writes it directly (GPUDirect RDMA), nothing is staged in host memory.
//! - **Gone peers**: a frame marked [`FLAG_UNLESS_GONE`] (a collective's question or answer,
//!   which its receiver may no longer need) whose dial fails because the peer has ended is
//!   dropped, and so are later such frames to it; any other frame to it is an error.
//! - **Errors**: a network error (a peer that closed, a truncated frame) ends this process
//!   with a message naming the peer, as MPI's default error handler would: the transport
//!   contract has no error path, and a job that lost a connection cannot go on.
//!
//! Counters ([`Counters`]: frames and bytes each way, network operations, aggregated ones,
//! operations to a peer on another rail, bulk transfers and their bytes each way) are logged
//! when the transport is dropped (`MPI_Finalize`), at info level (`GPUMPI_DEBUG=1`), with the
//! connections opened and accepted: the tests read them to check that off-node traffic went
//! over the network, on which rails, through bulk transfers, and that a job opened only the
//! connections its traffic needed.

use super::links::{hello, Link, Links, TAG_HELLO};
use super::{MemKind, Mr, NetError, NetResult, RecvBuf, RecvComm, Request, SendComm, WaitOn};
use crate::sys::socket::PollFd;
use crate::transport::{BulkDone, Header, Transport, FLAG_UNLESS_GONE, HEADER_BYTES};
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
    /// Connections this rank opened (to peers it sent to) and accepted (from peers that sent
    /// to it).
    pub opened: u64,
    pub accepted: u64,
    /// Connections whose other direction this rank uses: its frames to a peer that dialed it,
    /// or the frames of a peer it dialed.
    pub reversed: u64,
    /// Bulk transfers sent and received, and their bytes.
    pub bulk_sends: u64,
    pub bulk_bytes: u64,
    pub bulk_recvs: u64,
    pub bulk_bytes_in: u64,
    /// Of those, the ones sent from and received into device memory (GPUDirect RDMA).
    pub bulk_dev: u64,
    pub bulk_dev_in: u64,
}
/// Tag of the engine's frames.
const TAG_FRAME: i32 = 0;
/// Tag of bulk data.
use super::TAG_BULK;
/// Most frames one [`Transport::poll`] delivers per peer.
const POLL_BUDGET: usize = 32;
/// A poll accepts new connections every this many polls (an accept is a system call), and at
/// every poll while a connection is being set up.
const ACCEPT_EVERY: u32 = 16;

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
    /// The hello (slot 0's first 8 bytes) is not posted yet: no frame goes before it.
    hello_due: bool,
}

/// The receive side from one peer: every slot posted, delivered in posting order.
struct Rx {
    comm: Box<dyn RecvComm>,
    mr: Mr,
    buf: Vec<u8>,
    posted: VecDeque<(usize, Request)>,
    /// The peer said goodbye (an empty message): nothing more comes, nothing is tested.
    bye: bool,
    /// A re-post failed: the receives still posted are taken, and the failure counts only if
    /// they run out before the goodbye.
    lost: Option<NetError>,
    /// The peer dialed this connection while this rank had no connection to it: this rank's
    /// first frame to it takes the connection's other direction instead of dialing.
    may_reverse: bool,
    /// The peer's frames continue there once this connection's goodbye arrived (it moved to
    /// the other direction of this rank's connection, see the module documentation).
    next: Option<Box<Rx>>,
    /// The peer moved here from a connection of its own that is not accepted yet: nothing is
    /// delivered from this one before that one's frames.
    after_old: bool,
}

/// One bulk transfer: the engine's id, the user's buffer (an address: the engine keeps it
/// valid until the transfer is reported), its length and memory kind, and once posted its
/// registration and request.
struct Bulk {
    id: u64,
    addr: usize,
    len: usize,
    /// The buffer is device memory (registered as such: GPUDirect RDMA).
    dev: bool,
    mr: Option<Mr>,
    req: Option<Request>,
}

/// The bulk transfers with one peer in one direction, in the engine's order: the first
/// `posted` are with the backend (and may complete in any order), the rest wait their turn.
#[derive(Default)]
struct BulkQueue {
    q: VecDeque<Bulk>,
    posted: usize,
}

/// The sending end of a bulk lane: the comm and its hello (boxed: the backend reads it while
/// the comm moves), posted first.
struct BulkOut {
    comm: Box<dyn SendComm>,
    hello: Box<[u8; 8]>,
    mr: Mr,
    hello_req: Option<Request>,
    hello_due: bool,
}

/// Frames to and from the off-node peers. See the module documentation.
pub struct NetFrames {
    me: usize,
    /// Bytes of one message buffer, and buffers per direction and peer.
    frame: usize,
    slots: usize,
    tx: Vec<Option<Tx>>,
    /// Peers whose send slot is open (posted by the next poll).
    open: Vec<usize>,
    /// Frames go both ways on one connection where the backend can (see the module
    /// documentation); off once every pair dialed each other ([`NetFrames::connect_all`]).
    duplex: bool,
    /// Peers this rank (the higher rank of a pair that dialed each other) moves its frames to,
    /// each with the other direction of the connection the peer dialed: done once its own
    /// connection's open slot is posted ([`NetFrames::move_sends`]).
    move_to: Vec<(usize, Box<dyn SendComm>)>,
    /// Send sides this rank moved away from: kept until the transport closes (their last
    /// messages are written by their tests, and closing the socket early could lose them).
    retired: Vec<Tx>,
    /// Rail of every rank and of this one, when known (for [`Counters::cross_rail`]).
    rails: Option<(usize, Vec<usize>)>,
    rx: Vec<Option<Rx>>,
    /// Peers with a connection either way, polled round-robin from `next`.
    peers: Vec<usize>,
    next: usize,
    /// Polls so far (accepts run every [`ACCEPT_EVERY`]).
    polls: u32,
    /// Connections completed by one step of set-up (kept to reuse its allocation).
    fresh: Vec<Link>,
    counts: Counters,
    /// This rank is closing: a peer closing its end is its goodbye.
    closing: bool,
    /// Per peer being dialed: every frame offered to it since the dial started may be dropped
    /// if it is gone ([`FLAG_UNLESS_GONE`]).
    unless_gone: Vec<bool>,
    /// Per peer: why it cannot be reached, when a dial to it failed while only such frames
    /// waited for it. Later such frames to it are dropped; any other is a fatal error.
    gone: Vec<Option<NetError>>,
    /// The smallest message the engine should move as a bulk transfer (`None`: none).
    bulk_min: Option<usize>,
    /// Bulk transfers may take device memory ([`NetFrames::set_bulk_device`]).
    bulk_device: bool,
    /// Per peer: the bulk lane to it and from it (once connected), and the transfers queued
    /// each way.
    bulk_out: Vec<Option<BulkOut>>,
    bulk_in: Vec<Option<Box<dyn RecvComm>>>,
    bulk_tx: Vec<BulkQueue>,
    bulk_rx: Vec<BulkQueue>,
    /// Peers with bulk transfers queued either way.
    bulk_peers: Vec<usize>,
    /// Connection set-up, the listener and the backend (declared last: closed after the comms).
    links: Links,
}

/// How a bulk transfer's buffer is registered.
fn mem_kind(dev: bool) -> MemKind {
    if dev {
        MemKind::Cuda
    } else {
        MemKind::Host
    }
}

/// Whether bulk transfers take device memory (GPUDirect RDMA), from `GPUMPI_NET_GDR`
/// (`setting`: `auto`, `0`, `1`; empty is `auto`) and what the backend `backend` can
/// (`can`: [`super::Net::device_memory`]), with the reason to log. `1` where the backend
/// cannot is an error naming both.
pub fn gdr_choice(setting: &str, backend: &str, can: bool) -> Result<(bool, String), String> {
    let why = |on: bool| {
        if on {
            format!("on: the {backend} backend registers device memory with the NIC")
        } else if can {
            "off (GPUMPI_NET_GDR=0)".to_string()
        } else {
            format!("off: the {backend} backend cannot take device memory")
        }
    };
    match setting.trim() {
        "" | "auto" => Ok((can, why(can))),
        "0" => Ok((false, why(false))),
        "1" if can => Ok((true, why(true))),
        "1" => Err(format!(
            "GPUMPI_NET_GDR=1: the {backend} network backend cannot take device memory \
             (ibverbs needs a dma-buf or nvidia-peermem path, GPUMPI_IB_GDR)"
        )),
        v => Err(format!("GPUMPI_NET_GDR={v}: expected auto, 0 or 1")),
    }
}

/// Ends the process on a network error: see the module documentation.
fn fatal(me: usize, e: NetError) -> ! {
    let msg = format!("gpumpi: rank {me}: network transport failed: {e}");
    tracing::error!("{msg}");
    eprintln!("{msg}");
    std::process::exit(1)
}

impl NetFrames {
    /// The frames of rank `me` of `size` over `links`; no connection exists yet: the first
    /// frame to a peer dials it, and peers that dial this rank are accepted while it polls
    /// ([`super::links`]). [`NetFrames::connect_all`] opens them all at once instead.
    pub fn new(links: Links, me: usize, size: usize) -> NetFrames {
        let dev_slots = links
            .net()
            .devices()
            .first()
            .map_or(SLOTS, |d| d.max_requests);
        NetFrames {
            me,
            frame: SLOT_BYTES,
            slots: SLOTS.min(dev_slots).max(1),
            tx: (0..size).map(|_| None).collect(),
            rx: (0..size).map(|_| None).collect(),
            open: Vec::new(),
            duplex: true,
            move_to: Vec::new(),
            retired: Vec::new(),
            rails: None,
            peers: Vec::new(),
            next: 0,
            polls: 0,
            fresh: Vec::new(),
            counts: Counters::default(),
            closing: false,
            unless_gone: vec![false; size],
            gone: (0..size).map(|_| None).collect(),
            bulk_min: None,
            bulk_device: false,
            bulk_out: (0..size).map(|_| None).collect(),
            bulk_in: (0..size).map(|_| None).collect(),
            bulk_tx: (0..size).map(|_| BulkQueue::default()).collect(),
            bulk_rx: (0..size).map(|_| BulkQueue::default()).collect(),
            bulk_peers: Vec::new(),
            links,
        }
    }

    /// Offers bulk transfers to the engine for rendezvous messages of at least `min` bytes
    /// (`None`: none; the default). Bulk sends a peer asks for are made either way.
    pub fn set_bulk_min(&mut self, min: Option<usize>) {
        self.bulk_min = min;
    }

    /// The network backend.
    pub fn backend(&self) -> &dyn super::Net {
        self.links.net()
    }

    /// Lets bulk transfers send from and receive into device memory (registered with the
    /// backend as [`MemKind::Cuda`]: GPUDirect RDMA). Only for a backend whose
    /// [`super::Net::device_memory`] holds ([`gdr_choice`] decides).
    pub fn set_bulk_device(&mut self, on: bool) {
        self.bulk_device = on;
    }

    /// For tests: bulk sends to `peer` with the backend, bulk receives from it with the
    /// backend, and whether its bulk lane to this rank is accepted.
    #[cfg(test)]
    pub(crate) fn bulk_state(&self, peer: usize) -> (usize, usize, bool) {
        (
            self.bulk_tx[peer].posted,
            self.bulk_rx[peer].posted,
            self.bulk_in[peer].is_some(),
        )
    }

    /// For tests: [`Transport::bulk_poll`] with its error returned instead of ending the
    /// process.
    #[cfg(test)]
    pub(crate) fn try_bulk_poll(&mut self, f: &mut dyn FnMut(BulkDone)) -> NetResult<usize> {
        self.bulk_step(f)
    }

    /// For tests: closes the bulk lane to `peer` (as when this process dies) and forgets the
    /// bulk transfers queued with every peer.
    #[cfg(test)]
    pub(crate) fn cut_bulk_lane(&mut self, peer: usize, forget: bool) {
        self.bulk_out[peer] = None;
        if forget {
            self.bulk_tx
                .iter_mut()
                .for_each(|q| *q = BulkQueue::default());
            self.bulk_rx
                .iter_mut()
                .for_each(|q| *q = BulkQueue::default());
            self.bulk_peers.clear();
        }
    }

    /// Opens the connections both ways with every rank of `remote` now (`GPUMPI_NET_CONNECT=eager`):
    /// collective over those ranks and this one (each dials the others and waits to be dialed
    /// by them); fails after `timeout` naming the missing peers.
    pub fn connect_all(&mut self, remote: &[usize], timeout: Duration) -> NetResult<()> {
        let me = self.me;
        // Both ends dial: neither direction of a connection is used the other way.
        self.duplex = false;
        for &p in remote {
            self.links.dial(p, false)?;
        }
        let end = Instant::now() + timeout;
        loop {
            let mut moved = self.step_links(true)?;
            let mut done = true;
            for &p in remote {
                match self.tx[p].as_mut() {
                    Some(t) => {
                        let due = t.hello_due;
                        done &= t.say_hello()?;
                        moved |= due && !t.hello_due;
                    }
                    None => done = false,
                }
                done &= self.rx[p].is_some();
            }
            if done {
                break;
            }
            if Instant::now() > end {
                let missing: Vec<usize> = remote
                    .iter()
                    .copied()
                    .filter(|&p| {
                        self.tx[p].as_ref().is_none_or(|t| t.hello_due) || self.rx[p].is_none()
                    })
                    .collect();
                return Err(NetError::new(format!(
                    "net: rank {me}: connections with ranks {missing:?} not set up within {timeout:?}"
                )));
            }
            if !moved {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        tracing::debug!(
            "net: rank {me}: connected to {} off-node peers ({} buffers of {} bytes each way)",
            remote.len(),
            self.slots,
            self.frame
        );
        Ok(())
    }

    /// Moves connection set-up along ([`Links::progress`]) and gives every new connection its
    /// frame buffers; whether anything moved.
    fn step_links(&mut self, accept: bool) -> NetResult<bool> {
        let mut got = std::mem::take(&mut self.fresh);
        let (rx, bin) = (&self.rx, &self.bulk_in);
        let moved = self.links.progress(
            accept,
            &|p, bulk| {
                if bulk {
                    bin[p].is_some()
                } else {
                    // A receive side held for the peer's own connection is not a second one.
                    rx[p].as_ref().is_some_and(|r| !r.after_old)
                }
            },
            &mut got,
        );
        for l in got.drain(..) {
            let p = match l {
                Link::Out(p, true, c) => {
                    self.bulk_out[p] = Some(BulkOut::new(c, self.me)?);
                    continue;
                }
                Link::In(p, true, c) => {
                    self.bulk_in[p] = Some(c);
                    continue;
                }
                Link::Failed(p, true, e) => {
                    if !self.closing {
                        return Err(e);
                    }
                    // Closing: what was queued for that peer will not go anywhere.
                    self.bulk_tx[p] = BulkQueue::default();
                    continue;
                }
                Link::Out(p, false, mut c) => {
                    // The peer answers on this connection unless it dialed this rank too and
                    // is the lower rank (see the module documentation).
                    let back = if self.duplex && (self.rx[p].is_none() || self.me < p) {
                        c.reverse()?
                    } else {
                        None
                    };
                    self.tx[p] = Some(Tx::new(c, self.frame, self.slots, self.me, false)?);
                    if let Some(b) = back {
                        self.links.await_back(p, b)?;
                    }
                    p
                }
                Link::In(p, false, c) => {
                    self.accepted_from(p, c)?;
                    p
                }
                Link::Back(p, moved, c) => {
                    let mut r = Rx::new(c, self.frame, self.slots)?;
                    self.counts.reversed += 1;
                    match self.rx[p].as_mut() {
                        None => {
                            r.after_old = moved;
                            self.rx[p] = Some(r);
                        }
                        Some(old) if moved && old.next.is_none() && !old.after_old => {
                            old.next = Some(Box::new(r));
                        }
                        Some(_) => {
                            return Err(NetError::new(format!(
                                "net: rank {}: rank {p} answered on a second connection",
                                self.me
                            )))
                        }
                    }
                    p
                }
                Link::Failed(p, false, e) => {
                    if !self.unless_gone[p] {
                        return Err(e);
                    }
                    self.peer_gone(p, e);
                    continue;
                }
            };
            if !self.peers.contains(&p) {
                self.peers.push(p);
            }
        }
        self.fresh = got;
        moved
    }

    /// Takes the frame connection `c` that peer `p` dialed. A pair that dials each other at
    /// once keeps the lower rank's connection for both directions: the higher rank gives up
    /// its dial in flight (frames wait in the engine) and sends on `c`'s other direction, or
    /// moves there once its own connection is up ([`NetFrames::move_to`]); the lower rank
    /// closes the other direction of `c`.
    fn accepted_from(&mut self, p: usize, c: Box<dyn RecvComm>) -> NetResult<()> {
        let mut r = Rx::new(c, self.frame, self.slots)?;
        let dialing = self.links.dialing(p, false);
        // The peer moved to the other direction of this rank's connection before this, its
        // own, was accepted: this one's frames come first.
        let held = self.rx[p].take();
        if held.is_none() && self.duplex && self.tx[p].is_none() && !dialing {
            r.may_reverse = true;
        } else if let Some(rev) = r.comm.reverse()? {
            if held.is_none() && self.duplex && self.me > p {
                if dialing {
                    self.links.stop_dialing_to(p);
                    self.tx[p] = Some(self.back_tx(rev, false)?);
                } else {
                    self.move_to.push((p, rev));
                }
            }
            // Otherwise dropped unused: the lower rank keeps its own connection, and closing
            // the other direction of the peer's ends the peer's wait for frames there.
        }
        if let Some(h) = held {
            debug_assert!(h.after_old);
            r.next = Some(Box::new(Rx {
                after_old: false,
                ..h
            }));
        }
        self.rx[p] = Some(r);
        Ok(())
    }

    /// The send side of a connection's other direction (`moved`: see [`Tx::new`]), counted.
    fn back_tx(&mut self, c: Box<dyn SendComm>, moved: bool) -> NetResult<Tx> {
        self.counts.reversed += 1;
        Tx::new(c, self.frame, self.slots, self.me, moved)
    }

    /// Moves this rank's frames to a peer onto the other direction of the peer's connection
    /// ([`NetFrames::move_to`]) once its own connection's open slot is posted: a goodbye
    /// ends the old connection behind the frames it carried, and the new one's hello says
    /// that the peer is to deliver those first.
    fn move_sends(&mut self) {
        let mut i = 0;
        while i < self.move_to.len() {
            let p = self.move_to[i].0;
            let t = self.tx[p]
                .as_mut()
                .expect("a rank moves off a connection it has");
            let bye = match t.say_hello() {
                Ok(true) if !self.open.contains(&p) => {
                    // SAFETY: an empty message reads nothing.
                    unsafe { t.comm.isend(t.buf.as_ptr(), 0, TAG_FRAME, t.mr) }
                }
                Ok(_) => Ok(None),
                Err(e) => Err(e),
            };
            match bye {
                Ok(Some(q)) => t.inflight.push_back((0, q)),
                Ok(None) => {
                    i += 1;
                    continue;
                }
                Err(e) => fatal(self.me, e),
            }
            let (_, rev) = self.move_to.swap_remove(i);
            match self.back_tx(rev, true) {
                Ok(new) => {
                    let old = self.tx[p].replace(new).expect("checked above");
                    self.retired.push(old);
                }
                Err(e) => fatal(self.me, e),
            }
        }
    }

    /// A dial to `p` failed with `e`: fatal unless every frame waiting for `p` may be dropped,
    /// in which case `p` counts as gone (see [`NetFrames::try_send`]).
    fn peer_gone(&mut self, p: usize, e: NetError) {
        if !self.unless_gone[p] {
            fatal(self.me, e);
        }
        tracing::debug!(
            "net: rank {}: {e}; dropping the questions and answers for it",
            self.me
        );
        self.gone[p] = Some(e);
    }

    /// What went over the network so far.
    pub fn counts(&self) -> Counters {
        Counters {
            opened: self.links.opened().len() as u64,
            accepted: self.links.accepted().len() as u64,
            ..self.counts
        }
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

impl BulkOut {
    /// The sending end of a new bulk lane; its hello goes first.
    fn new(mut comm: Box<dyn SendComm>, me: usize) -> NetResult<BulkOut> {
        let hello = Box::new(hello(me, true, false));
        let mr = comm.reg_mr(hello.as_ptr(), 8, MemKind::Host)?;
        let mut o = BulkOut {
            comm,
            hello,
            mr,
            hello_req: None,
            hello_due: true,
        };
        o.say_hello()?;
        Ok(o)
    }

    /// Posts the hello if it is due, and tests it once posted; whether it is posted (no bulk
    /// message goes before it).
    fn say_hello(&mut self) -> NetResult<bool> {
        if self.hello_due {
            // SAFETY: the boxed hello lies in its registration and lives as long as the comm.
            match unsafe { self.comm.isend(self.hello.as_ptr(), 8, TAG_HELLO, self.mr) }? {
                Some(q) => {
                    self.hello_req = Some(q);
                    self.hello_due = false;
                }
                None => return Ok(false),
            }
        }
        if let Some(q) = self.hello_req {
            if self.comm.test(q)?.is_some() {
                self.hello_req = None;
            }
        }
        Ok(true)
    }
}

impl NetFrames {
    /// Posts the bulk transfers queued with peer `p` that the backend takes now, in order.
    fn bulk_post(&mut self, p: usize) -> NetResult<()> {
        if let Some(o) = self.bulk_out[p].as_mut() {
            let tq = &mut self.bulk_tx[p];
            if tq.posted < tq.q.len() && o.say_hello()? {
                while let Some(b) = tq.q.get_mut(tq.posted) {
                    let mr = match b.mr {
                        Some(mr) => mr,
                        None => *b.mr.insert(o.comm.reg_mr(
                            b.addr as *const u8,
                            b.len,
                            mem_kind(b.dev),
                        )?),
                    };
                    // SAFETY: the engine keeps the buffer readable and unchanged until the
                    // transfer is reported complete (`bulk_send`'s contract); it lies in `mr`.
                    match unsafe { o.comm.isend(b.addr as *const u8, b.len, TAG_BULK, mr) }? {
                        Some(q) => {
                            b.req = Some(q);
                            tq.posted += 1;
                        }
                        None => break,
                    }
                }
            }
        }
        if let Some(c) = self.bulk_in[p].as_mut() {
            let rq = &mut self.bulk_rx[p];
            while let Some(b) = rq.q.get_mut(rq.posted) {
                let mr = match b.mr {
                    Some(mr) => mr,
                    None => *b
                        .mr
                        .insert(c.reg_mr(b.addr as *const u8, b.len, mem_kind(b.dev))?),
                };
                let rb = RecvBuf {
                    ptr: b.addr as *mut u8,
                    size: b.len,
                    tag: TAG_BULK,
                    mr,
                };
                // SAFETY: the engine keeps the buffer for this transfer alone until it is
                // reported complete (`bulk_recv`'s contract); it lies in `mr`.
                match unsafe { c.irecv(&[rb]) }? {
                    Some(q) => {
                        b.req = Some(q);
                        rq.posted += 1;
                    }
                    None => break,
                }
            }
        }
        Ok(())
    }

    /// Tests the posted bulk transfers with peer `p`, handing the completed ones to `f`;
    /// returns how many completed.
    fn bulk_test(&mut self, p: usize, f: &mut dyn FnMut(BulkDone)) -> NetResult<usize> {
        let mut n = 0;
        if let Some(o) = self.bulk_out[p].as_mut() {
            let tq = &mut self.bulk_tx[p];
            let mut k = 0;
            while k < tq.posted {
                let b = &tq.q[k];
                let (Some(q), Some(mr)) = (b.req, b.mr) else {
                    unreachable!("a posted bulk send has a request")
                };
                if o.comm.test(q)?.is_none() {
                    k += 1;
                    continue;
                }
                o.comm.dereg_mr(mr)?;
                let b = tq.q.remove(k).expect("the bulk send just tested");
                tq.posted -= 1;
                self.counts.bulk_sends += 1;
                self.counts.bulk_bytes += b.len as u64;
                self.counts.bulk_dev += u64::from(b.dev);
                f(BulkDone {
                    peer: p,
                    id: b.id,
                    send: true,
                    bytes: b.len,
                });
                n += 1;
            }
        }
        if let Some(c) = self.bulk_in[p].as_mut() {
            let rq = &mut self.bulk_rx[p];
            let mut k = 0;
            while k < rq.posted {
                let b = &rq.q[k];
                let (Some(q), Some(mr)) = (b.req, b.mr) else {
                    unreachable!("a posted bulk receive has a request")
                };
                let mut size = [0usize];
                if !c.test(q, &mut size)? {
                    k += 1;
                    continue;
                }
                c.dereg_mr(mr)?;
                let b = rq.q.remove(k).expect("the bulk receive just tested");
                rq.posted -= 1;
                if size[0] != b.len {
                    return Err(NetError::new(format!(
                        "net: a bulk message of {} bytes from {} where {} were asked for",
                        size[0],
                        c.peer(),
                        b.len
                    )));
                }
                self.counts.bulk_recvs += 1;
                self.counts.bulk_bytes_in += b.len as u64;
                self.counts.bulk_dev_in += u64::from(b.dev);
                f(BulkDone {
                    peer: p,
                    id: b.id,
                    send: false,
                    bytes: b.len,
                });
                n += 1;
            }
        }
        Ok(n)
    }

    /// Posts and tests the bulk transfers of every peer with some queued (see
    /// [`Transport::bulk_poll`]); returns how many completed. A network error is returned
    /// naming the peer (the caller ends the process), except while closing, when that peer's
    /// transfers are given up.
    fn bulk_step(&mut self, f: &mut dyn FnMut(BulkDone)) -> NetResult<usize> {
        let mut done = 0;
        let mut i = 0;
        while i < self.bulk_peers.len() {
            let p = self.bulk_peers[i];
            match self.bulk_post(p).and_then(|_| self.bulk_test(p, f)) {
                Ok(n) => done += n,
                Err(e) if self.closing => {
                    tracing::debug!("net: rank {}: bulk data with rank {p}: {e}", self.me);
                    self.bulk_tx[p] = BulkQueue::default();
                    self.bulk_rx[p] = BulkQueue::default();
                }
                Err(e) => {
                    return Err(NetError::new(format!(
                        "net: rank {}: bulk data with rank {p}: {e}",
                        self.me
                    )))
                }
            }
            if self.bulk_tx[p].q.is_empty() && self.bulk_rx[p].q.is_empty() {
                self.bulk_peers.swap_remove(i);
            } else {
                i += 1;
            }
        }
        Ok(done)
    }

    /// Whether a bulk receive waits for a peer's bulk lane to be accepted.
    fn bulk_waiting(&self) -> bool {
        self.bulk_peers
            .iter()
            .any(|&p| self.bulk_in[p].is_none() && !self.bulk_rx[p].q.is_empty())
    }

    /// Queues the bulk transfer `id` of `len` bytes at `addr` (device memory when `dev`) with
    /// peer `p` (`send`: to it) and posts what can go now. False: this transport cannot take it.
    fn bulk_queue(
        &mut self,
        p: usize,
        send: bool,
        id: u64,
        addr: usize,
        len: usize,
        dev: bool,
    ) -> bool {
        if p == self.me
            || p >= self.tx.len()
            || !self.links.reaches(p)
            || (dev && !self.bulk_device)
        {
            return false;
        }
        let b = Bulk {
            id,
            addr,
            len,
            dev,
            mr: None,
            req: None,
        };
        if send {
            if self.bulk_out[p].is_none() && !self.links.dialing(p, true) {
                if let Err(e) = self.links.dial(p, true) {
                    fatal(self.me, e);
                }
            }
            self.bulk_tx[p].q.push_back(b);
        } else {
            self.bulk_rx[p].q.push_back(b);
        }
        if !self.bulk_peers.contains(&p) {
            self.bulk_peers.push(p);
        }
        if let Err(e) = self.bulk_post(p) {
            fatal(
                self.me,
                NetError::new(format!(
                    "net: rank {}: bulk data with rank {p}: {e}",
                    self.me
                )),
            );
        }
        true
    }
}

impl Tx {
    /// The send side of a new connection; its hello (this rank's number, `me`) goes first,
    /// from slot 0, which is freed like a frame's once the hello is sent.
    /// `moved`: this rank moves its frames to the peer here from a connection it dialed
    /// ([`super::links::MOVED_BIT`]).
    fn new(
        mut comm: Box<dyn SendComm>,
        frame: usize,
        slots: usize,
        me: usize,
        moved: bool,
    ) -> NetResult<Tx> {
        let mut buf = vec![0u8; frame * slots];
        buf[..8].copy_from_slice(&hello(me, false, moved));
        let mr = comm.reg_mr(buf.as_ptr(), buf.len(), MemKind::Host)?;
        let mut t = Tx {
            comm,
            mr,
            buf,
            inflight: VecDeque::with_capacity(slots),
            next: 1 % slots,
            open: None,
            hello_due: true,
        };
        t.say_hello()?;
        Ok(t)
    }

    /// Posts the hello if it is due; whether it is posted (a backend with receiver-posted
    /// credits takes it once the peer accepted and posted the hello's receive).
    fn say_hello(&mut self) -> NetResult<bool> {
        if !self.hello_due {
            return Ok(true);
        }
        // SAFETY: slot 0 lies in the registered buffer and is not written again until this
        // send is reaped (it is in `inflight` like a frame's slot).
        match unsafe { self.comm.isend(self.buf.as_ptr(), 8, TAG_HELLO, self.mr) }? {
            Some(q) => {
                self.inflight.push_back((0, q));
                self.hello_due = false;
                Ok(true)
            }
            None => Ok(false),
        }
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
            lost: None,
            may_reverse: false,
            next: None,
            after_old: false,
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

impl NetFrames {
    /// [`Transport::try_send`] (`at_once`: a frame to a peer with nothing in flight is posted
    /// now) and [`Transport::try_send_held`] (it waits for the next flush).
    fn append(&mut self, dst: usize, hdr: &Header, payload: &[u8], at_once: bool) -> bool {
        let me = self.me;
        let frame = self.frame;
        debug_assert!(payload.len() <= MAX_PAYLOAD);
        let need = record_len(payload.len());
        // The first frame to a peer that dialed this rank goes on that connection's other
        // direction.
        if self.tx[dst].is_none() {
            if let Some(r) = self.rx[dst].as_mut().filter(|r| r.may_reverse) {
                r.may_reverse = false;
                match r
                    .comm
                    .reverse()
                    .and_then(|c| c.map(|c| self.back_tx(c, false)).transpose())
                {
                    Ok(t) => self.tx[dst] = t,
                    Err(e) => fatal(me, e),
                }
            }
        }
        // The first frame to any other peer dials it; frames wait (in the engine) until it is
        // up. A question or answer to a peer that turns out to be gone is dropped.
        let Some(t) = self.tx[dst].as_mut() else {
            let droppable = hdr.flags & FLAG_UNLESS_GONE != 0;
            if let Some(e) = &self.gone[dst] {
                if droppable {
                    return true;
                }
                fatal(me, e.clone());
            }
            if self.links.dialing(dst, false) {
                self.unless_gone[dst] &= droppable;
            } else {
                self.unless_gone[dst] = droppable;
                if let Err(e) = self.links.dial(dst, false) {
                    self.peer_gone(dst, e);
                    return true;
                }
            }
            return false;
        };
        match t.say_hello() {
            Ok(true) => {}
            Ok(false) => return false,
            Err(e) => fatal(me, e),
        }
        let full = t.open.is_some_and(|(_, used, _)| used + need > frame);
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
        // Nothing in flight to this peer: no reason to wait for more frames (unless the caller
        // holds them for others it is about to write).
        if at_once && idle && self.post_open(dst) {
            if let Some(i) = self.open.iter().position(|&p| p == dst) {
                self.open.swap_remove(i);
            }
        }
        true
    }
}

impl Transport for NetFrames {
    fn max_payload(&self) -> usize {
        MAX_PAYLOAD
    }

    fn bulk_min(&self, peer: usize) -> Option<usize> {
        self.bulk_min.filter(|_| self.net_direct(peer))
    }

    fn net_direct(&self, peer: usize) -> bool {
        peer != self.me && self.links.reaches(peer)
    }

    fn bulk_device(&self, peer: usize) -> bool {
        self.bulk_device && self.bulk_min(peer).is_some()
    }

    /// The backend's registration of device memory on the device of the links (the one every
    /// bulk lane uses), so a buffer that passes hits the backend's cache when its transfer
    /// registers it.
    fn device_registration(&self) -> Option<crate::transport::RegCheck> {
        self.links.net().device_registration(self.links.dev())
    }

    unsafe fn bulk_send(
        &mut self,
        dst: usize,
        id: u64,
        data: *const u8,
        len: usize,
        dev: bool,
    ) -> bool {
        self.bulk_queue(dst, true, id, data as usize, len, dev)
    }

    unsafe fn bulk_recv(
        &mut self,
        src: usize,
        id: u64,
        buf: *mut u8,
        len: usize,
        dev: bool,
    ) -> bool {
        self.bulk_queue(src, false, id, buf as usize, len, dev)
    }

    fn bulk_poll(&mut self, f: &mut dyn FnMut(BulkDone)) -> usize {
        if self.bulk_peers.is_empty() {
            return 0;
        }
        match self.bulk_step(f) {
            Ok(n) => n,
            Err(e) => fatal(self.me, e),
        }
    }

    /// The comms' descriptors ([`super::WaitOn::Fd`]); complete unless a connection is being
    /// set up or accepted, a slot waits to be posted, the transport is closing, or a comm
    /// progresses where no descriptor shows it ([`super::WaitOn::Polled`]).
    fn wait_fds(&self, out: &mut Vec<PollFd>) -> bool {
        if self.closing
            || self.links.busy()
            || !self.open.is_empty()
            || self.bulk_waiting()
            || !self.move_to.is_empty()
            || !self.links.wait_fds(out)
        {
            return false;
        }
        let sends = self.tx.iter().flatten().map(|t| {
            if t.hello_due {
                WaitOn::Polled
            } else {
                t.comm.wait_on()
            }
        });
        let recvs = self
            .rx
            .iter()
            .flatten()
            .filter(|r| !r.bye && !r.after_old)
            .map(|r| r.comm.wait_on());
        let retired = self
            .retired
            .iter()
            .filter(|t| !t.inflight.is_empty())
            .map(|t| t.comm.wait_on());
        let bulk_sends = self.bulk_out.iter().flatten().map(|b| b.comm.wait_on());
        let bulk_recvs = self.bulk_in.iter().flatten().map(|c| c.wait_on());
        let all = sends
            .chain(recvs)
            .chain(retired)
            .chain(bulk_sends)
            .chain(bulk_recvs);
        super::wait_fds(all, out)
    }

    /// Every peer of this transport is on another node.
    fn same_node(&self, peer: usize) -> bool {
        peer == self.me
    }

    /// A frame connection this rank dialed (up or being set up; the bulk lane carries no
    /// frames).
    fn has_channel(&self, peer: usize) -> bool {
        self.tx[peer].is_some() || self.links.dialing(peer, false)
    }

    fn try_send(&mut self, dst: usize, hdr: &Header, payload: &[u8]) -> bool {
        self.append(dst, hdr, payload, true)
    }

    /// The frame waits in the peer's open slot even when nothing is in flight to it, so that
    /// frames written to the same peer until [`Transport::post_held`] (or the next poll)
    /// leave with it as one network operation.
    fn try_send_held(&mut self, dst: usize, hdr: &Header, payload: &[u8]) -> bool {
        self.append(dst, hdr, payload, false)
    }

    fn post_held(&mut self) {
        self.flush();
    }

    fn poll(&mut self, f: &mut dyn FnMut(usize, &Header, &[u8])) -> usize {
        self.polls = self.polls.wrapping_add(1);
        let accept = self.closing
            || self.links.busy()
            || self.polls.is_multiple_of(ACCEPT_EVERY)
            || self.bulk_waiting();
        match self.step_links(accept) {
            Err(e) if !self.closing => fatal(self.me, e),
            _ => {}
        }
        self.flush();
        if !self.move_to.is_empty() {
            self.move_sends();
        }
        for t in &mut self.retired {
            match t.reap() {
                Err(e) if !self.closing => fatal(self.me, e),
                Err(_) => t.inflight.clear(),
                Ok(()) => {}
            }
        }
        let n = self.peers.len();
        let mut delivered = 0;
        for i in 0..n {
            let p = self.peers[(self.next + i) % n];
            // Sends progress through `test` (the backend writes headers from this thread).
            if let Some(t) = self.tx[p].as_mut() {
                match t.reap().and_then(|_| t.say_hello()) {
                    Err(e) if !self.closing => fatal(self.me, e),
                    _ => {}
                }
            }
            // A connection the peer moved away from ends with a goodbye; its frames continue
            // on the next one.
            if let Some(r) = self.rx[p].as_mut() {
                if r.bye {
                    if let Some(next) = r.next.take() {
                        self.rx[p] = Some(*next);
                    }
                }
            }
            let Some(r) = self.rx[p].as_mut().filter(|r| !r.bye && !r.after_old) else {
                continue;
            };
            for _ in 0..POLL_BUDGET {
                let Some(&(s, q)) = r.posted.front() else {
                    match r.lost.take() {
                        Some(_) if self.closing => r.bye = true,
                        Some(e) => fatal(self.me, e),
                        None => {}
                    }
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
                // A peer ends once its goodbye is written, so the credit this re-post writes
                // may fail while its last frames and goodbye wait in the receives still
                // posted: those are taken first (see `Rx::lost`).
                if r.lost.is_none() {
                    if let Err(e) = r.post(s, self.frame) {
                        r.lost = Some(e);
                    }
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
        let mut sink = |_: usize, _: &Header, _: &[u8]| {};
        // From here on a peer closing its end is its goodbye (see the module documentation).
        self.closing = true;
        // A dial still in flight carries nothing (frames wait in the engine until it is up).
        self.links.stop_dialing();
        // Frames to a peer stay on the connection they went on so far: the goodbye goes there
        // too (dropping the other direction closes it, which ends the peer's wait for it).
        self.move_to.clear();
        // Per peer with a send comm: its goodbye's request and whether it completed.
        let mut said: Vec<Option<(Request, bool)>> = (0..self.tx.len()).map(|_| None).collect();
        loop {
            self.poll(&mut sink);
            // Closing: errors give the peer's transfers up (see `bulk_step`).
            let _ = self.bulk_step(&mut |_| {});
            let mut done = !self.links.busy() && self.open.is_empty();
            for (p, (tx, said_p)) in self.tx.iter_mut().zip(said.iter_mut()).enumerate() {
                let Some(t) = tx.as_mut() else {
                    continue;
                };
                match said_p.as_mut() {
                    // The hello and the frames in flight first, then the goodbye.
                    None => {
                        done = false;
                        let ready = t.say_hello().map(|up| up && t.reap().is_ok());
                        let q = match ready {
                            Ok(true)
                                if t.inflight.is_empty()
                                    && !self.open.contains(&p)
                                    && self.bulk_tx[p].q.is_empty() =>
                            {
                                // SAFETY: an empty message reads nothing.
                                unsafe { t.comm.isend(t.buf.as_ptr(), 0, TAG_FRAME, t.mr) }
                            }
                            Ok(_) => Ok(None),
                            Err(e) => Err(e),
                        };
                        match q {
                            Ok(Some(q)) => *said_p = Some((q, false)),
                            Ok(None) => {}
                            // The peer is gone: nothing more to say to it.
                            Err(_) => *said_p = Some((Request { slot: 0, gen: 0 }, true)),
                        }
                    }
                    // A completed request reports its size once (its slot is then reused).
                    Some((q, ok)) => {
                        if !*ok {
                            *ok = t.comm.test(*q).map_or(true, |n| n.is_some());
                        }
                        done &= *ok;
                    }
                }
            }
            done &= self.rx.iter().flatten().all(|r| r.bye && r.next.is_none());
            done &= self.retired.iter().all(|t| t.inflight.is_empty());
            done &= self.bulk_peers.is_empty();
            if done {
                return Ok(());
            }
            if Instant::now() > end {
                let waiting: Vec<usize> = (0..self.rx.len())
                    .filter(|&p| {
                        self.rx[p].as_ref().is_some_and(|r| !r.bye) || self.bulk_peers.contains(&p)
                    })
                    .collect();
                return Err(NetError::new(format!(
                    "net: rank {me}: goodbyes or bulk data of ranks {waiting:?} not received within {limit:?}"
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
        tracing::info!(
            "net: rank {}: {} connections opened (to ranks {:?}), {} accepted (from ranks {:?}), {} used both ways",
            self.me,
            self.links.opened().len(),
            self.links.opened(),
            self.links.accepted().len(),
            self.links.accepted(),
            c.reversed
        );
        if fs == 0 && fr == 0 {
            tracing::info!("net: rank {}: no frames went over the network", self.me);
        } else {
            tracing::info!(
                "net: rank {}: {fs} frames ({bs} payload bytes) sent and {fr} frames ({br} bytes) received over the network, {} off-node peers",
                self.me,
                self.peers.len()
            );
        }
        if c.bulk_sends + c.bulk_recvs > 0 {
            let (o, a) = self.links.bulk_opened();
            tracing::info!(
                "net: rank {}: {} bulk transfers ({} bytes) sent and {} bulk transfers ({} bytes) received, {o} bulk connections opened, {a} accepted",
                self.me,
                c.bulk_sends,
                c.bulk_bytes,
                c.bulk_recvs,
                c.bulk_bytes_in
            );
        }
        if c.bulk_dev + c.bulk_dev_in > 0 {
            tracing::info!(
                "net: rank {}: {} bulk transfers sent from and {} received into device memory (GPUDirect RDMA)",
                self.me,
                c.bulk_dev,
                c.bulk_dev_in
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
