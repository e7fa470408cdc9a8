//! The registration cache of the ibverbs backend: memory regions keyed by buffer identity.
//!
//! An entry covers `[addr, addr+len)` of one buffer, identified by `id`: CUDA's buffer id for
//! device memory (`CU_POINTER_ATTRIBUTE_BUFFER_ID`, unique for the life of the process, so a
//! buffer freed and reallocated at the same address gets a new id), 0 for host memory. A lookup
//! hits an entry of the same id that contains the range (overlapping but uncontained ranges get
//! an entry of their own). Entries are reference-counted by the callers' registrations:
//! - host entries are released (returned for deregistration) when their count drops to 0,
//!   since a host address says nothing about whether the pages are still the same;
//! - device entries stay cached at count 0 (registering device memory is expensive) until a
//!   lookup of an overlapping range carries a different id, which proves the cached buffer
//!   was freed: those entries are evicted, unused ones released at once and used ones when
//!   their last registration goes; or until the cache holds more than its capacity of unused
//!   entries (the oldest go first).
//!
//! A device range the NIC refused (the driver cannot export it as a dma-buf, or the NIC rejects
//! it for good) is remembered with the reason, keyed by (id, address, length): the same range of
//! the same buffer is refused again without asking the driver, as a message loop that reuses a
//! buffer would otherwise retry at every message. A buffer id is never reused, so a freed buffer's
//! refusal only ages out (the oldest go first beyond the capacity).
//!
//! Pure: the region type `M` is whatever the backend registers; the cache never calls verbs.

/// One cached region.
#[derive(Debug)]
struct Entry<M> {
    addr: usize,
    len: usize,
    id: u64,
    refs: usize,
    /// Evicted (a newer buffer took its range): released at its last deregistration.
    stale: bool,
    /// Last use, for the bound on unused entries.
    tick: u64,
    key: u64,
    region: M,
}

/// See the module documentation.
#[derive(Debug)]
pub struct RegCache<M> {
    entries: Vec<Entry<M>>,
    next_key: u64,
    tick: u64,
    /// Most unused device entries kept (and most refusals remembered).
    cap_unused: usize,
    /// Refused device ranges: (id, addr, len, reason), oldest first.
    refused: std::collections::VecDeque<(u64, usize, usize, String)>,
}

/// What a registration returned: the key the caller deregisters with.
pub type RegKey = u64;

/// A key that names no registration held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnknownKey;

impl<M> RegCache<M> {
    pub fn new(cap_unused: usize) -> Self {
        RegCache {
            entries: Vec::new(),
            next_key: 1,
            tick: 0,
            cap_unused,
            refused: std::collections::VecDeque::new(),
        }
    }

    /// Remembers that `[addr, addr+len)` of device buffer `id` cannot be registered, and why.
    pub fn refuse(&mut self, addr: usize, len: usize, id: u64, reason: String) {
        if self.refusal(addr, len, id).is_some() {
            return;
        }
        if self.refused.len() >= self.cap_unused.max(1) {
            self.refused.pop_front();
        }
        self.refused.push_back((id, addr, len, reason));
    }

    /// Why `[addr, addr+len)` of buffer `id` was refused before, if it was.
    pub fn refusal(&self, addr: usize, len: usize, id: u64) -> Option<&str> {
        self.refused
            .iter()
            .find(|r| (r.0, r.1, r.2) == (id, addr, len))
            .map(|r| r.3.as_str())
    }

    /// Looks `[addr, addr+len)` of buffer `id` up. On a hit, takes a reference and returns its
    /// key. Always returns the regions that must be deregistered now (entries of another id
    /// overlapping the range that nobody uses).
    pub fn lookup(&mut self, addr: usize, len: usize, id: u64) -> (Option<RegKey>, Vec<M>) {
        self.tick += 1;
        let end = addr + len.max(1);
        let mut released = Vec::new();
        // Entries of another buffer overlapping this one: that buffer is gone.
        let mut i = 0;
        while i < self.entries.len() {
            let e = &mut self.entries[i];
            let overlaps = e.addr < end && addr < e.addr + e.len.max(1);
            if overlaps && e.id != id && !e.stale {
                e.stale = true;
                if e.refs == 0 {
                    released.push(self.entries.swap_remove(i).region);
                    continue;
                }
            }
            i += 1;
        }
        let tick = self.tick;
        let hit = self
            .entries
            .iter_mut()
            .find(|e| !e.stale && e.id == id && e.addr <= addr && addr + len <= e.addr + e.len);
        let key = hit.map(|e| {
            e.refs += 1;
            e.tick = tick;
            e.key
        });
        (key, released)
    }

    /// Adds a new region (one reference) and returns its key, plus the regions to deregister
    /// now to keep the unused device entries within the capacity.
    pub fn insert(&mut self, addr: usize, len: usize, id: u64, region: M) -> (RegKey, Vec<M>) {
        self.tick += 1;
        let key = self.next_key;
        self.next_key += 1;
        self.entries.push(Entry {
            addr,
            len,
            id,
            refs: 1,
            stale: false,
            tick: self.tick,
            key,
            region,
        });
        (key, self.trim())
    }

    /// The buffer id of `key`'s entry (0: host memory).
    pub fn id_of(&self, key: RegKey) -> Option<u64> {
        self.entries.iter().find(|e| e.key == key).map(|e| e.id)
    }

    /// The region of `key`.
    pub fn get(&self, key: RegKey) -> Option<&M> {
        self.entries
            .iter()
            .find(|e| e.key == key)
            .map(|e| &e.region)
    }

    /// Drops one reference of `key`; returns the region when it must be deregistered now
    /// (host memory, or a stale entry), `Err` for an unknown key.
    pub fn release(&mut self, key: RegKey) -> Result<Option<M>, UnknownKey> {
        let i = self
            .entries
            .iter()
            .position(|e| e.key == key && e.refs > 0)
            .ok_or(UnknownKey)?;
        let e = &mut self.entries[i];
        e.refs -= 1;
        if e.refs == 0 && (e.id == 0 || e.stale) {
            return Ok(Some(self.entries.swap_remove(i).region));
        }
        Ok(None)
    }

    fn trim(&mut self) -> Vec<M> {
        let mut out = Vec::new();
        loop {
            let unused: Vec<usize> = (0..self.entries.len())
                .filter(|&i| self.entries[i].refs == 0)
                .collect();
            if unused.len() <= self.cap_unused {
                return out;
            }
            let oldest = *unused
                .iter()
                .min_by_key(|&&i| self.entries[i].tick)
                .unwrap();
            out.push(self.entries.swap_remove(oldest).region);
        }
    }

    /// Every region, for deregistration at close.
    pub fn drain(&mut self) -> Vec<M> {
        self.entries.drain(..).map(|e| e.region).collect()
    }

    /// Entries held (used or cached).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_contained_range_of_the_same_buffer_hits() {
        let mut c = RegCache::new(4);
        let (k, rel) = c.insert(0x1000, 0x1000, 7, "A");
        assert!(rel.is_empty());
        let (hit, rel) = c.lookup(0x1800, 0x100, 7);
        assert_eq!(hit, Some(k));
        assert!(rel.is_empty());
        // The end of the range is outside: no hit.
        assert_eq!(c.lookup(0x1f00, 0x200, 7).0, None);
        // Overlapping but not contained ranges get their own entry; both stay usable.
        let (k2, _) = c.insert(0x1f00, 0x200, 7, "B");
        assert_ne!(k, k2);
        assert_eq!(c.lookup(0x2000, 0x10, 7).0, Some(k2));
        assert_eq!(c.lookup(0x1000, 0x10, 7).0, Some(k));
        assert_eq!(c.get(k2), Some(&"B"));
    }

    #[test]
    fn a_freed_and_reallocated_buffer_never_hits_the_stale_entry() {
        let mut c = RegCache::new(4);
        let (k, _) = c.insert(0x10000, 0x4000, 1, "old");
        assert_eq!(c.release(k), Ok(None), "device entries stay cached");
        assert_eq!(c.lookup(0x10000, 0x4000, 1).0, Some(k), "same buffer: hit");
        assert_eq!(c.release(k), Ok(None));
        // The buffer is freed and a new one (id 2) allocated at the same address.
        let (hit, rel) = c.lookup(0x10000, 0x4000, 2);
        assert_eq!(hit, None);
        assert_eq!(rel, vec!["old"], "the stale region is deregistered at once");
        assert!(c.is_empty());
        // A new buffer overlapping a stale one that is still in use: evicted, released at its
        // last deregistration, and never hit again.
        let (k1, _) = c.insert(0x20000, 0x1000, 3, "in-use");
        let (hit, rel) = c.lookup(0x20800, 0x1000, 4);
        assert_eq!((hit, rel.len()), (None, 0));
        assert_eq!(
            c.lookup(0x20000, 0x100, 3).0,
            None,
            "stale entries never hit"
        );
        assert_eq!(c.release(k1), Ok(Some("in-use")));
        assert_eq!(c.release(k1), Err(UnknownKey));
    }

    #[test]
    fn host_entries_are_released_at_their_last_reference() {
        let mut c = RegCache::new(4);
        let (k, _) = c.insert(0x5000, 64, 0, "h");
        assert_eq!(c.lookup(0x5000, 64, 0).0, Some(k));
        assert_eq!(c.release(k), Ok(None));
        assert_eq!(c.release(k), Ok(Some("h")));
        assert_eq!(c.lookup(0x5000, 64, 0).0, None);
        assert_eq!(c.release(99), Err(UnknownKey));
    }

    #[test]
    fn a_refused_range_is_refused_again_and_only_that_range_of_that_buffer() {
        let mut c: RegCache<&str> = RegCache::new(2);
        assert_eq!(c.refusal(0x1000, 64, 5), None);
        c.refuse(0x1000, 64, 5, "no dma-buf".into());
        assert_eq!(c.refusal(0x1000, 64, 5), Some("no dma-buf"));
        assert_eq!(
            c.refusal(0x1000, 64, 6),
            None,
            "another buffer at that address"
        );
        assert_eq!(
            c.refusal(0x1000, 128, 5),
            None,
            "another range of the buffer"
        );
        c.refuse(0x1000, 64, 5, "again".into());
        assert_eq!(c.refusal(0x1000, 64, 5), Some("no dma-buf"), "kept once");
        // Bounded by the capacity, the oldest refusal goes first.
        c.refuse(0x2000, 64, 7, "b".into());
        c.refuse(0x3000, 64, 8, "c".into());
        assert_eq!(c.refusal(0x1000, 64, 5), None);
        assert_eq!(c.refusal(0x2000, 64, 7), Some("b"));
        assert_eq!(c.refusal(0x3000, 64, 8), Some("c"));
        assert!(c.is_empty(), "refusals hold no region");
    }

    #[test]
    fn unused_device_entries_are_bounded_oldest_first() {
        let mut c = RegCache::new(2);
        let mut keys = Vec::new();
        for i in 0..3u64 {
            let (k, rel) = c.insert(0x1000 * (i as usize + 1) * 16, 0x1000, 10 + i, i);
            assert!(rel.is_empty());
            keys.push(k);
        }
        for &k in &keys {
            assert_eq!(c.release(k), Ok(None));
        }
        // Touch entry 0 so that entry 1 is the oldest unused one.
        let (hit, _) = c.lookup(0x10000, 0x10, 10);
        assert_eq!(hit, Some(keys[0]));
        c.release(keys[0]).unwrap();
        let (_, rel) = c.insert(0x900000, 0x1000, 20, 9);
        assert_eq!(rel, vec![1], "the least recently used unused entry goes");
        assert_eq!(c.len(), 3);
        assert_eq!(c.drain().len(), 3);
    }
}
