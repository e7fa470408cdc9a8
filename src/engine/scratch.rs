//! Mid-size collectives through per-rank shared-memory scratch areas: the blocking bcast,
//! reduce and allreduce on MPI_COMM_WORLD between the flag slots (`engine/flag.rs`, up to
//! 1 KiB) and `GPUMPI_SHM_MID_MAX` (`abi/imp/coll.rs` decides when it applies).
//!
//! Going through point-to-point, a 64 KiB allreduce pays for message matching, ring frames and
//! a copy into and out of the rings at every step of its schedule. Here every rank owns a
//! scratch area that every other rank can read (after the rings of its shared-memory segment,
//! `transport/shm.rs`): `[control: 128 bytes | data: cap bytes]`. The control block holds
//! `pos` (the last protocol step this rank finished, below) and `len` (the byte length of the
//! current call, to detect mismatched counts).
//!
//! # Plan (pure: [`Plan`])
//! A message of `len` bytes of `elem`-byte elements is cut into segments of at most `cap`
//! bytes (whole elements); every segment is cut into one chunk per rank, as even as whole
//! elements allow (the first `rem` ranks get one element more). Rank r reduces chunk r.
//!
//! # Protocol
//! Calls are numbered k, the same on every rank and increasing from call to call (MPI_COMM_WORLD's
//! collective sequence: numbers skip the calls of other paths, so a mismatched call that some
//! ranks ran elsewhere does not move the numbering). Step `(k, s, p)` is encoded as
//! `k << 32 | s << 2 | p` (segment s, phase p), so steps only grow; a rank publishes a step by storing it in its `pos` with Release, and waits
//! for a peer's step by loading the peer's `pos` with Acquire until it is at least that step;
//! a peer whose `pos` went on to a later call instead ran call k on another path (erroneous),
//! and the call fails (a peer in call k cannot leave it before this rank's part is done).
//! For every segment s of call k, at rank `me`:
//! 1. Before writing its scratch: wait until every peer reached this rank's previous published
//!    step (the peers finished reading what this rank exposed last).
//! 2. `IN`: copy the input segment into my scratch (allreduce, reduce: every rank; bcast: the
//!    root), publish `(k, s, IN)`. On segment 0 `len` is written first and, once every rank
//!    published IN, compared by every rank: a mismatch makes every rank publish OUT (done
//!    reading) and return `MPI_ERR_TRUNCATE` at the same step. A bcast follows the root's length: the other ranks
//!    wait for the root's first IN and read it, a rank with a shorter buffer takes what fits and
//!    returns `MPI_ERR_TRUNCATE` after the last segment (as the flag slots do).
//! 3. `RED` (allreduce, reduce): wait for every peer's IN; reduce chunk `me` of every rank's
//!    scratch, in rank order `c_0 op (c_1 op (... op c_{n-1}))`, into my output (or a temporary
//!    where this rank has no output) and copy it over chunk `me` of my scratch (no peer reads
//!    that chunk of mine in this phase), publish `(k, s, RED)`.
//! 4. `OUT`: wait for the steps the output needs (allreduce: every peer's RED; reduce, at the
//!    root: every peer's RED; bcast, elsewhere: the root's IN), copy the other ranks' chunks
//!    (bcast: the segment) into my output, publish `(k, s, OUT)`.
//!
//! A peer cannot overwrite what this rank reads: to write its scratch again it first waits for
//! this rank's OUT of the segment. Every chunk is reduced by one rank in one order, so every rank
//! gets the same bits. Waiting goes through the caller's `idle` (progress, back off), so other
//! traffic moves and oversubscribed ranks yield.

use crate::mpi::error::MpiResult;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes of the control block in front of a scratch area's data.
pub const CTRL: usize = crate::transport::shm::SCRATCH_CTRL_BYTES;
/// Offset of `len` in the control block (its own cache line, apart from `pos`).
const LEN_OFF: usize = 64;
/// Flag checks between two calls of `idle` while waiting.
const CHECKS: usize = 64;

const IN: u64 = 1;
const RED: u64 = 2;
const OUT: u64 = 3;

/// A reduction callback: `inout = input op inout`.
pub type ReduceRef<'a> = &'a dyn Fn(&[u8], &mut [u8]) -> MpiResult<()>;

/// How a message is cut into segments and chunks (pure arithmetic, the same on every rank).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Ranks.
    pub n: usize,
    /// Bytes of one element (a segment or chunk never splits one).
    pub elem: usize,
    /// Bytes of the message.
    pub len: usize,
    /// Elements of a full segment.
    pub seg_elems: usize,
}

impl Plan {
    /// `None` if one element does not fit `cap` (or `elem` is 0).
    pub fn new(n: usize, elem: usize, len: usize, cap: usize) -> Option<Plan> {
        if elem == 0 || n == 0 || cap < elem {
            return None;
        }
        Some(Plan {
            n,
            elem,
            len,
            seg_elems: cap / elem,
        })
    }

    fn elems(&self) -> usize {
        self.len / self.elem
    }

    /// Number of segments (at least one, so an empty call still synchronizes once).
    pub fn segments(&self) -> usize {
        self.elems().div_ceil(self.seg_elems).max(1)
    }

    /// Byte range `(offset, length)` of segment `s` in the message.
    pub fn segment(&self, s: usize) -> (usize, usize) {
        let first = s * self.seg_elems;
        let count = self.seg_elems.min(self.elems().saturating_sub(first));
        (first * self.elem, count * self.elem)
    }

    /// Byte range `(offset, length)` of rank r's chunk, relative to the start of segment s.
    pub fn chunk(&self, s: usize, r: usize) -> (usize, usize) {
        let count = self.segment(s).1 / self.elem;
        let (q, rem) = (count / self.n, count % self.n);
        let first = r * q + r.min(rem);
        let mine = q + usize::from(r < rem);
        (first * self.elem, mine * self.elem)
    }
}

/// One collective with its buffers (byte lengths; reductions on whole `elem`-byte elements).
pub enum MidOp<'a> {
    /// `buf` holds the data at the root and receives it elsewhere.
    Bcast {
        root: usize,
        buf: *mut u8,
        len: usize,
    },
    /// `output` is only used at the root (may be null elsewhere). `input` may equal `output`.
    Reduce {
        root: usize,
        input: *const u8,
        output: *mut u8,
        len: usize,
        elem: usize,
        reduce: ReduceRef<'a>,
    },
    /// `input` may equal `output` (in place).
    Allreduce {
        input: *const u8,
        output: *mut u8,
        len: usize,
        elem: usize,
        reduce: ReduceRef<'a>,
    },
}

/// The scratch areas of all ranks of a job (world rank order), as seen by rank `me`.
#[derive(Clone, Copy)]
pub struct Scratch {
    bases: &'static [usize],
    me: usize,
    cap: usize,
    oversubscribed: bool,
}

impl Scratch {
    /// # Safety
    /// Every `bases[r]` must be the start of rank r's scratch area ([`CTRL`] + `cap` bytes,
    /// 64-byte aligned, zero-filled before any rank used it, readable and writable by this
    /// process) for as long as this value and its copies are used.
    pub unsafe fn new(bases: &'static [usize], me: usize, cap: usize) -> Self {
        assert!(me < bases.len());
        Scratch {
            bases,
            me,
            cap,
            oversubscribed: false,
        }
    }

    /// Mark the ranks as sharing cores: waits check once, then go to `idle` (which should
    /// yield), instead of spinning on the flags.
    pub fn oversubscribed(self, yes: bool) -> Self {
        Scratch {
            oversubscribed: yes,
            ..self
        }
    }

    pub fn is_oversubscribed(&self) -> bool {
        self.oversubscribed
    }

    pub fn size(&self) -> usize {
        self.bases.len()
    }

    /// This rank (world rank order).
    pub fn rank(&self) -> usize {
        self.me
    }

    /// Data bytes of one scratch area.
    pub fn cap(&self) -> usize {
        self.cap
    }

    fn word(&self, r: usize, off: usize) -> &AtomicU64 {
        // SAFETY: new's contract: the control block is live, 64-byte aligned, CTRL bytes long.
        unsafe { &*((self.bases[r] + off) as *const AtomicU64) }
    }

    fn data(&self, r: usize) -> *mut u8 {
        (self.bases[r] + CTRL) as *mut u8
    }

    /// The step this rank published last (where call numbering resumes).
    pub fn last_step(&self) -> u64 {
        self.word(self.me, 0).load(Ordering::Relaxed)
    }

    fn publish(&self, step: u64) {
        self.word(self.me, 0).store(step, Ordering::Release);
    }

    fn reached(&self, r: usize, step: u64) -> bool {
        self.word(r, 0).load(Ordering::Acquire) >= step
    }

    fn wait(
        &self,
        idle: &mut dyn FnMut() -> MpiResult<()>,
        ready: impl Fn(&Self) -> bool,
    ) -> MpiResult<()> {
        let checks = if self.oversubscribed { 1 } else { CHECKS };
        super::flag::wait_for(checks, idle, || ready(self))
    }

    /// Wait until rank r reached `step` of call `step >> 32`; an error when it went on to a
    /// later call instead (it ran this call on another path: a peer in this call cannot
    /// leave it while this rank has not finished its part).
    fn wait_step(
        &self,
        idle: &mut dyn FnMut() -> MpiResult<()>,
        r: usize,
        step: u64,
    ) -> MpiResult<()> {
        self.wait(idle, |x| x.reached(r, step))?;
        if self.word(r, 0).load(Ordering::Acquire) >> 32 != step >> 32 {
            crate::mpi_bail!(MPI_ERR_OTHER, "rank {r} ran this call on another path");
        }
        Ok(())
    }

    /// [`Scratch::wait_step`] for every peer.
    fn wait_all(&self, idle: &mut dyn FnMut() -> MpiResult<()>, step: u64) -> MpiResult<()> {
        for r in (0..self.bases.len()).filter(|&r| r != self.me) {
            self.wait_step(idle, r, step)?;
        }
        Ok(())
    }

    fn all_reached(&self, step: u64) -> bool {
        (0..self.bases.len()).all(|r| r == self.me || self.reached(r, step))
    }

    /// Run call number `k` (1 <= k < 2^32, greater than every number this rank used before,
    /// the same on every rank; numbers may skip).
    ///
    /// # Safety
    /// The buffers of `op` are valid for `len` bytes (outputs writable, not aliasing a scratch
    /// area; an input may equal its output); every rank runs the same sequence of operations
    /// with the same roots and element sizes.
    pub unsafe fn run(
        &self,
        k: u64,
        op: &MidOp,
        idle: &mut dyn FnMut() -> MpiResult<()>,
    ) -> MpiResult<()> {
        let (me, n) = (self.me, self.bases.len());
        let (len, elem, root) = match *op {
            MidOp::Bcast { root, len, .. } => (len, 1, root),
            MidOp::Reduce {
                root, len, elem, ..
            } => (len, elem, root),
            MidOp::Allreduce { len, elem, .. } => (len, elem, usize::MAX),
        };
        let reduces = !matches!(op, MidOp::Bcast { .. });
        // A bcast follows the root's length (the root publishes it with its first IN): a rank
        // whose buffer is shorter takes what fits and reports MPI_ERR_TRUNCATE at the end.
        let mut sent = len;
        let mine = call_word(op);
        if !reduces && root != me {
            let first = k << 32 | IN;
            self.wait_step(idle, root, first)?;
            let theirs = self.word(root, LEN_OFF).load(Ordering::Relaxed);
            if let Some(e) = call_mismatch(mine, theirs, root) {
                return Err(e);
            }
            sent = word_len(theirs);
        }
        let Some(plan) = Plan::new(n, elem, sent, self.cap) else {
            crate::mpi_bail!(
                MPI_ERR_INTERN,
                "an element of {elem} bytes does not fit a scratch area of {} bytes",
                self.cap
            );
        };
        let reduce = match *op {
            MidOp::Reduce { reduce, .. } | MidOp::Allreduce { reduce, .. } => Some(reduce),
            MidOp::Bcast { .. } => None,
        };
        let mut tmp: Vec<u8> = Vec::new();
        for s in 0..plan.segments() {
            let step = |p: u64| k << 32 | (s as u64) << 2 | p;
            let (off, slen) = plan.segment(s);
            // 1. The peers are done with what this rank exposed last.
            let prev = self.last_step();
            self.wait(idle, |x| x.all_reached(prev))?;
            // 2. IN.
            if s == 0 {
                self.word(me, LEN_OFF).store(mine, Ordering::Relaxed);
            }
            let src = match *op {
                MidOp::Bcast { buf, .. } if root == me => Some(buf as *const u8),
                MidOp::Bcast { .. } => None,
                MidOp::Reduce { input, .. } | MidOp::Allreduce { input, .. } => Some(input),
            };
            if let Some(src) = src {
                // SAFETY: the caller's buffer holds len bytes, the segment fits cap; the scratch
                // is ours (step 1).
                std::ptr::copy_nonoverlapping(src.add(off), self.data(me), slen);
            }
            self.publish(step(IN));
            if s == 0 && reduces {
                // Every rank compares every rank's length after their IN: a mismatch is seen
                // by every rank at this same step, so all return together.
                self.wait_all(idle, step(IN))?;
                let e = (0..n).find_map(|r| {
                    call_mismatch(mine, self.word(r, LEN_OFF).load(Ordering::Relaxed), r)
                });
                if let Some(e) = e {
                    // Done reading: a peer's next call waits for this OUT before it writes its
                    // length again, so every rank sees the lengths of this call.
                    self.publish(step(OUT));
                    return Err(e);
                }
            }
            // 3. RED.
            if reduces {
                self.wait_all(idle, step(IN))?;
                let (coff, clen) = plan.chunk(s, me);
                let out: *mut u8 = match *op {
                    MidOp::Allreduce { output, .. } => output.add(off + coff),
                    MidOp::Reduce { output, .. } if root == me => output.add(off + coff),
                    _ => {
                        tmp.resize(clen, 0);
                        tmp.as_mut_ptr()
                    }
                };
                if clen > 0 {
                    // SAFETY: every rank's scratch holds the segment (their IN, Acquire above);
                    // `out` is clen writable bytes distinct from every scratch area.
                    std::ptr::copy_nonoverlapping(self.data(n - 1).add(coff), out, clen);
                    let o = std::slice::from_raw_parts_mut(out, clen);
                    for r in (0..n - 1).rev() {
                        let i = std::slice::from_raw_parts(self.data(r).add(coff), clen);
                        if let Some(f) = reduce {
                            f(i, o)?;
                        }
                    }
                    // SAFETY: chunk `me` of my scratch is read by no peer before my RED.
                    std::ptr::copy_nonoverlapping(out, self.data(me).add(coff), clen);
                }
                self.publish(step(RED));
            }
            // 4. OUT.
            match *op {
                MidOp::Allreduce { output, .. } | MidOp::Reduce { output, .. }
                    if root == me || matches!(op, MidOp::Allreduce { .. }) =>
                {
                    for r in (0..n).filter(|&r| r != me) {
                        self.wait_step(idle, r, step(RED))?;
                        let (coff, clen) = plan.chunk(s, r);
                        // SAFETY: rank r's scratch chunk r holds its reduced chunk (its RED,
                        // Acquire above); the output holds len bytes.
                        std::ptr::copy_nonoverlapping(
                            self.data(r).add(coff),
                            output.add(off + coff),
                            clen,
                        );
                    }
                }
                MidOp::Bcast { buf, .. } if root != me => {
                    self.wait_step(idle, root, step(IN))?;
                    // SAFETY: the root's scratch holds the segment (its IN, Acquire above); buf
                    // holds len bytes, of which this copies only those below len.
                    let fit = slen.min(len.saturating_sub(off));
                    std::ptr::copy_nonoverlapping(self.data(root), buf.add(off), fit);
                }
                _ => {}
            }
            self.publish(step(OUT));
        }
        if sent > len {
            crate::mpi_bail!(
                MPI_ERR_TRUNCATE,
                "the root broadcast {sent} bytes, this rank's buffer holds {len}"
            );
        }
        Ok(())
    }
}

/// What a rank's call publishes beside its first IN (`LEN_OFF`): its byte length (bits 0-39),
/// its operation (bits 40-41: 1 bcast, 2 reduce, 3 allreduce) and the root it names plus one
/// (bits 42-63; 0 for allreduce).
fn call_word(op: &MidOp) -> u64 {
    let (len, kind, root) = match *op {
        MidOp::Bcast { root, len, .. } => (len, 1, root as u64 + 1),
        MidOp::Reduce { root, len, .. } => (len, 2, root as u64 + 1),
        MidOp::Allreduce { len, .. } => (len, 3, 0),
    };
    len as u64 | kind << 40 | root << 42
}

fn word_len(w: u64) -> usize {
    (w & ((1 << 40) - 1)) as usize
}

/// How rank `r`'s call (`theirs`, its [`call_word`]) disagrees with this rank's (`mine`), the
/// operation first, then the root, then the length; a bcast reader checks only the operation
/// and root (it takes what fits of the root's length).
fn call_mismatch(mine: u64, theirs: u64, r: usize) -> Option<crate::mpi::error::MpiError> {
    let name = |w: u64| match (w >> 40) & 3 {
        1 => "bcast",
        2 => "reduce",
        _ => "allreduce",
    };
    if (mine ^ theirs) >> 40 & 3 != 0 {
        return Some(crate::mpi_err!(
            MPI_ERR_OTHER,
            "rank {r} called {}, this rank {}",
            name(theirs),
            name(mine)
        ));
    }
    if mine >> 42 != theirs >> 42 {
        return Some(crate::mpi_err!(
            MPI_ERR_ROOT,
            "rank {r} called the {} with root {}, this rank with root {}",
            name(mine),
            (theirs >> 42).wrapping_sub(1),
            (mine >> 42).wrapping_sub(1)
        ));
    }
    if (mine >> 40) & 3 != 1 && word_len(mine) != word_len(theirs) {
        return Some(crate::mpi_err!(
            MPI_ERR_TRUNCATE,
            "rank {r} passed {} bytes to the collective, this rank {}",
            word_len(theirs),
            word_len(mine)
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_covers_every_element_once() {
        for n in 1..=9 {
            for elem in [1, 2, 4, 8, 12, 16] {
                for cap in [elem, 3 * elem, 64, 1000, 4096] {
                    for count in [0, 1, 2, 7, 8, 9, 63, 64, 65, 500, 1001] {
                        let len = count * elem;
                        let Some(p) = Plan::new(n, elem, len, cap) else {
                            assert!(cap < elem);
                            continue;
                        };
                        let mut seen = vec![0u8; len];
                        let mut next = 0;
                        for s in 0..p.segments() {
                            let (off, slen) = p.segment(s);
                            assert_eq!(off, next, "segments are consecutive");
                            assert!(slen <= cap && slen % elem == 0);
                            next = off + slen;
                            let mut cnext = 0;
                            for r in 0..n {
                                let (c, clen) = p.chunk(s, r);
                                assert_eq!(c, cnext, "chunks are consecutive");
                                assert_eq!(c % elem, 0);
                                cnext = c + clen;
                                for b in &mut seen[off + c..off + c + clen] {
                                    *b += 1;
                                }
                            }
                            assert_eq!(cnext, slen, "chunks cover the segment");
                            // As even as whole elements allow.
                            let sizes: Vec<usize> = (0..n).map(|r| p.chunk(s, r).1).collect();
                            let (lo, hi) = (sizes.iter().min(), sizes.iter().max());
                            assert!(hi.unwrap() - lo.unwrap() <= elem);
                        }
                        assert_eq!(next, len);
                        assert!(seen.iter().all(|&b| b == 1), "n {n} elem {elem} len {len}");
                        assert_eq!(p.segments(), count.div_ceil(cap / elem).max(1));
                    }
                }
            }
        }
    }

    #[test]
    fn plan_refuses_an_element_larger_than_the_area() {
        assert_eq!(Plan::new(2, 16, 64, 8), None);
        assert_eq!(Plan::new(2, 0, 64, 8), None);
    }

    /// `x op y = 3x + y` on u64 words: not commutative, so the documented order shows.
    fn combine(i: &[u8], o: &mut [u8]) -> MpiResult<()> {
        for (a, b) in i.chunks(8).zip(o.chunks_mut(8)) {
            let x = u64::from_ne_bytes(a.try_into().unwrap());
            let y = u64::from_ne_bytes((&*b).try_into().unwrap());
            b.copy_from_slice(&(x.wrapping_mul(3).wrapping_add(y)).to_ne_bytes());
        }
        Ok(())
    }

    fn val(r: usize, k: u64, i: usize) -> u64 {
        (r as u64 + 1) * 1_000_003 + k * 7919 + i as u64
    }

    /// n zeroed, 64-byte aligned scratch areas of `cap` data bytes in one leaked heap block.
    fn areas(n: usize, cap: usize) -> &'static [usize] {
        let stride = (CTRL + cap).next_multiple_of(64);
        let area: &'static mut [u64] =
            Box::leak(vec![0u64; (n * stride + 64) / 8].into_boxed_slice());
        let start = (area.as_mut_ptr() as usize + 63) & !63;
        Box::leak(
            (0..n)
                .map(|r| start + r * stride)
                .collect::<Vec<_>>()
                .into_boxed_slice(),
        )
    }

    /// Run `body(scratch, idle)` on one thread per rank over `areas(n, cap)`.
    fn on_ranks(
        n: usize,
        cap: usize,
        body: impl Fn(usize, Scratch, &mut dyn FnMut() -> MpiResult<()>) + Send + Copy + 'static,
    ) {
        let bases = areas(n, cap);
        let threads: Vec<_> = (0..n)
            .map(|me| {
                std::thread::spawn(move || {
                    // SAFETY: the areas are leaked, aligned, zeroed and shared by the threads.
                    let s = unsafe { Scratch::new(bases, me, cap) };
                    let mut idle = || {
                        std::thread::yield_now();
                        Ok(())
                    };
                    body(me, s, &mut idle)
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }

    /// Scratch areas in one heap block, one thread per rank, a mixed sequence of bcasts,
    /// reduces and allreduces (in place or not) of lengths that span several segments and do
    /// not divide by the rank count.
    fn run_ranks(n: usize, cap: usize, calls: u64, stride: u64) {
        on_ranks(n, cap, move |me, s, idle| {
            for k in 1..=calls {
                // Call numbers with gaps (the calls of other paths take none).
                let num = k * stride;
                let words =
                    [0, 1, 3, n - 1, n + 1, cap / 8, cap / 8 + 1, 3 * cap / 8 + 5][k as usize % 8];
                let len = words * 8;
                let root = (k as usize * 5) % n;
                let inp: Vec<u64> = (0..words).map(|i| val(me, k, i)).collect();
                let mut out = vec![0u64; words];
                let kind = k % 4;
                let op = match kind {
                    0 => {
                        if me == root {
                            out.copy_from_slice(&inp);
                        }
                        MidOp::Bcast {
                            root,
                            buf: out.as_mut_ptr() as *mut u8,
                            len,
                        }
                    }
                    1 => MidOp::Reduce {
                        root,
                        input: inp.as_ptr() as *const u8,
                        output: if me == root {
                            out.as_mut_ptr() as *mut u8
                        } else {
                            std::ptr::null_mut()
                        },
                        len,
                        elem: 8,
                        reduce: &combine,
                    },
                    2 => MidOp::Allreduce {
                        input: inp.as_ptr() as *const u8,
                        output: out.as_mut_ptr() as *mut u8,
                        len,
                        elem: 8,
                        reduce: &combine,
                    },
                    _ => {
                        out.copy_from_slice(&inp);
                        MidOp::Allreduce {
                            input: out.as_ptr() as *const u8,
                            output: out.as_mut_ptr() as *mut u8,
                            len,
                            elem: 8,
                            reduce: &combine,
                        }
                    }
                };
                // SAFETY: buffers of len bytes; every thread runs the same sequence.
                unsafe { s.run(num, &op, idle).unwrap() };
                if kind == 1 && me != root {
                    continue;
                }
                for (i, &o) in out.iter().enumerate() {
                    let want = if kind == 0 {
                        val(root, k, i)
                    } else {
                        (0..n - 1).rev().fold(val(n - 1, k, i), |acc, r| {
                            val(r, k, i).wrapping_mul(3).wrapping_add(acc)
                        })
                    };
                    assert_eq!(o, want, "n {n} rank {me} call {k} word {i}");
                }
            }
        });
    }

    #[test]
    fn every_op_at_1_to_8_ranks() {
        for n in 1..=8 {
            run_ranks(n, 256, 120, 1);
            run_ranks(n, 256, 40, 7);
        }
    }

    /// A bcast at rank 0 against a reduce elsewhere of the same length: the reducing ranks
    /// report MPI_ERR_OTHER, different reduce roots MPI_ERR_ROOT, and the next call works.
    #[test]
    fn other_operations_and_roots_fail() {
        on_ranks(3, 256, move |me, s, idle| {
            let inp = vec![me as u64 + 1; 50];
            let mut out = vec![0u64; 50];
            let op = if me == 0 {
                MidOp::Bcast {
                    root: 0,
                    buf: out.as_mut_ptr() as *mut u8,
                    len: 400,
                }
            } else {
                MidOp::Reduce {
                    root: 0,
                    input: inp.as_ptr() as *const u8,
                    output: std::ptr::null_mut(),
                    len: 400,
                    elem: 8,
                    reduce: &combine,
                }
            };
            // SAFETY: buffers of len bytes.
            let r = unsafe { s.run(3, &op, idle) };
            if me != 0 {
                let e = r.unwrap_err();
                assert_eq!(e.class, crate::standard::consts::MPI_ERR_OTHER, "{}", e.msg);
            }
            let op = MidOp::Reduce {
                root: if me == 0 { 0 } else { 1 },
                input: inp.as_ptr() as *const u8,
                output: out.as_mut_ptr() as *mut u8,
                len: 400,
                elem: 8,
                reduce: &combine,
            };
            // SAFETY: as above.
            let e = unsafe { s.run(4, &op, idle) }.unwrap_err();
            assert_eq!(e.class, crate::standard::consts::MPI_ERR_ROOT, "{}", e.msg);
            let op = MidOp::Allreduce {
                input: inp.as_ptr() as *const u8,
                output: out.as_mut_ptr() as *mut u8,
                len: 400,
                elem: 8,
                reduce: &combine,
            };
            // SAFETY: as above.
            unsafe { s.run(6, &op, idle) }.unwrap();
            assert!(out.iter().all(|&x| x == 12), "{:?}", &out[..4]);
        });
    }

    /// A rank that runs call 2 on another path (it takes no step of it) fails its peers'
    /// call 2 once it publishes a later call, and call 5 works on every rank.
    #[test]
    fn a_skipped_call_fails_and_the_next_works() {
        on_ranks(3, 256, move |me, s, idle| {
            let inp = vec![me as u64 + 1; 50];
            let mut out = vec![0u64; 50];
            let op = MidOp::Allreduce {
                input: inp.as_ptr() as *const u8,
                output: out.as_mut_ptr() as *mut u8,
                len: 400,
                elem: 8,
                reduce: &combine,
            };
            if me != 1 {
                // SAFETY: buffers of len bytes.
                let e = unsafe { s.run(2, &op, idle) }.unwrap_err();
                assert_eq!(e.class, crate::standard::consts::MPI_ERR_OTHER);
                assert!(
                    e.msg.contains("rank 1 ran this call on another path"),
                    "{}",
                    e.msg
                );
            }
            // SAFETY: buffers of len bytes.
            unsafe { s.run(5, &op, idle) }.unwrap();
            // c_0 op (c_1 op c_2) = 3 * 1 + (3 * 2 + 3).
            assert!(out.iter().all(|&x| x == 12), "{:?}", &out[..4]);
        });
    }

    #[test]
    fn a_length_mismatch_fails_on_every_rank_and_the_next_call_works() {
        let cap = 256;
        let n = 3;
        on_ranks(n, cap, move |me, s, idle| {
            let words = if me == 1 { 40 } else { 50 };
            let inp = vec![1u64; words];
            let mut out = vec![0u64; words];
            let op = MidOp::Allreduce {
                input: inp.as_ptr() as *const u8,
                output: out.as_mut_ptr() as *mut u8,
                len: words * 8,
                elem: 8,
                reduce: &combine,
            };
            // SAFETY: buffers of len bytes.
            let e = unsafe { s.run(1, &op, idle) }.unwrap_err();
            assert_eq!(e.class, crate::standard::consts::MPI_ERR_TRUNCATE);
            let inp = vec![me as u64; 50];
            let mut out = vec![0u64; 50];
            let op = MidOp::Allreduce {
                input: inp.as_ptr() as *const u8,
                output: out.as_mut_ptr() as *mut u8,
                len: 400,
                elem: 8,
                reduce: &combine,
            };
            // SAFETY: buffers of len bytes.
            unsafe { s.run(2, &op, idle) }.unwrap();
            // c_0 op (c_1 op c_2) = 3 * 0 + (3 * 1 + 2).
            assert!(out.iter().all(|&x| x == 5));
            // A bcast of 70 words (two segments) from rank 2 into 40 words at rank 1.
            let words = if me == 1 { 40 } else { 70 };
            let mut buf: Vec<u64> = (0..80).map(|i| if me == 2 { i } else { 999 }).collect();
            let op = MidOp::Bcast {
                root: 2,
                buf: buf.as_mut_ptr() as *mut u8,
                len: words * 8,
            };
            // SAFETY: buffers of len bytes.
            let r = unsafe { s.run(3, &op, idle) };
            if me == 1 {
                assert_eq!(
                    r.unwrap_err().class,
                    crate::standard::consts::MPI_ERR_TRUNCATE
                );
            } else {
                r.unwrap();
            }
            for (i, &b) in buf.iter().enumerate() {
                let want = if i < words || me == 2 { i as u64 } else { 999 };
                assert_eq!(b, want, "rank {me} word {i}");
            }
        });
    }
}
