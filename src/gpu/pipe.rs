//! Point-to-point device messages without peer access: **pipes** through pinned shared host
//! memory (`GPUMPI_CUDA_IPC=0`, GPUs without peer access, device buffers CUDA IPC cannot
//! export such as `cudaMallocAsync` pool memory).
//!
//! A pipe carries the messages of one sender to one receiver. It is a region of shared host
//! memory that the **sender** creates at its first such message to that peer
//! (`/dev/shm/gpumpi-<job>-pipe<src>-<dst>`), and that each side registers with CUDA
//! (page-locked, device-mapped) when it first needs a copy engine on it. The region holds two
//! counters and `depth` slots of `chunk` bytes ([`Shape`], `GPUMPI_GPU_PIPE` and
//! `GPUMPI_GPU_PIPE_DEPTH`, the sender's values travel in its request-to-send). Chunks are
//! numbered per pipe across messages; chunk `c` lives in slot `c mod depth`:
//! - the sender (producer) may start chunk `c` once `freed >= c + 1 - depth`: it copies its
//!   bytes of the chunk into the slot and then sets `filled = c + 1`;
//! - the receiver (consumer) may start chunk `c` once `filled >= c + 1`: it copies the slot
//!   out and then sets `freed = c + 1`.
//!
//! On a GPU each side's copies and counter writes are operations on a stream of gpumpi's own (a
//! copy-engine copy, then a counter write with a system-scope barrier before it): no host thread
//! copies, and both directions of a pair (and every pair) run at once. Whether a chunk may
//! start is decided by the side's **host**, which reads the peer's counter when the engine
//! polls and only then enqueues the chunk: a stream never waits for another process. (Streams
//! that waited on a peer's counter hung intermittently: any device-wide synchronization in one
//! process, its own or the application's -- `cudaDeviceSynchronize` between `MPI_Irecv` and
//! `MPI_Wait`, a registration -- then waits for a peer whose host may be waiting the same way.)
//! A receive into host memory, or a send whose device queue could not be made, runs the same
//! operations on the CPU ([`CpuQueue`]). The receiver numbers messages when it matches them
//! (its answer carries the number of the first chunk), so both sides agree on the order without
//! further messages.
//!
//! Each side is a [`Lane`]: the jobs (messages) of one direction of one pipe, in order, and the
//! queues that run them. Each poll enqueues every chunk the peer's counter allows; a job is
//! done when the side's own counter reaches its last chunk (for a receive on the GPU: its bytes
//! are in device memory; for a send: its buffer is read). Jobs of one lane on different queues
//! (a receive into host memory after one into device memory) run one queue at a time, so each
//! counter only grows. The protocol is pure (any [`Queue`]); the tests drive it with CPU queues
//! that run a random part of their work at each poll, in every interleaving of the two sides.

use super::shmem::{SharedMem, SharedRegion};
use crate::sys::cuda;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Bytes before the slots: the two counters, one 64-byte line each.
pub const HEADER: usize = 4096;
/// Offset of `filled` (written by the producer) and `freed` (written by the consumer).
const FILLED: usize = 0;
const FREED: usize = 64;

/// Slot size and count of a pipe (the sender's, carried in its request-to-send).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub chunk: usize,
    pub depth: usize,
}

impl Shape {
    /// Bytes of [`Shape::to_bytes`].
    pub const BYTES: usize = 16;

    /// From `GPUMPI_GPU_PIPE` (slot bytes, 64 KiB - 64 MiB, a multiple of 4 KiB; 0: no pipes)
    /// and `GPUMPI_GPU_PIPE_DEPTH` (2-16 slots).
    pub fn from_env() -> Option<Shape> {
        let p = &crate::config::snapshot().p2p;
        match p.gpu_pipe {
            0 => None,
            c => Some(Shape {
                chunk: c.clamp(64 << 10, 64 << 20).next_multiple_of(4096),
                depth: p.gpu_pipe_depth.clamp(2, 16),
            }),
        }
    }

    pub fn region_len(self) -> usize {
        HEADER + self.chunk * self.depth
    }

    /// Chunks of a message of `len` bytes.
    pub fn chunks(self, len: usize) -> u64 {
        len.div_ceil(self.chunk) as u64
    }

    /// Offset of chunk `c`'s slot in the region.
    fn slot(self, c: u64) -> usize {
        HEADER + (c % self.depth as u64) as usize * self.chunk
    }

    pub fn to_bytes(self) -> [u8; Self::BYTES] {
        let mut b = [0u8; Self::BYTES];
        b[..8].copy_from_slice(&(self.chunk as u64).to_le_bytes());
        b[8..].copy_from_slice(&(self.depth as u64).to_le_bytes());
        b
    }

    /// A shape a sender may announce (4 KiB - 64 MiB slots of whole pages, 2-16 of them).
    pub fn from_bytes(b: &[u8]) -> Option<Shape> {
        if b.len() != Self::BYTES {
            return None;
        }
        let w = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes")) as usize;
        let s = Shape {
            chunk: w(0),
            depth: w(8),
        };
        (s.chunk >= 4096
            && s.chunk <= 64 << 20
            && s.chunk.is_multiple_of(4096)
            && (2..=16).contains(&s.depth))
        .then_some(s)
    }
}

/// Which side of a pipe a lane is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Producer,
    Consumer,
}

/// Where a job's buffer lives, and so which queue moves it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Host,
    /// Device memory of this device ordinal (copies by its copy engines).
    Device(i32),
}

/// Ordered operations on a pipe region, run by a GPU stream or by the CPU.
pub trait Queue: Send {
    /// The region's address as this queue's operations see it.
    fn base(&self) -> usize;
    /// Copy `len` bytes from `src` to `dst` after the operations before it.
    ///
    /// # Safety
    /// Both ranges are valid for this queue until the copy has run.
    unsafe fn copy(&mut self, dst: usize, src: usize, len: usize) -> Result<(), String>;
    /// Set the 64-bit counter at `flag` (in the region) to `v` once everything before it is
    /// complete.
    ///
    /// # Safety
    /// `flag` lies in the region; the operations stay valid until they have run.
    unsafe fn write(&mut self, flag: usize, v: u64) -> Result<(), String>;
    /// Run what can run now (the CPU; a GPU stream runs by itself).
    ///
    /// # Safety
    /// As for the operations enqueued.
    unsafe fn run(&mut self) -> Result<(), String>;
}

/// # Safety
/// `addr` is an 8-byte aligned counter in a live region.
unsafe fn counter<'a>(addr: usize) -> &'a AtomicU64 {
    &*(addr as *const AtomicU64)
}

enum CpuOp {
    Copy(usize, usize, usize),
    Write(usize, u64),
}

/// A [`Queue`] run by the CPU when the lane is polled: receives into host memory, and sends
/// whose data had to be staged in host memory first.
pub struct CpuQueue {
    base: usize,
    ops: VecDeque<CpuOp>,
}

impl CpuQueue {
    pub fn new(base: usize) -> Self {
        CpuQueue {
            base,
            ops: VecDeque::new(),
        }
    }
}

impl Queue for CpuQueue {
    fn base(&self) -> usize {
        self.base
    }

    unsafe fn copy(&mut self, dst: usize, src: usize, len: usize) -> Result<(), String> {
        self.ops.push_back(CpuOp::Copy(dst, src, len));
        Ok(())
    }

    unsafe fn write(&mut self, flag: usize, v: u64) -> Result<(), String> {
        self.ops.push_back(CpuOp::Write(flag, v));
        Ok(())
    }

    unsafe fn run(&mut self) -> Result<(), String> {
        self.run_some(usize::MAX);
        Ok(())
    }
}

impl CpuQueue {
    /// Run at most `limit` operations.
    ///
    /// # Safety
    /// As for the operations enqueued.
    unsafe fn run_some(&mut self, mut limit: usize) {
        while let Some(op) = self.ops.front() {
            if limit == 0 {
                break;
            }
            match *op {
                CpuOp::Copy(d, s, n) => {
                    std::ptr::copy_nonoverlapping(s as *const u8, d as *mut u8, n)
                }
                CpuOp::Write(f, v) => {
                    debug_assert!(
                        v > counter(f).load(Ordering::Relaxed),
                        "a counter went down"
                    );
                    counter(f).store(v, Ordering::Release)
                }
            }
            self.ops.pop_front();
            limit -= 1;
        }
    }
}

/// A [`Queue`] on a GPU stream of gpumpi's own (stream memory operations and copy-engine
/// copies on the device-mapped region).
struct StreamQueue {
    ctx: cuda::Context,
    stream: cuda::Stream,
    base: usize,
}

fn cu<R>(ctx: cuda::Context, f: impl FnOnce() -> cuda::CuResult<R>) -> Result<R, String> {
    cuda::with_context(ctx, f).map_err(|e| e.to_string())
}

impl Queue for StreamQueue {
    fn base(&self) -> usize {
        self.base
    }

    unsafe fn copy(&mut self, dst: usize, src: usize, len: usize) -> Result<(), String> {
        cu(self.ctx, || {
            cuda::memcpy_dtod_async(dst, src, len, self.stream)
        })
    }

    unsafe fn write(&mut self, flag: usize, v: u64) -> Result<(), String> {
        cu(self.ctx, || cuda::stream_write(self.stream, flag as u64, v))
    }

    unsafe fn run(&mut self) -> Result<(), String> {
        Ok(())
    }
}

struct Job {
    /// Chunks `start..end` of the pipe.
    start: u64,
    end: u64,
    buf: usize,
    len: usize,
    side: Side,
    /// A staged copy of a device send buffer (`buf` points into it).
    _hold: Option<Vec<u8>>,
}

/// Makes the queue of a [`Side`] the first time a lane needs it.
pub type MakeQueue = Box<dyn FnMut(Side) -> Result<Box<dyn Queue>, String> + Send>;

/// One side of one pipe: its jobs in order and the queues that run them. See the module
/// documentation.
pub struct Lane {
    role: Role,
    shape: Shape,
    /// The region's address in this process (the CPU reads the counters here).
    host: usize,
    /// Next chunk to enqueue.
    next: u64,
    /// Next chunk a new job starts at.
    assigned: u64,
    jobs: VecDeque<Job>,
    queues: Vec<(Side, Box<dyn Queue>)>,
    /// The queue the last enqueued chunk went to.
    cur: Option<Side>,
    err: Option<String>,
    make: MakeQueue,
}

// SAFETY: `host` and the jobs' buffers are plain addresses, used under the lane's owner's
// synchronization (a Mutex in this module, one thread in the tests).
unsafe impl Send for Lane {}

impl Lane {
    /// A lane over the region at `host` (in this process).
    ///
    /// # Safety
    /// `host..host + shape.region_len()` is a live mapping shared with the other side's lane,
    /// counters zero at creation, for the lane's life.
    pub unsafe fn new(role: Role, shape: Shape, host: usize, make: MakeQueue) -> Lane {
        Lane {
            role,
            shape,
            host,
            next: 0,
            assigned: 0,
            jobs: VecDeque::new(),
            queues: Vec::new(),
            cur: None,
            err: None,
            make,
        }
    }

    pub fn shape(&self) -> Shape {
        self.shape
    }

    fn load(&self, off: usize) -> u64 {
        // SAFETY: the region is live for the lane's life (Lane::new), counters 8-aligned.
        unsafe { counter(self.host + off) }.load(Ordering::Acquire)
    }

    /// This side's own counter: chunks completely produced (or consumed).
    pub fn reached(&self) -> u64 {
        self.load(match self.role {
            Role::Producer => FILLED,
            Role::Consumer => FREED,
        })
    }

    /// The first chunk this side may not start yet (the peer's counter says so).
    fn gate(&self) -> u64 {
        match self.role {
            Role::Producer => self.load(FREED) + self.shape.depth as u64,
            Role::Consumer => self.load(FILLED),
        }
    }

    /// The queue for `side`, made now if needed.
    pub fn queue(&mut self, side: Side) -> Result<usize, String> {
        if let Some(i) = self.queues.iter().position(|(s, _)| *s == side) {
            return Ok(i);
        }
        let q = (self.make)(side)?;
        self.queues.push((side, q));
        Ok(self.queues.len() - 1)
    }

    /// Add a message of `len` bytes at `buf` (on `side`); a consumer numbers it (`start`
    /// `None`), a producer takes the consumer's number. Returns its chunks `(start, end)`.
    ///
    /// # Safety
    /// `buf..buf+len` is readable (producer) or writable (consumer) memory of `side`, left to
    /// the lane until [`Lane::reached`] is `end`; `hold`, if any, owns it.
    pub unsafe fn add(
        &mut self,
        start: Option<u64>,
        buf: usize,
        len: usize,
        side: Side,
        hold: Option<Vec<u8>>,
    ) -> Result<(u64, u64), String> {
        if let Some(e) = &self.err {
            return Err(e.clone());
        }
        let start = start.unwrap_or(self.assigned);
        if start != self.assigned {
            return Err(format!(
                "pipe message numbered from chunk {start}, expected {}",
                self.assigned
            ));
        }
        let end = start + self.shape.chunks(len);
        self.assigned = end;
        self.jobs.push_back(Job {
            start,
            end,
            buf,
            len,
            side,
            _hold: hold,
        });
        self.pump()?;
        Ok((start, end))
    }

    /// Run the CPU queues and enqueue what the window allows; an error stops the lane for
    /// good (every later call reports it).
    pub fn pump(&mut self) -> Result<(), String> {
        if let Some(e) = &self.err {
            return Err(e.clone());
        }
        // SAFETY: the jobs' buffers and the region are valid (Lane::add, Lane::new).
        let r = unsafe { self.pump_inner() };
        if let Err(e) = &r {
            self.err = Some(e.clone());
        }
        r
    }

    unsafe fn pump_inner(&mut self) -> Result<(), String> {
        for (_, q) in &mut self.queues {
            q.run()?;
        }
        let chunk = self.shape.chunk;
        loop {
            let own = self.reached();
            while self.jobs.front().is_some_and(|j| j.end <= own) {
                self.jobs.pop_front();
            }
            let Some(j) = self.jobs.iter().position(|j| j.end > self.next) else {
                break;
            };
            let (start, end, buf, len, side) = {
                let j = &self.jobs[j];
                (j.start, j.end, j.buf, j.len, j.side)
            };
            if self.cur != Some(side) {
                if own < self.next {
                    // The other queue has not finished: its counter writes must all land
                    // before this queue writes the same counter.
                    break;
                }
                self.cur = Some(side);
            }
            let qi = self.queue(side)?;
            let base = self.queues[qi].1.base();
            // What the peer's counter allows now (it only grows: a later poll allows more).
            let gate = self.gate();
            let q = &mut self.queues[qi].1;
            while self.next < end && self.next < gate {
                let c = self.next;
                let off = (c - start) as usize * chunk;
                let n = chunk.min(len - off);
                let slot = base + self.shape.slot(c);
                match self.role {
                    Role::Producer => {
                        q.copy(slot, buf + off, n)?;
                        q.write(base + FILLED, c + 1)?;
                    }
                    Role::Consumer => {
                        q.copy(buf + off, slot, n)?;
                        q.write(base + FREED, c + 1)?;
                    }
                }
                self.next += 1;
            }
            q.run()?;
            if self.next < end {
                break;
            }
        }
        Ok(())
    }
}

/// A message in a lane: done when the lane's counter reaches its last chunk.
pub struct Ticket {
    lane: Arc<Mutex<Lane>>,
    end: u64,
}

impl Ticket {
    /// Whether the message is through (polling moves the lane on); an error: the lane failed.
    pub fn done(&self) -> Result<bool, String> {
        let mut l = self.lane.lock().unwrap_or_else(|e| e.into_inner());
        l.pump()?;
        Ok(l.reached() >= self.end)
    }
}

/// Add a job to `lane` and return its chunks and its ticket.
///
/// # Safety
/// As for [`Lane::add`].
pub unsafe fn enqueue(
    lane: &Arc<Mutex<Lane>>,
    start: Option<u64>,
    buf: usize,
    len: usize,
    side: Side,
    hold: Option<Vec<u8>>,
) -> Result<(u64, Ticket), String> {
    let mut l = lane.lock().unwrap_or_else(|e| e.into_inner());
    let (start, end) = l.add(start, buf, len, side, hold)?;
    Ok((
        start,
        Ticket {
            lane: lane.clone(),
            end,
        },
    ))
}

/// The queue maker of a lane over `region` in this process: CPU queues for host memory, and
/// for device memory a stream of that device, registering the region with CUDA the first time.
fn make_queues(host: usize, len: usize) -> MakeQueue {
    let mut registered = false;
    Box::new(move |side| match side {
        Side::Host => Ok(Box::new(CpuQueue::new(host)) as Box<dyn Queue>),
        Side::Device(o) => {
            let g = super::gpu().ok_or("CUDA is not available")?;
            let d = g.device(o)?;
            let (base, stream) = cu(d.ctx, || {
                if !registered {
                    // SAFETY: the region stays mapped for the process's life (the registry
                    // keeps it).
                    unsafe { cuda::host_register(host as *mut u8, len)? };
                    registered = true;
                }
                // SAFETY: registered above (portable: every context sees it).
                let base = unsafe { cuda::host_device_pointer(host as *mut u8)? };
                Ok((base as usize, cuda::stream_create()?))
            })?;
            Ok(Box::new(StreamQueue {
                ctx: d.ctx,
                stream,
                base,
            }) as Box<dyn Queue>)
        }
    })
}

#[derive(Default)]
struct Registry {
    /// Pipes to peers (this process produces) and from peers (it consumes), by world rank.
    out: HashMap<usize, Arc<Mutex<Lane>>>,
    inb: HashMap<usize, Arc<Mutex<Lane>>>,
    /// Peers no pipe could be made to (not retried).
    broken: HashSet<usize>,
    /// The regions' mappings, kept for the process's life.
    regions: Vec<Box<dyn SharedRegion>>,
}

fn registry() -> std::sync::MutexGuard<'static, Registry> {
    static R: OnceLock<Mutex<Registry>> = OnceLock::new();
    R.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

fn shape() -> Option<Shape> {
    Shape::from_env()
}

/// Whether device sends should offer pipes (`GPUMPI_GPU_PIPE` not 0, CUDA present).
pub fn enabled() -> bool {
    shape().is_some() && super::gpu().is_some()
}

fn region_tag(src: usize, dst: usize) -> String {
    format!("pipe{src}-{dst}")
}

/// Sender `me`: the descriptor of its pipe to `peer` for a request-to-send (made at the first
/// call, its region created in `shm`), `None` when there is none (the caller stages the message
/// in host memory).
pub fn offer(shm: &dyn SharedMem, me: usize, peer: usize) -> Option<[u8; Shape::BYTES]> {
    let s = shape()?;
    let mut r = registry();
    if r.out.contains_key(&peer) {
        return Some(s.to_bytes());
    }
    if r.broken.contains(&peer) {
        return None;
    }
    let made = shm.create(&region_tag(me, peer), s.region_len());
    match made {
        Ok(region) => {
            let host = region.as_ptr() as usize;
            // SAFETY: the region is zero-filled, shared with the peer and kept mapped below.
            let lane =
                unsafe { Lane::new(Role::Producer, s, host, make_queues(host, s.region_len())) };
            r.regions.push(region);
            r.out.insert(peer, Arc::new(Mutex::new(lane)));
            tracing::debug!(
                peer,
                chunk = s.chunk,
                depth = s.depth,
                "device messages to this peer through a pinned host-memory pipe"
            );
            Some(s.to_bytes())
        }
        Err(e) => {
            tracing::info!("no host-memory pipe to rank {peer} ({e}); device sends staged");
            r.broken.insert(peer);
            None
        }
    }
}

/// Receiver `me`: take `len` bytes from `peer`'s pipe (announced with `desc`, its region mapped
/// from `shm`) into `dst` (device memory of this process when `dev`). Returns the number of the
/// message's first chunk (for the sender) and its ticket.
///
/// # Safety
/// `dst..dst+len` is writable and owned by the receive until the ticket is done.
pub unsafe fn recv(
    shm: &dyn SharedMem,
    me: usize,
    peer: usize,
    desc: &[u8],
    dst: usize,
    dev: bool,
    len: usize,
) -> Result<(u64, Ticket), String> {
    let s = Shape::from_bytes(desc).ok_or("malformed pipe descriptor")?;
    let lane = {
        let mut r = registry();
        match r.inb.get(&peer) {
            Some(l) => l.clone(),
            None => {
                let region = shm.open(&region_tag(peer, me), s.region_len())?;
                // Both sides have it mapped now: the name can go.
                region.unlink();
                let host = region.as_ptr() as usize;
                let lane = Arc::new(Mutex::new(Lane::new(
                    Role::Consumer,
                    s,
                    host,
                    make_queues(host, s.region_len()),
                )));
                r.regions.push(region);
                r.inb.insert(peer, lane.clone());
                lane
            }
        }
    };
    if lane.lock().unwrap_or_else(|e| e.into_inner()).shape() != s {
        return Err("the sender changed its pipe's shape".into());
    }
    let side = if dev {
        Side::Device(super::classify(dst as *const u8).device.max(0))
    } else {
        Side::Host
    };
    enqueue(&lane, None, dst, len, side, None)
}

/// Sender `me`: write `len` bytes of device memory `src` into its pipe to `peer` as the
/// message the receiver numbered `start`. When no stream can be made on the device, the
/// bytes are copied to host memory first and the CPU feeds the pipe.
///
/// # Safety
/// `src..src+len` is device (or managed) memory left untouched until the ticket is done.
pub unsafe fn send(
    me: usize,
    peer: usize,
    start: u64,
    src: usize,
    len: usize,
) -> Result<Ticket, String> {
    let lane = registry()
        .out
        .get(&peer)
        .cloned()
        .ok_or_else(|| format!("rank {me} has no pipe to rank {peer}"))?;
    let side = Side::Device(super::classify(src as *const u8).device.max(0));
    let made = lane.lock().unwrap_or_else(|e| e.into_inner()).queue(side);
    let (t, hold) = match made {
        Ok(_) => (src, None),
        Err(e) => {
            tracing::debug!("pipe to rank {peer}: no device queue ({e}); staged by the CPU");
            let v = super::p2p::dtoh(src, len)?;
            (v.as_ptr() as usize, Some(v))
        }
    };
    let side = if hold.is_some() { Side::Host } else { side };
    enqueue(&lane, Some(start), t, len, side, hold).map(|(_, t)| t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rng::XorShift;

    /// A CPU queue that runs only part of its work per poll (a random number of operations),
    /// as a GPU stream runs behind its host (CpuQueue checks that counters never go down).
    struct Lazy {
        q: CpuQueue,
        rng: Arc<Mutex<XorShift>>,
    }

    fn rand(s: &Mutex<XorShift>) -> u64 {
        s.lock().unwrap().next()
    }

    impl Queue for Lazy {
        fn base(&self) -> usize {
            self.q.base
        }
        unsafe fn copy(&mut self, d: usize, s: usize, n: usize) -> Result<(), String> {
            self.q.copy(d, s, n)
        }
        unsafe fn write(&mut self, f: usize, v: u64) -> Result<(), String> {
            self.q.write(f, v)
        }
        unsafe fn run(&mut self) -> Result<(), String> {
            let k = rand(&self.rng) % 5;
            self.q.run_some(k as usize);
            Ok(())
        }
    }

    type Shared = Arc<Mutex<Lane>>;

    /// A producer lane over `hosts.0` and a consumer lane over `hosts.1` (one region).
    ///
    /// # Safety
    /// As for [`Lane::new`].
    unsafe fn lane_pair(
        shape: Shape,
        hosts: (usize, usize),
        make: impl Fn(usize) -> MakeQueue,
    ) -> (Shared, Shared) {
        let lane = |role, h| Arc::new(Mutex::new(Lane::new(role, shape, h, make(h))));
        (lane(Role::Producer, hosts.0), lane(Role::Consumer, hosts.1))
    }

    fn lazy_maker(host: usize, rng: Arc<Mutex<XorShift>>) -> MakeQueue {
        Box::new(move |_side| {
            Ok(Box::new(Lazy {
                q: CpuQueue::new(host),
                rng: rng.clone(),
            }) as Box<dyn Queue>)
        })
    }

    #[test]
    fn shapes_round_trip_and_refuse_nonsense() {
        let s = Shape {
            chunk: 1 << 20,
            depth: 4,
        };
        assert_eq!(Shape::from_bytes(&s.to_bytes()), Some(s));
        assert_eq!(s.chunks(0), 0);
        assert_eq!(s.chunks(1), 1);
        assert_eq!(s.chunks(1 << 20), 1);
        assert_eq!(s.chunks((1 << 20) + 1), 2);
        assert_eq!(s.slot(5), HEADER + (1 << 20));
        assert_eq!(s.region_len(), HEADER + (4 << 20));
        for bad in [
            Shape {
                chunk: 100,
                depth: 4,
            },
            Shape { chunk: 0, depth: 4 },
            Shape {
                chunk: 4096,
                depth: 1,
            },
            Shape {
                chunk: 4096,
                depth: 17,
            },
            Shape {
                chunk: 128 << 20,
                depth: 2,
            },
        ] {
            assert_eq!(Shape::from_bytes(&bad.to_bytes()), None, "{bad:?}");
        }
        assert_eq!(Shape::from_bytes(&[0u8; 15]), None);
    }

    /// Messages of many lengths (empty, one byte, exact slots, many times the region) through
    /// one pipe, producer and consumer polled in random order with queues that run a random
    /// part of their work; the consumer's buffers alternate between two sides (queues), so the
    /// one-queue-at-a-time rule is exercised. Every byte lands, in order, and every ticket
    /// completes only when its bytes are there.
    #[test]
    fn pipe_protocol_in_random_interleavings() {
        let shape = Shape {
            chunk: 4096,
            depth: 3,
        };
        let lens = [
            1usize,
            4096,
            4097,
            0,
            3 * 4096,
            50_000,
            7,
            12 * 4096 + 5,
            4095,
            100_000,
        ];
        for seed in 1..=40u64 {
            let rng = Arc::new(Mutex::new(XorShift(
                seed.wrapping_mul(0x9e37_79b9_7f4a_7c15),
            )));
            let mut region = vec![0u64; shape.region_len() / 8];
            let host = region.as_mut_ptr() as usize;
            // SAFETY: region lives to the end of the test, zeroed.
            let (p, c) = unsafe { lane_pair(shape, (host, host), |h| lazy_maker(h, rng.clone())) };
            let srcs: Vec<Vec<u8>> = lens
                .iter()
                .enumerate()
                .map(|(m, &n)| (0..n).map(|i| (i * 7 + m * 31 + (i >> 12)) as u8).collect())
                .collect();
            let mut dsts: Vec<Vec<u8>> = lens.iter().map(|&n| vec![0xeeu8; n]).collect();
            let mut tickets: Vec<(Ticket, Ticket)> = Vec::new();
            // The consumer numbers each message, the producer follows that number; the
            // messages are added while earlier ones are still moving.
            let mut done = vec![false; lens.len()];
            let mut added = 0;
            let mut steps = 0;
            while done.iter().any(|d| !d) {
                steps += 1;
                assert!(steps < 200_000, "seed {seed}: the pipe made no progress");
                let r = rand(&rng);
                if added < lens.len() && r.is_multiple_of(7) {
                    let m = added;
                    let side = if m % 3 == 1 {
                        Side::Host
                    } else {
                        Side::Device(0)
                    };
                    // SAFETY: srcs/dsts outlive the tickets (checked done below).
                    let (start, tc) = unsafe {
                        enqueue(&c, None, dsts[m].as_mut_ptr() as usize, lens[m], side, None)
                    }
                    .unwrap();
                    let (_, tp) = unsafe {
                        enqueue(
                            &p,
                            Some(start),
                            srcs[m].as_ptr() as usize,
                            lens[m],
                            Side::Device(0),
                            None,
                        )
                    }
                    .unwrap();
                    tickets.push((tp, tc));
                    added += 1;
                }
                for (m, (tp, tc)) in tickets.iter().enumerate() {
                    if done[m] {
                        continue;
                    }
                    let (a, b) = if r & 8 == 0 {
                        (tp.done().unwrap(), tc.done().unwrap())
                    } else {
                        let b = tc.done().unwrap();
                        (tp.done().unwrap(), b)
                    };
                    if b {
                        assert!(
                            dsts[m] == srcs[m],
                            "seed {seed}: message {m} whole when done"
                        );
                        assert!(a, "seed {seed}: the receive ended before the send");
                        done[m] = true;
                    }
                }
            }
            // A producer numbered out of order is refused.
            let e = unsafe { enqueue(&p, Some(0), srcs[0].as_ptr() as usize, 1, Side::Host, None) };
            assert!(e.err().unwrap().contains("expected"));
            drop(region);
        }
    }

    /// Two mappings of one shared page set (as two processes see a pipe's region).
    fn two_mappings(len: usize) -> (usize, usize) {
        // SAFETY: plain libc calls; the mappings stay for the test process's life.
        unsafe {
            let fd = libc::memfd_create(c"gpumpi-pipe-test".as_ptr(), 0);
            assert!(fd >= 0);
            assert_eq!(libc::ftruncate(fd, len as libc::off_t), 0);
            let map = || {
                let p = libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    fd,
                    0,
                );
                assert!(p != libc::MAP_FAILED);
                p as usize
            };
            let r = (map(), map());
            libc::close(fd);
            r
        }
    }

    /// On a machine with a GPU (a recorded skip elsewhere): the stream queues run the pipe — device
    /// to device over many slots, then device to host (the CPU consumer after a stream one),
    /// then device to device again — and each message lands whole.
    #[test]
    fn pipe_through_copy_engines() {
        let Some(g) = crate::gpu::gpu_or_skip() else {
            return;
        };
        let d = g.device(0).unwrap();
        let shape = Shape {
            chunk: 64 << 10,
            depth: 3,
        };
        let (hp, hc) = two_mappings(shape.region_len());
        // SAFETY: both mappings live for the process's life, zero-filled.
        let (p, c) = unsafe { lane_pair(shape, (hp, hc), |h| make_queues(h, shape.region_len())) };
        let len = 11 * shape.chunk / 2 + 7;
        let src: Vec<u8> = (0..len)
            .map(|i| (i * 29 % 251) as u8 ^ (i >> 16) as u8)
            .collect();
        let (dsrc, ddst) =
            cuda::with_context(d.ctx, || Ok((cuda::mem_alloc(len)?, cuda::mem_alloc(len)?)))
                .unwrap();
        let mut host = vec![0u8; len];
        // SAFETY: the device buffers hold len bytes owned by this test; host outlives the
        // tickets, which are all waited for.
        unsafe {
            super::super::p2p::htod(dsrc, &src).unwrap();
            for (m, dev) in [true, false, true].into_iter().enumerate() {
                super::super::p2p::htod(ddst, &vec![0u8; len]).unwrap();
                let (dst, side) = if dev {
                    (ddst, Side::Device(0))
                } else {
                    (host.as_mut_ptr() as usize, Side::Host)
                };
                let (start, tc) = enqueue(&c, None, dst, len, side, None).unwrap();
                assert_eq!(start, m as u64 * shape.chunks(len));
                let (_, tp) = enqueue(&p, Some(start), dsrc, len, Side::Device(0), None).unwrap();
                let t0 = std::time::Instant::now();
                // Each side moves only when its host polls it: poll both every time.
                loop {
                    let (a, b) = (tc.done().unwrap(), tp.done().unwrap());
                    if a && b {
                        break;
                    }
                    assert!(t0.elapsed().as_secs() < 20, "message {m} stuck");
                }
                let got = if dev {
                    super::super::p2p::dtoh(ddst, len).unwrap()
                } else {
                    host.clone()
                };
                assert!(got == src, "message {m} (device {dev}) lands whole");
            }
        }
        cuda::with_context(d.ctx, || {
            // SAFETY: from mem_alloc above; the pipe's copies are done.
            unsafe {
                cuda::mem_free(dsrc);
                cuda::mem_free(ddst);
            }
            Ok(())
        })
        .unwrap();
    }
}
