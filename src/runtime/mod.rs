//! The MPI runtime of this process, below the dispatch layer and above the engine, the GPU
//! layer, the schedules and the bootstrap: the objects behind MPI handles (communicators,
//! groups, error handlers, info, keyvals and ops in [`objects`], datatypes in [`types`],
//! requests in [`request`]), the init/finalize phase ([`state`]), what the engine and the GPU
//! layer are handed ([`devices`]), and the runtime itself (this file): bootstrap, engine,
//! requests and MPI_COMM_WORLD's shared-memory collective state, and the one lock under which
//! progress is made. The C ABI (`abi/`) checks arguments, translates handles through these
//! tables and raises errors; the collective dispatch (`dispatch/`) runs calls over them.
//!
//! Progress model (the only place it is decided): no hidden threads. Any
//! application thread inside an MPI call takes `RT`, makes progress (engine +
//! active nonblocking collectives), checks its condition and releases the
//! lock; blocking calls repeat this with a [`Backoff`] (spin, yield, sleep),
//! so several threads (MPI_THREAD_MULTIPLE) and oversubscribed ranks all make
//! progress. User callbacks (reduction ops excepted) never run under `RT`.

pub mod devices;
pub mod objects;
pub mod request;
pub mod state;
pub mod types;

use crate::bootstrap::{self, Bootstrap};
use crate::engine::collcheck::Rings;
use crate::engine::flag::{Slots, SLOT_MAX};
use crate::engine::scratch::Scratch;
use crate::engine::{Backoff, Engine};
use crate::mpi::error::MpiResult;
use crate::mpi::group::Group;
use crate::mpi::handles::{Kind, Slab};
use crate::mpi_bail;
use crate::standard::consts as c;
use objects::CommObj;
use request::{ReqKind, Request, Status};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::ThreadId;

pub struct Runtime {
    pub boot: Box<dyn Bootstrap + Send>,
    pub engine: Engine,
    pub reqs: Slab<Request>,
    /// Handles of nonblocking collectives still running (advanced by every progress call).
    pub active: Vec<usize>,
    pub thread_level: i32,
    pub main_thread: ThreadId,
    /// Context-id allocation bitmap: bit set = id in use (ids 0 and 1: WORLD and SELF).
    pub ctx_used: [u64; CTX_WORDS],
}

/// MPI_COMM_WORLD's flag collective slots (`engine::flag`), used without the runtime lock:
/// installed at MPI_Init (unless there is one rank, `GPUMPI_SHM_COLL_MAX=0`, or the transport
/// offers none), switched off in MPI_Finalize before the segments are unmapped. `seq` is the
/// number of the last call that used them.
/// The scratch areas (`engine::scratch`) live and die with the slots, under the same flag;
/// `mid_max` is the largest message they serve and `mid_seq` the number of their last call.
struct WorldFlag {
    slots: OnceLock<Slots>,
    live: AtomicBool,
    seq: AtomicU64,
    mid: OnceLock<(Scratch, usize)>,
    mid_seq: AtomicU64,
}

static WORLD_FLAG: WorldFlag = WorldFlag {
    slots: OnceLock::new(),
    live: AtomicBool::new(false),
    seq: AtomicU64::new(0),
    mid: OnceLock::new(),
    mid_seq: AtomicU64::new(0),
};

/// MPI_COMM_WORLD's collective scratch areas and the largest message they serve
/// (`GPUMPI_SHM_MID_MAX`), while MPI is running.
#[inline]
pub fn world_mid() -> Option<(Scratch, usize)> {
    if WORLD_FLAG.live.load(Ordering::Acquire) {
        WORLD_FLAG.mid.get().copied()
    } else {
        None
    }
}

/// Number the next call through the world's scratch areas (as [`next_flag_seq`]).
#[inline]
pub fn next_mid_seq() -> u64 {
    bump(&WORLD_FLAG.mid_seq)
}

/// MPI_COMM_WORLD's flag slots while MPI is running (see [`WorldFlag`]).
#[inline]
pub fn world_flag() -> Option<Slots> {
    if WORLD_FLAG.live.load(Ordering::Acquire) {
        WORLD_FLAG.slots.get().copied()
    } else {
        None
    }
}

/// The collective record rings of the ranks of this node (`engine::collcheck`) and
/// MPI_COMM_WORLD's object (its collective sequence, for the flag calls that do not look the
/// communicator up), installed at MPI_Init, switched off in MPI_Finalize with the flag slots.
static RINGS: OnceLock<Rings> = OnceLock::new();
static WORLD: OnceLock<Arc<CommObj>> = OnceLock::new();
static RINGS_LIVE: AtomicBool = AtomicBool::new(false);

/// The collective record rings while MPI is running.
#[inline]
pub fn rings() -> Option<Rings> {
    if RINGS_LIVE.load(Ordering::Acquire) {
        RINGS.get().copied()
    } else {
        None
    }
}

/// MPI_COMM_WORLD's object (set at MPI_Init).
#[inline]
pub fn world_comm() -> Option<&'static Arc<CommObj>> {
    WORLD.get()
}

/// Number the next call through the world's flag slots. Collective calls on one communicator
/// never overlap (MPI: the application orders them, also across threads), so a load and a store
/// suffice.
#[inline]
pub fn next_flag_seq() -> u64 {
    bump(&WORLD_FLAG.seq)
}

/// One more than the counter's value, stored back (one thread at a time, see next_flag_seq).
#[inline]
fn bump(a: &AtomicU64) -> u64 {
    let k = a.load(Ordering::Relaxed) + 1;
    a.store(k, Ordering::Relaxed);
    k
}

pub const CTX_WORDS: usize = 64;

static RT: Mutex<Option<Runtime>> = Mutex::new(None);

pub fn lock() -> MutexGuard<'static, Option<Runtime>> {
    RT.lock().unwrap_or_else(|e| e.into_inner())
}

/// Run `f` on the runtime; MPI_ERR_OTHER before MPI_Init or after MPI_Finalize.
pub fn with<R>(f: impl FnOnce(&mut Runtime) -> MpiResult<R>) -> MpiResult<R> {
    let mut g = lock();
    match g.as_mut() {
        Some(rt) => f(rt),
        None => not_running(),
    }
}

fn not_running<R>() -> MpiResult<R> {
    if state::is_finalized() {
        mpi_bail!(MPI_ERR_OTHER, "called after MPI_Finalize")
    } else {
        mpi_bail!(MPI_ERR_OTHER, "called before MPI_Init")
    }
}

pub fn world_rank() -> MpiResult<usize> {
    with(|rt| Ok(rt.boot.rank()))
}

pub fn world_size() -> MpiResult<usize> {
    with(|rt| Ok(rt.boot.size()))
}

impl Runtime {
    /// One round of progress: the engine, then every active nonblocking collective. Returns
    /// whether the engine moved anything (a frame in or out, a read, a device copy polled).
    pub fn progress(&mut self) -> bool {
        let did = self.engine.progress();
        let mut i = 0;
        while i < self.active.len() {
            let h = self.active[i];
            let done = match self.reqs.get_mut(h) {
                Some(r) => r.advance(&mut self.engine),
                None => true,
            };
            if done {
                self.active.swap_remove(i);
            } else {
                i += 1;
            }
        }
        did
    }
}

/// Block until `done` returns true, making progress in between.
pub fn wait_until(mut done: impl FnMut(&mut Runtime) -> MpiResult<bool>) -> MpiResult<()> {
    let mut backoff = Backoff::new();
    loop {
        {
            let mut g = lock();
            let Some(rt) = g.as_mut() else {
                return not_running();
            };
            let moved = rt.progress();
            if done(rt)? {
                return Ok(());
            }
            if moved || rt.engine.device_copies_pending() {
                // Data is flowing (a message streamed through the ring takes many rounds), or
                // only polling sees a device copy end: no sleeping, spin again.
                backoff.reset();
            }
        }
        backoff.snooze();
    }
}

/// Whether `size` ranks outnumber this process's CPUs (they then share cores on one node).
fn oversubscribed(size: usize) -> bool {
    // SAFETY: sysconf with a valid name has no preconditions.
    let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize;
    size > online
}

/// Bootstrap keys of the variables that must be the same on every rank: their digest, and
/// their values (read only when digests differ).
const SAME_DIGEST_KEY: &str = "gpumpi-same-digest";
const SAME_TEXT_KEY: &str = "gpumpi-same";

/// Fail MPI_Init when a variable that must be the same on every rank differs (after a fence that
/// published every rank's [`SAME_DIGEST_KEY`] and [`SAME_TEXT_KEY`]). Every rank compares every
/// digest, so all fail together, with the same message.
fn check_same_on_every_rank(boot: &dyn Bootstrap, mine: &str) -> MpiResult<()> {
    let digest = crate::config::digest(mine);
    let others = (0..boot.size()).filter(|&r| r != boot.rank());
    let mut same = true;
    for r in others {
        same &= boot.get(r, SAME_DIGEST_KEY)? == digest.as_bytes();
    }
    if same {
        return Ok(());
    }
    let texts = (0..boot.size())
        .map(|r| Ok(String::from_utf8_lossy(&boot.get(r, SAME_TEXT_KEY)?).into_owned()))
        .collect::<MpiResult<Vec<String>>>()?;
    match crate::config::first_mismatch(&texts) {
        Some(msg) => mpi_bail!(MPI_ERR_OTHER, "{msg}"),
        None => Ok(()),
    }
}

/// MPI_Init / MPI_Init_thread.
pub fn init(required: i32) -> MpiResult<i32> {
    if state::is_initialized() {
        if state::is_finalized() {
            mpi_bail!(
                MPI_ERR_OTHER,
                "MPI cannot be initialized again after MPI_Finalize"
            );
        }
        mpi_bail!(MPI_ERR_OTHER, "MPI is already initialized");
    }
    crate::config::init_logging();
    let cfg = crate::config::snapshot();
    let t0 = std::time::Instant::now();
    let boot = bootstrap::init()?;
    let (rank, size) = (boot.rank(), boot.size());
    // Published with the transport's addresses (one fence), compared once it is up.
    let same = crate::config::same_on_every_rank_text();
    boot.put(SAME_DIGEST_KEY, crate::config::digest(&same).as_bytes());
    boot.put(SAME_TEXT_KEY, same.as_bytes());
    let allgather = |mine: &str| -> MpiResult<Vec<String>> {
        boot.put("gpumpi-shm", mine.as_bytes());
        boot.fence()?;
        (0..size)
            .map(|r| match r == rank {
                true => Ok(mine.to_string()),
                false => Ok(String::from_utf8_lossy(&boot.get(r, "gpumpi-shm")?).into_owned()),
            })
            .collect()
    };
    let transport = crate::transport::shm::ShmTransport::establish_keyed(
        boot.job_id(),
        rank,
        size,
        allgather,
        || boot.fence(),
    )?;
    check_same_on_every_rank(&*boot, &same)?;
    tracing::debug!(
        footprint = transport.footprint(),
        "shared-memory transport ready (bytes of /dev/shm per rank)"
    );
    let mut engine = Engine::new(Box::new(transport), rank, size);
    engine.set_device_copies(Box::new(devices::Cuda));
    crate::engine::backoff::set_placement(engine.own_core(), oversubscribed(size));
    let flag_max = cfg.shm.coll_max.min(SLOT_MAX);
    let flag = match engine.coll_slots() {
        Some(bases) if size > 1 && flag_max > 0 => {
            // One small table per process, alive until exit (MPI is initialized once).
            let bases: &'static [usize] = Box::leak(bases.into_boxed_slice());
            // SAFETY: the transport's slot areas (Transport::coll_slots contract) stay mapped
            // while the runtime holds the engine; Slots are only used inside MPI calls, which
            // fail before touching them once MPI_Finalize dropped the runtime.
            Some(unsafe { Slots::new(bases, rank, flag_max) }.oversubscribed(oversubscribed(size)))
        }
        _ => None,
    };
    let mid_max = crate::config::get_usize("GPUMPI_SHM_MID_MAX");
    let mid = match engine.coll_scratch() {
        Some((bases, cap)) if flag.is_some() && mid_max > 0 && cap > 0 => {
            let bases: &'static [usize] = Box::leak(bases.into_boxed_slice());
            // SAFETY: as for the slots: the transport's scratch areas (Transport::coll_scratch
            // contract) stay mapped while the runtime holds the engine.
            let s = unsafe { Scratch::new(bases, rank, cap) }.oversubscribed(oversubscribed(size));
            Some((s, mid_max))
        }
        _ => None,
    };
    let world = CommObj::new(
        0,
        Arc::new(Group::new((0..size).collect())),
        rank,
        "MPI_COMM_WORLD",
    );
    let selfc = CommObj::new(1, Arc::new(Group::new(vec![rank])), 0, "MPI_COMM_SELF");
    let world = Arc::new(world);
    let _ = WORLD.set(world.clone());
    let records = engine.coll_records();
    if records.len() == size && records[rank] != 0 {
        let bases: &'static [usize] = Box::leak(records.into_boxed_slice());
        // SAFETY: the transport's record rings (Transport::coll_records contract) stay mapped
        // while the runtime holds the engine; the rings are used only inside MPI calls and
        // switched off in MPI_Finalize before the runtime is dropped.
        let _ = RINGS.set(unsafe { Rings::new(bases, rank) });
        RINGS_LIVE.store(true, Ordering::Release);
    }
    {
        let mut o = objects::objects();
        o.world = Some(world);
        o.self_ = Some(Arc::new(selfc));
    }
    let provided = required.clamp(c::MPI_THREAD_SINGLE, c::MPI_THREAD_MULTIPLE);
    let mut ctx_used = [0u64; CTX_WORDS];
    ctx_used[0] = 0b11;
    *lock() = Some(Runtime {
        boot,
        engine,
        reqs: Slab::new(Kind::Request),
        active: Vec::new(),
        thread_level: provided,
        main_thread: std::thread::current().id(),
        ctx_used,
    });
    if let Some(f) = flag {
        if let Some(m) = mid {
            let _ = WORLD_FLAG.mid.set(m);
        }
        let _ = WORLD_FLAG.slots.set(f);
        WORLD_FLAG.live.store(true, Ordering::Release);
    }
    state::set_initialized();
    tracing::info!(
        rank,
        size,
        "MPI_Init done in {:.3} ms",
        t0.elapsed().as_secs_f64() * 1e3
    );
    Ok(provided)
}

/// MPI_Finalize: synchronize (so every message sent has been received), then tear down.
/// `barrier`: MPI_COMM_WORLD's barrier (the collectives live above the runtime).
pub fn finalize(barrier: impl FnOnce() -> MpiResult<()>) -> MpiResult<()> {
    with(|_| Ok(()))?;
    // Communicators' GPU state: every rank closes its mappings of peers' memory before the
    // barrier and frees its own after it (gpu::comm).
    crate::gpu::comm::finalize_begin();
    barrier()?;
    crate::gpu::comm::finalize_end();
    WORLD_FLAG.live.store(false, Ordering::Release);
    RINGS_LIVE.store(false, Ordering::Release);
    let rt = lock().take();
    if let Some(rt) = rt {
        rt.boot.finalize()?;
    }
    {
        let mut o = objects::objects();
        o.world = None;
        o.self_ = None;
    }
    state::set_finalized();
    Ok(())
}

/// A fatal error: print it and end the whole job with `code`.
pub fn fatal(text: &str, code: i32) -> ! {
    abort(code.clamp(1, 255), &format!("gpumpi: fatal error: {text}"))
}

/// End the whole job through the launcher (MPI_Abort and fatal errors).
pub fn abort(code: i32, msg: &str) -> ! {
    // Never block here: if another thread holds the lock, fall back to exiting.
    if let Ok(mut g) = RT.try_lock() {
        if let Some(rt) = g.as_mut() {
            rt.boot.abort(code, msg);
        }
    }
    eprintln!("{msg}");
    std::process::exit(code)
}

/// Insert a request and return its handle.
pub fn new_request(rt: &mut Runtime, r: Request) -> usize {
    let coll = matches!(r.kind, ReqKind::Coll { .. });
    let h = rt.reqs.insert(r);
    if coll {
        rt.active.push(h);
    }
    h
}

/// Block until the operation completes; return its status (error in the status -> Err).
pub fn wait_kind(kind: ReqKind) -> MpiResult<Status> {
    wait_request(Request::new(kind))
}

pub fn wait_request(req: Request) -> MpiResult<Status> {
    let mut req = Some(req);
    let mut out = None;
    wait_until(|rt| {
        let r = req.as_mut().unwrap();
        match r.test(&mut rt.engine)? {
            Some(st) => {
                out = Some(st);
                Ok(true)
            }
            None => Ok(false),
        }
    })?;
    Ok(out.unwrap())
}
