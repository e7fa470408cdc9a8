//! Whether a blocking collective on MPI_COMM_WORLD runs on a GPU path: the round of the flag
//! slots in which the ranks agree on it, and the ranks that need not take part.
//!
//! A call eligible for a GPU path runs there only if every rank passes device buffers, so the
//! ranks agree first: one round of the flag slots (`engine::flag`) in which each rank
//! publishes [`Part`]: "my buffers are device memory", "this process has passed device memory
//! to a collective before" (`seen`) and the call's agreement words
//! (`collcheck::agreement_words`), ANDed over the ranks ([`round`]). A program that never uses
//! device memory would pay that round at every small call before falling back to the host
//! paths. It need not: a rank that passes host memory knows the AND's answer ("no") already.
//! Who does what ([`role`]):
//! - [`Role::Skip`]: a rank that has never passed device memory to a collective and passes
//!   host memory now, in a call the flag slots serve: it takes no part and runs the call's own
//!   flag round at once. The ranks that take part see it publish a later round than theirs
//!   (`Slots::exchange` reports it absent) and count it as "no": every rank then runs the flag
//!   round, so all meet there.
//! - [`Role::Tell`]: the same rank in a larger call: it publishes its "no" into the round
//!   without waiting for the others' parts ([`tell`]) and goes on to the host path, as the
//!   ranks that read it will.
//! - [`Role::Round`]: every other rank takes part ([`round`]).
//! - [`Role::Trust`]: no round, where the caller knows nobody skips: the GPU path's state is
//!   set up ("ready": possible only after a call in which every rank passed device memory, so
//!   every rank has `seen` set), or, in a larger call, an earlier round found every rank's
//!   `seen` set ([`State::stable`]). `seen` is this process's own bit, set before it decides,
//!   and never cleared: a rank with it set never skips. `stable` is latched by the rounds
//!   whose AND says "every rank has seen device memory": every rank that took part read the
//!   same parts (no rank skipped: a skipper's part is "no"), so all latch at the same call.
//!   The GPU paths then agree by their own exchanges, as they always did.
//!
//! Nothing here needs a shared bit that another rank might read too early: the only facts
//! about other ranks come from the rounds themselves, and the rounds' numbering
//! (`collcheck::CallNo::flag`) tells a skipper from a rank that is late.

use super::collcheck::{disagreed, AGREEMENT_WORDS};
use super::flag::Slots;
use crate::mpi::error::{MpiError, MpiResult};
use crate::standard::consts::MPI_ERR_OTHER;
use std::sync::atomic::{AtomicBool, Ordering};

/// What a rank does about the agreement of one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// No part: go straight to the call's flag round (the answer is "no").
    Skip,
    /// Publish "no" without reading ([`tell`]), then take the host paths.
    Tell,
    /// Take part in the round ([`round`]).
    Round,
    /// No round: nobody skips; the GPU path agrees by itself.
    Trust,
}

/// The role of a rank in the agreement of a call on MPI_COMM_WORLD with flag slots:
/// `small`: the flag slots serve the call (the same on every rank); `device`: this rank's
/// buffers are device memory; `seen`: this process passed device memory to a collective
/// before or now ([`State::seen`]); `ready`: the GPU path's state is set up (asked only for a
/// rank that cannot skip); `stable`: [`State::stable`].
pub fn role(
    small: bool,
    device: bool,
    seen: bool,
    ready: impl FnOnce() -> bool,
    stable: bool,
) -> Role {
    if !device && !seen {
        return if small { Role::Skip } else { Role::Tell };
    }
    if ready() || (!small && stable) {
        Role::Trust
    } else {
        Role::Round
    }
}

/// This process's agreement state on MPI_COMM_WORLD (see the module doc).
#[derive(Default)]
pub struct State {
    seen: AtomicBool,
    stable: AtomicBool,
}

impl State {
    pub const fn new() -> Self {
        State {
            seen: AtomicBool::new(false),
            stable: AtomicBool::new(false),
        }
    }

    /// Whether this process has passed device memory to a collective.
    #[inline]
    pub fn seen(&self) -> bool {
        self.seen.load(Ordering::Relaxed)
    }

    /// Note that this process passes device memory to a collective (before it decides a role
    /// in that call).
    pub fn see(&self) {
        if !self.seen() {
            self.seen.store(true, Ordering::Relaxed);
        }
    }

    /// Whether a round found that every rank has seen device memory.
    pub fn stable(&self) -> bool {
        self.stable.load(Ordering::Relaxed)
    }
}

/// One rank's part of a round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Part {
    pub device: bool,
    pub seen: bool,
    pub words: [u64; AGREEMENT_WORDS],
}

/// Bytes of a part: a word of flags, then the agreement words (within the 48 bytes a round
/// keeps in its flag's cache line).
const PART: usize = 8 * (1 + AGREEMENT_WORDS);
const _: () = assert!(PART <= 48);

impl Part {
    /// The part of a rank that took no part (or says "no" without reading): neutral in the
    /// agreement words.
    fn absent() -> Part {
        Part {
            device: false,
            seen: false,
            words: [u64::MAX; AGREEMENT_WORDS],
        }
    }

    fn encode(&self) -> [u8; PART] {
        let mut b = [0u8; PART];
        let flags = self.device as u64 | (self.seen as u64) << 1;
        b[..8].copy_from_slice(&flags.to_le_bytes());
        for (i, w) in self.words.iter().enumerate() {
            b[8 + i * 8..16 + i * 8].copy_from_slice(&w.to_le_bytes());
        }
        b
    }

    fn decode(b: &[u8]) -> Option<Part> {
        if b.len() != PART {
            return None;
        }
        let w = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        Some(Part {
            device: w(0) & 1 != 0,
            seen: w(0) & 2 != 0,
            words: std::array::from_fn(|i| w(1 + i)),
        })
    }

    fn and(&mut self, o: &Part) {
        self.device &= o.device;
        self.seen &= o.seen;
        for (a, b) in self.words.iter_mut().zip(o.words) {
            *a &= b;
        }
    }
}

/// What a round found: whether every rank passes device memory, and the class of the first
/// difference between the ranks' calls (`collcheck::disagreed`), if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub device: bool,
    pub mismatch: Option<i32>,
}

/// [`Role::Tell`]: publish "no" (with the call's agreement words) as round `k` and return.
pub fn tell(
    slots: &Slots,
    k: u64,
    words: [u64; AGREEMENT_WORDS],
    idle: &mut dyn FnMut() -> MpiResult<()>,
) -> MpiResult<()> {
    let part = Part {
        device: false,
        seen: false,
        words,
    };
    slots.contribute(k, &part.encode(), idle)
}

/// [`Role::Round`]: take part in round `k` with `mine`; latches [`State::stable`] where every
/// rank has seen device memory. A rank that skipped the round counts as "no".
pub fn round(
    slots: &Slots,
    state: &State,
    k: u64,
    mine: Part,
    idle: &mut dyn FnMut() -> MpiResult<()>,
) -> MpiResult<Verdict> {
    let mut all = Part {
        device: true,
        seen: true,
        words: [u64::MAX; AGREEMENT_WORDS],
    };
    let mut odd = None;
    slots.exchange(k, &mine.encode(), idle, &mut |r, b| match b {
        Some(b) => match Part::decode(b) {
            Some(p) => all.and(&p),
            None => {
                odd.get_or_insert(r);
                all.and(&Part::absent());
            }
        },
        None => all.and(&Part::absent()),
    })?;
    if let Some(r) = odd {
        return Err(MpiError::new(
            MPI_ERR_OTHER,
            format!("rank {r} took part in another exchange at this point of the call"),
        ));
    }
    let mismatch = disagreed(&all.words);
    if mismatch.is_none() && all.seen {
        state.stable.store(true, Ordering::Relaxed);
    }
    Ok(Verdict {
        device: all.device && mismatch.is_none(),
        mismatch,
    })
}

#[cfg(test)]
mod tests;

pub mod words;
