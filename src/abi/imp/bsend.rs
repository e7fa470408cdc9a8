//! Buffered sends: MPI_Buffer_attach/detach accounting (MPI 5.0 §3.6).
//! Buffered data is copied into library memory at the call; the attached
//! buffer's size bounds how much may be outstanding, as the standard requires.
//! Buffers attached to a communicator (MPI 4.1) serve the buffered sends on it; a
//! buffer may be MPI_BUFFER_AUTOMATIC (no bound).

use super::util::*;
use crate::abi::ffi::{MPI_Comm, MPI_Request};
use crate::abi::width::{CInt, Width};
use crate::mpi::error::MpiResult;
use crate::mpi_bail;
use crate::runtime::objects::{comm, nonnull};
use crate::runtime::request::{ReqKind, Request, Status};
use crate::runtime::{self, wait_until};
use std::os::raw::c_void;
use std::sync::Mutex;

/// An attached buffer: its address and size bound how much buffered data may be outstanding.
/// `buf == MPI_BUFFER_AUTOMATIC` means no bound (MPI 4.1 automatic buffering).
#[derive(Clone, Copy)]
struct Pool {
    buf: usize,
    size: usize,
    used: usize,
}

const AUTOMATIC: usize = 2; // MPI_BUFFER_AUTOMATIC

struct Attached {
    /// The process's buffer (MPI_Buffer_attach).
    process: Pool,
    /// Buffers attached to communicators (MPI_Comm_attach_buffer), by context id.
    comms: Vec<(u32, Pool)>,
    /// Requests completing in the background (buffered sends, freed requests).
    detached: Vec<usize>,
}

static BUF: Mutex<Attached> = Mutex::new(Attached {
    process: Pool {
        buf: 0,
        size: 0,
        used: 0,
    },
    comms: Vec::new(),
    detached: Vec::new(),
});

/// The bytes accounted per buffered message. The message data is kept elsewhere, so this is
/// bookkeeping only: the smallest MPI_BSEND_OVERHEAD of the ABIs the library serves (the MPICH
/// ABI's 96; the standard ABI's header says 512), so that a buffer sized with either header's
/// constant holds the messages it was sized for.
const OVERHEAD: usize = 96;

impl Attached {
    /// The pool a buffered send on communicator `ctx` draws from: the communicator's
    /// buffer if one is attached, else the process's.
    fn pool(&mut self, ctx: Option<u32>) -> &mut Pool {
        match ctx.and_then(|c| self.comms.iter().position(|e| e.0 == c)) {
            Some(i) => &mut self.comms[i].1,
            None => &mut self.process,
        }
    }
}

/// Account for a buffered send of `len` bytes on communicator `ctx`; returns the pool
/// to give the bytes back to (see [`release`]).
pub fn reserve(ctx: u32, len: usize) -> MpiResult<Option<u32>> {
    let mut b = BUF.lock().unwrap();
    let key = b.comms.iter().any(|e| e.0 == ctx).then_some(ctx);
    let p = b.pool(key);
    if p.buf == AUTOMATIC {
        return Ok(key);
    }
    if p.used + len + OVERHEAD > p.size {
        mpi_bail!(
            MPI_ERR_BUFFER,
            "buffered send of {len} bytes does not fit: {} of {} attached bytes in use",
            p.used,
            p.size
        );
    }
    p.used += len + OVERHEAD;
    Ok(key)
}

pub fn release(pool: Option<u32>, len: usize) {
    let mut b = BUF.lock().unwrap();
    let p = b.pool(pool);
    p.used = p.used.saturating_sub(len + OVERHEAD);
}

/// Forget a freed communicator's buffer (its context id may be reused).
pub fn forget_comm(ctx: u32) {
    BUF.lock().unwrap().comms.retain(|e| e.0 != ctx);
}

/// Let a request complete in the background; it is reaped by later progress.
pub fn detach_later(h: usize) {
    BUF.lock().unwrap().detached.push(h);
}

/// Complete background requests that are done (called from Buffer_detach and Finalize).
pub fn reap(block: bool) -> MpiResult<()> {
    let pending: Vec<usize> = std::mem::take(&mut BUF.lock().unwrap().detached);
    let mut left = pending;
    wait_until(|rt| {
        left.retain(|&h| {
            let Some(r) = rt.reqs.get_mut(h) else {
                return false;
            };
            match r.test(&mut rt.engine) {
                Ok(None) => true,
                _ => {
                    rt.reqs.remove(h);
                    false
                }
            }
        });
        Ok(!block || left.is_empty())
    })?;
    BUF.lock().unwrap().detached.extend(left);
    Ok(())
}

pub unsafe fn MPI_Buffer_attach<W: Width>(buffer: *mut c_void, size: W::Count) -> MpiResult<()> {
    attach(buffer, buffer_size(size)?)
}

fn buffer_size(size: impl AsI64) -> MpiResult<usize> {
    let size = size.as_i64();
    if size < 0 {
        mpi_bail!(MPI_ERR_ARG, "size {size} is negative");
    }
    Ok(size as usize)
}

unsafe fn attach(buffer: *mut c_void, size: usize) -> MpiResult<()> {
    attach_to(None, buffer, size)
}

/// Attach to the process (`ctx` None) or to the communicator with context id `ctx`.
unsafe fn attach_to(ctx: Option<u32>, buffer: *mut c_void, size: usize) -> MpiResult<()> {
    runtime::with(|_| Ok(()))?;
    let (buf, size) = if buffer as usize == AUTOMATIC {
        (AUTOMATIC, 0)
    } else {
        crate::runtime::types::check_buf(buffer, size, &crate::runtime::types::BYTE, "buffer")?;
        (buffer as usize, size)
    };
    let mut b = BUF.lock().unwrap();
    let pool = Pool { buf, size, used: 0 };
    match ctx {
        None if b.process.buf != 0 => {
            mpi_bail!(
                MPI_ERR_BUFFER,
                "a buffer is already attached to the process"
            )
        }
        None => b.process = pool,
        Some(c) if b.comms.iter().any(|e| e.0 == c) => {
            mpi_bail!(
                MPI_ERR_BUFFER,
                "a buffer is already attached to the communicator"
            )
        }
        Some(c) => b.comms.push((c, pool)),
    }
    Ok(())
}

pub unsafe fn MPI_Buffer_detach<W: Width>(
    buffer_addr: *mut c_void,
    size: *mut W::Count,
) -> MpiResult<()> {
    let n = detach(buffer_addr)?;
    out(size, "size", W::Count::or_undefined(n as i64))
}

unsafe fn detach(buffer_addr: *mut c_void) -> MpiResult<usize> {
    detach_from(None, buffer_addr)
}

/// Wait for the buffered sends, then detach the process's or the communicator's buffer:
/// `*buffer_addr` gets its address (MPI_BUFFER_AUTOMATIC for automatic buffering; NULL,
/// with size 0, when none was attached).
unsafe fn detach_from(ctx: Option<u32>, buffer_addr: *mut c_void) -> MpiResult<usize> {
    runtime::with(|_| Ok(()))?;
    reap(true)?;
    let mut b = BUF.lock().unwrap();
    let pool = match ctx {
        None => std::mem::replace(
            &mut b.process,
            Pool {
                buf: 0,
                size: 0,
                used: 0,
            },
        ),
        Some(c) => match b.comms.iter().position(|e| e.0 == c) {
            Some(i) => b.comms.remove(i).1,
            None => Pool {
                buf: 0,
                size: 0,
                used: 0,
            },
        },
    };
    if !buffer_addr.is_null() {
        *(buffer_addr as *mut *mut c_void) = pool.buf as *mut c_void;
    }
    Ok(pool.size)
}

/// Complete every pending buffered send (the flush calls; buffered sends of all
/// communicators are waited for, which includes those the call asks about).
fn flush() -> MpiResult<()> {
    runtime::with(|_| Ok(()))?;
    reap(true)
}

/// A request that is already complete (the nonblocking flushes complete at the call).
unsafe fn done_request(request: *mut MPI_Request) -> MpiResult<()> {
    nonnull(request, "request")?;
    let h = runtime::with(|rt| {
        Ok(runtime::new_request(
            rt,
            Request::new(ReqKind::Done(Status::EMPTY)),
        ))
    })?;
    *request = h as MPI_Request;
    Ok(())
}

pub unsafe fn MPI_Buffer_flush() -> MpiResult<()> {
    flush()
}

pub unsafe fn MPI_Buffer_iflush(request: *mut MPI_Request) -> MpiResult<()> {
    nonnull(request, "request")?;
    flush()?;
    done_request(request)
}

pub unsafe fn MPI_Comm_attach_buffer<W: Width>(
    cm: MPI_Comm,
    buffer: *mut c_void,
    size: W::Count,
) -> MpiResult<()> {
    let ctx = comm(cm)?.ctx;
    attach_to(Some(ctx), buffer, buffer_size(size)?)
}

pub unsafe fn MPI_Comm_detach_buffer<W: Width>(
    cm: MPI_Comm,
    buffer_addr: *mut c_void,
    size: *mut W::Count,
) -> MpiResult<()> {
    let ctx = comm(cm)?.ctx;
    let n = detach_from(Some(ctx), buffer_addr)?;
    out(size, "size", W::Count::or_undefined(n as i64))
}

pub unsafe fn MPI_Comm_flush_buffer(cm: MPI_Comm) -> MpiResult<()> {
    comm(cm)?;
    flush()
}

pub unsafe fn MPI_Comm_iflush_buffer(cm: MPI_Comm, request: *mut MPI_Request) -> MpiResult<()> {
    comm(cm)?;
    nonnull(request, "request")?;
    flush()?;
    done_request(request)
}
