//! MPICH's MPIX streams (mpi-ext.h): stream objects, stream communicators and the enqueue
//! forms, which run MPI calls in the order of an application's CUDA stream.
//!
//! An enqueue call checks its arguments on the calling thread and enqueues on the stream: for a
//! device buffer (contiguous datatypes), an asynchronous copy into page-locked staging, the
//! MPI call over host memory (run by the communicator's worker thread, the stream waiting for
//! it: `gpu::enqueue` says why not inside the host function) and the copy back; a host buffer
//! is used in place. Errors found while the stream runs are raised on the communicator's error
//! handler from the worker thread.

use super::coll::{
    MPI_Allgather, MPI_Allreduce, MPI_Alltoall, MPI_Bcast, MPI_Reduce_scatter_block,
};
use super::p2p::{
    check_peer, check_recv_tag, check_send_tag, MPI_Irecv, MPI_Isend, MPI_Recv, MPI_Send,
};
use super::request::{MPI_Wait, MPI_Waitall};
use crate::abi::consts as c;
use crate::abi::ffi::*;
use crate::abi::width::LargeCounts;
use crate::gpu::enqueue::{needs_staging, Builder, Queue, UserStream};
use crate::gpu::enqueue_kernel::{Plan, Ready, StreamAr};
use crate::mpi::error::{MpiError, MpiResult};
use crate::mpi_bail;
use crate::runtime::objects::{builtin_op, comm, info_obj, nonnull, CommObj};
use crate::runtime::stream::{self as st, EnqReq, Local, StreamComm, StreamKernel, StreamObj};
use crate::runtime::types::{check_count, committed};
use std::os::raw::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Hex digits of `bytes` (MPICH's `MPL_hex_encode`: two upper-case digits per byte).
fn hex_encode(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02X}")).collect()
}

/// The bytes of a hex string as MPICH writes them: two digits per byte (either case), or
/// `[N]` for a run of N zero bytes (newer MPICH). None when malformed.
fn hex_decode(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'[' {
            let end = i + s[i..].find(']')?;
            let n: usize = s[i + 1..end].parse().ok()?;
            out.resize(out.len() + n, 0);
            i = end + 1;
            continue;
        }
        let hi = (*b.get(i)? as char).to_digit(16)?;
        let lo = (*b.get(i + 1)? as char).to_digit(16)?;
        out.push((hi * 16 + lo) as u8);
        i += 2;
    }
    Some(out)
}

pub unsafe fn MPIX_Info_set_hex(
    info: MPI_Info,
    key: *const c_char,
    value: *const c_void,
    value_size: c_int,
) -> MpiResult<()> {
    if value_size < 0 {
        mpi_bail!(MPI_ERR_ARG, "value_size {value_size} is negative");
    }
    if value_size > 0 {
        nonnull(value, "value")?;
    }
    // SAFETY: the caller passes value_size readable bytes.
    let bytes = if value_size == 0 {
        &[][..]
    } else {
        std::slice::from_raw_parts(value as *const u8, value_size as usize)
    };
    let v = std::ffi::CString::new(hex_encode(bytes)).expect("hex digits have no NUL");
    super::info::MPI_Info_set(info, key, v.as_ptr())
}

pub unsafe fn MPIX_Stream_create(info: MPI_Info, stream: *mut MPIX_Stream) -> MpiResult<()> {
    nonnull(stream, "stream")?;
    let pairs: Vec<(String, String)> = if info == c::MPI_INFO_NULL {
        Vec::new()
    } else {
        info_obj(info)?
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    };
    let get = |k: &str| pairs.iter().find(|(a, _)| a == k).map(|(_, v)| v.as_str());
    let local = match get("type") {
        None => Local::Host,
        Some("cudaStream_t") => {
            let Some(v) = get("value") else {
                mpi_bail!(
                    MPI_ERR_INFO_NOKEY,
                    "info: type is cudaStream_t but there is no key \"value\" (set it with MPIX_Info_set_hex(info, \"value\", &stream, sizeof(stream)))"
                );
            };
            let raw = match hex_decode(v) {
                Some(b) if b.len() == std::mem::size_of::<usize>() => {
                    usize::from_ne_bytes(b.try_into().expect("length checked"))
                }
                _ => mpi_bail!(
                    MPI_ERR_INFO_VALUE,
                    "info: \"value\" {v:?} is not the {} hex-encoded bytes of a cudaStream_t",
                    std::mem::size_of::<usize>()
                ),
            };
            if !crate::gpu::available() {
                mpi_bail!(
                    MPI_ERR_UNSUPPORTED_OPERATION,
                    "info: a cudaStream_t stream needs CUDA, and this process has none ({})",
                    crate::gpu::unavailable_reason().unwrap_or_default()
                );
            }
            match UserStream::new(raw) {
                Ok(u) => Local::Cuda(u),
                Err(e) => mpi_bail!(
                    MPI_ERR_INFO_VALUE,
                    "info: \"value\" {raw:#x} is not a usable CUDA stream: {e}"
                ),
            }
        }
        Some(t) => mpi_bail!(
            MPI_ERR_INFO_VALUE,
            "info: stream type {t:?} is not supported (gpumpi knows \"cudaStream_t\")"
        ),
    };
    if let Local::Cuda(u) = &local {
        tracing::info!(
            stream = format!("{:#x}", u.raw),
            "MPIX stream on a CUDA stream"
        );
    }
    *stream = st::insert(StreamObj { local }) as MPIX_Stream;
    Ok(())
}

pub unsafe fn MPIX_Stream_free(stream: *mut MPIX_Stream) -> MpiResult<()> {
    nonnull(stream, "stream")?;
    if *stream == c::MPIX_STREAM_NULL {
        mpi_bail!(MPI_ERR_ARG, "stream is MPIX_STREAM_NULL");
    }
    st::remove(*stream as usize, "stream")?;
    *stream = c::MPIX_STREAM_NULL;
    Ok(())
}

/// Duplicate `cm` (collective) and attach `streams` to the duplicate.
unsafe fn stream_comm(
    cm: MPI_Comm,
    streams: &[MPIX_Stream],
    newcomm: *mut MPI_Comm,
) -> MpiResult<()> {
    nonnull(newcomm, "newcomm")?;
    let mut local = Vec::with_capacity(streams.len());
    for (i, &s) in streams.iter().enumerate() {
        let what = if streams.len() == 1 {
            "stream".to_string()
        } else {
            format!("array_of_streams[{i}]")
        };
        if s == c::MPIX_STREAM_NULL {
            local.push((s as usize, None));
        } else {
            local.push((s as usize, Some(st::get(s as usize, &what)?)));
        }
    }
    let cuda = local.iter().find_map(|(_, s)| match s.as_deref() {
        Some(StreamObj {
            local: Local::Cuda(u),
        }) => Some(*u),
        _ => None,
    });
    super::comm::MPI_Comm_dup(cm, newcomm)?;
    let queue = match cuda.map(Queue::new) {
        None => None,
        Some(Ok(q)) => Some(Arc::new(q)),
        Some(Err(e)) => {
            let _ = super::comm::MPI_Comm_free(newcomm);
            mpi_bail!(MPI_ERR_OTHER, "{e}");
        }
    };
    if let Some(q) = &queue {
        tracing::info!(
            stream = format!("{:#x}", q.stream.raw),
            "stream communicator: enqueue forms ordered on the CUDA stream"
        );
    }
    let o = comm(*newcomm)?;
    // The stream kernel's private duplicate (collective: the rule reads values every rank
    // shares, not whether this rank's stream is a CUDA stream).
    let kernel = match crate::gpu::enqueue_kernel::comm_eligible(o.size(), o.one_node) {
        Ok(()) => {
            let mut d = c::MPI_COMM_NULL;
            if let Err(e) = super::comm::MPI_Comm_dup(*newcomm, &mut d) {
                let _ = super::comm::MPI_Comm_free(newcomm);
                return Err(e);
            }
            Ok(StreamKernel {
                setup_comm: AtomicUsize::new(d as usize),
                state: Mutex::new(None),
            })
        }
        Err(why) => Err(why),
    };
    let _ = o.stream.set(Arc::new(StreamComm {
        local,
        queue,
        kernel,
    }));
    Ok(())
}

pub unsafe fn MPIX_Stream_comm_create(
    cm: MPI_Comm,
    stream: MPIX_Stream,
    newcomm: *mut MPI_Comm,
) -> MpiResult<()> {
    stream_comm(cm, &[stream], newcomm)
}

pub unsafe fn MPIX_Stream_comm_create_multiplex(
    cm: MPI_Comm,
    count: c_int,
    array_of_streams: *mut MPIX_Stream,
    newcomm: *mut MPI_Comm,
) -> MpiResult<()> {
    if count < 0 {
        mpi_bail!(MPI_ERR_COUNT, "count {count} is negative");
    }
    let streams = if count == 0 {
        Vec::new()
    } else {
        nonnull(array_of_streams, "array_of_streams")?;
        // SAFETY: the caller passes count handles.
        std::slice::from_raw_parts(array_of_streams, count as usize).to_vec()
    };
    stream_comm(cm, &streams, newcomm)
}

pub unsafe fn MPIX_Comm_get_stream(
    cm: MPI_Comm,
    idx: c_int,
    stream: *mut MPIX_Stream,
) -> MpiResult<()> {
    nonnull(stream, "stream")?;
    let o = comm(cm)?;
    let Some(sc) = o.stream.get() else {
        // Not a stream communicator: no stream (as MPICH answers).
        *stream = c::MPIX_STREAM_NULL;
        return Ok(());
    };
    match usize::try_from(idx).ok().and_then(|i| sc.local.get(i)) {
        Some((h, _)) => {
            *stream = *h as MPIX_Stream;
            Ok(())
        }
        None => mpi_bail!(
            MPI_ERR_ARG,
            "idx {idx} is not the index of one of the communicator's {} local stream(s)",
            sc.local.len()
        ),
    }
}

// ---- the enqueue forms ----

/// The communicator and its enqueue queue; MPI_ERR_COMM where it has none.
fn queue_of(cm: MPI_Comm) -> MpiResult<(Arc<CommObj>, Arc<Queue>)> {
    let o = comm(cm)?;
    let Some(sc) = o.stream.get() else {
        mpi_bail!(
            MPI_ERR_COMM,
            "comm is not a stream communicator (make one with MPIX_Stream_comm_create)"
        );
    };
    let Some(q) = sc.queue.clone() else {
        mpi_bail!(
            MPI_ERR_COMM,
            "comm's local stream is not a CUDA stream (MPIX_Stream_create with info \"type\" = \"cudaStream_t\")"
        );
    };
    Ok((o, q))
}

/// Raise an error of a step run by the worker on the communicator's error handler.
/// Run a step on the worker as the C entry points run: a panic is caught and every error is
/// raised on the communicator's error handler.
fn report(func: &'static str, cm: usize, body: impl FnOnce() -> MpiResult<()>) {
    let body = || body().inspect_err(|e| tracing::error!("{func} (stream-ordered): {e}"));
    crate::abi::guard(func, crate::abi::ErrObj::Comm(cm as MPI_Comm), body);
}

/// One user buffer of an enqueued call.
#[derive(Clone, Copy)]
struct Part {
    /// The user's address.
    user: usize,
    /// Where the datatype's first byte is (`true_lb`).
    lb: isize,
    /// Bytes of data from `user + lb`.
    len: usize,
    /// Offset in the staging area when the buffer is device memory.
    staged: Option<usize>,
    input: bool,
    output: bool,
}

/// Describe `count` elements of `dt` at `buf` (`what` names the argument in errors).
fn part(
    buf: *const c_void,
    count: i64,
    dt: MPI_Datatype,
    what: &str,
    input: bool,
    output: bool,
) -> MpiResult<Part> {
    let n = check_count(count)?;
    let d = committed(dt)?;
    let staged = n > 0 && d.size() > 0 && needs_staging(buf as *const u8);
    if staged && !d.desc.is_contiguous(n) {
        mpi_bail!(
            MPI_ERR_TYPE,
            "{what} is device memory and the datatype is not contiguous (the enqueue forms stage contiguous data only)"
        );
    }
    Ok(Part {
        user: buf as usize,
        lb: d.desc.true_lb(),
        len: d.desc.packed_size(n),
        staged: staged.then_some(0),
        input,
        output,
    })
}

/// Lay the staged parts out in one staging area; returns its size.
fn layout(parts: &mut [Part]) -> usize {
    let mut off = 0;
    for p in parts.iter_mut() {
        if let Some(o) = &mut p.staged {
            *o = off;
            off += p.len.next_multiple_of(64);
        }
    }
    off
}

/// The address the MPI call uses for `p`: the staging copy, or the user's buffer.
fn addr(b: &Builder<'_>, p: &Part) -> usize {
    match p.staged {
        Some(off) => (b.staging() as usize)
            .wrapping_add(off)
            .wrapping_add_signed(-p.lb),
        None => p.user,
    }
}

fn debug_path(func: &str, parts: &[Part], captured: bool) {
    let staged: usize = parts
        .iter()
        .filter(|p| p.staged.is_some())
        .map(|p| p.len)
        .sum();
    tracing::debug!(
        staged_bytes = staged,
        captured,
        "{func}: host-function fallback (device data staged through pinned host memory; the MPI call runs on the stream communicator's worker)"
    );
}

/// Enqueue one blocking call over `parts`: copies in, `run(addresses)` on the worker with the
/// stream waiting, copies out.
fn enqueue_blocking(
    func: &'static str,
    cm: MPI_Comm,
    q: &Queue,
    mut parts: Vec<Part>,
    run: impl Fn(&[usize]) -> MpiResult<()> + Send + Sync + 'static,
) -> MpiResult<()> {
    let size = layout(&mut parts);
    let err = |e: String| MpiError::new(c::MPI_ERR_OTHER, e);
    let mut b = q.begin(size).map_err(err)?;
    debug_path(func, &parts, b.captured());
    for p in parts.iter().filter(|p| p.input) {
        if let Some(off) = p.staged {
            b.to_staging(off, p.user.wrapping_add_signed(p.lb), p.len)
                .map_err(err)?;
        }
    }
    let addrs: Vec<usize> = parts.iter().map(|p| addr(&b, p)).collect();
    let cmv = cm as usize;
    b.blocking(move || report(func, cmv, || run(&addrs)))
        .map_err(err)?;
    for p in parts.iter().filter(|p| p.output) {
        if let Some(off) = p.staged {
            let src = (b.staging() as usize).wrapping_add(off) as *const u8;
            // SAFETY: `off + len` lies in this operation's staging (`layout`).
            unsafe { b.from_staging(p.user.wrapping_add_signed(p.lb), src, p.len) }.map_err(err)?;
        }
    }
    b.finish().map_err(err)
}

/// The checks and staging part shared by the point-to-point enqueue forms: the stream
/// communicator's queue and the buffer's part (`send`: data goes out, else comes in; a receive
/// takes MPI_ANY_SOURCE and MPI_ANY_TAG).
fn p2p_part(
    buf: *const c_void,
    count: c_int,
    datatype: MPI_Datatype,
    peer: c_int,
    tag: c_int,
    cm: MPI_Comm,
    send: bool,
) -> MpiResult<(Arc<Queue>, Part)> {
    let (o, q) = queue_of(cm)?;
    check_peer(&o, peer, !send)?;
    if send {
        check_send_tag(tag)?;
    } else {
        check_recv_tag(tag)?;
    }
    let p = part(buf, count as i64, datatype, "buf", send, !send)?;
    Ok((q, p))
}

pub unsafe fn MPIX_Send_enqueue(
    buf: *const c_void,
    count: c_int,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    cm: MPI_Comm,
) -> MpiResult<()> {
    let (q, p) = p2p_part(buf, count, datatype, dest, tag, cm, true)?;
    let (dt, cmv) = (datatype as usize, cm as usize);
    enqueue_blocking("MPIX_Send_enqueue", cm, &q, vec![p], move |a| {
        // SAFETY: host memory that lives until the stream passed this step.
        unsafe {
            MPI_Send::<LargeCounts>(
                a[0] as *const c_void,
                count as i64,
                dt as MPI_Datatype,
                dest,
                tag,
                cmv as MPI_Comm,
            )
        }
    })
}

pub unsafe fn MPIX_Recv_enqueue(
    buf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    source: c_int,
    tag: c_int,
    cm: MPI_Comm,
    status: *mut MPI_Status,
) -> MpiResult<()> {
    let (q, p) = p2p_part(buf, count, datatype, source, tag, cm, false)?;
    let (dt, cmv, stv) = (datatype as usize, cm as usize, status as usize);
    enqueue_blocking("MPIX_Recv_enqueue", cm, &q, vec![p], move |a| {
        // SAFETY: as for MPIX_Send_enqueue; the status (or MPI_STATUS_IGNORE) is the caller's.
        unsafe {
            MPI_Recv::<LargeCounts>(
                a[0] as *mut c_void,
                count as i64,
                dt as MPI_Datatype,
                source,
                tag,
                cmv as MPI_Comm,
                stv as *mut MPI_Status,
            )
        }
    })
}

/// Enqueue the start of a nonblocking call and hand back its request.
fn enqueue_start(
    func: &'static str,
    cm: MPI_Comm,
    q: Arc<Queue>,
    mut p: Part,
    start: impl Fn(usize, *mut MPI_Request) -> MpiResult<()> + Send + Sync + 'static,
    request: *mut MPI_Request,
) -> MpiResult<()> {
    let size = layout(std::slice::from_mut(&mut p));
    let err = |e: String| MpiError::new(c::MPI_ERR_OTHER, e);
    let mut b = q.begin(size).map_err(err)?;
    debug_path(func, &[p], b.captured());
    if let (true, Some(off)) = (p.input, p.staged) {
        b.to_staging(off, p.user.wrapping_add_signed(p.lb), p.len)
            .map_err(err)?;
    }
    let a = addr(&b, &p);
    let inner = Arc::new(AtomicUsize::new(c::MPI_REQUEST_NULL as usize));
    let (slot, cmv) = (inner.clone(), cm as usize);
    b.nonblocking(move || {
        let mut r = c::MPI_REQUEST_NULL;
        report(func, cmv, || start(a, &mut r));
        slot.store(r as usize, Ordering::Release);
    })
    .map_err(err)?;
    let copy_back = match (p.output, p.staged) {
        (true, Some(off)) => Some((
            p.user.wrapping_add_signed(p.lb),
            (b.staging() as usize).wrapping_add(off),
            p.len,
        )),
        _ => None,
    };
    let (op, _) = b.into_pending();
    let h = st::insert_req(EnqReq {
        queue: q,
        comm: cm as usize,
        pending: Mutex::new(Some(op)),
        inner,
        copy_back,
    });
    // SAFETY: checked non-null by the caller.
    unsafe { *request = h as MPI_Request };
    Ok(())
}

pub unsafe fn MPIX_Isend_enqueue(
    buf: *const c_void,
    count: c_int,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    cm: MPI_Comm,
    request: *mut MPI_Request,
) -> MpiResult<()> {
    nonnull(request, "request")?;
    let (q, p) = p2p_part(buf, count, datatype, dest, tag, cm, true)?;
    let (dt, cmv) = (datatype as usize, cm as usize);
    let start = move |a: usize, r: *mut MPI_Request| {
        // SAFETY: host memory that the request's wait keeps alive.
        unsafe {
            MPI_Isend::<LargeCounts>(
                a as *const c_void,
                count as i64,
                dt as MPI_Datatype,
                dest,
                tag,
                cmv as MPI_Comm,
                r,
            )
        }
    };
    enqueue_start("MPIX_Isend_enqueue", cm, q, p, start, request)
}

pub unsafe fn MPIX_Irecv_enqueue(
    buf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    source: c_int,
    tag: c_int,
    cm: MPI_Comm,
    request: *mut MPI_Request,
) -> MpiResult<()> {
    nonnull(request, "request")?;
    let (q, p) = p2p_part(buf, count, datatype, source, tag, cm, false)?;
    let (dt, cmv) = (datatype as usize, cm as usize);
    let start = move |a: usize, r: *mut MPI_Request| {
        // SAFETY: as for MPIX_Isend_enqueue.
        unsafe {
            MPI_Irecv::<LargeCounts>(
                a as *mut c_void,
                count as i64,
                dt as MPI_Datatype,
                source,
                tag,
                cmv as MPI_Comm,
                r,
            )
        }
    };
    enqueue_start("MPIX_Irecv_enqueue", cm, q, p, start, request)
}

/// The enqueued requests of `handles` (MPI_REQUEST_NULL skipped), all of one queue.
fn enqueued(handles: &[MPI_Request], what: &str) -> MpiResult<Vec<(usize, Arc<EnqReq>)>> {
    let mut out: Vec<(usize, Arc<EnqReq>)> = Vec::new();
    for (i, &h) in handles.iter().enumerate() {
        if h == c::MPI_REQUEST_NULL {
            continue;
        }
        let Some(r) = st::get_req(h as usize) else {
            mpi_bail!(
                MPI_ERR_REQUEST,
                "{what}[{i}] is not a request of MPIX_Isend_enqueue or MPIX_Irecv_enqueue"
            );
        };
        if let Some((_, first)) = out.first() {
            if !Arc::ptr_eq(&first.queue, &r.queue) {
                mpi_bail!(
                    MPI_ERR_REQUEST,
                    "{what}[{i}] was enqueued on another stream than the first request"
                );
            }
        }
        out.push((i, r));
    }
    Ok(out)
}

/// Enqueue the wait of `reqs` (one queue): `run(inner requests)` on the worker, then the
/// staged receives' copies; the user's handles become MPI_REQUEST_NULL now.
fn enqueue_wait(
    func: &'static str,
    reqs: &[(usize, Arc<EnqReq>)],
    run: impl Fn(&mut [MPI_Request]) -> MpiResult<()> + Send + Sync + 'static,
) -> MpiResult<()> {
    let Some((_, first)) = reqs.first() else {
        return Ok(());
    };
    let r = enqueue_wait_on(func, first, reqs, run);
    if r.is_err() {
        // Raised on the requests' communicator's handler (the call has no communicator).
        crate::abi::errh::failed_request_on(comm(first.comm as MPI_Comm).ok());
    }
    r
}

fn enqueue_wait_on(
    func: &'static str,
    first: &Arc<EnqReq>,
    reqs: &[(usize, Arc<EnqReq>)],
    run: impl Fn(&mut [MPI_Request]) -> MpiResult<()> + Send + Sync + 'static,
) -> MpiResult<()> {
    let q = first.queue.clone();
    let err = |e: String| MpiError::new(c::MPI_ERR_OTHER, e);
    let mut b = q.begin(0).map_err(err)?;
    tracing::debug!(
        requests = reqs.len(),
        captured = b.captured(),
        "{func}: host-function fallback (the wait runs on the stream communicator's worker)"
    );
    for (_, r) in reqs {
        if let Some(op) = r.pending.lock().unwrap_or_else(|e| e.into_inner()).take() {
            b.absorb(op);
        }
    }
    let inners: Vec<Arc<AtomicUsize>> = reqs.iter().map(|(_, r)| r.inner.clone()).collect();
    let cmv = first.comm;
    b.blocking(move || {
        let mut rs: Vec<MPI_Request> = inners
            .iter()
            .map(|i| i.load(Ordering::Acquire) as MPI_Request)
            .collect();
        report(func, cmv, || run(&mut rs));
    })
    .map_err(err)?;
    for (_, r) in reqs {
        if let Some((dst, src, len)) = r.copy_back {
            // SAFETY: the staging of the receive's operation, which this wait took over.
            unsafe { b.from_staging(dst, src as *const u8, len) }.map_err(err)?;
        }
    }
    b.finish().map_err(err)
}

pub unsafe fn MPIX_Wait_enqueue(
    request: *mut MPI_Request,
    status: *mut MPI_Status,
) -> MpiResult<()> {
    nonnull(request, "request")?;
    let reqs = enqueued(std::slice::from_ref(&*request), "request")?;
    let stv = status as usize;
    enqueue_wait("MPIX_Wait_enqueue", &reqs, move |rs| {
        // SAFETY: the request the worker started; the status is the caller's (or IGNORE).
        unsafe { MPI_Wait(&mut rs[0], stv as *mut MPI_Status) }
    })?;
    if let Some((_, _)) = reqs.first() {
        st::remove_req(*request as usize);
        *request = c::MPI_REQUEST_NULL;
    }
    Ok(())
}

pub unsafe fn MPIX_Waitall_enqueue(
    count: c_int,
    array_of_requests: *mut MPI_Request,
    array_of_statuses: *mut MPI_Status,
) -> MpiResult<()> {
    if count < 0 {
        mpi_bail!(MPI_ERR_COUNT, "count {count} is negative");
    }
    if count == 0 {
        return Ok(());
    }
    nonnull(array_of_requests, "array_of_requests")?;
    // SAFETY: the caller passes count requests.
    let hs = std::slice::from_raw_parts_mut(array_of_requests, count as usize);
    let reqs = enqueued(hs, "array_of_requests")?;
    let positions: Vec<usize> = reqs.iter().map(|(i, _)| *i).collect();
    let n = count as usize;
    let stv = array_of_statuses as usize;
    enqueue_wait("MPIX_Waitall_enqueue", &reqs, move |rs| {
        // The statuses go to the requests' places in the caller's array (null entries get the
        // empty status from MPI_Waitall's own handling of MPI_REQUEST_NULL).
        let mut all = vec![c::MPI_REQUEST_NULL; n];
        for (k, &i) in positions.iter().enumerate() {
            all[i] = rs[k];
        }
        // SAFETY: requests the worker started; the statuses array is the caller's (or IGNORE).
        unsafe { MPI_Waitall(n as c_int, all.as_mut_ptr(), stv as *mut MPI_Status) }
    })?;
    for (i, _) in &reqs {
        st::remove_req(hs[*i] as usize);
        hs[*i] = c::MPI_REQUEST_NULL;
    }
    Ok(())
}

fn in_place(p: *const c_void) -> bool {
    std::ptr::eq(p, c::MPI_IN_PLACE as *const c_void)
}

/// A stream communicator's stream kernel, or why its calls take the staged fallback.
fn stream_kernel(o: &CommObj) -> Result<&StreamKernel, String> {
    match o.stream.get() {
        None => Err("not a stream communicator".into()),
        Some(sc) => sc.kernel.as_ref().map_err(|why| why.clone()),
    }
}

/// The stream kernel's set-up on the communicator (collective: done by its first call that
/// takes a stream kernel, the same call on every rank), or why it cannot run there.
fn kernel_ready(f: &str, k: &StreamKernel, q: &Queue) -> MpiResult<Result<Ready, String>> {
    let mut g = k.state.lock().unwrap_or_else(|e| e.into_inner());
    if g.is_none() {
        let dup = comm(k.setup_comm.load(Ordering::Acquire) as MPI_Comm)?;
        let r = crate::dispatch::stream_kernel_setup(&dup, q.stream.primary_ordinal())?;
        match &r {
            Ok(x) => tracing::debug!(
                ranks = x.nranks,
                slot = x.layout.slot,
                stage = x.layout.stage,
                ll_cap = x.layout.ll_cap,
                blocks = x.tune.blocks,
                "{f}: stream kernel set up on the communicator"
            ),
            Err(why) => tracing::info!(
                "{f}: the stream kernel cannot run on this communicator ({why}); its calls take the staged fallback"
            ),
        }
        *g = Some(r);
    }
    Ok(g.clone().expect("set above"))
}

/// Log why a call takes the staged fallback (`GPUMPI_DEBUG=2`); `Ok(false)`.
fn not_kernel(f: &str, why: &str) -> MpiResult<bool> {
    tracing::debug!("{f}: not the stream kernel: {why}");
    Ok(false)
}

/// This rank's buffers of a stream-kernel call: addresses of the data (after the datatypes'
/// true lower bounds) and their bytes.
#[derive(Clone, Copy, Debug)]
struct KernelIo {
    /// What the kernel reads (`in_len` 0: nothing, as a bcast's non-root).
    src: usize,
    in_len: usize,
    /// What it writes (`out_len` 0: nothing, as a bcast's root).
    dst: usize,
    out_len: usize,
    /// The input lies in the output's buffer, at `src - dst` (in place): one region.
    in_place: bool,
}

/// Enqueue a stream kernel with the buffers of `io`: directly where they are device memory of
/// the stream's GPU, else between copies through pinned staging (mapped into the GPU), filled
/// and emptied in stream order. `params` gives the kernel's parameter and plan for the device
/// addresses of (input, output). The same kernel runs on every rank whatever its buffers.
unsafe fn kernel_launch(
    f: &str,
    q: &Queue,
    ready: &Ready,
    io: KernelIo,
    params: impl Fn(u64, u64) -> (StreamAr, Plan),
) -> MpiResult<bool> {
    let err = |e: String| MpiError::new(c::MPI_ERR_OTHER, format!("{f}: {e}"));
    let direct = |p: usize| {
        let i = crate::gpu::classify_ordered(p as *const u8);
        i.kind == crate::gpu::cache::MemKind::Device && i.device == ready.ordinal
    };
    let rdirect = (io.out_len == 0 && !io.in_place) || direct(io.dst);
    let sdirect = if io.in_place {
        rdirect
    } else {
        io.in_len == 0 || direct(io.src)
    };
    let captured_note = |b: bool| if b { " (captured)" } else { "" };
    if sdirect && rdirect {
        let (a, p) = params(io.src as u64, io.dst as u64);
        // SAFETY: device memory of the stream's GPU that the application keeps alive until
        // the stream passed the call (MPIX enqueue semantics); every rank enqueues this call.
        unsafe { q.stream.launch_stream_kernel(ready.ordinal, &a, p.blocks) }.map_err(err)?;
        tracing::debug!(
            bytes = io.in_len.max(io.out_len),
            blocks = p.blocks,
            rounds = p.rounds,
            "{f}: stream kernel ({}){}",
            crate::gpu::enqueue_kernel::algo_name(p.algo),
            captured_note(q.stream.capturing().unwrap_or(false))
        );
        return Ok(true);
    }
    // In place: one region holding the input at `in_off` and the output at 0. Else the input
    // (where staged) at 0 and the output (where staged) after it.
    let (in_off, out_off, size) = if io.in_place {
        let in_off = io.src - io.dst;
        (in_off, 0, io.out_len.max(in_off + io.in_len))
    } else {
        let in_len = if sdirect {
            0
        } else {
            io.in_len.next_multiple_of(64)
        };
        (0, in_len, in_len + if rdirect { 0 } else { io.out_len })
    };
    let mut b = q.begin(size.max(1)).map_err(err)?;
    let (host, dev) = (b.staging() as usize, b.staging_dev());
    let src = if sdirect {
        io.src as u64
    } else {
        if io.in_len > 0 {
            stage_in(&mut b, io.src, host, in_off, io.in_len).map_err(err)?;
        }
        dev + in_off as u64
    };
    let dst = if rdirect {
        io.dst as u64
    } else {
        dev + out_off as u64
    };
    let (a, p) = params(src, dst);
    // SAFETY: the staging lives as long as the operation (or the graph capturing it); the
    // user's device buffers as above.
    unsafe { b.stream().launch_stream_kernel(ready.ordinal, &a, p.blocks) }.map_err(err)?;
    if !rdirect && io.out_len > 0 {
        stage_out(&mut b, io.dst, host + out_off, io.out_len).map_err(err)?;
    }
    tracing::debug!(
        bytes = io.in_len.max(io.out_len),
        blocks = p.blocks,
        rounds = p.rounds,
        staged_send = !sdirect,
        staged_recv = !rdirect,
        "{f}: stream kernel ({}) through pinned staging{}",
        crate::gpu::enqueue_kernel::algo_name(p.algo),
        captured_note(b.captured())
    );
    b.finish().map_err(err)?;
    Ok(true)
}

/// `MPIX_Allreduce_enqueue` as the stream kernel (`gpu::enqueue_kernel`): one kernel on the
/// stream where this rank's buffers are device memory of the stream's GPU, else the kernel
/// between copies through pinned staging. `Ok(false)`: the call takes the staged fallback (the
/// same answer on every rank; the reason is logged at `GPUMPI_DEBUG=2`).
unsafe fn allreduce_kernel(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    op: MPI_Op,
    o: &CommObj,
    q: &Queue,
) -> MpiResult<bool> {
    const F: &str = "MPIX_Allreduce_enqueue";
    let k = match stream_kernel(o) {
        Ok(k) => k,
        Err(why) => return not_kernel(F, &why),
    };
    let n = check_count(count as i64)?;
    let d = committed(datatype)?;
    let red = builtin_op(op)
        .zip(d.desc.elem())
        .and_then(|(b, e)| crate::gpu::kernels::kernel_for(b, e));
    let bytes = d.desc.packed_size(n);
    if let Err(why) = crate::gpu::enqueue_kernel::call_eligible(bytes, red, d.desc.is_contiguous(n))
    {
        return not_kernel(F, &why);
    }
    let red = red.expect("checked by call_eligible");
    let ip = in_place(sendbuf);
    if recvbuf.is_null() {
        mpi_bail!(MPI_ERR_BUFFER, "recvbuf is NULL with count {count}");
    }
    if !ip && sendbuf.is_null() {
        mpi_bail!(MPI_ERR_BUFFER, "sendbuf is NULL with count {count}");
    }
    let ready = match kernel_ready(F, k, q)? {
        Ok(r) => r,
        Err(why) => return not_kernel(F, &why),
    };
    let lb = d.desc.true_lb();
    let recv = (recvbuf as usize).wrapping_add_signed(lb);
    let send = if ip {
        recv
    } else {
        (sendbuf as usize).wrapping_add_signed(lb)
    };
    let io = KernelIo {
        src: send,
        in_len: bytes,
        dst: recv,
        out_len: bytes,
        in_place: ip,
    };
    kernel_launch(F, q, &ready, io, |s, r| ready.params(s, r, bytes, red))
}

/// The bcast, allgather, alltoall and reduce_scatter_block kernels (kernels/stream_coll.cuh):
/// the same rules as [`allreduce_kernel`]. `block` is one rank's block of the call (datatype,
/// count), `contiguous` whether every buffer's datatype is contiguous for its count, `red` the
/// op and type of reduce_scatter_block, `io` this rank's buffers, and `null` the name of a
/// buffer the call needs that is NULL (checked once the call is eligible: a NULL buffer may be
/// `MPI_BOTTOM` with absolute displacements, which the fallback serves).
#[allow(clippy::too_many_arguments)]
unsafe fn coll_kernel(
    f: &str,
    algo: u32,
    o: &CommObj,
    q: &Queue,
    block: usize,
    contiguous: bool,
    red: Option<Option<(crate::gpu::kernels::KOp, crate::gpu::kernels::KType)>>,
    root: usize,
    io: KernelIo,
    null: Option<&str>,
) -> MpiResult<bool> {
    let k = match stream_kernel(o) {
        Ok(k) => k,
        Err(why) => return not_kernel(f, &why),
    };
    if let Err(why) = crate::gpu::enqueue_kernel::coll_eligible(algo, block, contiguous, red) {
        return not_kernel(f, &why);
    }
    if let Some(b) = null {
        mpi_bail!(MPI_ERR_BUFFER, "{f}: {b} is NULL with a nonzero count");
    }
    let ready = match kernel_ready(f, k, q)? {
        Ok(r) => r,
        Err(why) => return not_kernel(f, &why),
    };
    let red = red.flatten();
    kernel_launch(f, q, &ready, io, |s, r| {
        ready.coll_params(algo, s, r, block, root, red)
    })
}

/// Copy `len` bytes of the user's buffer at `user` into the staging at `host + off`, in stream
/// order: by a copy on the stream for device or managed memory, by the worker for host memory.
fn stage_in(
    b: &mut Builder<'_>,
    user: usize,
    host: usize,
    off: usize,
    len: usize,
) -> Result<(), String> {
    if needs_staging(user as *const u8) {
        return b.to_staging(off, user, len);
    }
    let dst = host + off;
    b.blocking(move || {
        // SAFETY: the user's host buffer of `len` bytes and this operation's staging.
        unsafe { std::ptr::copy_nonoverlapping(user as *const u8, dst as *mut u8, len) }
    })
}

/// Copy `len` bytes of staging at `src` to the user's buffer at `user`, in stream order.
fn stage_out(b: &mut Builder<'_>, user: usize, src: usize, len: usize) -> Result<(), String> {
    if needs_staging(user as *const u8) {
        // SAFETY: `src..src+len` lies in this operation's staging.
        return unsafe { b.from_staging(user, src as *const u8, len) };
    }
    b.blocking(move || {
        // SAFETY: this operation's staging and the user's host buffer of `len` bytes.
        unsafe { std::ptr::copy_nonoverlapping(src as *const u8, user as *mut u8, len) }
    })
}

pub unsafe fn MPIX_Allreduce_enqueue(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    op: MPI_Op,
    cm: MPI_Comm,
) -> MpiResult<()> {
    let (o, q) = queue_of(cm)?;
    if allreduce_kernel(sendbuf, recvbuf, count, datatype, op, &o, &q)? {
        return Ok(());
    }
    let ip = in_place(sendbuf);
    let mut parts = vec![part(recvbuf, count as i64, datatype, "recvbuf", ip, true)?];
    if !ip {
        parts.push(part(
            sendbuf,
            count as i64,
            datatype,
            "sendbuf",
            true,
            false,
        )?);
    }
    let (dt, opv, cmv) = (datatype as usize, op as usize, cm as usize);
    enqueue_blocking("MPIX_Allreduce_enqueue", cm, &q, parts, move |a| {
        let s = if ip { c::MPI_IN_PLACE as usize } else { a[1] };
        // SAFETY: host memory alive until the stream passed this step.
        unsafe {
            MPI_Allreduce::<LargeCounts>(
                s as *const c_void,
                a[0] as *mut c_void,
                count as i64,
                dt as MPI_Datatype,
                opv as MPI_Op,
                cmv as MPI_Comm,
            )
        }
    })
}

pub unsafe fn MPIX_Bcast_enqueue(
    buffer: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    root: c_int,
    cm: MPI_Comm,
) -> MpiResult<()> {
    let (o, q) = queue_of(cm)?;
    if root < 0 || root as usize >= o.size() {
        mpi_bail!(
            MPI_ERR_ROOT,
            "root {root} is not in a communicator of size {}",
            o.size()
        );
    }
    let me_root = o.rank == root as usize;
    {
        let d = committed(datatype)?;
        let n = check_count(count as i64)?;
        let bytes = d.desc.packed_size(n);
        let buf = (buffer as usize).wrapping_add_signed(d.desc.true_lb());
        let io = KernelIo {
            src: buf,
            in_len: if me_root { bytes } else { 0 },
            dst: buf,
            out_len: if me_root { 0 } else { bytes },
            in_place: true,
        };
        let contiguous = d.desc.is_contiguous(n);
        if coll_kernel(
            "MPIX_Bcast_enqueue",
            crate::gpu::enqueue_kernel::BCAST,
            &o,
            &q,
            bytes,
            contiguous,
            None,
            root as usize,
            io,
            buffer.is_null().then_some("buffer"),
        )? {
            return Ok(());
        }
    }
    let parts = vec![part(
        buffer,
        count as i64,
        datatype,
        "buffer",
        me_root,
        !me_root,
    )?];
    let (dt, cmv) = (datatype as usize, cm as usize);
    enqueue_blocking("MPIX_Bcast_enqueue", cm, &q, parts, move |a| {
        // SAFETY: as above.
        unsafe {
            MPI_Bcast::<LargeCounts>(
                a[0] as *mut c_void,
                count as i64,
                dt as MPI_Datatype,
                root,
                cmv as MPI_Comm,
            )
        }
    })
}

/// The parts of an allgather/alltoall-shaped call: recv holds `size * recvcount`, send
/// `send_blocks * sendcount` (absent in place, when recv is input too).
fn gather_parts(
    o: &CommObj,
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    send_blocks: i64,
) -> MpiResult<(Vec<Part>, bool)> {
    let n = o.size() as i64;
    let ip = in_place(sendbuf);
    let mut parts = vec![part(
        recvbuf,
        recvcount as i64 * n,
        recvtype,
        "recvbuf",
        ip,
        true,
    )?];
    if !ip {
        parts.push(part(
            sendbuf,
            sendcount as i64 * send_blocks,
            sendtype,
            "sendbuf",
            true,
            false,
        )?);
    }
    Ok((parts, ip))
}

/// Which of recvbuf and sendbuf (not in place) is NULL, if any.
fn null_buffer(recvbuf: *const c_void, sendbuf: *const c_void, ip: bool) -> Option<&'static str> {
    if recvbuf.is_null() {
        Some("recvbuf")
    } else if !ip && sendbuf.is_null() {
        Some("sendbuf")
    } else {
        None
    }
}

/// The allgather or alltoall kernel (`algo`) for these arguments, where eligible (see
/// [`coll_kernel`]): one rank's block is `recvcount` of `recvtype`, which the send side must
/// match in bytes.
#[allow(clippy::too_many_arguments)]
unsafe fn gather_kernel(
    algo: u32,
    o: &CommObj,
    q: &Queue,
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
) -> MpiResult<bool> {
    let all = algo == crate::gpu::enqueue_kernel::ALLGATHER;
    let f = if all {
        "MPIX_Allgather_enqueue"
    } else {
        "MPIX_Alltoall_enqueue"
    };
    let n = o.size();
    let ip = in_place(sendbuf);
    let rd = committed(recvtype)?;
    let rc = check_count(recvcount as i64)?;
    let block = rd.desc.packed_size(rc);
    let recv = (recvbuf as usize).wrapping_add_signed(rd.desc.true_lb());
    // The send side (blocks of `sendcount`: one for allgather, one per rank for alltoall).
    let (src, contiguous) = if ip {
        let at = if all { o.rank * block } else { 0 };
        (recv + at, rd.desc.is_contiguous(rc * n))
    } else {
        let sd = committed(sendtype)?;
        let sc = check_count(sendcount as i64)?;
        let blocks = if all { 1 } else { n };
        (
            (sendbuf as usize).wrapping_add_signed(sd.desc.true_lb()),
            rd.desc.is_contiguous(rc * n)
                && sd.desc.is_contiguous(sc * blocks)
                && sd.desc.packed_size(sc) == block,
        )
    };
    let null = null_buffer(recvbuf, sendbuf, ip);
    let io = KernelIo {
        src,
        in_len: if all { block } else { block * n },
        dst: recv,
        out_len: block * n,
        in_place: ip,
    };
    coll_kernel(f, algo, o, q, block, contiguous, None, 0, io, null)
}

/// The blocking call the staged fallback of [`gather_enqueue`] runs on the worker.
type GatherCall = unsafe fn(
    *const c_void,
    i64,
    MPI_Datatype,
    *mut c_void,
    i64,
    MPI_Datatype,
    MPI_Comm,
) -> MpiResult<()>;

/// `MPIX_Allgather_enqueue` and `MPIX_Alltoall_enqueue` (`algo`, `f`): the stream kernel where
/// it applies, else the staged fallback running `call` (`MPI_Allgather` / `MPI_Alltoall`),
/// whose send buffer holds `blocks` of the rank's blocks (1 / the communicator's size).
#[allow(clippy::too_many_arguments)]
unsafe fn gather_enqueue(
    f: &'static str,
    algo: u32,
    all_to_all: bool,
    call: GatherCall,
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    cm: MPI_Comm,
) -> MpiResult<()> {
    let (o, q) = queue_of(cm)?;
    if gather_kernel(
        algo, &o, &q, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype,
    )? {
        return Ok(());
    }
    let blocks = if all_to_all { o.size() as i64 } else { 1 };
    let (parts, ip) = gather_parts(
        &o, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, blocks,
    )?;
    let (st_, rt, cmv) = (sendtype as usize, recvtype as usize, cm as usize);
    enqueue_blocking(f, cm, &q, parts, move |a| {
        let s = if ip { c::MPI_IN_PLACE as usize } else { a[1] };
        // SAFETY: as above.
        unsafe {
            call(
                s as *const c_void,
                sendcount as i64,
                st_ as MPI_Datatype,
                a[0] as *mut c_void,
                recvcount as i64,
                rt as MPI_Datatype,
                cmv as MPI_Comm,
            )
        }
    })
}

pub unsafe fn MPIX_Allgather_enqueue(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    cm: MPI_Comm,
) -> MpiResult<()> {
    gather_enqueue(
        "MPIX_Allgather_enqueue",
        crate::gpu::enqueue_kernel::ALLGATHER,
        false,
        MPI_Allgather::<LargeCounts>,
        sendbuf,
        sendcount,
        sendtype,
        recvbuf,
        recvcount,
        recvtype,
        cm,
    )
}

pub unsafe fn MPIX_Alltoall_enqueue(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    cm: MPI_Comm,
) -> MpiResult<()> {
    gather_enqueue(
        "MPIX_Alltoall_enqueue",
        crate::gpu::enqueue_kernel::ALLTOALL,
        true,
        MPI_Alltoall::<LargeCounts>,
        sendbuf,
        sendcount,
        sendtype,
        recvbuf,
        recvcount,
        recvtype,
        cm,
    )
}

pub unsafe fn MPIX_Reduce_scatter_block_enqueue(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcount: c_int,
    datatype: MPI_Datatype,
    op: MPI_Op,
    cm: MPI_Comm,
) -> MpiResult<()> {
    let (o, q) = queue_of(cm)?;
    let n = o.size() as i64;
    let ip = in_place(sendbuf);
    {
        let d = committed(datatype)?;
        let rc = check_count(recvcount as i64)?;
        let block = d.desc.packed_size(rc);
        let red = builtin_op(op)
            .zip(d.desc.elem())
            .and_then(|(b, e)| crate::gpu::kernels::kernel_for(b, e));
        let lb = d.desc.true_lb();
        let recv = (recvbuf as usize).wrapping_add_signed(lb);
        let io = KernelIo {
            src: if ip {
                recv
            } else {
                (sendbuf as usize).wrapping_add_signed(lb)
            },
            in_len: block * n as usize,
            dst: recv,
            out_len: block,
            in_place: ip,
        };
        if coll_kernel(
            "MPIX_Reduce_scatter_block_enqueue",
            crate::gpu::enqueue_kernel::REDUCE_SCATTER,
            &o,
            &q,
            block,
            d.desc.is_contiguous(rc * n as usize),
            Some(red),
            0,
            io,
            null_buffer(recvbuf, sendbuf, ip),
        )? {
            return Ok(());
        }
    }
    // In place, recvbuf holds the whole input (size * recvcount) and the result at its start.
    let recv_len = if ip {
        recvcount as i64 * n
    } else {
        recvcount as i64
    };
    let mut parts = vec![part(recvbuf, recv_len, datatype, "recvbuf", ip, true)?];
    if !ip {
        parts.push(part(
            sendbuf,
            recvcount as i64 * n,
            datatype,
            "sendbuf",
            true,
            false,
        )?);
    }
    let (dt, opv, cmv) = (datatype as usize, op as usize, cm as usize);
    enqueue_blocking(
        "MPIX_Reduce_scatter_block_enqueue",
        cm,
        &q,
        parts,
        move |a| {
            let s = if ip { c::MPI_IN_PLACE as usize } else { a[1] };
            // SAFETY: as above.
            unsafe {
                MPI_Reduce_scatter_block::<LargeCounts>(
                    s as *const c_void,
                    a[0] as *mut c_void,
                    recvcount as i64,
                    dt as MPI_Datatype,
                    opv as MPI_Op,
                    cmv as MPI_Comm,
                )
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::{hex_decode, hex_encode};

    #[test]
    fn hex_round_trip_and_mpich_zero_runs() {
        let v = 0x0000_7f12_3456_9abc_usize.to_ne_bytes();
        assert_eq!(hex_decode(&hex_encode(&v)).unwrap(), v.to_vec());
        assert_eq!(hex_encode(&[0x12, 0xab]), "12AB");
        assert_eq!(hex_decode("12ab").unwrap(), vec![0x12, 0xab]);
        // Newer MPICH writes a run of zero bytes as [N].
        assert_eq!(
            hex_decode("BC9A[3]7F[2]").unwrap(),
            vec![0xbc, 0x9a, 0, 0, 0, 0x7f, 0, 0]
        );
        assert!(hex_decode("1").is_none());
        assert!(hex_decode("zz").is_none());
        assert!(hex_decode("[x]").is_none());
    }
}
