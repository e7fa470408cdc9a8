//! The agreement on communicators other than MPI_COMM_WORLD (all ranks on one node): one word
//! per (rank, context id) in shared memory, instead of the world's flag slots.
//!
//! A communicator's calls have numbers (`collcheck::CallNo::seq`) that are the same on every
//! rank and increase from call to call; the words carry `number << 1 | device`, where the
//! number is the call's and its attempt's (a call a GPU path declined may be offered to the
//! next one, which agrees again). For a call eligible for a GPU path, with number `v` on the
//! words ([`CommState::number`]):
//! - [`Role::Tell`]: a rank whose buffers are not device memory knows the verdict ("no")
//!   already: it stores `v << 1` into its own word ([`Words::tell`]) and takes the host paths
//!   at once, waiting for nobody. A host-only program pays one store per call.
//! - [`Role::Round`]: a rank with device buffers stores `v << 1 | 1`, then reads the
//!   word of every other member ([`Words::round`]) until it holds `v` or more. `v` with the
//!   device bit: that rank passes device memory; `v` without it, or a later number: "no".
//!   A later number is a "no" because a rank publishes a later call only after finishing
//!   this one, and a rank whose verdict was "GPU" cannot finish the call before every rank has
//!   read the words (the GPU paths need every rank). So every reader reaches the same verdict:
//!   all "GPU" exactly when every rank stored `v` with its device bit, which then stays until
//!   all have read it.
//! - [`Role::Trust`]: no words: the GPU path's state on the communicator is set up
//!   ("ready", the same on every rank) or a round found every rank passing device memory
//!   ([`CommState::stable`], latched by every rank at the same call, see above); the GPU path
//!   agrees by its own exchanges. A rank that never passed device memory to a collective
//!   cannot be in either state, so it tells without asking the path.
//!
//! A word is never reset: context ids are reused after `MPI_Comm_free`, and a rank that is
//! still reading an earlier communicator's word must see it grow. The first call of a
//! communicator that needs the words therefore exchanges every member's last number on its
//! context id (with its device bit: that exchange is also the call's agreement, see
//! [`CommState::start`]), and the communicator numbers its calls above the largest
//! ([`CommState::number`]). Nothing here reads a shared bit that another rank might set later
//! in the same call: a rank's word changes only when it publishes a call.

use super::super::collcheck::CallNo;
use super::super::flag::wait_for;
use super::Role;
use crate::mpi::error::MpiResult;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Context ids with a word: communicators with a larger id agree by their GPU path's own
/// exchanges ([`Role::Trust`]).
pub const CTXS: usize = 512;
/// Bytes of one rank's words.
pub const BYTES: usize = CTXS * 8;
// The shared-memory transport reserves this much of each rank's segment for the words.
const _: () = assert!(BYTES <= crate::transport::shm::AGREE_WORDS_BYTES);
/// Word checks between two calls of `idle` while waiting.
const CHECKS: usize = 16;
const _: () = assert!(CallNo::MAX_SUB < 256);

/// The role of a rank (never [`Role::Skip`]): `device`: its buffers are device memory;
/// `seen`: this process passed device memory to a collective before or now
/// (`agree::State::seen`); `ready`: the GPU path's state is set up on the communicator (asked
/// only where `seen`); `stable`: [`CommState::stable`].
pub fn comm_role(device: bool, seen: bool, ready: impl FnOnce() -> bool, stable: bool) -> Role {
    if !seen {
        return Role::Tell;
    }
    if stable || ready() {
        Role::Trust
    } else if device {
        Role::Round
    } else {
        Role::Tell
    }
}

/// One communicator's side of the agreement (see the module doc).
#[derive(Debug, Default)]
pub struct CommState {
    /// Added to the call numbers on the words; 0 until the first call that needs the words.
    base: AtomicU64,
    stable: AtomicBool,
}

impl CommState {
    pub const fn new() -> Self {
        CommState {
            base: AtomicU64::new(0),
            stable: AtomicBool::new(false),
        }
    }

    /// Whether a round (or [`CommState::start`]) found every rank passing device memory.
    pub fn stable(&self) -> bool {
        self.stable.load(Ordering::Relaxed)
    }

    /// The number on the words of call `no` (its sequence number and the internal collective
    /// that agrees, which tells the attempts of one call apart); `None` before
    /// [`CommState::start`].
    pub fn number(&self, no: CallNo) -> Option<u64> {
        match self.base.load(Ordering::Relaxed) {
            0 => None,
            b => Some((b + no.seq) << 8 | no.sub as u64),
        }
    }

    /// The first call that needs the words: `all` holds every member's [`Words::last`]
    /// `<< 1 | device` (exchanged by every member in that call, in any order). Numbers the
    /// communicator's calls above every member's last number and returns the call's verdict:
    /// whether every rank passes device memory (then [`CommState::stable`] latches).
    pub fn start(&self, all: &[u64]) -> bool {
        let last = all.iter().map(|w| w >> 1).max().unwrap_or(0);
        self.base.store((last >> 8) + 1, Ordering::Relaxed);
        let device = all.iter().all(|w| w & 1 != 0);
        if device {
            self.stable.store(true, Ordering::Relaxed);
        }
        device
    }
}

/// Every rank's words, as seen by this process.
#[derive(Clone, Copy)]
pub struct Words {
    /// World rank -> address of its words (0: not mapped here).
    bases: &'static [usize],
    oversubscribed: bool,
}

impl Words {
    /// # Safety
    /// Every nonzero `bases[r]` must be the start of world rank r's words ([`BYTES`] bytes,
    /// 8-byte aligned, zero before any rank used them, readable and writable by this process)
    /// for as long as this value and its copies are used.
    pub unsafe fn new(bases: &'static [usize]) -> Self {
        Words {
            bases,
            oversubscribed: false,
        }
    }

    /// Mark the ranks as sharing cores: waits check once, then go to `idle`.
    pub fn oversubscribed(self, yes: bool) -> Self {
        Words {
            oversubscribed: yes,
            ..self
        }
    }

    pub fn is_oversubscribed(&self) -> bool {
        self.oversubscribed
    }

    /// Whether the communicator with context id `ctx` and members `peers` (world ranks) has
    /// words: the id has one, and every member's words are mapped here.
    pub fn covers(&self, ctx: u32, peers: &[usize]) -> bool {
        (ctx as usize) < CTXS
            && peers
                .iter()
                .all(|&r| self.bases.get(r).is_some_and(|&b| b != 0))
    }

    fn word(&self, r: usize, ctx: u32) -> &AtomicU64 {
        assert!((ctx as usize) < CTXS && self.bases[r] != 0);
        // SAFETY: new's contract: rank r's words are live, aligned, CTXS words long.
        unsafe { &*((self.bases[r] + ctx as usize * 8) as *const AtomicU64) }
    }

    /// The last number world rank `me` published on `ctx`, with its device bit
    /// (`number << 1 | device`), for [`CommState::start`].
    pub fn last(&self, me: usize, ctx: u32) -> u64 {
        self.word(me, ctx).load(Ordering::Relaxed)
    }

    /// [`Role::Tell`]: publish "no" as call `v`.
    pub fn tell(&self, me: usize, ctx: u32, v: u64) {
        self.word(me, ctx).store(v << 1, Ordering::Release);
    }

    /// [`Role::Round`]: publish "device" as call `v`, then read the words of `peers`
    /// (world ranks, `me` among them) until each holds `v` or a later call; the verdict is
    /// whether every one holds `v` with its device bit (then [`CommState::stable`] latches).
    pub fn round(
        &self,
        me: usize,
        ctx: u32,
        peers: &[usize],
        v: u64,
        state: &CommState,
        idle: &mut dyn FnMut() -> MpiResult<()>,
    ) -> MpiResult<bool> {
        self.word(me, ctx).store(v << 1 | 1, Ordering::Release);
        let checks = if self.oversubscribed { 1 } else { CHECKS };
        let mut all = true;
        for &r in peers.iter().filter(|&&r| r != me) {
            let w = self.word(r, ctx);
            let seen = std::cell::Cell::new(0);
            wait_for(checks, idle, || {
                seen.set(w.load(Ordering::Acquire));
                seen.get() >> 1 >= v
            })?;
            all &= seen.get() == (v << 1 | 1);
        }
        if all {
            state.stable.store(true, Ordering::Relaxed);
        }
        Ok(all)
    }
}

#[cfg(test)]
mod tests;
