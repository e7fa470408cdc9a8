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
        Table { kind, slots: Vec::new(), free: Vec::new(), live: 0 }
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
        self.slots.push(Slot { gen: 1, val: Some(val) });
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
        s.gen = s.gen.wrapping_add(1).max(1);
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
        assert!(t.get(0x101).is_none(), "predefined values are not table handles");
        let other: Table<i32> = Table::new(Kind::Group);
        assert!(other.get(b).is_none(), "a handle of another kind is refused");
    }
}
