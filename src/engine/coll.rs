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
//!
//! Buffers in device memory ([`CollExec::on_device`]: the send or receive buffer, and Tmp,
//! which the caller then provides as device memory): a send step from a device region is a
//! device message ([`SendArgs::dev`]: CUDA IPC or the pipe to a peer of this node, the
//! GPUDirect RDMA bulk transfer or the pipeline through host memory to another node, as the
//! engine decides per message), a receive step into one is a device receive
//! ([`Engine::irecv_dev`]), a copy step touching one goes through the engine's device copies,
//! and a reduce step on device regions through the caller's device reduction. Host regions
//! keep the host path.

use super::collnote::{CrossCheck, Found};
use super::{DevSend, Engine, ReqId, SendArgs};
use crate::coll::schedule::{BufId, Region, Schedule, Step};
use crate::mpi::error::{MpiError, MpiResult};
use crate::standard::consts::{MPI_ERR_OTHER, MPI_ERR_TRUNCATE, MPI_SUCCESS};
use std::sync::{Arc, Mutex};

/// Scratch buffers (Tmp and the reduction scratch) of finished collectives, kept for reuse: a
/// fresh multi-MiB allocation per call page-faults on every large collective (2 MiB allreduce at
/// 2 ranks spent most of its 5 ms in page faults; benches/NOTES.md). Bounded to
/// `POOL_BYTES`; schedules never rely on Tmp's initial contents.
static POOL: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());
const POOL_BYTES: usize = 64 << 20;

/// A buffer of at least `len` initialized bytes (contents arbitrary).
fn take_buf(len: usize) -> Vec<u8> {
    if len == 0 {
        return Vec::new();
    }
    let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
    let best = pool
        .iter()
        .enumerate()
        .filter(|(_, v)| v.len() >= len)
        .min_by_key(|(_, v)| v.len())
        .map(|(i, _)| i);
    match best {
        Some(i) => pool.swap_remove(i),
        None => vec![0u8; len],
    }
}

fn give_buf(v: Vec<u8>) {
    if v.is_empty() {
        return;
    }
    let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
    let kept: usize = pool.iter().map(|b| b.len()).sum();
    if kept + v.len() <= POOL_BYTES {
        pool.push(v);
    }
}

/// The reduction callback: `inout = input op inout`.
pub type ReduceFn = Box<dyn FnMut(&[u8], &mut [u8]) -> MpiResult<()> + Send>;

/// The reduction of device regions: `reduce(input, inout, len)` computes `inout = input op
/// inout` over `len` bytes of device memory of this process.
pub type DevReduceFn = Box<dyn FnMut(usize, usize, usize) -> MpiResult<()> + Send>;

/// Device memory a schedule's Tmp lives in: [`DevBuf::bytes`] bytes at [`DevBuf::addr`],
/// given back by its owner when dropped.
pub trait DevBuf: Send {
    fn addr(&self) -> usize;
    fn bytes(&self) -> usize;
}

/// Which of a schedule's buffers are device memory of this process ([`CollExec::on_device`]).
#[derive(Default)]
pub struct OnDevice {
    pub send: bool,
    pub recv: bool,
    /// Tmp as device memory (`None`: host memory from the executor's pool).
    pub tmp: Option<Box<dyn DevBuf>>,
    /// Reduce steps on device regions (`None`, or a host region with a device one: through
    /// host memory with the executor's host reduction).
    pub reduce: Option<DevReduceFn>,
    /// The op commutes: a `ReduceRev` step on device regions is a `Reduce` step.
    pub commutative: bool,
}

/// How many of an executor's messages and copies were device memory (counted into the
/// engine's statistics, `Engine::coll_device_report`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DevSteps {
    /// Sends from device regions, and their bytes.
    pub sends: u64,
    pub send_bytes: u64,
    /// Receives into device regions, and their bytes.
    pub recvs: u64,
    pub recv_bytes: u64,
    /// Copy and reduce steps that touched device memory.
    pub copies: u64,
    pub reduces: u64,
}

pub struct CollExec {
    sched: Arc<Schedule>,
    pc: usize,
    send: *const u8,
    recv: *mut u8,
    /// At least `sched.tmp_len` bytes, from the pool.
    tmp: Vec<u8>,
    /// Scratch of ReduceRev steps, from the pool (grown on demand).
    scratch: Vec<u8>,
    ctx: u32,
    tag: i32,
    peers_world: Arc<[usize]>,
    my_comm_rank: usize,
    reduce: ReduceFn,
    /// Device memory among the buffers (all host memory by default).
    dev: OnDevice,
    pending: Vec<Pending>,
    /// The check of this call's messages on a communicator that spans nodes
    /// (`engine::collnote`).
    cross: Option<Box<CrossCheck>>,
    /// The first receive that failed (truncated: a peer sent more than this rank's counts
    /// describe). The schedule still runs to its end, so every peer waiting on this rank's
    /// later sends completes; the error is returned then.
    failed: Option<MpiError>,
    done: bool,
}

/// An issued send or receive: its peer (communicator rank) and, for a receive, its length;
/// a device send to a peer of this node small enough to go eagerly holds its host copy.
struct Pending {
    id: ReqId,
    peer: usize,
    recv: Option<usize>,
    staged: Option<super::devcopy::HostStage>,
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
        let tmp = take_buf(schedule.tmp_len);
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
            dev: OnDevice::default(),
            pending: Vec::new(),
            cross: None,
            failed: None,
            done: false,
        }
    }

    /// The executor with the check of its messages between nodes (`engine::collnote`).
    pub fn with_cross_check(mut self, check: CrossCheck) -> Self {
        self.cross = Some(Box::new(check));
        self
    }

    /// The executor with device memory among its buffers (see the module docs).
    ///
    /// # Safety
    /// The buffers `dev` names are device memory of this process (Tmp: at least the
    /// schedule's `tmp_len` bytes, checked), valid as [`CollExec::new`] requires.
    pub unsafe fn on_device(mut self, dev: OnDevice) -> MpiResult<Self> {
        if let Some(t) = &dev.tmp {
            if t.bytes() < self.sched.tmp_len {
                crate::mpi_bail!(
                    MPI_ERR_INTERN,
                    "device scratch of {} bytes for a schedule that needs {}",
                    t.bytes(),
                    self.sched.tmp_len
                );
            }
            give_buf(std::mem::take(&mut self.tmp));
        }
        self.dev = dev;
        Ok(self)
    }

    /// Whether buffer `b` is device memory.
    fn is_dev(&self, b: BufId) -> bool {
        match b {
            BufId::Send => self.dev.send,
            BufId::Recv => self.dev.recv,
            BufId::Tmp => self.dev.tmp.is_some(),
        }
    }

    fn ptr(&mut self, r: &Region) -> MpiResult<*mut u8> {
        let (base, len) = match (r.buf, &self.dev.tmp) {
            (BufId::Send, _) => (self.send as *mut u8, usize::MAX),
            (BufId::Recv, _) => (self.recv, usize::MAX),
            (BufId::Tmp, Some(t)) => (t.addr() as *mut u8, self.sched.tmp_len),
            (BufId::Tmp, None) => (self.tmp.as_mut_ptr(), self.sched.tmp_len),
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

    /// Whether all issued sends/receives are complete (releasing them); the first error of a
    /// receive (truncation) is kept for the end of the schedule.
    fn drain(&mut self, eng: &mut Engine) -> MpiResult<bool> {
        if let Some(p) = self.pending.first() {
            if !eng.is_done(p.id) {
                eng.progress();
            }
        }
        let mut i = 0;
        while i < self.pending.len() {
            let Pending {
                id: r, peer, recv, ..
            } = self.pending[i];
            if eng.is_done(r) {
                let note = match (&self.cross, recv) {
                    (Some(_), Some(_)) => eng.note(r),
                    _ => None,
                };
                let refused = eng.refused(r);
                let s = eng.test(r).expect("completed request");
                self.pending.swap_remove(i);
                if let (Some(c), Some(note)) = (self.cross.as_mut(), refused) {
                    // The receiver gave up the call before it took this send.
                    self.failed = Some(c.refused(peer, note));
                    continue;
                }
                if let (Some(c), Some(want)) = (self.cross.as_mut(), recv) {
                    let world = self.peers_world.get(peer).copied().unwrap_or(usize::MAX);
                    let lens = (s.bytes, want, s.error == MPI_ERR_TRUNCATE);
                    if let Some(e) = c.received(peer, world, note, lens) {
                        // What the calls were says more than the truncation.
                        self.failed = Some(e);
                        continue;
                    }
                }
                if s.error != MPI_SUCCESS && self.failed.is_none() {
                    self.failed = Some(MpiError::new(
                        s.error,
                        format!(
                            "a message from rank {} did not fit the {} bytes this rank's \
                             counts and datatypes give it (they must match the sender's)",
                            s.source, s.bytes
                        ),
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
                let drained = self.drain(eng)?;
                if self.cross.as_ref().is_some_and(|c| c.found()) {
                    return Err(self.give_up(eng, None));
                }
                if !drained {
                    return Ok(false);
                }
                self.done = true;
                if let Some(e) = self.failed.take() {
                    return Err(e);
                }
                return Ok(true);
            }
            let step = self.sched.steps[self.pc];
            match step {
                Step::Wait => {
                    let drained = self.drain(eng)?;
                    if self.cross.as_ref().is_some_and(|c| c.found()) {
                        return Err(self.give_up(eng, None));
                    }
                    if !drained {
                        return Ok(false);
                    }
                }
                Step::Send { peer, src } => self.send(eng, peer, &src)?,
                Step::Recv { peer, dst } => {
                    let buf = self.ptr(&dst)?;
                    self.world(peer)?; // validates the peer
                    let dev = self.is_dev(dst.buf);
                    if dev {
                        eng.st.coll_dev.recvs += 1;
                        eng.st.coll_dev.recv_bytes += dst.len as u64;
                    }
                    // SAFETY: as for Send; the schedule does not touch dst before the Wait.
                    let r = unsafe {
                        eng.irecv_dev(buf, dst.len, dev, self.ctx, peer as i32, self.tag)?
                    };
                    self.pending.push(Pending {
                        id: r,
                        peer,
                        recv: Some(dst.len),
                        staged: None,
                    });
                }
                Step::Copy { src, dst } => {
                    let s = self.ptr(&src)?;
                    let d = self.ptr(&dst)?;
                    let n = src.len.min(dst.len);
                    let (sd, dd) = (self.is_dev(src.buf), self.is_dev(dst.buf));
                    if sd || dd {
                        let overlap = src.overlaps(&dst);
                        // SAFETY: both regions are valid for n bytes of the memory they name.
                        unsafe { copy_dev(eng, s, sd, d, dd, n, overlap)? };
                    } else {
                        // SAFETY: both regions are valid for n bytes; ptr::copy allows overlap.
                        unsafe { std::ptr::copy(s, d, n) };
                    }
                }
                Step::Reduce { src, dst } | Step::ReduceRev { src, dst }
                    if self.is_dev(src.buf) || self.is_dev(dst.buf) =>
                {
                    self.reduce_dev(eng, &step, &src, &dst)?;
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
                    if src.overlaps(&dst) {
                        crate::mpi_bail!(
                            MPI_ERR_INTERN,
                            "reduce step with overlapping regions {src:?} {dst:?}"
                        );
                    }
                    let s = self.ptr(&src)?;
                    let d = self.ptr(&dst)?;
                    // SAFETY: src and dst are valid for len bytes and do not overlap (checked).
                    let (input, out) = unsafe {
                        (
                            std::slice::from_raw_parts(s, src.len),
                            std::slice::from_raw_parts_mut(d, dst.len),
                        )
                    };
                    (self.reduce)(input, out)?;
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
                    if self.scratch.len() < src.len {
                        give_buf(std::mem::take(&mut self.scratch));
                        self.scratch = take_buf(src.len);
                    }
                    let scratch = &mut self.scratch[..src.len];
                    // SAFETY: src and dst are valid for len bytes; scratch is a separate allocation.
                    unsafe {
                        scratch.copy_from_slice(std::slice::from_raw_parts(s, src.len));
                        (self.reduce)(std::slice::from_raw_parts(d, dst.len), scratch)?;
                    }
                    // SAFETY: dst valid for len bytes; scratch is a separate allocation.
                    unsafe { std::ptr::copy_nonoverlapping(self.scratch.as_ptr(), d, dst.len) };
                }
            }
            self.pc += 1;
        }
    }

    /// A reduce step with a device region (a `ReduceRev` only where the op commutes): through
    /// the device reduction where both regions are device memory, else through host memory.
    fn reduce_dev(
        &mut self,
        eng: &mut Engine,
        step: &Step,
        src: &Region,
        dst: &Region,
    ) -> MpiResult<()> {
        if src.len != dst.len || src.overlaps(dst) {
            crate::mpi_bail!(
                MPI_ERR_INTERN,
                "reduce step with regions {src:?} {dst:?} on device memory"
            );
        }
        let both = self.is_dev(src.buf) && self.is_dev(dst.buf);
        let ordered = matches!(step, Step::Reduce { .. }) || self.dev.commutative;
        let s = self.ptr(src)? as usize;
        let d = self.ptr(dst)? as usize;
        if !ordered {
            crate::mpi_bail!(
                MPI_ERR_INTERN,
                "a schedule reduces {src:?} into {dst:?} (reversed, an op that does not \
                 commute) on device memory"
            );
        }
        eng.st.coll_dev.reduces += 1;
        match self.dev.reduce.as_mut() {
            Some(f) if both => f(s, d, src.len),
            // A host region with a device one: the device operand through host memory, the
            // host reduction, the result back where it belongs.
            _ => {
                let (sd, dd) = (self.is_dev(src.buf), self.is_dev(dst.buf));
                let dev = &eng.st.dev;
                let fail = |e: String| {
                    MpiError::new(
                        MPI_ERR_OTHER,
                        format!("a collective's device copy failed: {e}"),
                    )
                };
                // SAFETY: both regions are valid for len bytes of the memory they name and do
                // not overlap (checked above).
                unsafe {
                    let input = match sd {
                        true => dev.dtoh(s, src.len).map_err(fail)?,
                        false => std::slice::from_raw_parts(s as *const u8, src.len).to_vec(),
                    };
                    if dd {
                        let mut out = dev.dtoh(d, dst.len).map_err(fail)?;
                        (self.reduce)(&input, &mut out)?;
                        dev.htod(d, &out).map_err(fail)
                    } else {
                        (self.reduce)(
                            &input,
                            std::slice::from_raw_parts_mut(d as *mut u8, dst.len),
                        )
                    }
                }
            }
        }
    }

    /// Issue a `Send` step of the schedule, with the note its destination gets.
    fn send(&mut self, eng: &mut Engine, peer: usize, src: &Region) -> MpiResult<()> {
        let mut buf = self.ptr(src)? as *const u8;
        let dst_world = self.world(peer)?;
        let (dev, staged) = if self.is_dev(src.buf) {
            eng.st.coll_dev.sends += 1;
            eng.st.coll_dev.send_bytes += src.len as u64;
            // SAFETY: the region is device memory valid for its length (on_device's contract).
            match unsafe { device_send(eng, buf as usize, src.len, dst_world)? } {
                DevWay::Send(d) => (Some(d), None),
                DevWay::Staged(v) => {
                    buf = v.as_ptr();
                    (None, Some(v))
                }
            }
        } else {
            (None, None)
        };
        let a = SendArgs {
            buf,
            len: src.len,
            dst_world,
            ctx: self.ctx,
            src_rank: self.my_comm_rank as i32,
            tag: self.tag,
            sync: false,
            dev,
            note: self
                .cross
                .as_ref()
                .and_then(|c| c.note_to(eng.same_node(dst_world))),
        };
        // SAFETY: the region is valid until the executor finishes (new's contract), and a
        // later Wait (or the end, or abandon) waits for the send or detaches it; a staged copy
        // is held with the send.
        let r = unsafe { eng.isend(a)? };
        self.pending.push(Pending {
            id: r,
            peer,
            recv: None,
            staged,
        });
        Ok(())
    }

    /// While the call waits: the notes of messages of this call that arrived but match no
    /// receive of its schedule (a peer that runs another collective sends what this rank's
    /// schedule never receives) show a disagreement the receives cannot; the call then ends
    /// as [`CollExec::give_up`] does, with its error.
    pub fn check_waiting(&mut self, eng: &mut Engine) -> MpiResult<()> {
        let Some(c) = self.cross.as_mut() else {
            return Ok(());
        };
        let mut found = eng
            .unexpected_notes(self.ctx, self.tag)
            .into_iter()
            .find_map(|(from, note)| c.noted(from, note));
        if found.is_none() {
            found = self.ask_far(eng);
        }
        match found {
            Some(e) => {
                self.failed = Some(e);
                Err(self.give_up(eng, None))
            }
            None => Ok(()),
        }
    }

    /// The off-node ranks this call waits on (its sends and receives not complete), asked for
    /// their record of the call (`engine::ask`): the error when one that answered disagrees.
    fn ask_far(&mut self, eng: &mut Engine) -> Option<MpiError> {
        let c = self.cross.as_mut()?;
        let (ctx, seq) = (c.record().ctx, c.record().seq);
        let mut far: Vec<(usize, usize)> = self
            .pending
            .iter()
            .filter_map(|p| {
                let w = *self.peers_world.get(p.peer)?;
                (!eng.same_node(w)).then_some((p.peer, w))
            })
            .collect();
        far.sort_unstable();
        far.dedup();
        let now = std::time::Instant::now();
        for (rank, w) in far {
            if c.asked(w) {
                if let Some(theirs) = eng.told_record(w, ctx, seq) {
                    match c.told(rank, theirs) {
                        Some(e) => return Some(e),
                        // It runs this call too: nothing more to ask.
                        None => continue,
                    }
                }
            }
            if c.ask_due(w, now) {
                eng.ask_record(w, ctx, seq);
            }
        }
        None
    }

    /// End a call whose ranks called different collectives: with the check between nodes,
    /// remember `found` (a disagreement the caller found) and send at once, noted, what the
    /// rest of the schedule sends (the ranks downstream learn the disagreement from them,
    /// even where they wait for nothing else; the data is meaningless); then
    /// [`CollExec::abandon`]. The error to return: what the executor found, else
    /// `MPI_ERR_OTHER`.
    pub fn give_up(&mut self, eng: &mut Engine, found: Option<Found>) -> MpiError {
        if let Some(c) = self.cross.as_mut() {
            if let Some(f) = found {
                c.keep(f);
            }
            let sched = self.sched.clone();
            for step in sched.steps.iter().skip(self.pc) {
                if let Step::Send { peer, src } = step {
                    if let Err(e) = self.send(eng, *peer, src) {
                        tracing::debug!("engine::coll: a send of an abandoned call failed: {e}");
                    }
                }
            }
        }
        self.abandon(eng);
        self.failed
            .take()
            .unwrap_or_else(|| MpiError::new(MPI_ERR_OTHER, "collective mismatch"))
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

    /// Give up a schedule that cannot complete (its peers run a different collective): receives
    /// that have not matched are cancelled, operations in flight are released to the engine
    /// (which drops them when they end) after [`Engine::detach`] made them independent of the
    /// caller's buffers, and the executor is done. Tmp stays allocated (leaked)
    /// if anything was still in flight, since the engine may still write into it. With the
    /// check between nodes, the call's messages that arrive from now on (or wait unexpected)
    /// are refused, answered with this rank's note ([`Engine::refuse`]): their senders would
    /// otherwise wait for a receive that never comes.
    pub fn abandon(&mut self, eng: &mut Engine) {
        let mut in_flight = false;
        let mut using = Vec::new();
        for Pending { id, .. } in self.pending.drain(..) {
            if !eng.is_done(id) && !eng.cancel(id) {
                in_flight = true;
                // A send still queued would read the caller's buffer after the call returned,
                // a receive in flight would write it.
                if eng.detach(id) {
                    using.push(id);
                    continue;
                }
            }
            eng.free(id);
        }
        // What cannot be moved off the caller's buffers (a bulk transfer the network writes
        // into a receive buffer or reads from a send buffer, a copy in progress) ends before the
        // call returns: the caller may free those buffers then.
        let mut b = crate::engine::Backoff::new();
        while let Some(&id) = using.first() {
            if eng.is_done(id) {
                eng.free(id);
                using.remove(0);
                b.reset();
            } else if eng.progress() {
                b.reset();
            } else {
                b.snooze();
            }
        }
        if in_flight {
            std::mem::forget(std::mem::take(&mut self.tmp));
            std::mem::forget(self.dev.tmp.take());
        }
        if let Some(c) = &self.cross {
            eng.refuse(self.ctx, self.tag, c.note_to(false));
        }
        self.done = true;
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
            // The engine may still write into Tmp: leak it rather than reuse it.
            std::mem::forget(std::mem::take(&mut self.tmp));
            std::mem::forget(self.dev.tmp.take());
            for p in self.pending.drain(..) {
                std::mem::forget(p.staged);
            }
            return;
        }
        give_buf(std::mem::take(&mut self.tmp));
        give_buf(std::mem::take(&mut self.scratch));
    }
}

/// How a device region is sent ([`device_send`]).
enum DevWay {
    /// As a device message.
    Send(DevSend),
    /// Copied to host memory now, sent from there (eagerly).
    Staged(super::devcopy::HostStage),
}

/// How a send step's device region of `len` bytes at `addr` goes to world rank `dst`, as a
/// point-to-point device send goes: to a peer of this node, exported for CUDA IPC above
/// `GPUMPI_GPU_IPC_MIN` (the receiver copies GPU to GPU), else through the pipe to it above the
/// eager limit, else staged whole and sent eagerly; to a peer on another node, as a device
/// message the engine moves by GPUDirect RDMA where both ends' backends take device memory,
/// else pipelines through host memory (or stages, below the bulk threshold).
///
/// # Safety
/// `addr..addr+len` is device memory of this process.
unsafe fn device_send(eng: &mut Engine, addr: usize, len: usize, dst: usize) -> MpiResult<DevWay> {
    let me = eng.st.me;
    if dst == me || !eng.st.near[dst] {
        return Ok(DevWay::Send(DevSend::Pipe));
    }
    if len > crate::config::snapshot().p2p.gpu_ipc_min {
        if let Some(e) = eng.st.dev.export_range(addr, len) {
            if let Ok(e) = <[u8; super::devcopy::EXPORT_BYTES]>::try_from(&e[..]) {
                return Ok(DevWay::Send(DevSend::Ipc(e)));
            }
        }
    }
    if len > eng.eager_to(dst) {
        return Ok(DevWay::Send(DevSend::Pipe));
    }
    match eng.st.dev.dtoh_stage(addr, len) {
        Ok(v) => Ok(DevWay::Staged(v)),
        Err(e) => crate::mpi_bail!(
            MPI_ERR_OTHER,
            "copying a collective's device data to host memory failed: {e}"
        ),
    }
}

/// A copy step of `n` bytes from `s` to `d` where either is device memory (`sd`, `dd`), through
/// the engine's device copies; overlapping regions of one buffer go through host memory.
///
/// # Safety
/// Both ranges are valid for `n` bytes of the memory they are.
unsafe fn copy_dev(
    eng: &mut Engine,
    s: *mut u8,
    sd: bool,
    d: *mut u8,
    dd: bool,
    n: usize,
    overlap: bool,
) -> MpiResult<()> {
    if n == 0 || s == d {
        return Ok(());
    }
    eng.st.coll_dev.copies += 1;
    let dev = &eng.st.dev;
    let r = match (sd, dd) {
        (true, true) if !overlap => dev.dtod(d as usize, s as usize, n),
        (true, true) => dev
            .dtoh(s as usize, n)
            .and_then(|v| dev.htod(d as usize, &v)),
        (true, false) => dev.dtoh(s as usize, n).map(|v| {
            std::ptr::copy_nonoverlapping(v.as_ptr(), d, n);
        }),
        (false, true) => dev.htod(d as usize, std::slice::from_raw_parts(s, n)),
        (false, false) => {
            std::ptr::copy(s, d, n);
            Ok(())
        }
    };
    r.map_err(|e| {
        MpiError::new(
            MPI_ERR_OTHER,
            format!("a collective's device copy failed: {e}"),
        )
    })
}
