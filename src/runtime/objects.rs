//! The process-wide object registry behind MPI handles: communicators,
//! groups, error handlers, info objects, keyvals and attributes, user ops.
//! Datatypes and requests have their own tables (see `types.rs`, `request.rs`).
//!
//! Locking: `OBJECTS` is held only to look up or store objects, never while
//! user callbacks run or while the engine makes progress.

use crate::mpi::error::MpiResult;
use crate::mpi::group::Group;
use crate::mpi::handles::{Kind, Table};
use crate::mpi_bail;
use crate::standard::consts as c;
use crate::standard::ffi::*;
use std::collections::BTreeMap;
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// Cartesian topology attached to a communicator.
#[derive(Clone, Debug)]
pub struct Cart {
    pub dims: Vec<i32>,
    pub periods: Vec<bool>,
}

#[derive(Clone, Debug)]
pub enum Topo {
    Cart(Cart),
    Graph { index: Vec<i32>, edges: Vec<i32> },
}

pub struct CommObj {
    /// Context id of point-to-point traffic; collectives use `ctx | COLL_CTX_BIT`.
    pub ctx: u32,
    pub group: Arc<Group>,
    /// Rank in the communicator -> world rank (shared with collective executors).
    pub peers: Arc<[usize]>,
    /// My rank in `group`.
    pub rank: usize,
    pub name: Mutex<String>,
    /// Error handler (handle value).
    pub errh: Mutex<usize>,
    /// keyval -> attribute value.
    pub attrs: Mutex<BTreeMap<i32, usize>>,
    pub topo: Option<Topo>,
    /// Sequence number of collective operations: the number of the next collective
    /// (`engine::collcheck::CallNo`).
    pub coll_seq: AtomicU64,
    pub info: Mutex<Vec<(String, String)>>,
    /// What the GPU paths set up for this communicator (empty until one runs on it); released
    /// by `MPI_Comm_free`/`MPI_Comm_disconnect` (collective) or `MPI_Finalize`.
    pub gpu: crate::gpu::comm::CommGpu,
    /// Every rank of the group is on one node (`bootstrap::node::one_node`): the intra-node
    /// collective paths (flag slots, scratch areas, GPU paths) may take its calls.
    pub one_node: bool,
    /// The nodes of the group's ranks when they span nodes and a node holds more than one of
    /// them (`bootstrap::node::labels`): the hierarchical collectives (`coll::hier`) serve it.
    pub nodes: Option<Arc<crate::coll::hier::Nodes>>,
    /// How many nodes the group's ranks are on (1 for a job on one node): the tuning table's
    /// `nodes` condition (`coll::select`).
    pub node_count: usize,
    /// Where PXN is on and forwards some message between the group's nodes: the ranks that put
    /// the blocks of an alltoall on the network ([`pxn_via`], `coll::alltoall::rails`),
    /// computed at the first alltoall.
    pub pxn: OnceLock<Option<Arc<crate::coll::alltoall::choice::Plan>>>,
    /// The GPU paths' agreement on this communicator when it is not MPI_COMM_WORLD
    /// (`engine::agree::words`).
    pub agree: crate::engine::agree::words::CommState,
    /// Set on a communicator made by `MPIX_Stream_comm_create(_multiplex)` (on every rank, also
    /// where the local stream is MPIX_STREAM_NULL): its streams and enqueue state.
    pub stream: std::sync::OnceLock<Arc<crate::runtime::stream::StreamComm>>,
}

/// The world ranks of every communicator made in this process, by the context id of its
/// point-to-point traffic (a context id reused by a later communicator takes its entry).
/// The engine asks it ([`members_of`]) only when a rank has called `MPI_Finalize` while
/// receives wait (`engine::bye`). A leaf lock: nothing else is taken while it is held.
static MEMBERS: Mutex<BTreeMap<u32, Arc<[usize]>>> = Mutex::new(BTreeMap::new());

/// The world ranks of the communicator whose point-to-point context is `ctx` (see [`MEMBERS`]).
pub fn members_of(ctx: u32) -> Option<Arc<[usize]>> {
    MEMBERS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&ctx)
        .cloned()
}

/// Context ids: bit 31 set marks collective traffic of a communicator.
pub const COLL_CTX_BIT: u32 = 1 << 31;

impl CommObj {
    pub fn new(ctx: u32, group: Arc<Group>, rank: usize, name: &str) -> Self {
        let peers: Arc<[usize]> = Arc::from(group.ranks.as_slice());
        MEMBERS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(ctx, peers.clone());
        let nodes =
            crate::bootstrap::node::labels(&group.ranks).map(|l| crate::coll::hier::Nodes::new(&l));
        CommObj {
            ctx,
            one_node: crate::bootstrap::node::one_node(&group.ranks),
            node_count: nodes.as_ref().map_or(1, |n| n.count()),
            nodes: nodes.filter(|n| n.worth_it()).map(Arc::new),
            pxn: OnceLock::new(),
            peers,
            group,
            rank,
            name: Mutex::new(name.to_string()),
            errh: Mutex::new(c::MPI_ERRORS_ARE_FATAL as usize),
            attrs: Mutex::new(BTreeMap::new()),
            topo: None,
            coll_seq: AtomicU64::new(0),
            info: Mutex::new(Vec::new()),
            gpu: Default::default(),
            agree: Default::default(),
            stream: Default::default(),
        }
    }
    pub fn size(&self) -> usize {
        self.group.size()
    }
    /// The PXN alltoall of this communicator (`None`: PXN off, the group on one node, or no
    /// block forwarded): every rank computes the same from the job's rails, bulk threshold and
    /// `GPUMPI_PXN_ALLTOALL`.
    pub fn pxn_plan(&self) -> Option<Arc<crate::coll::alltoall::choice::Plan>> {
        self.pxn
            .get_or_init(|| {
                let nodes = self.nodes.as_deref()?;
                let (rails, relay, milli_cpus) = crate::runtime::pxn_rails()?;
                let rail: Vec<usize> = self.group.ranks.iter().map(|&w| rails[w]).collect();
                let via = pxn_via(nodes, &rail)?;
                let force = crate::coll::alltoall::choice::Force::parse(
                    crate::config::snapshot().net.pxn_alltoall.as_deref(),
                )
                .unwrap_or_else(|e| {
                    tracing::warn!("{e}; taking auto");
                    crate::coll::alltoall::choice::Force::Auto
                });
                Some(Arc::new(crate::coll::alltoall::choice::Plan {
                    via,
                    rails: crate::coll::alltoall::rails::Rails::new(nodes, &rail),
                    per_node: nodes.ranks.iter().map(Vec::len).max().unwrap_or(1),
                    relay,
                    milli_cpus,
                    force,
                }))
            })
            .clone()
    }
    /// The number of the next collective on this communicator, also its tag (the same on every
    /// rank, since MPI requires collectives to be called in the same order). Every collective
    /// call takes one, whatever path it runs on. Collective calls on one communicator never
    /// overlap (MPI: the application orders them, also across threads), so a load and a store
    /// suffice.
    pub fn next_coll_seq(&self) -> u64 {
        let k = self.coll_seq.load(Ordering::Relaxed);
        self.coll_seq.store(k.wrapping_add(1), Ordering::Relaxed);
        k
    }
    pub fn world_rank(&self, r: usize) -> usize {
        self.group.ranks[r]
    }
}

/// Which kind of object an error handler or keyval is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjKind {
    Comm,
    Win,
    File,
    Session,
    Type,
}

pub type ErrhFn = unsafe extern "C" fn(*mut usize, *mut c_int, ...);

/// The `extra_state` of an object made by an `MPIX_*_x` call, and its destructor: run once,
/// when the object is dropped (for an op: after `MPI_Op_free` once no pending call holds it;
/// for an error handler: at `MPI_Finalize`, see [`release_errhandlers`]). The destructor runs
/// inside the MPI call that drops the object and must not make MPI calls.
pub struct ExtraState {
    pub extra: usize,
    pub destructor: Option<MPIX_Destructor_function>,
}

impl Drop for ExtraState {
    fn drop(&mut self) {
        if let Some(d) = self.destructor {
            // SAFETY: the user gave this destructor for this extra_state; it is called once, as
            // MPIX_Destructor_function specifies.
            unsafe { d(self.extra as *mut c_void) }
        }
    }
}

/// A user error handler's function.
pub enum ErrhCall {
    /// The standard's: handle and code by pointer (`MPI_Comm_errhandler_function`).
    Std(ErrhFn),
    /// `MPIX_Comm_create_errhandler_x`'s: handle and code by value, and the extra state.
    X(MPIX_Comm_errhandler_function_x, ExtraState),
}

pub struct ErrhObj {
    pub kind: ObjKind,
    pub call: ErrhCall,
}

impl ErrhObj {
    /// Call the handler for the object `handle` and error `code`; returns the code (a standard
    /// handler may change it through its pointer).
    /// # Safety
    /// `handle` is a handle of the kind the handler was created for.
    pub unsafe fn invoke(&self, handle: usize, code: c_int) -> c_int {
        match &self.call {
            ErrhCall::Std(f) => {
                let (mut h, mut code) = (handle, code);
                f(&mut h, &mut code);
                code
            }
            ErrhCall::X(f, st) => {
                f(handle as MPI_Comm, code, st.extra as *mut c_void);
                code
            }
        }
    }
}

/// Drop every user error handler (MPI_Finalize): their destructors run, outside the registry
/// lock. Handlers live until then because a communicator keeps its handler's handle value,
/// which `MPI_Comm_get_errhandler` hands out again after `MPI_Errhandler_free`.
pub fn release_errhandlers() {
    let all = objects().errhs.take_all();
    drop(all);
}

pub struct Keyval {
    pub kind: ObjKind,
    /// Copy callback: 0 = NULL_COPY_FN, 1 = DUP_FN, else a function pointer.
    pub copy: usize,
    /// Delete callback: 0 = NULL_DELETE_FN, else a function pointer.
    pub delete: usize,
    pub extra: usize,
    pub freed: bool,
    pub refs: usize,
}

/// A user reduction function, as it was registered.
pub enum UserOpFn {
    /// `MPI_Op_create`: `MPI_User_function`.
    Int(MPI_User_function),
    /// `MPI_Op_create_c`: `MPI_User_function_c`.
    Large(MPI_User_function_c),
    /// `MPIX_Op_create_x`: `MPIX_User_function_x` with its extra state.
    X(MPIX_User_function_x, ExtraState),
}

/// A user-defined operation. Reductions hold it (`dispatch::Reduction`) for as long as a call
/// uses it, so an `MPIX_Op_create_x` destructor runs only after `MPI_Op_free` and the last
/// pending call that uses the op.
pub struct OpObj {
    pub func: UserOpFn,
    pub commute: bool,
}

/// User-defined error classes and codes: code -> (class, string).
#[derive(Default)]
pub struct ErrorCodes {
    pub codes: BTreeMap<i32, (i32, String)>,
    pub strings: BTreeMap<i32, String>,
    pub last: i32,
}

pub struct Objects {
    pub comms: Table<CommObj>,
    pub groups: Table<Group>,
    pub errhs: Table<ErrhObj>,
    pub infos: Table<Mutex<Vec<(String, String)>>>,
    pub ops: Table<OpObj>,
    pub keyvals: BTreeMap<i32, Keyval>,
    pub next_keyval: i32,
    pub errors: ErrorCodes,
    pub world: Option<Arc<CommObj>>,
    pub self_: Option<Arc<CommObj>>,
    pub errh_world: usize,
}

pub static OBJECTS: Mutex<Objects> = Mutex::new(Objects {
    comms: Table::new(Kind::Comm),
    groups: Table::new(Kind::Group),
    errhs: Table::new(Kind::Errhandler),
    infos: Table::new(Kind::Info),
    ops: Table::new(Kind::Op),
    keyvals: BTreeMap::new(),
    next_keyval: 1000,
    errors: ErrorCodes {
        codes: BTreeMap::new(),
        strings: BTreeMap::new(),
        last: 0,
    },
    world: None,
    self_: None,
    errh_world: 0,
});

/// The handle of a communicator object (MPI_COMM_NULL if it has none any more).
pub fn comm_handle(c: &Arc<CommObj>) -> usize {
    let o = objects();
    if o.world.as_ref().is_some_and(|w| Arc::ptr_eq(w, c)) {
        return c::MPI_COMM_WORLD as usize;
    }
    if o.self_.as_ref().is_some_and(|s| Arc::ptr_eq(s, c)) {
        return c::MPI_COMM_SELF as usize;
    }
    o.comms
        .find(|x| Arc::ptr_eq(x, c))
        .unwrap_or(c::MPI_COMM_NULL as usize)
}

/// Lock the registry (recovering from poisoning: a panic elsewhere must not wedge MPI).
pub fn objects() -> MutexGuard<'static, Objects> {
    OBJECTS.lock().unwrap_or_else(|e| e.into_inner())
}

/// MPI_COMM_WORLD and MPI_COMM_SELF (in that order) while MPI is running, readable without the
/// registry lock: every communication call resolves its communicator, and the predefined ones
/// are the common case. Set once; a later initialization (if any) uses the registry only.
static PREDEFINED: OnceLock<[Arc<CommObj>; 2]> = OnceLock::new();
static PREDEFINED_LIVE: AtomicBool = AtomicBool::new(false);

/// Install MPI_COMM_WORLD's and MPI_COMM_SELF's objects (MPI_Init).
pub fn set_predefined(world: Arc<CommObj>, selfc: Arc<CommObj>) {
    let mut o = objects();
    let fast = PREDEFINED.get_or_init(|| [world.clone(), selfc.clone()]);
    if Arc::ptr_eq(&fast[0], &world) && Arc::ptr_eq(&fast[1], &selfc) {
        PREDEFINED_LIVE.store(true, Ordering::Release);
    }
    o.world = Some(world);
    o.self_ = Some(selfc);
}

/// Remove MPI_COMM_WORLD's and MPI_COMM_SELF's objects (MPI_Finalize).
pub fn clear_predefined() {
    let mut o = objects();
    PREDEFINED_LIVE.store(false, Ordering::Release);
    COMM_EPOCH.fetch_add(1, Ordering::Release);
    o.world = None;
    o.self_ = None;
}

/// MPI_COMM_WORLD's or MPI_COMM_SELF's object, borrowed (no reference count), while MPI runs
/// and the set-once table holds it; `None` for any other handle (resolve it with [`comm`]).
#[inline]
pub fn predefined_comm(h: MPI_Comm) -> Option<&'static CommObj> {
    predefined_arc(h).map(|a| &**a)
}

/// [`predefined_comm`] as the table's counted reference.
#[inline]
fn predefined_arc(h: MPI_Comm) -> Option<&'static Arc<CommObj>> {
    let v = h as usize;
    if (v == c::MPI_COMM_WORLD as usize || v == c::MPI_COMM_SELF as usize)
        && PREDEFINED_LIVE.load(Ordering::Acquire)
    {
        let p = PREDEFINED.get()?;
        return Some(&p[usize::from(v == c::MPI_COMM_SELF as usize)]);
    }
    None
}

/// Resolve a communicator handle (predefined or user) to its object.
pub fn comm(h: MPI_Comm) -> MpiResult<Arc<CommObj>> {
    let v = h as usize;
    if (v == c::MPI_COMM_WORLD as usize || v == c::MPI_COMM_SELF as usize)
        && PREDEFINED_LIVE.load(Ordering::Acquire)
    {
        if let Some(p) = PREDEFINED.get() {
            return Ok(p[usize::from(v == c::MPI_COMM_SELF as usize)].clone());
        }
    }
    let o = objects();
    let found = if v == c::MPI_COMM_WORLD as usize {
        o.world.clone()
    } else if v == c::MPI_COMM_SELF as usize {
        o.self_.clone()
    } else if v == c::MPI_COMM_NULL as usize {
        mpi_bail!(MPI_ERR_COMM, "the communicator is MPI_COMM_NULL")
    } else {
        o.comms.get(v)
    };
    match found {
        Some(c) => Ok(c),
        None if o.world.is_none()
            && (v == c::MPI_COMM_WORLD as usize || v == c::MPI_COMM_SELF as usize) =>
        {
            mpi_bail!(
                MPI_ERR_OTHER,
                "MPI is not initialized (or already finalized)"
            )
        }
        None => mpi_bail!(
            MPI_ERR_COMM,
            "invalid communicator handle {v:#x} (freed, or not a communicator)"
        ),
    }
}

/// What the fast point-to-point paths need of a communicator, borrowed for one call: its
/// context id, the caller's rank in it, and its ranks' world ranks.
#[derive(Clone, Copy)]
pub struct CommView<'a> {
    pub ctx: u32,
    pub rank: usize,
    pub peers: &'a [usize],
    obj: ViewObj<'a>,
}

/// Where a [`CommView`]'s communicator object is, for a caller that needs a reference to it
/// (a request's error handler): the predefined table, or a thread's cache entry (a weak
/// reference, so the cache never keeps a freed communicator's object alive).
#[derive(Clone, Copy)]
enum ViewObj<'a> {
    Predefined(&'static Arc<CommObj>),
    Cached(&'a std::sync::Weak<CommObj>),
}

impl CommView<'_> {
    pub fn size(&self) -> usize {
        self.peers.len()
    }
    pub fn world_rank(&self, r: usize) -> usize {
        self.peers[r]
    }
    /// A counted reference to the communicator's object; `None` when it is gone (freed, by
    /// another thread since the view was taken, and without pending operations).
    pub fn arc(&self) -> Option<Arc<CommObj>> {
        match self.obj {
            ViewObj::Predefined(a) => Some(a.clone()),
            ViewObj::Cached(w) => w.upgrade(),
        }
    }
    fn of(c: &'static Arc<CommObj>) -> CommView<'static> {
        CommView {
            ctx: c.ctx,
            rank: c.rank,
            peers: &c.peers,
            obj: ViewObj::Predefined(c),
        }
    }
}

/// Advanced (under the registry lock) each time a user communicator leaves the registry, and at
/// MPI_Finalize: a thread's cached [`CommView`] of a user communicator is used only while this
/// is still the value read before the registry look-up that filled it, so a handle freed before
/// the call (by any thread) is looked up again and refused.
static COMM_EPOCH: AtomicU64 = AtomicU64::new(1);

/// A thread's cached view of a user communicator. It owns the world-rank table, so a view in
/// use stays valid even when another thread frees the communicator meanwhile (erroneous, but
/// it must not crash): the freed communicator's table lives until the entry is replaced.
struct CachedView {
    handle: usize,
    epoch: u64,
    ctx: u32,
    rank: usize,
    peers: Arc<[usize]>,
    comm: std::sync::Weak<CommObj>,
}

/// Entries of a thread's view cache (a few communicators used in turn, e.g. a halo exchange
/// over row and column communicators, all hit).
const VIEW_CACHE: usize = 4;

std::thread_local! {
    static VIEWS: std::cell::RefCell<[Option<CachedView>; VIEW_CACHE]> =
        const { std::cell::RefCell::new([const { None }; VIEW_CACHE]) };
}

/// Run `f` with a borrowed view of communicator `h` (predefined or user): for a user
/// communicator without the registry lock and without reference counts when this thread
/// looked it up before and no communicator has been freed since. `None` when `h` is not a live
/// communicator (the caller's general path reports it), or in the rare case that the thread's
/// cache is not usable (during thread teardown, or within `f` of an outer call).
#[inline]
pub fn with_comm_view<R>(h: MPI_Comm, f: impl FnOnce(CommView<'_>) -> Option<R>) -> Option<R> {
    if let Some(c) = predefined_arc(h) {
        return f(CommView::of(c));
    }
    with_user_view(h, f)
}

/// [`with_comm_view`] for a handle that is not a predefined communicator's (kept out of line,
/// so the predefined communicators' path stays short).
#[inline(never)]
fn with_user_view<R>(h: MPI_Comm, f: impl FnOnce(CommView<'_>) -> Option<R>) -> Option<R> {
    let v = h as usize;
    if v >> 60 != Kind::Comm as usize {
        return None;
    }
    VIEWS
        .try_with(|cell| {
            let mut views = cell.try_borrow_mut().ok()?;
            let epoch = COMM_EPOCH.load(Ordering::Acquire);
            let hit = views.iter().position(|e| {
                e.as_ref()
                    .is_some_and(|e| e.handle == v && e.epoch == epoch)
            });
            let i = match hit {
                Some(i) => i,
                None => {
                    // The epoch is read before the look-up: a free after it advances the epoch,
                    // so the entry is not used again.
                    let c = objects().comms.get(v)?;
                    // Entries of an older epoch go (they cannot hit again), which also releases
                    // the tables of freed communicators; else the last entry makes room.
                    for e in views.iter_mut() {
                        if e.as_ref().is_some_and(|e| e.epoch != epoch) {
                            *e = None;
                        }
                    }
                    let i = views
                        .iter()
                        .position(Option::is_none)
                        .unwrap_or(VIEW_CACHE - 1);
                    views[i] = Some(CachedView {
                        handle: v,
                        epoch,
                        ctx: c.ctx,
                        rank: c.rank,
                        peers: c.peers.clone(),
                        comm: Arc::downgrade(&c),
                    });
                    i
                }
            };
            let e = views[i].as_ref()?;
            f(CommView {
                ctx: e.ctx,
                rank: e.rank,
                peers: &e.peers,
                obj: ViewObj::Cached(&e.comm),
            })
        })
        .ok()
        .flatten()
}

/// Remove a user communicator from the registry (MPI_Comm_free): its handle no longer resolves,
/// in [`comm`] or in any thread's [`with_comm_view`].
pub fn remove_comm(h: MPI_Comm) -> Option<Arc<CommObj>> {
    let mut o = objects();
    let c = o.comms.remove(h as usize);
    COMM_EPOCH.fetch_add(1, Ordering::Release);
    c
}

/// Store a new communicator and return its handle.
pub fn new_comm(c: CommObj) -> MPI_Comm {
    objects().comms.insert(Arc::new(c)) as MPI_Comm
}

pub fn group(h: MPI_Group) -> MpiResult<Arc<Group>> {
    let v = h as usize;
    if v == c::MPI_GROUP_EMPTY as usize {
        return Ok(Arc::new(Group::default()));
    }
    if v == c::MPI_GROUP_NULL as usize {
        mpi_bail!(MPI_ERR_GROUP, "the group is MPI_GROUP_NULL");
    }
    match objects().groups.get(v) {
        Some(g) => Ok(g),
        None => mpi_bail!(
            MPI_ERR_GROUP,
            "invalid group handle {v:#x} (freed, or not a group)"
        ),
    }
}

pub fn new_group(g: Group) -> MPI_Group {
    if g.size() == 0 {
        return c::MPI_GROUP_EMPTY;
    }
    objects().groups.insert(Arc::new(g)) as MPI_Group
}

/// Check a pointer argument the standard says must not be NULL.
pub fn nonnull<T>(p: *const T, what: &str) -> MpiResult<()> {
    if p.is_null() {
        mpi_bail!(MPI_ERR_ARG, "{what} is NULL");
    }
    Ok(())
}

/// An info object's (key, value) pairs in insertion order.
pub type InfoPairs = Arc<Mutex<Vec<(String, String)>>>;

pub fn info_obj(h: MPI_Info) -> MpiResult<InfoPairs> {
    let v = h as usize;
    if v == c::MPI_INFO_NULL as usize {
        mpi_bail!(MPI_ERR_INFO, "the info object is MPI_INFO_NULL");
    }
    if v == c::MPI_INFO_ENV as usize {
        return Ok(Arc::new(Mutex::new(Vec::new())));
    }
    match objects().infos.get(v) {
        Some(i) => Ok(i),
        None => mpi_bail!(
            MPI_ERR_INFO,
            "invalid info handle {v:#x} (freed, or not an info object)"
        ),
    }
}

/// An info argument that may be MPI_INFO_NULL: validated, contents ignored by most calls.
pub fn check_info(h: MPI_Info) -> MpiResult<()> {
    if std::ptr::eq(h, c::MPI_INFO_NULL) {
        return Ok(());
    }
    info_obj(h).map(|_| ())
}

/// The predefined operation a handle names, if it is one.
pub fn builtin_op(h: MPI_Op) -> Option<crate::mpi::op::BuiltinOp> {
    Some(match h as usize {
        0x21 => crate::mpi::op::BuiltinOp::Sum,
        0x22 => crate::mpi::op::BuiltinOp::Min,
        0x23 => crate::mpi::op::BuiltinOp::Max,
        0x24 => crate::mpi::op::BuiltinOp::Prod,
        0x28 => crate::mpi::op::BuiltinOp::Band,
        0x29 => crate::mpi::op::BuiltinOp::Bor,
        0x2a => crate::mpi::op::BuiltinOp::Bxor,
        0x30 => crate::mpi::op::BuiltinOp::Land,
        0x31 => crate::mpi::op::BuiltinOp::Lor,
        0x32 => crate::mpi::op::BuiltinOp::Lxor,
        0x38 => crate::mpi::op::BuiltinOp::Minloc,
        0x39 => crate::mpi::op::BuiltinOp::Maxloc,
        0x3c => crate::mpi::op::BuiltinOp::Replace,
        0x3d => crate::mpi::op::BuiltinOp::NoOp,
        _ => return None,
    })
}

/// The PXN plan (`topo::pxn::proxy`) over a group's own ranks (`nodes`, `rail` of each): the
/// rank that puts each block of an alltoall on the network; `None` where no block is forwarded.
pub fn pxn_via(
    nodes: &crate::coll::hier::Nodes,
    rail: &[usize],
) -> Option<crate::coll::alltoall::pxn::Via> {
    let l = crate::topo::pxn::Layout {
        node_of: nodes.of.clone(),
        rail_of: rail.to_vec(),
    };
    let via = crate::coll::alltoall::pxn::Via::new(nodes, |s, d| {
        crate::topo::pxn::proxy(&l, s, d, true).unwrap_or(s)
    });
    via.forwards().then_some(via)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With PXN, the alltoall between nodes of 2 nodes x 2, 4 or 8 ranks on 2 or 4 rails (local
    /// rank i on rail i mod rails) sends exactly the PXN plan's network operations with
    /// aggregation (`topo::pxn::alltoall`): one per (forwarder, destination), the messages of
    /// the pairwise schedule divided by the rails (by the local ranks per rail where there are
    /// as many rails as ranks per rail), none across rails.
    #[test]
    fn pxn_alltoall_sends_the_plans_network_operations() {
        use crate::coll::schedule::{Schedule, Step};
        use crate::coll::{alltoall, hier::Nodes, CollArgs};
        for (per, rails) in [(2, 2), (4, 2), (4, 4), (8, 2)] {
            let n = 2 * per;
            let node_of: Vec<usize> = (0..n).map(|r| r / per).collect();
            let rail: Vec<usize> = (0..n).map(|r| r % per % rails).collect();
            let nodes = Nodes::new(&node_of);
            let via = pxn_via(&nodes, &rail).expect("forwarders");
            let l = crate::topo::pxn::Layout {
                node_of,
                rail_of: rail.clone(),
            };
            let net = |r: usize, s: &Schedule| -> Vec<usize> {
                s.steps
                    .iter()
                    .filter_map(|st| match *st {
                        Step::Send { peer, .. } if l.node_of[peer] != l.node_of[r] => Some(peer),
                        _ => None,
                    })
                    .collect()
            };
            let (mut on, mut off) = (0, 0);
            for r in 0..n {
                let a = CollArgs::new(r, n, 64);
                let to = net(r, &alltoall::pxn::build(&a, &nodes, &via));
                assert!(to.iter().all(|&d| rail[d] == rail[r]), "rank {r}: {to:?}");
                on += to.len();
                off += net(r, &alltoall::pairwise::build(&a)).len();
            }
            let what = format!("2x{per} on {rails} rails");
            assert_eq!(on, crate::topo::pxn::alltoall(&l, true, true).ops, "{what}");
            assert_eq!(
                off,
                crate::topo::pxn::alltoall(&l, false, false).ops,
                "{what}"
            );
            assert_eq!(on * rails, off, "{what}");
        }
        // One rail: nothing to forward, the communicator keeps its other schedules.
        let nodes = Nodes::new(&[0, 0, 1, 1]);
        assert!(pxn_via(&nodes, &[0, 0, 0, 0]).is_none());
    }

    /// A user communicator in the registry with context `ctx`, this process at `rank`, over
    /// world ranks `ranks`.
    fn user_comm(ctx: u32, ranks: &[usize], rank: usize) -> MPI_Comm {
        new_comm(CommObj::new(
            ctx,
            Arc::new(Group::new(ranks.to_vec())),
            rank,
            "t",
        ))
    }

    fn seen(h: MPI_Comm) -> Option<(u32, usize, Vec<usize>)> {
        with_comm_view(h, |v| Some((v.ctx, v.rank, v.peers.to_vec())))
    }

    #[test]
    fn views_of_user_communicators_follow_the_registry() {
        let a = user_comm(700, &[3, 1, 2], 1);
        assert_eq!(seen(a), Some((700, 1, vec![3, 1, 2])));
        let obj = with_comm_view(a, |v| v.arc()).expect("a live communicator's object");
        assert!(Arc::ptr_eq(&obj, &comm(a).unwrap()));
        // Again (from the thread's cache), and among more communicators than the cache holds.
        let more: Vec<MPI_Comm> = (0..2 * VIEW_CACHE as u32)
            .map(|i| user_comm(710 + i, &[i as usize, 9], 0))
            .collect();
        for _ in 0..3 {
            assert_eq!(seen(a), Some((700, 1, vec![3, 1, 2])));
            for (i, &h) in more.iter().enumerate() {
                assert_eq!(seen(h), Some((710 + i as u32, 0, vec![i, 9])));
            }
        }
        // A freed handle is refused from then on, also when its slot holds a new communicator.
        assert!(remove_comm(a).is_some());
        assert_eq!(seen(a), None);
        let b = user_comm(701, &[5], 0);
        assert_ne!(b, a);
        assert_eq!(seen(a), None);
        assert_eq!(seen(b), Some((701, 0, vec![5])));
        for h in more.into_iter().chain([b]) {
            assert!(remove_comm(h).is_some());
            assert_eq!(seen(h), None);
        }
    }

    #[test]
    fn views_refuse_what_is_not_a_live_communicator() {
        assert_eq!(seen(c::MPI_COMM_NULL), None);
        assert_eq!(seen(0x1234 as MPI_Comm), None);
        let g = new_group(Group::new(vec![0, 1]));
        assert_eq!(seen(g as usize as MPI_Comm), None, "a group handle");
        // Within a view of a user communicator, another user view is not taken (no panic).
        let a = user_comm(720, &[0, 1], 0);
        let inner = with_comm_view(a, |_| Some(seen(a)));
        assert_eq!(inner, Some(None));
        assert!(remove_comm(a).is_some());
    }

    #[test]
    fn a_view_in_use_outlives_a_free_by_another_thread() {
        let a = user_comm(730, &[4, 2], 1);
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let handle = a as usize;
        let user = std::thread::spawn(move || {
            let a = handle as MPI_Comm;
            with_comm_view(a, |v| {
                tx.send(()).unwrap();
                // The other thread frees the communicator meanwhile.
                done_rx.recv().unwrap();
                Some((
                    v.ctx,
                    v.rank,
                    v.peers.to_vec(),
                    v.world_rank(0),
                    // The object went with the free (the cache holds no counted reference).
                    v.arc().is_some(),
                ))
            })
            .map(|got| (got, seen(a)))
        });
        rx.recv().unwrap();
        assert!(remove_comm(a).is_some());
        done_tx.send(()).unwrap();
        let (got, after) = user.join().unwrap().unwrap();
        assert_eq!(got, (730, 1, vec![4, 2], 4, false));
        assert_eq!(after, None, "the next call on the freed handle is refused");
    }
}
