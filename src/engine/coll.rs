//! Collective executor: runs a [`Schedule`] as a state machine over the engine's isend/irecv on
//! one context id and tag.
//!
//! `advance` issues steps in order until it reaches a `Wait` (or the end) whose sends and
//! receives are not all complete, and returns `Ok(true)` once the whole schedule is done.
//! Blocking collectives loop on `advance` with a [`super::Backoff`]; nonblocking ones call it from
//! their request's progress. Peers in the schedule are communicator ranks, mapped to world ranks
//! through `peers_world`. `Reduce` computes `dst = src op dst` with the callback
//! (`reduce(input, inout)`: `inout = input op inout`); `ReduceRev` computes `dst = dst op src`
//! through a scratch copy.

use super::{Engine, ReqId, SendArgs};
use crate::abi::consts::MPI_SUCCESS;
use crate::coll::schedule::{BufId, Region, Schedule, Step};
use crate::mpi::error::{MpiError, MpiResult};
use std::sync::Arc;

/// The reduction callback: `inout = input op inout`.
pub type ReduceFn = Box<dyn FnMut(&[u8], &mut [u8]) -> MpiResult<()> + Send>;

pub struct CollExec {
    sched: Arc<Schedule>,
    pc: usize,
    send: *const u8,
    recv: *mut u8,
    tmp: Vec<u8>,
    scratch: Vec<u8>,
    ctx: u32,
    tag: i32,
    peers_world: Arc<[usize]>,
    my_comm_rank: usize,
    reduce: ReduceFn,
    pending: Vec<ReqId>,
    done: bool,
}

// SAFETY: the buffer pointers are only used by advance(), which runs under the engine's lock; the
// caller guarantees the buffers outlive the collective (MPI semantics).
unsafe impl Send for CollExec {}

impl CollExec {
    /// # Safety
    /// `send` and `recv` must be valid for every region of the schedule that names them (the
    /// schedule's byte offsets) until the executor is done or dropped; `recv` must not be
    /// aliased by other live references meanwhile.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn new(
        schedule: impl Into<Arc<Schedule>>,
        send: *const u8,
        recv: *mut u8,
        ctx: u32,
        tag: i32,
        peers_world: Arc<[usize]>,
        my_comm_rank: usize,
        reduce: ReduceFn,
    ) -> Self {
        let schedule = schedule.into();
        let tmp = vec![0u8; schedule.tmp_len];
        CollExec {
            sched: schedule,
            pc: 0,
            send,
            recv,
            tmp,
            scratch: Vec::new(),
            ctx,
            tag,
            peers_world,
            my_comm_rank,
            reduce,
            pending: Vec::new(),
            done: false,
        }
    }

    fn ptr(&mut self, r: &Region) -> MpiResult<*mut u8> {
        let (base, len) = match r.buf {
            BufId::Send => (self.send as *mut u8, usize::MAX),
            BufId::Recv => (self.recv, usize::MAX),
            BufId::Tmp => (self.tmp.as_mut_ptr(), self.tmp.len()),
        };
        // A user buffer may be MPI_BOTTOM (NULL) with absolute offsets (datatypes built from
        // MPI_Get_address): only the resulting address must be non-null.
        let p = base.wrapping_add(r.off);
        if r.len > 0 && (p.is_null() || r.off.checked_add(r.len).is_none_or(|e| e > len)) {
            crate::mpi_bail!(
                MPI_ERR_INTERN,
                "schedule region {r:?} is outside its buffer"
            );
        }
        if r.len == 0 {
            return Ok(std::ptr::NonNull::dangling().as_ptr());
        }
        // Within the buffer: checked for Tmp; the caller's contract for Send/Recv.
        Ok(p)
    }

    /// Whether all issued sends/receives are complete (releasing them); errors of receives
    /// (truncation) are reported.
    fn drain(&mut self, eng: &mut Engine) -> MpiResult<bool> {
        if let Some(&r) = self.pending.first() {
            if !eng.is_done(r) {
                eng.progress();
            }
        }
        let mut i = 0;
        while i < self.pending.len() {
            let r = self.pending[i];
            if eng.is_done(r) {
                let s = eng.test(r).expect("completed request");
                self.pending.swap_remove(i);
                if s.error != MPI_SUCCESS {
                    return Err(MpiError::new(
                        s.error,
                        "message of a collective was truncated",
                    ));
                }
            } else {
                i += 1;
            }
        }
        Ok(self.pending.is_empty())
    }

    /// Run steps up to the next unsatisfied `Wait`. `Ok(true)` when the schedule is complete.
    pub fn advance(&mut self, eng: &mut Engine) -> MpiResult<bool> {
        if self.done {
            return Ok(true);
        }
        loop {
            if self.pc == self.sched.steps.len() {
                if !self.drain(eng)? {
                    return Ok(false);
                }
                self.done = true;
                return Ok(true);
            }
            let step = self.sched.steps[self.pc].clone();
            match step {
                Step::Wait => {
                    if !self.drain(eng)? {
                        return Ok(false);
                    }
                }
                Step::Send { peer, src } => {
                    let buf = self.ptr(&src)?;
                    let a = SendArgs {
                        buf,
                        len: src.len,
                        dst_world: self.world(peer)?,
                        ctx: self.ctx,
                        src_rank: self.my_comm_rank as i32,
                        tag: self.tag,
                        sync: false,
                    };
                    // SAFETY: the region is valid until the executor finishes (new's contract),
                    // and a later Wait (or the end) waits for the send.
                    let r = unsafe { eng.isend(a)? };
                    self.pending.push(r);
                }
                Step::Recv { peer, dst } => {
                    let buf = self.ptr(&dst)?;
                    self.world(peer)?; // validates the peer
                                       // SAFETY: as for Send; the schedule does not touch dst before the Wait.
                    let r = unsafe { eng.irecv(buf, dst.len, self.ctx, peer as i32, self.tag)? };
                    self.pending.push(r);
                }
                Step::Copy { src, dst } => {
                    let s = self.ptr(&src)?;
                    let d = self.ptr(&dst)?;
                    let n = src.len.min(dst.len);
                    // SAFETY: both regions are valid for n bytes; ptr::copy allows overlap.
                    unsafe { std::ptr::copy(s, d, n) };
                }
                Step::Reduce { src, dst } => {
                    if src.len != dst.len {
                        crate::mpi_bail!(
                            MPI_ERR_INTERN,
                            "reduce step with lengths {} and {}",
                            src.len,
                            dst.len
                        );
                    }
                    let s = self.ptr(&src)?;
                    let d = self.ptr(&dst)?;
                    self.scratch.clear();
                    // SAFETY: src is valid for len bytes; copying it first avoids aliasing with dst.
                    self.scratch
                        .extend_from_slice(unsafe { std::slice::from_raw_parts(s, src.len) });
                    // SAFETY: dst is valid for len bytes and not otherwise borrowed now.
                    let out = unsafe { std::slice::from_raw_parts_mut(d, dst.len) };
                    (self.reduce)(&self.scratch, out)?;
                }
                Step::ReduceRev { src, dst } => {
                    if src.len != dst.len {
                        crate::mpi_bail!(
                            MPI_ERR_INTERN,
                            "reduce step with lengths {} and {}",
                            src.len,
                            dst.len
                        );
                    }
                    let s = self.ptr(&src)?;
                    let d = self.ptr(&dst)?;
                    // scratch = dst op src, then dst = scratch.
                    self.scratch.clear();
                    // SAFETY: src is valid for len bytes.
                    self.scratch
                        .extend_from_slice(unsafe { std::slice::from_raw_parts(s, src.len) });
                    // SAFETY: dst is valid for len bytes; read-only here, scratch is separate.
                    let left = unsafe { std::slice::from_raw_parts(d, dst.len) }.to_vec();
                    (self.reduce)(&left, &mut self.scratch)?;
                    // SAFETY: dst valid for len bytes; scratch is a separate allocation.
                    unsafe { std::ptr::copy_nonoverlapping(self.scratch.as_ptr(), d, dst.len) };
                }
            }
            self.pc += 1;
        }
    }

    fn world(&self, peer: usize) -> MpiResult<usize> {
        match self.peers_world.get(peer) {
            Some(&w) => Ok(w),
            None => crate::mpi_bail!(
                MPI_ERR_INTERN,
                "schedule peer {peer} outside a communicator of {}",
                self.peers_world.len()
            ),
        }
    }

    pub fn is_done(&self) -> bool {
        self.done
    }
}

impl Drop for CollExec {
    fn drop(&mut self) {
        // An abandoned executor must not leave the engine writing into freed Tmp memory.
        if !self.pending.is_empty() {
            tracing::warn!(
                "engine::coll: executor dropped with {} operations in flight",
                self.pending.len()
            );
        }
    }
}
