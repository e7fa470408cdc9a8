//! Handle tables: user-created MPI objects live in generation-checked slots,
//! so a freed or forged handle is detected instead of being dereferenced.
//!
//! Encoding of a user handle (a pointer-sized integer, never below 2^60, so it
//! never collides with the standard ABI's predefined values, which are < 0x1000):
//! `kind << 60 | generation << 28 | index`. A slot's generation (32 bits, never 0) advances
//! each time its object is freed, and freed slots are reused oldest first, so a stale handle
//! resolves again only after its own slot has been freed 2^32 - 1 more times.
//!
//! As a C int (`MPI_*_c2f`, `MPI_*_toint`) a user handle is `0x1000 + (index << 12 | low 12
//! bits of the generation)`; converting back ([`Table::from_int`], [`Slab::from_int`]) restores
//! the full handle from the slot when those bits match its current generation, else gives a
//! handle that resolves to nothing. Integer handles therefore exist for indices below 2^19.

use std::collections::VecDeque;
use std::sync::Arc;

/// Kinds of handle, encoded in the top bits of user handles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    Comm = 1,
    Datatype = 2,
    Errhandler = 3,
    Group = 4,
    Info = 5,
    Message = 6,
    Op = 7,
    Request = 8,
    Session = 9,
    Win = 10,
    File = 11,
    /// MPIX_Stream (an extension handle: no integer form).
    Stream = 12,
    /// The MPI_Request of an `MPIX_Isend_enqueue` / `MPIX_Irecv_enqueue` (only the enqueued
    /// waits accept it).
    EnqueueRequest = 13,
}

const KIND_SHIFT: u32 = 60;
const GEN_SHIFT: u32 = 28;
const IDX_MASK: usize = (1 << GEN_SHIFT) - 1;
/// Generation bits carried by the C int form of a handle.
const INT_GEN_BITS: u32 = 12;
const INT_GEN_MASK: u32 = (1 << INT_GEN_BITS) - 1;

fn encode(kind: Kind, idx: u32, gen: u32) -> usize {
    ((kind as usize) << KIND_SHIFT) | ((gen as usize) << GEN_SHIFT) | idx as usize
}

/// (index, generation) of a handle of `kind`.
fn decode(kind: Kind, h: usize) -> Option<(usize, u32)> {
    if h >> KIND_SHIFT != kind as usize {
        return None;
    }
    Some((h & IDX_MASK, ((h >> GEN_SHIFT) & 0xffff_ffff) as u32))
}

/// The next generation of a slot: 1..=u32::MAX, never 0.
fn next_gen(g: u32) -> u32 {
    g.checked_add(1).unwrap_or(1)
}

/// A handle as a C int (MPI_*_c2f / MPI_*_toint): predefined values are kept, user handles
/// become `0x1000 + (index << 12 | generation & 0xfff)`.
pub fn to_int(h: usize) -> i32 {
    if h < 0x1000 {
        return h as i32;
    }
    let idx = h & IDX_MASK;
    let gen = (h >> GEN_SHIFT) & INT_GEN_MASK as usize;
    (0x1000 + ((idx << INT_GEN_BITS) | gen)) as i32
}

/// A C int handle as (index, low generation bits); None for predefined values.
fn int_parts(i: i32) -> Option<(usize, u32)> {
    if i < 0x1000 {
        return None;
    }
    let v = (i - 0x1000) as usize;
    Some((v >> INT_GEN_BITS, v as u32 & INT_GEN_MASK))
}

/// The inverse of [`to_int`] for a kind without a table: predefined values only (a user
/// handle comes back as one that resolves to nothing).
pub fn from_int(kind: Kind, i: i32) -> usize {
    match int_parts(i) {
        None => i.max(0) as usize,
        Some((idx, _)) => encode(kind, idx as u32, 0),
    }
}

/// [`from_int`] given the slot's current generation (None: no live object there).
fn from_int_with(kind: Kind, i: i32, current: impl Fn(usize) -> Option<u32>) -> usize {
    match int_parts(i) {
        None => i.max(0) as usize,
        Some((idx, low)) => match current(idx) {
            Some(g) if g & INT_GEN_MASK == low => encode(kind, idx as u32, g),
            _ => encode(kind, idx as u32, 0),
        },
    }
}

struct Slot<T> {
    gen: u32,
    val: Option<Arc<T>>,
}

/// A table of objects of one kind.
pub struct Table<T> {
    kind: Kind,
    slots: Vec<Slot<T>>,
    /// Freed slots, oldest first (reused in that order).
    free: VecDeque<u32>,
    live: usize,
}

impl<T> Table<T> {
    pub const fn new(kind: Kind) -> Self {
        Table {
            kind,
            slots: Vec::new(),
            free: VecDeque::new(),
            live: 0,
        }
    }

    fn encode(&self, idx: u32, gen: u32) -> usize {
        encode(self.kind, idx, gen)
    }

    /// Store an object, returning its new handle value.
    pub fn insert(&mut self, val: Arc<T>) -> usize {
        self.live += 1;
        if let Some(idx) = self.free.pop_front() {
            let s = &mut self.slots[idx as usize];
            s.val = Some(val);
            let gen = s.gen;
            return self.encode(idx, gen);
        }
        let idx = self.slots.len() as u32;
        assert!(
            (idx as usize) < IDX_MASK,
            "more than 2^28 live {:?} handles",
            self.kind
        );
        self.slots.push(Slot {
            gen: 1,
            val: Some(val),
        });
        self.encode(idx, 1)
    }

    fn decode(&self, h: usize) -> Option<(usize, u32)> {
        let (idx, gen) = decode(self.kind, h)?;
        let s = self.slots.get(idx)?;
        (s.gen == gen && s.val.is_some()).then_some((idx, gen))
    }

    /// The object behind a handle, or None for a freed, foreign or garbage handle.
    pub fn get(&self, h: usize) -> Option<Arc<T>> {
        let (idx, _) = self.decode(h)?;
        self.slots[idx].val.clone()
    }

    /// Remove the object; later lookups of the same handle fail.
    pub fn remove(&mut self, h: usize) -> Option<Arc<T>> {
        let (idx, _) = self.decode(h)?;
        let s = &mut self.slots[idx];
        s.gen = next_gen(s.gen);
        self.free.push_back(idx as u32);
        self.live -= 1;
        s.val.take()
    }

    /// Remove every object (their handles become invalid), returning them.
    pub fn take_all(&mut self) -> Vec<Arc<T>> {
        let mut out = Vec::with_capacity(self.live);
        for (idx, s) in self.slots.iter_mut().enumerate() {
            if let Some(v) = s.val.take() {
                s.gen = next_gen(s.gen);
                self.free.push_back(idx as u32);
                out.push(v);
            }
        }
        self.live = 0;
        out
    }

    /// Replace the object behind a live handle.
    pub fn replace(&mut self, h: usize, val: Arc<T>) -> bool {
        match self.decode(h) {
            Some((idx, _)) => {
                self.slots[idx].val = Some(val);
                true
            }
            None => false,
        }
    }

    pub fn live(&self) -> usize {
        self.live
    }

    /// Whether `h` is encoded as a handle of this table's kind (live or not).
    pub fn is_kind(&self, h: usize) -> bool {
        decode(self.kind, h).is_some()
    }

    /// The handle whose C int form ([`to_int`]) is `i`.
    pub fn from_int(&self, i: i32) -> usize {
        from_int_with(self.kind, i, |idx| {
            let s = self.slots.get(idx)?;
            s.val.as_ref().map(|_| s.gen)
        })
    }

    /// The handle of the first live object `f` accepts (a scan: for error paths).
    pub fn find(&self, f: impl Fn(&Arc<T>) -> bool) -> Option<usize> {
        self.slots.iter().enumerate().find_map(|(i, s)| {
            s.val
                .as_ref()
                .filter(|v| f(v))
                .map(|_| self.encode(i as u32, s.gen))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freed_handles_are_detected() {
        let mut t = Table::new(Kind::Comm);
        let a = t.insert(Arc::new(1));
        let b = t.insert(Arc::new(2));
        assert!(a >= 1 << 60 && b != a);
        assert_eq!(*t.get(a).unwrap(), 1);
        assert_eq!(*t.remove(a).unwrap(), 1);
        assert!(t.get(a).is_none(), "stale handle must not resolve");
        let c = t.insert(Arc::new(3));
        assert_ne!(c, a, "reused slot gets a new generation");
        assert!(t.get(a).is_none());
        assert_eq!(*t.get(c).unwrap(), 3);
        assert_eq!(t.live(), 2);
        assert!(
            t.get(0x101).is_none(),
            "predefined values are not table handles"
        );
        let other: Table<i32> = Table::new(Kind::Group);
        assert!(
            other.get(b).is_none(),
            "a handle of another kind is refused"
        );
        assert_eq!(t.from_int(to_int(c)), c);
        assert!(
            t.get(t.from_int(to_int(a))).is_none(),
            "a stale int handle stays stale"
        );
        assert_eq!(to_int(0x101), 0x101);
        assert_eq!(from_int(Kind::Comm, 0x101), 0x101);
    }

    #[test]
    fn take_all_empties_the_table_and_invalidates_handles() {
        let mut t = Table::new(Kind::Errhandler);
        let a = t.insert(Arc::new(1));
        let b = t.insert(Arc::new(2));
        t.remove(a);
        let c = t.insert(Arc::new(3));
        let mut got: Vec<i32> = t.take_all().iter().map(|v| **v).collect();
        got.sort();
        assert_eq!(got, [2, 3]);
        assert_eq!(t.live(), 0);
        assert!(t.get(b).is_none() && t.get(c).is_none());
        let d = t.insert(Arc::new(4));
        assert!(d != b && d != c, "a reused slot gets a new generation");
        assert_eq!(*t.get(d).unwrap(), 4);
        assert_eq!(t.live(), 1);
    }
}

/// A table whose objects are owned and mutated in place (requests): the same
/// generation-checked encoding as [`Table`], without shared ownership.
pub struct Slab<T> {
    kind: Kind,
    slots: Vec<(u32, Option<T>)>,
    /// Freed slots, oldest first.
    free: VecDeque<u32>,
}

impl<T> Slab<T> {
    pub const fn new(kind: Kind) -> Self {
        Slab {
            kind,
            slots: Vec::new(),
            free: VecDeque::new(),
        }
    }
    pub fn insert(&mut self, val: T) -> usize {
        let idx = match self.free.pop_front() {
            Some(i) => {
                self.slots[i as usize].1 = Some(val);
                i
            }
            None => {
                assert!(
                    self.slots.len() < IDX_MASK,
                    "more than 2^28 live {:?} handles",
                    self.kind
                );
                self.slots.push((1, Some(val)));
                (self.slots.len() - 1) as u32
            }
        };
        encode(self.kind, idx, self.slots[idx as usize].0)
    }
    fn index(&self, h: usize) -> Option<usize> {
        let (idx, gen) = decode(self.kind, h)?;
        let s = self.slots.get(idx)?;
        (s.0 == gen && s.1.is_some()).then_some(idx)
    }
    /// The handle whose C int form ([`to_int`]) is `i`.
    pub fn from_int(&self, i: i32) -> usize {
        from_int_with(self.kind, i, |idx| {
            let s = self.slots.get(idx)?;
            s.1.as_ref().map(|_| s.0)
        })
    }
    pub fn get_mut(&mut self, h: usize) -> Option<&mut T> {
        let i = self.index(h)?;
        self.slots[i].1.as_mut()
    }
    pub fn get(&self, h: usize) -> Option<&T> {
        let i = self.index(h)?;
        self.slots[i].1.as_ref()
    }
    pub fn remove(&mut self, h: usize) -> Option<T> {
        let i = self.index(h)?;
        let s = &mut self.slots[i];
        s.0 = next_gen(s.0);
        self.free.push_back(i as u32);
        s.1.take()
    }
    pub fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod slab_tests {
    use super::*;

    #[test]
    fn slab_generations() {
        let mut s = Slab::new(Kind::Request);
        let a = s.insert(10);
        *s.get_mut(a).unwrap() += 1;
        assert_eq!(s.remove(a), Some(11));
        assert!(s.get(a).is_none());
        let b = s.insert(5);
        assert_ne!(a, b);
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn stale_handles_stay_stale_over_many_cycles() {
        // One slot freed and reused 100000 times: no handle from an earlier cycle resolves.
        let mut t = Table::new(Kind::Datatype);
        let first = t.insert(Arc::new(0));
        let mut old = vec![first];
        let mut h = first;
        for i in 1..100_000 {
            t.remove(h);
            h = t.insert(Arc::new(i));
            if i % 997 == 0 || i < 300 {
                old.push(h);
            }
        }
        assert_eq!(*t.get(h).unwrap(), 99_999);
        for &o in &old {
            assert!(o == h || t.get(o).is_none(), "stale handle {o:#x} resolved");
        }
        // Freed slots are reused oldest first.
        let mut t = Table::new(Kind::Comm);
        let a = t.insert(Arc::new(1));
        let b = t.insert(Arc::new(2));
        t.remove(a);
        t.remove(b);
        let c = t.insert(Arc::new(3));
        assert_eq!(c & IDX_MASK, a & IDX_MASK);
        let d = t.insert(Arc::new(4));
        assert_eq!(d & IDX_MASK, b & IDX_MASK);
        // The int form round-trips for live handles and detects the freed one.
        let mut s = Slab::new(Kind::Request);
        let x = s.insert(7);
        assert_eq!(s.from_int(to_int(x)), x);
        s.remove(x);
        let y = s.insert(8);
        assert!(s.get(s.from_int(to_int(x))).is_none());
        assert_eq!(s.from_int(to_int(y)), y);
        assert_eq!(next_gen(u32::MAX), 1);
    }
}
