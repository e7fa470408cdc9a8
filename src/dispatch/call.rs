//! The description of one collective call, as the C ABI builds it: the collective, the
//! communicator, the user's typed buffers as blocks (a [`Side`] each), the byte count, the
//! reduction and the root, resolved and validated once.

use crate::coll::{Block, CollKind};
use crate::gpu::stage::Mirror;
use crate::mpi::datatype::Elem;
use crate::mpi::error::MpiResult;
use crate::mpi::op::{self as ops, BuiltinOp};
use crate::runtime::objects::{CommObj, OpObj, UserOpFn};
use crate::runtime::types::{self, check_count, DtypeObj};
use crate::standard::ffi::*;
use smallvec::{smallvec, SmallVec};
use std::os::raw::{c_int, c_void};
use std::sync::Arc;

pub(crate) fn in_place(p: *const c_void) -> bool {
    p as usize == 1
}

/// One typed block of a user buffer: `count` elements of `dt` at byte offset `disp` from the base.
#[derive(Clone)]
pub(crate) struct TBlock {
    pub(crate) disp: isize,
    pub(crate) count: usize,
    pub(crate) dt: Arc<DtypeObj>,
}

/// A user buffer as blocks (per peer for the v/w collectives, one block otherwise: kept inline,
/// so a one-block side costs no allocation).
#[derive(Clone)]
pub(crate) struct Side {
    pub(crate) base: usize,
    pub(crate) blocks: SmallVec<[TBlock; 1]>,
}

impl Side {
    pub(crate) fn one(buf: *const c_void, count: usize, dt: &Arc<DtypeObj>) -> Side {
        Side {
            base: buf as usize,
            blocks: smallvec![TBlock {
                disp: 0,
                count,
                dt: dt.clone(),
            }],
        }
    }
    /// `n` blocks of `count` elements, block i at i * count * extent.
    pub(crate) fn regular(buf: *const c_void, n: usize, count: usize, dt: &Arc<DtypeObj>) -> Side {
        let ext = dt.extent();
        Side {
            base: buf as usize,
            blocks: (0..n)
                .map(|i| TBlock {
                    disp: i as isize * count as isize * ext,
                    count,
                    dt: dt.clone(),
                })
                .collect(),
        }
    }
    /// Blocks from counts and displacements in units of the type's extent.
    pub(crate) fn varying(
        buf: *const c_void,
        counts: &[i64],
        displs: &[i64],
        dt: &Arc<DtypeObj>,
    ) -> MpiResult<Side> {
        let ext = dt.extent();
        let mut blocks = SmallVec::with_capacity(counts.len());
        for (&n, &d) in counts.iter().zip(displs) {
            blocks.push(TBlock {
                disp: d as isize * ext,
                count: check_count(n)?,
                dt: dt.clone(),
            });
        }
        Ok(Side {
            base: buf as usize,
            blocks,
        })
    }
    /// Validate the buffer (the standard ABI's special pointers, NULL reaching the zero page).
    pub(crate) fn check(&self, what: &str) -> MpiResult<()> {
        for b in &self.blocks {
            types::check_buf_at(self.base as *const c_void, b.disp, b.count, &b.dt, what)?;
        }
        if self.blocks.is_empty() {
            types::check_buf(self.base as *const c_void, 0, &types::BYTE, what)?;
        }
        Ok(())
    }
    pub(crate) fn packed_len(&self) -> usize {
        self.blocks
            .iter()
            .map(|b| b.dt.desc.packed_size(b.count))
            .sum()
    }
    /// Whether the user's memory can serve as the packed space directly.
    pub(crate) fn direct(&self) -> bool {
        self.blocks.iter().all(|b| {
            b.count == 0 || (b.dt.desc.is_contiguous(b.count) && b.disp + b.dt.desc.true_lb() >= 0)
        })
    }
    /// Map into packed space: (base pointer, blocks in packed space, temporary if packed).
    /// `fill`: pack the user's data into the temporary (inputs).
    pub(crate) unsafe fn map(&self, fill: bool) -> (*mut u8, Vec<Block>, Option<Vec<u8>>) {
        if self.direct() {
            let blocks = self
                .blocks
                .iter()
                .map(|b| {
                    Block::new(
                        if b.count == 0 {
                            0
                        } else {
                            (b.disp + b.dt.desc.true_lb()) as usize
                        },
                        b.dt.desc.packed_size(b.count),
                    )
                })
                .collect();
            return (self.base as *mut u8, blocks, None);
        }
        let mut tmp = vec![0u8; self.packed_len()];
        let mut blocks = Vec::with_capacity(self.blocks.len());
        let mut off = 0;
        for b in &self.blocks {
            let len = b.dt.desc.packed_size(b.count);
            if fill && len > 0 {
                b.dt.desc.pack(
                    b.count,
                    (self.base as *const u8).wrapping_offset(b.disp),
                    &mut tmp[off..off + len],
                );
            }
            blocks.push(Block::new(off, len));
            off += len;
        }
        (tmp.as_mut_ptr(), blocks, Some(tmp))
    }
    /// The blocks as one contiguous byte range in order: (address, length), if they are.
    pub(crate) fn contiguous(&self) -> Option<(usize, usize)> {
        let first = self.blocks.first()?;
        let start = first.disp + first.dt.desc.true_lb();
        let mut at = start;
        for b in &self.blocks {
            if b.count == 0 {
                continue;
            }
            if !b.dt.desc.is_contiguous(b.count) || b.disp + b.dt.desc.true_lb() != at {
                return None;
            }
            at += b.dt.desc.packed_size(b.count) as isize;
        }
        Some(((self.base as isize + start) as usize, (at - start) as usize))
    }
    /// Whether the blocks cover their span exactly: contiguous, one after another, no gap
    /// (so a call that writes every block writes every byte of the span).
    pub(crate) fn tiles_span(&self) -> bool {
        let (lo, hi) = self.span();
        self.contiguous().is_some_and(|(at, len)| {
            at == self.base.wrapping_add_signed(lo) && len as isize == hi - lo
        })
    }
    /// The bytes of the user's buffer the blocks touch, relative to `base`.
    pub(crate) fn span(&self) -> (isize, isize) {
        let mut lo = isize::MAX;
        let mut hi = isize::MIN;
        for b in &self.blocks {
            let (l, h) = crate::gpu::layout::span(&b.dt.desc, b.count);
            if h > l {
                lo = lo.min(b.disp + l);
                hi = hi.max(b.disp + h);
            }
        }
        if hi > lo {
            (lo, hi)
        } else {
            (0, 0)
        }
    }
    /// When the buffer is device memory: a host mirror of its span (filled from the device
    /// when `fill`) and the same side re-based onto the mirror, so `map`/`unpack` work on host
    /// memory.
    pub(crate) unsafe fn mirrored(&self, fill: bool) -> MpiResult<Option<(Mirror, Side)>> {
        let (lo, hi) = self.span();
        let Some(m) = Mirror::of(self.base, lo, hi, fill)? else {
            return Ok(None);
        };
        let side = Side {
            base: m.base(),
            blocks: self.blocks.clone(),
        };
        Ok(Some((m, side)))
    }
    /// A device buffer with a layout that is not contiguous, as packed bytes in (page-locked)
    /// host memory: packed there by the GPU pack kernel when it applies (`gpu::stage`), which
    /// moves only the layout's bytes, never the span. `fill`: pack the user's data (inputs, and
    /// outputs the collective may leave unwritten). None: host memory, or every block
    /// contiguous (the span mirror serves those with one copy each way).
    pub(crate) unsafe fn device_packed(&self, fill: bool) -> MpiResult<Option<DevPacked>> {
        if self.direct() {
            return Ok(None);
        }
        let (lo, hi) = self.span();
        if hi <= lo {
            return Ok(None);
        }
        let at = (self.base as *const u8).wrapping_offset(lo);
        let Some(info) = crate::gpu::stage::device_info(at) else {
            return Ok(None);
        };
        let mut host = crate::gpu::stage::staging(&info, self.packed_len())?;
        let mut blocks = Vec::with_capacity(self.blocks.len());
        let mut off = 0;
        for b in &self.blocks {
            let len = b.dt.desc.packed_size(b.count);
            blocks.push(Block::new(off, len));
            off += len;
        }
        if fill {
            for r in self.runs(None) {
                let at = (self.base as *const u8).wrapping_offset(r.disp);
                let dst = &mut host[r.off..r.off + r.dt.desc.packed_size(r.count)];
                if !crate::gpu::stage::pack_device_into(at, r.count, &r.dt.desc, dst)? {
                    r.dt.desc.pack(r.count, at, dst);
                }
            }
        }
        Ok(Some(DevPacked {
            host,
            blocks,
            side: self.clone(),
        }))
    }
    /// The blocks (or only block `only`) with their offsets in packed space, consecutive blocks
    /// of one type that continue each other in memory merged into one (the regular sides of
    /// allgather, alltoall, gather, scatter are one run of `n * count` elements).
    pub(crate) fn runs(&self, only: Option<usize>) -> Vec<PackedRun> {
        let mut out: Vec<PackedRun> = Vec::new();
        let mut off = 0;
        for (i, b) in self.blocks.iter().enumerate() {
            let len = b.dt.desc.packed_size(b.count);
            if len > 0 && only.is_none_or(|o| o == i) {
                match out.last_mut() {
                    Some(r)
                        if only.is_none()
                            && Arc::ptr_eq(&r.dt, &b.dt)
                            && r.off + r.dt.desc.packed_size(r.count) == off
                            && r.disp + r.count as isize * b.dt.extent() == b.disp =>
                    {
                        r.count += b.count
                    }
                    _ => out.push(PackedRun {
                        disp: b.disp,
                        count: b.count,
                        dt: b.dt.clone(),
                        off,
                    }),
                }
            }
            off += len;
        }
        out
    }
    /// Unpack a temporary made by `map` back into the user's buffer.
    pub(crate) unsafe fn unpack(&self, tmp: &[u8], only: Option<usize>) {
        let mut off = 0;
        for (i, b) in self.blocks.iter().enumerate() {
            let len = b.dt.desc.packed_size(b.count);
            if only.is_none_or(|o| o == i) && len > 0 {
                b.dt.desc.unpack(
                    b.count,
                    &tmp[off..off + len],
                    (self.base as *mut u8).wrapping_offset(b.disp),
                );
            }
            off += len;
        }
    }
}

/// `count` elements of `dt` at `disp` from a side's base, packed at `off` (`Side::runs`).
pub(crate) struct PackedRun {
    pub(crate) disp: isize,
    pub(crate) count: usize,
    pub(crate) dt: Arc<DtypeObj>,
    pub(crate) off: usize,
}

/// A device side packed into host memory (`Side::device_packed`): the collective runs on
/// `host` as packed `blocks`; outputs are unpacked into the device buffer at completion.
pub(crate) struct DevPacked {
    pub(crate) host: crate::gpu::pool::HostBuf,
    pub(crate) blocks: Vec<Block>,
    pub(crate) side: Side,
}

impl DevPacked {
    /// Store the packed bytes (or only block `only`) into the user's device buffer: the GPU
    /// pack kernel writes only the layout's bytes (`gpu::stage::unpack_to_device`).
    pub(crate) unsafe fn unpack(&self, only: Option<usize>) -> MpiResult<()> {
        for r in self.side.runs(only) {
            let src = &self.host[r.off..r.off + r.dt.desc.packed_size(r.count)];
            let at = (self.side.base as *mut u8).wrapping_offset(r.disp);
            if !crate::gpu::stage::unpack_to_device(src, at, r.count, &r.dt.desc)? {
                r.dt.desc.unpack(r.count, src, at);
            }
        }
        Ok(())
    }
}

/// A call whose schedule runs on its device buffers ([`CollSpec::device_sides`]): their
/// device, and which sides are device memory (the others are host memory).
#[derive(Clone, Copy, Debug)]
pub(crate) struct DevSides {
    pub(crate) device: i32,
    pub(crate) send: bool,
    pub(crate) recv: bool,
}

/// The reduction of a call: a builtin op on an element type, or a user operation (held for as
/// long as the call, so freeing the op meanwhile leaves it usable).
#[derive(Clone)]
pub(crate) enum Reduction {
    Builtin(BuiltinOp, Elem),
    User {
        op: Arc<OpObj>,
        dt: MPI_Datatype,
        size: usize,
    },
}

// SAFETY: the op holds function pointers and the user's extra state (an address the user
// shares with its callbacks); a datatype handle is a plain value.
unsafe impl Send for Reduction {}

impl Reduction {
    pub(crate) fn elem_size(&self) -> usize {
        match self {
            Reduction::Builtin(_, e) => e.size(),
            Reduction::User { size, .. } => *size,
        }
    }
    pub(crate) fn apply(&self, input: &[u8], inout: &mut [u8]) -> MpiResult<()> {
        match self {
            Reduction::Builtin(op, e) => ops::reduce(*op, *e, input, inout),
            Reduction::User { op, dt, size } => {
                if *size == 0 {
                    return Ok(());
                }
                let n = inout.len() / size;
                let (i, o) = (
                    input.as_ptr() as *mut c_void,
                    inout.as_mut_ptr() as *mut c_void,
                );
                // SAFETY: the user registered this function with the op; the buffers hold n
                // elements of the type in its own (contiguous) layout.
                unsafe {
                    match &op.func {
                        UserOpFn::Int(f) => {
                            // An int length: calls of at most c_int::MAX elements.
                            let step = c_int::MAX as usize;
                            for k in (0..n).step_by(step) {
                                let mut len = (n - k).min(step) as c_int;
                                let mut dt = *dt;
                                let off = k * size;
                                f(
                                    (i as *mut u8).add(off) as *mut c_void,
                                    (o as *mut u8).add(off) as *mut c_void,
                                    &mut len,
                                    &mut dt,
                                );
                            }
                        }
                        UserOpFn::Large(f) => {
                            let (mut len, mut dt) = (n as MPI_Count, *dt);
                            f(i, o, &mut len, &mut dt);
                        }
                        UserOpFn::X(f, st) => f(i, o, n as MPI_Count, *dt, st.extra as *mut c_void),
                    }
                }
                Ok(())
            }
        }
    }
}

/// A validated collective call, ready to start (once, or at each MPI_Start).
pub(crate) struct CollSpec {
    pub(crate) kind: CollKind,
    pub(crate) comm: Arc<CommObj>,
    pub(crate) root: usize,
    pub(crate) bytes: usize,
    pub(crate) send: Option<Side>,
    pub(crate) recv: Option<Side>,
    /// Whether the Recv side holds input (bcast root, in-place) and must be packed at start.
    pub(crate) recv_is_input: bool,
    pub(crate) in_place: bool,
    pub(crate) red: Option<(Reduction, bool)>,
    /// Whether to unpack only this rank's recv block (reduce_scatter lays blocks differently).
    pub(crate) unpack_only: Option<usize>,
    /// reduce_scatter: result lengths per rank (offsets unused).
    pub(crate) rs_lens: Option<Vec<usize>>,
    /// Library-internal call on host memory: never tries the GPU path (which itself uses
    /// these calls).
    pub(crate) host_only: bool,
    /// Internal collectives the GPU paths made in this call so far (their numbers,
    /// `engine::collcheck::CallNo::sub`, continue from path to path).
    pub(crate) subs: std::cell::Cell<u32>,
}
// SAFETY: raw user buffer addresses stored as usize; used only during the call per MPI semantics.
unsafe impl Send for CollSpec {}

impl CollSpec {
    pub(crate) fn new(kind: CollKind, comm: Arc<CommObj>) -> Self {
        CollSpec {
            kind,
            comm,
            root: 0,
            bytes: 0,
            send: None,
            recv: None,
            recv_is_input: false,
            in_place: false,
            red: None,
            unpack_only: None,
            rs_lens: None,
            host_only: false,
            subs: std::cell::Cell::new(0),
        }
    }

    /// Whether a host mirror of the receive side `r` must first be filled from the device:
    /// unless the receive side holds no input and the call writes every byte of its span
    /// (every block, blocks tiling the span; exscan leaves rank 0's output unwritten, and
    /// reduce_scatter lays out only this rank's block).
    pub(crate) fn recv_mirror_needs_fill(&self, r: &Side) -> bool {
        self.recv_is_input
            || self.kind == CollKind::Exscan
            || self.unpack_only.is_some()
            || self.rs_lens.is_some()
            || !r.tiles_span()
    }

    /// Where the call's schedule between nodes runs on its device buffers themselves
    /// (`runtime::coll_device`, `GPUMPI_COLL_DEVICE`): a communicator that spans nodes, a
    /// collective without a reduction, or an allreduce, reduce or reduce_scatter_block on
    /// device buffers only whose op commutes and has a GPU kernel for its type, and every side that is device memory contiguous (its blocks in packed space are the memory itself) in
    /// one allocation of one device, at least one side being device memory. `None`: the
    /// device buffers are staged in host memory as before. Each rank decides for itself: the
    /// schedule and its messages are the same either way.
    pub(crate) fn device_sides(&self) -> Option<DevSides> {
        if self.comm.one_node || self.host_only {
            return None;
        }
        // An allreduce needs a GPU kernel for its op and type: a reduction through host memory
        // at every step would cost more than staging the call once.
        let kernel = |r: &Reduction| match r {
            Reduction::Builtin(op, e) => {
                crate::gpu::kernels::embedded()
                    && crate::gpu::kernels::kernel_for(*op, *e).is_some()
            }
            Reduction::User { .. } => false,
        };
        match (self.kind, &self.red) {
            (k, _) if !k.is_reduction() => {}
            (
                CollKind::Allreduce | CollKind::Reduce | CollKind::ReduceScatterBlock,
                Some((r, true)),
            ) if kernel(r) => {}
            _ => return None,
        }
        let mut device = None;
        let mut on = [false; 2];
        for (i, side) in [&self.send, &self.recv].into_iter().enumerate() {
            let Some(s) = side else { continue };
            let (lo, hi) = s.span();
            if hi <= lo {
                continue;
            }
            let at = s.base.wrapping_add_signed(lo);
            let Some(info) = crate::gpu::stage::device_info(at as *const u8) else {
                continue;
            };
            let inside = at >= info.start && at + (hi - lo) as usize <= info.start + info.len;
            if info.kind != crate::gpu::cache::MemKind::Device
                || !s.direct()
                || !inside
                || device.is_some_and(|d| d != info.device)
            {
                return None;
            }
            device = Some(info.device);
            on[i] = true;
        }
        let device = device?;
        // A reduction between a host and a device buffer would copy a device operand to the
        // host at every step: such a call is staged as before.
        if self.kind.is_reduction()
            && on.iter().zip([&self.send, &self.recv]).any(|(&d, s)| {
                !d && s.as_ref().is_some_and(|s| {
                    let (lo, hi) = s.span();
                    hi > lo
                })
            })
        {
            return None;
        }
        if !crate::runtime::coll_device() {
            return None;
        }
        Some(DevSides {
            device,
            send: on[0],
            recv: on[1],
        })
    }

    /// Validate the user buffers the call will access (those set in `send` and `recv`: a buffer
    /// that is not significant at this rank, or replaced by MPI_IN_PLACE, is not there).
    pub(crate) fn checked(self) -> MpiResult<CollSpec> {
        if let Some(s) = &self.send {
            s.check("sendbuf")?;
        }
        if let Some(r) = &self.recv {
            r.check(if self.kind == CollKind::Bcast {
                "buffer"
            } else {
                "recvbuf"
            })?;
        }
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mpi::datatype::{Basic, TypeDesc};

    fn int32() -> Arc<DtypeObj> {
        Arc::new(DtypeObj::new(TypeDesc::predefined(Basic::Int32)))
    }

    fn side(counts: &[i64], displs: &[i64]) -> Side {
        Side::varying(0x10000 as *const c_void, counts, displs, &int32()).unwrap()
    }

    #[test]
    fn blocks_tile_their_span_only_without_gaps_or_disorder() {
        let t = int32();
        assert!(Side::one(0x10000 as *const c_void, 5, &t).tiles_span());
        assert!(Side::regular(0x10000 as *const c_void, 4, 3, &t).tiles_span());
        assert!(side(&[2, 3, 1], &[0, 2, 5]).tiles_span());
        // Zero-count blocks anywhere change nothing.
        assert!(side(&[2, 0, 3], &[0, 40, 2]).tiles_span());
        // A gap between blocks: the call would leave it unwritten.
        assert!(!side(&[2, 3], &[0, 3]).tiles_span());
        // Out of order (each byte written, but not as one run from the first block).
        assert!(!side(&[2, 2], &[2, 0]).tiles_span());
        // Overlapping blocks.
        assert!(!side(&[2, 2], &[0, 1]).tiles_span());
    }
}
