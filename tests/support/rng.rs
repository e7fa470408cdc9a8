//! A tiny deterministic PRNG for randomized tests (fuzzing, random interleavings), with no
//! extra dependency. The library's unit tests use it as `crate::test_rng`; std only.
#![allow(dead_code)]

/// Xorshift64: the same sequence for the same nonzero seed on every run.
pub struct XorShift(pub u64);

impl XorShift {
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}
