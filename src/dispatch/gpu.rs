//! The GPU paths: blocking collectives whose every rank passes device buffers, each run through
//! its `gpu::path::GpuPath` (the rule shared by every GPU path, this rank's buffers, the flag
//! round, then the path's own eligibility and run).

use super::call::{CollSpec, Reduction};
use super::flag::{check_refine, check_start, flag_eligible, idle_with};
use super::internal::{
    allgather_bytes, allgather_bytes_at, allreduce_band_u64, allreduce_band_u64_at,
};
use super::{run_blocking, run_numbered};
use crate::coll::CollKind;
use crate::engine::agree::words::{self as words, Words};
use crate::engine::agree::{self, Role};
use crate::engine::collcheck::{
    agreement_fields, agreement_words, disagreed, mismatch_error, CallNo, Outer, Path as CheckPath,
    Record, Watch, AGREEMENT_WORDS,
};
use crate::gpu::call::{Call, Shape};
use crate::gpu::comm::{Host, RECORD_MAX};
use crate::gpu::kernels::{KOp, KType};
use crate::gpu::path::GpuPath;
use crate::mpi::error::{MpiError, MpiResult};
use crate::runtime;
use crate::runtime::objects::CommObj;
use crate::standard::consts as c;
use smallvec::SmallVec;
use std::cell::{Cell, RefCell};
use std::sync::Arc;

/// The host collectives the GPU path needs, over the call's communicator: inside a call
/// (`call`), numbered as that call's internal collectives, carrying the call's collective,
/// root and byte count in every exchange, and checked against the peers' records of the call
/// while they wait (engine::collcheck).
struct GpuHost<'a> {
    comm: &'a Arc<CommObj>,
    call: Option<CallCheck<'a>>,
}

/// The consistency check of the call a GPU path runs.
struct CallCheck<'a> {
    spec: &'a CollSpec,
    no: CallNo,
    /// This rank's record of the call (with `Path::Choosing` until the ranks agree to run it
    /// on a GPU path), published when the path starts.
    rec: Cell<Record>,
    /// The check of its waits (`None` without record rings).
    watch: RefCell<Option<Watch>>,
    /// While alive, the waits of the internal collectives check the call's record too.
    _outer: Outer,
}

impl<'a> GpuHost<'a> {
    /// The host side of a GPU path serving call `no` of `spec`: publishes the call's record
    /// (path not chosen yet) and checks it in every wait of the path from here on.
    fn for_call(spec: &'a CollSpec, no: CallNo) -> Self {
        let rec = Record::new(
            spec.comm.ctx,
            no.tag() as u32,
            spec.kind,
            spec.root,
            spec.bytes,
            CheckPath::Choosing,
        );
        let watch = check_start(spec, no, CheckPath::Choosing);
        GpuHost {
            comm: &spec.comm,
            call: Some(CallCheck {
                spec,
                no,
                rec: Cell::new(rec),
                watch: RefCell::new(watch),
                _outer: Outer::enter(rec),
            }),
        }
    }

    /// The number of the call's next internal collective (`None` outside a call).
    fn next_no(&self) -> MpiResult<Option<CallNo>> {
        let Some(c) = &self.call else {
            return Ok(None);
        };
        let sub = c.spec.subs.get() + 1;
        if sub > CallNo::MAX_SUB {
            return Err(MpiError::intern(
                "a GPU collective made more internal collectives than its numbering allows",
            ));
        }
        c.spec.subs.set(sub);
        Ok(Some(c.no.nested(sub)))
    }

    /// `e`, an internal collective's error, or the disagreement of the call's records that
    /// explains it (a peer that called something else made another exchange at this point,
    /// whose messages do not fit this rank's).
    fn refine(&self, e: MpiError) -> MpiError {
        match &self.call {
            Some(c) => check_refine(c.watch.borrow().as_ref(), e),
            None => e,
        }
    }

    /// The error of an agreement whose exchange found that the ranks called different
    /// collectives (`class`, from `collcheck::disagreed`): names the peer `peer` and its call
    /// where known, else the first peer whose published record disagrees.
    fn agreement_error(
        &self,
        c: &CallCheck,
        class: i32,
        peer: Option<(usize, Record)>,
    ) -> MpiError {
        let mine = c.rec.get();
        if let Some((p, theirs)) = peer {
            return mismatch_error(class, self.comm.rank, &mine, p, &theirs);
        }
        if let (Some(w), Some(r)) = (c.watch.borrow().as_ref(), runtime::rings()) {
            if let Err(e) = w.check(&r) {
                return e;
            }
        }
        MpiError::new(
            class,
            format!(
                "collective mismatch: another rank's call differs from this rank's {} (its {})",
                c.spec.kind.name(),
                if class == c::MPI_ERR_ROOT {
                    "root"
                } else if class == c::MPI_ERR_TRUNCATE {
                    "byte count"
                } else {
                    "collective"
                }
            ),
        )
    }
}

/// A rank's collective, root and byte count from its [`agreement_words`] (a record for the
/// error message).
fn record_of(c: &CallCheck, w: &[u64; KEY]) -> Record {
    let mine = c.rec.get();
    let (kind, root, bytes) = agreement_fields(w);
    Record {
        kind: CollKind::ALL.get(kind).copied().unwrap_or(mine.kind),
        root,
        bytes,
        ..mine
    }
}

const KEY: usize = AGREEMENT_WORDS;

/// The last word of each rank's block in [`GpuHost`]'s set-up exchange: a block without it was
/// not written by the same exchange (a peer that ran another internal collective at that
/// number sent a shorter message, or none).
const BLOCK_END: u64 = 0x6770_756d_7069_e4d5;

impl crate::gpu::comm::Host for GpuHost<'_> {
    fn allgather(&self, mine: &[u8]) -> MpiResult<Vec<u8>> {
        let Some(no) = self.next_no()? else {
            return allgather_bytes(self.comm, mine);
        };
        let c = self.call.as_ref().expect("inside a call");
        // Each rank's call's agreement words, then its record, then an end mark, in a block of
        // the same size on every rank. Ranks whose calls differ may run different paths, whose
        // records differ in length (the words must still be where each peer wrote them), or
        // different internal collectives at this number (a peer's shorter message leaves the
        // end mark of its block unwritten).
        let n = mine.len();
        if n > RECORD_MAX {
            return Err(MpiError::intern(format!(
                "a GPU path's set-up record of {n} bytes exceeds the {RECORD_MAX} bytes its exchange carries"
            )));
        }
        let head = KEY * 8;
        let stride = head + RECORD_MAX + 8;
        let mut rec = vec![0u8; stride];
        for (i, w) in agreement_words(&c.rec.get()).iter().enumerate() {
            rec[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        rec[head..head + n].copy_from_slice(mine);
        rec[stride - 8..].copy_from_slice(&BLOCK_END.to_le_bytes());
        let all = allgather_bytes_at(self.comm, &rec, Some(no)).map_err(|e| self.refine(e))?;
        if let Some(p) = (0..self.comm.size())
            .find(|&p| all[(p + 1) * stride - 8..(p + 1) * stride] != BLOCK_END.to_le_bytes())
        {
            return Err(self.refine(MpiError::other(format!(
                "collective mismatch: rank {p} made a different exchange than this rank's {} \
                 at the same step (its ranks took different paths)",
                c.spec.kind.name()
            ))));
        }
        let words = |p: usize| -> [u64; KEY] {
            let b = &all[p * stride..p * stride + head];
            std::array::from_fn(|i| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap()))
        };
        let mut and = [u64::MAX; KEY];
        for p in 0..self.comm.size() {
            for (a, w) in and.iter_mut().zip(words(p)) {
                *a &= w;
            }
        }
        if let Some(class) = disagreed(&and) {
            let me = words(self.comm.rank);
            let peer = (0..self.comm.size())
                .find(|&p| words(p) != me)
                .map(|p| (p, record_of(c, &words(p))));
            return Err(self.agreement_error(c, class, peer));
        }
        Ok((0..self.comm.size())
            .flat_map(|p| {
                all[p * stride + head..p * stride + head + n]
                    .iter()
                    .copied()
            })
            .collect())
    }
    fn barrier(&self) -> MpiResult<()> {
        let mut s = CollSpec::new(CollKind::Barrier, self.comm.clone());
        s.host_only = true;
        // SAFETY: no user buffers.
        unsafe {
            match self.next_no()? {
                Some(no) => run_numbered(&s, no).map_err(|e| self.refine(e)),
                None => run_blocking(s),
            }
        }
    }
    fn all(&self, ok: bool) -> MpiResult<bool> {
        let Some(no) = self.next_no()? else {
            let mut w = [ok as u64];
            allreduce_band_u64(self.comm, &mut w)?;
            return Ok(w[0] != 0);
        };
        let c = self.call.as_ref().expect("inside a call");
        let key = agreement_words(&c.rec.get());
        // The ok bit, the call's agreement words and an end mark that a peer's exchange of
        // another kind at this number (a shorter message) does not leave whole.
        let mut w = [0u64; 2 + KEY];
        w[0] = ok as u64;
        w[1..=KEY].copy_from_slice(&key);
        w[1 + KEY] = BLOCK_END;
        allreduce_band_u64_at(self.comm, &mut w, Some(no)).map_err(|e| self.refine(e))?;
        if w[1 + KEY] != BLOCK_END {
            return Err(self.refine(MpiError::other(format!(
                "collective mismatch: another rank made a different exchange than this rank's {} \
                 at the same step (its ranks took different paths)",
                c.spec.kind.name()
            ))));
        }
        if let Some(class) = disagreed(w[1..=KEY].try_into().expect("KEY words")) {
            return Err(self.agreement_error(c, class, None));
        }
        Ok(w[0] != 0)
    }
    fn world_rank(&self, p: usize) -> usize {
        self.comm.peers[p]
    }
    fn identity(&self) -> (u32, Arc<[usize]>) {
        (self.comm.ctx, self.comm.peers.clone())
    }
    fn gpu(&self) -> &crate::gpu::comm::CommGpu {
        &self.comm.gpu
    }
    fn check(&self) -> MpiResult<()> {
        let Some(c) = &self.call else { return Ok(()) };
        match (c.watch.borrow_mut().as_mut(), runtime::rings()) {
            (Some(w), Some(r)) => w.poll_now(&r),
            _ => Ok(()),
        }
    }
    fn commit(&self, step: u64) {
        let Some(c) = &self.call else { return };
        let rec = Record {
            path: CheckPath::Gpu,
            step: step as u16,
            ..c.rec.get()
        };
        c.rec.set(rec);
        if let Some(rings) = runtime::rings() {
            rings.publish(&rec);
        }
        if let Some(w) = c.watch.borrow_mut().as_mut() {
            w.set_record(rec);
        }
    }
    fn shared_mem(&self) -> &dyn crate::gpu::shmem::SharedMem {
        &crate::runtime::devices::JobShm
    }
}

/// Set up the stream kernel of a stream communicator (`gpu::enqueue_kernel::setup`) with the
/// host collectives of `comm`, its private duplicate (collective over it).
pub(crate) fn stream_kernel_setup(
    comm: &Arc<CommObj>,
    ordinal: Result<i32, String>,
) -> MpiResult<Result<crate::gpu::enqueue_kernel::Ready, String>> {
    let host = GpuHost { comm, call: None };
    crate::gpu::enqueue_kernel::setup(&host, ordinal, comm.size(), comm.rank)
}

/// Release what the GPU paths hold for `comm` (collective: `MPI_Comm_free`).
pub(crate) fn release_gpu(comm: &Arc<CommObj>) -> MpiResult<()> {
    comm.gpu.release(&GpuHost { comm, call: None })
}

/// The kernel for a call the GPU paths serve (`Some(None)`: no reduction), None when they do not
/// serve it. A rule on values every rank shares: the collective, the byte count, an internal
/// call, the communicator on one node, whether GPU-native collectives are on, the op and
/// element type.
fn gpu_call(spec: &CollSpec) -> Option<Option<(KOp, KType)>> {
    use CollKind as K;
    if !matches!(
        spec.kind,
        K::Allreduce | K::Alltoall | K::Allgather | K::Bcast | K::Reduce | K::ReduceScatterBlock
    ) || spec.bytes == 0
        || spec.host_only
        || !spec.comm.one_node
        // A stream communicator's collectives run over host staging on its worker thread
        // (`gpu::enqueue`); its blocking calls stay off the GPU paths too, so every rank
        // walks the same paths whichever form it called.
        || spec.comm.stream.get().is_some()
        || !crate::gpu::device::enabled()
    {
        return None;
    }
    match &spec.red {
        None => Some(None),
        Some((Reduction::Builtin(op, e), _)) => crate::gpu::kernels::kernel_for(*op, *e).map(Some),
        Some(_) => None,
    }
}

/// Whether the calling program asked for MPI_THREAD_MULTIPLE (the resident kernels serve one
/// caller at a time). Asked (a lock) only for calls the resident path could take.
fn thread_multiple() -> bool {
    crate::runtime::lock()
        .as_ref()
        .is_some_and(|rt| rt.thread_level == c::MPI_THREAD_MULTIPLE)
}

/// The shape of a GPU call (`red`: from [`gpu_call`]).
fn shape(spec: &CollSpec, red: Option<(KOp, KType)>) -> Shape {
    Shape {
        kind: spec.kind,
        nranks: spec.comm.size(),
        rank: spec.comm.rank,
        root: spec.root,
        bytes: spec.bytes,
        elem: red.map_or(1, |(_, t)| t.size()),
        in_place: spec.in_place,
    }
}

/// Whether GPU path `path` may take the call: a GPU call ([`gpu_call`]) that the path's own
/// rule accepts (`GpuPath::eligible`: resident kernels for small allreduce, alltoall and
/// allgather; NVLink with peer access on; host memory with it off).
pub(super) fn eligible(path: &dyn GpuPath, spec: &CollSpec) -> bool {
    gpu_call(spec).is_some_and(|red| path.eligible(&shape(spec, red), thread_multiple))
}

/// This rank's side of a GPU call: its contiguous send and receive ranges and its device.
struct Local {
    red: Option<(KOp, KType)>,
    send: Option<(usize, usize)>,
    recv: Option<(usize, usize)>,
    /// This rank's GPU when every buffer it passes is device memory of that GPU with the length
    /// the call needs.
    device: Option<i32>,
}

/// This rank's buffers of a GPU call ([`gpu_call`] gave `red`): its contiguous send and
/// receive ranges, its device when every buffer is device memory of one GPU with the length
/// the call needs, and whether any buffer needs staging (device or managed memory).
unsafe fn buffers(spec: &CollSpec, red: Option<(KOp, KType)>) -> (Local, bool) {
    use CollKind as K;
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
    // Classified once: each classification may ask the driver.
    let kinds: SmallVec<[crate::gpu::cache::PtrInfo; 2]> = [
        send.map(|x| x.0),
        recv.map(|x| x.0),
        spec.send
            .as_ref()
            .filter(|_| send.is_none())
            .map(|s| s.base),
        spec.recv
            .as_ref()
            .filter(|_| recv.is_none())
            .map(|s| s.base),
    ]
    .iter()
    .flatten()
    .map(|&p| crate::gpu::classify(p as *const u8))
    .collect();
    let dev = crate::gpu::cache::MemKind::Device;
    let device = match kinds.first() {
        Some(k0) if fit && kinds.iter().all(|k| k.kind == dev && k.device == k0.device) => {
            Some(k0.device)
        }
        _ => None,
    };
    let staged = kinds.iter().any(|k| k.kind.needs_staging());
    (
        Local {
            red,
            send,
            recv,
            device,
        },
        staged,
    )
}

/// The world's flag slots where the ranks of `spec`'s communicator agree through them
/// (`engine::agree`): MPI_COMM_WORLD on one node.
fn world_slots(spec: &CollSpec) -> Option<crate::engine::flag::Slots> {
    if spec.comm.ctx != 0 || !spec.comm.one_node {
        return None;
    }
    runtime::world_flag()
}

/// The agreement words where the ranks of `spec`'s communicator agree through them
/// (`engine::agree::words`): a communicator other than MPI_COMM_WORLD on one node whose context
/// id has a word.
fn comm_words(spec: &CollSpec) -> Option<Words> {
    if spec.comm.ctx == 0 || !spec.comm.one_node {
        return None;
    }
    runtime::agree_words().filter(|w| w.covers(spec.comm.ctx, &spec.comm.peers))
}

/// The agreement of a call on a communicator other than MPI_COMM_WORLD through the words
/// (`engine::agree::words`, `role` [`Role::Tell`] or [`Role::Round`]): whether every rank
/// passes device memory. The communicator's first such call exchanges every member's last
/// number (one allgather, which is also that call's agreement).
fn agree_on_words(host: &GpuHost, w: Words, role: Role, device: bool) -> MpiResult<bool> {
    let c = host.call.as_ref().expect("inside a call");
    let comm = host.comm;
    let (me, st) = (comm.peers[comm.rank], &comm.agree);
    let no = host.next_no()?.expect("inside a call");
    let Some(v) = st.number(no) else {
        let mine = w.last(me, comm.ctx) >> 1 << 1 | device as u64;
        let all = host.allgather(&mine.to_le_bytes())?;
        let all: Vec<u64> = all
            .chunks_exact(8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
            .collect();
        return Ok(st.start(&all));
    };
    if role == Role::Tell {
        w.tell(me, comm.ctx, v);
        return Ok(false);
    }
    let mut watch = c.watch.borrow_mut();
    let mut idle = idle_with(w.is_oversubscribed(), watch.as_mut());
    let r = w.round(me, comm.ctx, &comm.peers, v, st, &mut idle);
    drop(idle);
    r.map_err(|e| check_refine(watch.as_ref(), e))
}

/// Run an eligible call, number `no` of its communicator, on GPU path `path`. `Ok(false)`:
/// declined on every rank (the agreement round, the descriptor exchange, the resident
/// kernels' ok bits).
///
/// On MPI_COMM_WORLD the ranks agree in a round of the flag slots, which a rank that has never
/// passed device memory to a collective does not wait for (`engine::agree`: it skips a call
/// the flag slots serve, and tells its "no" in a larger one). On other communicators of one
/// node they agree through the words (`engine::agree::words`): a rank whose buffers are host
/// memory tells its "no" with one store and goes on. A path whose communicator state is ready
/// (the resident kernels) agrees by itself, and so do calls once a round found that every rank
/// has seen (world, larger calls) or passes (other communicators) device memory; so do
/// communicators without words (a context id above `words::CTXS`).
pub(super) unsafe fn run(path: &dyn GpuPath, spec: &CollSpec, no: CallNo) -> MpiResult<bool> {
    let Some(red) = gpu_call(spec) else {
        return Ok(false);
    };
    let (local, staged) = buffers(spec, red);
    let world = world_slots(spec);
    let state = runtime::world_agree();
    if staged {
        state.see();
    }
    let small = world.is_some() && flag_eligible(spec).is_some();
    let mut ready = None;
    let mut is_ready = || *ready.get_or_insert_with(|| path.ready(&spec.comm.gpu));
    let comm_words = match world {
        Some(_) => None,
        None => comm_words(spec),
    };
    let role = match (world, comm_words) {
        (Some(_), _) => agree::role(
            small,
            local.device.is_some(),
            state.seen(),
            &mut is_ready,
            state.stable(),
        ),
        (None, Some(_)) => words::comm_role(
            local.device.is_some(),
            state.seen(),
            &mut is_ready,
            spec.comm.agree.stable(),
        ),
        (None, None) => Role::Trust,
    };
    if role == Role::Skip {
        return Ok(false);
    }
    let host = GpuHost::for_call(spec, no);
    if let (Some(w), Role::Tell | Role::Round) = (comm_words, role) {
        if !agree_on_words(&host, w, role, local.device.is_some())? {
            return Ok(false);
        }
    }
    if let (Some(slots), Role::Tell | Role::Round) = (world, role) {
        let k = host.next_no()?.expect("inside a call").flag();
        let c = host.call.as_ref().expect("inside a call");
        let words = agreement_words(&c.rec.get());
        let mut watch = c.watch.borrow_mut();
        let mut idle = idle_with(slots.is_oversubscribed(), watch.as_mut());
        if role == Role::Tell {
            agree::tell(&slots, k, words, &mut idle).map_err(|e| check_refine(None, e))?;
            return Ok(false);
        }
        let mine = agree::Part {
            device: local.device.is_some(),
            seen: state.seen(),
            words,
        };
        let v = agree::round(&slots, state, k, mine, &mut idle);
        drop(idle);
        let v = v.map_err(|e| check_refine(watch.as_ref(), e))?;
        drop(watch);
        if let Some(class) = v.mismatch {
            return Err(host.agreement_error(c, class, None));
        }
        if !v.device {
            return Ok(false);
        }
    }
    let Local {
        red,
        send,
        recv,
        device,
    } = local;
    let call = Call {
        shape: shape(spec, red),
        send,
        recv,
        red,
        device,
        seq: no.seq,
        thread_multiple,
    };
    path.run(&call, &host, is_ready())
}
