//! Collective operations, blocking, nonblocking and persistent (MPI 5.0 chapter 6).
//!
//! Each call is turned into a [`CollSpec`]: the user's typed buffers described
//! as blocks, resolved and validated once. Starting it maps the blocks into a
//! packed byte space (the user's memory directly when every block is
//! contiguous, else temporaries packed now and unpacked at completion), builds
//! the schedule selected by `coll::build`, and hands it to the engine's
//! executor. Blocking calls wait for it; `MPI_I*` return a request; `*_init`
//! keep the spec and start it anew at every `MPI_Start`.

use super::p2p::check_count;
use super::util::*;
use crate::abi::consts as c;
use crate::abi::ffi::*;
use crate::abi::objects::{comm, nonnull, objects, CommObj, OpObj, COLL_CTX_BIT};
use crate::abi::request::{Post, ReqKind, Request, Starter, Status};
use crate::abi::runtime::{self, new_request, Runtime};
use crate::abi::types::{self, DtypeObj};
use crate::coll::{self, Block, CollArgs, CollKind};
use crate::engine::coll::CollExec;
use crate::engine::flag::{FlagOp, Slots};
use crate::engine::Backoff;
use crate::gpu::stage::Mirror;
use crate::mpi::datatype::Elem;
use crate::mpi::error::{MpiError, MpiResult};
use crate::mpi::op::{self as ops, BuiltinOp};
use crate::mpi_bail;
use smallvec::{smallvec, SmallVec};
use std::os::raw::{c_int, c_void};
use std::sync::Arc;

mod mid;

fn in_place(p: *const c_void) -> bool {
    p as usize == 1
}

/// One typed block of a user buffer: `count` elements of `dt` at byte offset `disp` from the base.
#[derive(Clone)]
struct TBlock {
    disp: isize,
    count: usize,
    dt: Arc<DtypeObj>,
}

/// A user buffer as blocks (per peer for the v/w collectives, one block otherwise: kept inline,
/// so a one-block side costs no allocation).
#[derive(Clone)]
struct Side {
    base: usize,
    blocks: SmallVec<[TBlock; 1]>,
}

impl Side {
    fn one(buf: *const c_void, count: usize, dt: &Arc<DtypeObj>) -> Side {
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
    fn regular(buf: *const c_void, n: usize, count: usize, dt: &Arc<DtypeObj>) -> Side {
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
    fn varying(
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
    fn check(&self, what: &str) -> MpiResult<()> {
        for b in &self.blocks {
            types::check_buf_at(self.base as *const c_void, b.disp, b.count, &b.dt, what)?;
        }
        if self.blocks.is_empty() {
            types::check_buf(self.base as *const c_void, 0, &types::BYTE, what)?;
        }
        Ok(())
    }
    fn packed_len(&self) -> usize {
        self.blocks
            .iter()
            .map(|b| b.dt.desc.packed_size(b.count))
            .sum()
    }
    /// Whether the user's memory can serve as the packed space directly.
    fn direct(&self) -> bool {
        self.blocks.iter().all(|b| {
            b.count == 0 || (b.dt.desc.is_contiguous(b.count) && b.disp + b.dt.desc.true_lb() >= 0)
        })
    }
    /// Map into packed space: (base pointer, blocks in packed space, temporary if packed).
    /// `fill`: pack the user's data into the temporary (inputs).
    unsafe fn map(&self, fill: bool) -> (*mut u8, Vec<Block>, Option<Vec<u8>>) {
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
    fn contiguous(&self) -> Option<(usize, usize)> {
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
    /// The bytes of the user's buffer the blocks touch, relative to `base`.
    fn span(&self) -> (isize, isize) {
        let mut lo = isize::MAX;
        let mut hi = isize::MIN;
        for b in &self.blocks {
            let (l, h) = crate::gpu::stage::span(&b.dt.desc, b.count);
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
    /// When the buffer is device memory: a host mirror of its span (filled from the device)
    /// and the same side re-based onto the mirror, so `map`/`unpack` work on host memory.
    unsafe fn mirrored(&self) -> MpiResult<Option<(Mirror, Side)>> {
        let (lo, hi) = self.span();
        let Some(m) = Mirror::of(self.base, lo, hi, true)? else {
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
    unsafe fn device_packed(&self, fill: bool) -> MpiResult<Option<DevPacked>> {
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
    fn runs(&self, only: Option<usize>) -> Vec<PackedRun> {
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
    unsafe fn unpack(&self, tmp: &[u8], only: Option<usize>) {
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
struct PackedRun {
    disp: isize,
    count: usize,
    dt: Arc<DtypeObj>,
    off: usize,
}

/// A device side packed into host memory (`Side::device_packed`): the collective runs on
/// `host` as packed `blocks`; outputs are unpacked into the device buffer at completion.
struct DevPacked {
    host: crate::gpu::pool::HostBuf,
    blocks: Vec<Block>,
    side: Side,
}

impl DevPacked {
    /// Store the packed bytes (or only block `only`) into the user's device buffer: the GPU
    /// pack kernel writes only the layout's bytes (`gpu::stage::unpack_to_device`).
    unsafe fn unpack(&self, only: Option<usize>) -> MpiResult<()> {
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

/// The reduction of a call: a builtin op on an element type, or a user function.
#[derive(Clone)]
enum Reduction {
    Builtin(BuiltinOp, Elem),
    User {
        func: usize,
        large: bool,
        dt: MPI_Datatype,
        size: usize,
    },
}

// SAFETY: a user function pointer and a datatype handle value are plain values.
unsafe impl Send for Reduction {}

impl Reduction {
    fn elem_size(&self) -> usize {
        match self {
            Reduction::Builtin(_, e) => e.size(),
            Reduction::User { size, .. } => *size,
        }
    }
    fn apply(&self, input: &[u8], inout: &mut [u8]) -> MpiResult<()> {
        match self {
            Reduction::Builtin(op, e) => ops::reduce(*op, *e, input, inout),
            Reduction::User {
                func,
                large,
                dt,
                size,
            } => {
                if *size == 0 {
                    return Ok(());
                }
                let n = inout.len() / size;
                let mut dt = *dt;
                // SAFETY: the user registered this MPI_User_function (or _c variant); buffers hold
                // n elements of the type in its own (contiguous) layout.
                unsafe {
                    if *large {
                        let f: unsafe extern "C" fn(
                            *mut c_void,
                            *mut c_void,
                            *mut MPI_Count,
                            *mut MPI_Datatype,
                        ) = std::mem::transmute(*func);
                        let mut len = n as MPI_Count;
                        f(
                            input.as_ptr() as *mut c_void,
                            inout.as_mut_ptr() as *mut c_void,
                            &mut len,
                            &mut dt,
                        );
                    } else {
                        let f: unsafe extern "C" fn(
                            *mut c_void,
                            *mut c_void,
                            *mut c_int,
                            *mut MPI_Datatype,
                        ) = std::mem::transmute(*func);
                        let mut len = n as c_int;
                        f(
                            input.as_ptr() as *mut c_void,
                            inout.as_mut_ptr() as *mut c_void,
                            &mut len,
                            &mut dt,
                        );
                    }
                }
                Ok(())
            }
        }
    }
}

pub fn builtin_op(h: MPI_Op) -> Option<BuiltinOp> {
    Some(match h as usize {
        0x21 => BuiltinOp::Sum,
        0x22 => BuiltinOp::Min,
        0x23 => BuiltinOp::Max,
        0x24 => BuiltinOp::Prod,
        0x28 => BuiltinOp::Band,
        0x29 => BuiltinOp::Bor,
        0x2a => BuiltinOp::Bxor,
        0x30 => BuiltinOp::Land,
        0x31 => BuiltinOp::Lor,
        0x32 => BuiltinOp::Lxor,
        0x38 => BuiltinOp::Minloc,
        0x39 => BuiltinOp::Maxloc,
        0x3c => BuiltinOp::Replace,
        0x3d => BuiltinOp::NoOp,
        _ => return None,
    })
}

/// Resolve (op, datatype) into a reduction; `commute` reports the op's commutativity.
fn reduction(op: MPI_Op, dth: MPI_Datatype, dt: &DtypeObj) -> MpiResult<(Reduction, bool)> {
    if op == c::MPI_OP_NULL {
        mpi_bail!(MPI_ERR_OP, "the operation is MPI_OP_NULL");
    }
    if let Some(b) = builtin_op(op) {
        let Some(e) = dt.desc.elem() else {
            mpi_bail!(MPI_ERR_TYPE, "a predefined operation needs a datatype made of one basic type (or a MINLOC/MAXLOC pair type)")
        };
        ops::check(b, e)?;
        return Ok((Reduction::Builtin(b, e), true));
    }
    let o = objects().ops.get(op as usize);
    match o.as_deref() {
        Some(OpObj::User {
            func,
            commute,
            large_count,
        }) => {
            if !dt.desc.is_contiguous(1) {
                mpi_bail!(
                    MPI_ERR_TYPE,
                    "user-defined operations on non-contiguous datatypes are not supported yet"
                );
            }
            Ok((
                Reduction::User {
                    func: *func,
                    large: *large_count,
                    dt: dth,
                    size: dt.size(),
                },
                *commute,
            ))
        }
        None => mpi_bail!(
            MPI_ERR_OP,
            "invalid operation handle {:#x} (freed, or not an op)",
            op as usize
        ),
    }
}

/// A validated collective call, ready to start (once, or at each MPI_Start).
struct CollSpec {
    kind: CollKind,
    comm: Arc<CommObj>,
    root: usize,
    bytes: usize,
    send: Option<Side>,
    recv: Option<Side>,
    /// Whether the Recv side holds input (bcast root, in-place) and must be packed at start.
    recv_is_input: bool,
    in_place: bool,
    red: Option<(Reduction, bool)>,
    /// Whether to unpack only this rank's recv block (reduce_scatter lays blocks differently).
    unpack_only: Option<usize>,
    /// reduce_scatter: result lengths per rank (offsets unused).
    rs_lens: Option<Vec<usize>>,
    /// Library-internal call on host memory: never tries the GPU path (which itself uses
    /// these calls).
    host_only: bool,
}
// SAFETY: raw user buffer addresses stored as usize; used only during the call per MPI semantics.
unsafe impl Send for CollSpec {}

impl CollSpec {
    fn new(kind: CollKind, comm: Arc<CommObj>) -> Self {
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
        }
    }

    /// Validate the user buffers the call will access (those set in `send` and `recv`: a buffer
    /// that is not significant at this rank, or replaced by MPI_IN_PLACE, is not there).
    fn checked(self) -> MpiResult<CollSpec> {
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

    unsafe fn start(&self) -> MpiResult<ReqKind> {
        // Device buffers are staged through host mirrors (gpu::stage): the send side's mirror
        // is held until completion, the receive side's is written back by the post step.
        // Host buffers (the common case) are used through `self` without cloning their sides.
        // Non-contiguous device layouts are packed into host memory instead (on the GPU where
        // it applies). Exscan leaves rank 0's output unwritten: it is packed too, so it keeps
        // its contents.
        let sdev = match &self.send {
            Some(s) => s.device_packed(true)?,
            None => None,
        };
        let mut rdev = match &self.recv {
            Some(r) => r.device_packed(self.recv_is_input || self.kind == CollKind::Exscan)?,
            None => None,
        };
        let smir = match (&self.send, &sdev) {
            (Some(s), None) => s.mirrored()?,
            _ => None,
        };
        let rmir = match (&self.recv, &rdev) {
            (Some(r), None) => r.mirrored()?,
            _ => None,
        };
        let send = smir.as_ref().map(|(_, side)| side).or(self.send.as_ref());
        let recv = rmir.as_ref().map(|(_, side)| side).or(self.recv.as_ref());
        let (sptr, sblocks, shold) = match (&sdev, send) {
            (Some(p), _) => (p.host.as_ptr() as *mut u8, p.blocks.clone(), None),
            (None, Some(s)) => s.map(true),
            (None, None) => (std::ptr::null_mut(), Vec::new(), None),
        };
        let (rptr, mut rblocks, rhold) = match (&mut rdev, recv) {
            (Some(p), _) => (p.host.as_mut_ptr(), p.blocks.clone(), None),
            (None, Some(r)) => r.map(self.recv_is_input),
            (None, None) => (std::ptr::null_mut(), Vec::new(), None),
        };
        if let Some(l) = &self.rs_lens {
            rblocks = l.iter().map(|&len| Block::new(0, len)).collect();
        }
        let (elem_size, commutative) = match &self.red {
            Some((r, commute)) => (r.elem_size().max(1), *commute),
            None => (1, true),
        };
        let args = CollArgs {
            rank: self.comm.rank,
            size: self.comm.size(),
            root: self.root,
            bytes: self.bytes,
            send_blocks: &sblocks,
            recv_blocks: &rblocks,
            elem_size,
            in_place: self.in_place,
            commutative,
        };
        let (algo, sched) = coll::build_shared(self.kind, &args)?;
        tracing::debug!(
            coll = self.kind.name(),
            algo,
            bytes = self.bytes,
            ranks = self.comm.size(),
            "collective over shared memory"
        );
        let reduce: crate::engine::coll::ReduceFn = match self.red.clone() {
            Some((r, _)) => Box::new(move |i: &[u8], o: &mut [u8]| r.apply(i, o)),
            None => Box::new(|_: &[u8], _: &mut [u8]| {
                Err(MpiError::intern(
                    "reduction step in a collective without an operation",
                ))
            }),
        };
        let tag = self.comm.next_coll_tag();
        let exec = CollExec::new(
            sched,
            sptr as *const u8,
            rptr,
            self.comm.ctx | COLL_CTX_BIT,
            tag,
            self.comm.peers.clone(),
            self.comm.rank,
            reduce,
        );
        let mut hold = Vec::new();
        if let Some(h) = shold {
            hold.push(crate::gpu::pool::HostBuf::from_vec(h));
        }
        if let Some((m, _)) = smir {
            hold.push(m.into_host());
        }
        if let Some(p) = sdev {
            hold.push(p.host);
        }
        let rside = match rmir {
            Some((m, side)) => Some((Some(m), side)),
            None if rhold.is_some() => self.recv.clone().map(|side| (None, side)),
            None => None,
        };
        let post: Option<Post> = match (rhold, rside, rdev) {
            (_, _, Some(p)) => {
                let only = self.unpack_only;
                Some(Box::new(move |_st: &mut Status| p.unpack(only)))
            }
            (_, None, None) => None,
            (tmp, Some((mirror, side)), None) => {
                let only = self.unpack_only;
                Some(Box::new(move |_st: &mut Status| {
                    if let Some(tmp) = tmp {
                        side.unpack(&tmp, only);
                    }
                    if let Some(m) = mirror {
                        m.flush()?;
                    }
                    Ok(())
                }))
            }
        };
        Ok(ReqKind::Coll {
            exec: Box::new(exec),
            post,
            result: None,
            hold,
        })
    }
}

/// How a collective call is completed.
#[derive(Clone, Copy)]
enum Mode {
    Blocking,
    Nonblocking(*mut MPI_Request),
    Persistent(*mut MPI_Request),
}

/// The host collectives the GPU path needs, over the call's communicator.
struct GpuHost<'a>(&'a Arc<CommObj>);

impl crate::gpu::coll::Host for GpuHost<'_> {
    fn allgather(&self, mine: &[u8]) -> MpiResult<Vec<u8>> {
        allgather_bytes(self.0, mine)
    }
    fn barrier(&self) -> MpiResult<()> {
        let mut s = CollSpec::new(CollKind::Barrier, self.0.clone());
        s.host_only = true;
        // SAFETY: no user buffers.
        unsafe { run(s, Mode::Blocking) }
    }
    fn all(&self, ok: bool) -> MpiResult<bool> {
        let mut w = [ok as u64];
        allreduce_band_u64(self.0, &mut w)?;
        Ok(w[0] != 0)
    }
    fn world_rank(&self, p: usize) -> usize {
        self.0.peers[p]
    }
    fn identity(&self) -> (u32, Arc<[usize]>) {
        (self.0.ctx, self.0.peers.clone())
    }
    fn gpu(&self) -> &crate::gpu::comm::CommGpu {
        &self.0.gpu
    }
}

/// Release what the GPU paths hold for `comm` (collective: `MPI_Comm_free`).
pub fn release_gpu(comm: &Arc<CommObj>) -> MpiResult<()> {
    comm.gpu.release(&GpuHost(comm))
}

/// Blocking collectives whose every rank passes device buffers run GPU-native (CUDA IPC,
/// kernels over NVLink: src/gpu/coll.rs). `Ok(false)`: every rank takes the staged path.
/// The decision is collective: each condition checked before the exchange is the same on
/// every rank (kind, sizes, op), the rest is agreed on inside `gpu::coll::run`.
unsafe fn try_gpu(spec: &CollSpec) -> MpiResult<bool> {
    use crate::gpu::coll::{Call, Shape};
    use CollKind as K;
    if !matches!(
        spec.kind,
        K::Allreduce | K::Alltoall | K::Allgather | K::Bcast | K::Reduce | K::ReduceScatterBlock
    ) || spec.bytes == 0
        || spec.host_only
        || !crate::gpu::coll::enabled()
    {
        return Ok(false);
    }
    let red = match &spec.red {
        None => None,
        Some((Reduction::Builtin(op, e), _)) => match crate::gpu::kernels::kernel_for(*op, *e) {
            Some(k) => Some(k),
            None => return Ok(false),
        },
        Some(_) => return Ok(false),
    };
    let n = spec.comm.size();
    let b = spec.bytes;
    let (slen, rlen) = match spec.kind {
        K::Allreduce | K::Reduce | K::Bcast => (b, b),
        K::Allgather => (b, n * b),
        K::Alltoall => (n * b, n * b),
        _ => (n * b, b),
    };
    let send = spec.send.as_ref().and_then(|s| s.contiguous());
    let recv = spec.recv.as_ref().and_then(|s| s.contiguous());
    let fit = spec.send.is_none() == send.is_none()
        && spec.recv.is_none() == recv.is_none()
        && send.is_none_or(|x| x.1 == slen)
        && recv.is_none_or(|x| x.1 == rlen)
        && (send.is_some() || recv.is_some());
    // This rank's device when every buffer it passes is device memory of one GPU (classified
    // once: each classification may ask the driver).
    let device = {
        let kinds: SmallVec<[crate::gpu::cache::PtrInfo; 2]> = [send, recv]
            .iter()
            .flatten()
            .map(|x| crate::gpu::classify(x.0 as *const u8))
            .collect();
        let dev = crate::gpu::cache::MemKind::Device;
        match kinds.first() {
            Some(k0) if fit && kinds.iter().all(|k| k.kind == dev && k.device == k0.device) => {
                Some(k0.device)
            }
            _ => None,
        }
    };
    // The thread level is asked (a lock) only for calls the resident path could take.
    let tm = || {
        crate::abi::runtime::lock()
            .as_ref()
            .is_some_and(|rt| rt.thread_level == c::MPI_THREAD_MULTIPLE)
    };
    let resident = crate::gpu::resident::applies(spec.kind, n, b, tm);
    // A call the flag slots would serve (small, MPI_COMM_WORLD): agree in one flag round whether
    // every rank has device buffers; if not, every rank takes the flag path (staging its own
    // device buffers), as every rank would without a GPU. Skipped once the communicator's
    // resident kernels are set up (the same state on every rank): their ok bits agree by
    // themselves, and a "no" sends every rank on to the flag path just the same.
    let ready = resident && crate::gpu::resident::ready(&spec.comm.gpu);
    if !ready {
        if let Some(slots) = flag_eligible(spec) {
            if !flag_all(&slots, device.is_some())? {
                return Ok(false);
            }
        }
    }
    if resident {
        // Small: the resident kernels (no launch, no stream synchronize per call).
        let dst = recv.map_or(0, |x| x.0);
        let src = match (spec.kind, send) {
            (_, Some(s)) => s.0,
            (K::Allgather, None) => dst + spec.comm.rank * b,
            (_, None) => dst,
        };
        let call = crate::gpu::resident::ResCall {
            kind: spec.kind,
            nranks: n,
            rank: spec.comm.rank,
            bytes: b,
            src,
            dst,
            red,
            device: device.filter(|_| recv.is_some()),
        };
        return crate::gpu::resident::run(&call, &GpuHost(&spec.comm), ready);
    }
    let call = Call {
        shape: Shape {
            kind: spec.kind,
            nranks: n,
            rank: spec.comm.rank,
            root: spec.root,
            bytes: b,
            elem: red.map_or(1, |(_, t)| t.size()),
            in_place: spec.in_place,
        },
        send,
        recv,
        red,
        device,
        thread_multiple: tm,
    };
    crate::gpu::coll::run(&call, &GpuHost(&spec.comm))
}

unsafe fn run(spec: CollSpec, mode: Mode) -> MpiResult<()> {
    match mode {
        Mode::Blocking => {
            // GPU-native first, then the flag slots, then the scratch areas: each declines the
            // same way on every rank.
            if try_gpu(&spec)? || run_flag(&spec)? || mid::run(&spec)? {
                return Ok(());
            }
            let k = spec.start()?;
            let st = super::p2p::wait_kind(k)?;
            if st.error != 0 {
                return Err(MpiError::new(st.error, "collective failed"));
            }
            Ok(())
        }
        Mode::Nonblocking(req) => {
            nonnull(req, "request")?;
            let k = spec.start()?;
            super::p2p::submit_on(req, Some(&spec.comm), |_| Ok(k))
        }
        Mode::Persistent(req) => {
            nonnull(req, "request")?;
            let comm = spec.comm.clone();
            let starter: Starter = Box::new(move |_rt: &mut Runtime| spec.start());
            *req = runtime::with(|rt| {
                Ok(new_request(
                    rt,
                    Request {
                        kind: ReqKind::Inactive,
                        persistent: Some(starter),
                        comm: Some(comm),
                    },
                ))
            })? as MPI_Request;
            Ok(())
        }
    }
}

/// A user buffer of a flag collective as one packed host byte range: the user's memory when it
/// is one contiguous host block, else a host mirror (device memory) and/or a packed temporary.
struct Flat {
    ptr: *mut u8,
    mirror: Option<(Mirror, Side)>,
    dev: Option<DevPacked>,
    tmp: Option<Vec<u8>>,
}

impl Flat {
    /// `fill`: the side holds input (pack it).
    unsafe fn of(side: Option<&Side>, fill: bool) -> MpiResult<Flat> {
        let Some(side) = side else {
            return Ok(Flat {
                ptr: std::ptr::null_mut(),
                mirror: None,
                dev: None,
                tmp: None,
            });
        };
        // Device memory is packed into host memory or staged through a host mirror, as in
        // CollSpec::start.
        if let Some(mut p) = side.device_packed(fill)? {
            return Ok(Flat {
                ptr: p.host.as_mut_ptr(),
                mirror: None,
                dev: Some(p),
                tmp: None,
            });
        }
        let mirror = side.mirrored()?;
        let host = mirror.as_ref().map(|(_, s)| s).unwrap_or(side);
        if let [b] = &host.blocks[..] {
            if host.direct() {
                let off = if b.count == 0 {
                    0
                } else {
                    b.disp + b.dt.desc.true_lb()
                };
                return Ok(Flat {
                    ptr: (host.base as *mut u8).wrapping_offset(off),
                    mirror,
                    dev: None,
                    tmp: None,
                });
            }
        }
        let (ptr, _, tmp) = host.map(fill);
        Ok(Flat {
            ptr,
            mirror,
            dev: None,
            tmp,
        })
    }

    /// The send and receive sides of a rooted or reducing call, and where its input is (the
    /// send side, or the receive side in place and for bcast).
    unsafe fn sides(spec: &CollSpec) -> MpiResult<(Flat, Flat, *const u8)> {
        let send = Flat::of(spec.send.as_ref(), true)?;
        let recv = Flat::of(spec.recv.as_ref(), spec.recv_is_input)?;
        let input = if spec.send.is_some() {
            send.ptr as *const u8
        } else {
            recv.ptr as *const u8
        };
        Ok((send, recv, input))
    }

    /// Write an output side back: unpack the temporary, copy the mirror to the device.
    unsafe fn finish(self, side: Option<&Side>) -> MpiResult<()> {
        let Some(side) = side else { return Ok(()) };
        if let Some(p) = &self.dev {
            return p.unpack(None);
        }
        let host = self.mirror.as_ref().map(|(_, s)| s).unwrap_or(side);
        if let Some(tmp) = &self.tmp {
            host.unpack(tmp, None);
        }
        if let Some((m, _)) = &self.mirror {
            m.flush()?;
        }
        Ok(())
    }
}

/// MPI_COMM_WORLD's small blocking barrier, bcast, reduce and allreduce (predefined ops) through
/// the flag slots of the shared-memory segments (`engine::flag`): no schedule, no messages, no
/// allocation for contiguous host buffers. Whether a call goes this way depends only on what
/// every rank has in common (the collective, the communicator, the byte count, the op and
/// `GPUMPI_SHM_COLL_MAX`), never on where one rank's buffers live: device buffers are staged
/// through host mirrors and non-contiguous ones packed here, so all ranks take the same path.
/// `Ok(false)`: not this path.
/// The world's flag slots if `run_flag` would serve this call (a rule on values every rank
/// shares: communicator, collective, byte count, op kind).
fn flag_eligible(spec: &CollSpec) -> Option<Slots> {
    if spec.comm.ctx != 0 {
        return None;
    }
    match (spec.kind, &spec.red) {
        (CollKind::Barrier | CollKind::Bcast, _) => {}
        (CollKind::Reduce | CollKind::Allreduce, Some((Reduction::Builtin(..), _))) => {}
        _ => return None,
    }
    runtime::world_flag().filter(|s| spec.bytes <= s.max())
}

/// The reduction callback of a shared-memory collective (`inout = input op inout`; nothing
/// without a reduction).
fn reducer(red: Option<&Reduction>) -> impl Fn(&[u8], &mut [u8]) -> MpiResult<()> + '_ {
    move |i, o| match red {
        Some(r) => r.apply(i, o),
        None => Ok(()),
    }
}

/// Logical AND over MPI_COMM_WORLD in one round of the flag slots.
fn flag_all(slots: &Slots, mine: bool) -> MpiResult<bool> {
    let input = [mine as u8];
    let mut out = [0u8];
    let reduce = |i: &[u8], o: &mut [u8]| {
        o[0] &= i[0];
        Ok(())
    };
    let op = FlagOp::Allreduce {
        input: input.as_ptr(),
        output: out.as_mut_ptr(),
        len: 1,
        reduce: &reduce,
    };
    let k = runtime::next_flag_seq();
    // SAFETY: input and output are live locals of the length given.
    unsafe { slots.run(k, &op, &mut flag_idle(slots))? };
    Ok(out[0] != 0)
}

unsafe fn run_flag(spec: &CollSpec) -> MpiResult<bool> {
    // Context id 0 is MPI_COMM_WORLD's (reserved at MPI_Init, never reused).
    if spec.comm.ctx != 0 {
        return Ok(false);
    }
    let red = match (spec.kind, &spec.red) {
        (CollKind::Barrier | CollKind::Bcast, _) => None,
        (CollKind::Reduce | CollKind::Allreduce, Some((r @ Reduction::Builtin(..), _))) => Some(r),
        _ => return Ok(false),
    };
    let Some(slots) = runtime::world_flag().filter(|s| spec.bytes <= s.max()) else {
        return Ok(false);
    };
    let k = runtime::next_flag_seq();
    let (send, recv, input) = Flat::sides(spec)?;
    let reduce = reducer(red);
    let len = spec.bytes;
    let op = match spec.kind {
        CollKind::Barrier => FlagOp::Barrier,
        CollKind::Bcast => FlagOp::Bcast {
            root: spec.root,
            buf: recv.ptr,
            len,
        },
        CollKind::Reduce => FlagOp::Reduce {
            root: spec.root,
            input,
            output: recv.ptr,
            len,
            reduce: &reduce,
        },
        _ => FlagOp::Allreduce {
            input,
            output: recv.ptr,
            len,
            reduce: &reduce,
        },
    };
    tracing::debug!(
        coll = spec.kind.name(),
        algo = "flag slots",
        bytes = spec.bytes,
        ranks = slots.size(),
        "collective over shared memory"
    );
    slots.run(k, &op, &mut flag_idle(&slots))?;
    let received = match spec.kind {
        CollKind::Bcast => spec.root != spec.comm.rank,
        _ => true,
    };
    if received {
        recv.finish(spec.recv.as_ref())?;
    }
    drop(send);
    Ok(true)
}

/// What a rank does while waiting on flag slots: progress (other traffic, nonblocking
/// collectives), then back off (spin, yield, sleep) like every blocking call.
fn flag_idle(slots: &Slots) -> impl FnMut() -> MpiResult<()> {
    flag_idle_with(slots.is_oversubscribed())
}

/// [`flag_idle`] for ranks that share cores (`oversubscribed`) or not.
fn flag_idle_with(oversubscribed: bool) -> impl FnMut() -> MpiResult<()> {
    let mut backoff = if oversubscribed {
        Backoff::yielding()
    } else {
        Backoff::new()
    };
    move || {
        runtime::with(|rt| {
            rt.progress();
            Ok(())
        })?;
        backoff.snooze();
        Ok(())
    }
}

/// The blocking MPI_Barrier, MPI_Bcast, MPI_Reduce and MPI_Allreduce (and their `_c` forms) on
/// MPI_COMM_WORLD with a predefined datatype and op on contiguous host buffers: the flag
/// protocol of [`run_flag`] straight from the arguments, without building a [`CollSpec`] (no
/// reference counts, locks or allocations). Declines (`Ok(false)`) at anything unusual (a
/// derived datatype, device memory, an argument error to report); the full path then reaches
/// [`run_flag`] with the same eligibility rule (collective, communicator, byte count, op), so the
/// ranks always agree on the protocol.
#[allow(clippy::too_many_arguments)]
unsafe fn flag_quick(
    kind: CollKind,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: i64,
    dth: MPI_Datatype,
    op: MPI_Op,
    root: c_int,
    cm: MPI_Comm,
) -> MpiResult<bool> {
    if cm != c::MPI_COMM_WORLD {
        return Ok(false);
    }
    // Where GPU-native collectives are attempted, the ranks first agree on the path (in
    // try_gpu), whatever memory their own buffers are in.
    if kind != CollKind::Barrier && crate::gpu::coll::enabled() {
        return Ok(false);
    }
    let Some(slots) = runtime::world_flag() else {
        return Ok(false);
    };
    let me = slots.rank();
    let rooted = matches!(kind, CollKind::Bcast | CollKind::Reduce);
    if rooted && (root < 0 || root as usize >= slots.size()) {
        return Ok(false);
    }
    let root = root.max(0) as usize;
    let mut len = 0;
    let mut red = None;
    if kind != CollKind::Barrier {
        let Some(dt) = types::predefined(dth) else {
            return Ok(false);
        };
        if count < 0 || !dt.desc.is_contiguous(count as usize) || dt.desc.true_lb() != 0 {
            return Ok(false);
        }
        len = dt.desc.packed_size(count as usize);
        if len > slots.max() {
            return Ok(false);
        }
        if kind != CollKind::Bcast {
            let (Some(b), Some(e)) = (builtin_op(op), dt.desc.elem()) else {
                return Ok(false);
            };
            if ops::check(b, e).is_err() {
                return Ok(false);
            }
            red = Some((b, e));
        }
    }
    let i_am_root = !rooted || root == me;
    let inplace = kind != CollKind::Bcast && in_place(sendbuf);
    if inplace && !i_am_root {
        return Ok(false);
    }
    let input: *const u8 = match kind {
        CollKind::Bcast => recvbuf as *const u8,
        _ if inplace => recvbuf as *const u8,
        _ => sendbuf as *const u8,
    };
    let output = recvbuf as *mut u8;
    // The standard ABI's special pointers (NULL, MPI_IN_PLACE where not allowed,
    // MPI_BUFFER_AUTOMATIC) are argument errors: the full path reports them.
    let bad = |p: *const u8| p as usize == 1 || p as usize == 2 || (len > 0 && p.is_null());
    if (i_am_root && bad(output)) || (!inplace && bad(input)) {
        return Ok(false);
    }
    let host = |p: *const u8| !crate::gpu::is_device(p);
    if len > 0 && (!host(input) || (i_am_root && !host(output))) {
        return Ok(false);
    }
    let reduce = |i: &[u8], o: &mut [u8]| match red {
        Some((b, e)) => ops::reduce(b, e, i, o),
        None => Ok(()),
    };
    let op = match kind {
        CollKind::Barrier => FlagOp::Barrier,
        CollKind::Bcast => FlagOp::Bcast {
            root,
            buf: output,
            len,
        },
        CollKind::Reduce => FlagOp::Reduce {
            root,
            input,
            output,
            len,
            reduce: &reduce,
        },
        _ => FlagOp::Allreduce {
            input,
            output,
            len,
            reduce: &reduce,
        },
    };
    let k = runtime::next_flag_seq();
    tracing::debug!(
        coll = kind.name(),
        algo = "flag slots (quick)",
        bytes = len,
        ranks = slots.size(),
        "collective over shared memory"
    );
    slots.run(k, &op, &mut flag_idle(&slots))?;
    Ok(true)
}

fn check_root(cm: &CommObj, root: c_int) -> MpiResult<usize> {
    if root < 0 || root as usize >= cm.size() {
        mpi_bail!(
            MPI_ERR_ROOT,
            "root {root} is not in a communicator of size {}",
            cm.size()
        );
    }
    Ok(root as usize)
}

fn counts<T: AsI64>(p: *const T, n: usize, what: &str) -> MpiResult<Vec<i64>> {
    // SAFETY: the caller passes n elements.
    unsafe { i64s(p, n, what) }
}

// ---- specs per collective ----

fn barrier_spec(cm: MPI_Comm) -> MpiResult<CollSpec> {
    Ok(CollSpec::new(CollKind::Barrier, comm(cm)?))
}

unsafe fn bcast_spec(
    buf: *mut c_void,
    count: i64,
    dt: MPI_Datatype,
    root: c_int,
    cm: MPI_Comm,
) -> MpiResult<CollSpec> {
    let mut s = CollSpec::new(CollKind::Bcast, comm(cm)?);
    let count = check_count(count)?;
    let dt = types::committed(dt)?;
    s.root = check_root(&s.comm, root)?;
    s.bytes = dt.desc.packed_size(count);
    s.recv = Some(Side::one(buf, count, &dt));
    s.recv_is_input = s.root == s.comm.rank;
    Ok(s)
}

unsafe fn reduce_like(
    kind: CollKind,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: i64,
    dth: MPI_Datatype,
    op: MPI_Op,
    root: Option<c_int>,
    cm: MPI_Comm,
) -> MpiResult<CollSpec> {
    let mut s = CollSpec::new(kind, comm(cm)?);
    let count = check_count(count)?;
    let dt = types::committed(dth)?;
    if let Some(r) = root {
        s.root = check_root(&s.comm, r)?;
    }
    s.red = Some(reduction(op, dth, &dt)?);
    s.bytes = dt.desc.packed_size(count);
    let i_am_root = root.is_none() || s.root == s.comm.rank;
    s.in_place = in_place(sendbuf) && i_am_root;
    if in_place(sendbuf) && !i_am_root {
        mpi_bail!(MPI_ERR_BUFFER, "MPI_IN_PLACE is only valid at the root");
    }
    if !s.in_place {
        s.send = Some(Side::one(sendbuf, count, &dt));
    }
    if i_am_root {
        s.recv = Some(Side::one(recvbuf, count, &dt));
        s.recv_is_input = s.in_place;
    }
    Ok(s)
}

unsafe fn gather_spec(
    sendbuf: *const c_void,
    sendcount: i64,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: i64,
    recvtype: MPI_Datatype,
    root: c_int,
    cm: MPI_Comm,
) -> MpiResult<CollSpec> {
    let comm = comm(cm)?;
    let mut s = CollSpec::new(CollKind::Gather, comm.clone());
    s.root = check_root(&comm, root)?;
    let me_root = s.root == comm.rank;
    s.in_place = in_place(sendbuf) && me_root;
    if me_root {
        let rt = types::committed(recvtype)?;
        let rc = check_count(recvcount)?;
        s.recv = Some(Side::regular(recvbuf, comm.size(), rc, &rt));
        s.recv_is_input = s.in_place;
        s.bytes = rt.desc.packed_size(rc);
    }
    if !s.in_place {
        let st = types::committed(sendtype)?;
        let sc = check_count(sendcount)?;
        s.send = Some(Side::one(sendbuf, sc, &st));
        s.bytes = st.desc.packed_size(sc);
    }
    Ok(s)
}

unsafe fn gatherv_spec(
    sendbuf: *const c_void,
    sendcount: i64,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: &[i64],
    displs: &[i64],
    recvtype: MPI_Datatype,
    root: c_int,
    cm: MPI_Comm,
) -> MpiResult<CollSpec> {
    let comm = comm(cm)?;
    let mut s = CollSpec::new(CollKind::Gatherv, comm.clone());
    s.root = check_root(&comm, root)?;
    let me_root = s.root == comm.rank;
    s.in_place = in_place(sendbuf) && me_root;
    if me_root {
        let rt = types::committed(recvtype)?;
        let side = Side::varying(recvbuf, recvcounts, displs, &rt)?;
        s.bytes = side.blocks[comm.rank]
            .dt
            .desc
            .packed_size(side.blocks[comm.rank].count);
        s.recv = Some(side);
        s.recv_is_input = s.in_place;
    }
    if !s.in_place {
        let st = types::committed(sendtype)?;
        let sc = check_count(sendcount)?;
        s.send = Some(Side::one(sendbuf, sc, &st));
        s.bytes = st.desc.packed_size(sc);
    }
    Ok(s)
}

unsafe fn scatter_spec(
    sendbuf: *const c_void,
    sendcount: i64,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: i64,
    recvtype: MPI_Datatype,
    root: c_int,
    cm: MPI_Comm,
) -> MpiResult<CollSpec> {
    let comm = comm(cm)?;
    let mut s = CollSpec::new(CollKind::Scatter, comm.clone());
    s.root = check_root(&comm, root)?;
    let me_root = s.root == comm.rank;
    s.in_place = in_place(recvbuf) && me_root;
    if me_root {
        let st = types::committed(sendtype)?;
        let sc = check_count(sendcount)?;
        s.send = Some(Side::regular(sendbuf, comm.size(), sc, &st));
        s.bytes = st.desc.packed_size(sc);
    }
    if !s.in_place {
        let rt = types::committed(recvtype)?;
        let rc = check_count(recvcount)?;
        s.recv = Some(Side::one(recvbuf, rc, &rt));
        s.bytes = rt.desc.packed_size(rc);
    }
    Ok(s)
}

unsafe fn scatterv_spec(
    sendbuf: *const c_void,
    sendcounts: &[i64],
    displs: &[i64],
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: i64,
    recvtype: MPI_Datatype,
    root: c_int,
    cm: MPI_Comm,
) -> MpiResult<CollSpec> {
    let comm = comm(cm)?;
    let mut s = CollSpec::new(CollKind::Scatterv, comm.clone());
    s.root = check_root(&comm, root)?;
    let me_root = s.root == comm.rank;
    s.in_place = in_place(recvbuf) && me_root;
    if me_root {
        let st = types::committed(sendtype)?;
        let side = Side::varying(sendbuf, sendcounts, displs, &st)?;
        s.bytes = side.blocks[comm.rank]
            .dt
            .desc
            .packed_size(side.blocks[comm.rank].count);
        s.send = Some(side);
    }
    if !s.in_place {
        let rt = types::committed(recvtype)?;
        let rc = check_count(recvcount)?;
        s.recv = Some(Side::one(recvbuf, rc, &rt));
        s.bytes = rt.desc.packed_size(rc);
    }
    Ok(s)
}

unsafe fn allgather_spec(
    sendbuf: *const c_void,
    sendcount: i64,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: i64,
    recvtype: MPI_Datatype,
    cm: MPI_Comm,
) -> MpiResult<CollSpec> {
    let comm = comm(cm)?;
    let mut s = CollSpec::new(CollKind::Allgather, comm.clone());
    let rt = types::committed(recvtype)?;
    let rc = check_count(recvcount)?;
    s.in_place = in_place(sendbuf);
    s.recv = Some(Side::regular(recvbuf, comm.size(), rc, &rt));
    s.recv_is_input = s.in_place;
    s.bytes = rt.desc.packed_size(rc);
    if !s.in_place {
        let st = types::committed(sendtype)?;
        let sc = check_count(sendcount)?;
        if st.desc.packed_size(sc) != s.bytes {
            mpi_bail!(
                MPI_ERR_TRUNCATE,
                "send block of {} bytes does not match the receive block of {} bytes",
                st.desc.packed_size(sc),
                s.bytes
            );
        }
        s.send = Some(Side::one(sendbuf, sc, &st));
    }
    Ok(s)
}

unsafe fn allgatherv_spec(
    sendbuf: *const c_void,
    sendcount: i64,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: &[i64],
    displs: &[i64],
    recvtype: MPI_Datatype,
    cm: MPI_Comm,
) -> MpiResult<CollSpec> {
    let comm = comm(cm)?;
    let mut s = CollSpec::new(CollKind::Allgatherv, comm.clone());
    let rt = types::committed(recvtype)?;
    s.in_place = in_place(sendbuf);
    let side = Side::varying(recvbuf, recvcounts, displs, &rt)?;
    s.bytes = side.blocks[comm.rank]
        .dt
        .desc
        .packed_size(side.blocks[comm.rank].count);
    s.recv = Some(side);
    s.recv_is_input = s.in_place;
    if !s.in_place {
        let st = types::committed(sendtype)?;
        let sc = check_count(sendcount)?;
        s.send = Some(Side::one(sendbuf, sc, &st));
    }
    Ok(s)
}

unsafe fn alltoall_spec(
    sendbuf: *const c_void,
    sendcount: i64,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: i64,
    recvtype: MPI_Datatype,
    cm: MPI_Comm,
) -> MpiResult<CollSpec> {
    let comm = comm(cm)?;
    let mut s = CollSpec::new(CollKind::Alltoall, comm.clone());
    let rt = types::committed(recvtype)?;
    let rc = check_count(recvcount)?;
    s.in_place = in_place(sendbuf);
    s.recv = Some(Side::regular(recvbuf, comm.size(), rc, &rt));
    s.recv_is_input = s.in_place;
    s.bytes = rt.desc.packed_size(rc);
    if !s.in_place {
        let st = types::committed(sendtype)?;
        let sc = check_count(sendcount)?;
        s.send = Some(Side::regular(sendbuf, comm.size(), sc, &st));
    }
    Ok(s)
}

unsafe fn alltoallv_spec(
    kind: CollKind,
    send: Option<Side>,
    recv: Side,
    cm: Arc<CommObj>,
) -> MpiResult<CollSpec> {
    let mut s = CollSpec::new(kind, cm);
    s.in_place = send.is_none();
    s.recv_is_input = s.in_place;
    s.send = send;
    s.recv = Some(recv);
    Ok(s)
}

unsafe fn reduce_scatter_spec(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcounts: &[i64],
    dth: MPI_Datatype,
    op: MPI_Op,
    cm: MPI_Comm,
) -> MpiResult<CollSpec> {
    let comm = comm(cm)?;
    let dt = types::committed(dth)?;
    let mut s = CollSpec::new(CollKind::ReduceScatter, comm.clone());
    s.red = Some(reduction(op, dth, &dt)?);
    let total: i64 = recvcounts.iter().sum();
    for &n in recvcounts {
        check_count(n)?;
    }
    s.rs_lens = Some(
        recvcounts
            .iter()
            .map(|&n| dt.desc.packed_size(n as usize))
            .collect(),
    );
    s.in_place = in_place(sendbuf);
    if s.in_place {
        // Input in recvbuf (the whole vector), result at its start.
        s.recv = Some(Side::one(recvbuf, total as usize, &dt));
        s.recv_is_input = true;
    } else {
        s.send = Some(Side::one(sendbuf, total as usize, &dt));
        s.recv = Some(Side::one(recvbuf, recvcounts[comm.rank] as usize, &dt));
    }
    Ok(s)
}

unsafe fn reduce_scatter_block_spec(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcount: i64,
    dth: MPI_Datatype,
    op: MPI_Op,
    cm: MPI_Comm,
) -> MpiResult<CollSpec> {
    let comm = comm(cm)?;
    let dt = types::committed(dth)?;
    let rc = check_count(recvcount)?;
    let mut s = CollSpec::new(CollKind::ReduceScatterBlock, comm.clone());
    s.red = Some(reduction(op, dth, &dt)?);
    s.bytes = dt.desc.packed_size(rc);
    s.in_place = in_place(sendbuf);
    if s.in_place {
        s.recv = Some(Side::one(recvbuf, rc * comm.size(), &dt));
        s.recv_is_input = true;
    } else {
        s.send = Some(Side::one(sendbuf, rc * comm.size(), &dt));
        s.recv = Some(Side::one(recvbuf, rc, &dt));
    }
    Ok(s)
}

/// MPI_Barrier on MPI_COMM_WORLD (used by MPI_Finalize).
pub fn barrier_world() -> MpiResult<()> {
    // SAFETY: no user buffers.
    unsafe { run(barrier_spec(c::MPI_COMM_WORLD)?, Mode::Blocking) }
}

/// An allreduce of u64 words with bitwise AND over a communicator (context-id agreement).
pub fn allreduce_band_u64(cm: &Arc<CommObj>, words: &mut [u64]) -> MpiResult<()> {
    let dt = types::committed(c::MPI_UINT64_T)?;
    let mut s = CollSpec::new(CollKind::Allreduce, cm.clone());
    s.red = Some((
        Reduction::Builtin(
            BuiltinOp::Band,
            Elem::Basic(crate::mpi::datatype::Basic::Uint64),
        ),
        true,
    ));
    s.bytes = words.len() * 8;
    s.in_place = true;
    s.host_only = true;
    s.recv = Some(Side::one(
        words.as_mut_ptr() as *const c_void,
        words.len(),
        &dt,
    ));
    s.recv_is_input = true;
    // SAFETY: `words` outlives the blocking call.
    unsafe { run(s, Mode::Blocking) }
}

/// An allgather of fixed-size byte records over a communicator (split, create_group).
pub fn allgather_bytes(cm: &Arc<CommObj>, mine: &[u8]) -> MpiResult<Vec<u8>> {
    let n = mine.len();
    let mut out = vec![0u8; n * cm.size()];
    out[cm.rank * n..(cm.rank + 1) * n].copy_from_slice(mine);
    let dt = types::BYTE.clone();
    let mut s = CollSpec::new(CollKind::Allgather, cm.clone());
    s.bytes = n;
    s.in_place = true;
    s.host_only = true;
    s.recv = Some(Side::regular(
        out.as_mut_ptr() as *const c_void,
        cm.size(),
        n,
        &dt,
    ));
    s.recv_is_input = true;
    // SAFETY: `out` outlives the blocking call.
    unsafe { run(s, Mode::Blocking)? };
    Ok(out)
}

// ---- the C entry points ----

macro_rules! three_modes {
    // With a quick path for the blocking call (`flag_quick`), tried before building the spec.
    ($blocking:ident, $nb:ident, $init:ident, ($($arg:ident: $ty:ty),*), $spec:expr, quick: $quick:expr) => {
        pub unsafe fn $blocking($($arg: $ty),*) -> MpiResult<()> {
            if $quick {
                return Ok(());
            }
            run($spec.checked()?, Mode::Blocking)
        }
        three_modes!(@rest $nb, $init, ($($arg: $ty),*), $spec);
    };
    ($blocking:ident, $nb:ident, $init:ident, ($($arg:ident: $ty:ty),*), $spec:expr) => {
        pub unsafe fn $blocking($($arg: $ty),*) -> MpiResult<()> { run($spec.checked()?, Mode::Blocking) }
        three_modes!(@rest $nb, $init, ($($arg: $ty),*), $spec);
    };
    (@rest $nb:ident, $init:ident, ($($arg:ident: $ty:ty),*), $spec:expr) => {
        pub unsafe fn $nb($($arg: $ty,)* request: *mut MPI_Request) -> MpiResult<()> { run($spec.checked()?, Mode::Nonblocking(request)) }
        pub unsafe fn $init($($arg: $ty,)* info: MPI_Info, request: *mut MPI_Request) -> MpiResult<()> {
            crate::abi::objects::check_info(info)?;
            run($spec.checked()?, Mode::Persistent(request))
        }
    };
}

three_modes!(MPI_Barrier, MPI_Ibarrier, MPI_Barrier_init, (cm: MPI_Comm), barrier_spec(cm)?,
    quick: flag_quick(CollKind::Barrier, std::ptr::null(), std::ptr::null_mut(), 0, c::MPI_DATATYPE_NULL, c::MPI_OP_NULL, 0, cm)?);

three_modes!(MPI_Bcast, MPI_Ibcast, MPI_Bcast_init,
    (buffer: *mut c_void, count: c_int, datatype: MPI_Datatype, root: c_int, cm: MPI_Comm),
    bcast_spec(buffer, count as i64, datatype, root, cm)?,
    quick: flag_quick(CollKind::Bcast, buffer, buffer, count as i64, datatype, c::MPI_OP_NULL, root, cm)?);

three_modes!(MPI_Reduce, MPI_Ireduce, MPI_Reduce_init,
    (sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: MPI_Datatype, op: MPI_Op, root: c_int, cm: MPI_Comm),
    reduce_like(CollKind::Reduce, sendbuf, recvbuf, count as i64, datatype, op, Some(root), cm)?,
    quick: flag_quick(CollKind::Reduce, sendbuf, recvbuf, count as i64, datatype, op, root, cm)?);

three_modes!(MPI_Allreduce, MPI_Iallreduce, MPI_Allreduce_init,
    (sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: MPI_Datatype, op: MPI_Op, cm: MPI_Comm),
    reduce_like(CollKind::Allreduce, sendbuf, recvbuf, count as i64, datatype, op, None, cm)?,
    quick: flag_quick(CollKind::Allreduce, sendbuf, recvbuf, count as i64, datatype, op, 0, cm)?);

three_modes!(MPI_Scan, MPI_Iscan, MPI_Scan_init,
    (sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: MPI_Datatype, op: MPI_Op, cm: MPI_Comm),
    reduce_like(CollKind::Scan, sendbuf, recvbuf, count as i64, datatype, op, None, cm)?);

three_modes!(MPI_Exscan, MPI_Iexscan, MPI_Exscan_init,
    (sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: MPI_Datatype, op: MPI_Op, cm: MPI_Comm),
    reduce_like(CollKind::Exscan, sendbuf, recvbuf, count as i64, datatype, op, None, cm)?);

three_modes!(MPI_Gather, MPI_Igather, MPI_Gather_init,
    (sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, root: c_int, cm: MPI_Comm),
    gather_spec(sendbuf, sendcount as i64, sendtype, recvbuf, recvcount as i64, recvtype, root, cm)?);

three_modes!(MPI_Scatter, MPI_Iscatter, MPI_Scatter_init,
    (sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, root: c_int, cm: MPI_Comm),
    scatter_spec(sendbuf, sendcount as i64, sendtype, recvbuf, recvcount as i64, recvtype, root, cm)?);

three_modes!(MPI_Allgather, MPI_Iallgather, MPI_Allgather_init,
    (sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, cm: MPI_Comm),
    allgather_spec(sendbuf, sendcount as i64, sendtype, recvbuf, recvcount as i64, recvtype, cm)?);

three_modes!(MPI_Alltoall, MPI_Ialltoall, MPI_Alltoall_init,
    (sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, cm: MPI_Comm),
    alltoall_spec(sendbuf, sendcount as i64, sendtype, recvbuf, recvcount as i64, recvtype, cm)?);

three_modes!(MPI_Reduce_scatter_block, MPI_Ireduce_scatter_block, MPI_Reduce_scatter_block_init,
    (sendbuf: *const c_void, recvbuf: *mut c_void, recvcount: c_int, datatype: MPI_Datatype, op: MPI_Op, cm: MPI_Comm),
    reduce_scatter_block_spec(sendbuf, recvbuf, recvcount as i64, datatype, op, cm)?);

fn size_of(cm: MPI_Comm) -> MpiResult<usize> {
    Ok(comm(cm)?.size())
}

unsafe fn gatherv_args(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    displs: *const c_int,
    recvtype: MPI_Datatype,
    root: c_int,
    cm: MPI_Comm,
) -> MpiResult<CollSpec> {
    let cmo = comm(cm)?;
    let root_u = check_root(&cmo, root)?;
    let n = if root_u == cmo.rank { cmo.size() } else { 0 };
    gatherv_spec(
        sendbuf,
        sendcount as i64,
        sendtype,
        recvbuf,
        &counts(recvcounts, n, "recvcounts")?,
        &counts(displs, n, "displs")?,
        recvtype,
        root,
        cm,
    )
}

three_modes!(MPI_Gatherv, MPI_Igatherv, MPI_Gatherv_init,
    (sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: MPI_Datatype, root: c_int, cm: MPI_Comm),
    gatherv_args(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, cm)?);

unsafe fn scatterv_args(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    displs: *const c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    root: c_int,
    cm: MPI_Comm,
) -> MpiResult<CollSpec> {
    let cmo = comm(cm)?;
    let root_u = check_root(&cmo, root)?;
    let n = if root_u == cmo.rank { cmo.size() } else { 0 };
    scatterv_spec(
        sendbuf,
        &counts(sendcounts, n, "sendcounts")?,
        &counts(displs, n, "displs")?,
        sendtype,
        recvbuf,
        recvcount as i64,
        recvtype,
        root,
        cm,
    )
}

three_modes!(MPI_Scatterv, MPI_Iscatterv, MPI_Scatterv_init,
    (sendbuf: *const c_void, sendcounts: *const c_int, displs: *const c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, root: c_int, cm: MPI_Comm),
    scatterv_args(sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, cm)?);

three_modes!(MPI_Allgatherv, MPI_Iallgatherv, MPI_Allgatherv_init,
    (sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: MPI_Datatype, cm: MPI_Comm),
    allgatherv_spec(sendbuf, sendcount as i64, sendtype, recvbuf, &counts(recvcounts, size_of(cm)?, "recvcounts")?, &counts(displs, size_of(cm)?, "displs")?, recvtype, cm)?);

unsafe fn alltoallv_args<C: AsI64, D: AsI64>(
    sendbuf: *const c_void,
    sendcounts: *const C,
    sdispls: *const D,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const C,
    rdispls: *const D,
    recvtype: MPI_Datatype,
    cm: MPI_Comm,
) -> MpiResult<CollSpec> {
    let cmo = comm(cm)?;
    let n = cmo.size();
    let rt = types::committed(recvtype)?;
    let recv = Side::varying(
        recvbuf,
        &counts(recvcounts, n, "recvcounts")?,
        &counts(rdispls, n, "rdispls")?,
        &rt,
    )?;
    let send = if in_place(sendbuf) {
        None
    } else {
        let st = types::committed(sendtype)?;
        Some(Side::varying(
            sendbuf,
            &counts(sendcounts, n, "sendcounts")?,
            &counts(sdispls, n, "sdispls")?,
            &st,
        )?)
    };
    alltoallv_spec(CollKind::Alltoallv, send, recv, cmo)
}

three_modes!(MPI_Alltoallv, MPI_Ialltoallv, MPI_Alltoallv_init,
    (sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtype: MPI_Datatype, cm: MPI_Comm),
    alltoallv_args(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, cm)?);

unsafe fn w_side<C: AsI64, D: AsI64>(
    buf: *const c_void,
    cnts: *const C,
    displs: *const D,
    tys: *const MPI_Datatype,
    n: usize,
) -> MpiResult<Side> {
    let cnts = counts(cnts, n, "counts")?;
    let displs = counts(displs, n, "displs")?;
    let tys = slice(tys, n, "datatypes")?;
    let mut blocks = SmallVec::with_capacity(n);
    for i in 0..n {
        blocks.push(TBlock {
            disp: displs[i] as isize,
            count: check_count(cnts[i])?,
            dt: types::committed(tys[i])?,
        });
    }
    Ok(Side {
        base: buf as usize,
        blocks,
    })
}

unsafe fn alltoallw_args<C: AsI64, D: AsI64>(
    sendbuf: *const c_void,
    sendcounts: *const C,
    sdispls: *const D,
    sendtypes: *const MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const C,
    rdispls: *const D,
    recvtypes: *const MPI_Datatype,
    cm: MPI_Comm,
) -> MpiResult<CollSpec> {
    let cmo = comm(cm)?;
    let n = cmo.size();
    let recv = w_side(recvbuf, recvcounts, rdispls, recvtypes, n)?;
    let send = if in_place(sendbuf) {
        None
    } else {
        Some(w_side(sendbuf, sendcounts, sdispls, sendtypes, n)?)
    };
    alltoallv_spec(CollKind::Alltoallw, send, recv, cmo)
}

three_modes!(MPI_Alltoallw, MPI_Ialltoallw, MPI_Alltoallw_init,
    (sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtypes: *const MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtypes: *const MPI_Datatype, cm: MPI_Comm),
    alltoallw_args(sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, cm)?);

three_modes!(MPI_Reduce_scatter, MPI_Ireduce_scatter, MPI_Reduce_scatter_init,
    (sendbuf: *const c_void, recvbuf: *mut c_void, recvcounts: *const c_int, datatype: MPI_Datatype, op: MPI_Op, cm: MPI_Comm),
    reduce_scatter_spec(sendbuf, recvbuf, &counts(recvcounts, size_of(cm)?, "recvcounts")?, datatype, op, cm)?);

// ---- local reduction and user ops ----

pub unsafe fn MPI_Reduce_local(
    inbuf: *const c_void,
    inoutbuf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    op: MPI_Op,
) -> MpiResult<()> {
    reduce_local(inbuf, inoutbuf, check_count(count as i64)?, datatype, op)
}

/// MPI_Reduce_local / MPI_Reduce_local_c.
pub(super) unsafe fn reduce_local(
    inbuf: *const c_void,
    inoutbuf: *mut c_void,
    n: usize,
    datatype: MPI_Datatype,
    op: MPI_Op,
) -> MpiResult<()> {
    let dt = types::committed(datatype)?;
    let (red, _) = reduction(op, datatype, &dt)?;
    types::check_buf(inbuf, n, &dt, "inbuf")?;
    types::check_buf(inoutbuf, n, &dt, "inoutbuf")?;
    let bytes = dt.desc.packed_size(n);
    if bytes == 0 {
        return Ok(());
    }
    let (lo, _) = crate::gpu::stage::span(&dt.desc, n);
    let on_device = |p: *const c_void| crate::gpu::is_device((p as *const u8).wrapping_offset(lo));
    if on_device(inbuf) || on_device(inoutbuf as *const c_void) {
        if let (Reduction::Builtin(op, e), true) = (&red, dt.desc.is_contiguous(n)) {
            let off = dt.desc.true_lb();
            let i = (inbuf as *const u8).wrapping_offset(off);
            let o = (inoutbuf as *mut u8).wrapping_offset(off);
            if crate::gpu::stage::reduce_on_device(*op, *e, i, o, bytes)? {
                return Ok(());
            }
        }
        // Staged through the host: pack both (copies device memory), reduce, store back.
        let i = types::pack_all(inbuf, n, &dt)?;
        let mut o = types::pack_all(inoutbuf, n, &dt)?;
        red.apply(&i, &mut o)?;
        return types::unpack_all(&o, inoutbuf, n, &dt);
    }
    if dt.desc.is_contiguous(n) {
        let off = dt.desc.true_lb();
        let i = std::slice::from_raw_parts((inbuf as *const u8).wrapping_offset(off), bytes);
        let o = std::slice::from_raw_parts_mut((inoutbuf as *mut u8).wrapping_offset(off), bytes);
        return red.apply(i, o);
    }
    let i = types::pack_all(inbuf, n, &dt)?;
    let mut o = types::pack_all(inoutbuf, n, &dt)?;
    red.apply(&i, &mut o)?;
    dt.desc.unpack(n, &o, inoutbuf as *mut u8);
    Ok(())
}

pub unsafe fn MPI_Op_create(
    user_fn: Option<unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_int, *mut MPI_Datatype)>,
    commute: c_int,
    op: *mut MPI_Op,
) -> MpiResult<()> {
    let Some(f) = user_fn else {
        mpi_bail!(MPI_ERR_ARG, "the user function is NULL")
    };
    nonnull(op, "op")?;
    let h = objects().ops.insert(Arc::new(OpObj::User {
        func: f as usize,
        commute: commute != 0,
        large_count: false,
    }));
    *op = h as MPI_Op;
    Ok(())
}

pub unsafe fn MPI_Op_create_c(
    user_fn: Option<
        unsafe extern "C" fn(*mut c_void, *mut c_void, *mut MPI_Count, *mut MPI_Datatype),
    >,
    commute: c_int,
    op: *mut MPI_Op,
) -> MpiResult<()> {
    let Some(f) = user_fn else {
        mpi_bail!(MPI_ERR_ARG, "the user function is NULL")
    };
    nonnull(op, "op")?;
    let h = objects().ops.insert(Arc::new(OpObj::User {
        func: f as usize,
        commute: commute != 0,
        large_count: true,
    }));
    *op = h as MPI_Op;
    Ok(())
}

pub unsafe fn MPI_Op_free(op: *mut MPI_Op) -> MpiResult<()> {
    nonnull(op, "op")?;
    let h = *op as usize;
    if builtin_op(*op).is_some() {
        mpi_bail!(MPI_ERR_OP, "predefined operation {h:#x} cannot be freed");
    }
    if objects().ops.remove(h).is_none() {
        mpi_bail!(MPI_ERR_OP, "invalid operation handle {h:#x}");
    }
    *op = c::MPI_OP_NULL;
    Ok(())
}

pub unsafe fn MPI_Op_commutative(op: MPI_Op, commute: *mut c_int) -> MpiResult<()> {
    if builtin_op(op).is_some() {
        return out(commute, "commute", 1);
    }
    match objects().ops.get(op as usize).as_deref() {
        Some(OpObj::User { commute: c, .. }) => out(commute, "commute", *c as c_int),
        None => mpi_bail!(MPI_ERR_OP, "invalid operation handle {:#x}", op as usize),
    }
}

// ---- large-count (`_c`) variants: the same specs with MPI_Count counts and MPI_Aint displacements ----

type Cnt = MPI_Count;
type Disp = MPI_Aint;

three_modes!(MPI_Bcast_c, MPI_Ibcast_c, MPI_Bcast_init_c,
    (buffer: *mut c_void, count: Cnt, datatype: MPI_Datatype, root: c_int, cm: MPI_Comm),
    bcast_spec(buffer, count, datatype, root, cm)?,
    quick: flag_quick(CollKind::Bcast, buffer, buffer, count, datatype, c::MPI_OP_NULL, root, cm)?);

three_modes!(MPI_Reduce_c, MPI_Ireduce_c, MPI_Reduce_init_c,
    (sendbuf: *const c_void, recvbuf: *mut c_void, count: Cnt, datatype: MPI_Datatype, op: MPI_Op, root: c_int, cm: MPI_Comm),
    reduce_like(CollKind::Reduce, sendbuf, recvbuf, count, datatype, op, Some(root), cm)?,
    quick: flag_quick(CollKind::Reduce, sendbuf, recvbuf, count, datatype, op, root, cm)?);

three_modes!(MPI_Allreduce_c, MPI_Iallreduce_c, MPI_Allreduce_init_c,
    (sendbuf: *const c_void, recvbuf: *mut c_void, count: Cnt, datatype: MPI_Datatype, op: MPI_Op, cm: MPI_Comm),
    reduce_like(CollKind::Allreduce, sendbuf, recvbuf, count, datatype, op, None, cm)?,
    quick: flag_quick(CollKind::Allreduce, sendbuf, recvbuf, count, datatype, op, 0, cm)?);

three_modes!(MPI_Scan_c, MPI_Iscan_c, MPI_Scan_init_c,
    (sendbuf: *const c_void, recvbuf: *mut c_void, count: Cnt, datatype: MPI_Datatype, op: MPI_Op, cm: MPI_Comm),
    reduce_like(CollKind::Scan, sendbuf, recvbuf, count, datatype, op, None, cm)?);

three_modes!(MPI_Exscan_c, MPI_Iexscan_c, MPI_Exscan_init_c,
    (sendbuf: *const c_void, recvbuf: *mut c_void, count: Cnt, datatype: MPI_Datatype, op: MPI_Op, cm: MPI_Comm),
    reduce_like(CollKind::Exscan, sendbuf, recvbuf, count, datatype, op, None, cm)?);

three_modes!(MPI_Gather_c, MPI_Igather_c, MPI_Gather_init_c,
    (sendbuf: *const c_void, sendcount: Cnt, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: Cnt, recvtype: MPI_Datatype, root: c_int, cm: MPI_Comm),
    gather_spec(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, cm)?);

three_modes!(MPI_Scatter_c, MPI_Iscatter_c, MPI_Scatter_init_c,
    (sendbuf: *const c_void, sendcount: Cnt, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: Cnt, recvtype: MPI_Datatype, root: c_int, cm: MPI_Comm),
    scatter_spec(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, cm)?);

three_modes!(MPI_Allgather_c, MPI_Iallgather_c, MPI_Allgather_init_c,
    (sendbuf: *const c_void, sendcount: Cnt, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: Cnt, recvtype: MPI_Datatype, cm: MPI_Comm),
    allgather_spec(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, cm)?);

three_modes!(MPI_Alltoall_c, MPI_Ialltoall_c, MPI_Alltoall_init_c,
    (sendbuf: *const c_void, sendcount: Cnt, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: Cnt, recvtype: MPI_Datatype, cm: MPI_Comm),
    alltoall_spec(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, cm)?);

three_modes!(MPI_Reduce_scatter_block_c, MPI_Ireduce_scatter_block_c, MPI_Reduce_scatter_block_init_c,
    (sendbuf: *const c_void, recvbuf: *mut c_void, recvcount: Cnt, datatype: MPI_Datatype, op: MPI_Op, cm: MPI_Comm),
    reduce_scatter_block_spec(sendbuf, recvbuf, recvcount, datatype, op, cm)?);

three_modes!(MPI_Reduce_scatter_c, MPI_Ireduce_scatter_c, MPI_Reduce_scatter_init_c,
    (sendbuf: *const c_void, recvbuf: *mut c_void, recvcounts: *const Cnt, datatype: MPI_Datatype, op: MPI_Op, cm: MPI_Comm),
    reduce_scatter_spec(sendbuf, recvbuf, &counts(recvcounts, size_of(cm)?, "recvcounts")?, datatype, op, cm)?);

/// Counts of the root's side of gatherv/scatterv (significant at the root only).
fn root_counts<C: AsI64>(
    cm: MPI_Comm,
    root: c_int,
    p: *const C,
    what: &str,
) -> MpiResult<Vec<i64>> {
    let cmo = comm(cm)?;
    let n = if check_root(&cmo, root)? == cmo.rank {
        cmo.size()
    } else {
        0
    };
    counts(p, n, what)
}

three_modes!(MPI_Gatherv_c, MPI_Igatherv_c, MPI_Gatherv_init_c,
    (sendbuf: *const c_void, sendcount: Cnt, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const Cnt, displs: *const Disp, recvtype: MPI_Datatype, root: c_int, cm: MPI_Comm),
    gatherv_spec(sendbuf, sendcount, sendtype, recvbuf, &root_counts(cm, root, recvcounts, "recvcounts")?, &root_counts(cm, root, displs, "displs")?, recvtype, root, cm)?);

three_modes!(MPI_Scatterv_c, MPI_Iscatterv_c, MPI_Scatterv_init_c,
    (sendbuf: *const c_void, sendcounts: *const Cnt, displs: *const Disp, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: Cnt, recvtype: MPI_Datatype, root: c_int, cm: MPI_Comm),
    scatterv_spec(sendbuf, &root_counts(cm, root, sendcounts, "sendcounts")?, &root_counts(cm, root, displs, "displs")?, sendtype, recvbuf, recvcount, recvtype, root, cm)?);

three_modes!(MPI_Allgatherv_c, MPI_Iallgatherv_c, MPI_Allgatherv_init_c,
    (sendbuf: *const c_void, sendcount: Cnt, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const Cnt, displs: *const Disp, recvtype: MPI_Datatype, cm: MPI_Comm),
    allgatherv_spec(sendbuf, sendcount, sendtype, recvbuf, &counts(recvcounts, size_of(cm)?, "recvcounts")?, &counts(displs, size_of(cm)?, "displs")?, recvtype, cm)?);

three_modes!(MPI_Alltoallv_c, MPI_Ialltoallv_c, MPI_Alltoallv_init_c,
    (sendbuf: *const c_void, sendcounts: *const Cnt, sdispls: *const Disp, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const Cnt, rdispls: *const Disp, recvtype: MPI_Datatype, cm: MPI_Comm),
    alltoallv_args(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, cm)?);

three_modes!(MPI_Alltoallw_c, MPI_Ialltoallw_c, MPI_Alltoallw_init_c,
    (sendbuf: *const c_void, sendcounts: *const Cnt, sdispls: *const Disp, sendtypes: *const MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const Cnt, rdispls: *const Disp, recvtypes: *const MPI_Datatype, cm: MPI_Comm),
    alltoallw_args(sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, cm)?);
