//! Pointer classification with a small cache, independent of CUDA (the driver is behind the
//! [`Classifier`] trait, so the cache logic is unit-tested with a fake).
//!
//! The cache holds CUDA allocations (device, managed, pinned host) keyed by their address range.
//! A hit is confirmed by the allocation's buffer id, which the driver never reuses: memory freed
//! and reallocated at the same address has a new id, so it is classified again, never taken for
//! the old allocation. Plain host memory (unknown to the driver) is not cached.

use std::collections::BTreeMap;

/// Where a buffer lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemKind {
    /// Ordinary host memory the driver does not know.
    Host,
    /// Page-locked host memory (cudaMallocHost / cuMemHostAlloc / registered).
    PinnedHost,
    /// Device memory (cudaMalloc): not accessible from the CPU.
    Device,
    /// Managed (unified) memory (cudaMallocManaged).
    Managed,
}

impl MemKind {
    /// Whether the CPU must not (Device) or should not (Managed) touch it directly.
    pub fn needs_staging(self) -> bool {
        matches!(self, MemKind::Device | MemKind::Managed)
    }
}

/// What is known about one allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PtrInfo {
    pub kind: MemKind,
    /// Device ordinal (-1 for host memory).
    pub device: i32,
    /// The driver's unique id of the allocation (0 for host memory).
    pub buffer_id: u64,
    /// The allocation's address range [start, start + len) (0, 0 when unknown).
    pub start: usize,
    pub len: usize,
}

impl PtrInfo {
    pub const HOST: PtrInfo = PtrInfo {
        kind: MemKind::Host,
        device: -1,
        buffer_id: 0,
        start: 0,
        len: 0,
    };
}

/// The source of truth the cache consults.
pub trait Classifier {
    /// Everything about the allocation holding `ptr` (expensive).
    fn classify(&self, ptr: usize) -> PtrInfo;
    /// Just its buffer id (cheap; 0 when not CUDA memory).
    fn buffer_id(&self, ptr: usize) -> u64;
    /// A device allocation seen for the first time (a cache miss that classified it as
    /// [`MemKind::Device`]; again after it was freed and reallocated, or evicted): make the
    /// program's synchronous copies into it complete before they return, so that gpumpi's own
    /// streams never read bytes still on their way (the driver's `SYNC_MEMOPS`).
    fn first_seen(&self, _ptr: usize, _info: &PtrInfo) {}
}

/// Allocations by start address, bounded to `cap` entries.
pub struct PtrCache {
    map: BTreeMap<usize, PtrInfo>,
    cap: usize,
    pub hits: u64,
    pub misses: u64,
}

impl PtrCache {
    pub fn new(cap: usize) -> Self {
        PtrCache {
            map: BTreeMap::new(),
            cap: cap.max(1),
            hits: 0,
            misses: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Classify `ptr`, from the cache when its entry is still the same allocation.
    pub fn lookup(&mut self, ptr: usize, c: &dyn Classifier) -> PtrInfo {
        if let Some((&start, info)) = self.map.range(..=ptr).next_back() {
            if ptr < start + info.len.max(1) {
                let info = *info;
                if c.buffer_id(ptr) == info.buffer_id {
                    self.hits += 1;
                    return info;
                }
                // Freed (and perhaps reallocated): forget it and ask again.
                self.map.remove(&start);
            }
        }
        self.misses += 1;
        let info = c.classify(ptr);
        if info.kind == MemKind::Device {
            c.first_seen(ptr, &info);
        }
        if info.kind != MemKind::Host && info.len > 0 && info.buffer_id != 0 {
            // Drop entries the new range overlaps (stale allocations at those addresses).
            let end = info.start + info.len;
            let stale: Vec<usize> = self
                .map
                .range(..end)
                .filter(|(s, i)| *s + i.len > info.start)
                .map(|(s, _)| *s)
                .collect();
            for s in stale {
                self.map.remove(&s);
            }
            if self.map.len() >= self.cap {
                // Evict the entry farthest below the new one (a cheap, deterministic choice).
                if let Some(&k) = self.map.keys().next() {
                    self.map.remove(&k);
                }
            }
            self.map.insert(info.start, info);
        }
        info
    }

    /// Forget everything (e.g. after the driver was reset).
    pub fn clear(&mut self) {
        self.map.clear();
    }
}

/// Entries of a [`CallMemo`].
const MEMO_ENTRIES: usize = 4;

/// The classifications one thread made during its current MPI call. While a call runs, every
/// application buffer it classifies belongs to an operation that is still pending (the call's
/// own, or one it progresses), and MPI forbids freeing such a buffer, so a second look at the
/// same allocation within the call needs no driver call. The library's own buffers (scratch,
/// staging) can be freed and the address reused within one call: each entry keeps the count of
/// memory the library gave back when it was classified (`sys::cuda::given_back`), and answers
/// only while that count has not moved. Where other threads may start operations during the call
/// (`MPI_THREAD_MULTIPLE`), an operation completed by this call could have its buffer freed and
/// the address reused by a new operation that this same call progresses: there the memo is never
/// entered. Outside a call it answers nothing.
pub struct CallMemo {
    active: bool,
    n: usize,
    /// (first address, one past the last, classification, count of memory given back before
    /// the classification): the allocation's range, or the one byte looked at for memory the
    /// driver does not know.
    e: [(usize, usize, PtrInfo, u64); MEMO_ENTRIES],
}

impl Default for CallMemo {
    fn default() -> Self {
        Self::new()
    }
}

impl CallMemo {
    pub const fn new() -> Self {
        CallMemo {
            active: false,
            n: 0,
            e: [(0, 0, PtrInfo::HOST, 0); MEMO_ENTRIES],
        }
    }

    /// A call starts: remember from now on (anything from an earlier call is forgotten).
    pub fn enter(&mut self) {
        self.active = true;
        self.n = 0;
    }

    /// The call ends: forget everything, answer nothing until the next [`CallMemo::enter`].
    pub fn leave(&mut self) {
        self.active = false;
        self.n = 0;
    }

    /// What this call already learned about `ptr`, while the count of memory given back is
    /// still `given_back`.
    pub fn get(&self, ptr: usize, given_back: u64) -> Option<PtrInfo> {
        if !self.active {
            return None;
        }
        self.e[..self.n.min(MEMO_ENTRIES)]
            .iter()
            .find(|(lo, hi, _, g)| (*lo..*hi).contains(&ptr) && *g == given_back)
            .map(|&(_, _, i, _)| i)
    }

    /// Remember `info`, the classification of `ptr` made after the count of memory given back
    /// was read as `given_back` (the oldest entry makes room).
    pub fn put(&mut self, ptr: usize, info: PtrInfo, given_back: u64) {
        if !self.active {
            return;
        }
        let range = if info.len > 0 {
            (info.start, info.start + info.len)
        } else {
            (ptr, ptr + 1)
        };
        self.e[self.n % MEMO_ENTRIES] = (range.0, range.1, info, given_back);
        self.n += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// A fake driver: a list of live allocations, with counters of the calls made.
    #[derive(Default)]
    struct Fake {
        allocs: RefCell<Vec<PtrInfo>>,
        next_id: RefCell<u64>,
        classify_calls: RefCell<usize>,
        /// Buffer ids passed to `first_seen`, in order.
        first_seen: RefCell<Vec<u64>>,
    }

    impl Fake {
        fn alloc(&self, start: usize, len: usize, kind: MemKind) {
            let mut id = self.next_id.borrow_mut();
            *id += 1;
            self.allocs.borrow_mut().push(PtrInfo {
                kind,
                device: 0,
                buffer_id: *id,
                start,
                len,
            });
        }
        fn free(&self, start: usize) {
            self.allocs.borrow_mut().retain(|a| a.start != start);
        }
        fn find(&self, ptr: usize) -> Option<PtrInfo> {
            self.allocs
                .borrow()
                .iter()
                .copied()
                .find(|a| ptr >= a.start && ptr < a.start + a.len)
        }
    }

    impl Classifier for Fake {
        fn classify(&self, ptr: usize) -> PtrInfo {
            *self.classify_calls.borrow_mut() += 1;
            self.find(ptr).unwrap_or(PtrInfo::HOST)
        }
        fn buffer_id(&self, ptr: usize) -> u64 {
            self.find(ptr).map_or(0, |a| a.buffer_id)
        }
        fn first_seen(&self, ptr: usize, info: &PtrInfo) {
            assert!(ptr >= info.start && ptr < info.start + info.len);
            self.first_seen.borrow_mut().push(info.buffer_id);
        }
    }

    /// Every device allocation is made synchronous (`first_seen`) when first classified, once
    /// while it stays cached, and again when the address holds a new allocation; host, pinned
    /// and managed memory never.
    #[test]
    fn device_allocations_first_seen_once() {
        let f = Fake::default();
        f.alloc(0x10000, 0x1000, MemKind::Device);
        f.alloc(0x20000, 0x1000, MemKind::PinnedHost);
        f.alloc(0x30000, 0x1000, MemKind::Managed);
        let mut c = PtrCache::new(8);
        for p in [0x10000, 0x10010, 0x20000, 0x30000, 0x5000, 0x10ff0] {
            c.lookup(p, &f);
        }
        assert_eq!(
            *f.first_seen.borrow(),
            vec![1],
            "the device allocation, once"
        );
        // Freed and reallocated at the same address: a new allocation, made synchronous too.
        f.free(0x10000);
        f.alloc(0x10000, 0x2000, MemKind::Device);
        c.lookup(0x10800, &f);
        c.lookup(0x11800, &f);
        assert_eq!(*f.first_seen.borrow(), vec![1, 4]);
    }

    #[test]
    fn device_pointer_cached_by_range() {
        let f = Fake::default();
        f.alloc(0x10000, 0x1000, MemKind::Device);
        let mut c = PtrCache::new(8);
        assert_eq!(c.lookup(0x10000, &f).kind, MemKind::Device);
        assert_eq!(c.lookup(0x10800, &f).kind, MemKind::Device);
        assert_eq!(c.lookup(0x10fff, &f).kind, MemKind::Device);
        assert_eq!(
            *f.classify_calls.borrow(),
            1,
            "interior pointers hit the cache"
        );
        assert_eq!(c.hits, 2);
        // Just past the end is not the allocation.
        assert_eq!(c.lookup(0x11000, &f).kind, MemKind::Host);
    }

    #[test]
    fn host_memory_is_not_cached() {
        let f = Fake::default();
        let mut c = PtrCache::new(8);
        assert_eq!(c.lookup(0x5000, &f), PtrInfo::HOST);
        assert_eq!(c.lookup(0x5000, &f), PtrInfo::HOST);
        assert!(c.is_empty());
        assert_eq!(*f.classify_calls.borrow(), 2);
    }

    #[test]
    fn free_then_reallocate_same_address_is_reclassified() {
        let f = Fake::default();
        f.alloc(0x20000, 0x1000, MemKind::Device);
        let mut c = PtrCache::new(8);
        let a = c.lookup(0x20010, &f);
        assert_eq!(a.kind, MemKind::Device);
        // Freed: the address is host memory now (say the range was reused by mmap).
        f.free(0x20000);
        assert_eq!(c.lookup(0x20010, &f).kind, MemKind::Host);
        assert!(c.is_empty(), "stale entry dropped");
        // Reallocated at the same address as managed memory, larger.
        f.alloc(0x20000, 0x4000, MemKind::Managed);
        let b = c.lookup(0x23000, &f);
        assert_eq!(b.kind, MemKind::Managed);
        assert_ne!(b.buffer_id, a.buffer_id);
        // Same start, reallocated as device memory again: new id, so reclassified.
        f.free(0x20000);
        f.alloc(0x20000, 0x4000, MemKind::Device);
        let calls = *f.classify_calls.borrow();
        assert_eq!(c.lookup(0x20000, &f).kind, MemKind::Device);
        assert_eq!(*f.classify_calls.borrow(), calls + 1);
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn overlapping_new_range_replaces_old_entries() {
        let f = Fake::default();
        f.alloc(0x1000, 0x100, MemKind::Device);
        f.alloc(0x1100, 0x100, MemKind::Device);
        let mut c = PtrCache::new(8);
        c.lookup(0x1000, &f);
        c.lookup(0x1100, &f);
        assert_eq!(c.len(), 2);
        f.free(0x1000);
        f.free(0x1100);
        f.alloc(0x1000, 0x200, MemKind::PinnedHost);
        // 0x1150 sits in the old second entry: its id no longer matches.
        assert_eq!(c.lookup(0x1150, &f).kind, MemKind::PinnedHost);
        assert_eq!(c.len(), 1, "the old first entry overlapped and was dropped");
        assert_eq!(c.lookup(0x1000, &f).kind, MemKind::PinnedHost);
    }

    #[test]
    fn bounded() {
        let f = Fake::default();
        let mut c = PtrCache::new(4);
        for i in 0..10 {
            f.alloc(0x100000 * (i + 1), 0x1000, MemKind::Device);
            c.lookup(0x100000 * (i + 1), &f);
            assert!(c.len() <= 4);
        }
        // The most recent one is still there.
        let calls = *f.classify_calls.borrow();
        c.lookup(0x100000 * 10, &f);
        assert_eq!(*f.classify_calls.borrow(), calls);
    }

    /// The memo answers only inside a call, for addresses inside what it was told (the
    /// allocation's range, or the one byte of unknown memory), forgets at both ends of a call,
    /// and keeps the newest entries when more allocations are seen than it holds.
    #[test]
    fn call_memo_answers_within_one_call_only() {
        let dev = |start, len, id| PtrInfo {
            kind: MemKind::Device,
            device: 1,
            buffer_id: id,
            start,
            len,
        };
        let mut m = CallMemo::new();
        m.put(0x1000, dev(0x1000, 0x100, 7), 0);
        assert_eq!(m.get(0x1000, 0), None, "outside a call nothing is kept");
        m.enter();
        assert_eq!(m.get(0x1000, 0), None);
        m.put(0x1010, dev(0x1000, 0x100, 7), 0);
        m.put(0x9000, PtrInfo::HOST, 0);
        assert_eq!(m.get(0x1000, 0).map(|i| i.buffer_id), Some(7));
        assert_eq!(m.get(0x10ff, 0).map(|i| i.buffer_id), Some(7));
        assert_eq!(m.get(0x1100, 0), None, "one past the allocation");
        assert_eq!(m.get(0x9000, 0), Some(PtrInfo::HOST));
        assert_eq!(
            m.get(0x9001, 0),
            None,
            "host memory: only the byte looked at"
        );
        m.leave();
        assert_eq!(m.get(0x1000, 0), None, "forgotten when the call ends");
        m.enter();
        assert_eq!(m.get(0x1000, 0), None, "and not back in the next call");
        for k in 0..6usize {
            m.put(
                0x10_0000 * (k + 1),
                dev(0x10_0000 * (k + 1), 64, k as u64 + 1),
                0,
            );
        }
        let kept: Vec<u64> = (0..6usize)
            .filter_map(|k| m.get(0x10_0000 * (k + 1), 0).map(|i| i.buffer_id))
            .collect();
        assert_eq!(kept, [3, 4, 5, 6], "the newest {MEMO_ENTRIES}");
        // Memory given back after an entry was made: the entry no longer answers.
        assert_eq!(
            m.get(0x60_0000, 1),
            None,
            "the library gave memory back since"
        );
        m.put(0x60_0000, dev(0x60_0000, 64, 9), 1);
        assert_eq!(m.get(0x60_0000, 1).map(|i| i.buffer_id), Some(9));
    }
}
