//! A job on more than one node: each peer is reached through one of two transports, the
//! shared-memory rings (ranks on this node) or the network frames (`net::frames`, ranks on
//! other nodes), chosen once at set-up into a table (`link`), so a message costs one table
//! lookup and one call of the chosen transport's [`Transport`] methods.
//!
//! **PXN forwarding** (`topo::pxn`): a peer whose [`Hop`] is `Via(p)` is reached through rank
//! `p` of this node, which sits on the peer's rail. The frame goes to `p` over shared memory
//! wrapped in a forwarding frame ([`KIND_FWD`]: the outer header names the original sender in
//! `src_rank` and the destination in `tag`; its payload is the inner header and payload);
//! `p`'s `poll` passes it on to the destination over the network unchanged (queued while the
//! network is full, in arrival order), and the destination's `poll` unwraps it and delivers
//! the inner frame as from the original sender. All frames from one sender to one
//! destination take the same two hops, each first in first out, so per-sender order holds.
//! `p` combines what it forwards and what it sends itself to one peer into one network
//! operation (aggregation, `net::frames`): its own frames to a peer it forwards for wait
//! ([`Transport::try_send_held`]) until the end of the engine's call or progress pass
//! ([`Transport::post_held`]: the engine posts before it returns to the application) or its
//! next `poll`, which reads the frames to forward from its node's ranks first and posts
//! everything written to each peer once, after them. So the frames that reach `p` from several
//! ranks of its node in one progress pass, and its own written with them, leave as one
//! operation.
//! Forwarding progresses whenever the forwarding rank is inside an MPI call (the engine
//! polls); a rank that stays outside MPI delays what goes through it, as a receiver outside
//! MPI does.
//!
//! **The end of forwarding** (drop, at `MPI_Finalize` after its barrier): a rank's last frames
//! through a forwarder (its share of that barrier, say) may still wait in the forwarder's
//! shared-memory ring when the forwarder finishes its own barrier, so a forwarder must not
//! stop reading its ring at its own finalize. Each rank sends every forwarder it routes
//! through an end frame ([`KIND_FWD_END`], behind all its frames: the ring keeps a sender's
//! order) and a forwarder keeps polling, forwarding what comes, until every rank of its node
//! that sends through it ([`Routed::set_forwarded_for`]) sent its end, then until its queue
//! is out; only then does the network transport close (say its goodbyes).
//!
//! A job on one node does not use this type: the engine holds the shared-memory transport
//! itself.

use super::{BulkDone, CopyRates, Header, Transport, HEADER_BYTES};
use crate::topo::pxn::Hop;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Header kind of a forwarding frame (kinds from 0xF0 up belong to transports; the engine
/// never sees them).
pub const KIND_FWD: u8 = 0xF0;
/// Header kind of an end frame: the sender (`src_rank`) sends nothing more through this
/// forwarder (see the module documentation).
pub const KIND_FWD_END: u8 = 0xF1;
/// How long a forwarder waits at drop for the end frames of the ranks it forwards for and for
/// its queue to drain.
const END_LIMIT: Duration = Duration::from_secs(10);
/// Bytes of forwarded frames a forwarding rank queues before it stops reading its
/// shared-memory rings until the network drains some.
const PENDING_MAX: usize = 16 << 20;

/// What this rank forwarded and had forwarded (logged at `MPI_Finalize` with `GPUMPI_DEBUG=1`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PxnCounters {
    /// Frames (and their payload bytes) this rank passed on for ranks of its node.
    pub forwarded: u64,
    pub forwarded_bytes: u64,
    /// Frames this rank sent to off-node peers through a forwarding rank.
    pub via: u64,
}

/// Per-peer routing over a node-local and a network transport.
pub struct Routed {
    me: usize,
    /// `[node-local, network]`.
    parts: [Box<dyn Transport>; 2],
    /// Index into `parts` per world rank (this rank: node-local; never used for sends).
    link: Vec<u8>,
    /// The forwarding rank per world rank (`u32::MAX`: none, sent directly).
    via: Vec<u32>,
    /// Per world rank reached through a forwarder: this rank sent it a frame.
    sent_via: Vec<bool>,
    /// Per world rank: this rank forwards frames to it for ranks of its node, so its own
    /// frames to it wait for the end of the next poll ([`Routed::set_forwarded_to`]).
    gather: Vec<bool>,
    /// Frames to forward that the network did not take yet: destination, header, payload.
    pending: VecDeque<(usize, Header, Vec<u8>)>,
    pending_bytes: usize,
    /// Wrapping buffer of forwarding frames.
    scratch: Vec<u8>,
    counts: PxnCounters,
    /// No other rank is on this node (nothing arrives over shared memory).
    alone: bool,
    /// Per world rank: it sends through this rank, and it sent its end frame (`None`: no end
    /// exchange at drop, [`Routed::set_forwarded_for`] not called).
    sources: Option<Vec<(bool, bool)>>,
}

impl Routed {
    /// `remote[r]`: world rank `r` is on another node (every off-node peer reached directly).
    pub fn new(local: Box<dyn Transport>, net: Box<dyn Transport>, remote: &[bool]) -> Routed {
        let hops: Vec<Hop> = remote
            .iter()
            .map(|&r| if r { Hop::Net } else { Hop::Local })
            .collect();
        Routed::with_routes(local, net, usize::MAX, &hops)
    }

    /// Rank `me` with its routes to every world rank (`topo::pxn::routes`).
    pub fn with_routes(
        local: Box<dyn Transport>,
        net: Box<dyn Transport>,
        me: usize,
        hops: &[Hop],
    ) -> Routed {
        Routed {
            me,
            parts: [local, net],
            link: hops.iter().map(|h| (*h != Hop::Local) as u8).collect(),
            via: hops
                .iter()
                .map(|h| match h {
                    Hop::Via(p) => *p as u32,
                    _ => u32::MAX,
                })
                .collect(),
            sent_via: vec![false; hops.len()],
            gather: vec![false; hops.len()],
            pending: VecDeque::new(),
            pending_bytes: 0,
            scratch: Vec::new(),
            counts: PxnCounters::default(),
            alone: hops
                .iter()
                .enumerate()
                .all(|(r, h)| r == me || *h != Hop::Local),
            sources: None,
        }
    }

    /// The ranks of this node that send through this rank (`topo::pxn::forwarded_for`, index
    /// = world rank): at drop this rank tells its own forwarders it is done and forwards until
    /// each of these told it the same (see the module documentation).
    pub fn set_forwarded_for(&mut self, from: &[bool]) {
        self.sources = Some(from.iter().map(|&f| (f, false)).collect());
    }

    /// Some rank that sends through this rank did not send its end frame yet.
    fn sources_left(&self) -> bool {
        self.sources
            .as_ref()
            .is_some_and(|s| s.iter().any(|&(f, ended)| f && !ended))
    }

    /// The ranks this rank forwards frames to for ranks of its node (`topo::pxn::forwarded_to`,
    /// index = world rank): its own frames to them join those it forwards in one network
    /// operation per poll.
    pub fn set_forwarded_to(&mut self, to: &[bool]) {
        for (g, &t) in self.gather.iter_mut().zip(to) {
            *g = t;
        }
    }

    /// What this rank forwarded so far.
    pub fn counts(&self) -> PxnCounters {
        self.counts
    }

    fn to(&self, peer: usize) -> &dyn Transport {
        &*self.parts[self.link[peer] as usize]
    }

    fn forwards(&self) -> bool {
        self.via.iter().any(|&v| v != u32::MAX)
    }

    /// Passes queued forwarding frames to the network, in order per destination; they leave
    /// at the network's next `post_held` or poll, with whatever else was written to their
    /// destination by then.
    fn flush(&mut self) {
        let mut blocked: Vec<usize> = Vec::new();
        let mut i = 0;
        while i < self.pending.len() {
            let (d, h, p) = &self.pending[i];
            if !blocked.contains(d) && self.parts[1].try_send_held(*d, h, p) {
                self.pending_bytes -= p.len();
                self.counts.forwarded += 1;
                self.counts.forwarded_bytes += (p.len() - HEADER_BYTES) as u64;
                self.pending.remove(i);
            } else {
                if !blocked.contains(d) {
                    blocked.push(*d);
                }
                i += 1;
            }
        }
    }
}

/// The inner header at the start of a forwarding frame's payload.
fn inner(payload: &[u8]) -> Option<Header> {
    // SAFETY: Header is plain data (any bit pattern valid), read unaligned from a slice of at
    // least HEADER_BYTES bytes.
    (payload.len() >= HEADER_BYTES)
        .then(|| unsafe { std::ptr::read_unaligned(payload.as_ptr() as *const Header) })
}

impl Transport for Routed {
    /// The network's held frames (this rank's own, to peers it forwards for, and forwarded
    /// ones) leave now.
    fn post_held(&mut self) {
        self.parts[1].post_held();
    }

    fn max_payload(&self) -> usize {
        let m = self.parts[0].max_payload().min(self.parts[1].max_payload());
        // A forwarded frame carries its inner header in the payload.
        if self.forwards() {
            m - HEADER_BYTES
        } else {
            m
        }
    }

    /// A peer reached directly over the network takes the network's frames; through a
    /// forwarder or over shared memory, [`Transport::max_payload`].
    fn max_payload_to(&self, dst: usize) -> usize {
        match (self.link.get(dst), self.via.get(dst)) {
            (Some(1), Some(&u32::MAX)) => self.parts[1].max_payload_to(dst),
            _ => self.max_payload(),
        }
    }

    fn try_send(&mut self, dst: usize, hdr: &Header, payload: &[u8]) -> bool {
        let v = self.via[dst];
        if v == u32::MAX {
            let part = &mut self.parts[self.link[dst] as usize];
            return match self.gather[dst] {
                true => part.try_send_held(dst, hdr, payload),
                false => part.try_send(dst, hdr, payload),
            };
        }
        let outer = Header {
            kind: KIND_FWD,
            src_rank: self.me as i32,
            tag: dst as i32,
            total: payload.len() as u64,
            ..Default::default()
        };
        self.scratch.clear();
        // SAFETY: Header is repr(C) plain data of HEADER_BYTES bytes.
        let hb =
            unsafe { std::slice::from_raw_parts(hdr as *const Header as *const u8, HEADER_BYTES) };
        self.scratch.extend_from_slice(hb);
        self.scratch.extend_from_slice(payload);
        let ok = self.parts[0].try_send(v as usize, &outer, &self.scratch);
        self.counts.via += ok as u64;
        self.sent_via[dst] |= ok;
        ok
    }

    /// A direct peer's frame waits in its part ([`Transport::try_send_held`]); a forwarded
    /// one goes as [`Transport::try_send`] does.
    fn try_send_held(&mut self, dst: usize, hdr: &Header, payload: &[u8]) -> bool {
        if self.via[dst] == u32::MAX {
            return self.parts[self.link[dst] as usize].try_send_held(dst, hdr, payload);
        }
        self.try_send(dst, hdr, payload)
    }

    /// Node-local frames first: the frames to forward that arrive in this pass are written
    /// to the network after this rank's own held ones, and each peer's are posted once.
    fn poll(&mut self, f: &mut dyn FnMut(usize, &Header, &[u8])) -> usize {
        self.flush();
        let mut n = 0;
        if self.pending_bytes <= PENDING_MAX {
            let Routed {
                parts,
                pending,
                pending_bytes,
                sources,
                ..
            } = self;
            n += parts[0].poll(&mut |s, h, p| {
                if h.kind == KIND_FWD_END {
                    if let Some(e) = sources.as_mut().and_then(|v| v.get_mut(s)) {
                        e.1 = true;
                    }
                    return;
                }
                if h.kind != KIND_FWD {
                    return f(s, h, p);
                }
                match inner(p) {
                    Some(_) => {
                        *pending_bytes += p.len();
                        pending.push_back((h.tag as usize, *h, p.to_vec()));
                    }
                    None => tracing::error!("pxn: short forwarding frame from rank {s}"),
                }
            });
        }
        if !self.pending.is_empty() {
            self.flush();
        }
        self.parts[1].post_held();
        n += self.parts[1].poll(&mut |s, h, p| {
            if h.kind != KIND_FWD {
                return f(s, h, p);
            }
            // The original sender's frame, passed on by its node's forwarder.
            match inner(p) {
                Some(ih) => f(h.src_rank as usize, &ih, &p[HEADER_BYTES..]),
                None => tracing::error!("pxn: short forwarding frame from rank {s}"),
            }
        });
        n
    }

    fn same_node(&self, peer: usize) -> bool {
        self.link[peer] == 0
    }

    /// The network part's descriptors; complete only for a rank alone on its node with
    /// nothing waiting to be forwarded (frames from node-local peers show on no descriptor).
    fn wait_fds(&self, out: &mut Vec<crate::sys::socket::PollFd>) -> bool {
        self.alone && self.pending.is_empty() && self.parts[1].wait_fds(out)
    }

    /// Bulk transfers are offered (the receiver's choice) only with off-node peers reached
    /// directly; a peer reached through a forwarder is on another rail.
    fn bulk_min(&self, peer: usize) -> Option<usize> {
        self.net_direct(peer)
            .then(|| self.parts[1].bulk_min(peer))
            .flatten()
    }

    fn net_direct(&self, peer: usize) -> bool {
        self.link[peer] == 1 && self.via[peer] == u32::MAX && self.parts[1].net_direct(peer)
    }

    /// Device memory in bulk transfers: as the network transport says for off-node peers (a
    /// bulk send goes straight to the receiver, see below).
    fn bulk_device(&self, peer: usize) -> bool {
        self.link[peer] == 1 && self.parts[1].bulk_device(peer)
    }

    /// The network transport's (the only one with bulk transfers).
    fn device_registration(&self) -> Option<super::RegCheck> {
        self.parts[1].device_registration()
    }

    /// A bulk send goes straight over the network to any off-node peer (the receiver asked
    /// for it, so it reaches this rank directly).
    unsafe fn bulk_send(
        &mut self,
        dst: usize,
        id: u64,
        data: *const u8,
        len: usize,
        dev: bool,
    ) -> bool {
        // SAFETY: the caller's contract.
        self.link[dst] == 1 && unsafe { self.parts[1].bulk_send(dst, id, data, len, dev) }
    }

    unsafe fn bulk_recv(
        &mut self,
        src: usize,
        id: u64,
        buf: *mut u8,
        len: usize,
        dev: bool,
    ) -> bool {
        // SAFETY: the caller's contract.
        self.link[src] == 1 && unsafe { self.parts[1].bulk_recv(src, id, buf, len, dev) }
    }

    fn bulk_poll(&mut self, f: &mut dyn FnMut(BulkDone)) -> usize {
        self.parts[1].bulk_poll(f)
    }

    /// A forwarded peer: this rank sent it something (the forwarder's connection to it exists
    /// then); otherwise the transport that reaches it.
    fn has_channel(&self, peer: usize) -> bool {
        if self.via[peer] != u32::MAX {
            return self.sent_via[peer];
        }
        self.to(peer).has_channel(peer)
    }

    fn can_read_remote(&self, src: usize) -> bool {
        self.to(src).can_read_remote(src)
    }

    unsafe fn read_remote(&mut self, src: usize, addr: u64, dst: &mut [u8]) -> bool {
        let i = self.link[src] as usize;
        // SAFETY: the caller's contract, passed on to the transport that reaches `src`.
        unsafe { self.parts[i].read_remote(src, addr, dst) }
    }

    unsafe fn write_remote(&mut self, dst: usize, addr: u64, src: &[u8]) -> bool {
        let i = self.link[dst] as usize;
        // SAFETY: the caller's contract, passed on to the transport that reaches `dst`.
        unsafe { self.parts[i].write_remote(dst, addr, src) }
    }

    fn copy_slots(&self, peer: usize) -> Option<(usize, usize)> {
        self.to(peer).copy_slots(peer)
    }

    fn copy_rates(&self) -> Option<CopyRates> {
        self.parts[0].copy_rates()
    }

    fn own_cores(&self, peer: usize) -> bool {
        self.to(peer).own_cores(peer)
    }

    fn shares_cpu(&self) -> bool {
        self.parts[0].shares_cpu()
    }

    fn coll_slots(&self) -> Option<Vec<usize>> {
        self.parts[0].coll_slots()
    }

    fn coll_records(&self) -> Vec<usize> {
        self.parts[0].coll_records()
    }

    fn coll_scratch(&self) -> Option<(Vec<usize>, usize)> {
        self.parts[0].coll_scratch()
    }

    fn agree_words(&self) -> Vec<usize> {
        self.parts[0].agree_words()
    }
}

impl Drop for Routed {
    /// The end of forwarding (see the module documentation): tells this rank's forwarders it
    /// is done, passes on what the ranks it forwards for send until each is done, and what is
    /// still queued (the network transport then sends it before it closes).
    fn drop(&mut self) {
        let end = Instant::now() + END_LIMIT;
        // The forwarders to tell (none without the end exchange).
        let mut tell: Vec<usize> = Vec::new();
        if self.sources.is_some() {
            for &v in &self.via {
                if v != u32::MAX && !tell.contains(&(v as usize)) {
                    tell.push(v as usize);
                }
            }
        }
        let done = Header {
            kind: KIND_FWD_END,
            src_rank: self.me as i32,
            ..Default::default()
        };
        // Frames for this rank itself have no engine to go to any more.
        let mut sink = |_: usize, _: &Header, _: &[u8]| {};
        loop {
            tell.retain(|&p| !self.parts[0].try_send(p, &done, &[]));
            if tell.is_empty() && !self.sources_left() && self.pending.is_empty() {
                break;
            }
            if Instant::now() >= end {
                break;
            }
            if self.sources.is_some() {
                self.poll(&mut sink);
            } else {
                self.flush();
                self.parts[1].post_held();
            }
            std::thread::yield_now();
        }
        self.parts[1].post_held();
        if !self.pending.is_empty() || self.sources_left() || !tell.is_empty() {
            let left: Vec<usize> = self.sources.as_ref().map_or(Vec::new(), |s| {
                (0..s.len()).filter(|&r| s[r].0 && !s[r].1).collect()
            });
            tracing::warn!(
                "pxn: rank {}: within {END_LIMIT:?}, {} forwarded frames not sent, no end from ranks {left:?}, forwarders {tell:?} not told",
                self.me,
                self.pending.len()
            );
        }
        if self.forwards() || self.counts.forwarded > 0 {
            let c = self.counts;
            tracing::info!(
                "pxn: rank {}: {} frames ({} bytes) forwarded for ranks of this node, {} frames sent through a forwarder",
                self.me,
                c.forwarded,
                c.forwarded_bytes,
                c.via
            );
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::transport::inproc::InprocTransport;

    #[test]
    fn each_peer_goes_through_its_own_transport() {
        // Two fabrics of 3 ranks each: rank 0 reaches rank 1 through the first, rank 2
        // through the second.
        let mut a = InprocTransport::group(3, 16, 1 << 10, false);
        let mut b = InprocTransport::group(3, 16, 1 << 10, false);
        let (a0, b0) = (a.remove(0), b.remove(0));
        let mut r = Routed::new(Box::new(a0), Box::new(b0), &[false, false, true]);
        assert!(r.same_node(1) && !r.same_node(2));
        let h = Header {
            tag: 7,
            ..Default::default()
        };
        assert!(r.try_send(1, &h, b"near"));
        assert!(r.try_send(2, &h, b"far"));
        let mut got = Vec::new();
        a[0].poll(&mut |s, _, p| got.push(("a1", s, p.to_vec())));
        b[1].poll(&mut |s, _, p| got.push(("b2", s, p.to_vec())));
        a[1].poll(&mut |s, _, p| got.push(("a2", s, p.to_vec())));
        b[0].poll(&mut |s, _, p| got.push(("b1", s, p.to_vec())));
        assert_eq!(
            got,
            [("a1", 0, b"near".to_vec()), ("b2", 0, b"far".to_vec())]
        );
    }

    /// Two nodes {0, 1} and {2, 3}, rails 0, 1, 0, 1: rank 0 reaches rank 3 through rank 1,
    /// which passes the frames on over the network; rank 3 sees them from rank 0, in order.
    #[test]
    fn pxn_forwards_through_the_rank_on_the_destinations_rail() {
        use crate::topo::pxn::{routes, Layout};
        let l = Layout {
            node_of: vec![0, 0, 1, 1],
            rail_of: vec![0, 1, 0, 1],
        };
        let mut shm = InprocTransport::group(4, 64, 1 << 10, false);
        let mut net = InprocTransport::group(4, 64, 1 << 10, false);
        let mut r: Vec<Routed> = (0..4)
            .rev()
            .map(|i| {
                let (a, b) = (shm.pop().unwrap(), net.pop().unwrap());
                Routed::with_routes(Box::new(a), Box::new(b), i, &routes(&l, i, true))
            })
            .collect();
        r.reverse();
        assert_eq!(r[0].max_payload(), (1 << 10) - HEADER_BYTES);
        // A forwarded peer has a channel (for the goodbye of MPI_Finalize) once this rank sent
        // it something.
        assert!(!r[0].has_channel(3) && r[0].has_channel(1));
        for i in 0..3u8 {
            let h = Header {
                tag: i as i32,
                kind: 1,
                ..Default::default()
            };
            assert!(r[0].try_send(3, &h, &[i; 5]));
            // Rank 1's own frame to 3 shares the forwarder's connection.
            assert!(r[1].try_send(3, &h, &[10 + i; 3]));
        }
        // Nothing reaches 3 before rank 1 polls.
        let mut got = Vec::new();
        r[3].poll(&mut |s, h, p| got.push((s, h.tag, p.to_vec())));
        assert!(got.iter().all(|g| g.0 == 1));
        r[1].poll(&mut |_, _, _| panic!("rank 1 receives nothing itself"));
        r[3].poll(&mut |s, h, p| got.push((s, h.tag, p.to_vec())));
        let from0: Vec<_> = got.iter().filter(|g| g.0 == 0).cloned().collect();
        assert_eq!(
            from0,
            (0..3u8)
                .map(|i| (0, i as i32, vec![i; 5]))
                .collect::<Vec<_>>()
        );
        assert_eq!(got.iter().filter(|g| g.0 == 1).count(), 3);
        assert_eq!(r[1].counts().forwarded, 3);
        assert_eq!(r[1].counts().forwarded_bytes, 15);
        assert_eq!(r[0].counts().via, 3);
        assert!(r[0].has_channel(3));
        // Rank 0 reaches rank 2 (its rail) directly, rank 1 over shared memory.
        assert!(!r[0].same_node(2) && r[0].same_node(1) && !r[0].same_node(3));
    }

    /// Two nodes {0, 1} and {2, 3}, rails 0, 1, 0, 1, routes and end exchange as `MPI_Init`
    /// sets them up: rank 0's frame to rank 3 waits in its forwarder's (rank 1's) ring when
    /// rank 1 is dropped (finalizes) before polling; rank 1 still passes it on, because it
    /// forwards until rank 0 (dropped after) sent its end frame.
    #[test]
    fn a_forwarder_dropped_first_still_passes_on_what_waits_in_its_ring() {
        use crate::topo::pxn::{forwarded_for, forwarded_to, routes, Layout};
        let l = Layout {
            node_of: vec![0, 0, 1, 1],
            rail_of: vec![0, 1, 0, 1],
        };
        let mut shm = InprocTransport::group(4, 64, 1 << 10, false);
        let mut net = InprocTransport::group(4, 64, 1 << 10, false);
        let mut r: Vec<Option<Routed>> = (0..4)
            .rev()
            .map(|i| {
                let (a, b) = (shm.pop().unwrap(), net.pop().unwrap());
                let mut x = Routed::with_routes(Box::new(a), Box::new(b), i, &routes(&l, i, true));
                x.set_forwarded_to(&forwarded_to(&l, i, true));
                x.set_forwarded_for(&forwarded_for(&l, i, true));
                Some(x)
            })
            .collect();
        r.reverse();
        assert_eq!(forwarded_for(&l, 1, true), [true, false, false, false]);
        let h = Header {
            tag: 9,
            kind: 1,
            ..Default::default()
        };
        assert!(r[0].as_mut().unwrap().try_send(3, &h, b"last"));
        // Rank 1 finalizes first, without polling; rank 0 after it.
        let r1 = r[1].take().unwrap();
        let t = std::thread::spawn(move || drop(r1));
        drop(r[0].take());
        t.join().unwrap();
        let mut got = Vec::new();
        for _ in 0..4 {
            r[3].as_mut()
                .unwrap()
                .poll(&mut |s, h, p| got.push((s, h.tag, p.to_vec())));
        }
        assert_eq!(got, [(0, 9, b"last".to_vec())]);
        // Ranks 2 and 3 end together (each forwards for the other).
        let (r2, r3) = (r[2].take().unwrap(), r[3].take().unwrap());
        std::thread::scope(|sc| {
            sc.spawn(move || drop(r2));
            sc.spawn(move || drop(r3));
        });
    }

    /// Network frames that publish their counters after every call, so the test reads them
    /// while a `Routed` owns the frames.
    pub(crate) struct Counted(
        pub(crate) crate::transport::net::frames::NetFrames,
        pub(crate) std::sync::Arc<std::sync::Mutex<crate::transport::net::frames::Counters>>,
    );

    impl Counted {
        fn publish(&self) {
            *self.1.lock().unwrap() = self.0.counts();
        }
    }

    impl Transport for Counted {
        fn max_payload(&self) -> usize {
            self.0.max_payload()
        }
        fn try_send(&mut self, dst: usize, hdr: &Header, payload: &[u8]) -> bool {
            let ok = self.0.try_send(dst, hdr, payload);
            self.publish();
            ok
        }
        fn try_send_held(&mut self, dst: usize, hdr: &Header, payload: &[u8]) -> bool {
            let ok = self.0.try_send_held(dst, hdr, payload);
            self.publish();
            ok
        }
        fn post_held(&mut self) {
            self.0.post_held();
            self.publish();
        }
        fn poll(&mut self, f: &mut dyn FnMut(usize, &Header, &[u8])) -> usize {
            let n = self.0.poll(f);
            self.publish();
            n
        }
        fn has_channel(&self, peer: usize) -> bool {
            self.0.has_channel(peer)
        }
    }

    /// Network operations of one all-to-all round over `l` (every rank one frame to every
    /// rank of another node, all written before any rank polls), with PXN on or off: ranks of
    /// one process, shared memory in process, network frames over TCP on loopback. Checks
    /// that every frame arrives once, from its sender.
    fn alltoall_round_ops(l: &crate::topo::pxn::Layout, pxn: bool) -> u64 {
        use crate::topo::pxn::{forwarded_to, routes};
        use std::sync::{Arc, Mutex};
        let n = l.size();
        let mut shm = InprocTransport::group(n, 64, 1 << 12, false);
        let mut net = crate::transport::net::lazy_tests::loopback_frames(
            n,
            1,
            Duration::from_secs(10),
            b"pxn-ops",
        );
        let counts: Vec<Arc<Mutex<_>>> = (0..n).map(|_| Arc::default()).collect();
        let mut r: Vec<Routed> = (0..n)
            .rev()
            .map(|i| {
                let (a, b) = (shm.pop().unwrap(), net.pop().unwrap());
                let b = Counted(b, counts[i].clone());
                let mut x = Routed::with_routes(Box::new(a), Box::new(b), i, &routes(l, i, pxn));
                x.set_forwarded_to(&forwarded_to(l, i, pxn));
                x
            })
            .collect();
        r.reverse();
        let remote: Vec<(usize, usize)> = (0..n)
            .flat_map(|s| (0..n).map(move |d| (s, d)))
            .filter(|&(s, d)| l.node_of[s] != l.node_of[d])
            .collect();
        let ops = || counts.iter().map(|c| c.lock().unwrap().ops).sum::<u64>();
        let mut got: Vec<Vec<(usize, i32, Vec<u8>)>> = vec![Vec::new(); n];
        let poll_all = |r: &mut [Routed], got: &mut Vec<Vec<(usize, i32, Vec<u8>)>>| {
            for (i, x) in r.iter_mut().enumerate() {
                x.poll(&mut |s, h, p| got[i].push((s, h.tag, p.to_vec())));
            }
        };
        let mut before = 0;
        for round in 0..2 {
            for &(s, d) in &remote {
                let h = Header {
                    tag: round,
                    kind: 1,
                    ..Default::default()
                };
                let end = Instant::now() + Duration::from_secs(20);
                while !r[s].try_send(d, &h, &[s as u8, d as u8]) {
                    // Round 0 opens the connections (the first frame to a peer dials it and
                    // waits until it is up); round 1 finds them open.
                    assert_eq!(round, 0, "{s} -> {d}: the network did not take the frame");
                    assert!(Instant::now() < end, "{s} -> {d}: no connection");
                    poll_all(&mut r, &mut got);
                }
            }
            let end = Instant::now() + Duration::from_secs(20);
            while got.iter().map(|g| g.len()).sum::<usize>() < remote.len() {
                assert!(Instant::now() < end, "frames lost: {got:?}");
                poll_all(&mut r, &mut got);
            }
            for (d, g) in got.iter_mut().enumerate() {
                g.sort();
                let want: Vec<_> = remote
                    .iter()
                    .filter(|x| x.1 == d)
                    .map(|&(s, _)| (s, round, vec![s as u8, d as u8]))
                    .collect();
                assert_eq!(*g, want, "rank {d}, round {round}, PXN {pxn}");
                g.clear();
            }
            if round == 0 {
                before = ops();
            }
        }
        let after = ops();
        // The frame transports close together (the goodbye exchange is collective).
        std::thread::scope(|sc| {
            for x in r {
                sc.spawn(move || drop(x));
            }
        });
        after - before
    }

    /// Two nodes of 4 ranks on 2 rails (local rank i on rail i mod 2): in an all-to-all round
    /// each forwarder's frames to a peer, its own and those of the 2 ranks of the other rail
    /// it forwards for, leave as one network operation, so the operations are exactly the
    /// plan's (`topo::pxn::alltoall` with aggregation), half of those without PXN: divided by
    /// the local ranks per rail.
    #[test]
    fn a_forwarder_sends_its_own_and_forwarded_frames_to_a_peer_as_one_operation() {
        use crate::topo::pxn::{alltoall, Layout};
        let l = Layout {
            node_of: vec![0, 0, 0, 0, 1, 1, 1, 1],
            rail_of: vec![0, 1, 0, 1, 0, 1, 0, 1],
        };
        let off = alltoall_round_ops(&l, false);
        let on = alltoall_round_ops(&l, true);
        assert_eq!(off as usize, alltoall(&l, false, false).ops);
        assert_eq!(on as usize, alltoall(&l, true, true).ops);
        let per_rail = 2;
        assert!(
            on <= off / per_rail,
            "{on} operations with PXN, {off} without"
        );
    }

    /// A network part whose every comm waits on descriptor 7.
    struct Sockets;

    impl Transport for Sockets {
        fn max_payload(&self) -> usize {
            64 << 10
        }
        fn try_send(&mut self, _: usize, _: &Header, _: &[u8]) -> bool {
            true
        }
        fn poll(&mut self, _: &mut dyn FnMut(usize, &Header, &[u8])) -> usize {
            0
        }
        fn wait_fds(&self, out: &mut Vec<crate::sys::socket::PollFd>) -> bool {
            out.push(crate::sys::socket::PollFd {
                fd: 7,
                events: crate::sys::socket::POLLIN,
                revents: 0,
            });
            true
        }
        fn net_direct(&self, peer: usize) -> bool {
            peer != 0
        }
    }

    /// A peer reached directly over the network takes the network's frames, and is the one
    /// kind of peer the engine sends up to a network frame eagerly (`net_direct`); a peer of
    /// this node or one behind a forwarder, the frames every peer takes (less the inner header
    /// a forwarded frame carries).
    #[test]
    fn a_peer_reached_directly_over_the_network_takes_the_networks_frames() {
        let local = || Box::new(InprocTransport::group(1, 4, 16 << 10, false).pop().unwrap());
        let direct = Routed::with_routes(local(), Box::new(Sockets), 0, &[Hop::Local, Hop::Net]);
        assert_eq!(direct.max_payload(), 16 << 10);
        assert_eq!(direct.max_payload_to(1), 64 << 10);
        assert_eq!(direct.max_payload_to(0), 16 << 10);
        let routes = [Hop::Local, Hop::Local, Hop::Net, Hop::Via(1)];
        let pxn = Routed::with_routes(local(), Box::new(Sockets), 0, &routes);
        let every = (16 << 10) - HEADER_BYTES;
        assert_eq!(pxn.max_payload(), every);
        let want = [every, every, 64 << 10, every];
        assert_eq!(
            (0..4).map(|r| pxn.max_payload_to(r)).collect::<Vec<_>>(),
            want
        );
        assert_eq!(
            (0..4).map(|r| pxn.net_direct(r)).collect::<Vec<_>>(),
            [false, false, true, false]
        );
        assert!(direct.net_direct(1) && !direct.net_direct(0));
    }

    /// Frames from node-local peers arrive over shared memory, where no descriptor shows them:
    /// the network's descriptors are complete only for a rank alone on its node.
    #[test]
    fn descriptors_are_complete_only_for_a_rank_alone_on_its_node() {
        let local = || Box::new(InprocTransport::group(1, 4, 64, false).pop().unwrap());
        let mut out = Vec::new();
        let alone = Routed::with_routes(local(), Box::new(Sockets), 0, &[Hop::Local, Hop::Net]);
        assert!(alone.wait_fds(&mut out));
        assert_eq!(out.len(), 1);
        out.clear();
        let shared = Routed::with_routes(
            local(),
            Box::new(Sockets),
            0,
            &[Hop::Local, Hop::Local, Hop::Net],
        );
        assert!(!shared.wait_fds(&mut out));
        let via = Routed::with_routes(
            local(),
            Box::new(Sockets),
            0,
            &[Hop::Local, Hop::Local, Hop::Via(1)],
        );
        assert!(!via.wait_fds(&mut out));
    }
}
