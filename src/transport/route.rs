//! A job on more than one node: each peer is reached through one of two transports, the
//! shared-memory rings (ranks on this node) or the network frames (`net::frames`, ranks on
//! other nodes), chosen once at set-up from the node map into a table (`link`), so a message
//! costs one table lookup and one call of the chosen transport's [`Transport`] methods.
//!
//! A job on one node does not use this type: the engine holds the shared-memory transport
//! itself.

use super::{CopyRates, Header, Transport};

/// Per-peer routing over a node-local and a network transport.
pub struct Routed {
    /// `[node-local, network]`.
    parts: [Box<dyn Transport>; 2],
    /// Index into `parts` per world rank (this rank: node-local; never used for sends).
    link: Vec<u8>,
    /// Which part `poll` asks first (alternates, so neither starves the other).
    first: usize,
}

impl Routed {
    /// `remote[r]`: world rank `r` is on another node.
    pub fn new(local: Box<dyn Transport>, net: Box<dyn Transport>, remote: &[bool]) -> Routed {
        Routed {
            parts: [local, net],
            link: remote.iter().map(|&r| r as u8).collect(),
            first: 0,
        }
    }

    fn to(&self, peer: usize) -> &dyn Transport {
        &*self.parts[self.link[peer] as usize]
    }
}

impl Transport for Routed {
    fn max_payload(&self) -> usize {
        self.parts[0].max_payload().min(self.parts[1].max_payload())
    }

    fn try_send(&mut self, dst: usize, hdr: &Header, payload: &[u8]) -> bool {
        self.parts[self.link[dst] as usize].try_send(dst, hdr, payload)
    }

    fn poll(&mut self, f: &mut dyn FnMut(usize, &Header, &[u8])) -> usize {
        let a = self.first;
        self.first ^= 1;
        self.parts[a].poll(f) + self.parts[a ^ 1].poll(f)
    }

    fn same_node(&self, peer: usize) -> bool {
        self.link[peer] == 0
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

    fn coll_slots(&self) -> Option<Vec<usize>> {
        self.parts[0].coll_slots()
    }

    fn coll_records(&self) -> Vec<usize> {
        self.parts[0].coll_records()
    }

    fn coll_scratch(&self) -> Option<(Vec<usize>, usize)> {
        self.parts[0].coll_scratch()
    }
}

#[cfg(test)]
mod tests {
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
}
