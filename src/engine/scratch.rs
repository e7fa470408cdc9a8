//! Mid-size collectives through per-rank shared-memory scratch areas: the blocking bcast,
//! reduce and allreduce on MPI_COMM_WORLD between the flag slots (`engine/flag.rs`, up to
//! 1 KiB) and `GPUMPI_SHM_MID_MAX` (`dispatch/mid.rs` decides when it applies).
//!
//! Going through point-to-point, a 64 KiB allreduce pays for message matching, ring frames and
//! a copy into and out of the rings at every step of its schedule. Here every rank owns a
//! scratch area that every other rank can read (after the rings of its shared-memory segment,
//! `transport/shm.rs`): `[control: 128 bytes | data: two halves]`. The control block holds
//! `pos` (the last protocol step this rank finished, below), `len` of each half (the byte
//! length of the call that last used it, to detect mismatched counts) and this rank's own
//! bookkeeping.
//!
//! # Plan (pure: [`Plan`], [`Costs::one_phase`])
//! A message of `len` bytes of `elem`-byte elements is cut into segments of at most half an
//! area (whole elements); every segment is cut into one chunk per rank, as even as whole
//! elements allow (the first `rem` ranks get one element more). Consecutive segments (across
//! calls too) alternate between the two halves. A reduction segment takes one phase or two,
//! by a model of what it costs on this machine ([`Costs`], measured at MPI_Init and agreed on
//! by every rank): one phase waits once and has every rank reduce the whole segment, two phases
//! wait twice and have each rank reduce only its chunk.
//!
//! # Protocol
//! Calls are numbered k, the same on every rank and increasing from call to call (MPI_COMM_WORLD's
//! collective sequence: numbers skip the calls of other paths, so a mismatched call that some
//! ranks ran elsewhere does not move the numbering). Step `(k, s, p)` is encoded as
//! `k << 32 | s << 2 | p` (segment s, phase p), so steps only grow; a rank publishes a step by
//! storing it in its `pos` with Release, and waits for a peer's step by loading the peer's `pos`
//! with Acquire until it is at least that step; a peer whose `pos` went on to a later call
//! instead ran call k on another path (erroneous), and the call fails (a peer in call k cannot
//! leave it before this rank's part is done). Segment s of call k uses half `(k + s) mod 2`, a
//! choice every rank makes alike from values they share, even after a failed call.
//! For every segment s of call k, at rank `me`, in half h:
//! 1. Before writing half h: wait until every peer reached the OUT of this rank's previous
//!    segment in h (two segments ago in a run of calls of one segment count, so this rarely
//!    waits: a rank that finished the segment in between has already seen every peer past it
//!    in a reduction).
//! 2. `IN`: copy the input segment into my half (allreduce, reduce: every rank; bcast: the
//!    root), publish `(k, s, IN)`. On segment 0 the call word (length, operation, root) is
//!    written first and, once every rank published IN, compared by every rank: a mismatch makes
//!    every rank publish OUT (done reading) and return `MPI_ERR_TRUNCATE`, `MPI_ERR_ROOT` or
//!    `MPI_ERR_OTHER` at the same step. A bcast follows the root's
//!    length: the other ranks wait for the root's first IN and read it, a rank with a shorter
//!    buffer takes what fits and returns `MPI_ERR_TRUNCATE` after the last segment (as the flag
//!    slots do).
//! 3. One phase (a reduction segment the model gives one phase): a rank with an output waits
//!    for every peer's IN and reduces the whole segment of every rank's half, in rank order
//!    `c_0 op (c_1 op (... op c_{n-1}))`, into its output. A reduce's other ranks do not wait.
//! 3. Two phases, `RED`: wait for every peer's IN; reduce chunk `me` of every rank's half, in
//!    the same order, into my output (or a temporary where this rank has no output) and copy
//!    it over chunk `me` of my half (no peer reads that chunk of mine in this phase), publish
//!    `(k, s, RED)`; then, where this rank has an output, wait for every peer's RED and copy
//!    their chunks out.
//! 4. Bcast, at the other ranks: wait for the root's IN, copy the segment out.
//! 5. `OUT`: publish `(k, s, OUT)` (done reading the others' halves).
//!
//! A peer cannot overwrite what this rank reads: to write that half again it first waits for
//! this rank's OUT of the segment. Every element is reduced in one order (by its chunk's rank,
//! or by every rank alike), and every rank takes the same choice, so every rank gets the same
//! bits. Waiting goes through the caller's `idle` (progress, back off), so other traffic moves
//! and oversubscribed ranks yield; the fewer waits of the halves and of one phase matter most
//! there, where every wait that is not already over costs a context switch.

use crate::mpi::error::MpiResult;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes of the control block in front of a scratch area's data.
pub const CTRL: usize = crate::transport::shm::SCRATCH_CTRL_BYTES;
/// Offsets in the control block: `pos` has the first cache line; the second holds the call word
/// ([`call_word`]: length, operation, root) of each half (read by peers once per call) and this
/// rank's own bookkeeping (`OUT_OF` of each half), which no peer reads, and the number of the
/// call that last used each half (`CALL_OF`, read by peers that see this rank in a later call).
const LEN_OFF: usize = 64;
const OUT_OF: usize = 80;
const CALL_OF: usize = 96;
/// Flag checks between two calls of `idle` while waiting.
const CHECKS: usize = 64;

const IN: u64 = 1;
const RED: u64 = 2;
const OUT: u64 = 3;

/// What the choice between the one-phase and the two-phase reduction rests on, measured at
/// MPI_Init ([`Scratch::measure_local`] on every rank, a flag barrier timed) and agreed on by all ranks
/// (the largest of each), so every rank makes the same choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Costs {
    /// One synchronization of all ranks through shared flags (a flag-slot barrier), ns.
    pub sync_ns: u64,
    /// Reducing 1 KiB into 1 KiB (sum of doubles), ns.
    pub reduce_ns_per_kib: u64,
    /// Copying 1 KiB, ns.
    pub copy_ns_per_kib: u64,
}

impl Costs {
    /// Whether a reduction segment of `len` bytes over `n` ranks takes one phase: every rank
    /// reduces the whole segment from every rank's area (one wait for the peers' inputs), rather
    /// than two: each rank reduces its chunk, then copies the others' reduced chunks (a second
    /// wait). Per rank, one phase costs `n-1` reductions of the segment; two phases cost `n-1`
    /// reductions of a chunk (`len/n`), `n-1` chunk copies and one more synchronization. Both
    /// read the same bytes of the peers' areas at `n = 2`; above, one phase reads more, which
    /// the reduction cost stands for.
    pub fn one_phase(&self, n: usize, len: usize) -> bool {
        if n <= 1 {
            return true;
        }
        let (n, kib) = (n as f64, len as f64 / 1024.0);
        let one = (n - 1.0) * kib * self.reduce_ns_per_kib as f64;
        let two = (n - 1.0) / n * kib * (self.reduce_ns_per_kib + self.copy_ns_per_kib) as f64
            + self.sync_ns as f64;
        one <= two
    }
}

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
    /// Data bytes of one half of an area (one segment).
    half: usize,
    oversubscribed: bool,
    costs: Costs,
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
            half: (cap / 2) & !63,
            oversubscribed: false,
            // Until measured: one phase only where it reads no more than two (two ranks).
            costs: Costs {
                sync_ns: 0,
                reduce_ns_per_kib: 1,
                copy_ns_per_kib: 1,
            },
        }
    }

    /// This rank's reduction and copy speeds on the buffers the protocol uses: the best of a
    /// few timed runs, each copying 8 KiB from the heap into this rank's area (as an IN) and
    /// reducing it from there into the heap eight times, the two interleaved (`sync_ns` is left
    /// 0 for the caller to time). Takes some tens of microseconds.
    ///
    /// # Safety
    /// No collective has used the areas yet (MPI_Init): no peer reads this rank's area.
    pub unsafe fn measure_local(&self) -> Costs {
        use crate::mpi::datatype::{Basic, Elem};
        use crate::mpi::op::{reduce, BuiltinOp};
        const REPS: u64 = 8;
        let bytes = self.half.min(8 << 10) & !7;
        if bytes == 0 {
            return self.costs;
        }
        let a = vec![1u8; bytes];
        let mut b = vec![1u8; bytes];
        // SAFETY: the first `bytes` of this rank's half 0 are its own while no call runs.
        let area = std::slice::from_raw_parts_mut(self.data(self.me, 0), bytes);
        let timed = |f: &mut dyn FnMut()| {
            let t = std::time::Instant::now();
            for _ in 0..REPS {
                f();
            }
            t.elapsed().as_nanos() as u64
        };
        let (mut red, mut copy) = (u64::MAX, u64::MAX);
        for _ in 0..5 {
            copy = copy.min(timed(&mut || {
                area.copy_from_slice(std::hint::black_box(&a));
                std::hint::black_box(&mut *area);
            }));
            red = red.min(timed(&mut || {
                let _ = reduce(BuiltinOp::Sum, Elem::Basic(Basic::Double), area, &mut b);
                std::hint::black_box(&mut b);
            }));
        }
        let per_kib = |ns: u64| ns * 1024 / REPS / bytes as u64;
        Costs {
            sync_ns: 0,
            reduce_ns_per_kib: per_kib(red),
            copy_ns_per_kib: per_kib(copy),
        }
    }

    /// Use `costs` (agreed on by every rank) to choose between one and two reduction phases.
    pub fn with_costs(self, costs: Costs) -> Self {
        Scratch { costs, ..self }
    }

    pub fn costs(&self) -> Costs {
        self.costs
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

    /// Data bytes of one segment: half a scratch area (consecutive segments alternate
    /// between the two halves).
    pub fn cap(&self) -> usize {
        self.half
    }

    fn word(&self, r: usize, off: usize) -> &AtomicU64 {
        // SAFETY: new's contract: the control block is live, 64-byte aligned, CTRL bytes long.
        unsafe { &*((self.bases[r] + off) as *const AtomicU64) }
    }

    fn data(&self, r: usize, h: usize) -> *mut u8 {
        (self.bases[r] + CTRL + h * self.half) as *mut u8
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

    /// Wait until rank r reached `step` (of call `step >> 32`, in half `h`). A peer may be
    /// in a later call already: it can run at most one segment ahead, in the other half, as
    /// reusing half `h` waits for this rank's OUT of this segment. So its `CALL_OF` of half
    /// `h` still names this call if it ran it; anything else means it ran this call on another
    /// path (erroneous), and the call fails.
    fn wait_step(
        &self,
        idle: &mut dyn FnMut() -> MpiResult<()>,
        r: usize,
        step: u64,
        h: usize,
    ) -> MpiResult<()> {
        self.wait(idle, |x| x.reached(r, step))?;
        if self.word(r, 0).load(Ordering::Acquire) >> 32 != step >> 32
            && self.word(r, CALL_OF + 8 * h).load(Ordering::Relaxed) != step >> 32
        {
            crate::mpi_bail!(MPI_ERR_OTHER, "rank {r} ran this call on another path");
        }
        Ok(())
    }

    /// [`Scratch::wait_step`] for every peer.
    fn wait_all(
        &self,
        idle: &mut dyn FnMut() -> MpiResult<()>,
        step: u64,
        h: usize,
    ) -> MpiResult<()> {
        for r in (0..self.bases.len()).filter(|&r| r != self.me) {
            self.wait_step(idle, r, step, h)?;
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
        // Segments alternate between the halves of every area; every rank numbers them alike.
        let half = |s: usize| ((k + s as u64) & 1) as usize;
        // A bcast follows the root's length (the root publishes it with its first IN): a rank
        // whose buffer is shorter takes what fits and reports MPI_ERR_TRUNCATE at the end.
        let mut sent = len;
        let word = call_word(op);
        if !reduces && root != me {
            self.wait_step(idle, root, k << 32 | IN, half(0))?;
            let theirs = self
                .word(root, LEN_OFF + 8 * half(0))
                .load(Ordering::Relaxed);
            if let Some(e) = call_mismatch(word, theirs, root) {
                return Err(e);
            }
            sent = word_len(theirs);
        }
        let Some(plan) = Plan::new(n, elem, sent, self.half) else {
            crate::mpi_bail!(
                MPI_ERR_INTERN,
                "an element of {elem} bytes does not fit a scratch segment of {} bytes",
                self.half
            );
        };
        let reduce = match *op {
            MidOp::Reduce { reduce, .. } | MidOp::Allreduce { reduce, .. } => Some(reduce),
            MidOp::Bcast { .. } => None,
        };
        // Where this rank's result goes (null: a reduce's non-root, which has none).
        let output: *mut u8 = match *op {
            MidOp::Allreduce { output, .. } => output,
            MidOp::Reduce { output, .. } if root == me => output,
            _ => std::ptr::null_mut(),
        };
        let mut tmp: Vec<u8> = Vec::new();
        for s in 0..plan.segments() {
            let step = |p: u64| k << 32 | (s as u64) << 2 | p;
            let (off, slen) = plan.segment(s);
            let h = half(s);
            let mine = self.data(me, h);
            // 1. The peers are done with what this rank exposed in this half last (two segments
            //    ago: usually long since true, so no wait).
            let prev = self.word(me, OUT_OF + 8 * h).load(Ordering::Relaxed);
            self.wait(idle, |x| x.all_reached(prev))?;
            let done = |x: &Self| {
                x.publish(step(OUT));
                x.word(me, OUT_OF + 8 * h)
                    .store(step(OUT), Ordering::Relaxed);
            };
            // 2. IN.
            if s == 0 {
                self.word(me, LEN_OFF + 8 * h)
                    .store(word, Ordering::Relaxed);
            }
            self.word(me, CALL_OF + 8 * h).store(k, Ordering::Relaxed);
            let src = match *op {
                MidOp::Bcast { buf, .. } if root == me => Some(buf as *const u8),
                MidOp::Bcast { .. } => None,
                MidOp::Reduce { input, .. } | MidOp::Allreduce { input, .. } => Some(input),
            };
            if let Some(src) = src {
                // SAFETY: the caller's buffer holds len bytes, the segment fits the half; the
                // half is ours (step 1).
                std::ptr::copy_nonoverlapping(src.add(off), mine, slen);
            }
            self.publish(step(IN));
            let one = reduces && self.costs.one_phase(n, slen);
            if reduces && (s == 0 || !one || !output.is_null()) {
                self.wait_all(idle, step(IN), h)?;
            }
            if s == 0 && reduces {
                // Every rank compares every rank's length after their IN: a mismatch is seen
                // by every rank at this same step, so all return together.
                let e = (0..n).find_map(|r| {
                    call_mismatch(
                        word,
                        self.word(r, LEN_OFF + 8 * h).load(Ordering::Relaxed),
                        r,
                    )
                });
                if let Some(e) = e {
                    // Done reading: a peer's next use of this half waits for this OUT before
                    // it writes its call there again, so every rank sees this call's words.
                    done(self);
                    return Err(e);
                }
            }
            let f = |i: &[u8], o: &mut [u8]| reduce.map_or(Ok(()), |f| f(i, o));
            // The segment, or chunk, at byte `coff` of every rank's half reduced into `out`,
            // in rank order c_0 op (c_1 op (... op c_{n-1})).
            let fold = |coff: usize, clen: usize, out: *mut u8| -> MpiResult<()> {
                if clen == 0 {
                    return Ok(());
                }
                // SAFETY: every rank's half holds the segment (their IN, Acquire above); `out`
                // is clen writable bytes distinct from every scratch area.
                std::ptr::copy_nonoverlapping(self.data(n - 1, h).add(coff), out, clen);
                let o = std::slice::from_raw_parts_mut(out, clen);
                for r in (0..n - 1).rev() {
                    f(
                        std::slice::from_raw_parts(self.data(r, h).add(coff), clen),
                        o,
                    )?;
                }
                Ok(())
            };
            if one {
                // 3'. One phase: the whole segment from every rank's half into my output.
                if !output.is_null() {
                    fold(0, slen, output.add(off))?;
                }
            } else if reduces {
                // 3. RED: my chunk, then it goes over chunk `me` of my half (no peer reads that
                //    chunk of mine in this phase).
                let (coff, clen) = plan.chunk(s, me);
                let out = if output.is_null() {
                    tmp.resize(clen, 0);
                    tmp.as_mut_ptr()
                } else {
                    output.add(off + coff)
                };
                fold(coff, clen, out)?;
                // SAFETY: clen bytes at out (just reduced) and in my half.
                std::ptr::copy_nonoverlapping(out, mine.add(coff), clen);
                self.publish(step(RED));
                // 4. The other ranks' reduced chunks.
                if !output.is_null() {
                    for r in (0..n).filter(|&r| r != me) {
                        self.wait_step(idle, r, step(RED), h)?;
                        let (coff, clen) = plan.chunk(s, r);
                        // SAFETY: rank r's half holds its reduced chunk r (its RED, Acquire
                        // above); the output holds len bytes.
                        std::ptr::copy_nonoverlapping(
                            self.data(r, h).add(coff),
                            output.add(off + coff),
                            clen,
                        );
                    }
                }
            } else if root != me {
                if let MidOp::Bcast { buf, .. } = *op {
                    self.wait_step(idle, root, step(IN), h)?;
                    // SAFETY: the root's half holds the segment (its IN, Acquire above); buf
                    // holds len bytes, of which this copies only those below len.
                    let fit = slen.min(len.saturating_sub(off));
                    std::ptr::copy_nonoverlapping(self.data(root, h), buf.add(off), fit);
                }
            }
            done(self);
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

    /// Costs under which every reduction takes one phase, and under which none does.
    const ONE: Costs = Costs {
        sync_ns: 1000,
        reduce_ns_per_kib: 0,
        copy_ns_per_kib: 0,
    };
    const TWO: Costs = Costs {
        sync_ns: 0,
        reduce_ns_per_kib: 100,
        copy_ns_per_kib: 0,
    };

    /// Run `body(scratch, idle)` on one thread per rank over `areas(n, cap)`.
    fn on_ranks(
        n: usize,
        cap: usize,
        body: impl Fn(usize, Scratch, &mut dyn FnMut() -> MpiResult<()>) + Send + Copy + 'static,
    ) {
        on_ranks_with(n, cap, TWO, body)
    }

    fn on_ranks_with(
        n: usize,
        cap: usize,
        costs: Costs,
        body: impl Fn(usize, Scratch, &mut dyn FnMut() -> MpiResult<()>) + Send + Copy + 'static,
    ) {
        let bases = areas(n, cap);
        let threads: Vec<_> = (0..n)
            .map(|me| {
                std::thread::spawn(move || {
                    // SAFETY: the areas are leaked, aligned, zeroed and shared by the threads.
                    let s = unsafe { Scratch::new(bases, me, cap) }.with_costs(costs);
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
    fn run_ranks(n: usize, cap: usize, calls: u64, stride: u64, costs: Costs) {
        on_ranks_with(n, cap, costs, move |me, s, idle| {
            for k in 1..=calls {
                // Call numbers with gaps (the calls of other paths take none).
                let num = k * stride;
                let seg = s.cap() / 8;
                let words = [0, 1, 3, n - 1, n + 1, seg, seg + 1, 3 * seg + 5][k as usize % 8];
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
            run_ranks(n, 256, 120, 1, TWO);
            run_ranks(n, 256, 120, 1, ONE);
            run_ranks(n, 256, 40, 7, TWO);
            run_ranks(n, 256, 40, 7, ONE);
        }
    }

    #[test]
    fn segments_alternate_halves_and_phases_mix() {
        // Costs under which short segments take one phase and long ones two (at 3 ranks:
        // one phase up to 512 bytes), over segments of 1 KiB: calls switch between the two
        // protocols and halves from call to call.
        let mixed = Costs {
            sync_ns: 1000,
            reduce_ns_per_kib: 1000,
            copy_ns_per_kib: 0,
        };
        assert!(mixed.one_phase(3, 512) && !mixed.one_phase(3, 1024));
        run_ranks(3, 2048 + 64, 200, 1, mixed);
    }

    #[test]
    fn one_phase_follows_the_measured_costs() {
        // A machine where a flag round costs 500 ns, reducing 1 KiB 60 ns, copying it 40 ns.
        let idle = Costs {
            sync_ns: 500,
            reduce_ns_per_kib: 60,
            copy_ns_per_kib: 40,
        };
        // Two ranks: one phase reads no more than two; it wins until the extra reduction
        // (half the segment) costs more than a synchronization: 50 KiB here.
        assert!(idle.one_phase(2, 2 << 10));
        assert!(idle.one_phase(2, 48 << 10));
        assert!(!idle.one_phase(2, 64 << 10));
        // Four ranks: one phase reduces three whole segments; it wins below ~4.7 KiB.
        assert!(idle.one_phase(4, 4 << 10));
        assert!(!idle.one_phase(4, 8 << 10));
        // The same machine oversubscribed: a synchronization is a context switch (tens of us),
        // so one phase wins up to far larger segments.
        let busy = Costs {
            sync_ns: 40_000,
            ..idle
        };
        assert!(busy.one_phase(4, 256 << 10));
        assert!(!busy.one_phase(8, 256 << 10));
        // A machine where reducing is as cheap as copying: at two ranks one phase always wins.
        let fast = Costs {
            sync_ns: 200,
            reduce_ns_per_kib: 40,
            copy_ns_per_kib: 40,
        };
        assert!(fast.one_phase(2, 1 << 30));
        // One rank: nothing to wait for either way.
        assert!(idle.one_phase(1, 1 << 30));
        // Monotonic: a shorter segment never takes more phases than a longer one.
        for n in 2..=8 {
            let mut prev = true;
            for kib in 0..512 {
                let one = idle.one_phase(n, kib << 10);
                assert!(
                    prev || !one,
                    "n {n}: one phase at {kib} KiB after two below"
                );
                prev = one;
            }
        }
    }

    #[test]
    fn local_costs_are_measured_on_the_area() {
        on_ranks(1, 1 << 14, |_, s, _| {
            // SAFETY: no call has used the areas.
            let c = unsafe { s.measure_local() };
            assert_eq!(c.sync_ns, 0);
            // 8 KiB take more than a nanosecond on any machine.
            assert!(c.reduce_ns_per_kib > 0 || c.copy_ns_per_kib > 0, "{c:?}");
        });
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
