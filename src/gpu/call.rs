//! A GPU collective call as every GPU path sees it: its shape (the same on every rank except
//! `rank`), this rank's buffers, and the descriptor ranks exchange to agree on a path.

use super::ipc::{Export, EXPORT_BYTES};
use super::kernels::{KOp, KType};
use crate::coll::CollKind;

/// What a collective call looks like to the planner (the same on every rank except `rank`).
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub kind: CollKind,
    pub nranks: usize,
    pub rank: usize,
    pub root: usize,
    /// Allreduce/reduce/bcast: the vector; alltoall/allgather/reduce_scatter_block: one block.
    pub bytes: usize,
    pub elem: usize,
    pub in_place: bool,
}

/// Chunk `i` of `n` of a vector of `elems` elements: (first element, elements). Chunks are
/// multiples of `align` elements (except the last), so kernels see 16-byte aligned starts.
pub fn chunk(elems: usize, n: usize, i: usize, align: usize) -> (usize, usize) {
    let align = align.max(1);
    let units = elems.div_ceil(align);
    let per = units.div_ceil(n);
    let start = (i * per * align).min(elems);
    let end = ((i + 1) * per * align).min(elems);
    (start, end - start)
}

/// One rank's buffers: device address and byte length (None: not used by this rank).
#[derive(Clone, Copy, Debug)]
pub struct Call {
    pub shape: Shape,
    pub send: Option<(usize, usize)>,
    pub recv: Option<(usize, usize)>,
    /// Reductions: the kernel's op and type.
    pub red: Option<(KOp, KType)>,
    /// This rank's GPU when its buffers are fit (contiguous, as the shape says) and all device
    /// memory of that GPU (classified once by the caller); None forces the staged path for
    /// every rank.
    pub device: Option<i32>,
    /// The call's sequence number on its communicator (the same on every rank).
    pub seq: u64,
    /// Whether the process runs at MPI_THREAD_MULTIPLE (asked only when a communicator's host
    /// regions are set up): no kernel that spins waiting for the peers' kernels then (two
    /// communicators' kernels, launched in different orders on two ranks, could each hold the
    /// SMs the other one needs).
    pub thread_multiple: fn() -> bool,
}

pub(crate) const DESC_BYTES: usize = 1 + 3 + 4 + 16 + 2 * EXPORT_BYTES;
const _: () = assert!(DESC_BYTES <= super::comm::RECORD_MAX);

/// What a rank publishes: eligibility, pid, device UUID, its buffers' exports (also the
/// resident path's set-up record, with the scratch as `send`).
pub(crate) struct Desc {
    pub(crate) ok: bool,
    pub(crate) pid: u32,
    pub(crate) uuid: [u8; 16],
    pub(crate) send: Option<Export>,
    pub(crate) recv: Option<Export>,
    /// Local addresses (same process only; not on the wire).
    pub(crate) ordinal: i32,
}

impl Desc {
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        let mut b = vec![0u8; DESC_BYTES];
        b[0] = self.ok as u8 | (self.send.is_some() as u8) << 1 | (self.recv.is_some() as u8) << 2;
        b[4..8].copy_from_slice(&self.pid.to_le_bytes());
        b[8..24].copy_from_slice(&self.uuid);
        if let Some(e) = &self.send {
            b[24..24 + EXPORT_BYTES].copy_from_slice(&e.to_bytes());
        }
        if let Some(e) = &self.recv {
            b[24 + EXPORT_BYTES..].copy_from_slice(&e.to_bytes());
        }
        b
    }
    pub(crate) fn from_bytes(b: &[u8]) -> Desc {
        let f = b[0];
        Desc {
            ok: f & 1 != 0,
            pid: u32::from_le_bytes(b[4..8].try_into().unwrap()),
            uuid: b[8..24].try_into().unwrap(),
            send: (f & 2 != 0).then(|| Export::from_bytes(&b[24..24 + EXPORT_BYTES]).unwrap()),
            recv: (f & 4 != 0).then(|| Export::from_bytes(&b[24 + EXPORT_BYTES..]).unwrap()),
            ordinal: -1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_round_trip() {
        let d = Desc {
            ok: true,
            pid: 4242,
            uuid: [3; 16],
            send: None,
            recv: Some(Export {
                handle: [9; 64],
                base: 1 << 40,
                size: 1 << 20,
                buffer_id: 77,
                offset: 256,
                kind: super::super::ipc::Kind::PosixFd,
                pid: 4242,
            }),
            ordinal: 2,
        };
        let b = d.to_bytes();
        assert_eq!(b.len(), DESC_BYTES);
        let e = Desc::from_bytes(&b);
        assert!(e.ok && e.pid == 4242 && e.uuid == [3; 16] && e.send.is_none());
        assert_eq!(e.recv, d.recv);
    }
}
