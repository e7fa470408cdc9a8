//! The GPU layer's state of one communicator, owned by the communicator object.
//!
//! Contract:
//! - Every communicator object holds one [`CommGpu`] (empty, no allocation, until a GPU path
//!   first runs on it). The GPU paths keep there what they set up for the communicator: the
//!   resident kernel's scratch and the peers' scratch as mapped here (`gpu::resident`), the
//!   pinned shared host regions (`gpu::hostmem`) and the device sets on which every rank
//!   mapped every peer (`gpu::nvlink`). Each path keeps its own type ([`PathState`]; the state
//!   holds one list per type, [`State::of`]), so this module names none of the paths. Nothing
//!   is looked up by context id, and nothing bounds how many communicators have GPU state.
//! - [`CommGpu::release`] gives it all back; the ABI layer calls it from `MPI_Comm_free` and
//!   `MPI_Comm_disconnect`, which are collective. [`finalize_begin`] / [`finalize_end`] around
//!   `MPI_Finalize`'s barrier release what communicators still hold at the end.
//! - Releasing is safe against peers: after a communicator's last collective returned on a rank,
//!   no peer writes into that rank's memory of it any more (the resident kernels exchange their
//!   flags last; the host-memory pipelines write only their own regions). Shared host regions
//!   stay alive while any process maps them, so a rank unmaps its own copy of them at once. A
//!   device scratch exported through CUDA IPC must not be freed while a peer has it mapped
//!   (`cuMemFree` before the importer's `cuIpcCloseMemHandle` is undefined behaviour), so when
//!   peers mapped it ([`State::shared`], the same on every rank) every rank first closes its
//!   mappings of the peers' scratch, then waits in a barrier, then frees its own.
//! - Counters ([`counters`]): communicators with GPU state, page-locked bytes, device bytes and
//!   peer mappings they hold; logged at `GPUMPI_DEBUG=2` whenever a communicator's state is set
//!   up or released, and read by `MPIX_Query_gpu_resources`.

use crate::mpi::error::MpiResult;
use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// The longest record a GPU path passes to [`Host::allgather`]. The exchange carries every
/// record in a block of this size, whatever its length: ranks whose calls differ (an erroneous
/// program) may run different paths with records of different lengths, and must still find
/// each other's blocks where they wrote them.
pub const RECORD_MAX: usize = 256;

/// The host-side collectives of a communicator that the GPU paths need (implemented by the
/// dispatch layer over the communicator object).
pub trait Host {
    /// Allgather of equal-size records of at most [`RECORD_MAX`] bytes (also the entry
    /// barrier).
    fn allgather(&self, mine: &[u8]) -> MpiResult<Vec<u8>>;
    fn barrier(&self) -> MpiResult<()>;
    /// Logical AND over the communicator.
    fn all(&self, ok: bool) -> MpiResult<bool>;
    /// The world rank (process) of communicator rank `p`: the registration cache is keyed by
    /// process, since buffer ids are only unique within one process.
    fn world_rank(&self, p: usize) -> usize;
    /// The context id of the communicator and the world ranks of its members.
    fn identity(&self) -> (u32, std::sync::Arc<[usize]>);
    /// The communicator's GPU state (owned by the communicator object).
    fn gpu(&self) -> &CommGpu;
    /// The call's consistency check: every host-side wait of a GPU path on its peers (their
    /// kernels, flags or streams) calls it on each round; at most every 20 ms it compares the
    /// peers' records of the call, and an error (the peers called something else) ends the
    /// wait with that error.
    fn check(&self) -> MpiResult<()> {
        Ok(())
    }
    /// Every rank agreed to run the call on this GPU path (the point of no return): say so in
    /// the call's record, with `step`, a number every rank's path must agree on in this call
    /// (the resident kernels' flag value; 0: none), compared with the peers' records.
    fn commit(&self, _step: u64) {}
    /// The job's named shared host memory (the host regions of GPU collectives without peer
    /// access).
    fn shared_mem(&self) -> &dyn super::shmem::SharedMem;
}

/// One communicator's GPU state; see the module docs.
#[derive(Default)]
pub struct CommGpu {
    state: Mutex<Option<Arc<State>>>,
}

/// What one GPU path keeps for a communicator on this rank (for instance one value per device),
/// held in the communicator's [`State`]. The defaults drop the value.
pub(crate) trait PathState: Send + 'static {
    /// Close this rank's mappings of the peers' memory (local: the peers' allocations stay).
    fn close_mappings(&mut self) {}
    /// Give back what this rank allocated (after every rank closed its mappings of it, where
    /// peers mapped it).
    fn free(self)
    where
        Self: Sized,
    {
    }
    /// The state goes without a collective release while peers may map what this rank
    /// allocated: keep that allocated until the process ends, give back the rest.
    fn leak(self)
    where
        Self: Sized,
    {
    }
}

/// One path's list of values in a [`State`], with its type erased.
trait Held: Send + Sync {
    fn close_mappings(&self);
    fn free(&self);
    fn leak(&self);
    fn is_empty(&self) -> bool;
}

impl<T: PathState> Held for Mutex<Vec<T>> {
    fn close_mappings(&self) {
        for v in lock(self).iter_mut() {
            v.close_mappings();
        }
    }
    fn free(&self) {
        for v in std::mem::take(&mut *lock(self)) {
            v.free();
        }
    }
    fn leak(&self) {
        for v in std::mem::take(&mut *lock(self)) {
            v.leak();
        }
    }
    fn is_empty(&self) -> bool {
        lock(self).is_empty()
    }
}

/// A path's list: the same value seen as itself ([`State::of`]) and as a [`Held`].
struct Slot {
    any: Arc<dyn Any + Send + Sync>,
    held: Arc<dyn Held>,
}

/// What the GPU paths set up for one communicator (created at the first GPU call on it).
#[derive(Default)]
pub(crate) struct State {
    /// One list per [`PathState`] type, in the order the paths first used the communicator.
    paths: Mutex<Vec<Slot>>,
    /// Device sets (every rank's GPU UUID) on which every rank mapped every peer's buffers.
    pub(crate) verified: Mutex<Vec<Vec<[u8; 16]>>>,
    /// Peers may have mapped this rank's device scratch: release needs the barrier. Set on every
    /// rank in the same call (after the set-up exchange showed every rank eligible).
    pub(crate) shared: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Every state alive in this process, held weakly: only `MPI_Finalize` walks it (a
/// communicator the application never freed is released there). Dead entries are pruned
/// whenever one is added, so it never outgrows the communicators alive.
static ALIVE: Mutex<Vec<Weak<State>>> = Mutex::new(Vec::new());

static STATES: AtomicI64 = AtomicI64::new(0);
static PINNED: AtomicI64 = AtomicI64::new(0);
static DEVICE: AtomicI64 = AtomicI64::new(0);
static MAPPINGS: AtomicI64 = AtomicI64::new(0);

/// What this process holds for communicators' GPU state right now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Communicators with GPU state.
    pub comms: i64,
    /// Page-locked (registered) host bytes: the shared host regions as mapped here.
    pub pinned_bytes: i64,
    /// Device bytes allocated here: resident scratch.
    pub device_bytes: i64,
    /// Peers' device scratch mapped here (CUDA IPC).
    pub peer_mappings: i64,
}

pub fn counters() -> Counters {
    Counters {
        comms: STATES.load(Ordering::Relaxed),
        pinned_bytes: PINNED.load(Ordering::Relaxed),
        device_bytes: DEVICE.load(Ordering::Relaxed),
        peer_mappings: MAPPINGS.load(Ordering::Relaxed),
    }
}

/// Account for page-locked bytes registered (+) or unregistered (-).
pub(crate) fn add_pinned(bytes: i64) {
    PINNED.fetch_add(bytes, Ordering::Relaxed);
}

/// Account for device bytes allocated (+) or freed (-).
pub(crate) fn add_device(bytes: i64) {
    DEVICE.fetch_add(bytes, Ordering::Relaxed);
}

/// Account for peer mappings opened (+) or closed (-).
pub(crate) fn add_mappings(n: i64) {
    MAPPINGS.fetch_add(n, Ordering::Relaxed);
}

/// Log the counters (`GPUMPI_DEBUG=2`) after `what` happened.
pub(crate) fn log(what: &str) {
    let c = counters();
    tracing::debug!(
        comms = c.comms,
        pinned_bytes = c.pinned_bytes,
        device_bytes = c.device_bytes,
        peer_mappings = c.peer_mappings,
        "communicator GPU state: {what}"
    );
}

impl CommGpu {
    /// The state, created at the first call (GPU paths only: host-only communicators never
    /// get one).
    pub(crate) fn state(&self) -> Arc<State> {
        let mut s = lock(&self.state);
        if let Some(st) = s.as_ref() {
            return st.clone();
        }
        let st = Arc::new(State::default());
        STATES.fetch_add(1, Ordering::Relaxed);
        {
            let mut a = lock(&ALIVE);
            a.retain(|w| w.strong_count() > 0);
            a.push(Arc::downgrade(&st));
        }
        *s = Some(st.clone());
        st
    }

    /// The state if there is one (nothing is created).
    pub(crate) fn peek(&self) -> Option<Arc<State>> {
        lock(&self.state).clone()
    }

    /// Give back everything the communicator holds (collective over its ranks: `host` is the
    /// communicator's; see the module docs for why the order is safe). Communicators that
    /// never ran a GPU path return at once, with no communication.
    pub fn release(&self, host: &dyn Host) -> MpiResult<()> {
        let Some(st) = lock(&self.state).take() else {
            return Ok(());
        };
        let shared = st.shared.load(Ordering::Relaxed);
        release_steps(
            shared,
            || st.close_mappings(),
            || host.barrier(),
            || st.free_own(),
        )?;
        drop(st);
        log("released by its communicator's free");
        Ok(())
    }
}

/// The release protocol of one rank: close my mappings of the peers' memory; when peers may
/// have mapped mine (`shared`, the same on every rank), wait until every rank has closed
/// theirs; then free what I own.
fn release_steps(
    shared: bool,
    close: impl FnOnce(),
    barrier: impl FnOnce() -> MpiResult<()>,
    free: impl FnOnce(),
) -> MpiResult<()> {
    close();
    if shared {
        barrier()?;
    }
    free();
    Ok(())
}

impl State {
    /// The communicator's values of path state `T` (an empty list at the first use).
    pub(crate) fn of<T: PathState>(&self) -> Arc<Mutex<Vec<T>>> {
        let mut paths = lock(&self.paths);
        if let Some(v) = paths
            .iter()
            .find_map(|s| s.any.clone().downcast::<Mutex<Vec<T>>>().ok())
        {
            return v;
        }
        let v = Arc::new(Mutex::new(Vec::<T>::new()));
        paths.push(Slot {
            any: v.clone(),
            held: v.clone(),
        });
        v
    }

    /// The paths' lists, the latest first: a path's state set up later may live in one set up
    /// earlier (the resident scratch in the host regions), so it goes first.
    fn held(&self) -> Vec<Arc<dyn Held>> {
        lock(&self.paths)
            .iter()
            .rev()
            .map(|s| s.held.clone())
            .collect()
    }

    /// Close this rank's mappings of the peers' memory (local; no peer is affected).
    fn close_mappings(&self) {
        for h in self.held() {
            h.close_mappings();
        }
    }

    /// Free what this rank allocated for the communicator (after [`State::close_mappings`]
    /// on every rank where peers mapped it).
    fn free_own(&self) {
        for h in self.held() {
            h.free();
        }
        lock(&self.verified).clear();
    }
}

impl Drop for State {
    /// A state dropped without [`CommGpu::release`] (a communicator object that went away
    /// without `MPI_Comm_free`, or whose release failed): everything local goes, but a device
    /// scratch some peer may still map stays allocated (freeing it would be undefined
    /// behaviour for that peer) until the process ends.
    fn drop(&mut self) {
        self.close_mappings();
        let held = self.held();
        if self.shared.load(Ordering::Relaxed) {
            if held.iter().any(|h| !h.is_empty()) {
                tracing::debug!(
                    "communicator GPU state dropped without a collective release: its device \
                     scratch stays allocated (a peer may map it)"
                );
            }
            for h in held {
                h.leak();
            }
        } else {
            for h in held {
                h.free();
            }
        }
        STATES.fetch_sub(1, Ordering::Relaxed);
    }
}

/// `MPI_Finalize`, before its barrier: close every mapping of peers' communicator memory that
/// this process holds.
pub fn finalize_begin() {
    for st in alive() {
        st.close_mappings();
    }
}

/// `MPI_Finalize`, after its barrier (every rank has run [`finalize_begin`]): free what every
/// communicator still holds.
pub fn finalize_end() {
    let all = alive();
    let any = !all.is_empty();
    for st in all {
        st.free_own();
    }
    if any {
        log("released at MPI_Finalize");
    }
}

fn alive() -> Vec<Arc<State>> {
    lock(&ALIVE).iter().filter_map(Weak::upgrade).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    struct NoHost;
    impl Host for NoHost {
        fn allgather(&self, mine: &[u8]) -> MpiResult<Vec<u8>> {
            Ok(mine.to_vec())
        }
        fn barrier(&self) -> MpiResult<()> {
            panic!("nothing shared: no barrier")
        }
        fn all(&self, ok: bool) -> MpiResult<bool> {
            Ok(ok)
        }
        fn world_rank(&self, p: usize) -> usize {
            p
        }
        fn identity(&self) -> (u32, Arc<[usize]>) {
            (0, Arc::from(vec![0usize]))
        }
        fn gpu(&self) -> &CommGpu {
            unreachable!()
        }
        fn shared_mem(&self) -> &dyn crate::gpu::shmem::SharedMem {
            unreachable!()
        }
    }

    /// Threads stand for ranks: each rank's scratch counts the peers that have it mapped, and
    /// freeing it while a peer still maps it is recorded as a violation. Ranks close their
    /// mappings at different speeds; the protocol must never free a mapped scratch.
    #[test]
    fn release_frees_only_what_no_peer_maps() {
        for n in [2usize, 3, 5] {
            for round in 0..20u64 {
                let mapped: Arc<Vec<AtomicUsize>> =
                    Arc::new((0..n).map(|_| AtomicUsize::new(n - 1)).collect());
                let violations = Arc::new(AtomicUsize::new(0));
                let barrier = Arc::new(std::sync::Barrier::new(n));
                let threads: Vec<_> = (0..n)
                    .map(|me| {
                        let (mapped, violations, barrier) =
                            (mapped.clone(), violations.clone(), barrier.clone());
                        std::thread::spawn(move || {
                            let delay = (me as u64 * 7 + round * 13) % 5;
                            release_steps(
                                true,
                                || {
                                    std::thread::sleep(std::time::Duration::from_millis(delay));
                                    for p in (0..n).filter(|&p| p != me) {
                                        mapped[p].fetch_sub(1, Ordering::SeqCst);
                                    }
                                },
                                || {
                                    barrier.wait();
                                    Ok(())
                                },
                                || {
                                    if mapped[me].load(Ordering::SeqCst) != 0 {
                                        violations.fetch_add(1, Ordering::SeqCst);
                                    }
                                },
                            )
                            .unwrap();
                        })
                    })
                    .collect();
                for t in threads {
                    t.join().unwrap();
                }
                assert_eq!(violations.load(Ordering::SeqCst), 0, "n={n} round={round}");
            }
        }
    }

    /// Without peers mapping anything the protocol needs no communication.
    #[test]
    fn unshared_release_does_not_wait() {
        let mut order = Vec::new();
        release_steps(
            false,
            || order.push("close"),
            || panic!("no barrier for an unshared state"),
            || {},
        )
        .unwrap();
        assert_eq!(order, ["close"]);
    }

    /// States are created lazily, counted while alive, and gone after release.
    #[test]
    fn states_are_created_lazily_and_released() {
        let g = CommGpu::default();
        assert!(g.peek().is_none(), "no state before a GPU path runs");
        let st = g.state();
        assert!(Arc::ptr_eq(&st, &g.state()), "one state per communicator");
        assert!(alive().iter().any(|a| Arc::ptr_eq(a, &st)));
        let weak = Arc::downgrade(&st);
        drop(st);
        g.release(&NoHost).unwrap();
        assert!(g.peek().is_none());
        assert!(weak.upgrade().is_none(), "released state is gone");
        // Releasing again (or a communicator that never had a state) does nothing.
        g.release(&NoHost).unwrap();
    }

    /// Each path's list is found again by its type. Release closes every path's mappings
    /// first, then frees the lists, the one set up last first; a state dropped while peers may
    /// map it keeps (leaks) what they may map.
    #[test]
    fn path_states_are_kept_by_type_and_released_latest_first() {
        static LOG: Mutex<Vec<String>> = Mutex::new(Vec::new());
        struct A(u32);
        struct B;
        impl PathState for A {
            fn close_mappings(&mut self) {
                lock(&LOG).push(format!("close a{}", self.0));
            }
            fn free(self) {
                lock(&LOG).push(format!("free a{}", self.0));
            }
            fn leak(self) {
                lock(&LOG).push(format!("leak a{}", self.0));
            }
        }
        impl PathState for B {
            fn free(self) {
                lock(&LOG).push("free b".into());
            }
        }
        let g = CommGpu::default();
        let st = g.state();
        lock(&st.of::<A>()).push(A(1));
        lock(&st.of::<B>()).push(B);
        lock(&st.of::<A>()).push(A(2));
        assert_eq!(lock(&st.of::<A>()).len(), 2, "one list per type");
        assert_eq!(lock(&st.of::<B>()).len(), 1);
        drop(st);
        g.release(&NoHost).unwrap();
        assert_eq!(
            *lock(&LOG),
            ["close a1", "close a2", "free b", "free a1", "free a2"]
        );
        lock(&LOG).clear();
        let g = CommGpu::default();
        let st = g.state();
        st.shared.store(true, Ordering::Relaxed);
        lock(&st.of::<A>()).push(A(3));
        drop(st);
        drop(g);
        assert_eq!(*lock(&LOG), ["close a3", "leak a3"]);
    }
}
