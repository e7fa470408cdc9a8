//! Shared-memory transport: one `/dev/shm` segment per rank holding its inbox, one
//! single-producer single-consumer ring per sender.
//!
//! # Layout and footprint
//! Rank `r` creates `/dev/shm/gpumpi-<job_id>-<r>-<nonce>` (`nonce`: 16 random hex digits of
//! its own, told to the peers through the bootstrap, so no other user can predict, and squat,
//! the name; see [`ShmTransport::establish_keyed`]):
//! ```text
//! [ page 0: magic, pid, world size, ring bytes, CMA probe address; collective records at 512;
//!   collective slots at 1024 ]
//! [ page 1: agreement words, one per context id ]
//! [ ring for sender s0: head (own 128-byte line) | tail (own 128-byte line) |
//!   shared-copy slots (64 x 64 bytes) | data (ring bytes) ]
//! [ ring for sender s1 ... ]                       (one ring per other rank, in rank order)
//! [ collective scratch area, page aligned (if configured): control 128 bytes | data ]
//! ```
//! **Footprint per rank = 8192 + (size - 1) × (4352 + ring_bytes)** bytes (plus the scratch area
//! below), with
//! `ring_bytes = GPUMPI_SHM_RING_BYTES` rounded up to a power of two (at least 1 KiB). It is fixed
//! at creation and never grows with traffic (logged at debug level). Example: 8 ranks with the
//! default 128 KiB rings use 8 KiB + 7 × 132.25 KiB ≈ 0.9 MiB each.
//!
//! # Shared-copy slots
//! Between a ring's control block and its data lie [`COPY_SLOTS`] slots of [`COPY_SLOT_BYTES`]
//! for the large messages that sender sends to this rank (`Transport::copy_slots`): the engine's
//! shared single copy (`engine/coop.rs`), in which both ranks copy chunks of one message.
//!
//! # Rings
//! `head` (bytes ever written) is written only by the sender, `tail` (bytes ever consumed) only
//! by the receiver; each side caches the other's counter and reloads it only when the ring looks
//! full/empty. Publication: the sender writes the frame, then stores `head` with Release; the
//! receiver loads `head` with Acquire, reads, then stores `tail` with Release. No locks.
//! A frame is `[payload length: u64][Header: 48 bytes][payload, padded to 8]`; a frame never
//! wraps: when it does not fit before the end of the data area, a wrap marker (`u64::MAX`) fills
//! the rest. The largest payload is `min(ring_bytes / 4 - 56, 64 KiB)`.
//!
//! # Collective slots
//! Bytes `1024 .. 4096` of page 0 ([`COLL_SLOTS_BYTES`]) hold this rank's two flag collective
//! slots (laid out by the engine's `flag` module), read by every rank (`Transport::coll_slots`).
//! They cost no extra memory.
//!
//! Bytes `512 .. 512 + engine::collcheck::AREA` (<= 1024) of page 0 are the ring of the rank's
//! recent collective records (`engine/collcheck.rs`), read by the other ranks of the node when a
//! collective waits long (`Transport::coll_records`).
//!
//! # Agreement words
//! Page 1 ([`AGREE_WORDS_BYTES`]) holds this rank's words of the GPU paths' agreement on
//! communicators other than MPI_COMM_WORLD (laid out by the engine's `agree::words` module),
//! read by the ranks of the node (`Transport::agree_words`). A word is touched only by a
//! communicator that agrees through it, so the page costs memory only then.
//!
//! # Collective scratch area
//! With `GPUMPI_SHM_SCRATCH_BYTES` > 0 (and more than one rank), the segment ends with a
//! page-aligned area `[control: 128 bytes | data: scratch bytes]` for the mid-size collectives
//! (`engine/scratch.rs`, `Transport::coll_scratch`), which adds
//! `128 + scratch bytes` (plus page alignment) to the footprint above.
//!
//! # Set-up sequence (the caller provides the fences)
//! 1. `ShmTransport::create(job_id, rank, size)` — create and map own segment.
//! 2. fence (every rank has created its segment)
//! 3. `attach_peers()` — map the other ranks' segments, probe CMA per peer.
//! 4. fence (every rank has attached)
//! 5. `unlink()` — remove own name from `/dev/shm`; mappings stay valid, so nothing is left in
//!    `/dev/shm` even if a rank dies later. (Drop also unlinks, for safety.)
//!
//! # Single copy (CMA)
//! With `GPUMPI_SHM_CMA` on (default), `create` allows any process to read this one
//! (`prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY)`, needed under Yama), and `attach_peers` probes
//! each peer with `process_vm_readv` on a known word; a peer whose probe fails (seccomp, ptrace
//! policy, other PID namespace) is served by the pipelined path instead.

use super::{near, CopyRates, Header, Transport, HEADER_BYTES};
use crate::mpi::error::{MpiError, MpiResult};
use std::ffi::CString;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

const MAGIC: u64 = 0x6770_756d_7069_5348; // "gpumpiSH"
const PAGE: usize = 4096;
/// Shared-copy slots per directed pair of ranks, and bytes per slot (`engine/coop.rs`).
pub const COPY_SLOTS: usize = 64;
pub const COPY_SLOT_BYTES: usize = 64;
/// Offset of the shared-copy slots in a ring's control block.
const COPY_SLOTS_OFF: usize = 256;
/// A ring's control block: head line, tail line, shared-copy slots.
const RING_CTRL: usize = COPY_SLOTS_OFF + COPY_SLOTS * COPY_SLOT_BYTES;
const TAIL_OFF: usize = 128;
const FRAME_PREFIX: usize = 8 + HEADER_BYTES;
const WRAP: u64 = u64::MAX;
const POLL_BUDGET: usize = 32;
/// Offset of the collective slot area in page 0.
const SLOTS_OFF: usize = 1024;
/// Bytes of the control block in front of a collective scratch area's data (the engine's
/// scratch-area protocol checks that its control block fits).
pub const SCRATCH_CTRL_BYTES: usize = 128;
/// Bytes of page 0 reserved for the collective slots (from `SLOTS_OFF` to the end of the page).
pub const COLL_SLOTS_BYTES: usize = PAGE - SLOTS_OFF;
/// Offset and bytes of the agreement words (page 1).
const WORDS_OFF: usize = PAGE;
pub const AGREE_WORDS_BYTES: usize = PAGE;
/// Offset of the first ring (after page 0 and the agreement words).
const RINGS_OFF: usize = WORDS_OFF + AGREE_WORDS_BYTES;
/// Offset of the collective record ring in page 0 (after the header).
const RECORDS_OFF: usize = 512;
/// Bytes of page 0 reserved for the collective record ring (up to the slot area).
pub const COLL_RECORDS_BYTES: usize = SLOTS_OFF - RECORDS_OFF;
const _: () = assert!(std::mem::size_of::<SegHeader>() <= RECORDS_OFF);

/// Word a peer reads with `process_vm_readv` to check that CMA works.
static CMA_PROBE: u64 = 0x434d_415f_5052_4f42;

#[repr(C)]
struct SegHeader {
    magic: AtomicU64,
    pid: u64,
    size: u64,
    ring_bytes: u64,
    probe_addr: u64,
    /// Data bytes of the collective scratch area (0: none).
    scratch: u64,
    /// The CPU this rank last ran on when it looked ([`Transport::shares_cpu`]), plus one (0:
    /// not known yet).
    cpu: AtomicU32,
}

/// An `mmap`ed segment, unmapped on drop.
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len come from a successful mmap and nothing references the mapping after
        // the transport (its only owner) is dropped.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

impl Mapping {
    fn header(&self) -> &SegHeader {
        // SAFETY: every mapping is at least one page and page 0 holds a SegHeader.
        unsafe { &*(self.ptr as *const SegHeader) }
    }
}

/// The job id of the shared-memory transport (set when it is established; None before, or in
/// a process without one).
static JOB_ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// The job id the transport's segments are named with, once it is established.
pub fn job_id() -> Option<&'static str> {
    JOB_ID.get().map(|s| s.as_str())
}

/// A named shared-memory region besides the transport's segments (GPU staging areas):
/// `/dev/shm/gpumpi-<job_id>-<tag>`, so the launcher's clean-up removes it too. The set-up
/// sequence is the transport's: every rank [`Region::create`]s its own, a fence, every rank
/// [`Region::open`]s the others', a fence, every rank [`Region::unlink`]s its own name.
pub struct Region {
    map: Mapping,
    name: CString,
}
// SAFETY: the mapping is plain shared memory; users synchronize their accesses.
unsafe impl Send for Region {}
unsafe impl Sync for Region {}

impl Region {
    fn name(job_id: &str, tag: &str) -> MpiResult<CString> {
        CString::new(format!("/gpumpi-{job_id}-{tag}"))
            .map_err(|_| crate::mpi_err!(MPI_ERR_INTERN, "shm region name contains a NUL byte"))
    }

    /// Create (replacing a stale one) and map a zero-filled region of `len` bytes.
    pub fn create(job_id: &str, tag: &str, len: usize) -> MpiResult<Region> {
        let name = Self::name(job_id, tag)?;
        let map = create_mapped(&name, len)?;
        Ok(Region { map, name })
    }

    /// Map another rank's region of `len` bytes (after it was created).
    pub fn open(job_id: &str, tag: &str, len: usize) -> MpiResult<Region> {
        let name = Self::name(job_id, tag)?;
        let (fd, _) = open_existing(&name, len, "shm region")?;
        Ok(Region {
            map: map_fd(fd, len)?,
            name,
        })
    }

    /// Remove the name (the mappings stay valid).
    pub fn unlink(&self) {
        // SAFETY: valid C string; failure (already gone) is harmless.
        unsafe { libc::shm_unlink(self.name.as_ptr()) };
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.map.ptr
    }

    pub fn len(&self) -> usize {
        self.map.len
    }

    pub fn is_empty(&self) -> bool {
        self.map.len == 0
    }
}

/// Sender side of the ring we write into (lives in the peer's segment).
struct Tx {
    ctrl: *mut u8,
    ring: usize,
    head: u64,
    tail_cache: u64,
}

/// Receiver side of a ring in our own segment.
struct Rx {
    ctrl: *mut u8,
    tail: u64,
    head_cache: u64,
}

fn atomic_at(ctrl: *mut u8, off: usize) -> &'static AtomicU64 {
    // SAFETY: ctrl points at a 256-byte, 64-aligned ring control block inside a live shared
    // mapping owned by the transport; off is 0 or 128. The 'static lifetime never escapes the
    // transport's methods.
    unsafe { &*(ctrl.add(off) as *const AtomicU64) }
}

fn rings_end(size: usize, ring: usize) -> usize {
    RINGS_OFF + size.saturating_sub(1) * (RING_CTRL + ring)
}

/// Offset of the collective scratch area (page aligned, after the rings).
fn scratch_off(size: usize, ring: usize) -> usize {
    rings_end(size, ring).next_multiple_of(PAGE)
}

fn seg_len(size: usize, ring: usize, scratch: usize) -> usize {
    if scratch == 0 {
        rings_end(size, ring)
    } else {
        scratch_off(size, ring) + SCRATCH_CTRL_BYTES + scratch
    }
}

/// Data bytes of the collective scratch area from `GPUMPI_SHM_SCRATCH_BYTES` (0: none), a
/// multiple of 4 KiB, at most 1 GiB.
pub fn configured_scratch_bytes() -> usize {
    crate::config::snapshot()
        .shm
        .scratch_bytes
        .min(1 << 30)
        .next_multiple_of(PAGE)
}

/// Index of sender `s` among the rings of receiver `r`.
fn ring_index(r: usize, s: usize) -> usize {
    if s < r {
        s
    } else {
        s - 1
    }
}

fn seg_name(job_id: &str, rank: usize, nonce: &str) -> MpiResult<CString> {
    let name = if nonce.is_empty() {
        format!("/gpumpi-{job_id}-{rank}")
    } else {
        format!("/gpumpi-{job_id}-{rank}-{nonce}")
    };
    CString::new(name)
        .map_err(|_| crate::mpi_err!(MPI_ERR_INTERN, "job id {job_id:?} contains a NUL byte"))
}

/// `n` random bytes as hex (from the kernel's generator).
fn random_hex(n: usize) -> MpiResult<String> {
    use std::io::Read;
    let mut b = vec![0u8; n];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(|e| MpiError::other(format!("shm: cannot read /dev/urandom: {e}")))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

fn errno_err(what: &str) -> MpiError {
    MpiError::other(format!("{what}: {}", std::io::Error::last_os_error()))
}

/// Ring size from `GPUMPI_SHM_RING_BYTES`: a power of two, at least 1 KiB, at most 1 GiB.
pub fn configured_ring_bytes() -> usize {
    crate::config::snapshot()
        .shm
        .ring_bytes
        .clamp(1024, 1 << 30)
        .next_power_of_two()
}

/// Per-rank segment size for `size` ranks and rings of `ring_bytes` (see the module doc).
pub fn footprint(size: usize, ring_bytes: usize, scratch_bytes: usize) -> usize {
    seg_len(size, ring_bytes, scratch_bytes)
}

pub struct ShmTransport {
    rank: usize,
    size: usize,
    job: String,
    /// Each rank's segment name nonce (empty: names without one).
    nonces: Vec<String>,
    name: CString,
    unlinked: bool,
    own: Mapping,
    peers: Vec<Option<Mapping>>,
    tx: Vec<Option<Tx>>,
    rx: Vec<Option<Rx>>,
    cma_wanted: bool,
    cma: Vec<bool>,
    pids: Vec<libc::pid_t>,
    own_cores: Vec<bool>,
    /// The ranks on this node (the others are reached over the network and never attached).
    local: Vec<bool>,
    rates: Option<CopyRates>,
    /// Reads and writes whose ends are near each other modulo the page go through `bounce`
    /// (this machine's near copies were measured slow: [`near`]).
    bounce_near: bool,
    bounce: Vec<u8>,
    max_payload: usize,
    next: usize,
}

// SAFETY: the raw pointers point into mappings owned by this value; the transport is used by one
// thread at a time (the engine sits under the process-wide lock) and the shared words are atomics.
unsafe impl Send for ShmTransport {}

impl ShmTransport {
    /// Create and map this rank's segment with the ring size from `GPUMPI_SHM_RING_BYTES`.
    pub fn create(job_id: &str, rank: usize, size: usize) -> MpiResult<Self> {
        Self::create_with(
            job_id,
            rank,
            size,
            configured_ring_bytes(),
            crate::config::snapshot().shm.cma,
        )
    }

    /// As [`ShmTransport::create`] with an explicit ring size (rounded up to a power of two,
    /// at least 1 KiB) and CMA choice.
    pub fn create_with(
        job_id: &str,
        rank: usize,
        size: usize,
        ring_bytes: usize,
        cma: bool,
    ) -> MpiResult<Self> {
        Self::create_named(job_id, rank, size, ring_bytes, cma, "")
    }

    /// As [`ShmTransport::create_with`], the segment's name ending in `nonce` (none if empty).
    fn create_named(
        job_id: &str,
        rank: usize,
        size: usize,
        ring_bytes: usize,
        cma: bool,
        nonce: &str,
    ) -> MpiResult<Self> {
        if rank >= size {
            crate::mpi_bail!(
                MPI_ERR_INTERN,
                "shm: rank {rank} out of range for size {size}"
            );
        }
        let ring = ring_bytes.clamp(1024, 1 << 30).next_power_of_two();
        let name = seg_name(job_id, rank, nonce)?;
        let scratch = if size > 1 {
            configured_scratch_bytes()
        } else {
            0
        };
        let len = seg_len(size, ring, scratch);
        let own = create_mapped(&name, len)?;
        let hdr = own.ptr as *mut SegHeader;
        // SAFETY: the mapping is at least one page, zero-filled, and not yet visible to peers
        // (magic is still 0); we write the plain fields before publishing magic with Release.
        unsafe {
            (*hdr).pid = libc::getpid() as u64;
            (*hdr).size = size as u64;
            (*hdr).ring_bytes = ring as u64;
            (*hdr).probe_addr = &CMA_PROBE as *const u64 as u64;
            (*hdr).scratch = scratch as u64;
        }
        own.header().magic.store(MAGIC, Ordering::Release);
        if cma {
            // Let peers (siblings, not only ancestors) read us under Yama ptrace_scope=1.
            // SAFETY: prctl with integer arguments; failure is harmless (probe will tell).
            unsafe { libc::prctl(libc::PR_SET_PTRACER, libc::PR_SET_PTRACER_ANY, 0, 0, 0) };
        }
        let mut rx: Vec<Option<Rx>> = (0..size).map(|_| None).collect();
        for (s, slot) in rx.iter_mut().enumerate() {
            if s != rank {
                // SAFETY: ring_index(rank, s) < size - 1, so the control block lies in the mapping.
                let ctrl = unsafe {
                    own.ptr
                        .add(RINGS_OFF + ring_index(rank, s) * (RING_CTRL + ring))
                };
                *slot = Some(Rx {
                    ctrl,
                    tail: 0,
                    head_cache: 0,
                });
            }
        }
        tracing::debug!(
            "shm: rank {rank}/{size}: segment {:?} of {} bytes = 4096 + ({size} - 1) x ({RING_CTRL} + ring {ring})",
            name,
            len
        );
        Ok(ShmTransport {
            rank,
            size,
            job: job_id.to_string(),
            nonces: vec![String::new(); size],
            name,
            unlinked: false,
            own,
            peers: (0..size).map(|_| None).collect(),
            tx: (0..size).map(|_| None).collect(),
            rx,
            cma_wanted: cma,
            cma: vec![false; size],
            pids: vec![0; size],
            own_cores: vec![false; size],
            local: vec![true; size],
            rates: None,
            bounce_near: false,
            bounce: Vec::new(),
            max_payload: 0,
            next: 0,
        })
    }

    /// The whole set-up sequence: `create`, `fence()`, `attach_peers`, `fence()`, `unlink`.
    /// `fence` is the bootstrap's barrier (every rank calls `establish` collectively).
    pub fn establish(
        job_id: &str,
        rank: usize,
        size: usize,
        mut fence: impl FnMut() -> MpiResult<()>,
    ) -> MpiResult<Self> {
        let mut t = Self::create(job_id, rank, size)?;
        let _ = JOB_ID.set(job_id.to_string());
        fence()?;
        t.attach_peers()?;
        fence()?;
        t.unlink();
        Ok(t)
    }

    /// The set-up sequence of a real job, with names nobody else can predict: the job id is
    /// public (launchers show it, mpirun's directory is named after it), so each rank names its
    /// segment with a fresh random nonce (a new one if the name exists, however unlikely) and
    /// the ranks learn each other's through `allgather` (publish mine, fence, every rank's, in
    /// rank order: the bootstrap's key-value store, private to the job). Named regions
    /// ([`Region`], [`job_id`]) use `<job_id>-<rank 0's nonce>`.
    /// `local` (called after `allgather`) says which ranks share this node: only those are
    /// attached (the others' segments live on other machines).
    pub fn establish_keyed(
        job_id: &str,
        rank: usize,
        size: usize,
        local: impl FnOnce() -> Vec<bool>,
        mut allgather: impl FnMut(&str) -> MpiResult<Vec<String>>,
        mut fence: impl FnMut() -> MpiResult<()>,
    ) -> MpiResult<Self> {
        let ring = configured_ring_bytes();
        let cma = crate::config::snapshot().shm.cma;
        let mut tries = 0;
        let mut t = loop {
            let nonce = random_hex(8)?;
            match Self::create_named(job_id, rank, size, ring, cma, &nonce) {
                Ok(t) => break t,
                Err(e) if tries < 3 && e.msg.contains("File exists") => {
                    tracing::warn!("shm: {e}; trying another name");
                    tries += 1;
                }
                Err(e) => return Err(e),
            }
        };
        let mine = t
            .name
            .to_str()
            .unwrap_or_default()
            .rsplit('-')
            .next()
            .unwrap_or_default();
        let nonces = allgather(mine)?;
        if nonces.len() != size
            || nonces
                .iter()
                .any(|n| n.len() != 16 || !n.bytes().all(|b| b.is_ascii_hexdigit()))
        {
            crate::mpi_bail!(
                MPI_ERR_OTHER,
                "shm: the ranks' segment names could not be exchanged (got {nonces:?})"
            );
        }
        let _ = JOB_ID.set(format!("{job_id}-{}", nonces[0]));
        t.nonces = nonces;
        t.local = local();
        t.attach_peers()?;
        fence()?;
        t.unlink();
        Ok(t)
    }

    /// Map every other rank's segment (after a fence following `create` on all ranks) and
    /// probe single-copy reads per peer.
    pub fn attach_peers(&mut self) -> MpiResult<()> {
        let job_id = self.job.clone();
        let job_id = job_id.as_str();
        let mut max_payload = usize::MAX;
        for p in 0..self.size {
            if p == self.rank || self.peers[p].is_some() || !self.local[p] {
                continue;
            }
            let name = seg_name(job_id, p, &self.nonces[p])?;
            let (fd, size) = open_existing(&name, PAGE, "shm: segment")?;
            let m = map_fd(fd, size)?;
            let h = m.header();
            let t0 = std::time::Instant::now();
            while h.magic.load(Ordering::Acquire) != MAGIC {
                if t0.elapsed().as_secs() > 10 {
                    crate::mpi_bail!(
                        MPI_ERR_OTHER,
                        "shm: segment of rank {p} was never initialised"
                    );
                }
                std::thread::sleep(std::time::Duration::from_micros(100));
            }
            let ring = h.ring_bytes as usize;
            if h.size as usize != self.size
                || m.len < seg_len(self.size, ring, h.scratch as usize)
                || !ring.is_power_of_two()
            {
                crate::mpi_bail!(
                    MPI_ERR_OTHER,
                    "shm: segment of rank {p} has a different layout (size {})",
                    h.size
                );
            }
            // SAFETY: ring_index(p, rank) < size - 1: the control block lies inside the mapping.
            let ctrl = unsafe {
                m.ptr
                    .add(RINGS_OFF + ring_index(p, self.rank) * (RING_CTRL + ring))
            };
            self.pids[p] = h.pid as libc::pid_t;
            max_payload = max_payload.min(ring_payload_limit(ring));
            self.tx[p] = Some(Tx {
                ctrl,
                ring,
                head: 0,
                tail_cache: 0,
            });
            let probe = h.probe_addr;
            self.peers[p] = Some(m);
            if self.cma_wanted {
                let mut v = [0u8; 8];
                // SAFETY: reading 8 bytes into a local buffer; the remote address is the peer's
                // static probe word, which lives as long as the peer process.
                let ok = unsafe { cma_read(self.pids[p], probe, &mut v) };
                self.cma[p] = ok && u64::from_ne_bytes(v) == CMA_PROBE;
                if !self.cma[p] {
                    tracing::debug!(
                        "shm: rank {}: CMA to rank {p} unavailable; using the pipelined copy",
                        self.rank
                    );
                }
            }
        }
        let own_ring = self.own.header().ring_bytes as usize;
        self.max_payload = max_payload.min(ring_payload_limit(own_ring));
        let ncma = self.cma.iter().filter(|&&c| c).count();
        // SAFETY: sysconf with a valid name has no preconditions.
        let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize;
        let mine = single_cpu(0);
        for p in 0..self.size {
            self.own_cores[p] = p != self.rank
                && self.local[p]
                && self.size <= online
                && mine.is_some()
                && single_cpu(self.pids[p]).is_some_and(|c| Some(c) != mine);
        }
        if ncma > 0 {
            self.rates = measure_rates();
            self.bounce_near = self
                .rates
                .is_some_and(|r| near::is_slow(r.read_gbps, r.near_read_gbps));
        }
        tracing::debug!(
            "shm: rank {}: copy rates {:?}, bound to one core of its own beside {} peers",
            self.rank,
            self.rates,
            self.own_cores.iter().filter(|&&c| c).count()
        );
        tracing::debug!(
            "shm: rank {} attached {} peers, single-copy (CMA) to {} of them, max frame payload {}",
            self.rank,
            self.peers.iter().filter(|p| p.is_some()).count(),
            ncma,
            self.max_payload
        );
        Ok(())
    }

    /// Remove this rank's segment name from `/dev/shm` (after a fence following `attach_peers`
    /// on all ranks). Idempotent.
    pub fn unlink(&mut self) {
        if !self.unlinked {
            // SAFETY: valid C string; failure (already gone) is harmless.
            unsafe { libc::shm_unlink(self.name.as_ptr()) };
            self.unlinked = true;
        }
    }

    /// Size of this rank's segment in bytes.
    pub fn footprint(&self) -> usize {
        self.own.len
    }

    /// Whether single-copy reads from `peer` work.
    pub fn cma_to(&self, peer: usize) -> bool {
        self.cma[peer]
    }
}

impl Drop for ShmTransport {
    fn drop(&mut self) {
        self.unlink();
    }
}

fn ring_payload_limit(ring: usize) -> usize {
    ((ring / 4).saturating_sub(FRAME_PREFIX) & !7).min(64 << 10)
}

/// Create the shared-memory object `name` (replacing a stale one of a dead job with the same
/// id), size it to `len` zero bytes and map it; the name is removed again on failure.
fn create_mapped(name: &CString, len: usize) -> MpiResult<Mapping> {
    let open = || {
        // SAFETY: valid C string; flags/mode are plain integers.
        unsafe {
            libc::shm_open(
                name.as_ptr(),
                libc::O_CREAT | libc::O_EXCL | libc::O_RDWR,
                0o600,
            )
        }
    };
    let mut fd = open();
    if fd < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EEXIST) {
        tracing::warn!("shm: replacing stale segment {:?}", name);
        // SAFETY: valid C string.
        unsafe { libc::shm_unlink(name.as_ptr()) };
        fd = open();
    }
    if fd < 0 {
        let err = std::io::Error::last_os_error();
        let path = format!("/dev/shm{}", name.to_string_lossy());
        if err.raw_os_error() == Some(libc::EEXIST) {
            use std::os::unix::fs::MetadataExt;
            let owner = std::fs::symlink_metadata(&path)
                .map(|m| format!("uid {}", m.uid()))
                .unwrap_or_else(|_| "unknown".into());
            return Err(MpiError::other(format!(
                "shm_open({name:?}): File exists: {path} was created by another process \
                 (owner {owner}, we are uid {}) and cannot be replaced",
                // SAFETY: getuid has no preconditions.
                unsafe { libc::getuid() }
            )));
        }
        return Err(MpiError::other(format!("shm_open({name:?}): {err}")));
    }
    // SAFETY: fd is an open shm object we own.
    if unsafe { libc::ftruncate(fd, len as libc::off_t) } != 0 {
        let e = errno_err("ftruncate of a shared-memory segment");
        // SAFETY: fd is open; name is valid.
        unsafe {
            libc::close(fd);
            libc::shm_unlink(name.as_ptr());
        }
        return Err(e);
    }
    map_fd(fd, len).inspect_err(|_| {
        // SAFETY: valid C string.
        unsafe { libc::shm_unlink(name.as_ptr()) };
    })
}

/// Open an existing shared-memory object of at least `min` bytes: (fd, its size).
fn open_existing(name: &CString, min: usize, what: &str) -> MpiResult<(libc::c_int, usize)> {
    // SAFETY: valid C string.
    let fd = unsafe { libc::shm_open(name.as_ptr(), libc::O_RDWR, 0) };
    if fd < 0 {
        return Err(errno_err(&format!("shm_open({name:?})")));
    }
    // SAFETY: a zeroed stat struct is a valid out-parameter for fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fd is open, st is a valid out-pointer.
    if unsafe { libc::fstat(fd, &mut st) } != 0 || (st.st_size as usize) < min {
        // SAFETY: fd is open.
        unsafe { libc::close(fd) };
        crate::mpi_bail!(MPI_ERR_OTHER, "{what} {name:?} is missing or too small");
    }
    Ok((fd, st.st_size as usize))
}

fn map_fd(fd: libc::c_int, len: usize) -> MpiResult<Mapping> {
    // SAFETY: fd is an open shm object of at least len bytes; we ask for a fresh shared mapping.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    // SAFETY: fd is open and no longer needed once mapped (or on failure).
    unsafe { libc::close(fd) };
    if p == libc::MAP_FAILED {
        return Err(errno_err("mmap of the shared-memory segment"));
    }
    Ok(Mapping {
        ptr: p as *mut u8,
        len,
    })
}

/// `process_vm_readv` of `dst.len()` bytes at `addr` in process `pid`; true when fully read.
///
/// # Safety
/// `dst` is a valid local buffer; the remote range is the caller's business (the kernel checks it).
unsafe fn cma_read(pid: libc::pid_t, addr: u64, dst: &mut [u8]) -> bool {
    cma_copy(pid, addr, dst.as_mut_ptr(), dst.len(), false)
}

/// `len` bytes between `local` and `addr` in process `pid`: into `local` (`process_vm_readv`),
/// or out of it when `write` (`process_vm_writev`, which only reads `local`); true when all
/// were copied.
///
/// # Safety
/// `local .. local + len` is a valid local buffer (writable unless `write`).
unsafe fn cma_copy(pid: libc::pid_t, addr: u64, local: *mut u8, len: usize, write: bool) -> bool {
    let mut done = 0usize;
    while done < len {
        let l = libc::iovec {
            iov_base: local.add(done) as *mut libc::c_void,
            iov_len: len - done,
        };
        let r = libc::iovec {
            iov_base: (addr as usize + done) as *mut libc::c_void,
            iov_len: len - done,
        };
        let n = if write {
            libc::process_vm_writev(pid, &l, 1, &r, 1, 0)
        } else {
            libc::process_vm_readv(pid, &l, 1, &r, 1, 0)
        };
        if n <= 0 {
            return false;
        }
        done += n as usize;
    }
    true
}

/// The one CPU process `pid` (0: this one) may run on, or `None` when it may run on several
/// (or the kernel would not say).
fn single_cpu(pid: libc::pid_t) -> Option<usize> {
    // SAFETY: cpu_set_t is plain data, zero is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: set is a valid cpu_set_t of the size passed; any pid is allowed (the kernel checks).
    let r =
        unsafe { libc::sched_getaffinity(pid, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if r != 0 {
        return None;
    }
    // SAFETY: set was filled by the kernel.
    if unsafe { libc::CPU_COUNT(&set) } != 1 {
        return None;
    }
    // SAFETY: as above; i stays below CPU_SETSIZE.
    (0..libc::CPU_SETSIZE as usize).find(|&i| unsafe { libc::CPU_ISSET(i, &set) })
}

/// The rates of one core copying a cache-resident 256 KiB buffer with `memcpy` and with a
/// single-copy read of this process's own memory (what a read from a peer costs, less the
/// cache misses both pay alike): best of five after a warm-up, about half a millisecond.
/// `None` when the read does not work.
fn measure_rates() -> Option<CopyRates> {
    const LEN: usize = 256 << 10;
    let src = vec![0x5au8; LEN];
    let mut dst = vec![0u8; LEN];
    let best = |f: &mut dyn FnMut() -> bool| -> Option<f64> {
        let mut best = f64::MAX;
        for i in 0..6 {
            let t = std::time::Instant::now();
            if !f() {
                return None;
            }
            let s = t.elapsed().as_secs_f64();
            if i > 0 {
                best = best.min(s);
            }
        }
        Some(LEN as f64 / best.max(1e-9) / 1e9)
    };
    let copy_gbps = best(&mut || {
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&dst);
        true
    })?;
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() };
    // The same read at distance zero modulo the page and at a near distance ([`near`]).
    let mut far = vec![0u8; LEN + 4096];
    let far_at = near::bounce_at(far.as_ptr() as usize, src.as_ptr() as usize + 2048);
    let near_at = (far_at + 16) & 4095;
    let addr = src.as_ptr() as u64;
    // SAFETY: far holds LEN bytes from either offset (both below 4096); the remote range is
    // src, alive in this process.
    let read_gbps = best(&mut || unsafe { cma_read(me, addr, &mut far[far_at..far_at + LEN]) })?;
    // SAFETY: as above.
    let near_read_gbps =
        best(&mut || unsafe { cma_read(me, addr, &mut far[near_at..near_at + LEN]) })?;
    Some(CopyRates {
        copy_gbps,
        read_gbps,
        near_read_gbps,
    })
}

/// The bytes a near read or write ([`near`]) is bounced through at a time.
const BOUNCE_BYTES: usize = 256 << 10;

impl ShmTransport {
    /// A single copy between the local `local .. local + len` and `addr` in process `pid`
    /// (into `local`, or out of it when `write`), through the bounce buffer when this machine's
    /// near copies are slow and these ends are near.
    ///
    /// # Safety
    /// As [`cma_copy`].
    unsafe fn cma_copy_placed(
        &mut self,
        pid: libc::pid_t,
        addr: u64,
        local: *mut u8,
        len: usize,
        write: bool,
    ) -> bool {
        let (dst, src) = if write {
            (addr as usize, local as usize)
        } else {
            (local as usize, addr as usize)
        };
        if !self.bounce_near || len < near::NEAR || !near::is_near(dst, src) {
            return cma_copy(pid, addr, local, len, write);
        }
        if self.bounce.is_empty() {
            self.bounce = vec![0u8; BOUNCE_BYTES + 4096];
        }
        let mut done = 0;
        while done < len {
            let n = (len - done).min(BOUNCE_BYTES);
            let at = near::bounce_at(self.bounce.as_ptr() as usize, dst + done);
            let b = self.bounce[at..at + n].as_mut_ptr();
            let remote = addr + done as u64;
            // SAFETY: b holds n bytes of the bounce buffer (at < 4096); local + done .. + n is
            // in the caller's buffer; the remote range is the caller's contract.
            let ok = if write {
                std::ptr::copy_nonoverlapping(local.add(done), b, n);
                cma_copy(pid, remote, b, n, true)
            } else {
                let ok = cma_copy(pid, remote, b, n, false);
                if ok {
                    std::ptr::copy_nonoverlapping(b, local.add(done), n);
                }
                ok
            };
            if !ok {
                return false;
            }
            done += n;
        }
        true
    }
}

impl ShmTransport {
    /// The address of byte `off` of rank r's page 0, if its segment is mapped here (page 0 of
    /// every mapped segment is: at least one page, checked at attach).
    fn page0(&self, r: usize, off: usize) -> Option<usize> {
        let m = if r == self.rank {
            Some(&self.own)
        } else {
            self.peers[r].as_ref()
        };
        m.map(|m| m.ptr as usize + off)
    }
}

impl Transport for ShmTransport {
    fn max_payload(&self) -> usize {
        self.max_payload
    }

    fn coll_slots(&self) -> Option<Vec<usize>> {
        (0..self.size).map(|r| self.page0(r, SLOTS_OFF)).collect()
    }

    fn coll_records(&self) -> Vec<usize> {
        (0..self.size)
            .map(|r| self.page0(r, RECORDS_OFF).unwrap_or(0))
            .collect()
    }

    fn agree_words(&self) -> Vec<usize> {
        (0..self.size)
            .map(|r| self.page0(r, WORDS_OFF).unwrap_or(0))
            .collect()
    }

    fn coll_scratch(&self) -> Option<(Vec<usize>, usize)> {
        let scratch = self.own.header().scratch as usize;
        if scratch == 0 {
            return None;
        }
        let off = scratch_off(self.size, self.own.header().ring_bytes as usize);
        let mut bases = Vec::with_capacity(self.size);
        for r in 0..self.size {
            let m = if r == self.rank {
                &self.own
            } else {
                self.peers[r].as_ref()?
            };
            // Every rank's area must be as large as this rank's (the same configuration).
            if m.header().scratch as usize != scratch {
                return None;
            }
            bases.push(m.ptr as usize + off);
        }
        Some((bases, scratch))
    }

    fn try_send(&mut self, dst: usize, hdr: &Header, payload: &[u8]) -> bool {
        let t = self.tx[dst]
            .as_mut()
            .expect("shm: try_send to an unattached rank");
        debug_assert!(payload.len() <= self.max_payload);
        let ring = t.ring;
        let frame = FRAME_PREFIX + ((payload.len() + 7) & !7);
        let pos = (t.head as usize) & (ring - 1);
        let contig = ring - pos;
        let need = if frame > contig {
            contig + frame
        } else {
            frame
        };
        if ring - ((t.head - t.tail_cache) as usize) < need {
            t.tail_cache = atomic_at(t.ctrl, TAIL_OFF).load(Ordering::Acquire);
            if ring - ((t.head - t.tail_cache) as usize) < need {
                return false;
            }
        }
        // SAFETY: the data area is ring bytes right after the control block; the space from
        // head to head+need is free (checked against the receiver's tail above), so the receiver
        // does not read it until we publish the new head below.
        unsafe {
            let data = t.ctrl.add(RING_CTRL);
            let mut pos = pos;
            if frame > contig {
                (data.add(pos) as *mut u64).write(WRAP);
                t.head += contig as u64;
                pos = 0;
            }
            let f = data.add(pos);
            (f as *mut u64).write(payload.len() as u64);
            (f.add(8) as *mut Header).write(*hdr);
            std::ptr::copy_nonoverlapping(payload.as_ptr(), f.add(FRAME_PREFIX), payload.len());
        }
        t.head += frame as u64;
        atomic_at(t.ctrl, 0).store(t.head, Ordering::Release);
        true
    }

    fn poll(&mut self, f: &mut dyn FnMut(usize, &Header, &[u8])) -> usize {
        let ring = self.own.header().ring_bytes as usize;
        let n = self.size;
        let mut delivered = 0;
        for i in 0..n {
            let s = (self.next + i) % n;
            let Some(r) = self.rx[s].as_mut() else {
                continue;
            };
            if r.tail == r.head_cache {
                r.head_cache = atomic_at(r.ctrl, 0).load(Ordering::Acquire);
                if r.tail == r.head_cache {
                    // Nothing yet: ask for the line the next frame starts in, so that it
                    // travels while the head's line does instead of after it (a small
                    // frame fits that one line).
                    let pos = (r.tail as usize) & (ring - 1);
                    crate::sys::prefetch(r.ctrl.wrapping_add(RING_CTRL + pos));
                    continue;
                }
            }
            let mut budget = POLL_BUDGET;
            while r.tail != r.head_cache && budget > 0 {
                let pos = (r.tail as usize) & (ring - 1);
                // SAFETY: tail < head_cache, so the frame at pos was published by the sender
                // (Acquire load of head above) and stays untouched until we advance tail.
                unsafe {
                    let fp = r.ctrl.add(RING_CTRL + pos);
                    let len = (fp as *const u64).read();
                    if len == WRAP {
                        r.tail += (ring - pos) as u64;
                        continue;
                    }
                    let len = len as usize;
                    let hdr = (fp.add(8) as *const Header).read();
                    let payload = std::slice::from_raw_parts(fp.add(FRAME_PREFIX), len);
                    f(s, &hdr, payload);
                    r.tail += (FRAME_PREFIX + ((len + 7) & !7)) as u64;
                }
                atomic_at(r.ctrl, TAIL_OFF).store(r.tail, Ordering::Release);
                delivered += 1;
                budget -= 1;
            }
            if r.tail == r.head_cache {
                // Publish the tail after a trailing wrap marker too.
                atomic_at(r.ctrl, TAIL_OFF).store(r.tail, Ordering::Release);
            }
        }
        self.next = (self.next + 1) % n;
        delivered
    }

    fn can_read_remote(&self, src: usize) -> bool {
        self.cma[src]
    }

    fn copy_rates(&self) -> Option<CopyRates> {
        self.rates
    }

    fn copy_slots(&self, peer: usize) -> Option<(usize, usize)> {
        if !self.cma[peer] {
            return None;
        }
        let (tx, rx) = (self.tx[peer].as_ref()?, self.rx[peer].as_ref()?);
        Some((
            tx.ctrl as usize + COPY_SLOTS_OFF,
            rx.ctrl as usize + COPY_SLOTS_OFF,
        ))
    }

    unsafe fn write_remote(&mut self, dst: usize, addr: u64, src: &[u8]) -> bool {
        if !self.cma[dst] {
            return false;
        }
        // SAFETY: src is a valid local buffer (only read: `write`); the remote range is the
        // caller's contract.
        let ok = unsafe {
            self.cma_copy_placed(
                self.pids[dst],
                addr,
                src.as_ptr() as *mut u8,
                src.len(),
                true,
            )
        };
        if !ok {
            tracing::debug!(
                "shm: process_vm_writev to rank {dst} failed: {}",
                std::io::Error::last_os_error()
            );
        }
        ok
    }

    fn own_cores(&self, peer: usize) -> bool {
        self.own_cores[peer]
    }

    fn shares_cpu(&self) -> bool {
        // SAFETY: sched_getcpu has no preconditions.
        let cpu = unsafe { libc::sched_getcpu() };
        if cpu < 0 {
            return false;
        }
        let mine = cpu as u32 + 1;
        let own = &self.own.header().cpu;
        // Written only when it changed, so that the peers' copies of the line stay valid.
        if own.load(Ordering::Relaxed) != mine {
            own.store(mine, Ordering::Relaxed);
        }
        self.peers
            .iter()
            .enumerate()
            .filter(|&(r, _)| r != self.rank)
            .filter_map(|(_, m)| m.as_ref())
            .any(|m| m.header().cpu.load(Ordering::Relaxed) == mine)
    }

    unsafe fn read_remote(&mut self, src: usize, addr: u64, dst: &mut [u8]) -> bool {
        if !self.cma[src] {
            return false;
        }
        // SAFETY: dst is a valid local buffer; the remote range validity is the caller's contract.
        let ok = unsafe {
            self.cma_copy_placed(self.pids[src], addr, dst.as_mut_ptr(), dst.len(), false)
        };
        if !ok {
            tracing::debug!(
                "shm: process_vm_readv from rank {src} failed: {}",
                std::io::Error::last_os_error()
            );
        }
        ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(tag: &str) -> String {
        format!("unit-{}-{tag}", std::process::id())
    }

    /// Another user who creates every name derivable from the public job id (here: directories,
    /// which not even the owner of the job can replace) does not stop a job: its segments carry
    /// nonces the squatter cannot know. Without nonces the failure says what happened.
    #[test]
    fn squatted_names_neither_stop_a_job_nor_go_unexplained() {
        let j = job("squat");
        let squats: Vec<String> = (0..2).map(|r| format!("/dev/shm/gpumpi-{j}-{r}")).collect();
        for p in &squats {
            std::fs::create_dir(p).unwrap();
        }
        let e = ShmTransport::create_with(&j, 0, 2, 1024, false)
            .err()
            .expect("squatted");
        assert!(
            e.msg.contains("File exists") && e.msg.contains("created by another process"),
            "{e}"
        );
        // Two ranks as threads; the allgather is a shared table and a barrier.
        let table = std::sync::Mutex::new(vec![String::new(); 2]);
        let barrier = std::sync::Barrier::new(2);
        let ts: Vec<ShmTransport> = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..2)
                .map(|r| {
                    let (table, barrier, j) = (&table, &barrier, &j);
                    sc.spawn(move || {
                        let allgather = |mine: &str| {
                            table.lock().unwrap()[r] = mine.to_string();
                            barrier.wait();
                            Ok(table.lock().unwrap().clone())
                        };
                        let fence = || {
                            barrier.wait();
                            Ok(())
                        };
                        ShmTransport::establish_keyed(j, r, 2, || vec![true; 2], allgather, fence)
                            .unwrap()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let names = table.lock().unwrap().clone();
        assert!(
            names.iter().all(|n| n.len() == 16) && names[0] != names[1],
            "{names:?}"
        );
        drop(ts);
        for p in &squats {
            std::fs::remove_dir(p).unwrap();
        }
    }

    /// Each rank publishes its CPU when it asks whether another rank runs there: true once a
    /// peer published this CPU, false before, and false once the peer moved elsewhere.
    #[test]
    fn ranks_see_a_peer_on_their_cpu() {
        let j = job("cpu");
        let a = ShmTransport::create_with(&j, 0, 2, 1024, false).unwrap();
        let b = ShmTransport::create_with(&j, 1, 2, 1024, false).unwrap();
        let (mut a, mut b) = (a, b);
        a.attach_peers().unwrap();
        b.attach_peers().unwrap();
        // Keep this thread on one CPU so that both "ranks" run on the same one.
        // SAFETY: plain libc calls on this thread's own affinity mask.
        let (old, cpu) = unsafe {
            let mut old: libc::cpu_set_t = std::mem::zeroed();
            libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut old);
            let cpu = libc::sched_getcpu();
            let mut one: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu as usize, &mut one);
            assert_eq!(
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &one),
                0
            );
            (old, cpu)
        };
        assert!(!a.shares_cpu(), "the peer has not published a CPU yet");
        assert!(b.shares_cpu(), "rank 0 published this CPU");
        assert!(a.shares_cpu(), "rank 1 published this CPU");
        b.own.header().cpu.store(cpu as u32 + 2, Ordering::Relaxed);
        assert!(!a.shares_cpu(), "rank 1 moved to another CPU");
        // SAFETY: restores the mask read above.
        unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &old) };
        a.unlink();
        b.unlink();
    }

    #[test]
    fn two_transports_in_one_process_exchange_and_wrap() {
        let j = job("wrap");
        let mut a = ShmTransport::create_with(&j, 0, 2, 1024, false).unwrap();
        let mut b = ShmTransport::create_with(&j, 1, 2, 1024, false).unwrap();
        a.attach_peers().unwrap();
        b.attach_peers().unwrap();
        a.unlink();
        b.unlink();
        assert!(!std::path::Path::new(&format!("/dev/shm/gpumpi-{j}-0")).exists());
        assert_eq!(
            a.footprint(),
            footprint(2, 1024, configured_scratch_bytes())
        );
        assert_eq!(footprint(2, 1024, 0), 8192 + (4352 + 1024));
        assert_eq!(footprint(2, 1024, 4096), 16384 + 128 + 4096);
        let sc = a.coll_scratch();
        if configured_scratch_bytes() > 0 {
            let (bases, cap) = sc.unwrap();
            assert_eq!((bases.len(), cap), (2, configured_scratch_bytes()));
            assert!(bases.iter().all(|b| b % 64 == 0));
        }
        let maxp = a.max_payload();
        assert_eq!(maxp, 1024 / 4 - 56);
        // Fill until full, drain, repeat across many wraps; check order and contents.
        let mut sent = 0u64;
        let mut got = 0u64;
        for _round in 0..50 {
            loop {
                let len = (sent as usize * 7) % (maxp + 1);
                let payload: Vec<u8> = (0..len).map(|i| (i as u64 + sent) as u8).collect();
                let h = Header {
                    tag: sent as i32,
                    total: len as u64,
                    ..Default::default()
                };
                if !a.try_send(1, &h, &payload) {
                    break;
                }
                sent += 1;
            }
            assert!(sent > got, "ring accepted nothing");
            while b.poll(&mut |src, h, p| {
                assert_eq!(src, 0);
                assert_eq!(h.tag as u64, got);
                assert_eq!(p.len() as u64, h.total);
                for (i, &x) in p.iter().enumerate() {
                    assert_eq!(x, (i as u64 + got) as u8);
                }
                got += 1;
            }) > 0
            {}
            assert_eq!(sent, got);
        }
        // And the other direction works.
        assert!(b.try_send(
            0,
            &Header {
                tag: 5,
                ..Default::default()
            },
            b"hi"
        ));
        let mut seen = false;
        a.poll(&mut |src, h, p| {
            assert_eq!((src, h.tag, p), (1, 5, &b"hi"[..]));
            seen = true;
        });
        assert!(seen);
    }

    /// Two attached transports of one process with CMA asked for.
    fn cma_pair(tag: &str) -> (ShmTransport, ShmTransport) {
        let j = job(tag);
        let mut a = ShmTransport::create_with(&j, 0, 2, 4096, true).unwrap();
        let mut b = ShmTransport::create_with(&j, 1, 2, 4096, true).unwrap();
        a.attach_peers().unwrap();
        b.attach_peers().unwrap();
        (a, b)
    }

    #[test]
    fn cma_probe_on_self_process() {
        // Two transports in one process: CMA to "peer" reads our own memory, which the kernel
        // allows unless seccomp forbids process_vm_readv altogether.
        let (mut a, b) = cma_pair("cma");
        if a.can_read_remote(1) {
            let src = vec![42u8; 1000];
            let mut dst = vec![0u8; 1000];
            // SAFETY: src is alive in this process for the duration of the read.
            assert!(unsafe { a.read_remote(1, src.as_ptr() as u64, &mut dst) });
            assert_eq!(src, dst);
            let r = a.copy_rates().expect("rates are measured where reads work");
            assert!(r.copy_gbps > 0.0 && r.read_gbps > 0.0, "{r:?}");
        } else {
            eprintln!("note: CMA unavailable in this environment; fallback path is used");
        }
        // One process: both "ranks" have the same affinity, so never a core each.
        assert!(!a.own_cores(1) && !b.own_cores(0));
    }

    /// Reads and writes whose ends are near modulo the page go through the bounce buffer
    /// where the machine was measured slow at them, in pieces of the buffer's size, and
    /// deliver the same bytes as the direct copy, at every near and far distance.
    #[test]
    fn near_copies_bounce_and_deliver_the_same_bytes() {
        let (mut a, _b) = cma_pair("near");
        if !a.can_read_remote(1) {
            eprintln!("note: CMA unavailable in this environment; nothing to bounce");
            return;
        }
        let r = a.copy_rates().expect("rates are measured where reads work");
        assert!(r.near_read_gbps > 0.0, "{r:?}");
        a.bounce_near = true;
        let len = BOUNCE_BYTES + 5000;
        let src: Vec<u8> = (0..len + 4096).map(|i| (i * 7 + 3) as u8).collect();
        for d in [0usize, 8, 16, 40, 64, 2048] {
            // Room for the page offset (< 4096) plus the distance (<= 2048) before len bytes.
            let mut dst = vec![0u8; len + 8192];
            // A destination `d` bytes past the source modulo the page.
            let at = near::bounce_at(dst.as_ptr() as usize, src.as_ptr() as usize + 2048) + d;
            let out = &mut dst[at..at + len];
            // SAFETY: src is alive in this process for the duration of the read.
            assert!(unsafe { a.read_remote(1, src.as_ptr() as u64, out) });
            assert!(out[..] == src[..len], "read at distance {d}");
            assert_eq!(
                near::is_near(out.as_ptr() as usize, src.as_ptr() as usize),
                (1..near::NEAR).contains(&d)
            );
            // Room for the page offset (< 4096) plus the distance (<= 2048) before len bytes.
            let mut back = vec![0u8; len + 8192];
            let wat = near::bounce_at(back.as_ptr() as usize, out.as_ptr() as usize + 2048) + d;
            assert!(wat + len <= back.len(), "write target inside back");
            let to = back.as_mut_ptr() as u64 + wat as u64;
            // SAFETY: back is alive in this process and holds len bytes from wat.
            assert!(unsafe { a.write_remote(1, to, out) });
            assert!(back[wat..wat + len] == src[..len], "write at distance {d}");
        }
        assert_eq!(a.bounce.len(), BOUNCE_BYTES + 4096);
    }
}
