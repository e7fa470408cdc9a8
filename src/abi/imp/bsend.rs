//! Buffered sends: MPI_Buffer_attach/detach accounting (MPI 5.0 §3.6).
//! Buffered data is copied into library memory at the call; the attached
//! buffer's size bounds how much may be outstanding, as the standard requires.

use super::util::*;
use crate::abi::ffi::MPI_Count;
use crate::abi::runtime::{self, wait_until};
use crate::mpi::error::MpiResult;
use crate::mpi_bail;
use std::os::raw::{c_int, c_void};
use std::sync::Mutex;

struct Attached {
    buf: usize,
    size: usize,
    used: usize,
    /// Requests completing in the background (buffered sends, freed requests).
    detached: Vec<usize>,
}

static BUF: Mutex<Attached> = Mutex::new(Attached {
    buf: 0,
    size: 0,
    used: 0,
    detached: Vec::new(),
});

const OVERHEAD: usize = 512; // MPI_BSEND_OVERHEAD

pub fn reserve(len: usize) -> MpiResult<()> {
    let mut b = BUF.lock().unwrap();
    if b.used + len + OVERHEAD > b.size {
        mpi_bail!(
            MPI_ERR_BUFFER,
            "buffered send of {len} bytes does not fit: {} of {} attached bytes in use",
            b.used,
            b.size
        );
    }
    b.used += len + OVERHEAD;
    Ok(())
}

pub fn release(len: usize) {
    let mut b = BUF.lock().unwrap();
    b.used = b.used.saturating_sub(len + OVERHEAD);
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

pub unsafe fn MPI_Buffer_attach(buffer: *mut c_void, size: c_int) -> MpiResult<()> {
    attach(buffer, nonneg(size, "size")?)
}

pub unsafe fn MPI_Buffer_attach_c(buffer: *mut c_void, size: MPI_Count) -> MpiResult<()> {
    if size < 0 {
        mpi_bail!(MPI_ERR_ARG, "size {size} is negative");
    }
    attach(buffer, size as usize)
}

unsafe fn attach(buffer: *mut c_void, size: usize) -> MpiResult<()> {
    let mut b = BUF.lock().unwrap();
    if b.buf != 0 {
        mpi_bail!(MPI_ERR_BUFFER, "a buffer is already attached");
    }
    b.buf = buffer as usize;
    b.size = size;
    Ok(())
}

pub unsafe fn MPI_Buffer_detach(buffer_addr: *mut c_void, size: *mut c_int) -> MpiResult<()> {
    let n = detach(buffer_addr)?;
    out(size, "size", n as c_int)
}

pub unsafe fn MPI_Buffer_detach_c(buffer_addr: *mut c_void, size: *mut MPI_Count) -> MpiResult<()> {
    let n = detach(buffer_addr)?;
    out(size, "size", n as MPI_Count)
}

unsafe fn detach(buffer_addr: *mut c_void) -> MpiResult<usize> {
    runtime::with(|_| Ok(()))?;
    reap(true)?;
    let mut b = BUF.lock().unwrap();
    if !buffer_addr.is_null() {
        *(buffer_addr as *mut *mut c_void) = b.buf as *mut c_void;
    }
    let n = b.size;
    b.buf = 0;
    b.size = 0;
    b.used = 0;
    Ok(n)
}
