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
pub mod stream;
pub mod types;

use crate::bootstrap::{self, node, wire, Bootstrap};
use crate::engine::collcheck::Rings;
use crate::engine::flag::{Slots, SLOT_MAX};
use crate::engine::scratch::Scratch;
use crate::engine::{Backoff, Engine};
use crate::mpi::error::{MpiError, MpiResult};
use crate::mpi::group::Group;
use crate::mpi::handles::{Kind, Slab};
use crate::mpi_bail;
use crate::standard::consts as c;
use crate::transport::net::frames::NetFrames;
use crate::transport::net::links::Links;
use crate::transport::net::{Handle, HANDLE_BYTES};
use crate::transport::route::Routed;
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
    /// Ids offered by a context-id allocation in flight on this rank (not offered again
    /// until it ends), and the parents' context ids of the allocations in flight.
    pub ctx_offered: [u64; CTX_WORDS],
    pub ctx_allocating: Vec<u32>,
}

/// MPI_COMM_WORLD's flag collective slots (`engine::flag`), used without the runtime lock:
/// installed at MPI_Init (unless there is one rank, `GPUMPI_SHM_COLL_MAX=0`, or the transport
/// offers none), switched off in MPI_Finalize before the segments are unmapped. Calls through
/// them are numbered by MPI_COMM_WORLD's collective sequence (`engine::collcheck::CallNo`).
/// The scratch areas (`engine::scratch`) live and die with the slots, under the same flag,
/// with the largest message they serve.
struct WorldFlag {
    slots: OnceLock<Slots>,
    live: AtomicBool,
    mid: OnceLock<(Scratch, usize)>,
}

static WORLD_FLAG: WorldFlag = WorldFlag {
    slots: OnceLock::new(),
    live: AtomicBool::new(false),
    mid: OnceLock::new(),
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

/// MPI_COMM_WORLD's flag slots while MPI is running (see [`WorldFlag`]).
#[inline]
pub fn world_flag() -> Option<Slots> {
    if WORLD_FLAG.live.load(Ordering::Acquire) {
        WORLD_FLAG.slots.get().copied()
    } else {
        None
    }
}

/// The agreement words of the ranks of this node (`engine::agree::words`), while MPI is running.
static AGREE_WORDS: OnceLock<crate::engine::agree::words::Words> = OnceLock::new();
static AGREE_WORDS_LIVE: AtomicBool = AtomicBool::new(false);

/// [`AGREE_WORDS`] while MPI is running.
#[inline]
pub fn agree_words() -> Option<crate::engine::agree::words::Words> {
    if AGREE_WORDS_LIVE.load(Ordering::Acquire) {
        AGREE_WORDS.get().copied()
    } else {
        None
    }
}

/// This process's side of the GPU paths' agreement on MPI_COMM_WORLD (`engine::agree`):
/// whether it has passed device memory to a collective, and whether every rank has.
static WORLD_AGREE: crate::engine::agree::State = crate::engine::agree::State::new();

/// [`WORLD_AGREE`].
#[inline]
pub fn world_agree() -> &'static crate::engine::agree::State {
    &WORLD_AGREE
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

/// Block until `done` returns true, making progress in between (one pass per hold of the
/// runtime lock).
pub fn wait_until(mut done: impl FnMut(&mut Runtime) -> MpiResult<bool>) -> MpiResult<()> {
    wait_loop(false, 1, |rt, _| done(rt))
}

/// Progress passes one hold of the runtime lock makes in [`wait_engine`] while spinning.
const WAIT_BURST: usize = 8;

/// Block until engine request `id` (a point-to-point operation of the engine alone: no post
/// step, no runtime request) completes; returns its status and releases it. Like
/// [`wait_until`], but while the backoff still spins, and the ranks do not outnumber the
/// cores, each hold of the lock makes up to [`WAIT_BURST`] passes back to back without the
/// pause between them ([`Backoff::burst`]): an arrival is seen sooner, and the lock is taken
/// and released once per burst instead of once per pass (measured here: `pause` 24 ns, an
/// uncontended lock and unlock 9.5 ns). Another thread of the process gets the lock between
/// bursts, as it did between passes, but less often while this one spins.
pub fn wait_engine(id: crate::engine::ReqId) -> MpiResult<crate::engine::Status> {
    let mut st = None;
    wait_bursts(false, |rt, _| {
        st = rt.engine.take(id);
        Ok(st.is_some())
    })?;
    Ok(st.expect("wait_bursts returns when done"))
}

/// A blocking receive of host memory through the engine alone ([`Engine::recv_direct`]):
/// received at once when its message is here, else waited for without a request while it can
/// (the waiting receive is given up if the wait ends early: an error or an unwind), else as
/// the engine request it was posted as or became; the wait is [`wait_engine`]'s.
///
/// # Safety
/// `r.buf .. r.buf + r.cap` is host memory valid to write, and the receive's, until this
/// returns.
pub unsafe fn recv_blocking(r: &crate::engine::RecvArgs) -> MpiResult<crate::engine::Status> {
    use crate::engine::DirectStart;
    /// Gives up the receive waiting without a request unless disarmed.
    struct Abandon(bool);
    impl Drop for Abandon {
        fn drop(&mut self) {
            if self.0 {
                let _ = with(|rt| {
                    rt.engine.direct_abandon();
                    Ok(())
                });
            }
        }
    }
    // SAFETY: the caller's contract; the wait below lasts until the receive is done, or
    // gives it up.
    match with(|rt| unsafe { rt.engine.recv_direct(r) })? {
        DirectStart::Received(s) => return Ok(s),
        DirectStart::Posted(id) => return wait_engine(id),
        DirectStart::Waiting => {}
    }
    let mut armed = Abandon(true);
    let mut st = None;
    let mut req = None;
    wait_bursts(false, |rt, _| {
        if req.is_none() {
            let Some(out) = rt.engine.direct_poll() else {
                return Ok(false);
            };
            // The receive no longer waits without a request: nothing to give up (another
            // thread's may wait that way from now on).
            armed.0 = false;
            match out {
                Ok(s) => {
                    st = Some(s);
                    return Ok(true);
                }
                Err(id) => req = Some(id),
            }
        }
        st = req.and_then(|id| rt.engine.take(id));
        Ok(st.is_some())
    })?;
    Ok(st.expect("wait_bursts returns when done"))
}

/// Block until `done` returns true: [`wait_engine`]'s loop (progress passes in bursts while
/// spinning) for any test. With `look_first`, `done` is asked once before the first progress
/// pass, so an operation that completed already (an eager send written at its start, a receive
/// that matched at its post) costs no pass; `done` must then be correct without one just
/// before it. `done`'s second argument is true on its first call in each hold of the runtime
/// lock (what it resolved in an earlier hold may have changed since).
pub fn wait_bursts(
    look_first: bool,
    done: impl FnMut(&mut Runtime, bool) -> MpiResult<bool>,
) -> MpiResult<()> {
    wait_loop(look_first, WAIT_BURST, done)
}

/// The wait loop of [`wait_until`] and [`wait_bursts`]: up to `most` progress passes per hold
/// of the runtime lock while the backoff spins ([`Backoff::burst`]), `done` asked after each.
fn wait_loop(
    look_first: bool,
    most: usize,
    mut done: impl FnMut(&mut Runtime, bool) -> MpiResult<bool>,
) -> MpiResult<()> {
    let mut backoff = Backoff::new();
    let mut first = look_first;
    let mut fds = Vec::new();
    let mut since = std::time::Instant::now();
    // A blocking wait that only the network can move (a rank alone on its node, see
    // [`crate::engine::Engine::wait_fds`]) sleeps in `poll` on the network sockets after a
    // while without progress: a rank that never sleeps loses its core for whole time slices on
    // a machine with more runnable threads than cores. Until then it polls and yields its CPU
    // between polls ([`wait_yields`]) for [`NET_YIELD`], or spins for `GPUMPI_NET_SLEEP_AFTER`.
    let long_sleeps = crate::engine::backoff::sleeps_long();
    let alone = crate::engine::backoff::alone();
    let block_after = crate::config::snapshot().net.sleep_after;
    let mut slept = false;
    // Whether a progress pass of this wait moved anything yet.
    let mut moved_ever = false;
    // While spinning, the clock is read every CLOCK_EVERY-th round only (a read every round
    // costs about a tenth of a spinning rank's time; a wait that may yield looks every round,
    // so that a network-only one yields from its first rounds); `moved_any` says whether
    // anything moved since the last read, which then restarts `since`.
    const CLOCK_EVERY: u32 = 16;
    let (mut rounds, mut moved_any) = (0u32, false);
    // The wait is network-only and has not gone `block_after` without progress: it yields.
    let mut yielding = false;
    loop {
        let mut block = false;
        {
            let mut g = lock();
            let Some(rt) = g.as_mut() else {
                return not_running();
            };
            let mut fresh = true;
            if std::mem::take(&mut first) && done(rt, std::mem::take(&mut fresh))? {
                return Ok(());
            }
            for _ in 0..backoff.burst(most) {
                let moved = rt.progress();
                if done(rt, std::mem::take(&mut fresh))? {
                    return Ok(());
                }
                if moved || rt.engine.device_copies_pending() {
                    // Data is flowing (a message streamed through the ring takes many
                    // rounds), or only polling sees a device copy end: no sleeping, spin again.
                    backoff.reset();
                    moved_any = true;
                    moved_ever = true;
                }
            }
            if backoff.time_to_look() && rt.engine.shares_cpu() {
                backoff.give_way();
            }
            rounds = rounds.wrapping_add(1);
            if let Some(after) = block_after {
                let yields = wait_yields(long_sleeps, alone, moved_ever);
                let (b, clock_every) = if yields {
                    (NET_YIELD, 1)
                } else {
                    (after, CLOCK_EVERY)
                };
                if yielding || backoff.is_sleeping() || rounds.is_multiple_of(clock_every) {
                    // A wait whose data is flowing (bytes moved since the last look) spins on
                    // without yielding; one that spins first has nothing to decide before `b`.
                    let moved = std::mem::take(&mut moved_any);
                    if moved {
                        since = std::time::Instant::now();
                    }
                    let idle = since.elapsed();
                    let mut step = NetWait::Backoff;
                    if !moved && (yields || idle >= b) {
                        fds.clear();
                        let net_only =
                            rt.active.is_empty() && rt.engine.wait_fds(&mut fds) && !fds.is_empty();
                        step = net_wait(net_only, idle, b, yields);
                    }
                    block = step == NetWait::Sleep;
                    yielding = step == NetWait::Yield;
                }
            }
        }
        if block {
            // Only the network can move this wait on: sleep in the kernel until a socket is
            // ready (or the timeout, which bounds what the descriptors might miss).
            backoff.block(|t| {
                // Where the ranks outnumber the CPUs a sleep lasts until the data comes: the
                // descriptors show all the wait needs, and each early wake-up is a progress
                // pass of CPU time the other ranks need (benches/NOTES.md).
                let t = if long_sleeps { LONG_SLEEP } else { t };
                let t0 = std::time::Instant::now();
                let woken = crate::sys::socket::ppoll(&mut fds, t).is_ok_and(|n| n > 0);
                SLEEPS.note(!std::mem::replace(&mut slept, true), woken, t0.elapsed());
            });
        } else if yielding {
            std::thread::yield_now();
        } else {
            backoff.snooze();
        }
    }
}

/// Whether a network-only wait polls and yields its CPU between polls before it sleeps (for
/// [`NET_YIELD`]) rather than spinning (for `GPUMPI_NET_SLEEP_AFTER`): where the job's ranks
/// outnumber the CPUs (`long_sleeps`, [`crate::engine::backoff::sleeps_long`]), and in any
/// wait of a rank `alone` on its node until its first progress pass that moves something
/// (`moved_ever`), that is while it waits for an answer. A yielding rank stays runnable and
/// gets the CPU back at the next yield point of whatever shares it, where a rank woken from
/// `poll` first waits for the CPU: on a machine busy with other work, the rest of another
/// process's time slice (2 namespace nodes beside a spinning process, 8 B one way 10.1-15.6 us
/// yielding first, 80.6-131.9 sleeping; 4 ranks on 4 namespace nodes of 2 CPUs, 8 B allreduce
/// 47-60 us yielding, 91-115 sleeping; benches/NOTES.md). Once data flows, the wait spins and
/// sleeps instead: yields between the pieces of a stream take the CPU from the threads that
/// move it (window-64 bandwidth at 1 MiB between 2 namespace nodes of 2 CPUs: 1.46 GB/s
/// yielding throughout, 1.89 yielding only before the first piece, 1.94 never yielding).
fn wait_yields(long_sleeps: bool, alone: bool, moved_ever: bool) -> bool {
    long_sleeps || (alone && !moved_ever)
}

/// What a blocking wait of a rank alone on its node does next ([`wait_loop`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NetWait {
    /// Something besides the network can move it: the back-off's spin, yield and sleep.
    Backoff,
    /// Only the network can: poll again after yielding the CPU.
    Yield,
    /// Only the network can, and nothing moved for `GPUMPI_NET_SLEEP_AFTER`: sleep in `poll`.
    Sleep,
}

/// [`NetWait`] for a wait that only the network can move (`net_only`), idle for `idle`, that
/// may sleep after `after` and until then yields between polls (`yields`) or spins.
fn net_wait(
    net_only: bool,
    idle: std::time::Duration,
    after: std::time::Duration,
    yields: bool,
) -> NetWait {
    match (net_only, idle >= after, yields) {
        (false, _, _) => NetWait::Backoff,
        (true, true, _) => NetWait::Sleep,
        (true, false, true) => NetWait::Yield,
        (true, false, false) => NetWait::Backoff,
    }
}

/// How long a network-only wait that yields ([`wait_yields`]) polls and yields without
/// progress before it sleeps ([`wait_loop`]).
const NET_YIELD: std::time::Duration = std::time::Duration::from_millis(3);

/// The longest sleep in `poll` of a network-only wait where the ranks outnumber the CPUs
/// ([`crate::engine::backoff::sleeps_long`], [`wait_loop`]).
const LONG_SLEEP: std::time::Duration = std::time::Duration::from_millis(1);

/// How this process's blocking waits slept in `poll` ([`wait_loop`]), for the log at
/// `MPI_Finalize` (`GPUMPI_DEBUG=2`): the waits that slept at all, the sleeps, those ended by
/// a ready socket (the rest by their timeout), and the time asleep.
struct Sleeps {
    waits: AtomicU64,
    sleeps: AtomicU64,
    woken: AtomicU64,
    ns: AtomicU64,
}

static SLEEPS: Sleeps = Sleeps {
    waits: AtomicU64::new(0),
    sleeps: AtomicU64::new(0),
    woken: AtomicU64::new(0),
    ns: AtomicU64::new(0),
};

impl Sleeps {
    fn note(&self, first: bool, woken: bool, t: std::time::Duration) {
        self.waits.fetch_add(u64::from(first), Ordering::Relaxed);
        self.sleeps.fetch_add(1, Ordering::Relaxed);
        self.woken.fetch_add(u64::from(woken), Ordering::Relaxed);
        self.ns.fetch_add(t.as_nanos() as u64, Ordering::Relaxed);
    }

    fn report(&self) -> Option<String> {
        let sleeps = self.sleeps.load(Ordering::Relaxed);
        (sleeps > 0).then(|| {
            let ns = self.ns.load(Ordering::Relaxed);
            format!(
                "{} blocking waits slept in poll: {sleeps} sleeps ({} woken by a socket, the \
                 rest by their timeout), {:.1} us asleep, {:.2} us each",
                self.waits.load(Ordering::Relaxed),
                self.woken.load(Ordering::Relaxed),
                ns as f64 / 1e3,
                ns as f64 / 1e3 / sleeps as f64
            )
        })
    }
}

/// Whether `size` ranks outnumber this process's CPUs (they then share cores on one node).
fn oversubscribed(size: usize) -> bool {
    crowded(size, online_cpus(), None)
}

/// The CPUs online on this machine.
fn online_cpus() -> usize {
    // SAFETY: sysconf with a valid name has no preconditions.
    unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize
}

/// Whether a rank shares its cores with more ranks than there are: the `on_node` ranks of its
/// node outnumber the `online` CPUs, or (a job across nodes) the rank has less than one CPU to
/// itself among the job's ranks on its machine (`milli`: thousandths of a CPU,
/// `coll::pieces::milli_cpus`), as where emulated or namespace nodes share one machine.
fn crowded(on_node: usize, online: usize, milli: Option<usize>) -> bool {
    on_node > online || milli.is_some_and(|m| m < 1000)
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

/// Bootstrap key of each rank's machine and CPUs (`coll::pieces::RankCpus`), published by every
/// rank of a job of several ranks (for `GPUMPI_COLL_PIECE=auto` and the TCP backend's
/// `GPUMPI_NET_TCP_STRIPE=auto`).
const CPUS_KEY: &str = "gpumpi-cpus";

/// Where PXN is on (set at `MPI_Init`): the rail of every world rank, the job's bulk
/// threshold (the smallest rank's `GPUMPI_NET_BULK_MIN`, `off` counting as one frame's
/// payload) and the thousandths of a CPU the rank with the fewest has to itself
/// (`coll::pieces::milli_cpus`); the alltoall between nodes goes through the node leaders, the
/// rail aggregators or the PXN forwarders (`coll::alltoall::choice`, `CommObj::pxn_plan`).
static PXN_RAILS: OnceLock<(Vec<usize>, usize, usize)> = OnceLock::new();

/// The job's bulk threshold (the smallest rank's `GPUMPI_NET_BULK_MIN`, `off` counting as one
/// frame's payload), set at `MPI_Init` in a job that spans nodes: the same on every rank.
static JOB_BULK: OnceLock<usize> = OnceLock::new();

/// [`JOB_BULK`]: below it a message between nodes goes eagerly (the node-aggregated gatherv
/// and scatterv keep their packed messages below it, `coll::hier::through_leader`); one
/// frame's payload before `MPI_Init` set it.
pub fn job_bulk() -> usize {
    JOB_BULK
        .get()
        .copied()
        .unwrap_or(crate::transport::net::frames::MAX_PAYLOAD)
}

/// Each world rank's rail, the job's bulk threshold and its ranks' least thousandths of a CPU
/// where PXN is on, else `None`.
pub fn pxn_rails() -> Option<(&'static [usize], usize, usize)> {
    PXN_RAILS.get().map(|(r, b, c)| (r.as_slice(), *b, *c))
}

/// The piece size of large collectives between nodes chosen at `MPI_Init` ([`coll_piece`]).
static COLL_PIECE: OnceLock<usize> = OnceLock::new();

/// The most bytes per piece of a large collective between nodes (`dispatch::piped`; 0: whole
/// calls): `GPUMPI_COLL_PIECE` as given, or what `auto` chose at `MPI_Init` from every rank's
/// CPUs (the same on every rank). Before `MPI_Init` chose (no communicator spans nodes yet),
/// `auto` is 0.
pub fn coll_piece() -> usize {
    match COLL_PIECE.get() {
        Some(&p) => p,
        None => match crate::config::snapshot().coll.piece {
            crate::config::Piece::Bytes(n) => n,
            crate::config::Piece::Auto => 0,
        },
    }
}

/// Whether this rank's network backend takes device memory in bulk transfers (GPUDirect
/// RDMA, chosen at `MPI_Init`; false in a job on one node).
static NET_GDR: AtomicBool = AtomicBool::new(false);

/// Whether the collectives' schedules between nodes run on device buffers directly
/// (`GPUMPI_COLL_DEVICE`: `auto` where this rank does GPUDirect RDMA).
pub fn coll_device() -> bool {
    match crate::config::snapshot().coll.device {
        crate::config::CollDevice::On => true,
        crate::config::CollDevice::Off => false,
        crate::config::CollDevice::Auto => NET_GDR.load(Ordering::Relaxed),
    }
}

/// This rank's machine and CPUs, for `GPUMPI_COLL_PIECE=auto` (all CPUs online where the
/// affinity mask cannot be read).
fn own_cpus() -> crate::coll::pieces::RankCpus {
    let mut cpus = bootstrap::procs::allowed_cpus();
    if cpus.is_empty() {
        // SAFETY: sysconf with a valid name has no preconditions.
        let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize;
        cpus = (0..online).collect();
    }
    crate::coll::pieces::RankCpus {
        machine: node::machine_id(),
        cpus,
    }
}

/// How the log names a piece size (0: whole calls).
fn pieces_text(most: usize) -> String {
    match most {
        0 => "whole calls".to_string(),
        n => format!("in pieces of at most {n} bytes"),
    }
}

/// Every rank's CPUs ([`CPUS_KEY`], published at `MPI_Init` by every rank of a job that may
/// span nodes).
fn rank_cpus(boot: &dyn Bootstrap) -> MpiResult<Vec<crate::coll::pieces::RankCpus>> {
    use crate::coll::pieces::RankCpus;
    (0..boot.size())
        .map(|r| {
            let v = boot.get(r, CPUS_KEY)?;
            RankCpus::parse(&String::from_utf8_lossy(&v)).ok_or_else(|| {
                MpiError::other(format!("MPI_Init: rank {r}'s CPU list is malformed"))
            })
        })
        .collect()
}

/// Chooses the piece size of a job that spans nodes (after the fence that published every
/// rank's [`CPUS_KEY`]) when `GPUMPI_COLL_PIECE` is `auto`: every rank reads every rank's CPUs
/// and applies the same rule (`coll::pieces::choose`), so all choose alike. Rank 0 logs the
/// choice and its inputs once.
fn choose_piece(boot: &dyn Bootstrap, ranks: &[crate::coll::pieces::RankCpus]) -> MpiResult<usize> {
    use crate::coll::pieces;
    let n = match crate::config::snapshot().coll.piece {
        crate::config::Piece::Bytes(n) => {
            if boot.rank() == 0 {
                tracing::info!(
                    "collectives between nodes: {} (GPUMPI_COLL_PIECE={n})",
                    pieces_text(n)
                );
            }
            n
        }
        crate::config::Piece::Auto => {
            let c = pieces::choose(ranks);
            if boot.rank() == 0 {
                let machines: std::collections::BTreeSet<&str> =
                    ranks.iter().map(|r| r.machine.as_str()).collect();
                tracing::info!(
                    "collectives between nodes: {} (GPUMPI_COLL_PIECE=auto: fewest CPUs per \
                     rank {}.{:03} on rank {} ({} CPUs in its mask), {} ranks on {} machines, \
                     pieces need {} per rank)",
                    pieces_text(c.most),
                    c.least_milli / 1000,
                    c.least_milli % 1000,
                    c.rank,
                    ranks[c.rank].cpus.len(),
                    ranks.len(),
                    machines.len(),
                    pieces::PIECE_CPUS
                );
            }
            c.most
        }
    };
    Ok(n)
}

/// Bootstrap key of the job secret rank 0 makes for launchers that hand none to the ranks.
const NET_SECRET_KEY: &str = "gpumpi-net-secret";
/// Bootstrap key of each rank's network listen handle.
const NET_HANDLE_KEY: &str = "gpumpi-net";
/// Bootstrap key of each rank's rail (`topo::rail`).
const NET_RAIL_KEY: &str = "gpumpi-rail";

/// A job on several nodes: open the network backend (`GPUMPI_NET`) with the job secret, publish
/// this rank's listen handle (one fence) and connect to every rank on another node
/// (`remote[r]`), all at `MPI_Init`: every rank must be able to receive from any off-node peer
/// at any time (MPI_ANY_SOURCE), and a connection set up inside a later call would stall it for
/// a handshake. Each rank listens and connects through the device of its rail
/// (`topo::rail`), published with the handle; returns the rail of every rank too.
/// Collective over the job.
/// The network transport, every world rank's rail, and the job's bulk threshold (the smallest
/// rank's; `off` counts as one frame's payload).
fn open_network(
    boot: &dyn Bootstrap,
    remote: &[bool],
    cpus: &[crate::coll::pieces::RankCpus],
) -> MpiResult<(NetFrames, Vec<usize>, usize)> {
    let fail = |e: crate::transport::net::NetError| {
        MpiError::other(format!("MPI_Init: the job spans nodes: {e}"))
    };
    let secret = match boot.secret() {
        Some(s) => s,
        None => {
            let hex = boot.get(0, NET_SECRET_KEY)?;
            wire::from_hex(String::from_utf8_lossy(&hex).trim())
                .ok_or_else(|| MpiError::other("MPI_Init: rank 0's job secret could not be read"))?
        }
    };
    let mut net = crate::transport::net::open(&secret).map_err(fail)?;
    // Before any connection opens: the TCP backend stripes bulk data only where the ranks have
    // CPUs for its helper threads (`GPUMPI_NET_TCP_STRIPE`).
    let least = crate::coll::pieces::milli_cpus(cpus)
        .into_iter()
        .min()
        .unwrap_or(0);
    net.set_rank_cpus(least);
    let nics: Vec<String> = net.devices().iter().map(|d| d.name.clone()).collect();
    let (rail, how) = crate::topo::rail::from_config(
        &node::node_name(),
        boot.local_rank(),
        &nics,
        gpu_bus_id(boot.local_rank()).as_deref(),
    )
    .map_err(|e| MpiError::other(format!("MPI_Init: {e}")))?;
    tracing::info!(
        "rank {}: rail {rail} ({}; {} network devices), device {}",
        boot.rank(),
        how.name(),
        nics.len(),
        nics[rail % nics.len().max(1)]
    );
    let dev = rail % nics.len().max(1);
    let (handle, listener) = net.listen(dev).map_err(fail)?;
    boot.put(NET_HANDLE_KEY, wire::to_hex(&handle.0).as_bytes());
    // "<rail> <bulk threshold>": every rank learns every rank's rail, and the job's smallest
    // bulk threshold for the PXN alltoall's choice of schedule (`coll::alltoall::choice::Plan`).
    let bulk = crate::config::snapshot()
        .net
        .bulk_min
        .unwrap_or(crate::transport::net::frames::MAX_PAYLOAD);
    boot.put(NET_RAIL_KEY, format!("{rail} {bulk}").as_bytes());
    boot.fence()?;
    let mut relay = bulk;
    let rail_of = (0..remote.len())
        .map(|r| {
            if r == boot.rank() {
                return Ok(rail);
            }
            let v = String::from_utf8_lossy(&boot.get(r, NET_RAIL_KEY)?).into_owned();
            let mut it = v.split_whitespace().map(str::parse::<usize>);
            match (it.next(), it.next()) {
                (Some(Ok(q)), Some(Ok(b))) => {
                    relay = relay.min(b);
                    Ok(q)
                }
                _ => mpi_bail!(MPI_ERR_OTHER, "MPI_Init: rank {r}'s rail is malformed"),
            }
        })
        .collect::<MpiResult<Vec<usize>>>()?;
    let peers: Vec<usize> = (0..remote.len()).filter(|&r| remote[r]).collect();
    let handle_of = |p: usize| -> MpiResult<Option<Handle>> {
        if !remote[p] {
            return Ok(None);
        }
        let v = boot.get(p, NET_HANDLE_KEY)?;
        wire::from_hex(String::from_utf8_lossy(&v).trim())
            .and_then(|b| <[u8; HANDLE_BYTES]>::try_from(b).ok())
            .map(|h| Some(Handle(h)))
            .ok_or_else(|| {
                MpiError::other(format!("MPI_Init: rank {p}'s network handle is malformed"))
            })
    };
    let handles = (0..remote.len())
        .map(handle_of)
        .collect::<MpiResult<Vec<_>>>()?;
    let cfg = &crate::config::snapshot().net;
    let accept = cfg.accept_timeout;
    let eager = match &cfg.connect_eager {
        Ok(e) => *e,
        Err(msg) => mpi_bail!(MPI_ERR_OTHER, "MPI_Init: {msg}"),
    };
    let links = Links::new(net, dev, listener, boot.rank(), handles, accept);
    let mut frames = NetFrames::new(links, boot.rank(), boot.size());
    if eager {
        frames
            .connect_all(&peers, accept + std::time::Duration::from_secs(5))
            .map_err(fail)?;
    }
    tracing::info!(
        "rank {}: {} off-node peers, connected {}",
        boot.rank(),
        peers.len(),
        if eager {
            "now (GPUMPI_NET_CONNECT=eager)"
        } else {
            "on first use"
        }
    );
    frames.set_rails(rail, rail_of.clone());
    frames.set_bulk_min(cfg.bulk_min);
    let net = frames.backend();
    let (gdr, why) = if cfg.bulk_min.is_none() {
        (
            false,
            "off: no bulk transfers (GPUMPI_NET_BULK_MIN=off)".to_string(),
        )
    } else {
        crate::transport::net::frames::gdr_choice(&cfg.gdr, net.name(), net.device_memory())
            .map_err(|e| MpiError::other(format!("MPI_Init: {e}")))?
    };
    tracing::info!(
        "rank {}: GPUDirect RDMA for device buffers between nodes {why}",
        boot.rank()
    );
    frames.set_bulk_device(gdr);
    NET_GDR.store(gdr, Ordering::Relaxed);
    Ok((frames, rail_of, relay))
}

/// The PCI bus id of the GPU this rank most likely uses (local rank modulo the devices), when
/// the process already loaded CUDA; for the rail from the PCI topology.
fn gpu_bus_id(local: usize) -> Option<String> {
    if !crate::sys::cuda::driver_in_process() {
        return None;
    }
    let (_, n) = crate::sys::cuda::load().ok()?;
    (n > 0)
        .then(|| crate::sys::cuda::pci_bus_id((local % n as usize) as i32).ok())
        .flatten()
}

/// The costs the scratch areas choose their reduction protocol by, the same on every rank:
/// each rank's reduction and copy speed `c` (`Scratch::measure_local`), and a few flag-slot
/// barriers timed (the median); a flag-slot allreduce takes the largest of every value. Runs at
/// MPI_Init on every rank before any collective, in flag rounds 1-10 (below the rounds of the
/// world's first call, `CallNo::flag`); takes tens of microseconds.
fn scratch_costs(
    slots: Slots,
    mut c: crate::engine::scratch::Costs,
) -> MpiResult<crate::engine::scratch::Costs> {
    use crate::engine::flag::FlagOp;
    let mut backoff = if slots.is_oversubscribed() {
        Backoff::yielding()
    } else {
        Backoff::new()
    };
    let mut idle = || {
        backoff.snooze();
        Ok(())
    };
    let mut times = [0u64; 9];
    for (k, t) in (1..).zip(times.iter_mut()) {
        let t0 = std::time::Instant::now();
        // SAFETY: a barrier has no buffers; every rank runs the same calls here.
        unsafe { slots.run(k, &FlagOp::Barrier, &mut idle)? };
        *t = t0.elapsed().as_nanos() as u64;
    }
    times.sort_unstable();
    c.sync_ns = times[times.len() / 2];
    let mine = [c.sync_ns, c.reduce_ns_per_kib, c.copy_ns_per_kib];
    let mut all = [0u64; 3];
    let max = |i: &[u8], o: &mut [u8]| {
        for (a, b) in i.chunks_exact(8).zip(o.chunks_exact_mut(8)) {
            let x = u64::from_ne_bytes(a.try_into().unwrap_or_default());
            let y = u64::from_ne_bytes((&*b).try_into().unwrap_or_default());
            b.copy_from_slice(&x.max(y).to_ne_bytes());
        }
        Ok(())
    };
    let op = FlagOp::Allreduce {
        input: mine.as_ptr() as *const u8,
        output: all.as_mut_ptr() as *mut u8,
        len: std::mem::size_of_val(&mine),
        reduce: &max,
    };
    // SAFETY: input and output are 24-byte arrays; every rank runs the same calls here.
    unsafe { slots.run(times.len() as u64 + 1, &op, &mut idle)? };
    c.sync_ns = all[0];
    c.reduce_ns_per_kib = all[1];
    c.copy_ns_per_kib = all[2];
    Ok(c)
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
    // The node of every rank, its CPUs (for the `auto` choices between nodes) and (launchers without a
    // job secret) rank 0's secret for the network, travel with the shared-memory names (one
    // fence).
    node::publish(&*boot, &node::choose(boot.node_name()));
    if size > 1 {
        boot.put(CPUS_KEY, own_cpus().to_text().as_bytes());
    }
    if rank == 0 && boot.secret().is_none() && size > 1 {
        let s = bootstrap::random_bytes(32)
            .map_err(|e| MpiError::other(format!("MPI_Init: no job secret: /dev/urandom: {e}")))?;
        boot.put(NET_SECRET_KEY, wire::to_hex(&s).as_bytes());
    }
    let nodes = std::cell::RefCell::new(None);
    let allgather = |mine: &str| -> MpiResult<Vec<String>> {
        boot.put("gpumpi-shm", mine.as_bytes());
        boot.fence()?;
        *nodes.borrow_mut() = Some(node::read(&*boot)?);
        (0..size)
            .map(|r| match r == rank {
                true => Ok(mine.to_string()),
                false => Ok(String::from_utf8_lossy(&boot.get(r, "gpumpi-shm")?).into_owned()),
            })
            .collect()
    };
    let here = || {
        let b = nodes.borrow();
        let m = b.as_ref().expect("node map read with the names");
        (0..size).map(|r| m.node_of[r] == m.node_of[rank]).collect()
    };
    let shm = crate::transport::shm::ShmTransport::establish_keyed(
        boot.job_id(),
        rank,
        size,
        here,
        allgather,
        || boot.fence(),
    )?;
    check_same_on_every_rank(&*boot, &same)?;
    tracing::debug!(
        footprint = shm.footprint(),
        "shared-memory transport ready (bytes of /dev/shm per rank)"
    );
    let map = nodes.take().expect("node map read with the names");
    let on_node = map.ranks[map.node_of[rank]].len();
    let one_node = map.nodes() == 1;
    // This rank's thousandths of a CPU among the job's ranks on its machine, where the job
    // spans nodes (emulated or namespace nodes share one machine): with the node's rank count,
    // whether waits must yield early instead of spinning away a core a peer needs.
    let mut milli = None;
    let transport: Box<dyn crate::transport::Transport> = match map.nodes() {
        1 => Box::new(shm),
        _ => {
            // Every rank's CPUs, read once: the piece size and the TCP backend's striping use them.
            let cpus = rank_cpus(&*boot)?;
            let _ = COLL_PIECE.set(choose_piece(&*boot, &cpus)?);
            milli = crate::coll::pieces::milli_cpus(&cpus).get(rank).copied();
            let remote: Vec<bool> = (0..size)
                .map(|r| map.node_of[r] != map.node_of[rank])
                .collect();
            let (net, rail_of, relay) = open_network(&*boot, &remote, &cpus)?;
            let _ = JOB_BULK.set(relay);
            let layout = crate::topo::pxn::Layout {
                node_of: map.node_of.clone(),
                rail_of,
            };
            let mode = cfg
                .net
                .pxn
                .clone()
                .map_err(|e| MpiError::other(format!("MPI_Init: {e}")))?;
            let pxn = layout.enabled(mode);
            if pxn {
                let least = crate::coll::pieces::milli_cpus(&cpus)
                    .into_iter()
                    .min()
                    .unwrap_or(0);
                let _ = PXN_RAILS.set((layout.rail_of.clone(), relay, least));
            }
            let hops = crate::topo::pxn::routes(&layout, rank, pxn);
            tracing::info!(
                "rank {rank}: PXN {} (GPUMPI_PXN={}), {} off-node peers through a forwarder",
                if pxn { "on" } else { "off" },
                format!("{mode:?}").to_lowercase(),
                hops.iter()
                    .filter(|h| matches!(h, crate::topo::pxn::Hop::Via(_)))
                    .count()
            );
            let mut routed = Routed::with_routes(Box::new(shm), Box::new(net), rank, &hops);
            routed.set_forwarded_to(&crate::topo::pxn::forwarded_to(&layout, rank, pxn));
            routed.set_forwarded_for(&crate::topo::pxn::forwarded_for(&layout, rank, pxn));
            Box::new(routed)
        }
    };
    node::set_job(map);
    let mut engine = Engine::new(transport, rank, size);
    // Receives that only ranks that called MPI_Finalize could match fail (engine::bye): the
    // engine learns a communicator's world ranks from its context id here.
    engine.set_members(Box::new(objects::members_of));
    engine.set_device_copies(Box::new(devices::Cuda));
    let shares = crowded(on_node, online_cpus(), milli);
    engine.set_crowded(shares);
    crate::engine::backoff::set_placement(engine.own_core(), shares, on_node == 1);
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
    let words = match engine.agree_words() {
        bases if size > 1 && bases.len() == size => {
            let bases: &'static [usize] = Box::leak(bases.into_boxed_slice());
            // SAFETY: the transport's words (Transport::agree_words contract) stay mapped while
            // the runtime holds the engine; they are only used inside MPI calls, which find
            // them switched off once MPI_Finalize dropped the runtime.
            Some(
                unsafe { crate::engine::agree::words::Words::new(bases) }
                    .oversubscribed(oversubscribed(size)),
            )
        }
        _ => None,
    };
    let mid_max = cfg.shm.mid_max;
    let mid = match engine.coll_scratch() {
        Some((bases, cap)) if flag.is_some() && mid_max > 0 && cap > 0 => {
            let bases: &'static [usize] = Box::leak(bases.into_boxed_slice());
            // SAFETY: as for the slots: the transport's scratch areas (Transport::coll_scratch
            // contract) stay mapped while the runtime holds the engine.
            let s = unsafe { Scratch::new(bases, rank, cap) }.oversubscribed(oversubscribed(size));
            let costs = match flag {
                // The world's flag slots reach every rank only when the job is on one node
                // (a job on several nodes never takes the scratch areas for world collectives).
                // SAFETY: no collective has used the areas yet.
                Some(slots) if one_node => scratch_costs(slots, unsafe { s.measure_local() })?,
                _ => s.costs(),
            };
            tracing::debug!(
                ?costs,
                "scratch areas: measured costs (largest of every rank)"
            );
            Some((s.with_costs(costs), mid_max))
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
        let rings = unsafe { Rings::new(bases, rank) };
        // The engine answers off-node peers' questions about this rank's records
        // (engine::ask).
        engine.set_records(rings);
        let _ = RINGS.set(rings);
        RINGS_LIVE.store(true, Ordering::Release);
    }
    objects::set_predefined(world, Arc::new(selfc));
    let provided = required.clamp(c::MPI_THREAD_SINGLE, c::MPI_THREAD_MULTIPLE);
    crate::gpu::memo_calls(provided != c::MPI_THREAD_MULTIPLE);
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
        ctx_offered: [0; CTX_WORDS],
        ctx_allocating: Vec::new(),
    });
    if let Some(w) = words {
        let _ = AGREE_WORDS.set(w);
        AGREE_WORDS_LIVE.store(true, Ordering::Release);
    }
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

/// MPI_Finalize: say goodbye to the peers (`engine::bye`), synchronize (so every message sent
/// has been received), then tear down.
/// `barrier`: MPI_COMM_WORLD's barrier (the collectives live above the runtime).
pub fn finalize(barrier: impl FnOnce() -> MpiResult<()>) -> MpiResult<()> {
    // The goodbye first, behind everything this rank sent: peers' receives that only this rank
    // could match fail from now on (engine::bye).
    with(|rt| {
        rt.engine.goodbye();
        Ok(())
    })?;
    // Communicators' GPU state: every rank closes its mappings of peers' memory before the
    // barrier and frees its own after it (gpu::comm).
    crate::gpu::comm::finalize_begin();
    barrier()?;
    crate::gpu::comm::finalize_end();
    WORLD_FLAG.live.store(false, Ordering::Release);
    AGREE_WORDS_LIVE.store(false, Ordering::Release);
    RINGS_LIVE.store(false, Ordering::Release);
    let rt = lock().take();
    if let Some(rt) = rt {
        if let Some(r) = rt.engine.device_net_report() {
            tracing::debug!(
                "rank {}: device messages between nodes: {r}",
                rt.boot.rank()
            );
        }
        if let Some(r) = rt.engine.coll_device_report() {
            tracing::info!("rank {}: {r}", rt.boot.rank());
        }
        if let Some(r) = SLEEPS.report() {
            tracing::debug!("rank {}: {r}", rt.boot.rank());
        }
        rt.boot.finalize()?;
    }
    objects::clear_predefined();
    objects::release_errhandlers();
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
        match r.test_after_progress(&mut rt.engine)? {
            Some(st) => {
                out = Some(st);
                Ok(true)
            }
            None => Ok(false),
        }
    })?;
    Ok(out.unwrap())
}

#[cfg(test)]
mod crowded_tests {
    use super::crowded;
    use crate::coll::pieces::{milli_cpus, RankCpus};

    fn ranks(machines: &[&str], cpus: &[usize]) -> Vec<RankCpus> {
        machines
            .iter()
            .map(|m| RankCpus {
                machine: m.to_string(),
                cpus: cpus.to_vec(),
            })
            .collect()
    }

    #[test]
    fn ranks_of_several_nodes_on_one_machine_count_together() {
        // 2 emulated nodes x 2 ranks on a 2-CPU machine: 2 ranks per node fit its CPUs, but
        // 4 ranks share them.
        let same = ranks(&["m", "m", "m", "m"], &[0, 1]);
        let m = milli_cpus(&same);
        assert_eq!(m, vec![500; 4]);
        assert!(!crowded(2, 2, None));
        assert!(crowded(2, 2, Some(m[0])));
        // 2 x 1 on 2 CPUs, and 2 real machines of 2 ranks on 2 CPUs each: a CPU per rank.
        let two = ranks(&["m", "m"], &[0, 1]);
        assert!(!crowded(1, 2, Some(milli_cpus(&two)[0])));
        let apart = ranks(&["a", "a", "b", "b"], &[0, 1]);
        assert!(milli_cpus(&apart).iter().all(|&c| !crowded(2, 2, Some(c))));
        // More ranks on a node than CPUs: crowded whatever the machine count says.
        assert!(crowded(3, 2, Some(4000)));
    }
}

#[cfg(test)]
mod net_wait_tests {
    use super::{net_wait, wait_yields, NetWait};
    use std::time::Duration;

    /// A wait yields before it sleeps where the ranks outnumber the CPUs, and, where the rank
    /// is alone on its node, until data first moves (it waits for an answer); a stream (data
    /// moved) and a rank with node peers spin instead.
    #[test]
    fn waits_yield_while_they_wait_for_an_answer() {
        assert!(wait_yields(true, true, false));
        assert!(wait_yields(true, true, true), "crowded: always");
        assert!(wait_yields(false, true, false), "alone, nothing moved yet");
        assert!(!wait_yields(false, true, true), "alone, data flows");
        assert!(!wait_yields(false, false, false), "node peers");
        assert!(!wait_yields(false, false, true));
    }

    /// A network-only wait yields (where the ranks outnumber the CPUs) or spins until it has
    /// been idle for the threshold, then sleeps; any other wait keeps the back-off, however
    /// long it has been idle.
    #[test]
    fn a_network_only_wait_yields_or_spins_then_sleeps() {
        let after = Duration::from_micros(3000);
        for yields in [true, false] {
            let before = if yields {
                NetWait::Yield
            } else {
                NetWait::Backoff
            };
            assert_eq!(net_wait(true, Duration::ZERO, after, yields), before);
            let almost = Duration::from_micros(2999);
            assert_eq!(net_wait(true, almost, after, yields), before);
            assert_eq!(net_wait(true, after, after, yields), NetWait::Sleep);
            let zero = Duration::ZERO;
            assert_eq!(net_wait(true, zero, zero, yields), NetWait::Sleep);
            let long = Duration::from_secs(1);
            assert_eq!(net_wait(false, long, after, yields), NetWait::Backoff);
            assert_eq!(net_wait(false, zero, after, yields), NetWait::Backoff);
        }
    }
}
