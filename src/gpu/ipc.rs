//! CUDA IPC between the processes of one node: export a device buffer as a legacy IPC handle,
//! map a peer's handle once and reuse the mapping (the registration cache).
//!
//! Contract:
//! - [`export`] describes the allocation holding a device pointer ([`Export`]: handle, base,
//!   size, the driver's buffer id, and the pointer's offset in it). Handles are cached per buffer
//!   id (the driver never reuses buffer ids, so a freed and reallocated range gets a new one).
//!   Managed memory, VMM (`cuMemCreate`) and stream-ordered pool memory cannot be exported with
//!   legacy handles: `export` returns `None` and callers take the staged path.
//! - [`ImportCache`] maps (peer, buffer id) to a local mapping. A peer's new allocation that
//!   overlaps a cached one with another buffer id (the peer freed and reallocated) closes the
//!   stale mapping first, so a stale mapping is never served and never pins freed memory for
//!   long. The cache is bounded (`GPUMPI_CUDA_IPC_CACHE`); the least recently used mapping goes.
//! - Mappings are only closed between operations: every user of a mapping synchronizes its
//!   stream before the MPI call that used it returns.

use crate::sys::cuda;
use std::collections::HashMap;
use std::sync::Mutex;

/// What a peer needs to map one of our device buffers: 96 bytes on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Export {
    pub handle: [u8; 64],
    /// Start and size of the allocation in the exporter's address space.
    pub base: u64,
    pub size: u64,
    pub buffer_id: u64,
    /// Offset of the described pointer from `base`.
    pub offset: u64,
}

pub const EXPORT_BYTES: usize = 96;

impl Export {
    pub fn to_bytes(&self) -> [u8; EXPORT_BYTES] {
        let mut b = [0u8; EXPORT_BYTES];
        b[..64].copy_from_slice(&self.handle);
        b[64..72].copy_from_slice(&self.base.to_le_bytes());
        b[72..80].copy_from_slice(&self.size.to_le_bytes());
        b[80..88].copy_from_slice(&self.buffer_id.to_le_bytes());
        b[88..96].copy_from_slice(&self.offset.to_le_bytes());
        b
    }
    pub fn from_bytes(b: &[u8]) -> Option<Export> {
        if b.len() < EXPORT_BYTES {
            return None;
        }
        let u = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
        let mut handle = [0u8; 64];
        handle.copy_from_slice(&b[..64]);
        Some(Export {
            handle,
            base: u(64),
            size: u(72),
            buffer_id: u(80),
            offset: u(88),
        })
    }
}

/// Legacy IPC handles of our own allocations, by buffer id; `None` for an allocation the driver
/// would not export (VMM, pool memory): buffer ids are never reused, so the answer holds, and
/// such buffers do not pay a failing driver call on every large send or collective.
#[allow(clippy::type_complexity)]
static EXPORTS: Mutex<Option<HashMap<u64, Option<[u8; 64]>>>> = Mutex::new(None);

/// Describe the device allocation holding `ptr` for a peer process, or `None` when `ptr` is not
/// exportable device memory (host, managed, VMM, pool memory, or no CUDA).
pub fn export(ptr: usize) -> Option<(Export, i32)> {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if !*ON.get_or_init(|| crate::config::get("GPUMPI_CUDA_IPC").as_deref() != Some("0")) {
        return None;
    }
    let info = super::classify(ptr as *const u8);
    if info.kind != super::cache::MemKind::Device || info.buffer_id == 0 {
        return None;
    }
    let g = super::gpu()?;
    let mut map = EXPORTS.lock().unwrap_or_else(|e| e.into_inner());
    let map = map.get_or_insert_with(HashMap::new);
    let handle = match map.get(&info.buffer_id) {
        Some(known) => (*known)?,
        None => {
            let d = g.device(info.device).ok()?;
            let h = cuda::with_context(d.ctx, || cuda::ipc_get_mem_handle(info.start))
                .inspect_err(|e| {
                    tracing::debug!("CUDA IPC: {ptr:#x} not exportable ({e}); staged path")
                })
                .ok();
            if map.len() >= 4096 {
                map.clear();
            }
            map.insert(info.buffer_id, h);
            h?
        }
    };
    Some((
        Export {
            handle,
            base: info.start as u64,
            size: info.len as u64,
            buffer_id: info.buffer_id,
            offset: (ptr - info.start) as u64,
        },
        info.device,
    ))
}

/// Opens and closes mappings (the driver, or a fake in unit tests).
pub trait Opener {
    fn open(&mut self, handle: &[u8; 64]) -> Result<usize, String>;
    fn close(&mut self, mapped: usize);
}

struct Entry {
    peer: usize,
    buffer_id: u64,
    base: u64,
    size: u64,
    mapped: usize,
    last_use: u64,
    /// Never evicted (a library allocation a resident kernel keeps using across calls).
    pinned: bool,
}

/// The registration cache of one device's context: (peer, buffer id) -> local mapping.
pub struct ImportCache {
    entries: Vec<Entry>,
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
            cap: cap.max(1),
            clock: 0,
            hits: 0,
            opens: 0,
            closes: 0,
        }
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
                o.close(x.mapped);
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
                o.close(self.entries[j].mapped);
                self.closes += 1;
                self.entries.swap_remove(j);
            }
        }
        let mapped = o.open(&e.handle)?;
        self.opens += 1;
        self.entries.push(Entry {
            peer,
            buffer_id: e.buffer_id,
            base: e.base,
            size: e.size,
            mapped,
            last_use: self.clock,
            pinned,
        });
        Ok(mapped)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The driver as an [`Opener`] in the context that is current.
struct Driver;

impl Opener for Driver {
    fn open(&mut self, handle: &[u8; 64]) -> Result<usize, String> {
        cuda::ipc_open_mem_handle(handle).map_err(|e| e.to_string())
    }
    fn close(&mut self, mapped: usize) {
        // SAFETY: the cache closes only mappings no operation uses (see the module contract).
        unsafe { cuda::ipc_close_mem_handle(mapped) }
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

/// [`import`] of a mapping kept for the life of the process (a resident kernel's scratch).
pub fn import_pinned(peer: usize, e: &Export, ordinal: i32) -> Result<usize, String> {
    import_as(peer, e, ordinal, true)
}

fn import_as(peer: usize, e: &Export, ordinal: i32, pinned: bool) -> Result<usize, String> {
    let g = super::gpu().ok_or("CUDA is not available")?;
    let d = g.device(ordinal)?;
    let mut all = IMPORTS.lock().unwrap_or_else(|e| e.into_inner());
    let idx = ordinal.max(0) as usize;
    if all.len() <= idx {
        all.resize_with(idx + 1, || None);
    }
    let cap = crate::config::get_usize("GPUMPI_CUDA_IPC_CACHE");
    let cache = all[idx].get_or_insert_with(|| ImportCache::new(cap));
    let base = cuda::with_context(d.ctx, || Ok(cache.map_as(peer, e, &mut Driver, pinned)))
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
        fn open(&mut self, h: &[u8; 64]) -> Result<usize, String> {
            if h[0] == 0xff {
                return Err("refused".into());
            }
            self.next += 0x1000;
            self.open.push(self.next);
            Ok(self.next)
        }
        fn close(&mut self, m: usize) {
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
        }
    }

    #[test]
    fn export_round_trips_as_bytes() {
        let mut e = exp(7, 0x7f00_0000_0000, 1 << 20);
        e.offset = 4096;
        e.handle[63] = 9;
        assert_eq!(Export::from_bytes(&e.to_bytes()), Some(e));
        assert_eq!(Export::from_bytes(&[0u8; 10]), None);
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
    fn open_failure_is_reported_and_not_cached() {
        let mut c = ImportCache::new(2);
        let mut f = Fake::default();
        let mut e = exp(4, 0x1000, 16);
        e.handle[0] = 0xff;
        assert!(c.map(1, &e, &mut f).is_err());
        assert!(c.is_empty());
    }
}
