//! Point-to-point communication and requests (MPI 5.0 chapter 3).

use super::util::*;
use crate::abi::consts as c;
use crate::abi::ffi::*;
use crate::abi::width::{CInt, Width};
use crate::engine::{Engine, RecvArgs, SendArgs};
use crate::mpi::error::{MpiError, MpiResult};
use crate::mpi_bail;
use crate::runtime::objects::{comm, nonnull, with_comm_view, CommObj, CommView};
use crate::runtime::request::{ReqKind, Request, Starter, Status};
use crate::runtime::types::{self, DtypeObj};
use crate::runtime::{self, new_request, wait_until, Runtime};
use std::os::raw::{c_int, c_void};
use std::sync::Arc;

/// The largest tag value (the MPI_TAG_UB attribute).
pub const TAG_UB: c_int = 0x3fff_ffff;

pub use crate::runtime::types::check_count;

pub fn check_send_tag(tag: c_int) -> MpiResult<()> {
    if !(0..=TAG_UB).contains(&tag) {
        mpi_bail!(MPI_ERR_TAG, "tag {tag} is not in 0..={TAG_UB} (MPI_TAG_UB)");
    }
    Ok(())
}

pub fn check_recv_tag(tag: c_int) -> MpiResult<()> {
    if tag != c::MPI_ANY_TAG {
        check_send_tag(tag)?;
    }
    Ok(())
}

/// Validate a destination/source rank. Returns None for MPI_PROC_NULL.
pub fn check_peer(cm: &CommObj, rank: c_int, any_ok: bool) -> MpiResult<Option<c_int>> {
    if rank == c::MPI_PROC_NULL {
        return Ok(None);
    }
    if any_ok && rank == c::MPI_ANY_SOURCE {
        return Ok(Some(rank));
    }
    if rank < 0 || rank as usize >= cm.size() {
        mpi_bail!(
            MPI_ERR_RANK,
            "rank {rank} is not in a communicator of size {}",
            cm.size()
        );
    }
    Ok(Some(rank))
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Standard,
    Sync,
    Buffered,
    Ready,
}

/// Everything needed to start a send, resolved and validated once.
pub struct SendSpec {
    pub buf: *const c_void,
    pub count: usize,
    pub dt: Arc<DtypeObj>,
    pub dest: Option<c_int>,
    pub tag: c_int,
    pub comm: Arc<CommObj>,
    pub mode: Mode,
}
// SAFETY: the buffer pointer is owned by the caller until completion, per MPI semantics.
unsafe impl Send for SendSpec {}

pub unsafe fn send_spec(
    buf: *const c_void,
    count: i64,
    dt: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    cm: MPI_Comm,
    mode: Mode,
) -> MpiResult<SendSpec> {
    let comm = comm(cm)?;
    let count = check_count(count)?;
    let dt = types::committed(dt)?;
    check_send_tag(tag)?;
    let dest = check_peer(&comm, dest, false)?;
    // A send to MPI_PROC_NULL touches no data (but MPI_IN_PLACE is still not a buffer).
    types::check_buf(
        buf,
        if dest.is_some() { count } else { 0 },
        &dt,
        "the send buffer",
    )?;
    Ok(SendSpec {
        buf,
        count,
        dt,
        dest,
        tag,
        comm,
        mode,
    })
}

/// Post a send in the engine.
pub unsafe fn start_send(engine: &mut Engine, s: &SendSpec) -> MpiResult<ReqKind> {
    let Some(dest) = s.dest else {
        return Ok(ReqKind::Done(Status::proc_null()));
    };
    let dst_world = s.comm.world_rank(dest as usize);
    if s.mode != Mode::Buffered && dst_world != engine.world_rank() {
        // Device data: the receiver copies it peer to peer (CUDA IPC) above GPUMPI_GPU_IPC_MIN,
        // or, above the eager limit when IPC cannot share it (or is off), takes it through the
        // pipe to it.
        let (ipc_min, pipe_min) = (crate::gpu::p2p::ipc_min(), engine.eager_limit());
        if let Some((addr, len, dev)) = types::device_send(s.buf, s.count, &s.dt, ipc_min, pipe_min)
        {
            let id = engine.isend(SendArgs {
                buf: addr as *const u8,
                len,
                dst_world,
                ctx: s.comm.ctx,
                src_rank: s.comm.rank as i32,
                tag: s.tag,
                sync: s.mode == Mode::Sync,
                dev: Some(dev),
                note: None,
            })?;
            return Ok(ReqKind::Engine {
                id,
                post: None,
                hold: None,
            });
        }
    }
    let (ptr, len, hold) = types::send_view(s.buf, s.count, &s.dt)?;
    let (ptr, hold, pool) = if s.mode == Mode::Buffered {
        // Buffered mode: the data is copied now, so the user's buffer is free on return.
        let v = match hold {
            Some(v) => v,
            None => {
                crate::gpu::pool::HostBuf::from_vec(std::slice::from_raw_parts(ptr, len).to_vec())
            }
        };
        let pool = super::bsend::reserve(s.comm.ctx, len)?;
        (v.as_ptr(), Some(v), pool)
    } else {
        (ptr, hold, None)
    };
    let id = engine.isend(SendArgs {
        buf: ptr,
        len,
        dst_world: s.comm.world_rank(dest as usize),
        ctx: s.comm.ctx,
        src_rank: s.comm.rank as i32,
        tag: s.tag,
        sync: s.mode == Mode::Sync,
        dev: None,
        note: None,
    })?;
    let post: Option<crate::runtime::request::Post> = if s.mode == Mode::Buffered {
        Some(Box::new(move |_st: &mut Status| {
            super::bsend::release(pool, len);
            Ok(())
        }))
    } else {
        None
    };
    Ok(ReqKind::Engine { id, post, hold })
}

pub struct RecvSpec {
    pub buf: *mut c_void,
    pub count: usize,
    pub dt: Arc<DtypeObj>,
    pub source: Option<c_int>,
    pub tag: c_int,
    pub comm: Arc<CommObj>,
}
// SAFETY: as for SendSpec.
unsafe impl Send for RecvSpec {}

pub unsafe fn recv_spec(
    buf: *mut c_void,
    count: i64,
    dt: MPI_Datatype,
    source: c_int,
    tag: c_int,
    cm: MPI_Comm,
) -> MpiResult<RecvSpec> {
    let comm = comm(cm)?;
    let count = check_count(count)?;
    let dt = types::committed(dt)?;
    check_recv_tag(tag)?;
    let source = check_peer(&comm, source, true)?;
    let touched = if source.is_some() { count } else { 0 };
    types::check_buf(buf, touched, &dt, "the receive buffer")?;
    Ok(RecvSpec {
        buf,
        count,
        dt,
        source,
        tag,
        comm,
    })
}

pub unsafe fn start_recv(engine: &mut Engine, r: &RecvSpec) -> MpiResult<ReqKind> {
    let Some(src) = r.source else {
        return Ok(ReqKind::Done(Status::proc_null()));
    };
    let v = types::recv_view(r.buf, r.count, &r.dt)?;
    let id = engine.irecv_dev(v.ptr, v.cap, v.dev, r.comm.ctx, src, r.tag)?;
    Ok(ReqKind::Engine {
        id,
        post: v.post,
        hold: None,
    })
}

pub use crate::runtime::wait_kind;
use crate::runtime::wait_request;

/// Start an operation and wait for it. The start and a first test share one hold of the
/// runtime lock, so an operation complete at once (an eager send in the ring, a receive that
/// matched a message already here) returns without a second round trip through the lock and
/// a progress pass.
fn start_wait(start: impl FnOnce(&mut Runtime) -> MpiResult<ReqKind>) -> MpiResult<Status> {
    let pending = runtime::with(|rt| {
        let mut r = Request::new(start(rt)?);
        Ok(match r.test(&mut rt.engine)? {
            Some(st) => Err(st),
            None => Ok(r),
        })
    })?;
    match pending {
        Ok(r) => wait_request(r),
        Err(st) => Ok(st),
    }
}

fn status_result(st: Status) -> MpiResult<()> {
    if let Some(e) = st.finalized_error() {
        return Err(e);
    }
    if st.error != 0 {
        let msg = if st.error == c::MPI_ERR_TRUNCATE {
            format!(
                "message of {} bytes from rank {} (tag {}) truncated to fit the receive buffer",
                st.bytes, st.source, st.tag
            )
        } else {
            "the operation failed".to_string()
        };
        return Err(MpiError::new(st.error, msg));
    }
    Ok(())
}

unsafe fn blocking_send(
    buf: *const c_void,
    count: i64,
    dt: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    cm: MPI_Comm,
    mode: Mode,
) -> MpiResult<()> {
    if matches!(mode, Mode::Standard | Mode::Ready) && send_at_once(buf, count, dt, dest, tag, cm) {
        return Ok(());
    }
    let s = send_spec(buf, count, dt, dest, tag, cm, mode)?;
    if mode == Mode::Buffered {
        // The data is copied at the start: let it complete in the background.
        return runtime::with(|rt| {
            let kind = start_send(&mut rt.engine, &s)?;
            let h = new_request(rt, Request::new(kind));
            super::bsend::detach_later(h);
            Ok(())
        });
    }
    status_result(start_wait(|rt| start_send(&mut rt.engine, &s))?)
}

/// The blocking send that completes the moment it is in the transport, without a request:
/// a small contiguous host buffer of a predefined datatype on a communicator
/// to another rank ([`fast_send`]), when the engine can write it into the ring at once
/// ([`Engine::send_now`]). Returns whether it was sent; `false` for anything else (including
/// every erroneous call, which the general path then reports), with nothing done.
unsafe fn send_at_once(
    buf: *const c_void,
    count: i64,
    dt: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    cm: MPI_Comm,
) -> bool {
    let Some(a) = fast_send(buf, count, dt, dest, tag, cm) else {
        return false;
    };
    // SAFETY: the caller's buffer holds `count` elements of the type (MPI semantics), so
    // a.buf..a.buf+a.len is readable during the call.
    runtime::with(|rt| Ok(unsafe { rt.engine.send_now(&a) })).unwrap_or(false)
}

/// Run `f` with the communicator, datatype and count of a call that may take a fast path: a
/// live communicator (predefined or user, [`with_comm_view`]), a predefined datatype
/// contiguous at this count, and a valid count, borrowed without reference counts; `None` for
/// anything else.
fn fast_common<R>(
    cm: MPI_Comm,
    dt: MPI_Datatype,
    count: i64,
    f: impl FnOnce(CommView<'_>, &'static DtypeObj, usize) -> Option<R>,
) -> Option<R> {
    let d = types::predefined(dt)?;
    let count = check_count(count).ok()?;
    if !d.desc.is_contiguous(count) {
        return None;
    }
    with_comm_view(cm, |v| f(v, d, count))
}

/// `rank` when it is a rank of `v` (not MPI_PROC_NULL, nor MPI_ANY_SOURCE unless `any_ok`).
fn fast_peer(v: &CommView<'_>, rank: c_int, any_ok: bool) -> Option<c_int> {
    ((any_ok && rank == c::MPI_ANY_SOURCE) || usize::try_from(rank).is_ok_and(|r| r < v.size()))
        .then_some(rank)
}

/// The first byte and length of `count` elements of `d` at `buf` when they are host memory
/// (the buffer is classified once here); `None` for a device buffer.
fn fast_host_data(buf: *mut c_void, d: &DtypeObj, count: usize) -> Option<(*mut u8, usize)> {
    let len = d.desc.packed_size(count);
    let data = (buf as *mut u8).wrapping_offset(d.desc.true_lb());
    (len == 0 || !crate::gpu::is_device(data)).then_some((data, len))
}

/// The engine's arguments of a standard send that needs no registry and no staging: a
/// contiguous host buffer of a predefined datatype on a communicator to a
/// rank (not MPI_PROC_NULL). Borrows the communicator and datatype without reference counts
/// and classifies the buffer once. `None` for anything else, including every erroneous call
/// (the general path reports it).
unsafe fn fast_send(
    buf: *const c_void,
    count: i64,
    dt: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    cm: MPI_Comm,
) -> Option<SendArgs> {
    fast_send_with(buf, count, dt, dest, tag, cm, |_| Some(())).map(|(a, ())| a)
}

/// [`fast_send`], and what `also` takes from the communicator's view (`None` from it declines
/// the fast path too).
unsafe fn fast_send_with<T>(
    buf: *const c_void,
    count: i64,
    dt: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    cm: MPI_Comm,
    also: impl FnOnce(&CommView<'_>) -> Option<T>,
) -> Option<(SendArgs, T)> {
    if check_send_tag(tag).is_err() {
        return None;
    }
    fast_common(cm, dt, count, |comm, d, count| {
        let dest = fast_peer(&comm, dest, false)?;
        if types::check_buf(buf, count, d, "the send buffer").is_err() {
            return None;
        }
        let (data, len) = fast_host_data(buf.cast_mut(), d, count)?;
        let extra = also(&comm)?;
        Some((
            SendArgs {
                buf: data.cast_const(),
                len,
                dst_world: comm.world_rank(dest as usize),
                ctx: comm.ctx,
                src_rank: comm.rank as i32,
                tag,
                sync: false,
                dev: None,
                note: None,
            },
            extra,
        ))
    })
}

unsafe fn nonblocking_send(
    buf: *const c_void,
    count: i64,
    dt: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    cm: MPI_Comm,
    mode: Mode,
    request: *mut MPI_Request,
) -> MpiResult<()> {
    nonnull(request, "request")?;
    if matches!(mode, Mode::Standard | Mode::Ready) {
        // The kind of send fast_send takes: started in the engine straight from its arguments
        // (no registry look-ups, no reference counts but the request's own on the
        // communicator).
        if let Some((a, c)) = fast_send_with(buf, count, dt, dest, tag, cm, |v| v.arc()) {
            return submit_on(request, Some(&c), |rt| {
                // SAFETY: the buffer is the send's until the request completes (MPI semantics).
                let id = unsafe { rt.engine.isend(a) }?;
                Ok(ReqKind::Engine {
                    id,
                    post: None,
                    hold: None,
                })
            });
        }
    }
    let s = send_spec(buf, count, dt, dest, tag, cm, mode)?;
    submit_on(request, Some(&s.comm), |rt| start_send(&mut rt.engine, &s))
}

/// Start an operation under the runtime lock and store its new request handle: the one path
/// every nonblocking call (point-to-point, collective, generalized) takes.
pub unsafe fn submit(
    request: *mut MPI_Request,
    start: impl FnOnce(&mut Runtime) -> MpiResult<ReqKind>,
) -> MpiResult<()> {
    submit_on(request, None, start)
}

/// [`submit`] for a request made on `comm` (its completion errors go to `comm`'s handler).
pub unsafe fn submit_on(
    request: *mut MPI_Request,
    comm: Option<&Arc<CommObj>>,
    start: impl FnOnce(&mut Runtime) -> MpiResult<ReqKind>,
) -> MpiResult<()> {
    nonnull(request, "request")?;
    let h = runtime::with(|rt| {
        let k = start(rt)?;
        let r = Request::new(k);
        Ok(new_request(
            rt,
            if let Some(c) = comm { r.on(c) } else { r },
        ))
    })?;
    *request = h as MPI_Request;
    Ok(())
}

/// The blocking, nonblocking and persistent forms of one send mode, generic over the count
/// width (the generated `_c` forms call them too).
macro_rules! send_modes {
    ($($blocking:ident, $nb:ident, $init:ident => $mode:expr;)*) => {$(
        pub unsafe fn $blocking<W: Width>(
            buf: *const c_void,
            count: W::Count,
            datatype: MPI_Datatype,
            dest: c_int,
            tag: c_int,
            cm: MPI_Comm,
        ) -> MpiResult<()> {
            blocking_send(buf, count.as_i64(), datatype, dest, tag, cm, $mode)
        }
        send_modes!(@request $nb, nonblocking_send, $mode);
        send_modes!(@request $init, send_init, $mode);
    )*};
    // A form that returns a request: the same parameters and `request`.
    (@request $name:ident, $start:path, $mode:expr) => {
        pub unsafe fn $name<W: Width>(
            buf: *const c_void,
            count: W::Count,
            datatype: MPI_Datatype,
            dest: c_int,
            tag: c_int,
            cm: MPI_Comm,
            request: *mut MPI_Request,
        ) -> MpiResult<()> {
            $start(buf, count.as_i64(), datatype, dest, tag, cm, $mode, request)
        }
    };
}

send_modes! {
    MPI_Send, MPI_Isend, MPI_Send_init => Mode::Standard;
    MPI_Ssend, MPI_Issend, MPI_Ssend_init => Mode::Sync;
    MPI_Rsend, MPI_Irsend, MPI_Rsend_init => Mode::Ready;
    MPI_Bsend, MPI_Ibsend, MPI_Bsend_init => Mode::Buffered;
}

unsafe fn blocking_recv(
    buf: *mut c_void,
    count: i64,
    dt: MPI_Datatype,
    source: c_int,
    tag: c_int,
    cm: MPI_Comm,
    status: *mut MPI_Status,
) -> MpiResult<()> {
    let st = match recv_at_once(buf, count, dt, source, tag, cm) {
        Some(st) => st?,
        None => {
            let r = recv_spec(buf, count, dt, source, tag, cm)?;
            start_wait(|rt| start_recv(&mut rt.engine, &r))?
        }
    };
    st.store(status, false);
    status_result(st)
}

/// The blocking receive without a runtime request ([`fast_recv`]'s calls,
/// [`runtime::recv_blocking`]): a message already here is copied straight into the buffer;
/// otherwise the receive waits in the engine, without a request while it can (an arriving
/// eager message is copied into the buffer as it is read from the ring). `None` for any other
/// call (including every erroneous one, which the general path then reports), with nothing
/// done.
unsafe fn recv_at_once(
    buf: *mut c_void,
    count: i64,
    dt: MPI_Datatype,
    source: c_int,
    tag: c_int,
    cm: MPI_Comm,
) -> Option<MpiResult<Status>> {
    let r = fast_recv(buf, count, dt, source, tag, cm)?;
    // SAFETY: the caller's buffer holds `count` elements of the type (MPI semantics) and is
    // the receive's until this call returns, which waits for it.
    Some(unsafe { runtime::recv_blocking(&r) }.map(Status::from))
}

/// The engine's arguments of a receive that needs no registry and no staging (a contiguous
/// host buffer of a predefined datatype on a communicator, from a rank or MPI_ANY_SOURCE, not
/// MPI_PROC_NULL), when the call is of that kind; `None` for anything else, including every erroneous call (the general path reports it). Borrows the
/// communicator and datatype without reference counts and classifies the buffer once.
unsafe fn fast_recv(
    buf: *mut c_void,
    count: i64,
    dt: MPI_Datatype,
    source: c_int,
    tag: c_int,
    cm: MPI_Comm,
) -> Option<RecvArgs> {
    fast_recv_with(buf, count, dt, source, tag, cm, |_| Some(())).map(|(r, ())| r)
}

/// [`fast_recv`], and what `also` takes from the communicator's view (`None` from it declines
/// the fast path too).
unsafe fn fast_recv_with<T>(
    buf: *mut c_void,
    count: i64,
    dt: MPI_Datatype,
    source: c_int,
    tag: c_int,
    cm: MPI_Comm,
    also: impl FnOnce(&CommView<'_>) -> Option<T>,
) -> Option<(RecvArgs, T)> {
    if check_recv_tag(tag).is_err() {
        return None;
    }
    fast_common(cm, dt, count, |comm, d, count| {
        let src = fast_peer(&comm, source, true)?;
        if types::check_buf(buf, count, d, "the receive buffer").is_err() {
            return None;
        }
        let (data, cap) = fast_host_data(buf, d, count)?;
        let extra = also(&comm)?;
        Some((
            RecvArgs {
                buf: data,
                cap,
                ctx: comm.ctx,
                src,
                tag,
            },
            extra,
        ))
    })
}

pub unsafe fn MPI_Recv<W: Width>(
    buf: *mut c_void,
    count: W::Count,
    datatype: MPI_Datatype,
    source: c_int,
    tag: c_int,
    cm: MPI_Comm,
    status: *mut MPI_Status,
) -> MpiResult<()> {
    blocking_recv(buf, count.as_i64(), datatype, source, tag, cm, status)
}

unsafe fn nonblocking_recv(
    buf: *mut c_void,
    count: i64,
    dt: MPI_Datatype,
    source: c_int,
    tag: c_int,
    cm: MPI_Comm,
    request: *mut MPI_Request,
) -> MpiResult<()> {
    nonnull(request, "request")?;
    // The kind of receive fast_recv takes: a message already here completes the request at its
    // start ([`Engine::recv_now`]), else the receive is posted in the engine; no registry
    // look-ups, no reference counts but the request's own on the communicator.
    if let Some((r, c)) = fast_recv_with(buf, count, dt, source, tag, cm, |v| v.arc()) {
        return submit_on(request, Some(&c), |rt| {
            // SAFETY: the buffer is the receive's until the request completes (MPI semantics).
            Ok(match unsafe { rt.engine.recv_start(&r, false) }? {
                Ok(id) => ReqKind::Engine {
                    id,
                    post: None,
                    hold: None,
                },
                Err(st) => ReqKind::Done(Status::from(st)),
            })
        });
    }
    let r = recv_spec(buf, count, dt, source, tag, cm)?;
    submit_on(request, Some(&r.comm), |rt| start_recv(&mut rt.engine, &r))
}

pub unsafe fn MPI_Irecv<W: Width>(
    buf: *mut c_void,
    count: W::Count,
    datatype: MPI_Datatype,
    source: c_int,
    tag: c_int,
    cm: MPI_Comm,
    request: *mut MPI_Request,
) -> MpiResult<()> {
    nonblocking_recv(buf, count.as_i64(), datatype, source, tag, cm, request)
}

unsafe fn sendrecv_kinds(
    sendbuf: *const c_void,
    sendcount: i64,
    sendtype: MPI_Datatype,
    dest: c_int,
    sendtag: c_int,
    recvbuf: *mut c_void,
    recvcount: i64,
    recvtype: MPI_Datatype,
    source: c_int,
    recvtag: c_int,
    cm: MPI_Comm,
) -> MpiResult<(ReqKind, ReqKind)> {
    let s = send_spec(
        sendbuf,
        sendcount,
        sendtype,
        dest,
        sendtag,
        cm,
        Mode::Standard,
    )?;
    let r = recv_spec(recvbuf, recvcount, recvtype, source, recvtag, cm)?;
    runtime::with(|rt| {
        Ok((
            start_recv(&mut rt.engine, &r)?,
            start_send(&mut rt.engine, &s)?,
        ))
    })
}

/// The send half of a send-receive-replace goes from a packed copy, so the receive can land in
/// the same buffer; the copy lives in the send request (`hold`).
unsafe fn sendrecv_replace_kinds(
    buf: *mut c_void,
    count: i64,
    datatype: MPI_Datatype,
    dest: c_int,
    sendtag: c_int,
    source: c_int,
    recvtag: c_int,
    cm: MPI_Comm,
) -> MpiResult<(ReqKind, ReqKind)> {
    let s = send_spec(buf, count, datatype, dest, sendtag, cm, Mode::Standard)?;
    let r = recv_spec(buf, count, datatype, source, recvtag, cm)?;
    let packed = types::pack_all(buf, s.count, &s.dt)?;
    let copy = SendSpec {
        buf: packed.as_ptr() as *const c_void,
        count: packed.len(),
        dt: types::BYTE.clone(),
        ..s
    };
    let (rk, mut sk) = runtime::with(|rt| {
        Ok((
            start_recv(&mut rt.engine, &r)?,
            start_send(&mut rt.engine, &copy)?,
        ))
    })?;
    if let ReqKind::Engine { hold, .. } = &mut sk {
        *hold = Some(crate::gpu::pool::HostBuf::from_vec(packed));
    }
    Ok((rk, sk))
}

fn finish_pair(rk: ReqKind, sk: ReqKind, status: *mut MPI_Status) -> MpiResult<()> {
    let rst = wait_kind(rk)?;
    let sst = wait_kind(sk)?;
    // SAFETY: status is MPI_STATUS_IGNORE or a caller-owned MPI_Status.
    unsafe { rst.store(status, false) };
    status_result(sst)?;
    status_result(rst)
}

unsafe fn pair_request(
    rk: ReqKind,
    sk: ReqKind,
    cm: MPI_Comm,
    request: *mut MPI_Request,
) -> MpiResult<()> {
    nonnull(request, "request")?;
    let kind = ReqKind::Pair {
        recv: Box::new(Request::new(rk)),
        send: Box::new(Request::new(sk)),
        rst: None,
        sst: None,
    };
    submit_on(request, comm(cm).ok().as_ref(), |_| Ok(kind))
}

pub unsafe fn MPI_Sendrecv<W: Width>(
    sendbuf: *const c_void,
    sendcount: W::Count,
    sendtype: MPI_Datatype,
    dest: c_int,
    sendtag: c_int,
    recvbuf: *mut c_void,
    recvcount: W::Count,
    recvtype: MPI_Datatype,
    source: c_int,
    recvtag: c_int,
    cm: MPI_Comm,
    status: *mut MPI_Status,
) -> MpiResult<()> {
    let (sendcount, recvcount) = (sendcount.as_i64(), recvcount.as_i64());
    // The receive's arguments are looked at only when the send's qualify (a device send
    // buffer is classified once here, then by the general path).
    if let Some(a) = fast_send(sendbuf, sendcount, sendtype, dest, sendtag, cm) {
        if let Some(r) = fast_recv(recvbuf, recvcount, recvtype, source, recvtag, cm) {
            return sendrecv_at_once(&a, &r, status);
        }
    }
    let (rk, sk) = sendrecv_kinds(
        sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source, recvtag,
        cm,
    )?;
    finish_pair(rk, sk, status)
}

/// MPI_Sendrecv of [`fast_send`]'s and [`fast_recv`]'s kinds of arguments, without runtime
/// requests: the send written into the ring at once when it can be (it never waits, so the
/// peer's message, often on its way already, is not held up by this rank's receive), the
/// receive (taken at once when its message is here, else posted), the send started in the
/// engine when it was not written; then waits for what is left in the engine, the receive
/// first (as the general path does).
///
/// # Safety
/// The buffers are the caller's MPI_Sendrecv buffers (valid for their counts of the types).
unsafe fn sendrecv_at_once(a: &SendArgs, r: &RecvArgs, status: *mut MPI_Status) -> MpiResult<()> {
    let (rid, sid) = runtime::with(|rt| {
        // SAFETY: the receive buffer is the receive's until this call returns, which waits
        // for it; the send buffer is readable until then.
        let sent = unsafe { rt.engine.send_now(a) };
        let rid = unsafe { rt.engine.recv_start(r, true) }?;
        if sent {
            return Ok((rid, None));
        }
        match unsafe { rt.engine.isend(*a) } {
            Ok(sid) => Ok((rid, Some(sid))),
            Err(e) => {
                // Nothing of the call may stay behind: the receive goes (a receive that has
                // already matched completes on its own and is released then).
                if let Ok(id) = rid {
                    rt.engine.cancel(id);
                    rt.engine.free(id);
                }
                Err(e)
            }
        }
    })?;
    let rst = Status::from(match rid {
        Ok(id) => runtime::wait_engine(id)?,
        Err(st) => st,
    });
    let sst = match sid {
        Some(id) => Status::from(runtime::wait_engine(id)?),
        None => Status::EMPTY,
    };
    // SAFETY: status is MPI_STATUS_IGNORE or a caller-owned MPI_Status.
    unsafe { rst.store(status, false) };
    status_result(sst)?;
    status_result(rst)
}

pub unsafe fn MPI_Isendrecv<W: Width>(
    sendbuf: *const c_void,
    sendcount: W::Count,
    sendtype: MPI_Datatype,
    dest: c_int,
    sendtag: c_int,
    recvbuf: *mut c_void,
    recvcount: W::Count,
    recvtype: MPI_Datatype,
    source: c_int,
    recvtag: c_int,
    cm: MPI_Comm,
    request: *mut MPI_Request,
) -> MpiResult<()> {
    let (rk, sk) = sendrecv_kinds(
        sendbuf,
        sendcount.as_i64(),
        sendtype,
        dest,
        sendtag,
        recvbuf,
        recvcount.as_i64(),
        recvtype,
        source,
        recvtag,
        cm,
    )?;
    pair_request(rk, sk, cm, request)
}

pub unsafe fn MPI_Sendrecv_replace<W: Width>(
    buf: *mut c_void,
    count: W::Count,
    datatype: MPI_Datatype,
    dest: c_int,
    sendtag: c_int,
    source: c_int,
    recvtag: c_int,
    cm: MPI_Comm,
    status: *mut MPI_Status,
) -> MpiResult<()> {
    let (rk, sk) = sendrecv_replace_kinds(
        buf,
        count.as_i64(),
        datatype,
        dest,
        sendtag,
        source,
        recvtag,
        cm,
    )?;
    finish_pair(rk, sk, status)
}

pub unsafe fn MPI_Isendrecv_replace<W: Width>(
    buf: *mut c_void,
    count: W::Count,
    datatype: MPI_Datatype,
    dest: c_int,
    sendtag: c_int,
    source: c_int,
    recvtag: c_int,
    cm: MPI_Comm,
    request: *mut MPI_Request,
) -> MpiResult<()> {
    let (rk, sk) = sendrecv_replace_kinds(
        buf,
        count.as_i64(),
        datatype,
        dest,
        sendtag,
        source,
        recvtag,
        cm,
    )?;
    pair_request(rk, sk, cm, request)
}

// ---- probe and matched receive ----

/// A probe that found nothing on (`ctx`, `src`) (`empty`) fails when only ranks that called
/// MPI_Finalize could send it a match (`engine::bye`): nothing will ever come.
fn finalized_check(rt: &Runtime, empty: bool, ctx: u32, src: i32) -> MpiResult<()> {
    match rt.engine.finalized_source(ctx, src) {
        Some(source) if empty => Err(runtime::request::finalized_error(source)),
        _ => Ok(()),
    }
}

pub unsafe fn MPI_Iprobe(
    source: c_int,
    tag: c_int,
    cm: MPI_Comm,
    flag: *mut c_int,
    status: *mut MPI_Status,
) -> MpiResult<()> {
    let comm = comm(cm)?;
    check_recv_tag(tag)?;
    nonnull(flag, "flag")?;
    let Some(src) = check_peer(&comm, source, true)? else {
        *flag = 1;
        Status::proc_null().store(status, false);
        return Ok(());
    };
    let st = runtime::with(|rt| {
        rt.progress();
        let st = rt.engine.iprobe(comm.ctx, src, tag);
        finalized_check(rt, st.is_none(), comm.ctx, src)?;
        Ok(st)
    })?;
    *flag = st.is_some() as c_int;
    if let Some(st) = st {
        Status::from(st).store(status, false);
    }
    Ok(())
}

pub unsafe fn MPI_Probe(
    source: c_int,
    tag: c_int,
    cm: MPI_Comm,
    status: *mut MPI_Status,
) -> MpiResult<()> {
    let comm = comm(cm)?;
    check_recv_tag(tag)?;
    let Some(src) = check_peer(&comm, source, true)? else {
        Status::proc_null().store(status, false);
        return Ok(());
    };
    let mut found = None;
    wait_until(|rt| {
        found = rt.engine.iprobe(comm.ctx, src, tag);
        finalized_check(rt, found.is_none(), comm.ctx, src)?;
        Ok(found.is_some())
    })?;
    Status::from(found.unwrap()).store(status, false);
    Ok(())
}

unsafe fn improbe_inner(
    source: c_int,
    tag: c_int,
    cm: MPI_Comm,
    block: bool,
    flag: *mut c_int,
    message: *mut MPI_Message,
    status: *mut MPI_Status,
) -> MpiResult<()> {
    let comm = comm(cm)?;
    check_recv_tag(tag)?;
    nonnull(message, "message")?;
    let Some(src) = check_peer(&comm, source, true)? else {
        if !flag.is_null() {
            *flag = 1;
        }
        *message = c::MPI_MESSAGE_NO_PROC;
        Status::proc_null().store(status, false);
        return Ok(());
    };
    let mut found = None;
    if block {
        wait_until(|rt| {
            found = rt.engine.improbe(comm.ctx, src, tag);
            finalized_check(rt, found.is_none(), comm.ctx, src)?;
            Ok(found.is_some())
        })?;
    } else {
        found = runtime::with(|rt| {
            rt.progress();
            let found = rt.engine.improbe(comm.ctx, src, tag);
            finalized_check(rt, found.is_none(), comm.ctx, src)?;
            Ok(found)
        })?;
        *flag = found.is_some() as c_int;
    }
    if let Some((msg, st)) = found {
        *message = super::message::insert(msg) as MPI_Message;
        Status::from(st).store(status, false);
    } else if !block {
        *message = c::MPI_MESSAGE_NULL;
    }
    Ok(())
}

pub unsafe fn MPI_Mprobe(
    source: c_int,
    tag: c_int,
    cm: MPI_Comm,
    message: *mut MPI_Message,
    status: *mut MPI_Status,
) -> MpiResult<()> {
    improbe_inner(source, tag, cm, true, std::ptr::null_mut(), message, status)
}

pub unsafe fn MPI_Improbe(
    source: c_int,
    tag: c_int,
    cm: MPI_Comm,
    flag: *mut c_int,
    message: *mut MPI_Message,
    status: *mut MPI_Status,
) -> MpiResult<()> {
    nonnull(flag, "flag")?;
    improbe_inner(source, tag, cm, false, flag, message, status)
}

unsafe fn matched_recv_kind(
    buf: *mut c_void,
    count: i64,
    dt: MPI_Datatype,
    message: *mut MPI_Message,
) -> MpiResult<ReqKind> {
    nonnull(message, "message")?;
    let count = check_count(count)?;
    let dt = types::committed(dt)?;
    let m = *message;
    let touched = if m == c::MPI_MESSAGE_NO_PROC {
        0
    } else {
        count
    };
    types::check_buf(buf, touched, &dt, "the receive buffer")?;
    if m == c::MPI_MESSAGE_NO_PROC {
        *message = c::MPI_MESSAGE_NULL;
        return Ok(ReqKind::Done(Status::proc_null()));
    }
    let Some(msg) = super::message::take(m as usize) else {
        mpi_bail!(
            MPI_ERR_REQUEST,
            "invalid message handle {:#x} (already received, or not a message)",
            m as usize
        )
    };
    *message = c::MPI_MESSAGE_NULL;
    let v = types::recv_view(buf, count, &dt)?;
    runtime::with(|rt| {
        Ok(ReqKind::Engine {
            id: rt.engine.imrecv_dev(msg, v.ptr, v.cap, v.dev)?,
            post: v.post,
            hold: None,
        })
    })
}

pub unsafe fn MPI_Mrecv<W: Width>(
    buf: *mut c_void,
    count: W::Count,
    datatype: MPI_Datatype,
    message: *mut MPI_Message,
    status: *mut MPI_Status,
) -> MpiResult<()> {
    mrecv(buf, count.as_i64(), datatype, message, status)
}

unsafe fn mrecv(
    buf: *mut c_void,
    count: i64,
    datatype: MPI_Datatype,
    message: *mut MPI_Message,
    status: *mut MPI_Status,
) -> MpiResult<()> {
    let k = matched_recv_kind(buf, count, datatype, message)?;
    let st = wait_kind(k)?;
    st.store(status, false);
    status_result(st)
}

unsafe fn imrecv(
    buf: *mut c_void,
    count: i64,
    datatype: MPI_Datatype,
    message: *mut MPI_Message,
    request: *mut MPI_Request,
) -> MpiResult<()> {
    nonnull(request, "request")?;
    let k = matched_recv_kind(buf, count, datatype, message)?;
    submit(request, |_| Ok(k))
}

pub unsafe fn MPI_Imrecv<W: Width>(
    buf: *mut c_void,
    count: W::Count,
    datatype: MPI_Datatype,
    message: *mut MPI_Message,
    request: *mut MPI_Request,
) -> MpiResult<()> {
    imrecv(buf, count.as_i64(), datatype, message, request)
}

// ---- status inspection ----

/// MPI_Get_count: MPI_UNDEFINED when the bytes received are not a whole number of `datatype`s,
/// or the count does not fit the output type.
pub unsafe fn MPI_Get_count<W: Width>(
    status: *const MPI_Status,
    datatype: MPI_Datatype,
    count: *mut W::Count,
) -> MpiResult<()> {
    nonnull(status, "status")?;
    let dt = types::committed(datatype)?;
    let bytes = Status::bytes_of(&*status);
    let n = if dt.desc.size() == 0 {
        0
    } else if bytes % dt.desc.size() as i64 != 0 {
        c::MPI_UNDEFINED as i64
    } else {
        bytes / dt.desc.size() as i64
    };
    out(count, "count", W::Count::or_undefined(n))
}

pub unsafe fn MPI_Get_elements<W: Width>(
    status: *const MPI_Status,
    datatype: MPI_Datatype,
    count: *mut W::Count,
) -> MpiResult<()> {
    nonnull(status, "status")?;
    let dt = types::committed(datatype)?;
    let bytes = Status::bytes_of(&*status) as usize;
    out(
        count,
        "count",
        W::Count::or_undefined(types::elements_in(&dt, bytes)),
    )
}

pub unsafe fn MPI_Status_set_elements<W: Width>(
    status: *mut MPI_Status,
    datatype: MPI_Datatype,
    count: W::Count,
) -> MpiResult<()> {
    nonnull(status, "status")?;
    let dt = types::committed(datatype)?;
    let bytes = types::bytes_for_elements(&dt, count.as_i64().max(0) as usize);
    let cancelled = Status::cancelled_of(&*status);
    Status::set_count(&mut *status, bytes as i64, cancelled);
    Ok(())
}

pub unsafe fn MPI_Status_set_cancelled(status: *mut MPI_Status, flag: c_int) -> MpiResult<()> {
    nonnull(status, "status")?;
    let bytes = Status::bytes_of(&*status);
    Status::set_count(&mut *status, bytes, flag != 0);
    Ok(())
}

pub unsafe fn MPI_Test_cancelled(status: *const MPI_Status, flag: *mut c_int) -> MpiResult<()> {
    nonnull(status, "status")?;
    out(flag, "flag", Status::cancelled_of(&*status) as c_int)
}

pub unsafe fn MPI_Status_get_source(
    status: *const MPI_Status,
    source: *mut c_int,
) -> MpiResult<()> {
    nonnull(status, "status")?;
    out(source, "source", (*status).MPI_SOURCE)
}
pub unsafe fn MPI_Status_get_tag(status: *const MPI_Status, tag: *mut c_int) -> MpiResult<()> {
    nonnull(status, "status")?;
    out(tag, "tag", (*status).MPI_TAG)
}
pub unsafe fn MPI_Status_get_error(status: *const MPI_Status, err: *mut c_int) -> MpiResult<()> {
    nonnull(status, "status")?;
    out(err, "error", (*status).MPI_ERROR)
}
pub unsafe fn MPI_Status_set_source(status: *mut MPI_Status, source: c_int) -> MpiResult<()> {
    nonnull(status, "status")?;
    (*status).MPI_SOURCE = source;
    Ok(())
}
pub unsafe fn MPI_Status_set_tag(status: *mut MPI_Status, tag: c_int) -> MpiResult<()> {
    nonnull(status, "status")?;
    (*status).MPI_TAG = tag;
    Ok(())
}
pub unsafe fn MPI_Status_set_error(status: *mut MPI_Status, err: c_int) -> MpiResult<()> {
    nonnull(status, "status")?;
    (*status).MPI_ERROR = err;
    Ok(())
}

// ---- persistent point-to-point ----

unsafe fn persistent(
    request: *mut MPI_Request,
    comm: &Arc<CommObj>,
    starter: Starter,
) -> MpiResult<()> {
    nonnull(request, "request")?;
    let h = runtime::with(|rt| {
        Ok(new_request(
            rt,
            Request {
                kind: ReqKind::Inactive,
                persistent: Some(starter),
                comm: Some(comm.clone()),
            },
        ))
    })?;
    *request = h as MPI_Request;
    Ok(())
}

/// MPI_Send_init and the other persistent send modes (their entry points: `send_modes!`).
pub(super) unsafe fn send_init(
    buf: *const c_void,
    count: i64,
    dt: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    cm: MPI_Comm,
    mode: Mode,
    request: *mut MPI_Request,
) -> MpiResult<()> {
    let s: SendSpec = send_spec(buf, count, dt, dest, tag, cm, mode)?;
    let comm = s.comm.clone();
    persistent(request, &comm, Box::new(move |e| start_send(e, &s)))
}

pub unsafe fn MPI_Recv_init<W: Width>(
    buf: *mut c_void,
    count: W::Count,
    datatype: MPI_Datatype,
    source: c_int,
    tag: c_int,
    cm: MPI_Comm,
    request: *mut MPI_Request,
) -> MpiResult<()> {
    let r: RecvSpec = recv_spec(buf, count.as_i64(), datatype, source, tag, cm)?;
    let comm = r.comm.clone();
    persistent(request, &comm, Box::new(move |e| start_recv(e, &r)))
}
