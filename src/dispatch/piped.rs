//! Large allreduce and alltoall between nodes in pieces: a blocking `MPI_Allreduce` or
//! `MPI_Alltoall` of at least two pieces on a communicator that spans nodes runs as
//! consecutive collectives over ranges of the packed data (`coll::pieces`: a quarter of it,
//! halves of a 1-2 MiB call, between 512 KiB and `GPUMPI_COLL_PIECE`, or whole calls where
//! `auto` chose so at `MPI_Init`: `runtime::coll_piece`), [`DEPTH`] at a time.
//! An allreduce piece is a range of the vector, run by the schedule (or the hierarchical one)
//! the call would run whole: while one piece is reduced by this thread, the next one's bytes
//! move on the network's threads, where a whole-vector schedule leaves the network idle during
//! each reduction. An alltoall piece is the same range of every block, run as a pairwise
//! alltoallv over those ranges.
//!
//! Device buffers where the schedules run on them directly ([`CollSpec::device_sides`],
//! `GPUMPI_COLL_DEVICE`) are the pieces' operands as host buffers are: each piece's messages
//! are device messages. Otherwise device buffers move piece by piece through a ring of
//! [`SLOTS`] page-locked buffers
//! (`gpu::stage::Relay`): the copy engine fetches the next piece and stores the last one while
//! the current one is on the network; an allreduce piece is reduced in place in its buffer, an
//! alltoall piece's blocks are sent from the buffer's first half and received into its second.
//! Pinned memory stays at `SLOTS` pieces whatever the data's size; the whole-call path mirrors
//! both buffers (beyond `GPUMPI_CUDA_STAGING_POOL`, in pageable memory).
//!
//! Eligibility is a rule on what every rank of the call shares (the collective, the
//! communicator, the byte count, the element size and the piece size, the same on every
//! rank), so every rank cuts the same pieces, numbered as internal collectives of the call;
//! a rank whose buffers are neither contiguous device nor contiguous host memory (or an in-place
//! alltoall on host memory) packs its data whole into host memory first and unpacks the result
//! at the end.

use super::call::{CollSpec, Side};
use super::schedule::Packed;
use crate::coll::{pieces, Block, CollKind};
use crate::engine::collcheck::CallNo;
use crate::gpu::pool::HostBuf;
use crate::gpu::stage::{self, Relay};
use crate::mpi::error::{MpiError, MpiResult};
use crate::runtime::{self, request::ReqKind, request::Request};
use std::collections::VecDeque;

/// Pieces in flight at once.
const DEPTH: usize = 2;
/// Relay buffers: the pieces in flight, the one being fetched and the one being stored.
const SLOTS: usize = DEPTH + 2;

/// What a call is cut into.
pub(super) enum Plan {
    /// Ranges of the vector.
    Allreduce(Vec<(usize, usize)>),
    /// Ranges of each of the `n` blocks of `block` bytes.
    Alltoall {
        n: usize,
        block: usize,
        pieces: Vec<(usize, usize)>,
    },
}

impl Plan {
    fn pieces(&self) -> &[(usize, usize)] {
        match self {
            Plan::Allreduce(p) | Plan::Alltoall { pieces: p, .. } => p,
        }
    }
}

/// The pieces of `spec` when this path takes it.
pub(super) fn serves(spec: &CollSpec) -> Option<Plan> {
    if spec.comm.one_node || spec.host_only {
        return None;
    }
    let most = runtime::coll_piece();
    if most == 0 {
        return None;
    }
    let max = CallNo::MAX_SUB.saturating_sub(spec.subs.get()) as usize;
    match spec.kind {
        CollKind::Allreduce => {
            let piece = pieces::size(spec.bytes, most);
            if spec.bytes < 2 * piece {
                return None;
            }
            let (r, _) = spec.red.as_ref()?;
            let plan = pieces::plan(spec.bytes, r.elem_size(), piece, max);
            (plan.len() > 1).then_some(Plan::Allreduce(plan))
        }
        CollKind::Alltoall => {
            let n = spec.comm.size();
            let total = n.checked_mul(spec.bytes)?;
            let piece = pieces::size(total, most);
            if total < 2 * piece {
                return None;
            }
            // Each block's share of a piece, in whole pages (copies of many small ranges cost more
            // than they overlap).
            let per_block = (piece / n / 4096 * 4096).max(4096);
            let plan = pieces::plan(spec.bytes, 1, per_block, max);
            (plan.len() > 1).then_some(Plan::Alltoall {
                n,
                block: spec.bytes,
                pieces: plan,
            })
        }
        _ => None,
    }
}

/// The contiguous range of `side` and, when it needs staging, its device allocation.
unsafe fn range(side: &Side) -> Option<(usize, Option<crate::gpu::cache::PtrInfo>)> {
    let (at, _) = side.contiguous()?;
    Some((at, stage::device_info(at as *const u8)))
}

/// Run call `no` of `spec` as `plan` ([`serves`]).
pub(super) unsafe fn run(spec: &CollSpec, no: CallNo, plan: &Plan) -> MpiResult<bool> {
    let first = spec.subs.get() + 1;
    let count = plan.pieces().len();
    spec.subs.set(spec.subs.get() + count as u32);
    let what = spec.kind.name();
    let recv = spec
        .recv
        .as_ref()
        .ok_or_else(|| MpiError::intern(format!("{what} without a receive buffer")))?;
    let input = match (&spec.send, spec.in_place) {
        (_, true) => recv,
        (Some(s), false) => s,
        (None, false) => return Err(MpiError::intern(format!("{what} without a send buffer"))),
    };
    let mut pieces = Pieces {
        spec,
        no,
        first,
        plan,
        dev: None,
    };
    let total = match plan {
        Plan::Allreduce(_) => spec.bytes,
        Plan::Alltoall { n, block, .. } => n * block,
    };
    let host_direct = matches!(plan, Plan::Allreduce(_)) || !spec.in_place;
    let dev = spec.device_sides();
    match (range(input), range(recv)) {
        (Some((src, _)), Some((dst, _))) if dev.is_some() && host_direct => {
            tracing::debug!(
                pieces = count,
                bytes = total,
                "{what} between nodes in pieces, on the device buffers (device steps)"
            );
            pieces.dev = dev;
            let src = (!spec.in_place).then_some(src as *const u8);
            pieces.direct(src, dst as *mut u8)?;
        }
        (Some((src, Some(a))), Some((dst, Some(b)))) if a.device == b.device => {
            tracing::debug!(
                pieces = count,
                bytes = total,
                "{what} between nodes in pieces, device buffers relayed"
            );
            pieces.relayed(&a, src, dst)?;
        }
        (Some((src, None)), Some((dst, None))) if host_direct => {
            tracing::debug!(
                pieces = count,
                bytes = total,
                "{what} between nodes in pieces, host buffers"
            );
            let src = (!spec.in_place).then_some(src as *const u8);
            pieces.direct(src, dst as *mut u8)?;
        }
        _ => {
            tracing::debug!(
                pieces = count,
                bytes = total,
                "{what} between nodes in pieces, packed whole"
            );
            let mut inb = packed_input(input, total)?;
            match plan {
                Plan::Allreduce(_) => {
                    pieces.direct(None, inb.as_mut_ptr())?;
                    unpack_output(spec, recv, &inb)?;
                }
                Plan::Alltoall { .. } => {
                    let mut out = vec![0u8; total];
                    pieces.direct(Some(inb.as_ptr()), out.as_mut_ptr())?;
                    unpack_output(spec, recv, &out)?;
                }
            }
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
    plan: &'a Plan,
    /// The pieces run on the device buffers themselves ([`CollSpec::device_sides`]).
    dev: Option<super::call::DevSides>,
}

impl Pieces<'_> {
    /// Start piece `k` with its operands at `sptr` (None: in place, allreduce only) and `rptr`
    /// in the layout `blocks` gives (offsets from those pointers).
    unsafe fn start(
        &self,
        k: usize,
        sptr: Option<*const u8>,
        rptr: *mut u8,
        blocks: &[Block],
    ) -> MpiResult<Request> {
        let len = self.plan.pieces()[k].1;
        let (exec, check) = self.spec.launch(
            self.no.nested(self.first + k as u32),
            match self.plan {
                Plan::Allreduce(_) => super::hier::serves(self.spec, true),
                Plan::Alltoall { .. } => None,
            },
            Packed {
                sptr: sptr.unwrap_or(std::ptr::null()) as *mut u8,
                sblocks: if sptr.is_some() { blocks } else { &[] },
                rptr,
                rblocks: blocks,
                bytes: len,
                in_place: sptr.is_none(),
                tell_counts: false,
                as_kind: match self.plan {
                    Plan::Allreduce(_) => None,
                    Plan::Alltoall { .. } => Some(CollKind::Alltoallv),
                },
                dev: self.dev,
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

    /// The blocks of piece `k` over the whole buffers (offsets from their base).
    fn blocks(&self, k: usize) -> Vec<Block> {
        let (off, len) = self.plan.pieces()[k];
        match self.plan {
            Plan::Allreduce(_) => vec![Block::new(off, len)],
            Plan::Alltoall { n, block, .. } => {
                (0..*n).map(|i| Block::new(i * block + off, len)).collect()
            }
        }
    }

    /// The blocks of piece `k` packed one after another from offset 0 (a relay slot).
    fn packed_blocks(&self, k: usize) -> Vec<Block> {
        let len = self.plan.pieces()[k].1;
        match self.plan {
            Plan::Allreduce(_) => vec![Block::new(0, len)],
            Plan::Alltoall { n, .. } => (0..*n).map(|i| Block::new(i * len, len)).collect(),
        }
    }

    /// Pieces over host memory: the input at `src` (None: in place), the result at `dst`.
    unsafe fn direct(&self, src: Option<*const u8>, dst: *mut u8) -> MpiResult<()> {
        let mut flight = Flight::default();
        for (k, &(off, _)) in self.plan.pieces().iter().enumerate() {
            // An allreduce schedule addresses its vector from offset 0 of its operands; an
            // alltoallv schedule takes its blocks where they are.
            let r = match self.plan {
                Plan::Allreduce(_) => self.start(
                    k,
                    src.map(|s| s.add(off)),
                    dst.add(off),
                    &self.packed_blocks(k),
                )?,
                Plan::Alltoall { .. } => self.start(k, src, dst, &self.blocks(k))?,
            };
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

    /// Pieces of device buffers (`info`: the input's allocation) relayed through pinned
    /// buffers: fetched from `src`, run in the slot, stored to `dst`.
    unsafe fn relayed(
        &self,
        info: &crate::gpu::cache::PtrInfo,
        src: usize,
        dst: usize,
    ) -> MpiResult<()> {
        let first = self.plan.pieces()[0].1;
        let slot_bytes = match self.plan {
            Plan::Allreduce(_) => first,
            Plan::Alltoall { n, .. } => 2 * n * first,
        };
        let mut relay = Relay::new(info, slot_bytes, SLOTS)?;
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

    /// Where piece `k`'s result starts in its slot: in place for an allreduce, the second
    /// half for an alltoall.
    fn result_at(&self, k: usize) -> usize {
        match self.plan {
            Plan::Allreduce(_) => 0,
            Plan::Alltoall { n, .. } => n * self.plan.pieces()[k].1,
        }
    }

    unsafe fn relay_pieces(&self, relay: &mut Relay, src: usize, dst: usize) -> MpiResult<()> {
        let n = self.plan.pieces().len();
        let slot = |k: usize| k % SLOTS;
        let fetch = |relay: &mut Relay, k: usize| {
            let segs: Vec<_> = self
                .blocks(k)
                .iter()
                .zip(self.packed_blocks(k))
                .map(|(b, p)| (src + b.off, p.off, b.len))
                .collect();
            relay.fetch(slot(k), &segs)
        };
        let store = |relay: &mut Relay, k: usize| {
            let at = self.result_at(k);
            let segs: Vec<_> = self
                .blocks(k)
                .iter()
                .zip(self.packed_blocks(k))
                .map(|(b, p)| (at + p.off, dst + b.off, b.len))
                .collect();
            relay.store(slot(k), &segs)
        };
        fetch(relay, 0)?;
        let mut flight = Flight::default();
        for k in 0..n {
            let buf = relay.fetched(slot(k))?.as_mut_ptr();
            if k + 1 < n {
                fetch(relay, k + 1)?;
            }
            let r = match self.plan {
                Plan::Allreduce(_) => self.start(k, None, buf, &self.packed_blocks(k))?,
                Plan::Alltoall { .. } => self.start(
                    k,
                    Some(buf),
                    buf.add(self.result_at(k)),
                    &self.packed_blocks(k),
                )?,
            };
            flight.push(k, r);
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

/// The packed bytes of the input `side` (any memory, any layout), `bytes` long.
unsafe fn packed_input(side: &Side, bytes: usize) -> MpiResult<HostBuf> {
    if let Some(p) = side.device_packed(true)? {
        return Ok(p.host);
    }
    let mirror = side.mirrored(true)?;
    let s = mirror.as_ref().map_or(side, |(_, s)| s);
    let (ptr, blocks, tmp) = s.map(true);
    if let Some(t) = tmp {
        return Ok(HostBuf::from_vec(t));
    }
    let mut out = vec![0u8; bytes];
    let mut at = 0;
    for b in &blocks {
        out[at..at + b.len].copy_from_slice(std::slice::from_raw_parts(ptr.add(b.off), b.len));
        at += b.len;
    }
    Ok(HostBuf::from_vec(out))
}

/// Write the packed result `bytes` into the receive side `side` (any memory, any
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
        let mut at = 0;
        for b in &blocks {
            std::ptr::copy_nonoverlapping(bytes.as_ptr().add(at), ptr.add(b.off), b.len);
            at += b.len;
        }
    } else {
        side.unpack(bytes, None);
    }
}
