//! A generational slab: O(1) insert/lookup/remove with ids that detect reuse.

pub(crate) struct Slab<T> {
    items: Vec<(u32, Option<T>)>,
    free: Vec<u32>,
}

impl<T> Slab<T> {
    pub fn new() -> Self {
        Slab {
            items: Vec::new(),
            free: Vec::new(),
        }
    }

    /// Ids are never 0: generations start at 1.
    pub fn insert(&mut self, v: T) -> u64 {
        let idx = match self.free.pop() {
            Some(i) => i,
            None => {
                self.items.push((0, None));
                (self.items.len() - 1) as u32
            }
        };
        let e = &mut self.items[idx as usize];
        e.0 = e.0.wrapping_add(1).max(1);
        e.1 = Some(v);
        ((e.0 as u64) << 32) | idx as u64
    }

    fn slot(&self, id: u64) -> Option<usize> {
        let idx = (id & 0xffff_ffff) as usize;
        match self.items.get(idx) {
            Some((g, Some(_))) if *g as u64 == id >> 32 => Some(idx),
            _ => None,
        }
    }

    pub fn get(&self, id: u64) -> Option<&T> {
        self.slot(id).and_then(|i| self.items[i].1.as_ref())
    }

    pub fn get_mut(&mut self, id: u64) -> Option<&mut T> {
        self.slot(id).and_then(move |i| self.items[i].1.as_mut())
    }

    pub fn remove(&mut self, id: u64) -> Option<T> {
        let i = self.slot(id)?;
        self.free.push(i as u32);
        self.items[i].1.take()
    }

    pub fn len(&self) -> usize {
        self.items.len() - self.free.len()
    }

    /// The ids of the live entries.
    #[cfg(test)]
    pub fn ids(&self) -> Vec<u64> {
        self.items
            .iter()
            .enumerate()
            .filter(|(_, (_, v))| v.is_some())
            .map(|(i, (g, _))| ((*g as u64) << 32) | i as u64)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_ids_are_rejected() {
        let mut s = Slab::new();
        let a = s.insert(1);
        assert_ne!(a, 0);
        assert_eq!(s.remove(a), Some(1));
        let b = s.insert(2);
        assert_ne!(a, b);
        assert!(s.get(a).is_none());
        assert_eq!(s.get(b), Some(&2));
        assert_eq!(s.len(), 1);
    }
}
