//! Shared single copy: a large host rendezvous that the receiver reads with single copies (CMA)
//! is cut into chunks that both ranks claim from a slot in shared memory, so the sender, which
//! would otherwise only wait for the receiver's `FIN`, copies part of the message into the
//! receiver's buffer (`process_vm_writev`) while the receiver reads the rest
//! (`process_vm_readv`). Two cores copy one message, each chunk once.
//!
//! Nothing waits for the sender: the receiver claims chunks until none is left, so a sender
//! that is not in an MPI call (or not on a core) leaves all of them to the receiver, exactly
//! the plain single-copy read. The receiver completes when every claimed chunk is in its
//! buffer, which includes a chunk the sender is still writing: that is why the receiver only
//! opens a slot where the ranks do not outnumber the CPUs ([`share`]), so that a sender in the
//! middle of a chunk is on a core.
//!
//! # Slot protocol (one [`Slot`] per message, [`crate::transport::shm::COPY_SLOTS`] per pair)
//! 1. The sender takes a slot it does not use (its own bitmap), stores `OFFERED` and sends the
//!    RTS with the slot's index (the ring's release/acquire orders the store before the RTS).
//! 2. The receiver that matches the RTS and reads ([`crate::engine::rndv::RndvPath::SharedRead`])
//!    writes its buffer address, the length and the chunking, then stores `OPEN` (release).
//! 3. Both sides claim chunk numbers with a fetch-add on `next` and copy each chunk they claim;
//!    a copied chunk adds one to `done` (release). A sender whose write fails hands the chunk
//!    back (`redo`) and stops; the receiver copies it.
//! 4. The receiver, once `next` is past the last chunk, waits for `done` to reach the number of
//!    chunks (acquire: the sender's writes are in its buffer), then sends `FIN`; its last access
//!    to the slot precedes the `FIN`. The sender frees the slot when `FIN` completes the send.
//!    A receiver whose own read fails closes the slot (no more claims) and asks for streamed
//!    data (`CTS`): the sender finishes a chunk in flight before it handles the `CTS`.

use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes per chunk: long enough that a claim (one atomic) and a system call are a small part
/// of copying it, short enough that a message of a few chunks spreads over both ranks.
pub const CHUNK: usize = 256 << 10;

/// The smallest message offered for a shared copy: two chunks (one each).
pub const MIN_BYTES: usize = 2 * CHUNK;

const OFFERED: u64 = 1;
const OPEN: u64 = 2;
const NONE: u64 = u64::MAX;

/// Whether a sender offers a slot for a host rendezvous of `len` bytes to a peer it may write
/// to (`can_write`: single copies work between the two).
pub fn offer(len: usize, can_write: bool) -> bool {
    can_write && len >= MIN_BYTES
}

/// Whether the receiver of `want` bytes, which reads them with single copies, shares the copy
/// with a sender that offered a slot: only when the ranks of the node do not outnumber its
/// CPUs (`crowded`), since the receiver waits for a chunk the sender is writing.
pub fn share(want: usize, crowded: bool) -> bool {
    !crowded && want >= MIN_BYTES
}

/// One shared copy in flight, in shared memory ([`crate::transport::Transport::copy_slots`]).
#[repr(C, align(64))]
pub struct Slot {
    state: AtomicU64,
    /// The receiver's buffer (an address in the receiver's process).
    raddr: AtomicU64,
    want: AtomicU64,
    chunk: AtomicU64,
    nchunks: AtomicU64,
    /// The next chunk number to claim.
    next: AtomicU64,
    /// Chunks copied.
    done: AtomicU64,
    /// A chunk the sender failed to write, for the receiver to copy ([`NONE`]: none).
    redo: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<Slot>() == crate::transport::shm::COPY_SLOT_BYTES);

/// What an opened slot asks for: `want` bytes into `raddr`, in chunks of `chunk`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Job {
    pub raddr: u64,
    pub want: usize,
    pub chunk: usize,
    pub nchunks: u64,
}

impl Job {
    /// Byte range (offset, length) of chunk `c`.
    fn range(&self, c: u64) -> (usize, usize) {
        let off = c as usize * self.chunk;
        (off, self.chunk.min(self.want - off))
    }
}

impl Slot {
    /// Slot `i` of the table at `table`.
    ///
    /// # Safety
    /// `table` is a table of [`crate::transport::Transport::copy_slots`] (or memory laid out
    /// alike) that outlives `'a`, and `i < COPY_SLOTS`.
    pub unsafe fn at<'a>(table: usize, i: usize) -> &'a Slot {
        debug_assert!(i < crate::transport::shm::COPY_SLOTS && table.is_multiple_of(64));
        // SAFETY: the caller's contract; every field is an atomic, valid for any bit pattern.
        unsafe { &*((table + i * std::mem::size_of::<Slot>()) as *const Slot) }
    }

    /// Sender: offer the slot for the message whose RTS goes out next.
    pub fn offer(&self) {
        self.state.store(OFFERED, Ordering::Relaxed);
    }

    /// Receiver: open the slot for `want` bytes into `raddr` and return the job.
    pub fn open(&self, raddr: u64, want: usize) -> Job {
        let job = Job {
            raddr,
            want,
            chunk: CHUNK,
            nchunks: want.div_ceil(CHUNK) as u64,
        };
        self.raddr.store(raddr, Ordering::Relaxed);
        self.want.store(want as u64, Ordering::Relaxed);
        self.chunk.store(CHUNK as u64, Ordering::Relaxed);
        self.nchunks.store(job.nchunks, Ordering::Relaxed);
        self.next.store(0, Ordering::Relaxed);
        self.done.store(0, Ordering::Relaxed);
        self.redo.store(NONE, Ordering::Relaxed);
        self.state.store(OPEN, Ordering::Release);
        job
    }

    /// Sender: the job, once the receiver has opened the slot for the message it offered it for.
    pub fn opened(&self) -> Option<Job> {
        (self.state.load(Ordering::Acquire) == OPEN).then(|| Job {
            raddr: self.raddr.load(Ordering::Relaxed),
            want: self.want.load(Ordering::Relaxed) as usize,
            chunk: (self.chunk.load(Ordering::Relaxed) as usize).max(1),
            nchunks: self.nchunks.load(Ordering::Relaxed),
        })
    }

    /// Either side: claim the next chunk, as (offset, length); `None` when all are claimed.
    pub fn claim(&self, job: &Job) -> Option<(usize, usize)> {
        let c = self.next.fetch_add(1, Ordering::Relaxed);
        (c < job.nchunks).then(|| job.range(c))
    }

    /// Either side: a claimed chunk is in the receiver's buffer.
    pub fn finish(&self) {
        self.done.fetch_add(1, Ordering::Release);
    }

    /// Sender: the write of the chunk at `off` failed; the receiver copies it.
    pub fn give_back(&self, job: &Job, off: usize) {
        self.redo.store((off / job.chunk) as u64, Ordering::Release);
    }

    /// Receiver: a chunk the sender handed back, to copy itself.
    pub fn take_back(&self, job: &Job) -> Option<(usize, usize)> {
        let c = self.redo.swap(NONE, Ordering::Acquire);
        (c < job.nchunks).then(|| job.range(c))
    }

    /// Receiver: every chunk is in its buffer (the sender's writes included).
    pub fn all_done(&self, job: &Job) -> bool {
        self.done.load(Ordering::Acquire) >= job.nchunks
    }

    /// Receiver: no more claims (its own read failed; the data comes another way).
    pub fn close(&self, job: &Job) {
        self.next.fetch_max(job.nchunks, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A slot table in heap memory, 64-byte aligned.
    fn table() -> (Vec<u64>, usize) {
        let v = vec![0u64; 8 * crate::transport::shm::COPY_SLOTS + 8];
        let base = (v.as_ptr() as usize).next_multiple_of(64);
        (v, base)
    }

    #[test]
    fn the_choice_of_a_shared_copy() {
        assert!(!offer(MIN_BYTES - 1, true));
        assert!(offer(MIN_BYTES, true));
        assert!(!offer(64 << 20, false), "no single copies to the peer");
        assert!(share(MIN_BYTES, false));
        assert!(!share(MIN_BYTES - 1, false));
        assert!(
            !share(64 << 20, true),
            "ranks that outnumber the CPUs never wait for each other's chunks"
        );
    }

    /// Claims from both sides, interleaved, cover every byte once, and the receiver sees the
    /// copy done only after the last chunk.
    #[test]
    fn claims_from_both_sides_cover_the_message_once() {
        let (_keep, t) = table();
        // SAFETY: t is a 64-byte aligned table of COPY_SLOTS slots that outlives the test.
        let s = unsafe { Slot::at(t, 3) };
        for want in [MIN_BYTES, MIN_BYTES + 1, 5 * CHUNK - 7, 16 << 20] {
            s.offer();
            assert_eq!(s.opened(), None, "offered, not yet opened");
            let job = s.open(0x1000, want);
            assert_eq!(s.opened(), Some(job));
            let mut covered = vec![0u8; want.div_ceil(4096)];
            let mut turn = 0;
            let mut mark = |(off, n): (usize, usize)| {
                assert!(off % 4096 == 0 && off + n <= want && n > 0);
                for c in &mut covered[off / 4096..(off + n).div_ceil(4096)] {
                    *c += 1;
                }
            };
            loop {
                // Receiver, sender, sender, receiver, ...
                let c = s.claim(&job);
                turn += 1;
                let Some(r) = c else { break };
                assert!(!s.all_done(&job));
                mark(r);
                s.finish();
            }
            assert!(turn > 2);
            assert!(s.all_done(&job));
            assert!(covered.iter().all(|&c| c == 1), "{want}: {covered:?}");
            assert_eq!(s.claim(&job), None, "nothing left after the last chunk");
        }
    }

    #[test]
    fn a_chunk_the_sender_failed_goes_back_to_the_receiver() {
        let (_keep, t) = table();
        // SAFETY: as above.
        let s = unsafe { Slot::at(t, 0) };
        s.offer();
        let job = s.open(0, 3 * CHUNK);
        let (off, n) = s.claim(&job).unwrap(); // the sender's claim
        assert_eq!(s.take_back(&job), None);
        s.give_back(&job, off);
        assert_eq!(s.take_back(&job), Some((off, n)));
        assert_eq!(s.take_back(&job), None, "taken once");
        s.finish(); // the receiver copied it
        while s.claim(&job).is_some() {
            s.finish();
        }
        assert!(s.all_done(&job));
    }

    #[test]
    fn a_closed_slot_gives_out_no_more_chunks() {
        let (_keep, t) = table();
        // SAFETY: as above.
        let s = unsafe { Slot::at(t, COPY_SLOTS_LAST) };
        s.offer();
        let job = s.open(0, 4 * CHUNK);
        assert!(s.claim(&job).is_some());
        s.close(&job);
        assert_eq!(s.claim(&job), None);
    }

    const COPY_SLOTS_LAST: usize = crate::transport::shm::COPY_SLOTS - 1;
}
