//! Allreduce between nodes in pieces: a blocking `MPI_Allreduce` of at least two pieces on a
//! communicator that spans nodes runs as consecutive allreduces over ranges of the packed vector
//! (`coll::pieces`: a quarter of the vector, between 1 MiB and `GPUMPI_COLL_PIECE`), each the
//! schedule (or the hierarchical one)
//! the call would run whole, [`DEPTH`] at a time: while one piece is reduced by this thread, the
//! next one's bytes move on the network's threads, where a whole-vector schedule leaves the
//! network idle during each reduction.
//!
//! Device vectors move piece by piece through a ring of [`SLOTS`] page-locked buffers
//! (`gpu::stage::Relay`): the copy engine fetches the next piece and stores the last one while
//! the current one is on the network, and each piece is reduced in place in its buffer. Pinned
//! memory stays at `SLOTS` pieces whatever the vector's size; the whole-vector path mirrors
//! both buffers (beyond `GPUMPI_CUDA_STAGING_POOL`, in pageable memory).
//!
//! Eligibility is a rule on what every rank of the call shares (the collective, the
//! communicator, the byte count, the element size and the piece size, the same on every
//! rank), so every rank cuts the same pieces, numbered as internal collectives of the call;
//! a rank whose buffers are neither contiguous device nor contiguous host memory packs its
//! vector whole into host memory first and unpacks the result at the end.

use super::call::{CollSpec, Side};
use super::schedule::Packed;
use crate::coll::{pieces, Block, CollKind};
use crate::engine::collcheck::CallNo;
use crate::gpu::stage::{self, Relay};
use crate::mpi::error::{MpiError, MpiResult};
use crate::runtime::{self, request::ReqKind, request::Request};
use std::collections::VecDeque;

/// Pieces in flight at once.
const DEPTH: usize = 2;
/// Relay buffers: the pieces in flight, the one being fetched and the one being stored.
const SLOTS: usize = DEPTH + 2;

/// The pieces of `spec` when this path takes it.
pub(super) fn serves(spec: &CollSpec) -> Option<Vec<(usize, usize)>> {
    if spec.kind != CollKind::Allreduce || spec.comm.one_node || spec.host_only {
        return None;
    }
    let most = crate::config::snapshot().coll.piece;
    if most == 0 {
        return None;
    }
    let piece = pieces::size(spec.bytes, most);
    if spec.bytes < 2 * piece {
        return None;
    }
    let (r, _) = spec.red.as_ref()?;
    let max = CallNo::MAX_SUB.saturating_sub(spec.subs.get()) as usize;
    let plan = pieces::plan(spec.bytes, r.elem_size(), piece, max);
    (plan.len() > 1).then_some(plan)
}

/// The contiguous range of `side` and, when it needs staging, its device allocation.
unsafe fn range(side: &Side) -> Option<(usize, Option<crate::gpu::cache::PtrInfo>)> {
    let (at, _) = side.contiguous()?;
    Some((at, stage::device_info(at as *const u8)))
}

/// Run call `no` of `spec` as the pieces `plan` ([`serves`]).
pub(super) unsafe fn run(spec: &CollSpec, no: CallNo, plan: &[(usize, usize)]) -> MpiResult<bool> {
    let first = spec.subs.get() + 1;
    spec.subs.set(spec.subs.get() + plan.len() as u32);
    let recv = spec
        .recv
        .as_ref()
        .ok_or_else(|| MpiError::intern("allreduce without a receive buffer"))?;
    let input = match (&spec.send, spec.in_place) {
        (_, true) => recv,
        (Some(s), false) => s,
        (None, false) => return Err(MpiError::intern("allreduce without a send buffer")),
    };
    let pieces = Pieces {
        spec,
        no,
        first,
        plan,
    };
    match (range(input), range(recv)) {
        (Some((src, Some(a))), Some((dst, Some(b)))) if a.device == b.device => {
            tracing::debug!(
                pieces = plan.len(),
                bytes = spec.bytes,
                "allreduce between nodes in pieces, device vector relayed"
            );
            pieces.relayed(&a, src, dst)?;
        }
        (Some((src, None)), Some((dst, None))) => {
            tracing::debug!(
                pieces = plan.len(),
                bytes = spec.bytes,
                "allreduce between nodes in pieces, host vector"
            );
            let src = (!spec.in_place).then_some(src as *const u8);
            pieces.direct(src, dst as *mut u8)?;
        }
        _ => {
            tracing::debug!(
                pieces = plan.len(),
                bytes = spec.bytes,
                "allreduce between nodes in pieces, vector packed whole"
            );
            let mut buf = packed_input(input, spec.bytes)?;
            pieces.direct(None, buf.as_mut_ptr())?;
            unpack_output(spec, recv, &buf)?;
        }
    }
    Ok(true)
}

/// One call's pieces.
struct Pieces<'a> {
    spec: &'a CollSpec,
    no: CallNo,
    /// The internal-call number of the first piece.
    first: u32,
    plan: &'a [(usize, usize)],
}

impl Pieces<'_> {
    /// Start piece `k` over `len` bytes at `sptr` (None: in place) and `rptr`.
    unsafe fn start(&self, k: usize, sptr: Option<*const u8>, rptr: *mut u8) -> MpiResult<Request> {
        let len = self.plan[k].1;
        let block = [Block::new(0, len)];
        let (exec, check) = self.spec.launch(
            self.no.nested(self.first + k as u32),
            super::hier::serves(self.spec),
            Packed {
                sptr: sptr.unwrap_or(std::ptr::null()) as *mut u8,
                sblocks: if sptr.is_some() { &block } else { &[] },
                rptr,
                rblocks: &block,
                bytes: len,
                in_place: sptr.is_none(),
            },
        )?;
        Ok(Request::new(ReqKind::Coll {
            exec,
            post: None,
            result: None,
            hold: Vec::new(),
            check,
        }))
    }

    /// Pieces over host memory: the input at `src` (None: in place), the result at `dst`.
    unsafe fn direct(&self, src: Option<*const u8>, dst: *mut u8) -> MpiResult<()> {
        let mut flight = Flight::default();
        for (k, &(off, _)) in self.plan.iter().enumerate() {
            let r = self.start(k, src.map(|s| s.add(off)), dst.add(off))?;
            flight.push(k, r);
            if flight.full() {
                flight.wait_first()?;
            }
        }
        while !flight.is_empty() {
            flight.wait_first()?;
        }
        Ok(())
    }

    /// Pieces of a device vector (`info`: its allocation) relayed through pinned buffers:
    /// fetched from `src`, reduced in place there, stored to `dst`.
    unsafe fn relayed(
        &self,
        info: &crate::gpu::cache::PtrInfo,
        src: usize,
        dst: usize,
    ) -> MpiResult<()> {
        let piece = self.plan[0].1;
        let mut relay = Relay::new(info, piece, SLOTS)?;
        let r = self.relay_pieces(&mut relay, src, dst);
        match r {
            Ok(()) => relay.finish(),
            Err(e) => {
                // Pieces still in flight may write into the buffers: never reuse them.
                std::mem::forget(relay);
                Err(e)
            }
        }
    }

    unsafe fn relay_pieces(&self, relay: &mut Relay, src: usize, dst: usize) -> MpiResult<()> {
        let n = self.plan.len();
        let slot = |k: usize| k % SLOTS;
        let (off0, len0) = self.plan[0];
        relay.fetch(slot(0), src + off0, len0)?;
        let mut flight = Flight::default();
        let store = |relay: &mut Relay, k: usize| {
            let (off, len) = self.plan[k];
            relay.store(slot(k), dst + off, len)
        };
        for k in 0..n {
            let buf = relay.fetched(slot(k))?.as_mut_ptr();
            if k + 1 < n {
                let (off, len) = self.plan[k + 1];
                relay.fetch(slot(k + 1), src + off, len)?;
            }
            flight.push(k, self.start(k, None, buf)?);
            if flight.full() {
                let done = flight.wait_first()?;
                store(relay, done)?;
            }
        }
        while !flight.is_empty() {
            let done = flight.wait_first()?;
            store(relay, done)?;
        }
        Ok(())
    }
}

/// Pieces started and not yet finished, oldest first.
#[derive(Default)]
struct Flight {
    reqs: VecDeque<(usize, Request)>,
}

impl Flight {
    fn push(&mut self, k: usize, r: Request) {
        self.reqs.push_back((k, r));
    }
    fn full(&self) -> bool {
        self.reqs.len() >= DEPTH
    }
    fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }
    /// Wait for the oldest piece, advancing the others meanwhile; its number.
    fn wait_first(&mut self) -> MpiResult<usize> {
        let r = runtime::wait_until(|rt| {
            for (_, r) in self.reqs.iter_mut().skip(1) {
                r.advance(&mut rt.engine);
            }
            let (_, first) = self.reqs.front_mut().expect("a piece in flight");
            Ok(first.test_after_progress(&mut rt.engine)?.is_some())
        });
        if let Err(e) = r {
            // The other pieces may still have operations in flight on the vector's memory:
            // leave them to the engine rather than free what they use.
            for (_, r) in self.reqs.drain(..) {
                std::mem::forget(r);
            }
            return Err(e);
        }
        Ok(self.reqs.pop_front().expect("a piece in flight").0)
    }
}

/// The packed bytes of the allreduce input `side` (any memory, any layout), `bytes` long.
unsafe fn packed_input(side: &Side, bytes: usize) -> MpiResult<Vec<u8>> {
    let mut out = vec![0u8; bytes];
    if let Some(p) = side.device_packed(true)? {
        out.copy_from_slice(&p.host[..bytes]);
        return Ok(out);
    }
    let mirror = side.mirrored(true)?;
    let s = mirror.as_ref().map_or(side, |(_, s)| s);
    let (ptr, blocks, tmp) = s.map(true);
    match (&tmp, blocks.first()) {
        (Some(t), _) => out.copy_from_slice(&t[..bytes]),
        (None, Some(b)) => {
            out.copy_from_slice(std::slice::from_raw_parts(ptr.add(b.off), bytes));
        }
        (None, None) => {}
    }
    Ok(out)
}

/// Write the packed allreduce result `bytes` into the receive side `side` (any memory, any
/// layout).
unsafe fn unpack_output(spec: &CollSpec, side: &Side, bytes: &[u8]) -> MpiResult<()> {
    if let Some(mut p) = side.device_packed(false)? {
        p.host[..bytes.len()].copy_from_slice(bytes);
        return p.unpack(None);
    }
    match side.mirrored(spec.recv_mirror_needs_fill(side))? {
        Some((m, s)) => {
            write_packed(&s, bytes);
            m.flush()
        }
        None => {
            write_packed(side, bytes);
            Ok(())
        }
    }
}

/// Write packed bytes into host side `side`.
unsafe fn write_packed(side: &Side, bytes: &[u8]) {
    if side.direct() {
        let (ptr, blocks, _) = side.map(false);
        if let Some(b) = blocks.first() {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), ptr.add(b.off), bytes.len());
        }
    } else {
        side.unpack(bytes, None);
    }
}
