//! Stream-ordered MPI on an application's CUDA stream (MPICH's `MPIX_*_enqueue` forms): the
//! CUDA side of one stream communicator.
//!
//! An operation is a sequence of stream work on the user's stream: asynchronous copies between
//! the user's device buffer and page-locked staging, and host functions (`cuLaunchHostFunc`).
//! Every piece is capturable into a CUDA graph (memcpy nodes, host nodes, stream memory
//! operations), and the operation owns all it touches for as long as a graph may replay it.
//!
//! Host functions never run MPI and never call CUDA: a host function only hands its step to
//! the communicator's worker thread (a queue under a mutex) and returns. Where the stream must
//! wait for the step (a blocking send, receive, wait or collective), the stream then waits for
//! the step's flag, a word of mapped page-locked memory the worker sets when the MPI call
//! returned (`cuStreamWaitValue64` through `cuStreamBatchMemOp`), and clears it again
//! (`cuStreamWriteValue64`), so a replayed graph finds it clear. Why a worker: CUDA may run the
//! host functions of all streams of a process on one driver thread, so a host function that
//! blocked in MPI could hold back another stream's step that its peer waits for (two stream
//! communicators ordered differently on two ranks would deadlock). The worker is a plain
//! application-side MPI caller (as under MPI_THREAD_MULTIPLE: it takes the runtime lock per
//! progress pass), so it neither waits for the main thread's MPI calls nor for its
//! `cuStreamSynchronize`. Its buffers are host memory (the staging or the user's host
//! buffer), and it is an ordinary thread, not CUDA's: where its progress passes advance other
//! threads' device transfers, the driver calls they make are legal there. (Its stream
//! communicator's collectives stay off the GPU collective paths: `dispatch::gpu`.)
//!
//! Reuse: staging areas of operations the stream finished go back to a free list (a host
//! function bumps a counter after an operation's last stream work, and the next enqueue reads
//! it); operations enqueued while the stream is captured are kept until the communicator is
//! freed, since every replay of the graph uses them.

use crate::sys::cuda;
use std::collections::VecDeque;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

/// An application's CUDA stream and the context it belongs to.
#[derive(Clone, Copy, Debug)]
pub struct UserStream {
    /// The `cudaStream_t` value as the application gave it.
    pub raw: usize,
    stream: cuda::Stream,
    ctx: cuda::Context,
}

impl UserStream {
    /// The stream `raw` (validated by asking the driver for its context).
    pub fn new(raw: usize) -> Result<UserStream, String> {
        if super::gpu().is_none() {
            return Err(format!(
                "no CUDA support in this process ({})",
                super::unavailable_reason().unwrap_or_default()
            ));
        }
        let stream = cuda::Stream::from_raw(raw);
        let ctx = cuda::stream_context(stream).map_err(|e| e.to_string())?;
        Ok(UserStream { raw, stream, ctx })
    }

    fn in_ctx<R>(&self, f: impl FnOnce() -> cuda::CuResult<R>) -> Result<R, String> {
        cuda::with_context(self.ctx, f).map_err(|e| e.to_string())
    }

    /// Whether the stream is being captured into a graph.
    pub fn capturing(&self) -> Result<bool, String> {
        self.in_ctx(|| cuda::stream_capturing(self.stream))
    }

    /// Wait for everything enqueued on the stream.
    pub fn synchronize(&self) -> Result<(), String> {
        self.in_ctx(|| cuda::stream_synchronize(self.stream))
    }

    /// The device of the stream's context, where that context is the device's primary context
    /// (the one the CUDA runtime uses, and in which gpumpi loads its kernels and maps peers'
    /// memory); why not otherwise.
    pub fn primary_ordinal(&self) -> Result<i32, String> {
        let o = cuda::context_device(self.ctx).map_err(|e| e.to_string())?;
        let g = super::gpu().ok_or("CUDA is not available")?;
        if g.device(o)?.ctx != self.ctx {
            return Err(format!(
                "the stream belongs to a context other than device {o}'s primary context"
            ));
        }
        Ok(o)
    }

    /// Enqueue the stream kernel of [`super::enqueue_kernel`] with parameter `a` and `blocks`
    /// blocks on the stream (a kernel node when the stream is being captured).
    ///
    /// # Safety
    /// `a`'s buffers are device-accessible memory that lives until the stream (or every replay
    /// of a graph capturing it) passed the kernel, its peers' scratch is mapped here, and every
    /// rank of the communicator enqueues the same call in the same order.
    pub unsafe fn launch_stream_kernel(
        &self,
        ordinal: i32,
        a: &super::enqueue_kernel::StreamAr,
        blocks: usize,
    ) -> Result<(), String> {
        let g = super::gpu().ok_or("CUDA is not available")?;
        let k = g
            .kernels(ordinal)?
            .stream_ar
            .ok_or("the library's kernels lack gpumpi_stream_allreduce")?;
        let f = match a.algo {
            super::enqueue_kernel::LL => k.ll,
            super::enqueue_kernel::PIPE | super::enqueue_kernel::PIPE_TWO => k.pipe,
            super::enqueue_kernel::TWO_SHOT => k.two_shot,
            super::enqueue_kernel::BCAST
            | super::enqueue_kernel::ALLGATHER
            | super::enqueue_kernel::ALLTOALL => k.coll,
            super::enqueue_kernel::REDUCE_SCATTER => k.reduce_scatter,
            _ => k.one_shot,
        };
        let mut arg = *a;
        let mut params = [&mut arg as *mut super::enqueue_kernel::StreamAr as *mut c_void];
        self.in_ctx(|| {
            // SAFETY: the one parameter is a StreamAr by value (kernels/stream_ar.cuh), read by
            // the driver during the call; the buffers are valid as the caller promises.
            unsafe {
                cuda::launch(
                    f,
                    blocks as u32,
                    super::enqueue_kernel::THREADS,
                    &mut params,
                    self.stream,
                )
            }
        })
    }
}

/// Whether the CPU cannot touch `ptr` (device or managed memory): such buffers are staged.
/// Asked on the enqueuing thread, without the legacy-stream wait of a first-seen allocation.
pub fn needs_staging(ptr: *const u8) -> bool {
    super::classify_ordered(ptr).kind.needs_staging()
}

/// Bytes before an operation's data in its staging area: the completion flag's cache line.
const DATA_OFF: usize = 64;

/// One operation's page-locked, device-mapped host memory: the flag word at 0, the staged data
/// from [`DATA_OFF`].
struct Staging {
    host: *mut u8,
    dev: u64,
    len: usize,
    ctx: cuda::Context,
}
// SAFETY: plain memory owned by this value; the flag is accessed atomically.
unsafe impl Send for Staging {}
unsafe impl Sync for Staging {}

impl Staging {
    /// A new area: allocated with the thread's capture mode relaxed, since the first operation
    /// of a size may be enqueued while the application captures the stream into a graph (an
    /// allocation is not stream work, but a global-mode capture refuses it).
    fn new(us: &UserStream, data: usize) -> Result<Staging, String> {
        let len = DATA_OFF + data.next_multiple_of(4096);
        let (host, dev) =
            cuda::with_relaxed_capture(|| us.in_ctx(|| cuda::host_alloc_mapped(len)))?;
        // SAFETY: `len` fresh bytes; the flag starts clear.
        unsafe { std::ptr::write_bytes(host, 0, DATA_OFF) };
        Ok(Staging {
            host,
            dev,
            len,
            ctx: us.ctx,
        })
    }
    fn data(&self) -> *mut u8 {
        self.host.wrapping_add(DATA_OFF)
    }
    fn capacity(&self) -> usize {
        self.len - DATA_OFF
    }
    fn flag(&self) -> &AtomicU64 {
        // SAFETY: the first 8 bytes are an aligned u64 that lives as long as `self`.
        unsafe { &*(self.host as *const AtomicU64) }
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        // SAFETY: allocated by host_alloc_mapped; dropped only once no stream work uses it.
        let _ = cuda::with_relaxed_capture(|| {
            cuda::with_context(self.ctx, || {
                unsafe { cuda::host_free(self.host) };
                Ok(())
            })
        });
    }
}

/// A step the worker runs (an MPI call over host memory), with the flag it sets after.
struct Job {
    run: Box<dyn Fn() + Send + Sync>,
    /// The staging area whose flag is set once `run` returned (a blocking step), or null.
    flag: *const AtomicU64,
    queue: Arc<WorkQueue>,
}
// SAFETY: `flag` points into a Staging owned by the same operation as the job.
unsafe impl Send for Job {}
unsafe impl Sync for Job {}

#[derive(Default)]
struct WorkQueue {
    q: Mutex<(VecDeque<usize>, bool)>,
    cv: Condvar,
}

/// The host function of a step: hand the job to the worker (no MPI, no CUDA here).
unsafe extern "C" fn start_job(p: *mut c_void) {
    // SAFETY: `p` is a Job owned by its operation, alive while any graph may run it.
    let job = unsafe { &*(p as *const Job) };
    let mut g = job.queue.q.lock().unwrap_or_else(|e| e.into_inner());
    g.0.push_back(p as usize);
    job.queue.cv.notify_one();
}

/// The host function after an operation's last stream work: count it finished.
unsafe extern "C" fn bump(p: *mut c_void) {
    // SAFETY: `p` is the queue's `done` counter, which outlives all stream work.
    unsafe { &*(p as *const AtomicU64) }.fetch_add(1, Ordering::Release);
}

fn worker(q: Arc<WorkQueue>) {
    loop {
        let p = {
            let mut g = q.q.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                if let Some(p) = g.0.pop_front() {
                    break p;
                }
                if g.1 {
                    return;
                }
                g = q.cv.wait(g).unwrap_or_else(|e| e.into_inner());
            }
        };
        // SAFETY: queued by start_job; the operation owning the job outlives the worker's use
        // (operations are dropped only after the stream finished them).
        let job = unsafe { &*(p as *const Job) };
        // The steps catch their own panics (`abi::guard`); one that escapes must not leave the
        // stream waiting for the flag forever.
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (job.run)())).is_err() {
            tracing::error!("a stream-ordered MPI step panicked");
        }
        if !job.flag.is_null() {
            // SAFETY: the flag of the job's staging area (see Job::flag).
            unsafe { &*job.flag }.store(1, Ordering::Release);
        }
    }
}

/// Everything one enqueued operation owns.
#[derive(Default)]
pub struct Op {
    staging: Vec<Staging>,
    /// Boxed: host functions hold their job's address, which must not move with the vector.
    #[allow(clippy::vec_box)]
    jobs: Vec<Box<Job>>,
}

impl Op {
    /// Take over `other`'s memory and steps (a wait finishing a nonblocking operation).
    pub fn absorb(&mut self, other: Op) {
        self.staging.extend(other.staging);
        self.jobs.extend(other.jobs);
    }
}

struct Inner {
    /// Operations enqueued outside capture, not finished yet: (number, operation).
    live: VecDeque<(u64, Op)>,
    /// Operations enqueued outside capture so far.
    issued: u64,
    /// Operations captured into graphs (kept until the communicator is freed).
    captured: Vec<Op>,
    /// Staging areas of finished operations.
    free: Vec<Staging>,
}

/// The enqueue state of one stream communicator whose local stream is a CUDA stream.
pub struct Queue {
    pub stream: UserStream,
    inner: Mutex<Inner>,
    /// Operations the stream finished (bumped by a host function; boxed: a stable address).
    done: Box<AtomicU64>,
    work: Arc<WorkQueue>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Queue {
    pub fn new(stream: UserStream) -> Result<Queue, String> {
        let work = Arc::new(WorkQueue::default());
        let w = work.clone();
        let thread = std::thread::Builder::new()
            .name("gpumpi-stream".into())
            .spawn(move || worker(w))
            .map_err(|e| format!("cannot start the stream worker thread: {e}"))?;
        Ok(Queue {
            stream,
            inner: Mutex::new(Inner {
                live: VecDeque::new(),
                issued: 0,
                captured: Vec::new(),
                free: Vec::new(),
            }),
            done: Box::new(AtomicU64::new(0)),
            work,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Start building an operation with `data` bytes of staging (0: only its flag).
    pub fn begin(&self, data: usize) -> Result<Builder<'_>, String> {
        let captured = self.stream.capturing()?;
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        // Finished operations give their staging back.
        let done = self.done.load(Ordering::Acquire);
        while g.live.front().is_some_and(|(n, _)| *n < done) {
            let (_, op) = g.live.pop_front().unwrap();
            g.free.extend(op.staging);
        }
        let reuse = g
            .free
            .iter()
            .enumerate()
            .filter(|(_, s)| s.capacity() >= data)
            .min_by_key(|(_, s)| s.capacity())
            .map(|(i, _)| i);
        let st = match reuse {
            Some(i) => g.free.swap_remove(i),
            None => {
                drop(g);
                Staging::new(&self.stream, data)?
            }
        };
        let data_ptr = st.data();
        Ok(Builder {
            q: self,
            op: Op {
                staging: vec![st],
                jobs: Vec::new(),
            },
            captured,
            data: data_ptr,
        })
    }

    /// Stop the worker and free everything (the communicator is being freed): waits for the
    /// stream first, so no stream work still uses the memory.
    pub fn release(&self) -> Result<(), String> {
        let r = self.stream.synchronize();
        {
            let mut g = self.work.q.lock().unwrap_or_else(|e| e.into_inner());
            g.1 = true;
            self.work.cv.notify_all();
        }
        if let Some(t) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = t.join();
        }
        if r.is_ok() {
            let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            g.live.clear();
            g.captured.clear();
            g.free.clear();
        }
        r
    }
}

/// An operation being enqueued (see [`Queue::begin`]).
pub struct Builder<'a> {
    q: &'a Queue,
    op: Op,
    captured: bool,
    data: *mut u8,
}

impl Builder<'_> {
    /// The staging area's data (as many bytes as `begin` asked for).
    pub fn staging(&self) -> *mut u8 {
        self.data
    }

    /// The device address of the staging area's data (mapped page-locked memory: kernels of
    /// the stream's context read and write it directly).
    pub fn staging_dev(&self) -> u64 {
        self.op.staging[0].dev + DATA_OFF as u64
    }

    /// The queue's stream.
    pub fn stream(&self) -> &UserStream {
        &self.q.stream
    }

    /// Whether the stream is being captured into a graph.
    pub fn captured(&self) -> bool {
        self.captured
    }

    /// Copy `len` device bytes at `src` into the staging area at `off`, on the stream.
    pub fn to_staging(&mut self, off: usize, src: usize, len: usize) -> Result<(), String> {
        let s = self.q.stream.stream;
        let dst = self.data.wrapping_add(off);
        self.q.stream.in_ctx(|| {
            // SAFETY: the staging area holds off + len bytes and lives as long as the operation
            // (or the communicator, for a captured one); `src` is the caller's device buffer.
            unsafe { cuda::memcpy_dtoh_async(std::slice::from_raw_parts_mut(dst, len), src, s) }
        })
    }

    /// Copy `len` bytes of staging at `src` (this operation's or an earlier one's) to device
    /// address `dst`, on the stream.
    ///
    /// # Safety
    /// `src..src+len` lies in the staging of this operation or of one it took over
    /// ([`Builder::absorb`]), so it lives as long as the copy may run.
    pub unsafe fn from_staging(
        &mut self,
        dst: usize,
        src: *const u8,
        len: usize,
    ) -> Result<(), String> {
        let s = self.q.stream.stream;
        self.q.stream.in_ctx(|| {
            // SAFETY: as for to_staging.
            unsafe { cuda::memcpy_htod_async(dst, std::slice::from_raw_parts(src, len), s) }
        })
    }

    fn job(&mut self, run: Box<dyn Fn() + Send + Sync>, blocking: bool) -> Result<(), String> {
        let flag = if blocking {
            self.op.staging[0].flag() as *const AtomicU64
        } else {
            std::ptr::null()
        };
        let job = Box::new(Job {
            run,
            flag,
            queue: self.q.work.clone(),
        });
        let p = &*job as *const Job as *mut c_void;
        self.op.jobs.push(job);
        let s = self.q.stream.stream;
        let dev = self.op.staging[0].dev;
        self.q.stream.in_ctx(|| {
            // SAFETY: start_job only queues the job, which the operation owns for as long as
            // the stream (or a graph) may run it; the flag word is device-mapped memory.
            unsafe {
                cuda::launch_host_func(s, start_job, p)?;
                if blocking {
                    cuda::stream_wait_all_geq(s, &[(dev, 1)])?;
                    cuda::stream_write(s, dev, 0)?;
                }
            }
            Ok(())
        })
    }

    /// A step the stream waits for: `run` (an MPI call over host memory) on the worker.
    pub fn blocking(&mut self, run: impl Fn() + Send + Sync + 'static) -> Result<(), String> {
        self.job(Box::new(run), true)
    }

    /// A step the stream does not wait for (starting a nonblocking call): `run` on the worker,
    /// in order with the communicator's other steps.
    pub fn nonblocking(&mut self, run: impl Fn() + Send + Sync + 'static) -> Result<(), String> {
        self.job(Box::new(run), false)
    }

    /// Enqueue nothing more: the operation is owned by the queue (reclaimed once the stream
    /// finished it, or kept for a graph).
    pub fn finish(mut self) -> Result<(), String> {
        let q = self.q;
        let op = std::mem::take(&mut self.op);
        if self.captured {
            q.inner
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .captured
                .push(op);
            return Ok(());
        }
        let s = q.stream.stream;
        let done = &*q.done as *const AtomicU64 as *mut c_void;
        // SAFETY: `bump` only increments the counter, which lives as long as the queue.
        q.stream
            .in_ctx(|| unsafe { cuda::launch_host_func(s, bump, done) })?;
        let mut g = q.inner.lock().unwrap_or_else(|e| e.into_inner());
        let n = g.issued;
        g.issued += 1;
        g.live.push_back((n, op));
        Ok(())
    }

    /// Keep the operation unfinished (a nonblocking start): its memory and steps go to the
    /// request, and the wait that completes it takes them over ([`Op::absorb`]).
    pub fn into_pending(mut self) -> (Op, bool) {
        (std::mem::take(&mut self.op), self.captured)
    }

    /// Take over an unfinished operation (see [`Builder::into_pending`]).
    pub fn absorb(&mut self, other: Op) {
        self.op.absorb(other);
    }
}

impl Drop for Builder<'_> {
    /// An operation abandoned half-way (a driver call failed): stream work enqueued so far may
    /// still use its memory, so it is kept until the communicator is freed.
    fn drop(&mut self) {
        if !self.op.staging.is_empty() || !self.op.jobs.is_empty() {
            let op = std::mem::take(&mut self.op);
            self.q
                .inner
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .captured
                .push(op);
        }
    }
}
