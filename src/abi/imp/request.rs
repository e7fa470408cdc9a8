//! Completion: Wait/Test families, persistent requests, cancel, generalized
//! requests (MPI 5.0 §3.7-3.9, §13.2).

use super::util::*;
use crate::abi::consts as c;
use crate::abi::ffi::*;
use crate::mpi::error::{MpiError, MpiResult};
use crate::mpi_bail;
use crate::runtime::objects::nonnull;
use crate::runtime::request::{Grequest, ReqKind, Request, Status};
use crate::runtime::{self, wait_until, Runtime};
use std::os::raw::{c_int, c_void};

fn is_null(h: MPI_Request) -> bool {
    h == c::MPI_REQUEST_NULL
}

/// Test one request handle, right after a progress pass (every caller makes one); on
/// completion frees it (non-persistent) and sets the handle to NULL.
pub fn test_one(rt: &mut Runtime, h: &mut MPI_Request) -> MpiResult<Option<Status>> {
    if is_null(*h) {
        return Ok(Some(Status::EMPTY));
    }
    let key = *h as usize;
    let Some(r) = rt.reqs.get_mut(key) else {
        mpi_bail!(
            MPI_ERR_REQUEST,
            "invalid request handle {key:#x} (freed, completed, or not a request)"
        )
    };
    let res = r.test_after_progress(&mut rt.engine);
    let persistent = r.is_persistent();
    if matches!(&res, Err(_) | Ok(Some(Status { error: 1.., .. }))) {
        crate::abi::errh::failed_request_on(r.comm.clone());
    }
    match res {
        Ok(None) => Ok(None),
        Ok(Some(st)) => {
            if !persistent {
                rt.reqs.remove(key);
                *h = c::MPI_REQUEST_NULL;
            }
            Ok(Some(st))
        }
        Err(e) => {
            if !persistent {
                rt.reqs.remove(key);
                *h = c::MPI_REQUEST_NULL;
            }
            Err(e)
        }
    }
}

fn is_active(rt: &Runtime, h: MPI_Request) -> bool {
    !is_null(h)
        && rt
            .reqs
            .get(h as usize)
            .map(|r| !matches!(r.kind, ReqKind::Inactive))
            .unwrap_or(true)
}

fn err_of(st: &Status) -> MpiResult<()> {
    if let Some(e) = st.finalized_error() {
        return Err(e);
    }
    if st.error != 0 {
        return Err(MpiError::new(
            st.error,
            format!(
                "request completed with error (source {}, tag {})",
                st.source, st.tag
            ),
        ));
    }
    Ok(())
}

pub unsafe fn MPI_Wait(request: *mut MPI_Request, status: *mut MPI_Status) -> MpiResult<()> {
    nonnull(request, "request")?;
    let mut st = None;
    // The engine operation of a point-to-point request, resolved once per hold of the runtime
    // lock (no other thread can complete or free the request within one): the passes between
    // look at it alone, and the request is completed through the table when it is done.
    let mut engine_id = None;
    // A request that is complete already (an eager send, a receive that matched at its post)
    // is taken without a progress pass; otherwise passes in bursts, as a blocking receive.
    runtime::wait_bursts(true, |rt, fresh| {
        if fresh {
            engine_id = match rt.reqs.get(*request as usize).map(|r| &r.kind) {
                Some(ReqKind::Engine { id, .. }) if !is_null(*request) => Some(*id),
                _ => None,
            };
        }
        if engine_id.is_some_and(|id| !rt.engine.is_done(id)) {
            return Ok(false);
        }
        st = test_one(rt, &mut *request)?;
        Ok(st.is_some())
    })?;
    let st = st.unwrap();
    st.store(status, false);
    err_of(&st)
}

pub unsafe fn MPI_Test(
    request: *mut MPI_Request,
    flag: *mut c_int,
    status: *mut MPI_Status,
) -> MpiResult<()> {
    nonnull(request, "request")?;
    nonnull(flag, "flag")?;
    // A request complete already is taken without a progress pass (MPI_Test then returns
    // true, which needs none); otherwise one pass, then a second look.
    let st = runtime::with(|rt| {
        if let Some(st) = test_one(rt, &mut *request)? {
            return Ok(Some(st));
        }
        rt.progress();
        test_one(rt, &mut *request)
    })?;
    *flag = st.is_some() as c_int;
    if let Some(st) = st {
        st.store(status, false);
        err_of(&st)?;
    }
    Ok(())
}

unsafe fn reqs_arg<'a>(count: c_int, reqs: *mut MPI_Request) -> MpiResult<&'a mut [MPI_Request]> {
    let n = nonneg(count, "count")?;
    if n == 0 {
        return Ok(&mut []);
    }
    nonnull(reqs, "array_of_requests")?;
    Ok(std::slice::from_raw_parts_mut(reqs, n))
}

/// Shared body of Waitall/Testall: complete as many as possible; `all_or_none` for Testall.
unsafe fn complete_all(
    reqs: &mut [MPI_Request],
    statuses: *mut MPI_Status,
    block: bool,
) -> MpiResult<bool> {
    let n = reqs.len();
    let mut done: Vec<Option<Status>> = vec![None; n];
    let mut any_err = false;
    let check = |rt: &mut Runtime,
                 reqs: &mut [MPI_Request],
                 done: &mut Vec<Option<Status>>,
                 any_err: &mut bool|
     -> bool {
        for i in 0..n {
            if done[i].is_some() {
                continue;
            }
            if !block {
                // Testall must not complete some requests and report not done: only peek here.
                if is_null(reqs[i]) {
                    done[i] = Some(Status::EMPTY);
                }
                continue;
            }
            match test_one(rt, &mut reqs[i]) {
                Ok(Some(st)) => {
                    *any_err |= st.error != 0;
                    done[i] = Some(st);
                }
                Ok(None) => {}
                Err(e) => {
                    *any_err = true;
                    done[i] = Some(Status {
                        error: e.class,
                        ..Status::EMPTY
                    });
                }
            }
        }
        done.iter().all(|d| d.is_some())
    };
    if block {
        wait_until(|rt| Ok(check(rt, reqs, &mut done, &mut any_err)))?;
    } else {
        let ready = runtime::with(|rt| {
            rt.progress();
            // All complete? Test without completing first.
            let all = reqs.iter().all(|&h| {
                is_null(h)
                    || rt
                        .reqs
                        .get_mut(h as usize)
                        .map(|r| peek_done(r, &mut rt.engine))
                        .unwrap_or(true)
            });
            if !all {
                return Ok(false);
            }
            for i in 0..n {
                match test_one(rt, &mut reqs[i]) {
                    Ok(st) => {
                        let st = st.unwrap_or(Status::EMPTY);
                        any_err |= st.error != 0;
                        done[i] = Some(st);
                    }
                    Err(e) => {
                        any_err = true;
                        done[i] = Some(Status {
                            error: e.class,
                            ..Status::EMPTY
                        });
                    }
                }
            }
            Ok(true)
        })?;
        if !ready {
            return Ok(false);
        }
    }
    if !statuses.is_null() {
        for (i, d) in done.iter().enumerate() {
            d.unwrap().store(statuses.add(i), true);
        }
    }
    if any_err {
        mpi_bail!(
            MPI_ERR_IN_STATUS,
            "one or more requests failed; see the MPI_ERROR field of their statuses"
        );
    }
    Ok(true)
}

/// Whether a request would complete if tested now (without completing it).
fn peek_done(r: &mut Request, engine: &mut crate::engine::Engine) -> bool {
    if matches!(r.kind, ReqKind::Coll { .. }) {
        r.advance(engine);
        return matches!(
            &r.kind,
            ReqKind::Coll {
                result: Some(_),
                ..
            }
        );
    }
    match &mut r.kind {
        ReqKind::Engine { id, .. } => engine.is_done(*id),
        ReqKind::Grequest(g) => g.complete,
        _ => true,
    }
}

pub unsafe fn MPI_Waitall(
    count: c_int,
    reqs: *mut MPI_Request,
    statuses: *mut MPI_Status,
) -> MpiResult<()> {
    let reqs = reqs_arg(count, reqs)?;
    complete_all(reqs, statuses, true).map(|_| ())
}

pub unsafe fn MPI_Testall(
    count: c_int,
    reqs: *mut MPI_Request,
    flag: *mut c_int,
    statuses: *mut MPI_Status,
) -> MpiResult<()> {
    nonnull(flag, "flag")?;
    let reqs = reqs_arg(count, reqs)?;
    *flag = complete_all(reqs, statuses, false)? as c_int;
    Ok(())
}

/// One pass over the array: the index and status of the first completed active request.
fn any_pass(
    rt: &mut Runtime,
    reqs: &mut [MPI_Request],
) -> MpiResult<(bool, Option<(usize, Status)>)> {
    let mut any_active = false;
    for (i, r) in reqs.iter_mut().enumerate() {
        if !is_active(rt, *r) {
            continue;
        }
        any_active = true;
        if let Some(st) = test_one(rt, r)? {
            return Ok((true, Some((i, st))));
        }
    }
    Ok((any_active, None))
}

pub unsafe fn MPI_Waitany(
    count: c_int,
    reqs: *mut MPI_Request,
    index: *mut c_int,
    status: *mut MPI_Status,
) -> MpiResult<()> {
    let reqs = reqs_arg(count, reqs)?;
    nonnull(index, "index")?;
    let mut res = None;
    wait_until(|rt| {
        let (active, r) = any_pass(rt, reqs)?;
        res = Some(r);
        Ok(!active || r.is_some())
    })?;
    match res.flatten() {
        Some((i, st)) => {
            *index = i as c_int;
            st.store(status, false);
            err_of(&st)
        }
        None => {
            *index = c::MPI_UNDEFINED;
            Status::EMPTY.store(status, false);
            Ok(())
        }
    }
}

pub unsafe fn MPI_Testany(
    count: c_int,
    reqs: *mut MPI_Request,
    index: *mut c_int,
    flag: *mut c_int,
    status: *mut MPI_Status,
) -> MpiResult<()> {
    let reqs = reqs_arg(count, reqs)?;
    nonnull(index, "index")?;
    nonnull(flag, "flag")?;
    let (active, r) = runtime::with(|rt| {
        rt.progress();
        any_pass(rt, reqs)
    })?;
    match r {
        Some((i, st)) => {
            *flag = 1;
            *index = i as c_int;
            st.store(status, false);
            err_of(&st)
        }
        None => {
            *flag = !active as c_int;
            *index = c::MPI_UNDEFINED;
            if !active {
                Status::EMPTY.store(status, false);
            }
            Ok(())
        }
    }
}

unsafe fn some_pass(
    rt: &mut Runtime,
    reqs: &mut [MPI_Request],
    indices: *mut c_int,
    statuses: *mut MPI_Status,
) -> MpiResult<(bool, usize, bool)> {
    let mut any_active = false;
    let mut n = 0;
    let mut any_err = false;
    for (i, r) in reqs.iter_mut().enumerate() {
        if !is_active(rt, *r) {
            continue;
        }
        any_active = true;
        let st = match test_one(rt, r) {
            Ok(Some(st)) => st,
            Ok(None) => continue,
            Err(e) => Status {
                error: e.class,
                ..Status::EMPTY
            },
        };
        any_err |= st.error != 0;
        *indices.add(n) = i as c_int;
        if !statuses.is_null() {
            st.store(statuses.add(n), true);
        }
        n += 1;
    }
    Ok((any_active, n, any_err))
}

unsafe fn some_common(
    count: c_int,
    reqs: *mut MPI_Request,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut MPI_Status,
    block: bool,
) -> MpiResult<()> {
    let reqs = reqs_arg(count, reqs)?;
    nonnull(outcount, "outcount")?;
    if !reqs.is_empty() {
        nonnull(indices, "array_of_indices")?;
    }
    let mut res = (false, 0, false);
    if block {
        wait_until(|rt| {
            res = some_pass(rt, reqs, indices, statuses)?;
            Ok(!res.0 || res.1 > 0)
        })?;
    } else {
        res = runtime::with(|rt| {
            rt.progress();
            some_pass(rt, reqs, indices, statuses)
        })?;
    }
    *outcount = if res.0 {
        res.1 as c_int
    } else {
        c::MPI_UNDEFINED
    };
    if res.2 {
        mpi_bail!(
            MPI_ERR_IN_STATUS,
            "one or more requests failed; see the MPI_ERROR field of their statuses"
        );
    }
    Ok(())
}

pub unsafe fn MPI_Waitsome(
    incount: c_int,
    reqs: *mut MPI_Request,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut MPI_Status,
) -> MpiResult<()> {
    some_common(incount, reqs, outcount, indices, statuses, true)
}

pub unsafe fn MPI_Testsome(
    incount: c_int,
    reqs: *mut MPI_Request,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut MPI_Status,
) -> MpiResult<()> {
    some_common(incount, reqs, outcount, indices, statuses, false)
}

/// The status of a request if it is complete, without completing or freeing it
/// (MPI_Request_get_status*): null and inactive requests count as complete, empty.
fn peek_status(request: MPI_Request) -> MpiResult<Option<Status>> {
    if is_null(request) {
        return Ok(Some(Status::EMPTY));
    }
    runtime::with(|rt| {
        rt.progress();
        let Some(r) = rt.reqs.get_mut(request as usize) else {
            mpi_bail!(
                MPI_ERR_REQUEST,
                "invalid request handle {:#x}",
                request as usize
            )
        };
        if !peek_done(r, &mut rt.engine) {
            return Ok(None);
        }
        // Peeking must not free the request: report an empty-but-complete status for
        // collectives, and the engine status for point-to-point operations.
        Ok(Some(match &r.kind {
            ReqKind::Engine { id, .. } => rt
                .engine
                .peek(*id)
                .map(Status::from)
                .unwrap_or(Status::EMPTY),
            ReqKind::Done(s) => *s,
            _ => Status::EMPTY,
        }))
    })
}

pub unsafe fn MPI_Request_get_status(
    request: MPI_Request,
    flag: *mut c_int,
    status: *mut MPI_Status,
) -> MpiResult<()> {
    nonnull(flag, "flag")?;
    let st = peek_status(request)?;
    *flag = st.is_some() as c_int;
    if let Some(st) = st {
        st.store(status, false);
    }
    Ok(())
}

/// MPI_Request_get_status_all: flag is true when every request is complete; the statuses
/// are then set (the requests stay allocated, as with MPI_Request_get_status).
pub unsafe fn MPI_Request_get_status_all(
    count: c_int,
    array_of_requests: *mut MPI_Request,
    flag: *mut c_int,
    array_of_statuses: *mut MPI_Status,
) -> MpiResult<()> {
    nonnull(flag, "flag")?;
    let reqs = slice(
        array_of_requests,
        nonneg(count, "count")?,
        "array_of_requests",
    )?;
    let mut sts = Vec::with_capacity(reqs.len());
    for &h in reqs {
        match peek_status(h)? {
            Some(st) => sts.push(st),
            None => {
                *flag = 0;
                return Ok(());
            }
        }
    }
    *flag = 1;
    if !array_of_statuses.is_null() {
        for (i, st) in sts.iter().enumerate() {
            st.store(array_of_statuses.add(i), true);
        }
    }
    Ok(())
}

/// MPI_Request_get_status_any: the first complete active request (indx, status), or
/// flag true with indx MPI_UNDEFINED when no request is active.
pub unsafe fn MPI_Request_get_status_any(
    count: c_int,
    array_of_requests: *mut MPI_Request,
    indx: *mut c_int,
    flag: *mut c_int,
    status: *mut MPI_Status,
) -> MpiResult<()> {
    nonnull(flag, "flag")?;
    nonnull(indx, "indx")?;
    let reqs = slice(
        array_of_requests,
        nonneg(count, "count")?,
        "array_of_requests",
    )?;
    let mut any_active = false;
    for (i, &h) in reqs.iter().enumerate() {
        if !runtime::with(|rt| Ok(is_active(rt, h)))? {
            continue;
        }
        any_active = true;
        if let Some(st) = peek_status(h)? {
            *indx = i as c_int;
            *flag = 1;
            st.store(status, false);
            return Ok(());
        }
    }
    *indx = c::MPI_UNDEFINED;
    *flag = !any_active as c_int;
    if !any_active {
        // The empty status, MPI_ERROR included (MPI_SUCCESS).
        Status::EMPTY.store(status, true);
    }
    Ok(())
}

/// MPI_Request_get_status_some: the complete active requests (outcount MPI_UNDEFINED when
/// none is active).
pub unsafe fn MPI_Request_get_status_some(
    incount: c_int,
    array_of_requests: *mut MPI_Request,
    outcount: *mut c_int,
    array_of_indices: *mut c_int,
    array_of_statuses: *mut MPI_Status,
) -> MpiResult<()> {
    nonnull(outcount, "outcount")?;
    let reqs = slice(
        array_of_requests,
        nonneg(incount, "incount")?,
        "array_of_requests",
    )?;
    let mut any_active = false;
    let mut n = 0;
    for (i, &h) in reqs.iter().enumerate() {
        if !runtime::with(|rt| Ok(is_active(rt, h)))? {
            continue;
        }
        any_active = true;
        if let Some(st) = peek_status(h)? {
            nonnull(array_of_indices, "array_of_indices")?;
            *array_of_indices.add(n) = i as c_int;
            if !array_of_statuses.is_null() {
                st.store(array_of_statuses.add(n), true);
            }
            n += 1;
        }
    }
    *outcount = if any_active {
        n as c_int
    } else {
        c::MPI_UNDEFINED
    };
    Ok(())
}

pub unsafe fn MPI_Request_free(request: *mut MPI_Request) -> MpiResult<()> {
    nonnull(request, "request")?;
    let h = *request;
    if is_null(h) {
        mpi_bail!(MPI_ERR_REQUEST, "the request is MPI_REQUEST_NULL");
    }
    runtime::with(|rt| {
        let Some(r) = rt.reqs.get_mut(h as usize) else {
            mpi_bail!(MPI_ERR_REQUEST, "invalid request handle {:#x}", h as usize)
        };
        // An active operation still completes; we let it finish in the background, under a
        // new handle, so that the caller's copies of this one are stale (MPI_ERR_REQUEST).
        r.persistent = None;
        let done = matches!(r.kind, ReqKind::Inactive | ReqKind::Done(_));
        let Some(r) = rt.reqs.remove(h as usize) else {
            unreachable!("looked up above")
        };
        if !done {
            let moved = rt.reqs.insert(r);
            for a in rt.active.iter_mut().filter(|a| **a == h as usize) {
                *a = moved;
            }
            super::bsend::detach_later(moved);
        }
        Ok(())
    })?;
    *request = c::MPI_REQUEST_NULL;
    Ok(())
}

pub unsafe fn MPI_Cancel(request: *mut MPI_Request) -> MpiResult<()> {
    nonnull(request, "request")?;
    let h = *request;
    if is_null(h) {
        mpi_bail!(MPI_ERR_REQUEST, "the request is MPI_REQUEST_NULL");
    }
    let grequest = runtime::with(|rt| {
        let Some(r) = rt.reqs.get_mut(h as usize) else {
            mpi_bail!(MPI_ERR_REQUEST, "invalid request handle {:#x}", h as usize)
        };
        Ok(match &r.kind {
            ReqKind::Engine { id, .. } => {
                rt.engine.cancel(*id);
                None
            }
            ReqKind::Grequest(g) => Some((g.cancel, g.extra, g.complete)),
            _ => None,
        })
    })?;
    if let Some((f, extra, complete)) = grequest {
        if f != 0 {
            // SAFETY: the user registered this MPI_Grequest_cancel_function.
            let f: unsafe extern "C" fn(*mut c_void, c_int) -> c_int = std::mem::transmute(f);
            let rc = f(extra as *mut c_void, complete as c_int);
            if rc != 0 {
                return Err(MpiError::new(
                    rc,
                    "the generalized request's cancel function failed",
                ));
            }
        }
    }
    Ok(())
}

pub fn start(rt: &mut Runtime, h: MPI_Request) -> MpiResult<()> {
    let key = h as usize;
    let Some(r) = rt.reqs.get_mut(key) else {
        mpi_bail!(MPI_ERR_REQUEST, "invalid request handle {key:#x}")
    };
    if r.persistent.is_none() {
        mpi_bail!(MPI_ERR_REQUEST, "the request is not a persistent request");
    }
    if !matches!(r.kind, ReqKind::Inactive) {
        mpi_bail!(MPI_ERR_REQUEST, "the persistent request is already active");
    }
    // Take the starter out while it runs (it needs the engine).
    let mut starter = r.persistent.take().unwrap();
    let kind = starter(&mut rt.engine);
    let r = rt.reqs.get_mut(key).unwrap();
    r.persistent = Some(starter);
    let kind = kind?;
    let coll = matches!(kind, ReqKind::Coll { .. });
    r.kind = kind;
    if coll {
        rt.active.push(key);
    }
    Ok(())
}

pub unsafe fn MPI_Start(request: *mut MPI_Request) -> MpiResult<()> {
    nonnull(request, "request")?;
    let h = *request;
    runtime::with(|rt| start(rt, h))
}

pub unsafe fn MPI_Startall(count: c_int, reqs: *mut MPI_Request) -> MpiResult<()> {
    let reqs = reqs_arg(count, reqs)?;
    runtime::with(|rt| {
        for &h in reqs.iter() {
            start(rt, h)?;
        }
        Ok(())
    })
}

// ---- generalized requests ----

pub unsafe fn MPI_Grequest_start(
    query_fn: Option<unsafe extern "C" fn(*mut c_void, *mut MPI_Status) -> c_int>,
    free_fn: Option<unsafe extern "C" fn(*mut c_void) -> c_int>,
    cancel_fn: Option<unsafe extern "C" fn(*mut c_void, c_int) -> c_int>,
    extra_state: *mut c_void,
    request: *mut MPI_Request,
) -> MpiResult<()> {
    nonnull(request, "request")?;
    let g = Grequest {
        query: query_fn.map(|f| f as usize).unwrap_or(0),
        free: free_fn.map(|f| f as usize).unwrap_or(0),
        cancel: cancel_fn.map(|f| f as usize).unwrap_or(0),
        extra: extra_state as usize,
        complete: false,
    };
    super::p2p::submit(request, |_| Ok(ReqKind::Grequest(g)))
}

pub unsafe fn MPI_Grequest_complete(request: MPI_Request) -> MpiResult<()> {
    runtime::with(|rt| match rt.reqs.get_mut(request as usize) {
        Some(Request {
            kind: ReqKind::Grequest(g),
            ..
        }) => {
            g.complete = true;
            Ok(())
        }
        _ => mpi_bail!(MPI_ERR_REQUEST, "the request is not a generalized request"),
    })
}
