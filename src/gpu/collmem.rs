//! Device memory for the collective schedules between nodes whose operands are device buffers
//! (the engine's executor with device steps, `engine::coll::OnDevice`): the schedule's scratch
//! (Tmp) in device memory of the operands' device, device-to-device copies, and reductions of
//! device regions.
//!
//! Contract:
//! - [`Scratch::take`] hands out device memory from a pool kept in the communicator's GPU
//!   state ([`super::comm::CommGpu`], a [`super::comm::PathState`] list): a buffer dropped goes
//!   back to that pool (at most [`KEEP`] buffers and [`KEEP_BYTES`] bytes per communicator),
//!   so a loop of collectives reuses one allocation, which peers of the node then map once
//!   (CUDA IPC) and the NIC registers once (GPUDirect RDMA). The pool is freed with the
//!   communicator's GPU state (`MPI_Comm_free`, `MPI_Finalize`); a buffer dropped after that is
//!   freed at once. Peers map a scratch only for the time of one message, as they map a user
//!   buffer, and the import cache drops a mapping whose allocation went (`gpu::ipc`).
//! - Copies and reductions here have finished when they return (the device's stream is
//!   synchronized), as the executor's host steps have.

use super::cache::MemKind;
use super::comm::{CommGpu, PathState};
use crate::mpi::error::{MpiError, MpiResult};
use crate::sys::cuda;
use std::sync::{Arc, Mutex, Weak};

/// Most buffers a communicator's pool keeps.
pub const KEEP: usize = 4;
/// Most bytes a communicator's pool keeps.
pub const KEEP_BYTES: usize = 256 << 20;

/// One device allocation of the pool.
struct Block {
    ctx: cuda::Context,
    device: i32,
    addr: usize,
    len: usize,
}

// SAFETY: a device address and its context handle; the memory is used only by the owner.
unsafe impl Send for Block {}

impl Block {
    fn release(self) {
        // SAFETY: `addr` came from mem_alloc in `ctx`; nothing uses it any more (its last
        // user, an executor, finished every copy and message on it).
        let _ = cuda::with_context(self.ctx, || {
            unsafe { cuda::mem_free(self.addr) };
            Ok(())
        });
        super::comm::add_device(-(self.len as i64));
    }
}

impl PathState for Block {
    fn free(self) {
        self.release();
    }
    fn leak(self) {
        self.release();
    }
}

/// A schedule's device scratch, back to its communicator's pool when dropped.
pub struct Scratch {
    block: Option<Block>,
    pool: Weak<Mutex<Vec<Block>>>,
}

impl Scratch {
    /// At least `len` bytes of device memory on device `device` for a collective of the
    /// communicator whose GPU state is `gpu`.
    pub fn take(gpu: &CommGpu, device: i32, len: usize) -> MpiResult<Scratch> {
        let pool = gpu.state().of::<Block>();
        let reuse = {
            let mut p = pool.lock().unwrap_or_else(|e| e.into_inner());
            let best = p
                .iter()
                .enumerate()
                .filter(|(_, b)| b.device == device && b.len >= len)
                .min_by_key(|(_, b)| b.len)
                .map(|(i, _)| i);
            best.map(|i| p.swap_remove(i))
        };
        let block = match reuse {
            Some(b) => b,
            None => {
                let g = super::gpu().ok_or_else(|| MpiError::other("CUDA is not available"))?;
                let d = g.device(device).map_err(MpiError::other)?;
                let addr = cuda::with_context(d.ctx, || cuda::mem_alloc(len)).map_err(|e| {
                    MpiError::other(format!(
                        "allocating {len} bytes of device scratch for a collective: {e}"
                    ))
                })?;
                super::comm::add_device(len as i64);
                Block {
                    ctx: d.ctx,
                    device,
                    addr,
                    len,
                }
            }
        };
        Ok(Scratch {
            block: Some(block),
            pool: Arc::downgrade(&pool),
        })
    }

    pub fn addr(&self) -> usize {
        self.block.as_ref().map_or(0, |b| b.addr)
    }

    pub fn len(&self) -> usize {
        self.block.as_ref().map_or(0, |b| b.len)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let Some(b) = self.block.take() else {
            return;
        };
        if let Some(pool) = self.pool.upgrade() {
            let mut p = pool.lock().unwrap_or_else(|e| e.into_inner());
            let kept: usize = p.iter().map(|b| b.len).sum();
            if p.len() < KEEP && kept + b.len <= KEEP_BYTES {
                p.push(b);
                return;
            }
        }
        b.release();
    }
}

/// The device and context of device (not managed) memory at `addr`.
fn device_of(addr: usize) -> Result<super::DevCtx, String> {
    let info = super::classify(addr as *const u8);
    if info.kind != MemKind::Device {
        return Err(format!("{addr:#x} is not device memory"));
    }
    let g = super::gpu().ok_or("CUDA is not available")?;
    g.device(info.device.max(0))
}

/// Copy `len` bytes between device buffers of this process (a schedule's copy step), on the
/// stream of `dst`'s device; finished on return.
///
/// # Safety
/// `src..src+len` is readable and `dst..dst+len` writable device memory; they do not overlap.
pub unsafe fn dtod(dst: usize, src: usize, len: usize) -> Result<(), String> {
    if len == 0 {
        return Ok(());
    }
    let d = device_of(dst)?;
    cuda::with_context(d.ctx, || {
        cuda::memcpy_dtod_async(dst, src, len, d.stream)?;
        cuda::stream_synchronize(d.stream)
    })
    .map_err(|e| format!("device to device copy of {len} bytes: {e}"))
}

/// A host reduction: `inout = input op inout`.
pub type HostReduce<'a> = dyn FnMut(&[u8], &mut [u8]) -> MpiResult<()> + 'a;

/// `inout = input op inout` over `len` bytes of device memory: the reduction kernel where the
/// op and type have one (`gpu::stage::reduce_on_device`), else through host memory (both
/// operands copied to the host, reduced by `host`, the result copied back).
///
/// # Safety
/// Both ranges are device memory of this process holding `len` bytes of elements of `e`.
pub unsafe fn reduce(
    op: Option<(crate::mpi::op::BuiltinOp, crate::mpi::datatype::Elem)>,
    input: usize,
    inout: usize,
    len: usize,
    host: &mut HostReduce,
) -> MpiResult<()> {
    if len == 0 {
        return Ok(());
    }
    if let Some((o, e)) = op {
        if super::stage::reduce_on_device(o, e, input as *const u8, inout as *mut u8, len)? {
            return Ok(());
        }
    }
    let a = super::p2p::dtoh(input, len).map_err(MpiError::other)?;
    let mut b = super::p2p::dtoh(inout, len).map_err(MpiError::other)?;
    host(&a, &mut b)?;
    super::p2p::htod(inout, &b).map_err(MpiError::other)
}
