//! Handle tables: user-created MPI objects live in generation-checked slots,
//! so a freed or forged handle is detected instead of being dereferenced.
//!
//! Encoding of a user handle (a pointer-sized integer, never below 2^48, so it
//! never collides with the standard ABI's predefined values, which are < 0x1000):
//! `kind << 48 | generation << 32 | index`.

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
}

/// Generations cycle through 1..=255 so that a handle also fits a Fortran integer (see [`to_int`]).
fn next_gen(g: u16) -> u16 {
    if g >= 255 {
        1
    } else {
        g + 1
    }
}

/// A handle as a C int (MPI_*_c2f / MPI_*_toint): predefined values are kept, user handles
/// become `0x1000 + (index << 8 | generation)`.
pub fn to_int(h: usize) -> i32 {
    if h < 0x1000 {
        return h as i32;
    }
    let idx = h & 0xffff_ffff;
    let gen = (h >> 32) & 0xff;
    (0x1000 + ((idx << 8) | gen)) as i32
}

/// The inverse of [`to_int`] for handles of `kind`.
pub fn from_int(kind: Kind, i: i32) -> usize {
    if i < 0x1000 {
        return i.max(0) as usize;
    }
    let v = (i - 0x1000) as usize;
    ((kind as usize) << 48) | ((v & 0xff) << 32) | (v >> 8)
}

struct Slot<T> {
    gen: u16,
    val: Option<Arc<T>>,
}

/// A table of objects of one kind.
pub struct Table<T> {
    kind: Kind,
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
    live: usize,
}

impl<T> Table<T> {
    pub const fn new(kind: Kind) -> Self {
        Table {
            kind,
            slots: Vec::new(),
            free: Vec::new(),
            live: 0,
        }
    }

    fn encode(&self, idx: u32, gen: u16) -> usize {
        ((self.kind as usize) << 48) | ((gen as usize) << 32) | idx as usize
    }

    /// Store an object, returning its new handle value.
    pub fn insert(&mut self, val: Arc<T>) -> usize {
        self.live += 1;
        if let Some(idx) = self.free.pop() {
            let s = &mut self.slots[idx as usize];
            s.val = Some(val);
            let gen = s.gen;
            return self.encode(idx, gen);
        }
        let idx = self.slots.len() as u32;
        self.slots.push(Slot {
            gen: 1,
            val: Some(val),
        });
        self.encode(idx, 1)
    }

    fn decode(&self, h: usize) -> Option<(usize, u16)> {
        if h >> 48 != self.kind as usize {
            return None;
        }
        let idx = h & 0xffff_ffff;
        let gen = ((h >> 32) & 0xffff) as u16;
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
        self.free.push(idx as u32);
        self.live -= 1;
        s.val.take()
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
        h >> 48 == self.kind as usize
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
        assert!(a >= 1 << 48 && b != a);
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
        assert_eq!(from_int(Kind::Comm, to_int(c)), c);
        assert_eq!(to_int(0x101), 0x101);
    }
}

/// A table whose objects are owned and mutated in place (requests): the same
/// generation-checked encoding as [`Table`], without shared ownership.
pub struct Slab<T> {
    kind: Kind,
    slots: Vec<(u16, Option<T>)>,
    free: Vec<u32>,
}

impl<T> Slab<T> {
    pub const fn new(kind: Kind) -> Self {
        Slab {
            kind,
            slots: Vec::new(),
            free: Vec::new(),
        }
    }
    pub fn insert(&mut self, val: T) -> usize {
        let idx = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize].1 = Some(val);
                i
            }
            None => {
                self.slots.push((1, Some(val)));
                (self.slots.len() - 1) as u32
            }
        };
        let gen = self.slots[idx as usize].0;
        ((self.kind as usize) << 48) | ((gen as usize) << 32) | idx as usize
    }
    fn index(&self, h: usize) -> Option<usize> {
        if h >> 48 != self.kind as usize {
            return None;
        }
        let idx = h & 0xffff_ffff;
        let s = self.slots.get(idx)?;
        (s.0 == ((h >> 32) & 0xffff) as u16 && s.1.is_some()).then_some(idx)
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
        self.free.push(i as u32);
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
}
