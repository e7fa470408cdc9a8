//! Flag-based collectives over per-rank shared-memory slots: the small-message path of the
//! blocking barrier, bcast, reduce and allreduce on MPI_COMM_WORLD (`dispatch/flag.rs` decides
//! when it applies).
//!
//! Point-to-point messages pay for matching, request slots and ring frames; a small collective
//! among the ranks of one node needs none of that. Every rank owns two slots that every other
//! rank can read (page 0 of its shared-memory segment, `transport/shm.rs`):
//! `[seq: u64 | len: u64 | data: up to SLOT_MAX bytes]`, so a contribution of up to 48
//! bytes travels in the cache line of its flag. `len` is the byte length the rank published
//! (and, above bit 32, the root its call names plus one: a reduction or bcast reader whose
//! roots differ reports `MPI_ERR_ROOT`):
//! a rank that reads a longer contribution than its own call describes (a count mismatch,
//! erroneous in MPI) reads what fits and reports `MPI_ERR_TRUNCATE` after finishing the call,
//! so no peer waits for it.
//!
//! # Protocol
//! Every call has a number k (`engine::collcheck::CallNo::flag`), the same on every rank and
//! increasing from call to call on every rank; numbers may skip (calls that run on other paths
//! take none), so nothing a rank did on another path (also in an erroneous program, where
//! ranks met different collectives) moves the numbering. A rank's slot holds `[seq | len |
//! data]`; its newer slot holds its last published call. At rank `me`, call k:
//! 1. Wait until every peer has published a call numbered at least `prev` (my last published
//!    call, in my newer slot): a rank publishes a later call only after finishing the earlier
//!    ones, so every peer is done reading my older slot, published before `prev`.
//! 2. Write my contribution (if the operation has one) into my older slot, then store seq = k
//!    with Release.
//! 3. Wait (Acquire) for the slots the operation reads and read them: allreduce and barrier read
//!    every rank's, reduce every rank's at the root, bcast the root's at the others. A peer's
//!    contribution to call k is the slot holding seq = k; a peer whose slots hold a later call
//!    and not k ran call k on another path (erroneous: a mismatched call), and the call fails
//!    instead of reading it.
//!
//! Besides the operations, a round may carry plain bytes: [`Slots::exchange`] publishes them and
//! reads every rank's, reporting a rank that published a later call instead (it took no part)
//! rather than failing; [`Slots::contribute`] publishes them without reading (a rank that does
//! not need the others' parts). Both are steps 1 and 2 as above, so the protocol holds.
//!
//! A peer cannot overwrite a slot being read: to write it again it must first see this rank
//! publish a call after k, which happens after this rank's reads of call k.
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
/// Bytes of a cache line (a slot's `seq`, its length word and the first 48 bytes of its data
/// share the first).
const LINE: usize = 64;

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

    /// The sequence word of rank r's slot i (0 or 1).
    fn seq(&self, r: usize, i: usize) -> &AtomicU64 {
        // SAFETY: new's contract: the slot area is live, aligned, and seq is its first word.
        unsafe { &*((self.bases[r] + i * SLOT_STRIDE) as *const AtomicU64) }
    }

    /// The word after rank r's seq in its slot i (read after the seq): the length of its
    /// contribution, and above bit 32 the root its call names plus one (0: no root).
    fn len_word(&self, r: usize, i: usize) -> u64 {
        // SAFETY: new's contract: the word after seq is in the slot area, 8-byte aligned.
        let p = (self.bases[r] + i * SLOT_STRIDE + 8) as *const AtomicU64;
        unsafe { &*p }.load(Ordering::Relaxed)
    }

    /// The published length of rank r's contribution in its slot i.
    fn len_of(&self, r: usize, i: usize) -> usize {
        (self.len_word(r, i) & 0xffff_ffff) as usize
    }

    /// The root (plus one; 0: none) rank r's call in its slot i names.
    fn root_of(&self, r: usize, i: usize) -> u64 {
        self.len_word(r, i) >> 32
    }

    fn set_len(&self, i: usize, len: usize, root: u64) {
        // SAFETY: as for len_word, in our own slot (step 1 made it ours).
        let p = (self.bases[self.me] + i * SLOT_STRIDE + 8) as *const AtomicU64;
        unsafe { &*p }.store(len as u64 | root << 32, Ordering::Relaxed);
    }

    fn data(&self, r: usize, i: usize) -> *mut u8 {
        (self.bases[r] + i * SLOT_STRIDE + DATA) as *mut u8
    }

    /// Whether rank r published a call numbered at least `k` (Acquire: its slot's contents
    /// before it). Slot `i` first: where every rank runs the same calls, rank r's slot `i`
    /// holds the same call as mine, so the line of its other slot (the one it may be writing
    /// for its next call) is not touched.
    fn reached(&self, r: usize, i: usize, k: u64) -> bool {
        self.seq(r, i).load(Ordering::Acquire) >= k
            || self.seq(r, 1 - i).load(Ordering::Acquire) >= k
    }

    /// Where rank r stands with call k: `Some(Ok(slot))` it published k there, `Some(Err(()))`
    /// it published a later call and not k (it ran k on another path), `None` not yet. Slot
    /// `hint` (mine for call k) first, as in [`Slots::reached`].
    ///
    /// The two slots are read one after the other: rank r may publish k in slot `hint` and
    /// its next call in the other slot between the two reads. Its later call then shows in
    /// the second read (Acquire), and k (published before it, and not overwritten while this
    /// rank has not published a later call) in a second read of slot `hint`.
    fn at(&self, r: usize, k: u64, hint: usize) -> Option<Result<usize, ()>> {
        let a = self.seq(r, hint).load(Ordering::Acquire);
        if a == k {
            return Some(Ok(hint));
        }
        let b = self.seq(r, 1 - hint).load(Ordering::Acquire);
        if b == k {
            Some(Ok(1 - hint))
        } else if b > k && self.seq(r, hint).load(Ordering::Acquire) == k {
            Some(Ok(hint))
        } else if a > k || b > k {
            Some(Err(()))
        } else {
            None
        }
    }

    fn wait(
        &self,
        idle: &mut dyn FnMut() -> MpiResult<()>,
        ready: impl Fn(&Self) -> bool,
    ) -> MpiResult<()> {
        let checks = if self.oversubscribed { 1 } else { CHECKS };
        wait_for(checks, idle, || ready(self))
    }

    /// Wait until rank r either published call k (`Some(slot)`) or a later call instead
    /// (`None`: it took no part in k). `hint`: my slot of call k.
    /// `len`: the bytes this rank expects in r's slot. When they reach past the line of the
    /// slot's `seq`, every check also asks for the next line of slot `hint` (a prefetch):
    /// rank r writes it before its `seq`, so its new contents are on their way while the
    /// `seq` line is, instead of being fetched only once `seq` has been seen.
    fn find(
        &self,
        r: usize,
        k: u64,
        hint: usize,
        len: usize,
        idle: &mut dyn FnMut() -> MpiResult<()>,
    ) -> MpiResult<Option<usize>> {
        let found = std::cell::Cell::new(None);
        let next_line = (DATA + len > LINE).then(|| self.data(r, hint).wrapping_add(LINE - DATA));
        self.wait(idle, |s| {
            if let Some(p) = next_line {
                crate::sys::prefetch(p);
            }
            let at = s.at(r, k, hint);
            found.set(at);
            at.is_some()
        })?;
        Ok(found.get().and_then(|x| x.ok()))
    }

    /// Wait for rank r's contribution to call k: its slot, or an error when r ran k on another
    /// path.
    /// `hint`: my slot of call k.
    fn slot_of(
        &self,
        r: usize,
        k: u64,
        hint: usize,
        idle: &mut dyn FnMut() -> MpiResult<()>,
    ) -> MpiResult<usize> {
        self.slot_of_len(r, k, hint, 0, idle)
    }

    /// [`Slots::slot_of`] of a contribution of `len` bytes (see [`Slots::find`]).
    fn slot_of_len(
        &self,
        r: usize,
        k: u64,
        hint: usize,
        len: usize,
        idle: &mut dyn FnMut() -> MpiResult<()>,
    ) -> MpiResult<usize> {
        match self.find(r, k, hint, len, idle)? {
            Some(i) => Ok(i),
            None => crate::mpi_bail!(MPI_ERR_OTHER, "rank {r} ran this call on another path"),
        }
    }

    /// Steps 1 and 2 of call k: wait until every peer is done with my older slot, then publish
    /// `len` bytes from `src` there with `root` (plus one; 0: none). Returns the slot.
    ///
    /// # Safety
    /// `src` is valid for `len <= SLOT_MAX` bytes.
    unsafe fn publish(
        &self,
        k: u64,
        src: *const u8,
        len: usize,
        root: u64,
        idle: &mut dyn FnMut() -> MpiResult<()>,
    ) -> MpiResult<usize> {
        let me = self.me;
        // 1. Everyone is done with my older slot: each has published my newer slot's call.
        let mine = [self.seq(me, 0), self.seq(me, 1)].map(|w| w.load(Ordering::Relaxed));
        let (prev, slot) = if mine[0] >= mine[1] {
            (mine[0], 1)
        } else {
            (mine[1], 0)
        };
        debug_assert!(k > prev, "flag call numbers increase");
        let n = self.bases.len();
        self.wait(idle, |s| {
            (0..n).all(|r| r == me || s.reached(r, 1 - slot, prev))
        })?;
        // 2. Publish.
        if len > 0 {
            // SAFETY: the caller's buffer holds len <= SLOT_MAX bytes; the slot is ours (step 1).
            std::ptr::copy_nonoverlapping(src, self.data(me, slot), len);
        }
        self.set_len(slot, len, root);
        self.seq(me, slot).store(k, Ordering::Release);
        Ok(slot)
    }

    /// Publish `data` as this rank's part of call k and return without reading the other
    /// ranks' parts: for a rank that knows the outcome of an exchange already (its own "no"
    /// decides an AND), so that the ranks that read ([`Slots::exchange`]) find it.
    pub fn contribute(
        &self,
        k: u64,
        data: &[u8],
        idle: &mut dyn FnMut() -> MpiResult<()>,
    ) -> MpiResult<()> {
        assert!(data.len() <= SLOT_MAX);
        // SAFETY: `data` is a live slice of at most SLOT_MAX bytes.
        unsafe { self.publish(k, data.as_ptr(), data.len(), 0, idle) }.map(|_| ())
    }

    /// Publish `data` as call k and read every rank's part, in rank order (mine included):
    /// `visit(r, Some(bytes))` for a rank that published call k, `visit(r, None)` for one that
    /// published a later call instead (it took no part in call k and went on).
    pub fn exchange(
        &self,
        k: u64,
        data: &[u8],
        idle: &mut dyn FnMut() -> MpiResult<()>,
        visit: &mut dyn FnMut(usize, Option<&[u8]>),
    ) -> MpiResult<()> {
        assert!(data.len() <= SLOT_MAX);
        // SAFETY: `data` is a live slice of at most SLOT_MAX bytes.
        let slot = unsafe { self.publish(k, data.as_ptr(), data.len(), 0, idle)? };
        for r in 0..self.bases.len() {
            match self.find(r, k, slot, 0, idle)? {
                Some(i) => {
                    let len = self.len_of(r, i).min(SLOT_MAX);
                    // SAFETY: rank r's slot i holds `len` published bytes of call k (Acquire in
                    // `find`), not rewritten before this rank publishes a later call.
                    visit(
                        r,
                        Some(unsafe { std::slice::from_raw_parts(self.data(r, i), len) }),
                    );
                }
                None => visit(r, None),
            }
        }
        Ok(())
    }

    /// Run call number `k` (greater than every call number this rank used before; the same
    /// on every rank).
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
        let n = self.bases.len();
        let (src, len) = match *op {
            FlagOp::Barrier => (std::ptr::null(), 0),
            FlagOp::Bcast { root, buf, len } if root == me => (buf as *const u8, len),
            FlagOp::Bcast { .. } => (std::ptr::null(), 0),
            FlagOp::Reduce { input, len, .. } | FlagOp::Allreduce { input, len, .. } => {
                (input, len)
            }
        };
        let root = match *op {
            FlagOp::Bcast { root, .. } | FlagOp::Reduce { root, .. } => root as u64 + 1,
            _ => 0,
        };
        let slot = self.publish(k, src, len, root, idle)?;
        // 3. Read.
        match *op {
            FlagOp::Barrier => {
                for r in (0..n).filter(|&r| r != me) {
                    self.slot_of(r, k, slot, idle)?;
                }
                Ok(())
            }
            FlagOp::Bcast { root, buf, len } => {
                if root != me {
                    let i = match self.slot_of_len(root, k, slot, len, idle) {
                        Ok(i) => i,
                        Err(_) => crate::mpi_bail!(
                            MPI_ERR_OTHER,
                            "the root (rank {root}) ran this call on another path"
                        ),
                    };
                    if self.root_of(root, i) != root as u64 + 1 {
                        crate::mpi_bail!(
                            MPI_ERR_ROOT,
                            "rank {root} (this rank's root) called it with {}",
                            match self.root_of(root, i) {
                                0 => "no root".to_string(),
                                t => format!("root {}", t - 1),
                            }
                        );
                    }
                    let sent = self.len_of(root, i).min(SLOT_MAX);
                    // SAFETY: root's slot holds `sent` bytes of call k (published, Acquire
                    // above); buf takes len bytes.
                    std::ptr::copy_nonoverlapping(self.data(root, i), buf, sent.min(len));
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
                    self.combine(k, slot, output, len, root as u64 + 1, reduce, idle)?;
                }
                Ok(())
            }
            FlagOp::Allreduce {
                output,
                len,
                reduce,
                ..
            } => self.combine(k, slot, output, len, 0, reduce, idle),
        }
    }

    /// `output = c_0 op (c_1 op (... op c_{n-1}))` over the slots of call k (mine: `slot`);
    /// `root`: the root this rank's call names, plus one (0: an allreduce).
    #[allow(clippy::too_many_arguments)]
    unsafe fn combine(
        &self,
        k: u64,
        slot: usize,
        output: *mut u8,
        len: usize,
        root: u64,
        reduce: ReduceRef,
        idle: &mut dyn FnMut() -> MpiResult<()>,
    ) -> MpiResult<()> {
        let n = self.bases.len();
        let mut slots: smallvec::SmallVec<[usize; 16]> = smallvec::SmallVec::with_capacity(n);
        for r in 0..n {
            slots.push(self.slot_of_len(r, k, slot, len, idle)?);
        }
        if let Some(r) = (0..n).find(|&r| self.root_of(r, slots[r]) != root) {
            let theirs = self.root_of(r, slots[r]);
            if root == 0 || theirs == 0 {
                crate::mpi_bail!(
                    MPI_ERR_OTHER,
                    "rank {r} called another collective (a reduction {} a root)",
                    if theirs == 0 { "without" } else { "with" }
                );
            }
            crate::mpi_bail!(
                MPI_ERR_ROOT,
                "rank {r} called the reduction with root {}, this rank with root {}",
                theirs - 1,
                root - 1
            );
        }
        if let Some(r) = (0..n).find(|&r| self.len_of(r, slots[r]) != len) {
            crate::mpi_bail!(
                MPI_ERR_TRUNCATE,
                "rank {r} contributed {} bytes to the reduction, this rank {len}",
                self.len_of(r, slots[r])
            );
        }
        if len == 0 {
            return Ok(());
        }
        // SAFETY: every slot holds len published bytes of call k; output is the caller's
        // writable buffer of len bytes, distinct from every slot.
        std::ptr::copy_nonoverlapping(self.data(n - 1, slots[n - 1]), output, len);
        let out = std::slice::from_raw_parts_mut(output, len);
        for r in (0..n - 1).rev() {
            reduce(std::slice::from_raw_parts(self.data(r, slots[r]), len), out)?;
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
    fn run_ranks(n: usize, calls: u64, stride: u64) {
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
                        // Call numbers with gaps (the calls of other paths take none).
                        let num = k * stride;
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
                        unsafe { s.run(num, &op, &mut idle).unwrap() };
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

    /// A rank that runs call 1 on another path (it takes no flag round) fails its peer's flag
    /// bcast of that number once it publishes a later call, and call 2 through the slots works
    /// on both.
    #[test]
    fn a_skipped_call_fails_and_the_next_works() {
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

    /// A reduction whose ranks name different roots fails at the ranks that combine (each
    /// takes itself for the root) with MPI_ERR_ROOT, and the next call works.
    #[test]
    fn different_roots_fail_with_err_root() {
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
                    let mut out = [0u8; 1];
                    let op = FlagOp::Reduce {
                        root: me,
                        input: [1u8].as_ptr(),
                        output: out.as_mut_ptr(),
                        len: 1,
                        reduce: &sum,
                    };
                    // SAFETY: buffers of the lengths given.
                    let e = unsafe { s.run(4, &op, &mut idle) }.unwrap_err();
                    assert_eq!(e.class, crate::standard::consts::MPI_ERR_ROOT, "{}", e.msg);
                    let op = FlagOp::Allreduce {
                        input: [1u8].as_ptr(),
                        output: out.as_mut_ptr(),
                        len: 1,
                        reduce: &sum,
                    };
                    // SAFETY: as above.
                    unsafe { s.run(9, &op, &mut idle) }.unwrap();
                    assert_eq!(out[0], 2);
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
            run_ranks(n, 400, 1);
            run_ranks(n, 100, 3);
        }
    }
}
