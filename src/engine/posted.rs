//! Receiver-posted receives that the sender fills directly: the decisions of a protocol for
//! small device messages between two GPUs of one node with peer access (docs/GPU.md, "What
//! remains"). The receiver publishes a posted receive (its envelope and its device buffer's
//! export) in a slot of node shared memory per (sender, receiver) pair; the sender claims it
//! with one compare-and-swap on the slot's word and has its GPU store the payload into the
//! receiver's buffer over NVLink and a completion flag into the slot, so the message crosses
//! PCIe once each way (sender's host to its GPU, sender's GPU to the receiver's host) with no
//! host matching between. Everything else (no receive published, a message that may not use
//! it) goes the usual way, as a frame through the transport.
//!
//! MPI's matching rules hold because:
//! - only a receive naming the sender (not `MPI_ANY_SOURCE`) that is the first posted receive
//!   that could match any message of that sender on its communicator is published
//!   ([`may_publish`]), so a claim can never take a receive that an earlier one should have;
//! - the word carries how many of the sender's messages the receiver has taken in (`seen`), and
//!   the sender claims only when that equals how many it has sent ([`Tx::try_claim`]): every
//!   earlier message has been matched (or queued as unexpected) by the receiver already, so the
//!   claimed one cannot overtake any;
//! - a frame from the sender that could match the published receive takes it back first
//!   ([`Rx::on_frame`]: the compare-and-swap fails only where the sender claimed it, and then
//!   the claimed message came before the frame); a frame that cannot match it moves `seen` on;
//! - a cancel takes the receive back the same way, or fails because it was claimed (the
//!   receive then completes with the claimed message);
//! - a generation number in the word keeps a sender's claim from landing on a later
//!   publication of the same slot.
//!
//! Pure: the slot is anything with a load and a compare-and-swap of one 64-bit word ([`Slot`]);
//! the model test below runs a sender and a receiver over a FIFO channel in random
//! interleavings and checks every claim against the receive a frame would have matched.

/// `MPI_ANY_SOURCE` / `MPI_ANY_TAG` as the engine passes them.
pub const ANY: i32 = -1;

/// A slot word's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Nothing published.
    Empty,
    /// A receive is published; the sender may claim it.
    Posted,
    /// The sender claimed it: its payload and completion flag are on their way.
    Claimed,
}

/// The slot word: state (2 bits), generation (22 bits), `seen` (40 bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Word(pub u64);

const SEEN_BITS: u32 = 40;
const GEN_BITS: u32 = 22;
const SEEN_MASK: u64 = (1 << SEEN_BITS) - 1;
const GEN_MASK: u64 = (1 << GEN_BITS) - 1;

impl Word {
    /// A word of `state`, generation `gen` (its low 22 bits) and `seen` (low 40 bits).
    pub fn new(state: State, gen: u32, seen: u64) -> Word {
        let s = match state {
            State::Empty => 0u64,
            State::Posted => 1,
            State::Claimed => 2,
        };
        Word(s << 62 | (u64::from(gen) & GEN_MASK) << SEEN_BITS | (seen & SEEN_MASK))
    }
    /// The state.
    pub fn state(self) -> State {
        match self.0 >> 62 {
            1 => State::Posted,
            2 => State::Claimed,
            _ => State::Empty,
        }
    }
    /// The generation.
    pub fn gen(self) -> u32 {
        ((self.0 >> SEEN_BITS) & GEN_MASK) as u32
    }
    /// Messages of the sender the receiver had taken in.
    pub fn seen(self) -> u64 {
        self.0 & SEEN_MASK
    }
}

/// One (sender, receiver) slot: its word, shared by both.
pub trait Slot {
    /// The word now (acquire).
    fn load(&self) -> Word;
    /// Replace `old` with `new` if the word is `old` (acquire-release); the word found.
    fn cas(&self, old: Word, new: Word) -> Result<(), Word>;
}

impl Slot for std::sync::atomic::AtomicU64 {
    fn load(&self) -> Word {
        Word(self.load(std::sync::atomic::Ordering::Acquire))
    }
    fn cas(&self, old: Word, new: Word) -> Result<(), Word> {
        use std::sync::atomic::Ordering::{AcqRel, Acquire};
        self.compare_exchange(old.0, new.0, AcqRel, Acquire)
            .map(|_| ())
            .map_err(Word)
    }
}

/// A receive's envelope as the receiver posted it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvEnv {
    /// Communicator context.
    pub ctx: u32,
    /// Source rank in the communicator, or [`ANY`].
    pub src: i32,
    /// Tag, or [`ANY`].
    pub tag: i32,
    /// Capacity in bytes.
    pub cap: usize,
}

/// A message's envelope as its sender sends it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MsgEnv {
    /// Communicator context.
    pub ctx: u32,
    /// The sender's rank in the communicator.
    pub src: i32,
    /// Tag.
    pub tag: i32,
    /// Length in bytes.
    pub len: usize,
}

impl RecvEnv {
    /// Whether a message with envelope `m` matches this receive (truncation aside).
    pub fn matches(&self, m: &MsgEnv) -> bool {
        self.ctx == m.ctx
            && (self.src == ANY || self.src == m.src)
            && (self.tag == ANY || self.tag == m.tag)
    }
    /// Whether this receive could match some message from the sender whose rank in
    /// communicator `ctx` is `src`.
    pub fn could_match_from(&self, ctx: u32, src: i32) -> bool {
        self.ctx == ctx && (self.src == ANY || self.src == src)
    }
}

/// Whether receive `r` may be published to the sender whose rank in `r`'s communicator is
/// `r.src`: it names that sender, its buffer can take the direct path (`eligible`: device
/// memory the sender can map, at most the path's size), and no receive posted before it
/// (`earlier`, in posting order) could match a message of that sender.
pub fn may_publish<'a>(
    r: &RecvEnv,
    eligible: bool,
    earlier: impl IntoIterator<Item = &'a RecvEnv>,
) -> bool {
    eligible
        && r.src != ANY
        && !earlier
            .into_iter()
            .any(|e| e.could_match_from(r.ctx, r.src))
}

/// What a frame from the sender did to the published receive ([`Rx::on_frame`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frame {
    /// Nothing is published.
    None,
    /// The published receive was taken back (the frame may match it): match the frame, and
    /// the receive, the usual way.
    Revoked,
    /// The sender had claimed the published receive before it sent this frame: the receive is
    /// matched (it completes with the flag); match the frame among the others.
    Claimed,
    /// The frame cannot match the published receive, which stays published.
    Kept,
}

/// The receiver's side of one (sender, receiver) pair.
#[derive(Debug, Default)]
pub struct Rx {
    /// Messages of the sender taken in: frames seen, claims noticed.
    pub taken: u64,
    gen: u32,
    published: Option<RecvEnv>,
    claimed: bool,
}

impl Rx {
    /// The receive published now, if any.
    pub fn published(&self) -> Option<RecvEnv> {
        self.published
    }

    /// The generation of the current publication (the completion flag's value).
    pub fn gen(&self) -> u32 {
        self.gen
    }

    /// Publish `r` (the caller checked [`may_publish`] and wrote the envelope and export into
    /// the slot before): false where something is published already.
    pub fn publish(&mut self, slot: &dyn Slot, r: RecvEnv) -> bool {
        if self.published.is_some() {
            return false;
        }
        let w = slot.load();
        if w.state() != State::Empty {
            return false;
        }
        self.gen = (self.gen + 1) & GEN_MASK as u32;
        if slot
            .cas(w, Word::new(State::Posted, self.gen, self.taken))
            .is_err()
        {
            return false;
        }
        self.published = Some(r);
        self.claimed = false;
        true
    }

    /// A frame of a message `m` from the sender arrived (before it is matched).
    pub fn on_frame(&mut self, slot: &dyn Slot, m: &MsgEnv) -> Frame {
        let Some(r) = self.published else {
            self.taken += 1;
            return Frame::None;
        };
        if self.claimed || self.notice_claim(slot) {
            self.taken += 1;
            return Frame::Claimed;
        }
        let w = slot.load();
        let (next, out) = if r.matches(m) {
            (Word::new(State::Empty, w.gen(), 0), Frame::Revoked)
        } else {
            (
                Word::new(State::Posted, w.gen(), self.taken + 1),
                Frame::Kept,
            )
        };
        match slot.cas(w, next) {
            Ok(()) => {
                if out == Frame::Revoked {
                    self.published = None;
                }
                self.taken += 1;
                out
            }
            Err(found) => {
                // Only the sender changes a posted word: it claimed it.
                debug_assert_eq!(found.state(), State::Claimed);
                self.claimed = true;
                self.taken += 2;
                Frame::Claimed
            }
        }
    }

    /// Whether the sender claimed the published receive (counted once, when first seen).
    pub fn notice_claim(&mut self, slot: &dyn Slot) -> bool {
        if self.claimed {
            return true;
        }
        if self.published.is_some() && slot.load().state() == State::Claimed {
            self.claimed = true;
            self.taken += 1;
            return true;
        }
        false
    }

    /// The completion flag of the claimed receive arrived: the slot is free again. Returns
    /// the receive that completed.
    pub fn complete(&mut self, slot: &dyn Slot) -> Option<RecvEnv> {
        if !self.notice_claim(slot) {
            return None;
        }
        let w = slot.load();
        // Only the receiver changes a claimed word.
        slot.cas(w, Word::new(State::Empty, w.gen(), 0)).ok()?;
        self.claimed = false;
        self.published.take()
    }

    /// Take the published receive back for a cancel (or any other reason it must stop being
    /// claimable): true if it was taken back; false if the sender claimed it (the receive will
    /// complete with the claimed message) or nothing was published.
    pub fn revoke(&mut self, slot: &dyn Slot) -> bool {
        if self.published.is_none() || self.notice_claim(slot) {
            return false;
        }
        let w = slot.load();
        match slot.cas(w, Word::new(State::Empty, w.gen(), 0)) {
            Ok(()) => {
                self.published = None;
                true
            }
            Err(_) => {
                self.notice_claim(slot);
                false
            }
        }
    }
}

/// The sender's side of one (sender, receiver) pair.
#[derive(Debug, Default)]
pub struct Tx {
    /// Messages sent to the receiver, by any path.
    pub sent: u64,
}

impl Tx {
    /// Try to claim the published receive for message `m` (`eligible`: the send buffer can
    /// take the direct path); `pub_env`: the published envelope as read from the slot after
    /// the word `w` (the caller reads the word, then the envelope, and passes both; a later
    /// publication changes the generation, so the claim fails). Returns the generation claimed
    /// (the flag's value); `None`: send it the usual way. Either way the message counts as sent.
    pub fn try_claim(
        &mut self,
        slot: &dyn Slot,
        w: Word,
        pub_env: &RecvEnv,
        m: &MsgEnv,
        eligible: bool,
    ) -> Option<u32> {
        let ok = eligible
            && w.state() == State::Posted
            && w.seen() == self.sent & SEEN_MASK
            && pub_env.matches(m)
            && m.len <= pub_env.cap
            && slot
                .cas(w, Word::new(State::Claimed, w.gen(), w.seen()))
                .is_ok();
        self.sent += 1;
        ok.then_some(w.gen())
    }
}

#[cfg(test)]
mod tests;
