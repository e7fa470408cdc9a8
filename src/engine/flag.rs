//! Flag-based collectives over per-rank shared-memory slots: the small-message path of the
//! blocking barrier, bcast, reduce and allreduce on MPI_COMM_WORLD (`dispatch/flag.rs` decides
//! when it applies).
//!
//! Point-to-point messages pay for matching, request slots and ring frames; a small collective
//! among the ranks of one node needs none of that. Every rank owns two slots that every other
//! rank can read (page 0 of its shared-memory segment, `transport/shm.rs`):
//! `[seq: u64 | len: u64 | data: up to SLOT_MAX bytes]`, so a contribution of up to 48
//! bytes travels in the cache line of its flag. `len` is the byte length the rank published:
//! a rank that reads a longer contribution than its own call describes (a count mismatch,
//! erroneous in MPI) reads what fits and reports `MPI_ERR_TRUNCATE` after finishing the call,
//! so no peer waits for it.
//!
//! # Protocol
//! Calls are numbered k = 1, 2, ... on every rank (collectives on a communicator are called in
//! the same order everywhere). Call k uses slot `k % 2` of every rank. At rank `me`:
//! 1. Wait until every peer has published k-1 (its slot `(k-1) % 2` holds seq >= k-1): a rank
//!    publishes k-1 only after finishing call k-2, the last call that read slot `k % 2`.
//! 2. Write my contribution (if the operation has one) into my slot `k % 2`, then store seq = k
//!    with Release.
//! 3. Wait (Acquire) for the slots the operation reads and read them: allreduce and barrier read
//!    every rank's, reduce every rank's at the root, bcast the root's at the others.
//!
//! A peer cannot overwrite a slot being read: to write slot `k % 2` again (call k+2) it must
//! first see this rank publish k+1, which happens after this rank's reads of call k.
//! A blocking barrier, bcast, reduce or allreduce on MPI_COMM_WORLD that another path serves
//! still takes its number k and publishes it with the length [`PASS`] ([`Slots::pass`], steps 1
//! and 2 only), so the numbering stays the same on every rank even when ranks of a mismatched
//! call (erroneous) choose different paths; a flag call that meets `PASS` in a slot it reads
//! fails instead of reading it.
//! Reductions compute `c_0 op (c_1 op (... op c_{n-1}))` on every rank, so every rank gets the
//! same bits in rank order. Waiting goes through the caller's `idle` (progress the engine, back
//! off), so other traffic moves and oversubscribed ranks yield.

use crate::mpi::error::MpiResult;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes from one slot to the next (64-byte aligned).
pub const SLOT_STRIDE: usize = 1536;
/// Offset of the data in a slot (16-byte aligned; seq is at 0).
const DATA: usize = 16;
/// Largest payload of a slot.
pub const SLOT_MAX: usize = 1024;
/// Bytes of one rank's slot area (two slots).
pub const AREA: usize = 2 * SLOT_STRIDE;
// The shared-memory transport reserves this much of each rank's segment for the slots.
const _: () = assert!(AREA <= crate::transport::shm::COLL_SLOTS_BYTES);
/// Flag checks between two calls of `idle` while waiting.
const CHECKS: usize = 16;

/// The published length of a rank that runs this call on another path: it takes the call's
/// number (so every rank's numbering stays the same) but contributes nothing. Blocking
/// barrier, bcast, reduce and allreduce on MPI_COMM_WORLD that do not go through the slots
/// publish it ([`Slots::pass`]); only mismatched calls (erroneous) meet it in a flag call.
const PASS: usize = usize::MAX;
/// Wait until `ready()`: check it `checks` times (spinning), then call `idle` (progress, back
/// off), and again. Shared by the flag slots and the scratch areas (`engine/scratch.rs`).
pub(crate) fn wait_for(
    checks: usize,
    idle: &mut dyn FnMut() -> MpiResult<()>,
    ready: impl Fn() -> bool,
) -> MpiResult<()> {
    loop {
        for _ in 0..checks {
            if ready() {
                return Ok(());
            }
            std::hint::spin_loop();
        }
        idle()?;
    }
}

/// A reduction callback: `inout = input op inout`.
pub type ReduceRef<'a> = &'a dyn Fn(&[u8], &mut [u8]) -> MpiResult<()>;

/// One flag collective with its buffers (byte lengths; reductions on whole elements).
pub enum FlagOp<'a> {
    Barrier,
    /// `buf` holds the data at the root and receives it elsewhere.
    Bcast {
        root: usize,
        buf: *mut u8,
        len: usize,
    },
    /// `input`: this rank's contribution; `output`: the result (read only at the root).
    Reduce {
        root: usize,
        input: *const u8,
        output: *mut u8,
        len: usize,
        reduce: ReduceRef<'a>,
    },
    /// `input` may equal `output` (in place).
    Allreduce {
        input: *const u8,
        output: *mut u8,
        len: usize,
        reduce: ReduceRef<'a>,
    },
}

/// The slot areas of all ranks of a job (world rank order), as seen by rank `me`.
#[derive(Clone, Copy)]
pub struct Slots {
    bases: &'static [usize],
    me: usize,
    max: usize,
    oversubscribed: bool,
}

impl Slots {
    /// # Safety
    /// Every `bases[r]` must be the start of rank r's slot area ([`AREA`] bytes, 64-byte
    /// aligned, zero-filled before any rank used it, readable and writable by this process) for as
    /// long as this value and its copies are used; `max <= SLOT_MAX`.
    pub unsafe fn new(bases: &'static [usize], me: usize, max: usize) -> Self {
        assert!(me < bases.len() && max <= SLOT_MAX);
        Slots {
            bases,
            me,
            max,
            oversubscribed: false,
        }
    }

    /// Mark the ranks as sharing cores: waits check once, then go to `idle` (which should
    /// yield), instead of spinning on the flags.
    pub fn oversubscribed(self, yes: bool) -> Self {
        Slots {
            oversubscribed: yes,
            ..self
        }
    }

    pub fn is_oversubscribed(&self) -> bool {
        self.oversubscribed
    }

    /// Largest payload this job sends through the slots.
    pub fn max(&self) -> usize {
        self.max
    }

    pub fn size(&self) -> usize {
        self.bases.len()
    }

    /// This rank (world rank order).
    pub fn rank(&self) -> usize {
        self.me
    }

    fn seq(&self, r: usize, k: u64) -> &AtomicU64 {
        // SAFETY: new's contract: the slot area is live, aligned, and seq is its first word.
        unsafe { &*((self.bases[r] + (k as usize & 1) * SLOT_STRIDE) as *const AtomicU64) }
    }

    /// The published length of rank r's contribution to call k (read after its seq).
    fn len_of(&self, r: usize, k: u64) -> usize {
        // SAFETY: new's contract: the word after seq is in the slot area, 8-byte aligned.
        let p = (self.bases[r] + (k as usize & 1) * SLOT_STRIDE + 8) as *const AtomicU64;
        unsafe { &*p }.load(Ordering::Relaxed) as usize
    }

    fn set_len(&self, k: u64, len: usize) {
        // SAFETY: as for len_of, in our own slot (step 1 made it ours).
        let p = (self.bases[self.me] + (k as usize & 1) * SLOT_STRIDE + 8) as *const AtomicU64;
        unsafe { &*p }.store(len as u64, Ordering::Relaxed);
    }

    fn data(&self, r: usize, k: u64) -> *mut u8 {
        (self.bases[r] + (k as usize & 1) * SLOT_STRIDE + DATA) as *mut u8
    }

    fn published(&self, r: usize, k: u64) -> bool {
        self.seq(r, k).load(Ordering::Acquire) >= k
    }

    fn wait(
        &self,
        idle: &mut dyn FnMut() -> MpiResult<()>,
        ready: impl Fn(&Self) -> bool,
    ) -> MpiResult<()> {
        let checks = if self.oversubscribed { 1 } else { CHECKS };
        wait_for(checks, idle, || ready(self))
    }

    fn all_published(&self, k: u64) -> bool {
        (0..self.bases.len()).all(|r| r == self.me || self.published(r, k))
    }

    /// Take call number `k` without taking part (this rank runs the call on another path):
    /// steps 1 and 2 with the length [`PASS`].
    pub fn pass(&self, k: u64, idle: &mut dyn FnMut() -> MpiResult<()>) -> MpiResult<()> {
        self.wait(idle, |s| s.all_published(k - 1))?;
        self.set_len(k, PASS);
        self.seq(self.me, k).store(k, Ordering::Release);
        Ok(())
    }

    /// Run call number `k` (1, 2, ...: one more than the previous call's, on every rank).
    ///
    /// # Safety
    /// The buffers of `op` are valid for `len` bytes (output writable, not aliasing a slot);
    /// `len <= self.max()`; every rank runs the same sequence of operations with the same lengths
    /// and roots.
    pub unsafe fn run(
        &self,
        k: u64,
        op: &FlagOp,
        idle: &mut dyn FnMut() -> MpiResult<()>,
    ) -> MpiResult<()> {
        let me = self.me;
        // 1. Everyone is done with call k-2, the previous user of slot k % 2.
        self.wait(idle, |s| s.all_published(k - 1))?;
        // 2. Publish.
        let (src, len) = match *op {
            FlagOp::Barrier => (std::ptr::null(), 0),
            FlagOp::Bcast { root, buf, len } if root == me => (buf as *const u8, len),
            FlagOp::Bcast { .. } => (std::ptr::null(), 0),
            FlagOp::Reduce { input, len, .. } | FlagOp::Allreduce { input, len, .. } => {
                (input, len)
            }
        };
        if len > 0 {
            // SAFETY: the caller's buffer holds len <= SLOT_MAX bytes; the slot is ours (step 1).
            std::ptr::copy_nonoverlapping(src, self.data(me, k), len);
        }
        self.set_len(k, len);
        self.seq(me, k).store(k, Ordering::Release);
        // 3. Read.
        match *op {
            FlagOp::Barrier => self.wait(idle, |s| s.all_published(k)),
            FlagOp::Bcast { root, buf, len } => {
                if root != me {
                    self.wait(idle, |s| s.published(root, k))?;
                    let sent = self.len_of(root, k);
                    if sent == PASS {
                        crate::mpi_bail!(
                            MPI_ERR_OTHER,
                            "the root (rank {root}) ran this call on another path"
                        );
                    }
                    let sent = sent.min(SLOT_MAX);
                    // SAFETY: root's slot holds `sent` bytes of call k (published, Acquire
                    // above); buf takes len bytes.
                    std::ptr::copy_nonoverlapping(self.data(root, k), buf, sent.min(len));
                    if sent > len {
                        crate::mpi_bail!(
                            MPI_ERR_TRUNCATE,
                            "the root broadcast {sent} bytes, this rank's buffer holds {len}"
                        );
                    }
                }
                Ok(())
            }
            FlagOp::Reduce {
                root,
                output,
                len,
                reduce,
                ..
            } => {
                if root == me {
                    self.combine(k, output, len, reduce, idle)?;
                }
                Ok(())
            }
            FlagOp::Allreduce {
                output,
                len,
                reduce,
                ..
            } => self.combine(k, output, len, reduce, idle),
        }
    }

    /// `output = c_0 op (c_1 op (... op c_{n-1}))` over the slots of call k.
    unsafe fn combine(
        &self,
        k: u64,
        output: *mut u8,
        len: usize,
        reduce: ReduceRef,
        idle: &mut dyn FnMut() -> MpiResult<()>,
    ) -> MpiResult<()> {
        let n = self.bases.len();
        self.wait(idle, |s| s.all_published(k))?;
        if let Some(r) = (0..n).find(|&r| self.len_of(r, k) == PASS) {
            crate::mpi_bail!(MPI_ERR_OTHER, "rank {r} ran this call on another path");
        }
        if let Some(r) = (0..n).find(|&r| self.len_of(r, k) != len) {
            crate::mpi_bail!(
                MPI_ERR_TRUNCATE,
                "rank {r} contributed {} bytes to the reduction, this rank {len}",
                self.len_of(r, k)
            );
        }
        if len == 0 {
            return Ok(());
        }
        // SAFETY: every slot holds len published bytes of call k; output is the caller's
        // writable buffer of len bytes, distinct from every slot.
        std::ptr::copy_nonoverlapping(self.data(n - 1, k), output, len);
        let out = std::slice::from_raw_parts_mut(output, len);
        for r in (0..n - 1).rev() {
            reduce(std::slice::from_raw_parts(self.data(r, k), len), out)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Slot areas in one heap block, one thread per rank: every operation, many calls in a mixed
    /// sequence (so slots are reused while slower ranks may still be one call behind).
    fn run_ranks(n: usize, calls: u64) {
        let area: &'static mut [u64] = Box::leak(vec![0u64; n * AREA / 8 + 8].into_boxed_slice());
        let start = (area.as_mut_ptr() as usize + 63) & !63;
        let bases: &'static [usize] = Box::leak(
            (0..n)
                .map(|r| start + r * AREA)
                .collect::<Vec<_>>()
                .into_boxed_slice(),
        );
        let sum = |i: &[u8], o: &mut [u8]| {
            for (a, b) in i.chunks(8).zip(o.chunks_mut(8)) {
                let x = u64::from_ne_bytes(a.try_into().unwrap());
                let y = u64::from_ne_bytes((&*b).try_into().unwrap());
                // Not commutative in bits: checks the documented order c_0 op (c_1 op ...).
                b.copy_from_slice(&(x.wrapping_mul(3).wrapping_add(y)).to_ne_bytes());
            }
            Ok(())
        };
        let expect = |vals: Vals| {
            let mut acc = vals(n - 1);
            for r in (0..n - 1).rev() {
                acc = vals(r).wrapping_mul(3).wrapping_add(acc);
            }
            acc
        };
        let expect = Arc::new(expect_table(calls, &expect));
        // Barrier check: every rank has arrived at call k when any rank leaves it.
        let arrived: Arc<Vec<std::sync::atomic::AtomicUsize>> =
            Arc::new((0..=calls).map(|_| Default::default()).collect());
        let threads: Vec<_> = (0..n)
            .map(|me| {
                let expect = expect.clone();
                let arrived = arrived.clone();
                std::thread::spawn(move || {
                    // SAFETY: the areas are leaked, aligned, zeroed and shared by the threads.
                    let s = unsafe { Slots::new(bases, me, SLOT_MAX) };
                    let mut idle = || {
                        std::thread::yield_now();
                        Ok(())
                    };
                    for k in 1..=calls {
                        let words = 1 + (k as usize % 5) * 20; // 8..808 bytes
                        let len = words * 8;
                        let val = |r: usize, i: usize| (r as u64 + 1) * 1000 + k * 7 + i as u64;
                        let mut out = vec![0u64; words];
                        let inp: Vec<u64> = (0..words).map(|i| val(me, i)).collect();
                        let root = (k as usize * 3) % n;
                        let op = match k % 4 {
                            0 => FlagOp::Barrier,
                            1 => {
                                if me == root {
                                    out.copy_from_slice(&inp);
                                }
                                FlagOp::Bcast {
                                    root,
                                    buf: out.as_mut_ptr() as *mut u8,
                                    len,
                                }
                            }
                            2 => FlagOp::Reduce {
                                root,
                                input: inp.as_ptr() as *const u8,
                                output: out.as_mut_ptr() as *mut u8,
                                len,
                                reduce: &sum,
                            },
                            _ => {
                                out.copy_from_slice(&inp);
                                FlagOp::Allreduce {
                                    input: out.as_ptr() as *const u8, // in place
                                    output: out.as_mut_ptr() as *mut u8,
                                    len,
                                    reduce: &sum,
                                }
                            }
                        };
                        arrived[k as usize].fetch_add(1, Ordering::SeqCst);
                        // SAFETY: buffers of len bytes, all threads run the same sequence.
                        unsafe { s.run(k, &op, &mut idle).unwrap() };
                        if k % 4 == 0 {
                            assert_eq!(
                                arrived[k as usize].load(Ordering::SeqCst),
                                n,
                                "barrier {k}"
                            );
                        }
                        let got_result = match k % 4 {
                            0 => false,
                            1 => true,
                            2 => me == root,
                            _ => true,
                        };
                        if !got_result {
                            continue;
                        }
                        for (i, &o) in out.iter().enumerate() {
                            let want = if k % 4 == 1 {
                                val(root, i)
                            } else {
                                expect[k as usize][i]
                            };
                            assert_eq!(o, want, "n {n} rank {me} call {k} word {i}");
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }

    /// Contribution of each rank to one word.
    type Vals<'a> = &'a dyn Fn(usize) -> u64;

    /// Expected reductions per call and word (index k, word i).
    fn expect_table(calls: u64, f: &dyn Fn(Vals) -> u64) -> Vec<Vec<u64>> {
        (0..=calls)
            .map(|k| {
                let words = 1 + (k as usize % 5) * 20;
                (0..words)
                    .map(|i| f(&|r: usize| (r as u64 + 1) * 1000 + k * 7 + i as u64))
                    .collect()
            })
            .collect()
    }

    /// A rank that passes call 1 (another path) fails its peer's flag bcast and allreduce of
    /// that number, and call 2 through the slots works again on both.
    #[test]
    fn pass_keeps_the_numbering() {
        let area: &'static mut [u64] = Box::leak(vec![0u64; 2 * AREA / 8 + 8].into_boxed_slice());
        let start = (area.as_mut_ptr() as usize + 63) & !63;
        let bases: &'static [usize] = Box::leak(vec![start, start + AREA].into_boxed_slice());
        let sum = |i: &[u8], o: &mut [u8]| {
            o[0] += i[0];
            Ok(())
        };
        let threads: Vec<_> = (0..2)
            .map(|me| {
                std::thread::spawn(move || {
                    // SAFETY: the areas are leaked, aligned, zeroed and shared by the threads.
                    let s = unsafe { Slots::new(bases, me, SLOT_MAX) };
                    let mut idle = || {
                        std::thread::yield_now();
                        Ok(())
                    };
                    let mut buf = [7u8; 4];
                    for k in 1..=2u64 {
                        let op = if k == 1 {
                            FlagOp::Bcast {
                                root: 1,
                                buf: buf.as_mut_ptr(),
                                len: 4,
                            }
                        } else {
                            FlagOp::Allreduce {
                                input: [1u8].as_ptr(),
                                output: buf.as_mut_ptr(),
                                len: 1,
                                reduce: &sum,
                            }
                        };
                        if me == 1 && k == 1 {
                            s.pass(k, &mut idle).unwrap();
                            continue;
                        }
                        // SAFETY: buffers of the lengths given.
                        let r = unsafe { s.run(k, &op, &mut idle) };
                        if k == 1 {
                            let e = r.unwrap_err();
                            assert_eq!(e.class, crate::standard::consts::MPI_ERR_OTHER);
                            assert!(e.msg.contains("another path"), "{}", e.msg);
                            assert_eq!(buf, [7u8; 4], "nothing read from a passing root");
                        } else {
                            r.unwrap();
                            assert_eq!(buf[0], 2);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }

    #[test]
    fn every_op_at_1_to_9_ranks() {
        for n in 1..=9 {
            run_ranks(n, 400);
        }
    }
}
