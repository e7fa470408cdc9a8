//! Collective consistency check: ranks of one node that call mismatched collectives (different
//! byte counts that send them down different paths, different collectives, different roots at
//! the same point) get an error instead of waiting for each other forever.
//!
//! Every rank, when it starts a collective, publishes a [`Record`] of it into a small ring in page
//! 0 of its own shared-memory segment (`transport/shm.rs`): the communicator's context id, the
//! communicator's collective sequence number (every rank counts the collectives of a
//! communicator the same way), the collective, its root, its byte count and the path the rank
//! chose. That is a handful of stores; nothing is read on the fast path.
//!
//! A rank that has waited inside a collective for a while ([`Watch::poll`], called from the
//! waits once their back-off sleeps, at most every [`CHECK_EVERY`]) reads its peers' rings for
//! the same (context, sequence). A peer whose record disagrees ([`mismatch`]) makes the call
//! fail with a message naming both ranks' values. The check is symmetric: each waiting rank finds
//! the disagreement itself, and a rank that finished its side of the call never waits for it.
//! A record goes to the entry its (context, sequence) hashes to, so a communicator's last
//! [`ENTRIES`] - [`INNER_ENTRIES`] records of calls are kept (internal collectives of a call have
//! entries of their own) (fewer while other communicators' collectives interleave), the
//! record of a peer that already went on to later collectives is still found, and a reader looks
//! at one entry.
//!
//! Entry layout (4 words of 8 bytes): `[stamp | bytes | kind, path, root | check]`. The stamp
//! (valid bit, context id, sequence) is stored last with Release, `check` is a hash of the other
//! three words; a reader takes an entry only if it reads the same stamp before and after the
//! other words and the hash matches, so an entry being rewritten (also by two threads at once
//! under MPI_THREAD_MULTIPLE) is never taken for a record. Writing costs four plain stores.

use crate::coll::CollKind;
use crate::mpi::error::MpiError;
use crate::standard::consts::{MPI_ERR_OTHER, MPI_ERR_ROOT, MPI_ERR_TRUNCATE};
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A disagreement a rank found in a call: its class, the rank (in the communicator) whose
/// call disagrees, and that call where it is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Found {
    pub class: i32,
    pub rank: u32,
    pub call: Option<Record>,
}

/// Records kept per rank.
pub const ENTRIES: usize = 16;
/// Bytes of one record.
const ENTRY: usize = 32;
/// Bytes of a record sent between nodes ([`Record::to_bytes`]).
pub const RECORD_BYTES: usize = ENTRY;
/// Bytes of one rank's ring.
pub const AREA: usize = ENTRIES * ENTRY;
const _: () = assert!(AREA <= crate::transport::shm::COLL_RECORDS_BYTES);
/// A waiting rank reads its peers' records at most this often.
pub const CHECK_EVERY: Duration = Duration::from_millis(20);
/// `root` of a collective without one.
pub const NO_ROOT: u32 = u32::MAX;
/// `bytes` of a collective whose byte count may differ between correct ranks (the v-forms,
/// gather and scatter, whose counts are significant at some ranks only; for the others the
/// byte count is the vector's, or one block's).
pub const ANY_BYTES: u64 = u64::MAX;
const VALID: u64 = 1 << 63;

/// Where a rank runs a collective.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Path {
    /// MPI_COMM_WORLD's flag slots (`engine/flag.rs`).
    Flag = 1,
    /// A schedule over point-to-point messages (`engine/coll.rs`).
    Schedule = 2,
    /// GPU-native (`gpu/nvlink/`, `gpu/resident/`).
    Gpu = 3,
    /// MPI_COMM_WORLD's scratch areas (`engine/scratch.rs`).
    Scratch = 4,
    /// Not chosen yet: the GPU paths' agreement (the ranks decide together whether the call
    /// runs on a GPU path, on whatever memory their own buffers are in). Not compared with
    /// the other side's path.
    Choosing = 5,
}

impl Path {
    fn from_u8(v: u8) -> Option<Path> {
        match v {
            1 => Some(Path::Flag),
            2 => Some(Path::Schedule),
            3 => Some(Path::Gpu),
            4 => Some(Path::Scratch),
            5 => Some(Path::Choosing),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Path::Flag => "flag slots",
            Path::Schedule => "schedule path",
            Path::Gpu => "GPU path",
            Path::Scratch => "scratch areas",
            Path::Choosing => "choosing a path",
        }
    }
}

/// One rank's description of one collective call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    pub ctx: u32,
    pub seq: u32,
    pub kind: CollKind,
    /// [`NO_ROOT`] for collectives without a root.
    pub root: u32,
    /// [`ANY_BYTES`] where the count may differ between ranks of a correct program.
    pub bytes: u64,
    pub path: Path,
    /// A number the path's ranks must agree on in this call (its low 16 bits; the GPU
    /// resident kernels' flag value), 0 where the path has none.
    pub step: u16,
}

impl Record {
    /// The record of a call: the root and byte count are kept only where every rank of a correct
    /// program passes the same value.
    pub fn new(ctx: u32, seq: u32, kind: CollKind, root: usize, bytes: usize, path: Path) -> Self {
        use CollKind as K;
        let rooted = matches!(
            kind,
            K::Bcast | K::Reduce | K::Gather | K::Gatherv | K::Scatter | K::Scatterv
        );
        let sized = matches!(
            kind,
            K::Barrier
                | K::Bcast
                | K::Reduce
                | K::Allreduce
                | K::Scan
                | K::Exscan
                | K::Allgather
                | K::Alltoall
                | K::ReduceScatterBlock
        );
        Record {
            ctx,
            seq,
            kind,
            root: if rooted { root as u32 } else { NO_ROOT },
            bytes: if sized { bytes as u64 } else { ANY_BYTES },
            path,
            step: 0,
        }
    }

    fn stamp(&self) -> u64 {
        stamp(self.ctx, self.seq)
    }

    /// The collective, path, step and root in one word.
    pub(super) fn call_word(&self) -> u64 {
        let kind = CollKind::ALL
            .iter()
            .position(|&k| k == self.kind)
            .unwrap_or(0) as u64;
        kind | (self.path as u64) << 8 | (self.step as u64) << 16 | (self.root as u64) << 32
    }

    /// The record of (ctx, seq) whose [`Record::call_word`] is `w` and byte count `bytes`.
    pub(super) fn from_call_word(ctx: u32, seq: u32, w: u64, bytes: u64) -> Option<Record> {
        Some(Record {
            ctx,
            seq,
            kind: *CollKind::ALL.get((w & 0xff) as usize)?,
            path: Path::from_u8((w >> 8) as u8)?,
            step: (w >> 16) as u16,
            root: (w >> 32) as u32,
            bytes,
        })
    }

    fn encode(&self) -> [u64; 4] {
        let w0 = self.stamp();
        let w2 = self.call_word();
        [w0, self.bytes, w2, check(w0, self.bytes, w2)]
    }

    fn decode(w: [u64; 4]) -> Option<Record> {
        if w[0] & VALID == 0 || w[3] != check(w[0], w[1], w[2]) {
            return None;
        }
        Record::from_call_word(((w[0] >> 32) as u32) & !(1 << 31), w[0] as u32, w[2], w[1])
    }

    /// The record as [`RECORD_BYTES`] bytes (its ring entry's words), to send to a rank on
    /// another node.
    pub fn to_bytes(&self) -> [u8; RECORD_BYTES] {
        let mut b = [0u8; RECORD_BYTES];
        for (i, w) in self.encode().iter().enumerate() {
            b[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        b
    }

    /// The record of (`ctx`, `seq`) in `b` ([`Record::to_bytes`]); `None` when `b` is not one.
    pub fn from_bytes(b: &[u8], ctx: u32, seq: u32) -> Option<Record> {
        if b.len() != RECORD_BYTES {
            return None;
        }
        let w: [u64; 4] = std::array::from_fn(|i| {
            u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().expect("8 bytes"))
        });
        Record::decode(w).filter(|r| r.ctx == ctx & 0x7fff_ffff && r.seq == seq)
    }

    /// "bcast (root 0) of 40 bytes (flag slots)".
    pub(super) fn describe(&self) -> String {
        let mut s = self.kind.name().to_string();
        if self.root != NO_ROOT {
            s += &format!(" (root {})", self.root);
        }
        if self.bytes != ANY_BYTES {
            s += &format!(" of {} bytes", self.bytes);
        }
        s += &format!(" ({}", self.path.name());
        if self.step != 0 {
            s += &format!(", step {}", self.step);
        }
        s + ")"
    }
}

fn stamp(ctx: u32, seq: u32) -> u64 {
    VALID | ((ctx as u64 & 0x7fff_ffff) << 32) | seq as u64
}

/// The hash an entry's last word holds.
fn check(w0: u64, w1: u64, w2: u64) -> u64 {
    (w0 ^ w1.rotate_left(21) ^ w2.rotate_left(42) ^ 0x5bd1_e995_c2b2_ae35)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// Entries at the end of the ring that hold the records of internal collectives (a GPU path's
/// agreement, set-up and barriers: sequence fields with bit 30, [`CallNo::tag`]); the calls'
/// records take the others. So an internal collective never overwrites the record of the call
/// it runs inside, which the peers' checks of that call read while the call's class is decided.
pub const INNER_ENTRIES: usize = 4;

/// The entry of (ctx, seq).
fn entry(ctx: u32, seq: u32) -> usize {
    let h = (seq as usize).wrapping_add((ctx as usize).wrapping_mul(5));
    if seq & 0x4000_0000 != 0 {
        ENTRIES - INNER_ENTRIES + h % INNER_ENTRIES
    } else {
        h % (ENTRIES - INNER_ENTRIES)
    }
}

/// How two ranks' records of the same (context, sequence) disagree, as an error class; `None`
/// when they agree.
pub fn mismatch(mine: &Record, theirs: &Record) -> Option<i32> {
    if mine.kind != theirs.kind {
        return Some(MPI_ERR_OTHER);
    }
    if mine.root != theirs.root {
        return Some(MPI_ERR_ROOT);
    }
    if mine.bytes != theirs.bytes {
        return Some(MPI_ERR_TRUNCATE);
    }
    let chosen = mine.path != Path::Choosing && theirs.path != Path::Choosing;
    if chosen && (mine.path != theirs.path || mine.step != theirs.step) {
        return Some(MPI_ERR_OTHER);
    }
    None
}

/// The error of a disagreement found by `my_rank` with `peer` (ranks in the communicator).
pub fn mismatch_error(
    class: i32,
    my_rank: usize,
    mine: &Record,
    peer: usize,
    theirs: &Record,
) -> MpiError {
    let comm = comm_name(mine.ctx);
    MpiError::new(
        class,
        format!(
            "collective mismatch on {comm} (its collective {}): rank {peer} called {}, rank {my_rank} called {}",
            call_name(mine.seq),
            theirs.describe(),
            mine.describe()
        ),
    )
}

/// How a mismatch message names the communicator of context id `ctx`.
pub(super) fn comm_name(ctx: u32) -> String {
    match ctx {
        0 => "MPI_COMM_WORLD".to_string(),
        1 => "MPI_COMM_SELF".to_string(),
        c => format!("the communicator of context id {c}"),
    }
}

/// The number of [`agreement_words`].
pub const AGREEMENT_WORDS: usize = 4;

/// Words a call adds to an exchange every rank of the communicator makes with a bitwise AND
/// (the GPU paths' agreement): its collective (bits 0..8) with its root (bits 8..64), and its
/// byte count, each followed by its complement. ANDed over the ranks, a word and its
/// complement AND to all ones only where every rank has the same value ([`disagreed`]), so
/// every rank reaches the same verdict. Four words: with a flag byte they stay within the 48
/// bytes a round of the flag slots carries in its flag's cache line (`engine::flag`).
pub fn agreement_words(rec: &Record) -> [u64; AGREEMENT_WORDS] {
    let kind = CollKind::ALL
        .iter()
        .position(|&k| k == rec.kind)
        .unwrap_or(0) as u64;
    let call = kind & 0xff | (rec.root as u64) << 8;
    [call, !call, rec.bytes, !rec.bytes]
}

/// The class of the first field that differs between the ranks whose [`agreement_words`]
/// ANDed to `and`, in the order of [`mismatch`] (collective, root, byte count); `None`: every
/// rank called the same.
pub fn disagreed(and: &[u64; AGREEMENT_WORDS]) -> Option<i32> {
    // Bits some ranks have set and others clear.
    let differs = |i: usize| !(and[i] | and[i + 1]) | (and[i] & and[i + 1]);
    let call = differs(0);
    if call & 0xff != 0 {
        Some(MPI_ERR_OTHER)
    } else if call != 0 {
        Some(MPI_ERR_ROOT)
    } else if differs(2) != 0 {
        Some(MPI_ERR_TRUNCATE)
    } else {
        None
    }
}

/// The collective (its index in `CollKind::ALL`), root and byte count in a rank's
/// [`agreement_words`].
pub fn agreement_fields(w: &[u64; AGREEMENT_WORDS]) -> (usize, u32, u64) {
    ((w[0] & 0xff) as usize, (w[0] >> 8) as u32, w[2])
}

/// The record rings of every rank of the job, as seen by this process.
#[derive(Clone, Copy)]
pub struct Rings {
    /// Address of each world rank's ring, 0 where it is not mapped here (another node).
    bases: &'static [usize],
    me: usize,
}

impl Rings {
    /// # Safety
    /// Every non-zero `bases[r]` is the start of rank r's ring ([`AREA`] bytes, 8-byte aligned,
    /// zero-filled before any rank used it, readable by this process, writable for `me`), mapped
    /// for as long as this value and its copies are used.
    pub unsafe fn new(bases: &'static [usize], me: usize) -> Self {
        assert!(me < bases.len() && bases[me] != 0);
        Rings { bases, me }
    }

    pub fn size(&self) -> usize {
        self.bases.len()
    }

    fn word(&self, r: usize, entry: usize, w: usize) -> &AtomicU64 {
        // SAFETY: new's contract: bases[r] (non-zero, checked by callers) is a live, aligned
        // ring of ENTRIES entries of 4 words.
        unsafe { &*((self.bases[r] + entry * ENTRY + w * 8) as *const AtomicU64) }
    }

    /// Publish this rank's record of a call it starts.
    #[inline]
    pub fn publish(&self, rec: &Record) {
        let e = entry(rec.ctx, rec.seq);
        let w = rec.encode();
        self.word(self.me, e, 1).store(w[1], Ordering::Relaxed);
        self.word(self.me, e, 2).store(w[2], Ordering::Relaxed);
        self.word(self.me, e, 3).store(w[3], Ordering::Relaxed);
        self.word(self.me, e, 0).store(w[0], Ordering::Release);
    }

    /// World rank r's record of (ctx, seq), if its ring holds one.
    pub fn find(&self, r: usize, ctx: u32, seq: u32) -> Option<Record> {
        if self.bases.get(r).is_none_or(|&b| b == 0) {
            return None;
        }
        let want = stamp(ctx, seq);
        let e = entry(ctx, seq);
        if self.word(r, e, 0).load(Ordering::Acquire) != want {
            return None;
        }
        let w1 = self.word(r, e, 1).load(Ordering::Relaxed);
        let w2 = self.word(r, e, 2).load(Ordering::Relaxed);
        let w3 = self.word(r, e, 3).load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        if self.word(r, e, 0).load(Ordering::Relaxed) != want {
            return None;
        }
        Record::decode([want, w1, w2, w3])
    }

    /// Forget this rank's records of context `ctx` (its communicator is freed; the id may be
    /// given to a new communicator, whose sequence starts again).
    pub fn forget(&self, ctx: u32) {
        for e in 0..ENTRIES {
            let s = self.word(self.me, e, 0).load(Ordering::Relaxed);
            if s & VALID != 0 && ((s >> 32) as u32 & 0x7fff_ffff) == ctx & 0x7fff_ffff {
                self.word(self.me, e, 0).store(0, Ordering::Release);
            }
        }
    }
}

/// A collective call's number on its communicator: the communicator's sequence number `seq`
/// (every rank numbers a communicator's collective calls the same way, whatever path each
/// takes), and `sub` for the library's own collectives inside the call (the GPU paths'
/// agreement, set-up and barriers: 1, 2, ... in the call; 0: the call itself). Everything a
/// call numbers (its message tags, its record, its round of the world's flag slots) comes
/// from this pair, so after a call that the ranks ran differently (an erroneous program:
/// one rank made internal collectives that another did not), the next call has the same
/// number on every rank again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallNo {
    pub seq: u64,
    pub sub: u32,
}

impl CallNo {
    /// Internal collectives one call may make.
    pub const MAX_SUB: u32 = 254;

    pub fn new(seq: u64) -> Self {
        CallNo { seq, sub: 0 }
    }

    /// The `sub`th internal collective of this call (1 <= sub <= [`CallNo::MAX_SUB`]).
    pub fn nested(self, sub: u32) -> Self {
        debug_assert!(self.sub == 0 && (1..=Self::MAX_SUB).contains(&sub));
        CallNo { seq: self.seq, sub }
    }

    /// The call's message tag (on the communicator's collective context) and the sequence
    /// field of its record: the call itself in `0 .. 2^30`, internal collectives in
    /// `2^30 .. 2^31`.
    pub fn tag(self) -> i32 {
        if self.sub == 0 {
            (self.seq & 0x3fff_ffff) as i32
        } else {
            (0x4000_0000 | ((self.seq << 8 | self.sub as u64) & 0x3fff_ffff)) as i32
        }
    }

    /// The number of the call's round of MPI_COMM_WORLD's flag slots (`engine::flag`):
    /// increasing with (seq, sub), the call's own round after its internal ones (a GPU path
    /// that agrees in a flag round, then declines to the flag path, in the same call).
    pub fn flag(self) -> u64 {
        (self.seq + 1) << 8 | if self.sub == 0 { 255 } else { self.sub as u64 }
    }
}

/// "#12" for a call, "#12 (internal step 2)" for an internal collective (from a record's
/// sequence field, [`CallNo::tag`]).
pub(super) fn call_name(seq: u32) -> String {
    if seq & 0x4000_0000 == 0 {
        format!("#{seq}")
    } else {
        format!(
            "#{} (its internal collective {})",
            (seq & 0x3fff_ffff) >> 8,
            seq & 0xff
        )
    }
}

std::thread_local! {
    /// The record of the GPU-path call this thread is inside ([`Outer`]): the waits of its
    /// internal collectives check it too.
    static OUTER: std::cell::Cell<Option<Record>> = const { std::cell::Cell::new(None) };
}

/// While alive, the waits of this thread's collectives also compare `rec` (the call that
/// runs them as its internal collectives, such as a GPU path's agreement) with the peers'
/// records: a peer that called something else at that point makes them fail instead of
/// waiting for internal collectives the peer never makes.
pub struct Outer {
    prev: Option<Record>,
}

impl Outer {
    pub fn enter(rec: Record) -> Outer {
        Outer {
            prev: OUTER.with(|o| o.replace(Some(rec))),
        }
    }
}

impl Drop for Outer {
    fn drop(&mut self) {
        OUTER.with(|o| o.set(self.prev));
    }
}

/// The check of one call while a rank waits in it.
pub struct Watch {
    rec: Record,
    /// Communicator rank -> world rank; `None`: the identity (MPI_COMM_WORLD).
    peers: Option<Arc<[usize]>>,
    my_rank: usize,
    /// When the wait was first seen to be slow, and when the peers were last read.
    since: Option<Instant>,
    last: Option<Instant>,
    /// Calls of `poll`: the clock is read on every [`POLL_CLOCK`]th.
    polls: u32,
}

/// `poll` reads the clock once per this many calls (a wait calls it once per progress pass).
const POLL_CLOCK: u32 = 32;

impl Watch {
    pub fn new(rec: Record, peers: Option<Arc<[usize]>>, my_rank: usize) -> Self {
        Watch {
            rec,
            peers,
            my_rank,
            since: None,
            last: None,
            polls: 0,
        }
    }

    pub fn record(&self) -> &Record {
        &self.rec
    }

    /// Replace the record (published again: the call chose its path).
    pub fn set_record(&mut self, rec: Record) {
        self.rec = rec;
    }

    /// Call while waiting without progress (after the back-off stopped spinning): reads the
    /// peers' records once the wait has gone on for [`CHECK_EVERY`], then at most that often.
    pub fn poll(&mut self, rings: &Rings) -> Result<(), MpiError> {
        self.poll_with(rings, || Ok(()))
    }

    /// [`Watch::poll`] that also runs `more` (another check of the call, such as the notes
    /// of the messages waiting for it: `engine::collnote`) whenever it reads the records.
    pub fn poll_with(
        &mut self,
        rings: &Rings,
        more: impl FnOnce() -> Result<(), MpiError>,
    ) -> Result<(), MpiError> {
        self.polls = self.polls.wrapping_add(1);
        if !self.polls.is_multiple_of(POLL_CLOCK) {
            return Ok(());
        }
        self.poll_now_with(rings, more)
    }

    /// [`Watch::poll`] for waits that call it rarely (each call reads the clock).
    pub fn poll_now(&mut self, rings: &Rings) -> Result<(), MpiError> {
        self.poll_now_with(rings, || Ok(()))
    }

    fn poll_now_with(
        &mut self,
        rings: &Rings,
        more: impl FnOnce() -> Result<(), MpiError>,
    ) -> Result<(), MpiError> {
        let now = Instant::now();
        let since = *self.since.get_or_insert(now);
        if now.duration_since(since) < CHECK_EVERY
            || self
                .last
                .is_some_and(|l| now.duration_since(l) < CHECK_EVERY)
        {
            return Ok(());
        }
        self.last = Some(now);
        self.check(rings)?;
        more()
    }

    /// Compare with every peer's record of the call this one is an internal collective of
    /// ([`Outer`]), then of this call (those published so far). The outer call's disagreement
    /// wins: ranks whose calls differ take different paths, whose internal collectives then
    /// differ too, and the class must name the calls the program made (a peer publishes its
    /// record of the outer call before any internal collective of it).
    pub fn check(&self, rings: &Rings) -> Result<(), MpiError> {
        if let Some(o) = self.outer() {
            self.disagreement(rings, &o)?;
        }
        self.disagreement(rings, &self.rec)
    }

    /// The record of the call this one is an internal collective of, if any.
    fn outer(&self) -> Option<Record> {
        OUTER
            .with(|o| o.get())
            .filter(|o| o.ctx == self.rec.ctx && o.seq != self.rec.seq)
    }

    /// The first peer whose record of `rec`'s call disagrees with it.
    fn disagreement(&self, rings: &Rings, rec: &Record) -> Result<(), MpiError> {
        match self.first_disagreement(rings, rec) {
            Some(f) => Err(mismatch_error(
                f.class,
                self.my_rank,
                rec,
                f.rank as usize,
                &f.call.expect("a record read"),
            )),
            None => Ok(()),
        }
    }

    /// The first peer (communicator rank) whose record of `rec`'s call disagrees with it, with
    /// the class and that record.
    fn first_disagreement(&self, rings: &Rings, rec: &Record) -> Option<Found> {
        let n = self.peers.as_ref().map_or(rings.size(), |p| p.len());
        (0..n).filter(|&r| r != self.my_rank).find_map(|cr| {
            let w = self.peers.as_ref().map_or(cr, |p| p[cr]);
            let t = rings.find(w, rec.ctx, rec.seq)?;
            mismatch(rec, &t).map(|class| Found {
                class,
                rank: cr as u32,
                call: Some(t),
            })
        })
    }

    /// The peer whose record of this call disagrees with this rank's ([`Watch::check`]'s
    /// finding, for the ranks this rank still sends to: `engine::collnote`).
    pub fn finding(&self, rings: &Rings) -> Option<Found> {
        self.outer()
            .and_then(|o| self.first_disagreement(rings, &o))
            .or_else(|| self.first_disagreement(rings, &self.rec))
    }

    /// The error to report for `e` (a failure the call found itself, such as a peer that took
    /// another path): the peers' records say more when they disagree.
    pub fn refine(&self, rings: &Rings, e: MpiError) -> MpiError {
        self.check(rings).err().unwrap_or(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rings(n: usize) -> Vec<Rings> {
        let area: &'static mut [u64] = Box::leak(vec![0u64; n * AREA / 8].into_boxed_slice());
        let start = area.as_mut_ptr() as usize;
        let bases: &'static [usize] =
            Box::leak((0..n).map(|r| start + r * AREA).collect::<Vec<_>>().into());
        // SAFETY: leaked, zeroed, aligned memory of n rings.
        (0..n).map(|me| unsafe { Rings::new(bases, me) }).collect()
    }

    #[test]
    fn records_round_trip() {
        for (i, &kind) in CollKind::ALL.iter().enumerate() {
            for path in [Path::Flag, Path::Schedule, Path::Gpu, Path::Scratch] {
                let r = Record::new(
                    0x7fff_0000 | i as u32,
                    0x3fff_fff0 + i as u32,
                    kind,
                    5,
                    400_000,
                    path,
                );
                let d = Record::decode(r.encode()).unwrap();
                assert_eq!(d, r);
            }
        }
        assert_eq!(Record::decode([0, 1, 2, 3]), None);
        // A torn entry (the words of two records) is not taken.
        let (a, b) = (
            Record::new(4, 1, CollKind::Bcast, 0, 8, Path::Flag).encode(),
            Record::new(4, 1, CollKind::Bcast, 0, 80, Path::Schedule).encode(),
        );
        assert_eq!(Record::decode([a[0], b[1], a[2], a[3]]), None);
        assert_eq!(Record::decode([a[0], a[1], b[2], a[3]]), None);
        let b = Record::new(3, 1, CollKind::Allgatherv, 2, 10, Path::Schedule);
        assert_eq!((b.root, b.bytes), (NO_ROOT, ANY_BYTES));
    }

    /// A record of a call whose path is not chosen yet (the GPU paths' agreement) is compared
    /// in everything but the path; once a GPU path commits, the path and its step count too.
    #[test]
    fn choosing_is_not_compared_by_path() {
        let rs = rings(2);
        let choosing = Record::new(6, 1, CollKind::Allreduce, 0, 64, Path::Choosing);
        rs[1].publish(&choosing);
        let mine = Record::new(6, 1, CollKind::Allreduce, 0, 64, Path::Flag);
        let w = Watch::new(mine, None, 0);
        assert!(w.check(&rs[0]).is_ok(), "a GPU agreement that may decline");
        rs[1].publish(&Record::new(
            6,
            1,
            CollKind::Allreduce,
            0,
            640,
            Path::Choosing,
        ));
        assert_eq!(w.check(&rs[0]).unwrap_err().class, MPI_ERR_TRUNCATE);
        rs[1].publish(&Record::new(6, 1, CollKind::Bcast, 0, 64, Path::Choosing));
        assert_eq!(w.check(&rs[0]).unwrap_err().class, MPI_ERR_OTHER);
        // Committed: a GPU path against a host path is a mismatch, and so are two GPU paths
        // whose steps differ (the resident kernels' flag values).
        let gpu = |step| Record {
            step,
            ..Record::new(6, 1, CollKind::Allreduce, 0, 64, Path::Gpu)
        };
        rs[1].publish(&gpu(4));
        assert_eq!(w.check(&rs[0]).unwrap_err().class, MPI_ERR_OTHER);
        let w = Watch::new(gpu(4), None, 0);
        assert!(w.check(&rs[0]).is_ok());
        let w = Watch::new(gpu(5), None, 0);
        let e = w.check(&rs[0]).unwrap_err();
        assert_eq!(e.class, MPI_ERR_OTHER);
        assert!(e.msg.contains("(GPU path, step 4)"), "{}", e.msg);
        assert_eq!(Record::decode(gpu(0xfffe).encode()), Some(gpu(0xfffe)));
    }

    /// The waits of a call's internal collectives also check the call ([`Outer`]): a peer
    /// that called something else at that point fails them, though their own records agree.
    #[test]
    fn internal_collectives_check_their_call() {
        let rs = rings(2);
        let no = CallNo::new(9);
        let rec = |r: usize, kind, bytes| {
            let path = if r == 0 {
                Path::Choosing
            } else {
                Path::Schedule
            };
            Record::new(3, no.tag() as u32, kind, 0, bytes, path)
        };
        // Rank 0 runs a bcast on a GPU path, rank 1 a reduce on the schedule path; both
        // reached an internal allgather (an earlier call's of rank 1, say).
        rs[0].publish(&rec(0, CollKind::Bcast, 400));
        rs[1].publish(&rec(1, CollKind::Reduce, 400));
        let inner = no.nested(1);
        let ag = Record::new(
            3,
            inner.tag() as u32,
            CollKind::Allgather,
            0,
            8,
            Path::Schedule,
        );
        rs[1].publish(&ag);
        let w = Watch::new(ag, None, 0);
        assert!(w.check(&rs[0]).is_ok(), "no call around it");
        let e = {
            let _outer = Outer::enter(rec(0, CollKind::Bcast, 400));
            w.check(&rs[0]).unwrap_err()
        };
        assert_eq!(e.class, MPI_ERR_OTHER);
        assert!(
            e.msg.contains("rank 1 called reduce") && e.msg.contains("collective #9"),
            "{}",
            e.msg
        );
        assert!(w.check(&rs[0]).is_ok(), "the call's check ends with it");
    }

    /// Ranks whose calls differ in size take different GPU paths, whose internal collectives
    /// then differ in kind: the class is the calls' (`MPI_ERR_TRUNCATE`), not the internal
    /// collectives' (`MPI_ERR_OTHER`), whichever the wait meets first.
    #[test]
    fn the_calls_disagreement_wins_over_their_internal_collectives() {
        let rs = rings(2);
        let no = CallNo::new(4);
        let call = |bytes| {
            Record::new(
                3,
                no.tag() as u32,
                CollKind::Allreduce,
                0,
                bytes,
                Path::Choosing,
            )
        };
        let inner = |kind| Record::new(3, no.nested(1).tag() as u32, kind, 0, 8, Path::Schedule);
        rs[0].publish(&call(32));
        rs[1].publish(&call(1 << 20));
        rs[1].publish(&inner(CollKind::Allreduce));
        let w = Watch::new(inner(CollKind::Allgather), None, 0);
        let _outer = Outer::enter(call(32));
        let e = w.check(&rs[0]).unwrap_err();
        assert_eq!(e.class, MPI_ERR_TRUNCATE, "{}", e.msg);
        assert_eq!(w.finding(&rs[0]).map(|f| f.class), Some(MPI_ERR_TRUNCATE));
        // The same calls: the internal collectives' disagreement is what is left.
        drop(_outer);
        let _outer = Outer::enter(call(1 << 20));
        rs[0].publish(&call(1 << 20));
        assert_eq!(w.check(&rs[0]).unwrap_err().class, MPI_ERR_OTHER);
    }

    #[test]
    fn call_numbers() {
        let a = CallNo::new(5);
        assert_eq!(a.tag(), 5);
        let i = a.nested(3);
        assert!(
            i.tag() >= 1 << 30,
            "internal collectives: their own tag range"
        );
        assert_ne!(i.tag(), a.nested(4).tag());
        assert_ne!(i.tag(), CallNo::new(6).nested(3).tag());
        assert_eq!(call_name(i.tag() as u32), "#5 (its internal collective 3)");
        assert_eq!(call_name(a.tag() as u32), "#5");
        // Flag rounds increase with the calls, internal rounds before the call's own.
        assert!(a.nested(1).flag() < a.nested(CallNo::MAX_SUB).flag());
        assert!(a.nested(CallNo::MAX_SUB).flag() < a.flag());
        assert!(a.flag() < CallNo::new(6).nested(1).flag());
        assert!(CallNo::new(0).nested(1).flag() > 0);
        // Tags stay in 30 bits (call) and below 2^31 (internal) for any sequence number.
        let big = CallNo::new(u64::MAX >> 1);
        assert!((0..1 << 30).contains(&big.tag()));
        assert!(big.nested(7).tag() >= 1 << 30);
    }

    #[test]
    fn agreement_words_find_the_first_difference() {
        let and = |recs: &[Record]| {
            recs.iter().fold([u64::MAX; AGREEMENT_WORDS], |mut a, r| {
                for (x, w) in a.iter_mut().zip(agreement_words(r)) {
                    *x &= w;
                }
                a
            })
        };
        let r = |kind, root, bytes| Record::new(2, 1, kind, root, bytes, Path::Choosing);
        let a = r(CollKind::Bcast, 0, 400_000);
        assert_eq!(disagreed(&and(&[a, a, a])), None);
        assert_eq!(
            disagreed(&and(&[a, r(CollKind::Bcast, 0, 40), a])),
            Some(MPI_ERR_TRUNCATE)
        );
        assert_eq!(
            disagreed(&and(&[a, a, r(CollKind::Bcast, 1, 400_000)])),
            Some(MPI_ERR_ROOT)
        );
        assert_eq!(
            disagreed(&and(&[r(CollKind::Reduce, 0, 40), a])),
            Some(MPI_ERR_OTHER),
            "the collective first"
        );
        // Values that AND to the same word still differ (5 & 6 == 4 & 6).
        assert_eq!(
            disagreed(&and(&[r(CollKind::Bcast, 0, 5), r(CollKind::Bcast, 0, 6)])),
            Some(MPI_ERR_TRUNCATE)
        );
        let x = r(CollKind::Allreduce, 3, 8);
        assert_eq!(
            disagreed(&and(&[x, r(CollKind::Allreduce, 1, 8)])),
            None,
            "an allreduce has no root"
        );
        // Another collective and another root: the collective first.
        assert_eq!(
            disagreed(&and(&[
                r(CollKind::Reduce, 1, 40),
                r(CollKind::Bcast, 0, 40)
            ])),
            Some(MPI_ERR_OTHER)
        );
        assert_eq!(
            disagreed(&and(&[
                r(CollKind::Reduce, 1, 40),
                r(CollKind::Reduce, 0, 8)
            ])),
            Some(MPI_ERR_ROOT)
        );
        // Large roots and byte counts are exact.
        let big = r(CollKind::Bcast, u32::MAX as usize, 1 << 40);
        assert_eq!(disagreed(&and(&[big, big])), None);
        assert_eq!(
            disagreed(&and(&[big, r(CollKind::Bcast, u32::MAX as usize, 1 << 41)])),
            Some(MPI_ERR_TRUNCATE)
        );
        assert_eq!(
            disagreed(&and(&[big, r(CollKind::Bcast, 1 << 24, 1 << 40)])),
            Some(MPI_ERR_ROOT)
        );
        let w = agreement_words(&big);
        assert_eq!(
            agreement_fields(&w),
            (
                CollKind::ALL
                    .iter()
                    .position(|&k| k == CollKind::Bcast)
                    .unwrap(),
                u32::MAX,
                1 << 40
            )
        );
        // With the flag byte, an agreement fits the data a flag round keeps in its flag's
        // cache line.
        const FLAG_BYTE: usize = 1;
        const { assert!(FLAG_BYTE + 8 * AGREEMENT_WORDS <= 48) };
    }

    /// Every detection site gives a pair of calls the same class: the record comparison
    /// ([`mismatch`]), the agreement words ([`disagreed`]) and, where the flag slots meet
    /// them, the flag slots' own checks (root, then length): the collective first (OTHER),
    /// then the root (ROOT), then the byte count (TRUNCATE).
    #[test]
    fn every_site_classes_a_pair_alike() {
        use CollKind as K;
        let calls: Vec<Record> = [K::Bcast, K::Reduce, K::Allreduce, K::Allgather]
            .into_iter()
            .flat_map(|k| {
                [0usize, 1].into_iter().flat_map(move |root| {
                    [8usize, 40, 400_000]
                        .into_iter()
                        .map(move |b| Record::new(0, 3, k, root, b, Path::Choosing))
                })
            })
            .collect();
        for a in &calls {
            for b in &calls {
                let by_record = mismatch(a, b);
                let mut and = agreement_words(a);
                for (x, w) in and.iter_mut().zip(agreement_words(b)) {
                    *x &= w;
                }
                assert_eq!(disagreed(&and), by_record, "{a:?} vs {b:?}");
                assert_eq!(mismatch(b, a), by_record, "symmetric: {a:?} vs {b:?}");
                // The flag slots compare the root (plus one, 0 for none) and then the length;
                // a bcast against a reduction differs in collective first.
                if a.kind == b.kind {
                    let root = |r: &Record| if r.root == NO_ROOT { 0 } else { r.root + 1 };
                    let flag = if root(a) != root(b) {
                        Some(MPI_ERR_ROOT)
                    } else if a.bytes != b.bytes {
                        Some(MPI_ERR_TRUNCATE)
                    } else {
                        None
                    };
                    assert_eq!(flag, by_record, "flag slots: {a:?} vs {b:?}");
                }
            }
        }
    }

    #[test]
    fn mismatch_classes() {
        let r = |kind, root, bytes, path| Record::new(0, 7, kind, root, bytes, path);
        let a = r(CollKind::Bcast, 0, 40, Path::Flag);
        assert_eq!(mismatch(&a, &a), None);
        assert_eq!(
            mismatch(&a, &r(CollKind::Bcast, 0, 400_000, Path::Schedule)),
            Some(MPI_ERR_TRUNCATE)
        );
        assert_eq!(
            mismatch(&a, &r(CollKind::Reduce, 0, 40, Path::Flag)),
            Some(MPI_ERR_OTHER)
        );
        assert_eq!(
            mismatch(&a, &r(CollKind::Bcast, 1, 40, Path::Flag)),
            Some(MPI_ERR_ROOT)
        );
        assert_eq!(
            mismatch(&a, &r(CollKind::Bcast, 0, 40, Path::Gpu)),
            Some(MPI_ERR_OTHER)
        );
        // The root of an allreduce and the counts of a gatherv mean nothing.
        let x = r(CollKind::Allreduce, 0, 8, Path::Flag);
        assert_eq!(
            mismatch(&x, &r(CollKind::Allreduce, 1, 8, Path::Flag)),
            None
        );
        let g = r(CollKind::Gatherv, 0, 8, Path::Schedule);
        assert_eq!(
            mismatch(&g, &r(CollKind::Gatherv, 0, 80, Path::Schedule)),
            None
        );
        let e = mismatch_error(
            MPI_ERR_TRUNCATE,
            0,
            &a,
            1,
            &r(CollKind::Bcast, 0, 400_000, Path::Schedule),
        );
        assert_eq!(e.class, MPI_ERR_TRUNCATE);
        assert!(
            e.msg.contains("MPI_COMM_WORLD")
                && e.msg
                    .contains("rank 1 called bcast (root 0) of 400000 bytes (schedule path)")
                && e.msg
                    .contains("rank 0 called bcast (root 0) of 40 bytes (flag slots)"),
            "{}",
            e.msg
        );
    }

    #[test]
    fn rings_find_forget_and_wrap() {
        let rs = rings(3);
        let rec = |ctx, seq, kind| Record::new(ctx, seq, kind, 0, 8, Path::Schedule);
        rs[1].publish(&rec(4, 9, CollKind::Bcast));
        assert_eq!(rs[0].find(1, 4, 9), Some(rec(4, 9, CollKind::Bcast)));
        assert_eq!(rs[0].find(1, 4, 10), None);
        assert_eq!(rs[0].find(2, 4, 9), None);
        // A watch of rank 0 at (4, 9) finds rank 1's disagreement, rank 2 (no record) is fine.
        let w = Watch::new(rec(4, 9, CollKind::Reduce), None, 0);
        let e = w.check(&rs[0]).unwrap_err();
        assert_eq!(e.class, MPI_ERR_OTHER);
        assert!(e.msg.contains("rank 1 called bcast"), "{}", e.msg);
        // Through a communicator whose rank 0 is world rank 2 and rank 1 world rank 1.
        let w = Watch::new(rec(4, 9, CollKind::Bcast), Some(Arc::from(vec![2, 1])), 0);
        assert!(w.check(&rs[2]).is_ok());
        rs[1].forget(4);
        assert_eq!(rs[0].find(1, 4, 9), None);
        // The ring keeps a communicator's last ENTRIES - INNER_ENTRIES records of calls.
        let calls = (ENTRIES - INNER_ENTRIES) as u32;
        let n = 3 * ENTRIES as u32;
        for s in 0..n {
            rs[2].publish(&rec(5, s, CollKind::Allreduce));
        }
        for s in 0..n {
            let kept = rs[0].find(2, 5, s).is_some();
            assert_eq!(kept, s >= n - calls, "record {s}");
        }
        // A call's internal collectives never overwrite its record.
        let no = CallNo::new(n as u64 - 1);
        for sub in 1..=CallNo::MAX_SUB {
            rs[2].publish(&rec(5, no.nested(sub).tag() as u32, CollKind::Allgather));
            assert!(
                rs[0].find(2, 5, no.tag() as u32).is_some(),
                "internal collective {sub}"
            );
        }
    }

    #[test]
    fn poll_waits_before_reading() {
        let rs = rings(2);
        rs[1].publish(&Record::new(6, 1, CollKind::Bcast, 1, 8, Path::Schedule));
        let mut w = Watch::new(
            Record::new(6, 1, CollKind::Bcast, 0, 8, Path::Schedule),
            None,
            0,
        );
        for _ in 0..POLL_CLOCK {
            assert!(
                w.poll(&rs[0]).is_ok(),
                "the first clock reading only starts the clock"
            );
        }
        std::thread::sleep(CHECK_EVERY);
        let e = (0..POLL_CLOCK).find_map(|_| w.poll(&rs[0]).err()).unwrap();
        assert_eq!(e.class, MPI_ERR_ROOT);
    }
}
