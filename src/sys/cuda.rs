//! The CUDA driver API, through cudarc's raw bindings (`cudarc::driver::sys`), loaded with
//! `dlopen` at first use. Every unsafe CUDA call of gpumpi is in this file; `crate::gpu` builds
//! the safe layer (devices, contexts, streams, pointer classification, staging) on top.
//!
//! Contract: nothing here is called before [`load`] returned `Ok`; [`load`] never panics and
//! fails cleanly where there is no libcuda or no usable driver (cudarc panics when a symbol or
//! the library is missing, so the first calls run under [`catch_quietly`]).

use cudarc::driver::sys as cu;
use std::ffi::{c_void, CStr};

/// A failed driver call: the call's name and the driver's error code and name.
#[derive(Clone, Debug)]
pub struct CudaError {
    pub call: &'static str,
    pub code: i32,
    pub name: String,
}

impl std::fmt::Display for CudaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} failed: {} ({})", self.call, self.name, self.code)
    }
}

pub type CuResult<T> = Result<T, CudaError>;

fn check(call: &'static str, r: cu::CUresult) -> CuResult<()> {
    if r == cu::CUresult::CUDA_SUCCESS {
        return Ok(());
    }
    let mut p: *const std::ffi::c_char = std::ptr::null();
    // SAFETY: cuGetErrorName writes a pointer to a static string (or leaves it null).
    unsafe { cu::cuGetErrorName(r, &mut p) };
    let name = if p.is_null() {
        format!("{r:?}")
    } else {
        // SAFETY: non-null results of cuGetErrorName are NUL-terminated static strings.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    };
    Err(CudaError {
        call,
        code: r as i32,
        name,
    })
}

fn fail(call: &'static str, name: impl Into<String>) -> CudaError {
    CudaError {
        call,
        code: -1,
        name: name.into(),
    }
}

/// glibc's `struct dl_phdr_info` including the load counters (libc's binding stops before them).
#[repr(C)]
struct PhdrInfo {
    addr: usize,
    name: *const std::ffi::c_char,
    phdr: *const c_void,
    phnum: u16,
    adds: u64,
    subs: u64,
}

/// Objects loaded into the process so far (glibc's `dlpi_adds`), read from the first callback.
fn loaded_objects_counter() -> Option<u64> {
    unsafe extern "C" fn first(
        info: *mut libc::dl_phdr_info,
        size: usize,
        data: *mut c_void,
    ) -> i32 {
        if size >= std::mem::size_of::<PhdrInfo>() {
            // SAFETY: glibc passes `size` bytes of its dl_phdr_info, which begins like PhdrInfo.
            let adds = unsafe { (*(info as *const PhdrInfo)).adds };
            // SAFETY: `data` is the Option<u64> passed below.
            unsafe { *(data as *mut Option<u64>) = Some(adds) };
        }
        1 // stop after the first object
    }
    let mut out: Option<u64> = None;
    // SAFETY: the callback only reads the info glibc hands it and writes `out`.
    unsafe { libc::dl_iterate_phdr(Some(first), &mut out as *mut Option<u64> as *mut c_void) };
    out
}

/// Whether an object named libcuda.so* is loaded (walks the list of loaded objects).
fn libcuda_loaded() -> bool {
    unsafe extern "C" fn visit(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> i32 {
        // SAFETY: glibc's info is valid during the callback; names are NUL-terminated or null.
        let name = unsafe { (*info).dlpi_name };
        if name.is_null() {
            return 0;
        }
        // SAFETY: as above.
        let name = unsafe { CStr::from_ptr(name) }.to_bytes();
        let base = name.rsplit(|&c| c == b'/').next().unwrap_or(name);
        if base.starts_with(b"libcuda.so") {
            // SAFETY: `data` is the bool passed below.
            unsafe { *(data as *mut bool) = true };
            return 1;
        }
        0
    }
    let mut found = false;
    // SAFETY: the callback only reads the info glibc hands it and writes `found`.
    unsafe { libc::dl_iterate_phdr(Some(visit), &mut found as *mut bool as *mut c_void) };
    found
}

/// Whether some library of this process already loaded libcuda (the application uses CUDA).
/// Device pointers cannot exist in a process that has not loaded the driver. Cheap when asked
/// often (every send and receive asks): after an answer "no", the next RESCAN_NS of the coarse
/// clock answer "no" again with one clock read (a few ns; asking glibc for its count of loaded
/// objects takes its loader lock, ~20-50 ns), and the list of loaded objects is walked again
/// only after glibc loaded a new one. The pause cannot hide a device pointer: between loading
/// libcuda and holding device memory, `cuInit`, a context and an allocation take far longer.
pub fn driver_in_process() -> bool {
    use std::sync::atomic::{AtomicU64, Ordering};
    const RESCAN_NS: u64 = 1_000_000;
    static SCANNED_AT: AtomicU64 = AtomicU64::new(u64::MAX);
    static QUIET_UNTIL: AtomicU64 = AtomicU64::new(0);
    let t = super::clock_ns(libc::CLOCK_MONOTONIC_COARSE);
    if t != 0 && t < QUIET_UNTIL.load(Ordering::Relaxed) {
        return false;
    }
    // Every "no" starts a new quiet period, the counter's as well as the walk's: without it,
    // once the first period ended every call would take the loader lock.
    let quiet = || {
        if t != 0 {
            QUIET_UNTIL.store(t.saturating_add(RESCAN_NS), Ordering::Relaxed);
        }
    };
    let now = loaded_objects_counter();
    if let Some(n) = now {
        if SCANNED_AT.load(Ordering::Relaxed) == n {
            quiet();
            return false;
        }
    }
    let found = libcuda_loaded();
    if !found {
        if let Some(n) = now {
            SCANNED_AT.store(n, Ordering::Relaxed);
        }
        quiet();
    }
    found
}

std::thread_local! {
    /// Depth of [`catch_quietly`] calls on this thread.
    static QUIET_PANICS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Runs `f`, turning a panic into `Err` without the panic hook's report: cudarc panics where
/// libcuda lacks a symbol (an old driver, a stub), which this module turns into an error, and
/// the default hook would print a message (and a backtrace) to the application's stderr for
/// each. The first call chains a hook in front of the one installed then, which stays silent
/// only inside `catch_quietly` on the panicking thread and hands every other panic on.
fn catch_quietly<R>(f: impl FnOnce() -> R) -> std::thread::Result<R> {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if QUIET_PANICS.with(|q| q.get()) == 0 {
                prev(info);
            }
        }));
    });
    QUIET_PANICS.with(|q| q.set(q.get() + 1));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    QUIET_PANICS.with(|q| q.set(q.get() - 1));
    r
}

/// Load libcuda and initialize the driver; returns (driver version, device count).
pub fn load() -> CuResult<(i32, i32)> {
    let r = catch_quietly(|| -> CuResult<(i32, i32)> {
        // SAFETY: probing dlopen of the candidate library names has no side effect on failure.
        if !unsafe { cu::is_culib_present() } {
            return Err(fail("dlopen", "libcuda.so not found"));
        }
        // SAFETY: cuInit(0) is the documented first call; the symbols below exist in every
        // driver of CUDA 11 or later (their absence panics inside cudarc, caught here).
        unsafe {
            check("cuInit", cu::cuInit(0))?;
            let mut v = 0;
            check("cuDriverGetVersion", cu::cuDriverGetVersion(&mut v))?;
            let mut n = 0;
            check("cuDeviceGetCount", cu::cuDeviceGetCount(&mut n))?;
            Ok((v, n))
        }
    });
    match r {
        Ok(r) => r,
        Err(_) => Err(fail("dlopen", "libcuda lacks a needed symbol")),
    }
}

/// A driver call that writes a NUL-terminated string about a device into a sized buffer.
type DeviceStringFn =
    unsafe fn(*mut std::ffi::c_char, std::ffi::c_int, cu::CUdevice) -> cu::CUresult;

/// The string `get` (named `call`) writes for device `ordinal`.
fn device_string(ordinal: i32, call: &'static str, get: DeviceStringFn) -> CuResult<String> {
    let mut dev = 0;
    let mut buf = [0 as std::ffi::c_char; 256];
    // SAFETY: `get` is one of the driver's (buffer, length, device) string getters; the buffer
    // is 256 bytes and its length is passed; the driver NUL-terminates what it writes.
    unsafe {
        check("cuDeviceGet", cu::cuDeviceGet(&mut dev, ordinal))?;
        check(call, get(buf.as_mut_ptr(), buf.len() as i32, dev))?;
        Ok(CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned())
    }
}

/// The name of device `ordinal`.
pub fn device_name(ordinal: i32) -> CuResult<String> {
    device_string(ordinal, "cuDeviceGetName", cu::cuDeviceGetName)
}

/// A retained primary context (held for the life of the process).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Context(cu::CUcontext);
// SAFETY: CUDA contexts may be used from any thread.
unsafe impl Send for Context {}
unsafe impl Sync for Context {}

/// A stream created by gpumpi (non-blocking with respect to the legacy default stream).
#[derive(Clone, Copy, Debug)]
pub struct Stream(cu::CUstream);
// SAFETY: CUDA streams may be used from any thread.
unsafe impl Send for Stream {}
unsafe impl Sync for Stream {}

impl Stream {
    /// A stream the application owns (a `cudaStream_t` / `CUstream` value, as MPICH's
    /// `MPIX_Stream_create` receives it). gpumpi never destroys it.
    pub fn from_raw(raw: usize) -> Stream {
        Stream(raw as cu::CUstream)
    }
}

/// The context a stream belongs to (for the legacy and per-thread default streams, 0 and 2:
/// the calling thread's current context).
pub fn stream_context(s: Stream) -> CuResult<Context> {
    let mut ctx = std::ptr::null_mut();
    // SAFETY: out-pointer to a local; the driver validates the stream handle.
    unsafe { check("cuStreamGetCtx", cu::cuStreamGetCtx(s.0, &mut ctx))? };
    if ctx.is_null() {
        return Err(fail(
            "cuStreamGetCtx",
            "no context current for a default stream",
        ));
    }
    Ok(Context(ctx))
}

/// Whether `s` is being captured into a CUDA graph (work enqueued now becomes graph nodes).
pub fn stream_capturing(s: Stream) -> CuResult<bool> {
    let mut st = cu::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: out-pointer to a local; cuStreamIsCapturing is legal during any capture.
    unsafe { check("cuStreamIsCapturing", cu::cuStreamIsCapturing(s.0, &mut st))? };
    match st {
        cu::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE => Ok(false),
        cu::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE => Ok(true),
        _ => Err(fail(
            "cuStreamIsCapturing",
            "the stream's capture was invalidated",
        )),
    }
}

/// The device ordinal of context `ctx`.
pub fn context_device(ctx: Context) -> CuResult<i32> {
    with_context(ctx, || {
        let mut d = 0;
        // SAFETY: out-pointer to a local; `ctx` is current.
        unsafe { check("cuCtxGetDevice", cu::cuCtxGetDevice(&mut d))? };
        Ok(d)
    })
}

/// Run `f` with this thread's stream capture mode relaxed: driver calls that a capture in
/// progress would otherwise refuse (allocating device memory, opening IPC mappings) are
/// allowed on this thread; the previous mode is restored afterwards. None of these calls
/// enqueues work on a stream, so a capture in progress is unaffected.
pub fn with_relaxed_capture<R>(f: impl FnOnce() -> R) -> R {
    let mut mode = cu::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
    // SAFETY: in/out pointer to a local mode value.
    let swapped =
        unsafe { cu::cuThreadExchangeStreamCaptureMode(&mut mode) } == cu::CUresult::CUDA_SUCCESS;
    let r = f();
    if swapped {
        // SAFETY: puts back the mode the exchange above returned.
        unsafe { cu::cuThreadExchangeStreamCaptureMode(&mut mode) };
    }
    r
}

/// Enqueue `f(data)` on `s`: it runs on a driver thread once the work before it completed, and
/// the work after it waits for it to return (a host node when `s` is being captured).
///
/// # Safety
/// `f` must not call CUDA and must not block on work that only later stream work completes;
/// `data` must stay valid until every run of it (each replay of a captured graph) finished.
pub unsafe fn launch_host_func(
    s: Stream,
    f: unsafe extern "C" fn(*mut c_void),
    data: *mut c_void,
) -> CuResult<()> {
    check("cuLaunchHostFunc", cu::cuLaunchHostFunc(s.0, Some(f), data))
}

/// Retain device `ordinal`'s primary context (the one the CUDA runtime uses too).
pub fn primary_context(ordinal: i32) -> CuResult<Context> {
    let mut dev = 0;
    let mut ctx = std::ptr::null_mut();
    // SAFETY: plain driver calls with out-pointers to locals.
    unsafe {
        check("cuDeviceGet", cu::cuDeviceGet(&mut dev, ordinal))?;
        check(
            "cuDevicePrimaryCtxRetain",
            cu::cuDevicePrimaryCtxRetain(&mut ctx, dev),
        )?;
    }
    Ok(Context(ctx))
}

/// Run `f` with `ctx` current on this thread, restoring the previous current context.
pub fn with_context<R>(ctx: Context, f: impl FnOnce() -> CuResult<R>) -> CuResult<R> {
    // SAFETY: ctx is a retained context; push/pop are balanced below.
    unsafe { check("cuCtxPushCurrent", cu::cuCtxPushCurrent_v2(ctx.0))? };
    let r = f();
    let mut old = std::ptr::null_mut();
    // SAFETY: pops the context pushed above.
    let p = unsafe { check("cuCtxPopCurrent", cu::cuCtxPopCurrent_v2(&mut old)) };
    let v = r?;
    p?;
    Ok(v)
}

/// A new non-blocking stream in the current context.
pub fn stream_create() -> CuResult<Stream> {
    let mut s = std::ptr::null_mut();
    // SAFETY: out-pointer to a local; CU_STREAM_NON_BLOCKING = 1.
    unsafe {
        check(
            "cuStreamCreate",
            cu::cuStreamCreate(&mut s, cu::CUstream_flags::CU_STREAM_NON_BLOCKING as u32),
        )?
    };
    Ok(Stream(s))
}

/// Destroy a stream made by [`stream_create`] (in its context, which must be current).
pub fn stream_destroy(s: Stream) {
    // SAFETY: a stream created by stream_create, not used afterwards (Stream is a copyable
    // handle: the caller drops its last use).
    let _ = unsafe { cu::cuStreamDestroy_v2(s.0) };
}

pub fn stream_synchronize(s: Stream) -> CuResult<()> {
    // SAFETY: a stream created by stream_create.
    unsafe { check("cuStreamSynchronize", cu::cuStreamSynchronize(s.0)) }
}

/// Whether every operation enqueued on `s` has finished (no wait).
pub fn stream_query(s: Stream) -> CuResult<bool> {
    // SAFETY: a stream created by stream_create.
    match unsafe { cu::cuStreamQuery(s.0) } {
        cu::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
        r => check("cuStreamQuery", r).map(|()| true),
    }
}

/// Copy `dst.len()` bytes from device address `src` into host memory, ordered on `s`
/// (the caller synchronizes the stream before reading `dst`).
///
/// # Safety
/// `src..src+dst.len()` must be device-accessible memory; `dst` must stay alive until `s` is
/// synchronized. The owning context must be current.
pub unsafe fn memcpy_dtoh_async(dst: &mut [u8], src: usize, s: Stream) -> CuResult<()> {
    if dst.is_empty() {
        return Ok(());
    }
    check(
        "cuMemcpyDtoHAsync",
        cu::cuMemcpyDtoHAsync_v2(
            dst.as_mut_ptr() as *mut c_void,
            src as cu::CUdeviceptr,
            dst.len(),
            s.0,
        ),
    )
}

/// Copy host bytes to device address `dst`, ordered on `s`.
///
/// # Safety
/// As [`memcpy_dtoh_async`], with `dst..dst+src.len()` writable device memory.
pub unsafe fn memcpy_htod_async(dst: usize, src: &[u8], s: Stream) -> CuResult<()> {
    if src.is_empty() {
        return Ok(());
    }
    check(
        "cuMemcpyHtoDAsync",
        cu::cuMemcpyHtoDAsync_v2(
            dst as cu::CUdeviceptr,
            src.as_ptr() as *const c_void,
            src.len(),
            s.0,
        ),
    )
}

/// Device-to-device (or any unified address to any unified address) copy, ordered on `s`.
///
/// # Safety
/// Both ranges valid device-accessible memory of `len` bytes; the context current.
pub unsafe fn memcpy_dtod_async(dst: usize, src: usize, len: usize, s: Stream) -> CuResult<()> {
    if len == 0 {
        return Ok(());
    }
    check(
        "cuMemcpyAsync",
        cu::cuMemcpyAsync(dst as cu::CUdeviceptr, src as cu::CUdeviceptr, len, s.0),
    )
}

/// What the driver says about one address (zeros for memory it does not know).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RawPtrAttrs {
    /// CUmemorytype: 0 unknown (plain host memory), 1 host (pinned), 2 device, 3 array, 4 unified.
    pub mem_type: u32,
    pub device_ordinal: i32,
    pub buffer_id: u64,
    pub is_managed: bool,
    pub range_start: usize,
    pub range_size: usize,
}

/// cuPointerGetAttributes for `ptr` (succeeds with zeros for memory the driver does not know).
pub fn pointer_attributes(ptr: usize) -> CuResult<RawPtrAttrs> {
    use cu::CUpointer_attribute as A;
    let mut mem_type: u32 = 0;
    let mut ordinal: i32 = -1;
    let mut buffer_id: u64 = 0;
    let mut managed: u32 = 0; // the driver writes a C bool into the first byte
    let mut start: u64 = 0;
    let mut size: usize = 0;
    let mut attrs = [
        A::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
        A::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        A::CU_POINTER_ATTRIBUTE_BUFFER_ID,
        A::CU_POINTER_ATTRIBUTE_IS_MANAGED,
        A::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
        A::CU_POINTER_ATTRIBUTE_RANGE_SIZE,
    ];
    let mut data: [*mut c_void; 6] = [
        &mut mem_type as *mut u32 as *mut c_void,
        &mut ordinal as *mut i32 as *mut c_void,
        &mut buffer_id as *mut u64 as *mut c_void,
        &mut managed as *mut u32 as *mut c_void,
        &mut start as *mut u64 as *mut c_void,
        &mut size as *mut usize as *mut c_void,
    ];
    // SAFETY: each data slot points at a local of the attribute's documented type and size.
    unsafe {
        check(
            "cuPointerGetAttributes",
            cu::cuPointerGetAttributes(
                attrs.len() as u32,
                attrs.as_mut_ptr(),
                data.as_mut_ptr(),
                ptr as cu::CUdeviceptr,
            ),
        )?
    };
    Ok(RawPtrAttrs {
        mem_type,
        device_ordinal: ordinal,
        buffer_id,
        is_managed: managed & 0xff != 0,
        range_start: start as usize,
        range_size: size,
    })
}

/// Make synchronous memory operations on the device allocation holding `ptr` complete before
/// they return (CU_POINTER_ATTRIBUTE_SYNC_MEMOPS). Without it a `cudaMemcpy` from pageable host
/// memory into the allocation may return before the bytes land (the driver's documented
/// "API synchronization behavior"), and a copy or kernel on another stream (gpumpi's
/// non-blocking streams) may then read the old bytes.
pub fn set_sync_memops(ptr: usize) -> CuResult<()> {
    let on: u32 = 1;
    // SAFETY: the attribute's value is an unsigned int read during the call.
    unsafe {
        check(
            "cuPointerSetAttribute(SYNC_MEMOPS)",
            cu::cuPointerSetAttribute(
                &on as *const u32 as *const c_void,
                cu::CUpointer_attribute::CU_POINTER_ATTRIBUTE_SYNC_MEMOPS,
                ptr as cu::CUdeviceptr,
            ),
        )
    }
}

/// Wait for the work of the current context's legacy default stream (CU_STREAM_LEGACY): the
/// stream of a program's synchronous `cudaMemcpy` calls.
pub fn legacy_stream_synchronize() -> CuResult<()> {
    // SAFETY: CU_STREAM_LEGACY (the handle value 0x1) names the current context's legacy
    // default stream; a context is current (the caller's contract, as for every call here).
    unsafe {
        check(
            "cuStreamSynchronize(CU_STREAM_LEGACY)",
            cu::cuStreamSynchronize(0x1 as cu::CUstream),
        )
    }
}

/// The driver's buffer id of the allocation holding `ptr` (0 when it is not CUDA memory).
pub fn pointer_buffer_id(ptr: usize) -> u64 {
    pointer_attribute_u64(ptr, cu::CUpointer_attribute::CU_POINTER_ATTRIBUTE_BUFFER_ID)
}

/// One 64-bit pointer attribute of `ptr` (`attr` must be one whose type is a 64-bit integer);
/// 0 when the driver refuses.
fn pointer_attribute_u64(ptr: usize, attr: cu::CUpointer_attribute) -> u64 {
    let mut v: u64 = 0;
    let mut attrs = [attr];
    let mut data: [*mut c_void; 1] = [&mut v as *mut u64 as *mut c_void];
    // SAFETY: the slot points at a u64, the attribute's type (the caller's contract).
    let r =
        unsafe { cu::cuPointerGetAttributes(1, attrs.as_mut_ptr(), data.as_mut_ptr(), ptr as _) };
    if r != cu::CUresult::CUDA_SUCCESS {
        return 0;
    }
    v
}

/// A loaded module (never unloaded: lives as long as its context).
#[derive(Clone, Copy, Debug)]
pub struct Module(cu::CUmodule);
// SAFETY: modules may be used from any thread of the process.
unsafe impl Send for Module {}
unsafe impl Sync for Module {}

/// A kernel of a loaded module.
#[derive(Clone, Copy, Debug)]
pub struct Function(cu::CUfunction);
// SAFETY: as for Module.
unsafe impl Send for Function {}
unsafe impl Sync for Function {}

/// Load a fatbin/cubin/PTX image into the current context.
pub fn module_load(image: &[u8]) -> CuResult<Module> {
    let mut m = std::ptr::null_mut();
    // SAFETY: the image is a complete fatbin (or NUL-terminated PTX) embedded in the library.
    unsafe {
        check(
            "cuModuleLoadData",
            cu::cuModuleLoadData(&mut m, image.as_ptr() as *const c_void),
        )?
    };
    Ok(Module(m))
}

pub fn module_function(m: Module, name: &CStr) -> CuResult<Function> {
    let mut f = std::ptr::null_mut();
    // SAFETY: m is a loaded module; name is NUL-terminated.
    unsafe {
        check(
            "cuModuleGetFunction",
            cu::cuModuleGetFunction(&mut f, m.0, name.as_ptr()),
        )?
    };
    Ok(Function(f))
}

/// Launch `f` on `s` with a 1-D grid.
///
/// # Safety
/// `params` must match the kernel's parameter list (one pointer to each argument's value), and
/// every device pointer argument must be valid for what the kernel does with it.
pub unsafe fn launch(
    f: Function,
    grid: u32,
    block: u32,
    params: &mut [*mut c_void],
    s: Stream,
) -> CuResult<()> {
    launch_2d(f, (grid, 1), block, params, s)
}

/// Launch `f` on `s` with a 2-D grid (`grid.1` rows, e.g. one per segment or peer).
///
/// # Safety
/// As [`launch`].
pub unsafe fn launch_2d(
    f: Function,
    grid: (u32, u32),
    block: u32,
    params: &mut [*mut c_void],
    s: Stream,
) -> CuResult<()> {
    check(
        "cuLaunchKernel",
        cu::cuLaunchKernel(
            f.0,
            grid.0,
            grid.1,
            1,
            block,
            1,
            1,
            0,
            s.0,
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        ),
    )
}

/// An integer attribute of device `ordinal`.
fn device_attribute(ordinal: i32, attr: cu::CUdevice_attribute) -> CuResult<i32> {
    let (mut dev, mut n) = (0, 0);
    // SAFETY: out-pointers to locals.
    unsafe {
        check("cuDeviceGet", cu::cuDeviceGet(&mut dev, ordinal))?;
        check(
            "cuDeviceGetAttribute",
            cu::cuDeviceGetAttribute(&mut n, attr, dev),
        )?;
    }
    Ok(n)
}

/// Number of streaming multiprocessors of device `ordinal`.
pub fn multiprocessor_count(ordinal: i32) -> CuResult<i32> {
    device_attribute(
        ordinal,
        cu::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
    )
}

/// The UUID of device `ordinal` (the same in every process, whatever `CUDA_VISIBLE_DEVICES`).
pub fn device_uuid(ordinal: i32) -> CuResult<[u8; 16]> {
    let mut dev = 0;
    let mut u = cu::CUuuid_st { bytes: [0; 16] };
    // SAFETY: out-pointers to locals.
    unsafe {
        check("cuDeviceGet", cu::cuDeviceGet(&mut dev, ordinal))?;
        check("cuDeviceGetUuid", cu::cuDeviceGetUuid_v2(&mut u, dev))?;
    }
    let mut out = [0u8; 16];
    for (o, b) in out.iter_mut().zip(u.bytes.iter()) {
        *o = *b as u8;
    }
    Ok(out)
}

/// Compute capability (major, minor) of device `ordinal`.
pub fn compute_capability(ordinal: i32) -> CuResult<(i32, i32)> {
    use cu::CUdevice_attribute as A;
    Ok((
        device_attribute(ordinal, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
        device_attribute(ordinal, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
    ))
}

/// Total memory of device `ordinal` in bytes.
pub fn total_mem(ordinal: i32) -> CuResult<usize> {
    let (mut dev, mut bytes) = (0, 0usize);
    // SAFETY: out-pointers to locals.
    unsafe {
        check("cuDeviceGet", cu::cuDeviceGet(&mut dev, ordinal))?;
        check("cuDeviceTotalMem", cu::cuDeviceTotalMem_v2(&mut bytes, dev))?;
    }
    Ok(bytes)
}

/// PCI bus id of device `ordinal` ("0000:1b:00.0").
pub fn pci_bus_id(ordinal: i32) -> CuResult<String> {
    device_string(ordinal, "cuDeviceGetPCIBusId", cu::cuDeviceGetPCIBusId)
}

/// The link from device `a` to device `b` as the driver describes it: (peer access supported,
/// performance rank (0 = best), native atomics supported).
pub fn p2p_attributes(a: i32, b: i32) -> CuResult<(bool, i32, bool)> {
    use cu::CUdevice_P2PAttribute as A;
    let (mut da, mut db) = (0, 0);
    let (mut access, mut rank, mut atomics) = (0, 0, 0);
    // SAFETY: out-pointers to locals.
    unsafe {
        check("cuDeviceGet", cu::cuDeviceGet(&mut da, a))?;
        check("cuDeviceGet", cu::cuDeviceGet(&mut db, b))?;
        for (out, attr) in [
            (&mut access, A::CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED),
            (&mut rank, A::CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK),
            (
                &mut atomics,
                A::CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED,
            ),
        ] {
            check(
                "cuDeviceGetP2PAttribute",
                cu::cuDeviceGetP2PAttribute(out, attr, da, db),
            )?;
        }
    }
    Ok((access != 0, rank, atomics != 0))
}

/// Whether device `a` can access device `b`'s memory directly (P2P over NVLink or PCIe).
pub fn can_access_peer(a: i32, b: i32) -> CuResult<bool> {
    if a == b {
        return Ok(true);
    }
    let (mut da, mut db, mut ok) = (0, 0, 0);
    // SAFETY: out-pointers to locals.
    unsafe {
        check("cuDeviceGet", cu::cuDeviceGet(&mut da, a))?;
        check("cuDeviceGet", cu::cuDeviceGet(&mut db, b))?;
        check(
            "cuDeviceCanAccessPeer",
            cu::cuDeviceCanAccessPeer(&mut ok, da, db),
        )?;
    }
    Ok(ok != 0)
}

/// A legacy CUDA IPC handle of the allocation starting at `base` (`cudaMalloc`/`cuMemAlloc`
/// memory; VMM and stream-ordered pool memory are refused by the driver).
pub fn ipc_get_mem_handle(base: usize) -> CuResult<[u8; 64]> {
    let mut h = cu::CUipcMemHandle_st { reserved: [0; 64] };
    // SAFETY: out-pointer to a local; base is an address the driver checks.
    unsafe {
        check(
            "cuIpcGetMemHandle",
            cu::cuIpcGetMemHandle(&mut h, base as cu::CUdeviceptr),
        )?
    };
    let mut out = [0u8; 64];
    for (o, b) in out.iter_mut().zip(h.reserved.iter()) {
        *o = *b as u8;
    }
    Ok(out)
}

/// Map another process's allocation into the current context (peer access enabled lazily).
/// Returns the base address of the mapping.
pub fn ipc_open_mem_handle(handle: &[u8; 64]) -> CuResult<usize> {
    let mut h = cu::CUipcMemHandle_st { reserved: [0; 64] };
    for (o, b) in h.reserved.iter_mut().zip(handle.iter()) {
        *o = *b as std::ffi::c_char;
    }
    let mut p: cu::CUdeviceptr = 0;
    // SAFETY: out-pointer to a local; CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1.
    unsafe {
        check(
            "cuIpcOpenMemHandle",
            cu::cuIpcOpenMemHandle_v2(&mut p, h, 1),
        )?
    };
    Ok(p as usize)
}

/// How many times this library gave memory the driver knew back to it (device allocations,
/// page-locked or registered host memory, VMM mappings, IPC mappings), counted after each is
/// gone: a classification remembered before the count moved may describe an allocation no
/// longer there (`gpu::CallMemo`).
static GIVEN_BACK: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The count of [`GIVEN_BACK`] now.
pub fn given_back() -> u64 {
    GIVEN_BACK.load(std::sync::atomic::Ordering::Acquire)
}

fn note_given_back() {
    GIVEN_BACK.fetch_add(1, std::sync::atomic::Ordering::Release);
}

/// Unmap a mapping made by [`ipc_open_mem_handle`].
///
/// # Safety
/// `p` came from `ipc_open_mem_handle` and no copy or kernel still uses it.
pub unsafe fn ipc_close_mem_handle(p: usize) {
    let _ = cu::cuIpcCloseMemHandle(p as cu::CUdeviceptr);
    note_given_back();
}

/// A CUDA event without timing (ordering only), in the context that was current at creation.
#[derive(Debug)]
pub struct Event(cu::CUevent);

impl Event {
    /// A new event in the current context.
    pub fn new() -> CuResult<Event> {
        let mut e = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; CU_EVENT_DISABLE_TIMING = 2.
        unsafe { check("cuEventCreate", cu::cuEventCreate(&mut e, 2))? };
        Ok(Event(e))
    }
    /// Mark the point `s` has reached.
    pub fn record(&self, s: Stream) -> CuResult<()> {
        // SAFETY: a live event and stream of the same context.
        unsafe { check("cuEventRecord", cu::cuEventRecord(self.0, s.0)) }
    }
    /// Whether the work before the last [`Event::record`] has finished (no wait).
    pub fn query(&self) -> CuResult<bool> {
        // SAFETY: a live event.
        match unsafe { cu::cuEventQuery(self.0) } {
            cu::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            r => check("cuEventQuery", r).map(|()| true),
        }
    }
    /// Wait until the work before the last [`Event::record`] has finished.
    pub fn synchronize(&self) -> CuResult<()> {
        // SAFETY: a live event.
        unsafe { check("cuEventSynchronize", cu::cuEventSynchronize(self.0)) }
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: a live event, not used after this; pending work is unaffected.
        unsafe { cu::cuEventDestroy_v2(self.0) };
    }
}

/// `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR` in a handle-type bitmask.
pub const HANDLE_TYPE_POSIX_FD: u64 = 1;

/// The handle types the VMM allocation holding `ptr` may be exported with (a bitmask of
/// CUmemAllocationHandleType; 0 for memory that is not VMM or was created with none).
pub fn allowed_handle_types(ptr: usize) -> u64 {
    pointer_attribute_u64(
        ptr,
        cu::CUpointer_attribute::CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES,
    )
}

/// Base and size of the allocation holding `ptr` as cuMemGetAddressRange sees it: for VMM memory
/// the one physical allocation mapped there (pointer attributes describe the whole reserved
/// range instead, which may hold several).
pub fn mem_address_range(ptr: usize) -> CuResult<(usize, usize)> {
    let mut base: cu::CUdeviceptr = 0;
    let mut size: usize = 0;
    // SAFETY: out-pointers to locals.
    unsafe {
        check(
            "cuMemGetAddressRange",
            cu::cuMemGetAddressRange_v2(&mut base, &mut size, ptr as cu::CUdeviceptr),
        )?
    };
    Ok((base as usize, size))
}

/// A new POSIX file descriptor for the VMM allocation mapped at `ptr` (any address in it), in
/// the context that is current. The caller owns (and closes) it.
pub fn vmm_export_fd(ptr: usize) -> CuResult<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let mut h: cu::CUmemGenericAllocationHandle = 0;
    // SAFETY: out-pointer to a local; the driver fails cleanly for an unmapped address.
    unsafe {
        check(
            "cuMemRetainAllocationHandle",
            cu::cuMemRetainAllocationHandle(&mut h, ptr as *mut c_void),
        )?
    };
    let mut fd: std::ffi::c_int = -1;
    // SAFETY: POSIX-descriptor export writes one int; `h` is the handle retained above.
    let r = unsafe {
        check(
            "cuMemExportToShareableHandle",
            cu::cuMemExportToShareableHandle(
                &mut fd as *mut std::ffi::c_int as *mut c_void,
                h,
                cu::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                0,
            ),
        )
    };
    // SAFETY: releases the reference cuMemRetainAllocationHandle took (the mapping keeps its).
    unsafe { cu::cuMemRelease(h) };
    r?;
    // SAFETY: the driver returned a new descriptor that nothing else owns.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// Import a VMM allocation from its POSIX descriptor and map its `size` bytes (the whole
/// allocation) readable and writable by device `ordinal`, in the context that is current.
/// Returns the mapping's address; the descriptor may be closed afterwards.
pub fn vmm_import(fd: &std::os::fd::OwnedFd, size: usize, ordinal: i32) -> CuResult<usize> {
    use std::os::fd::AsRawFd;
    let mut h: cu::CUmemGenericAllocationHandle = 0;
    // SAFETY: for POSIX descriptors the "OS handle" is the descriptor's value; out-pointer to a
    // local.
    unsafe {
        check(
            "cuMemImportFromShareableHandle",
            cu::cuMemImportFromShareableHandle(
                &mut h,
                fd.as_raw_fd() as usize as *mut c_void,
                cu::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
            ),
        )?
    };
    let mut va: cu::CUdeviceptr = 0;
    // SAFETY: out-pointer to a local; every step below undoes the ones before it on failure.
    let r = unsafe {
        check(
            "cuMemAddressReserve",
            cu::cuMemAddressReserve(&mut va, size, 0, 0, 0),
        )
        .and_then(|_| {
            let m = check("cuMemMap", cu::cuMemMap(va, size, 0, h, 0));
            if m.is_err() {
                cu::cuMemAddressFree(va, size);
            }
            m
        })
        .and_then(|_| {
            let a = cu::CUmemAccessDesc {
                location: cu::CUmemLocation {
                    type_: cu::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                    id: ordinal,
                },
                flags: cu::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
            };
            let s = check("cuMemSetAccess", cu::cuMemSetAccess(va, size, &a, 1));
            if s.is_err() {
                cu::cuMemUnmap(va, size);
                cu::cuMemAddressFree(va, size);
            }
            s
        })
    };
    // SAFETY: the mapping (if any) holds its own reference to the allocation.
    unsafe { cu::cuMemRelease(h) };
    r?;
    Ok(va as usize)
}

/// Unmap a mapping made by [`vmm_import`] and free its address range.
///
/// # Safety
/// `va`/`size` came from `vmm_import` and no copy or kernel still uses the mapping.
pub unsafe fn vmm_unmap(va: usize, size: usize) {
    let _ = cu::cuMemUnmap(va as cu::CUdeviceptr, size);
    let _ = cu::cuMemAddressFree(va as cu::CUdeviceptr, size);
    note_given_back();
}

/// Fill `len` bytes of device memory with `v`, ordered on `s`.
///
/// # Safety
/// `dst..dst+len` is writable device memory; the owning context is current.
pub unsafe fn memset_async(dst: usize, v: u8, len: usize, s: Stream) -> CuResult<()> {
    if len == 0 {
        return Ok(());
    }
    check(
        "cuMemsetD8Async",
        cu::cuMemsetD8Async(dst as cu::CUdeviceptr, v, len, s.0),
    )
}

/// Page-locked host memory (cuMemHostAlloc, portable): fast staging for copies.
pub fn host_alloc(len: usize) -> CuResult<*mut u8> {
    let mut p = std::ptr::null_mut();
    // SAFETY: out-pointer to a local; CU_MEMHOSTALLOC_PORTABLE = 1.
    unsafe { check("cuMemHostAlloc", cu::cuMemHostAlloc(&mut p, len.max(1), 1))? };
    Ok(p as *mut u8)
}

/// Page-locked host memory mapped into the device address space (portable, device-mapped):
/// returns the host pointer and the device address of the same bytes.
pub fn host_alloc_mapped(len: usize) -> CuResult<(*mut u8, u64)> {
    let mut p = std::ptr::null_mut();
    let mut d: cu::CUdeviceptr = 0;
    // SAFETY: out-pointers to locals; CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP = 3.
    unsafe {
        check("cuMemHostAlloc", cu::cuMemHostAlloc(&mut p, len.max(1), 3))?;
        if let Err(e) = check(
            "cuMemHostGetDevicePointer",
            cu::cuMemHostGetDevicePointer_v2(&mut d, p, 0),
        ) {
            let _ = cu::cuMemFreeHost(p);
            return Err(e);
        }
    }
    Ok((p as *mut u8, d as u64))
}

/// Free memory from [`host_alloc`].
///
/// # Safety
/// `p` came from `host_alloc` and is not used afterwards.
pub unsafe fn host_free(p: *mut u8) {
    let _ = cu::cuMemFreeHost(p as *mut c_void);
    note_given_back();
}

/// Page-lock `len` bytes of existing host memory (a shared-memory mapping) for every context
/// and map them into the device address space; returns the device address of `p`.
///
/// # Safety
/// `p..p+len` is a live mapping that stays mapped until [`host_unregister`].
pub unsafe fn host_register(p: *mut u8, len: usize) -> CuResult<u64> {
    // CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP = 3.
    check(
        "cuMemHostRegister",
        cu::cuMemHostRegister_v2(p as *mut c_void, len, 3),
    )?;
    let mut d: cu::CUdeviceptr = 0;
    if let Err(e) = check(
        "cuMemHostGetDevicePointer",
        cu::cuMemHostGetDevicePointer_v2(&mut d, p as *mut c_void, 0),
    ) {
        let _ = cu::cuMemHostUnregister(p as *mut c_void);
        return Err(e);
    }
    Ok(d as u64)
}

/// The device address of registered host memory `p` in the current context.
///
/// # Safety
/// `p` lies in memory registered with [`host_register`].
pub unsafe fn host_device_pointer(p: *mut u8) -> CuResult<u64> {
    let mut d: cu::CUdeviceptr = 0;
    check(
        "cuMemHostGetDevicePointer",
        cu::cuMemHostGetDevicePointer_v2(&mut d, p as *mut c_void, 0),
    )?;
    Ok(d as u64)
}

/// Undo [`host_register`].
///
/// # Safety
/// `p` was registered and no device work uses it any more.
pub unsafe fn host_unregister(p: *mut u8) {
    let _ = cu::cuMemHostUnregister(p as *mut c_void);
    note_given_back();
}

/// Make `s` wait until each 64-bit word at device address `addr` is >= its `v` (stream memory
/// operations, one driver call for all: no kernel, the GPU's front end polls).
///
/// # Safety
/// Each `addr` is device-accessible memory (device memory or registered, device-mapped host
/// memory).
pub unsafe fn stream_wait_all_geq(s: Stream, waits: &[(u64, u64)]) -> CuResult<()> {
    if waits.is_empty() {
        return Ok(());
    }
    let mut ops: Vec<cu::CUstreamBatchMemOpParams> = waits
        .iter()
        .map(|&(addr, v)| {
            // SAFETY: an all-zero union is a valid value to fill in.
            let mut o: cu::CUstreamBatchMemOpParams = unsafe { std::mem::zeroed() };
            o.waitValue.operation = cu::CUstreamBatchMemOpType::CU_STREAM_MEM_OP_WAIT_VALUE_64;
            o.waitValue.address = addr as cu::CUdeviceptr;
            o.waitValue.__bindgen_anon_1.value64 = v;
            o.waitValue.flags = 0; // CU_STREAM_WAIT_VALUE_GEQ
            o
        })
        .collect();
    check(
        "cuStreamBatchMemOp",
        cu::cuStreamBatchMemOp_v2(s.0, ops.len() as u32, ops.as_mut_ptr(), 0),
    )
}

/// Write `v` to the 64-bit word at device address `addr` once the work before it on `s` is
/// complete (with a system-scope memory barrier before the write: the default flags).
///
/// # Safety
/// As for [`stream_wait_all_geq`].
pub unsafe fn stream_write(s: Stream, addr: u64, v: u64) -> CuResult<()> {
    check(
        "cuStreamWriteValue64",
        cu::cuStreamWriteValue64_v2(s.0, addr as cu::CUdeviceptr, v, 0),
    )
}

/// Allocate device memory in the current context (tests and kernel self-checks).
pub fn mem_alloc(len: usize) -> CuResult<usize> {
    let mut p: cu::CUdeviceptr = 0;
    // SAFETY: out-pointer to a local.
    unsafe { check("cuMemAlloc", cu::cuMemAlloc_v2(&mut p, len.max(1)))? };
    Ok(p as usize)
}

/// # Safety
/// `p` came from [`mem_alloc`] and is not used afterwards.
pub unsafe fn mem_free(p: usize) {
    let _ = cu::cuMemFree_v2(p as cu::CUdeviceptr);
    note_given_back();
}

/// Test helper: back-to-back VMM allocations on device `ordinal` in one reserved range, each
/// `chunks[i]` granules long and created with handle types `types` (a bitmask), readable and
/// writable by the device (current context). Returns the range's base and each chunk's bytes.
#[cfg(test)]
pub fn vmm_alloc_chunks(
    ordinal: i32,
    chunks: &[usize],
    types: u64,
) -> CuResult<(usize, Vec<usize>)> {
    // SAFETY: plain-data property struct, filled below; out-pointers to locals.
    unsafe {
        let mut prop: cu::CUmemAllocationProp = std::mem::zeroed();
        prop.type_ = cu::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.requestedHandleTypes = cu::CUmemAllocationHandleType(types as u32);
        prop.location.type_ = cu::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = ordinal;
        let mut gran = 0usize;
        check(
            "cuMemGetAllocationGranularity",
            cu::cuMemGetAllocationGranularity(
                &mut gran,
                &prop,
                cu::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED,
            ),
        )?;
        let sizes: Vec<usize> = chunks.iter().map(|c| c * gran).collect();
        let total: usize = sizes.iter().sum();
        let mut va: cu::CUdeviceptr = 0;
        check(
            "cuMemAddressReserve",
            cu::cuMemAddressReserve(&mut va, total, 0, 0, 0),
        )?;
        let mut off = 0;
        for &sz in &sizes {
            let mut h: cu::CUmemGenericAllocationHandle = 0;
            check("cuMemCreate", cu::cuMemCreate(&mut h, sz, &prop, 0))?;
            check("cuMemMap", cu::cuMemMap(va + off as u64, sz, 0, h, 0))?;
            check("cuMemRelease", cu::cuMemRelease(h))?;
            off += sz;
        }
        let a = cu::CUmemAccessDesc {
            location: prop.location,
            flags: cu::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        check("cuMemSetAccess", cu::cuMemSetAccess(va, total, &a, 1))?;
        Ok((va as usize, sizes))
    }
}

/// Whether device memory can be exported as a dma-buf: the process already uses CUDA
/// ([`driver_in_process`]: this never initializes CUDA on its own), the driver loads, and
/// device 0 reports `CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED`.
pub fn dmabuf_supported() -> bool {
    if !driver_in_process() || load().map(|(_, n)| n).unwrap_or(0) < 1 {
        return false;
    }
    let r = catch_quietly(|| {
        let mut dev = 0;
        let mut v = 0;
        // SAFETY: out-pointers to locals; device 0 exists (count checked above).
        unsafe {
            cu::cuDeviceGet(&mut dev, 0) == cu::CUresult::CUDA_SUCCESS
                && cu::cuDeviceGetAttribute(
                    &mut v,
                    cu::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED,
                    dev,
                ) == cu::CUresult::CUDA_SUCCESS
                && v != 0
        }
    });
    r.unwrap_or(false)
}

/// A dma-buf descriptor for the device memory `base..base+len` (both page-aligned, inside one
/// allocation), from `cuMemGetHandleForAddressRange`. The caller owns (and closes) it.
pub fn dmabuf_fd(base: usize, len: usize) -> CuResult<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let mut fd: std::ffi::c_int = -1;
    let r = catch_quietly(|| {
        // SAFETY: the driver writes one int for the dma-buf handle type; it fails cleanly for
        // a range that is not device memory.
        unsafe {
            cu::cuMemGetHandleForAddressRange(
                &mut fd as *mut std::ffi::c_int as *mut c_void,
                base as cu::CUdeviceptr,
                len,
                cu::CUmemRangeHandleType::CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
                0,
            )
        }
    })
    .map_err(|_| fail("cuMemGetHandleForAddressRange", "not in this libcuda"))?;
    check("cuMemGetHandleForAddressRange", r)?;
    // SAFETY: the driver returned a new descriptor that nothing else owns.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    /// A panic inside `catch_quietly` comes back as `Err` (silently), a value as `Ok`, and the
    /// thread leaves the quiet section either way, so later panics reach the previous hook.
    #[test]
    fn quiet_catch_returns_panics_as_errors() {
        assert!(super::catch_quietly(|| panic!("a missing symbol")).is_err());
        assert_eq!(super::QUIET_PANICS.with(|q| q.get()), 0);
        assert_eq!(super::catch_quietly(|| 7).ok(), Some(7));
        let nested = super::catch_quietly(|| super::catch_quietly(|| panic!("inner")).is_err());
        assert_eq!(nested.ok(), Some(true));
        assert_eq!(super::QUIET_PANICS.with(|q| q.get()), 0);
    }

    #[test]
    fn driver_check_is_cheap() {
        // Asked on every buffer classification until libcuda shows up: must not cost a
        // dlopen-style library search (~100 us) per call.
        let t0 = std::time::Instant::now();
        let first = super::driver_in_process();
        for _ in 0..10_000 {
            let again = super::driver_in_process();
            // Another test may load libcuda meanwhile: only false -> true may change.
            assert!(again || !first);
        }
        let per = t0.elapsed().as_secs_f64() / 10_000.0;
        assert!(per < 20e-6, "driver_in_process takes {:.1} us", per * 1e6);
    }
}
