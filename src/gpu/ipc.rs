//! CUDA IPC between the processes of one node: export a device buffer, map a peer's buffer once
//! and reuse the mapping (the registration cache).
//!
//! Contract:
//! - [`export`] describes the allocation holding a device pointer ([`Export`]: how to map it,
//!   base, size, the driver's buffer id, and the pointer's offset in it). Two kinds:
//!   `cudaMalloc`/`cuMemAlloc` memory travels as a legacy IPC handle ([`Kind::Legacy`]); VMM
//!   memory (`cuMemCreate`) whose allocation allows `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`
//!   travels as a descriptor, fetched by the importer from the exporter's service thread
//!   ([`Kind::PosixFd`], `gpu::fdshare`) and mapped with cuMemImport/cuMemMap. Answers are cached
//!   per buffer id (the driver never reuses buffer ids, so a freed and reallocated range gets a
//!   new one). Managed memory, VMM memory created without that handle type and stream-ordered
//!   pool memory cannot be exported: `export` returns `None` and callers take the staged path.
//! - [`ImportCache`] maps (peer, buffer id) to a local mapping. A peer's new allocation that
//!   overlaps a cached one with another buffer id (the peer freed and reallocated) closes the
//!   stale mapping first, so a stale mapping is never served and never pins freed memory for
//!   long. The cache is bounded (`GPUMPI_CUDA_IPC_CACHE`); the least recently used mapping goes.
//! - Mappings are only closed between operations: every user of a mapping synchronizes its
//!   stream before the MPI call that used it returns.

use super::fdshare;
use crate::sys::cuda;
use std::collections::HashMap;
use std::sync::Mutex;

/// How a peer maps an exported allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `cuIpcOpenMemHandle` of [`Export::handle`].
    Legacy,
    /// A POSIX descriptor of a VMM allocation, asked from process [`Export::pid`]'s
    /// descriptor service, then imported and mapped (whole allocation, [`Export::size`] bytes).
    PosixFd,
}

/// What a peer needs to map one of our device buffers: [`EXPORT_BYTES`] on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Export {
    /// The legacy IPC handle ([`Kind::Legacy`]; zeros otherwise).
    pub handle: [u8; 64],
    /// Start and size of the allocation in the exporter's address space.
    pub base: u64,
    pub size: u64,
    pub buffer_id: u64,
    /// Offset of the described pointer from `base`.
    pub offset: u64,
    pub kind: Kind,
    /// The exporting process (where a [`Kind::PosixFd`] descriptor is asked for).
    pub pid: u32,
}

pub const EXPORT_BYTES: usize = 104;

impl Export {
    pub fn to_bytes(&self) -> [u8; EXPORT_BYTES] {
        let mut b = [0u8; EXPORT_BYTES];
        b[..64].copy_from_slice(&self.handle);
        b[64..72].copy_from_slice(&self.base.to_le_bytes());
        b[72..80].copy_from_slice(&self.size.to_le_bytes());
        b[80..88].copy_from_slice(&self.buffer_id.to_le_bytes());
        b[88..96].copy_from_slice(&self.offset.to_le_bytes());
        let k: u32 = match self.kind {
            Kind::Legacy => 0,
            Kind::PosixFd => 1,
        };
        b[96..100].copy_from_slice(&k.to_le_bytes());
        b[100..104].copy_from_slice(&self.pid.to_le_bytes());
        b
    }
    pub fn from_bytes(b: &[u8]) -> Option<Export> {
        if b.len() < EXPORT_BYTES {
            return None;
        }
        let u = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
        let w = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        let kind = match w(96) {
            0 => Kind::Legacy,
            1 => Kind::PosixFd,
            _ => return None,
        };
        let mut handle = [0u8; 64];
        handle.copy_from_slice(&b[..64]);
        Some(Export {
            handle,
            base: u(64),
            size: u(72),
            buffer_id: u(80),
            offset: u(88),
            kind,
            pid: w(100),
        })
    }
}

/// How our own allocations are exported, by buffer id: a legacy handle, a descriptor on demand,
/// or `None` for an allocation the driver would not export (pool memory, VMM memory without a
/// shareable handle type): buffer ids are never reused, so the answer holds, and such buffers
/// do not pay failing driver calls on every large send or collective.
#[derive(Clone, Copy)]
enum Way {
    Legacy([u8; 64]),
    /// The physical allocation's range (cuMemGetAddressRange): a VMM reservation may hold
    /// several, each with its own buffer id.
    PosixFd {
        base: usize,
        size: usize,
    },
}

static EXPORTS: Mutex<Option<HashMap<u64, Option<Way>>>> = Mutex::new(None);

/// Describe the device allocation holding `ptr` for a peer process, or `None` when `ptr` is not
/// exportable device memory (host, managed, pool memory, VMM memory created without a POSIX
/// descriptor handle type, or no CUDA).
pub fn export(ptr: usize) -> Option<(Export, i32)> {
    if !crate::config::snapshot().cuda.ipc {
        return None;
    }
    let info = super::classify(ptr as *const u8);
    if info.kind != super::cache::MemKind::Device || info.buffer_id == 0 {
        return None;
    }
    let g = super::gpu()?;
    let mut map = EXPORTS.lock().unwrap_or_else(|e| e.into_inner());
    let map = map.get_or_insert_with(HashMap::new);
    let way = match map.get(&info.buffer_id) {
        Some(known) => (*known)?,
        None => {
            let d = g.device(info.device).ok()?;
            let w = match cuda::with_context(d.ctx, || cuda::ipc_get_mem_handle(info.start)) {
                Ok(h) => Some(Way::Legacy(h)),
                Err(e) if cuda::allowed_handle_types(ptr) & cuda::HANDLE_TYPE_POSIX_FD != 0 => {
                    let range = cuda::with_context(d.ctx, || cuda::mem_address_range(ptr));
                    match (range, start_service()) {
                        (Ok((base, size)), Ok(())) => {
                            tracing::trace!(
                                "CUDA IPC: {ptr:#x}: VMM memory, shared as a descriptor ({e})"
                            );
                            Some(Way::PosixFd { base, size })
                        }
                        (r, s) => {
                            tracing::debug!(
                                "CUDA IPC: {ptr:#x}: VMM memory not shareable ({:?}, {:?}); \
                                 staged path",
                                r.err(),
                                s.err()
                            );
                            None
                        }
                    }
                }
                Err(e) => {
                    tracing::debug!("CUDA IPC: {ptr:#x} not exportable ({e}); staged path");
                    None
                }
            };
            if map.len() >= 4096 {
                map.clear();
            }
            map.insert(info.buffer_id, w);
            w?
        }
    };
    let (kind, handle, base, size) = match way {
        Way::Legacy(h) => (Kind::Legacy, h, info.start, info.len),
        Way::PosixFd { base, size } => (Kind::PosixFd, [0u8; 64], base, size),
    };
    if !(base..base + size).contains(&ptr) {
        return None;
    }
    Some((
        Export {
            handle,
            base: base as u64,
            size: size as u64,
            buffer_id: info.buffer_id,
            offset: (ptr - base) as u64,
            kind,
            pid: own_pid(),
        },
        info.device,
    ))
}

/// This process's id, asked of the kernel once: every device message's export carries it, and
/// `getpid` is a system call each time.
fn own_pid() -> u32 {
    static PID: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *PID.get_or_init(std::process::id)
}

/// Start this process's descriptor service once (`gpu::fdshare`).
fn start_service() -> Result<(), String> {
    static S: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    S.get_or_init(|| {
        fdshare::serve(&fdshare::socket_name(own_pid()), Box::new(provide_fd))
            .map_err(|e| e.to_string())
    })
    .clone()
}

/// The service's provider: a new descriptor for a VMM allocation of this process, if `r` names
/// one that is still mapped at that range with the same buffer id and allows descriptors.
fn provide_fd(r: &fdshare::Request) -> Result<std::os::fd::OwnedFd, String> {
    let base = r.base as usize;
    let g = super::gpu().ok_or("CUDA is not available")?;
    let a = cuda::pointer_attributes(base).map_err(|e| e.to_string())?;
    let gone = || format!("{base:#x} no longer holds buffer {} (freed?)", r.buffer_id);
    if a.buffer_id != r.buffer_id {
        return Err(gone());
    }
    if cuda::allowed_handle_types(base) & cuda::HANDLE_TYPE_POSIX_FD == 0 {
        return Err(format!("{base:#x} allows no POSIX descriptor"));
    }
    let d = g.device(a.device_ordinal)?;
    let fd = cuda::with_context(d.ctx, || {
        let range = cuda::mem_address_range(base)?;
        if range != (base, r.size as usize) {
            return Ok(None);
        }
        cuda::vmm_export_fd(base).map(Some)
    })
    .map_err(|e| e.to_string())?;
    fd.ok_or_else(gone)
}

/// Opens and closes mappings (the driver, or a fake in unit tests).
pub trait Opener {
    /// Map the allocation `e` describes; its local base address.
    fn open(&mut self, e: &Export) -> Result<usize, String>;
    /// Unmap what [`Opener::open`] mapped for an export of `kind` and `size`.
    fn close(&mut self, mapped: usize, kind: Kind, size: u64);
}

struct Entry {
    peer: usize,
    buffer_id: u64,
    base: u64,
    size: u64,
    kind: Kind,
    mapped: usize,
    last_use: u64,
    /// Never evicted (a library allocation a resident kernel keeps using across calls).
    pinned: bool,
}

/// The registration cache of one device's context: (peer, buffer id) -> local mapping.
pub struct ImportCache {
    entries: Vec<Entry>,
    /// (peer, buffer id) of small messages' exports met once and not mapped ([`Self::known`]).
    offered: std::collections::VecDeque<(usize, u64)>,
    cap: usize,
    clock: u64,
    pub hits: u64,
    pub opens: u64,
    pub closes: u64,
}

impl ImportCache {
    pub fn new(cap: usize) -> Self {
        ImportCache {
            entries: Vec::new(),
            offered: std::collections::VecDeque::new(),
            cap: cap.max(1),
            clock: 0,
            hits: 0,
            opens: 0,
            closes: 0,
        }
    }

    /// Whether `peer`'s buffer `e` is mapped, or was asked about once before. Mapping costs
    /// milliseconds, copying a small message through host memory microseconds: a small
    /// message's first sight is answered `false` (the caller stages it) and remembered, a
    /// second one (a reused buffer) `true`, so the caller maps it.
    pub fn known(&mut self, peer: usize, e: &Export) -> bool {
        let key = (peer, e.buffer_id);
        if self
            .entries
            .iter()
            .any(|x| x.peer == peer && x.buffer_id == e.buffer_id)
        {
            return true;
        }
        if let Some(i) = self.offered.iter().position(|k| *k == key) {
            self.offered.remove(i);
            return true;
        }
        if self.offered.len() >= self.cap {
            self.offered.pop_front();
        }
        self.offered.push_back(key);
        false
    }

    /// The local address of `e`'s allocation base as exported by `peer`, mapping it if needed.
    pub fn map(&mut self, peer: usize, e: &Export, o: &mut dyn Opener) -> Result<usize, String> {
        self.map_as(peer, e, o, false)
    }

    /// [`ImportCache::map`]; `pinned` mappings are never evicted or closed (they do not count
    /// against the bound).
    pub fn map_as(
        &mut self,
        peer: usize,
        e: &Export,
        o: &mut dyn Opener,
        pinned: bool,
    ) -> Result<usize, String> {
        self.clock += 1;
        if let Some(x) = self
            .entries
            .iter_mut()
            .find(|x| x.peer == peer && x.buffer_id == e.buffer_id)
        {
            x.last_use = self.clock;
            x.pinned |= pinned;
            self.hits += 1;
            return Ok(x.mapped);
        }
        // The peer freed what it had at this range: drop those mappings.
        let (lo, hi) = (e.base, e.base + e.size);
        let mut i = 0;
        while i < self.entries.len() {
            let x = &self.entries[i];
            if !x.pinned && x.peer == peer && x.base < hi && lo < x.base + x.size {
                o.close(x.mapped, x.kind, x.size);
                self.closes += 1;
                self.entries.swap_remove(i);
            } else {
                i += 1;
            }
        }
        let unpinned = self.entries.iter().filter(|x| !x.pinned).count();
        if unpinned >= self.cap {
            if let Some((j, _)) = self
                .entries
                .iter()
                .enumerate()
                .filter(|(_, x)| !x.pinned)
                .min_by_key(|(_, x)| x.last_use)
            {
                let x = &self.entries[j];
                o.close(x.mapped, x.kind, x.size);
                self.closes += 1;
                self.entries.swap_remove(j);
            }
        }
        let mapped = o.open(e)?;
        self.opens += 1;
        self.entries.push(Entry {
            peer,
            buffer_id: e.buffer_id,
            base: e.base,
            size: e.size,
            kind: e.kind,
            mapped,
            last_use: self.clock,
            pinned,
        });
        Ok(mapped)
    }

    /// Close the mapping of `peer`'s buffer `buffer_id` (pinned or not); whether there was one.
    pub fn release(&mut self, peer: usize, buffer_id: u64, o: &mut dyn Opener) -> bool {
        let Some(i) = self
            .entries
            .iter()
            .position(|x| x.peer == peer && x.buffer_id == buffer_id)
        else {
            return false;
        };
        let x = self.entries.swap_remove(i);
        o.close(x.mapped, x.kind, x.size);
        self.closes += 1;
        true
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The driver as an [`Opener`] in the context that is current (that of device `ordinal`).
struct Driver {
    ordinal: i32,
}

impl Opener for Driver {
    fn open(&mut self, e: &Export) -> Result<usize, String> {
        match e.kind {
            Kind::Legacy => cuda::ipc_open_mem_handle(&e.handle).map_err(|e| e.to_string()),
            Kind::PosixFd => {
                let t0 = std::time::Instant::now();
                let fd = fdshare::fetch(
                    &fdshare::socket_name(e.pid),
                    &fdshare::Request {
                        base: e.base,
                        size: e.size,
                        buffer_id: e.buffer_id,
                    },
                )?;
                let m = cuda::vmm_import(&fd, e.size as usize, self.ordinal)
                    .map_err(|x| x.to_string())?;
                tracing::debug!(
                    pid = e.pid,
                    size = e.size,
                    us = t0.elapsed().as_secs_f64() * 1e6,
                    "CUDA IPC: VMM allocation imported through a POSIX descriptor"
                );
                Ok(m)
            }
        }
    }
    fn close(&mut self, mapped: usize, kind: Kind, size: u64) {
        // SAFETY: the cache closes only mappings no operation uses (see the module contract).
        unsafe {
            match kind {
                Kind::Legacy => cuda::ipc_close_mem_handle(mapped),
                Kind::PosixFd => cuda::vmm_unmap(mapped, size as usize),
            }
        }
    }
}

/// One import cache per device (mappings belong to the context they were opened in).
static IMPORTS: Mutex<Vec<Option<ImportCache>>> = Mutex::new(Vec::new());

/// Map `peer`'s exported buffer into device `ordinal`'s context; returns the local address of
/// the exported pointer (base mapping + offset). `peer` is a world rank (buffer ids are unique
/// only within one process).
pub fn import(peer: usize, e: &Export, ordinal: i32) -> Result<usize, String> {
    import_as(peer, e, ordinal, false)
}

/// [`import`] of a mapping never evicted (a communicator's resident scratch), kept until
/// [`release_pinned`].
pub fn import_pinned(peer: usize, e: &Export, ordinal: i32) -> Result<usize, String> {
    import_as(peer, e, ordinal, true)
}

/// Close the mapping of `peer`'s buffer `buffer_id` in device `ordinal`'s context (the caller
/// guarantees no operation uses it); whether there was one.
pub fn release_pinned(peer: usize, buffer_id: u64, ordinal: i32) -> bool {
    let Some(d) = super::gpu().and_then(|g| g.device(ordinal).ok()) else {
        return false;
    };
    let mut all = IMPORTS.lock().unwrap_or_else(|e| e.into_inner());
    let Some(Some(cache)) = all.get_mut(ordinal.max(0) as usize) else {
        return false;
    };
    let mut o = Driver { ordinal: d.ordinal };
    cuda::with_context(d.ctx, || Ok(cache.release(peer, buffer_id, &mut o))).unwrap_or(false)
}

/// Forget how our allocation `buffer_id` is exported (it is being freed).
pub fn forget_export(buffer_id: u64) {
    if let Some(m) = EXPORTS.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
        m.remove(&buffer_id);
    }
}

/// Device `ordinal`'s import cache in `all`, made at its first use.
fn cache_of(all: &mut Vec<Option<ImportCache>>, ordinal: i32) -> &mut ImportCache {
    let idx = ordinal.max(0) as usize;
    if all.len() <= idx {
        all.resize_with(idx + 1, || None);
    }
    all[idx].get_or_insert_with(|| ImportCache::new(crate::config::snapshot().cuda.ipc_cache))
}

/// [`ImportCache::known`] in device `ordinal`'s cache (`false` without CUDA).
pub fn known(peer: usize, e: &Export, ordinal: i32) -> bool {
    let Some(d) = super::gpu().and_then(|g| g.device(ordinal).ok()) else {
        return false;
    };
    let mut all = IMPORTS.lock().unwrap_or_else(|e| e.into_inner());
    cache_of(&mut all, d.ordinal).known(peer, e)
}

fn import_as(peer: usize, e: &Export, ordinal: i32, pinned: bool) -> Result<usize, String> {
    let g = super::gpu().ok_or("CUDA is not available")?;
    let d = g.device(ordinal)?;
    let mut all = IMPORTS.lock().unwrap_or_else(|e| e.into_inner());
    let cache = cache_of(&mut all, ordinal);
    let mut o = Driver { ordinal: d.ordinal };
    let base = cuda::with_context(d.ctx, || Ok(cache.map_as(peer, e, &mut o, pinned)))
        .map_err(|x| x.to_string())??;
    Ok(base + e.offset as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Fake {
        next: usize,
        open: Vec<usize>,
        closed: Vec<usize>,
    }
    impl Opener for Fake {
        fn open(&mut self, e: &Export) -> Result<usize, String> {
            if e.handle[0] == 0xff {
                return Err("refused".into());
            }
            self.next += 0x1000;
            self.open.push(self.next);
            Ok(self.next)
        }
        fn close(&mut self, m: usize, _: Kind, _: u64) {
            self.open.retain(|&x| x != m);
            self.closed.push(m);
        }
    }

    fn exp(id: u64, base: u64, size: u64) -> Export {
        Export {
            handle: [id as u8; 64],
            base,
            size,
            buffer_id: id,
            offset: 0,
            kind: Kind::Legacy,
            pid: 1,
        }
    }

    #[test]
    fn export_round_trips_as_bytes() {
        let mut e = exp(7, 0x7f00_0000_0000, 1 << 20);
        e.offset = 4096;
        e.handle[63] = 9;
        assert_eq!(Export::from_bytes(&e.to_bytes()), Some(e));
        assert_eq!(Export::from_bytes(&[0u8; 10]), None);
        let f = Export {
            handle: [0; 64],
            kind: Kind::PosixFd,
            pid: 4242,
            ..e
        };
        assert_eq!(Export::from_bytes(&f.to_bytes()), Some(f));
        let mut bad = f.to_bytes();
        bad[96] = 7;
        assert_eq!(Export::from_bytes(&bad), None, "an unknown kind is refused");
    }

    #[test]
    fn maps_once_per_peer_and_buffer() {
        let mut c = ImportCache::new(8);
        let mut f = Fake::default();
        let a = c.map(1, &exp(5, 0x1000_0000, 4096), &mut f).unwrap();
        let b = c.map(1, &exp(5, 0x1000_0000, 4096), &mut f).unwrap();
        assert_eq!(a, b);
        // Same buffer id from another peer is another allocation.
        let d = c.map(2, &exp(5, 0x1000_0000, 4096), &mut f).unwrap();
        assert_ne!(a, d);
        assert_eq!((c.opens, c.hits, c.closes), (2, 1, 0));
    }

    #[test]
    fn free_then_reallocate_at_same_address_is_never_stale() {
        let mut c = ImportCache::new(8);
        let mut f = Fake::default();
        let old = c.map(1, &exp(5, 0x1000_0000, 1 << 20), &mut f).unwrap();
        // The peer freed buffer 5 and got buffer 9 at an overlapping range.
        let new = c.map(1, &exp(9, 0x1008_0000, 1 << 20), &mut f).unwrap();
        assert_ne!(old, new);
        assert_eq!(f.closed, vec![old], "the stale mapping is closed");
        assert_eq!(c.len(), 1);
        // Asking for the new buffer again hits.
        assert_eq!(
            c.map(1, &exp(9, 0x1008_0000, 1 << 20), &mut f).unwrap(),
            new
        );
    }

    #[test]
    fn bounded_lru() {
        let mut c = ImportCache::new(2);
        let mut f = Fake::default();
        let a = c.map(1, &exp(1, 0x1000, 16), &mut f).unwrap();
        let _b = c.map(1, &exp(2, 0x2000, 16), &mut f).unwrap();
        c.map(1, &exp(1, 0x1000, 16), &mut f).unwrap(); // a is now recent
        let _d = c.map(1, &exp(3, 0x3000, 16), &mut f).unwrap();
        assert_eq!(c.len(), 2);
        assert_eq!(f.closed.len(), 1);
        assert_ne!(f.closed[0], a, "the least recently used one goes");
        assert!(f.open.contains(&a));
    }

    #[test]
    fn a_small_buffer_is_mapped_at_its_second_sight() {
        let mut c = ImportCache::new(2);
        let mut f = Fake::default();
        let (a, b) = (exp(1, 0x1000, 16), exp(2, 0x2000, 16));
        assert!(!c.known(1, &a), "first sight: stage it");
        assert!(
            !c.known(2, &a),
            "another peer's buffer id is another buffer"
        );
        assert!(c.known(1, &a), "second sight: map it");
        assert!(!c.known(1, &b));
        c.map(1, &b, &mut f).unwrap();
        assert!(c.known(1, &b), "mapped: known");
        assert!(c.known(1, &b), "and stays known while mapped");
        // The remembered first sights are bounded like the mappings.
        for id in 10..20u64 {
            assert!(!c.known(5, &exp(id, 0x10_0000 * id, 16)));
        }
        assert!(!c.known(2, &a), "forgotten past the bound");
        assert_eq!(f.open.len(), 1, "known() itself maps nothing");
    }

    #[test]
    fn pinned_mappings_are_never_evicted() {
        let mut c = ImportCache::new(2);
        let mut f = Fake::default();
        let scratch = c.map_as(3, &exp(1, 0x1000, 16), &mut f, true).unwrap();
        for id in 10..20u64 {
            c.map(3, &exp(id, 0x10_0000 * id, 16), &mut f).unwrap();
        }
        assert!(f.open.contains(&scratch), "the pinned mapping stays open");
        assert_eq!(c.len(), 3, "two unpinned (the bound) plus the pinned one");
        assert_eq!(c.map(3, &exp(1, 0x1000, 16), &mut f).unwrap(), scratch);
    }

    #[test]
    fn pinned_mappings_are_closed_on_release() {
        let mut c = ImportCache::new(2);
        let mut f = Fake::default();
        let a = c.map_as(1, &exp(7, 0x1000, 0x100), &mut f, true).unwrap();
        c.map(1, &exp(8, 0x9000, 0x100), &mut f).unwrap();
        assert!(c.release(1, 7, &mut f), "the pinned mapping is closed");
        assert_eq!(f.closed, [a]);
        assert!(!c.release(1, 7, &mut f), "only once");
        assert!(
            !c.release(2, 8, &mut f),
            "another peer's buffer id is not ours"
        );
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn open_failure_is_reported_and_not_cached() {
        let mut c = ImportCache::new(2);
        let mut f = Fake::default();
        let mut e = exp(4, 0x1000, 16);
        e.handle[0] = 0xff;
        assert!(c.map(1, &e, &mut f).is_err());
        assert!(c.is_empty());
    }

    /// On a machine with a GPU (a recorded skip elsewhere): VMM memory created with the POSIX
    /// descriptor handle type is exported as a descriptor and imported through this process's
    /// own descriptor service; the mapping shows the same bytes, and writes through it land in
    /// the original. A pointer in the second of two back-to-back allocations describes that
    /// allocation alone. VMM memory without the handle type is not exportable.
    #[test]
    fn vmm_memory_travels_as_a_descriptor() {
        let Some(g) = crate::gpu::gpu_or_skip() else {
            return;
        };
        let d = g.device(0).unwrap();
        let (base, sizes) = cuda::with_context(d.ctx, || {
            cuda::vmm_alloc_chunks(0, &[1, 2], cuda::HANDLE_TYPE_POSIX_FD)
        })
        .unwrap();
        let total: usize = sizes.iter().sum();
        let pattern: Vec<u8> = (0..total).map(|i| (i * 7 % 251) as u8).collect();
        let second = base + sizes[0];
        let ptr = second + 100;
        cuda::with_context(d.ctx, || unsafe {
            cuda::memcpy_htod_async(base, &pattern, d.stream)?;
            cuda::stream_synchronize(d.stream)
        })
        .unwrap();
        let (e, ordinal) = export(ptr).expect("VMM memory with a POSIX handle type exports");
        assert_eq!((e.kind, ordinal, e.pid), (Kind::PosixFd, 0, own_pid()));
        assert_eq!(
            (e.base as usize, e.size as usize, e.offset),
            (second, sizes[1], 100),
            "the export describes the second allocation alone"
        );
        let e = Export::from_bytes(&e.to_bytes()).unwrap();
        let local = import(usize::MAX - 1, &e, 0).expect("imported through the service");
        assert_ne!(local, ptr, "a new mapping, not the exporter's address");
        let mut back = vec![0u8; 4096];
        cuda::with_context(d.ctx, || unsafe {
            cuda::memcpy_dtoh_async(&mut back, local, d.stream)?;
            cuda::stream_synchronize(d.stream)
        })
        .unwrap();
        assert_eq!(back[..], pattern[sizes[0] + 100..sizes[0] + 100 + 4096]);
        // Written through the mapping, read at the original address.
        let ones = vec![0x5au8; 4096];
        cuda::with_context(d.ctx, || unsafe {
            cuda::memcpy_htod_async(local, &ones, d.stream)?;
            cuda::memcpy_dtoh_async(&mut back, ptr, d.stream)?;
            cuda::stream_synchronize(d.stream)
        })
        .unwrap();
        assert_eq!(back, ones);
        // A second import hits the cache.
        assert_eq!(import(usize::MAX - 1, &e, 0).unwrap(), local);
        // Without a shareable handle type: staged.
        let (plain, _) = cuda::with_context(d.ctx, || cuda::vmm_alloc_chunks(0, &[1], 0)).unwrap();
        assert!(export(plain).is_none(), "VMM memory without a handle type");
        // The service refuses a buffer id it does not hold.
        let r = fdshare::fetch(
            &fdshare::socket_name(own_pid()),
            &fdshare::Request {
                base: e.base,
                size: e.size,
                buffer_id: e.buffer_id + 12345,
            },
        );
        assert!(r.unwrap_err().contains("no longer holds"));
    }
}
