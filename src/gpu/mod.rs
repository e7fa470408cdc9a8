//! The safe CUDA layer: driver detection, one primary context and one library-owned
//! non-blocking stream per device, pointer classification, staging copies and the embedded
//! kernels. All raw driver calls are in `crate::sys::cuda`.
//!
//! Contract:
//! - Nothing here runs CUDA before it is needed. Classifying a pointer first checks whether the
//!   process has loaded libcuda at all (`dlopen(RTLD_NOLOAD)`): an application that never
//!   touched CUDA cannot hold device pointers, so it pays no driver initialization. The driver
//!   is initialized once, at the first classification after libcuda appeared (or at
//!   `MPIX_Query_cuda_support`).
//! - Any failure to load or initialize the driver means "no CUDA": logged once, every buffer is
//!   host memory from then on. `GPUMPI_CUDA=0` disables the layer.
//! - gpumpi never uses the legacy default stream: copies and kernels go to a stream created with
//!   `CU_STREAM_NON_BLOCKING` in the device's primary context, and are synchronized before the
//!   MPI call that issued them returns data. The application must have completed its own work on
//!   a buffer before passing it to MPI (as with every CUDA-aware MPI).
//! - Contexts are pushed around each use and popped after, so the application's current context
//!   is left as it was.

pub mod cache;
pub mod call;
pub mod collmem;
pub mod comm;
pub mod device;
pub mod enqueue;
pub mod enqueue_kernel;
pub mod fdshare;
pub mod hostmem;
pub mod ipc;
mod kabi;
pub mod kernels;
pub mod layout;
pub mod nvlink;
pub mod p2p;
pub mod pack;
pub mod path;
pub mod pipe;
pub mod pool;
pub mod pull;
pub mod resident;
pub mod shmem;
pub mod stage;

use crate::sys::cuda;
use cache::{CallMemo, Classifier, MemKind, PtrCache, PtrInfo};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

/// A device's primary context and gpumpi's stream in it.
#[derive(Clone, Copy)]
pub struct DevCtx {
    pub ordinal: i32,
    pub ctx: cuda::Context,
    pub stream: cuda::Stream,
}

pub struct Gpu {
    pub driver_version: i32,
    pub device_count: i32,
    devices: Vec<OnceLock<Result<DevCtx, String>>>,
    kernels: Vec<OnceLock<Result<kernels::Kernels, String>>>,
    cache: Mutex<PtrCache>,
}

enum State {
    Off(String),
    On(Gpu),
}

static STATE: OnceLock<State> = OnceLock::new();
/// Set once libcuda was seen loaded in the process (after which we stop looking).
static DRIVER_SEEN: AtomicBool = AtomicBool::new(false);

fn disabled() -> bool {
    !crate::config::snapshot().cuda.enabled
}

fn state() -> &'static State {
    STATE.get_or_init(|| {
        if disabled() {
            tracing::info!("CUDA support disabled by GPUMPI_CUDA=0");
            return State::Off("disabled by GPUMPI_CUDA=0".into());
        }
        let t0 = std::time::Instant::now();
        match cuda::load() {
            Ok((_, 0)) => {
                let why = "the CUDA driver reports no device".to_string();
                tracing::info!("CUDA support off: {why}");
                State::Off(why)
            }
            Ok((v, n)) => {
                tracing::info!(
                    driver = v,
                    devices = n,
                    "CUDA driver loaded in {:.1} ms",
                    t0.elapsed().as_secs_f64() * 1e3
                );
                State::On(Gpu {
                    driver_version: v,
                    device_count: n,
                    devices: (0..n).map(|_| OnceLock::new()).collect(),
                    kernels: (0..n).map(|_| OnceLock::new()).collect(),
                    cache: Mutex::new(PtrCache::new(cache_capacity())),
                })
            }
            Err(e) => {
                tracing::info!("CUDA support off: {e}");
                State::Off(e.to_string())
            }
        }
    })
}

fn cache_capacity() -> usize {
    crate::config::snapshot().cuda.ptr_cache.max(1)
}

/// The initialized driver, if there is one with at least one device (initializes it).
pub fn gpu() -> Option<&'static Gpu> {
    match state() {
        State::On(g) => Some(g),
        State::Off(_) => None,
    }
}

/// The driver for a test that needs a GPU, or None after recording the skip and its reason
/// (`crate::test_skip::gpu_skip`: a failure on a machine with a GPU).
#[cfg(test)]
#[track_caller]
pub(crate) fn gpu_or_skip() -> Option<&'static Gpu> {
    let g = gpu();
    if g.is_none() {
        crate::test_skip::gpu_skip(
            &crate::test_skip::current_test(),
            &format!(
                "no CUDA device ({})",
                unavailable_reason().unwrap_or_default()
            ),
        );
    }
    g
}

/// The driver for a test that needs a GPU and the embedded kernels, or None after recording
/// the skip and its reason.
#[cfg(test)]
#[track_caller]
pub(crate) fn kernels_or_skip() -> Option<&'static Gpu> {
    let g = gpu_or_skip()?;
    if !kernels::embedded() {
        crate::test_skip::gpu_skip(
            &crate::test_skip::current_test(),
            "built without CUDA kernels (no nvcc at build time)",
        );
        return None;
    }
    Some(g)
}

/// Why there is no CUDA support (None when there is).
pub fn unavailable_reason() -> Option<String> {
    match state() {
        State::On(_) => None,
        State::Off(why) => Some(why.clone()),
    }
}

/// Whether a CUDA driver and at least one device are present (MPIX_Query_cuda_support).
pub fn available() -> bool {
    gpu().is_some()
}

/// The driver as a [`Classifier`] for the pointer cache.
struct Driver;

impl Classifier for Driver {
    fn classify(&self, ptr: usize) -> PtrInfo {
        match cuda::pointer_attributes(ptr) {
            Ok(a) => {
                let kind = if a.is_managed {
                    MemKind::Managed
                } else {
                    match a.mem_type {
                        1 => MemKind::PinnedHost,
                        2 | 3 => MemKind::Device,
                        4 => MemKind::Managed,
                        _ => MemKind::Host,
                    }
                };
                if kind == MemKind::Host {
                    return PtrInfo::HOST;
                }
                PtrInfo {
                    kind,
                    device: a.device_ordinal,
                    buffer_id: a.buffer_id,
                    start: a.range_start,
                    len: a.range_size,
                }
            }
            Err(e) => {
                tracing::trace!("{e}: {ptr:#x} taken as host memory");
                PtrInfo::HOST
            }
        }
    }
    fn buffer_id(&self, ptr: usize) -> u64 {
        cuda::pointer_buffer_id(ptr)
    }
    fn first_seen(&self, ptr: usize, info: &PtrInfo) {
        if NO_FIRST_SYNC.with(|h| h.get()) {
            return;
        }
        // From now on the program's synchronous copies into the allocation complete before
        // they return. One that returned early before this call is waited for here: the
        // legacy default stream (the stream of `cudaMemcpy`) of the device's primary context
        // (gpumpi's streams are non-blocking: none of gpumpi's own work is waited for).
        // Memory the attribute does not apply to (stream-ordered pools, VMM) keeps the
        // driver's default.
        let Some(d) = gpu().and_then(|g| g.device(info.device).ok()) else {
            return;
        };
        let r = cuda::with_context(d.ctx, || {
            if let Err(e) = cuda::set_sync_memops(ptr) {
                tracing::trace!("{e}: {ptr:#x} keeps the default synchronization");
            }
            cuda::legacy_stream_synchronize()
        });
        if let Err(e) = r {
            tracing::debug!("{e}: device buffer {ptr:#x} used without waiting for earlier copies");
        }
    }
}

thread_local! {
    /// Set while the enqueue forms classify their buffers: a first-seen allocation gets no
    /// wait for the legacy default stream (that wait is not legal while the caller captures a
    /// graph, and stream order already covers the caller's own work).
    static NO_FIRST_SYNC: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// [`classify`] for the enqueue forms: no legacy-stream wait for a first-seen allocation.
pub fn classify_ordered(ptr: *const u8) -> PtrInfo {
    let old = NO_FIRST_SYNC.with(|h| h.replace(true));
    let r = classify(ptr);
    NO_FIRST_SYNC.with(|h| h.set(old));
    r
}

/// Whether MPI calls keep a [`CallMemo`] of their classifications: set by `MPI_Init` below
/// `MPI_THREAD_MULTIPLE` (see [`CallMemo`] for why not there).
static MEMO_CALLS: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// This thread's classifications during its current MPI call ([`CallScope`]).
    static MEMO: std::cell::RefCell<CallMemo> = const { std::cell::RefCell::new(CallMemo::new()) };
}

/// Whether MPI calls may remember their classifications ([`CallMemo`]): not under
/// `MPI_THREAD_MULTIPLE`.
pub fn memo_calls(on: bool) {
    MEMO_CALLS.store(on, Ordering::Relaxed);
}

/// One MPI call of this thread, from [`CallScope::enter`] to the drop: within it [`classify`]
/// asks the driver about an allocation once, while the library gives no memory back (a device
/// message's buffer is otherwise looked up by the ABI entry, the send path, the IPC export and
/// the receiver's copy, ~0.1 us of driver call each). Costs nothing in a process without CUDA;
/// a nested call (an MPI call from a callback) ends the outer call's memo.
pub struct CallScope(bool);

impl CallScope {
    #[inline]
    pub fn enter() -> CallScope {
        if !(DRIVER_SEEN.load(Ordering::Relaxed) && MEMO_CALLS.load(Ordering::Relaxed)) {
            return CallScope(false);
        }
        CallScope(MEMO.with(|m| m.try_borrow_mut().map(|mut m| m.enter()).is_ok()))
    }
}

impl Drop for CallScope {
    fn drop(&mut self) {
        if self.0 {
            MEMO.with(|m| {
                if let Ok(mut m) = m.try_borrow_mut() {
                    m.leave();
                }
            });
        }
    }
}

/// Where `ptr` lives. Cheap for host memory in a process that does not use CUDA.
pub fn classify(ptr: *const u8) -> PtrInfo {
    let p = ptr as usize;
    // NULL, MPI_BOTTOM, MPI_IN_PLACE and other sentinels are never device memory.
    if p < 4096 {
        return PtrInfo::HOST;
    }
    if !DRIVER_SEEN.load(Ordering::Relaxed) {
        if disabled() {
            return PtrInfo::HOST;
        }
        if STATE.get().is_none() && !cuda::driver_in_process() {
            return PtrInfo::HOST;
        }
        DRIVER_SEEN.store(true, Ordering::Relaxed);
    }
    let Some(g) = gpu() else {
        return PtrInfo::HOST;
    };
    // Read before the driver is asked: memory given back after this read makes the answer
    // stale for the memo (see CallMemo).
    let given_back = cuda::given_back();
    if let Some(i) = MEMO.with(|m| m.try_borrow().ok().and_then(|m| m.get(p, given_back))) {
        return i;
    }
    let info = g
        .cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .lookup(p, &Driver);
    MEMO.with(|m| {
        if let Ok(mut m) = m.try_borrow_mut() {
            m.put(p, info, given_back);
        }
    });
    info
}

/// Whether the CPU cannot (or should not) touch `ptr` directly: device or managed memory.
pub fn is_device(ptr: *const u8) -> bool {
    classify(ptr).kind.needs_staging()
}

impl Gpu {
    /// The primary context and gpumpi's stream of device `ordinal` (created at first use).
    pub fn device(&self, ordinal: i32) -> Result<DevCtx, String> {
        let Some(slot) = self.devices.get(ordinal.max(0) as usize) else {
            return Err(format!(
                "device ordinal {ordinal} out of range ({} devices)",
                self.device_count
            ));
        };
        slot.get_or_init(|| {
            let ctx = cuda::primary_context(ordinal).map_err(|e| e.to_string())?;
            let stream = cuda::with_context(ctx, cuda::stream_create).map_err(|e| e.to_string())?;
            let name = cuda::device_name(ordinal).unwrap_or_default();
            tracing::info!(
                ordinal,
                name,
                "CUDA device ready (primary context, own stream)"
            );
            Ok(DevCtx {
                ordinal,
                ctx,
                stream,
            })
        })
        .clone()
    }

    /// The kernels loaded into device `ordinal`'s primary context (loaded at first use).
    pub fn kernels(&self, ordinal: i32) -> Result<&kernels::Kernels, String> {
        let d = self.device(ordinal)?;
        let slot = &self.kernels[ordinal as usize];
        slot.get_or_init(|| {
            let t0 = std::time::Instant::now();
            let k = cuda::with_context(d.ctx, || Ok(kernels::Kernels::load()))
                .map_err(|e| e.to_string())
                .and_then(|r| r);
            match &k {
                Ok(_) => tracing::info!(
                    ordinal,
                    "CUDA kernels loaded in {:.1} ms",
                    t0.elapsed().as_secs_f64() * 1e3
                ),
                Err(e) => tracing::info!(ordinal, "CUDA kernels unavailable: {e}"),
            }
            k
        })
        .as_ref()
        .map_err(|e| e.clone())
    }

    /// Whether device `ordinal`'s kernels are loaded (and loaded fine), without loading them.
    pub fn kernels_loaded(&'static self, ordinal: i32) -> bool {
        self.kernels
            .get(ordinal.max(0) as usize)
            .and_then(|s| s.get())
            .is_some_and(|k| k.is_ok())
    }

    /// Load device `ordinal`'s kernels on a background thread (once): paths that are only an
    /// optimization use them when they are there, so the first call never waits milliseconds
    /// for the module.
    pub fn preload_kernels(&'static self, ordinal: i32) {
        let Some(slot) = self.kernels.get(ordinal.max(0) as usize) else {
            return;
        };
        if slot.get().is_some() {
            return;
        }
        static STARTED: std::sync::Mutex<Vec<i32>> = std::sync::Mutex::new(Vec::new());
        let mut st = STARTED.lock().unwrap_or_else(|e| e.into_inner());
        if st.contains(&ordinal) {
            return;
        }
        st.push(ordinal);
        let _ = std::thread::Builder::new()
            .name("gpumpi-kernel-load".into())
            .spawn(move || {
                let _ = self.kernels(ordinal);
            });
    }

    /// (hits, misses) of the pointer cache.
    pub fn cache_stats(&self) -> (u64, u64) {
        let c = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        (c.hits, c.misses)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Inside one MPI call a second look at an allocation is answered by the call's memo, but
    /// not once the library gave memory back: a buffer freed and another allocated within the
    /// same call (often at the same address) is classified anew, with its own buffer id.
    #[test]
    fn a_call_sees_memory_given_back_and_allocated_again() {
        let Some(g) = gpu_or_skip() else {
            return;
        };
        let d = g.device(0).unwrap();
        let a = cuda::with_context(d.ctx, || cuda::mem_alloc(1 << 20)).unwrap();
        // The driver is seen in the process from the first classification on.
        assert_eq!(classify(a as *const u8).kind, MemKind::Device);
        memo_calls(true);
        let call = CallScope::enter();
        assert!(call.0, "a call of a process using CUDA keeps a memo");
        let first = classify(a as *const u8);
        let memo = |p: usize| MEMO.with(|m| m.borrow().get(p, cuda::given_back()));
        assert_eq!(
            memo(a + 64),
            Some(first),
            "remembered for the rest of the call"
        );
        assert_eq!(classify((a + 64) as *const u8), first);
        // SAFETY: a came from mem_alloc and nothing uses it any more.
        unsafe { cuda::mem_free(a) };
        assert_eq!(
            memo(a),
            None,
            "memory given back: the memo no longer answers"
        );
        let b = cuda::with_context(d.ctx, || cuda::mem_alloc(1 << 19)).unwrap();
        let second = classify(b as *const u8);
        assert_eq!(second.kind, MemKind::Device);
        assert_ne!(
            second.buffer_id, first.buffer_id,
            "at {b:#x} (first at {a:#x})"
        );
        assert!((second.start..second.start + second.len).contains(&b));
        drop(call);
        assert_eq!(memo(b), None, "forgotten when the call ends");
        // SAFETY: as above.
        unsafe { cuda::mem_free(b) };
    }
}
