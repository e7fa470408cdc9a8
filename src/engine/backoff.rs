//! Bounded back-off for blocking waits: spin, then yield, then sleep with a growing delay capped
//! at 50 us. Oversubscribed ranks (7 ranks on 2 cores) hand the core over quickly instead of
//! spinning the machine to a halt, while a lone waiter still reacts within a few hundred ns.
//!
//! The spin phase of an oversubscribed rank is short (20 rounds of progress, about 1-2 us): a
//! reply from a peer on another core comes within it, and a peer that shares this core can
//! only answer once we yield, so every extra spin is latency (300 spins made an 8-byte allreduce
//! of 2 ranks sharing a core take 16 us; 20 make it 3 us). Yields then go on for a while (each
//! is a syscall of well under 1 us when nothing else is runnable) before sleeping starts.
//!
//! How long to spin before yielding depends on where the peers can be ([`set_placement`],
//! from what the transport found at start-up): a rank bound to a core that no other rank
//! shares spins about a millisecond of progress rounds (no peer can be waiting for its core),
//! a rank of a job with no more ranks than cores a few hundred microseconds (the scheduler
//! spreads them; a peer rarely shares the core), and a rank of an oversubscribed job the 20
//! rounds above. On a loaded machine every yield or sleep hands the core to another process
//! for a whole time slice (milliseconds), which stalls every exchange that needs this rank's
//! answer. Unbound ranks of a job with no more ranks than cores may still find themselves on
//! one core for a while; a long spin therefore looks every few rounds whether another rank of
//! the node runs on its CPU ([`Backoff::time_to_look`]) and yields at once if one does.
//!
//! ```ignore
//! let mut b = Backoff::new();
//! while !done() {
//!     if engine.progress() { b.reset() } else { b.snooze() }
//! }
//! ```

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

const SPINS: u32 = 20;
const YIELDS: u32 = 500;
const MAX_SLEEP_US: u64 = 50;
/// Spin rounds (each a progress pass, ~0.1 us) of a rank with a core of its own, and of a
/// rank of a job with no more ranks than cores.
const OWN_CORE_SPINS: u32 = 10_000;
const SPREAD_SPINS: u32 = 2_000;
/// Spin rounds between two looks at which CPUs the node's other ranks run on
/// ([`Backoff::time_to_look`]).
const LOOK_EVERY: u32 = 16;
static SPIN_ROUNDS: AtomicU32 = AtomicU32::new(SPINS);
static LONG_SLEEPS: AtomicBool = AtomicBool::new(false);
static ALONE: AtomicBool = AtomicBool::new(false);

/// Where this rank runs: `own_core` (bound to one CPU that no other rank of the job is bound
/// to) or `oversubscribed` (more ranks than CPUs), and whether it is `alone` on its node (every
/// peer reached over the network): sets how long blocking waits spin, and whether a wait that
/// only the network can end sleeps in `poll` for up to a millisecond at a time
/// ([`sleeps_long`]).
pub fn set_placement(own_core: bool, oversubscribed: bool, alone: bool) {
    SPIN_ROUNDS.store(spin_rounds(own_core, oversubscribed), Ordering::Relaxed);
    LONG_SLEEPS.store(long_sleeps(oversubscribed, alone), Ordering::Relaxed);
    ALONE.store(alone, Ordering::Relaxed);
}

/// Whether this rank is alone on its node (every peer reached over the network): only then can
/// a blocking wait be one that nothing but the network moves, which yields and sleeps in `poll`
/// (`runtime::wait_loop`); the waits of a rank with node peers never look.
pub fn alone() -> bool {
    ALONE.load(Ordering::Relaxed)
}

/// A rank with node peers waits on shared memory too, which no descriptor shows: its waits
/// never sleep in `poll`, whatever this says. A rank alone on its node whose CPU is shared
/// sleeps until the data comes; one with a CPU of its own sleeps in the back-off's short steps.
fn long_sleeps(oversubscribed: bool, alone: bool) -> bool {
    oversubscribed && alone
}

/// Whether a blocking wait of this rank that only the network can end, once it sleeps in
/// `poll`, sleeps until the data comes (up to a millisecond at a time) rather than in the
/// back-off's 1-50 us steps (`runtime::wait_loop`): a rank alone on its node whose job has
/// more ranks than this machine has CPUs (nodes emulated on one machine), where every early
/// wake-up is CPU time the rank it waits for may be queued behind.
pub fn sleeps_long() -> bool {
    LONG_SLEEPS.load(Ordering::Relaxed)
}

fn spin_rounds(own_core: bool, oversubscribed: bool) -> u32 {
    match (own_core, oversubscribed) {
        (true, false) => OWN_CORE_SPINS,
        (false, false) => SPREAD_SPINS,
        (_, true) => SPINS,
    }
}

#[derive(Debug, Clone)]
pub struct Backoff {
    step: u32,
    /// Sleeps in [`Backoff::block`] since the last reset.
    blocks: u32,
    /// Rounds of spinning before the first yield.
    spins: u32,
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new()
    }
}

impl Backoff {
    pub fn new() -> Self {
        Backoff {
            step: 0,
            blocks: 0,
            spins: SPIN_ROUNDS.load(Ordering::Relaxed),
        }
    }

    /// For ranks that share cores with other ranks (more ranks than cores): no spinning, yield
    /// from the first wait (the peer that must answer may be waiting for this core).
    pub fn yielding() -> Self {
        Backoff {
            step: 0,
            blocks: 0,
            spins: 0,
        }
    }

    /// Call after progress was made: start spinning again.
    pub fn reset(&mut self) {
        self.step = 0;
        self.blocks = 0;
    }

    /// Sleep in `wait` (a `poll` of the descriptors on which what the caller waits for shows)
    /// instead of spinning or yielding, for at most the timeout it is given: doubling from
    /// 1 us, capped at 50 us, as the sleeps of [`Backoff::snooze`].
    pub fn block(&mut self, wait: impl FnOnce(Duration)) {
        let k = self.blocks.min(6);
        wait(Duration::from_micros((1u64 << k).min(MAX_SLEEP_US)));
        self.blocks = self.blocks.saturating_add(1);
    }

    /// Wait a little; each call waits at least as long as the previous one, up to 50 us.
    pub fn snooze(&mut self) {
        if self.step < self.spins {
            std::hint::spin_loop();
        } else if self.step < self.spins + YIELDS {
            std::thread::yield_now();
        } else {
            std::thread::sleep(self.sleep_time());
        }
        self.step = self.step.saturating_add(1);
    }

    /// The sleep of the next `snooze` once spinning and yielding are over: doubling from 1 us,
    /// capped at 50 us.
    fn sleep_time(&self) -> Duration {
        let k = self.step.saturating_sub(self.spins + YIELDS).min(6);
        Duration::from_micros((1u64 << k).min(MAX_SLEEP_US))
    }

    /// How many progress passes a waiter may make back to back, without pausing, before its
    /// next [`Backoff::snooze`]: up to `most` while spinning where the ranks do not outnumber
    /// the cores; one otherwise (where they do, a waiter soon yields to the rank sharing its
    /// core, and a burst would only put that off).
    pub fn burst(&self, most: usize) -> usize {
        if self.step < self.spins && self.spins > SPINS {
            most
        } else {
            1
        }
    }

    /// Whether the caller should look now whether a rank of its node runs on its CPU
    /// (`Transport::shares_cpu`), and [`Backoff::give_way`] if one does: every
    /// [`LOOK_EVERY`]th round of a long spin. Where ranks are not bound, the scheduler may put
    /// two on one core for a while (a third process, a moment's load); a waiter that spins its
    /// full spell there keeps the rank it waits for off the core for the whole spell (hundreds
    /// of microseconds per message), so it looks early and yields.
    pub fn time_to_look(&self) -> bool {
        self.spins > SPINS && self.step < self.spins && self.step % LOOK_EVERY == LOOK_EVERY - 1
    }

    /// A rank of this node runs on this CPU: stop spinning, yield from the next [`snooze`].
    ///
    /// [`snooze`]: Backoff::snooze
    pub fn give_way(&mut self) {
        self.step = self.step.max(self.spins);
    }

    /// Whether the spinning phase is over (callers may release locks around `snooze` then).
    pub fn is_sleeping(&self) -> bool {
        self.step >= self.spins
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A long spin looks every 16 rounds and stops at `give_way`; a short one (oversubscribed)
    /// never looks: it yields within 20 rounds anyway.
    #[test]
    fn long_spins_look_and_give_way() {
        let mut b = Backoff {
            step: 0,
            blocks: 0,
            spins: SPREAD_SPINS,
        };
        let mut looks = Vec::new();
        for _ in 0..64 {
            if b.time_to_look() {
                looks.push(b.step);
            }
            b.snooze();
        }
        assert_eq!(looks, [15, 31, 47, 63]);
        assert!(!b.is_sleeping());
        b.give_way();
        assert!(b.is_sleeping(), "given way: no more spinning");
        assert!(!b.time_to_look());
        b.reset();
        assert!(!b.is_sleeping(), "progress: spinning again");
        let mut short = Backoff {
            step: 0,
            blocks: 0,
            spins: SPINS,
        };
        for _ in 0..SPINS {
            assert!(!short.time_to_look());
            short.snooze();
        }
    }

    #[test]
    fn spins_follow_placement() {
        assert_eq!(spin_rounds(true, false), OWN_CORE_SPINS);
        assert_eq!(spin_rounds(false, false), SPREAD_SPINS);
        assert_eq!(spin_rounds(false, true), SPINS);
        assert_eq!(spin_rounds(true, true), SPINS);
        assert_eq!(Backoff::yielding().spins, 0);
    }

    #[test]
    fn only_a_rank_alone_on_its_node_of_a_crowded_machine_sleeps_long() {
        assert!(long_sleeps(true, true));
        assert!(
            !long_sleeps(true, false),
            "node peers: shared memory, no descriptor"
        );
        assert!(!long_sleeps(false, true), "a CPU of its own: spin first");
        assert!(!long_sleeps(false, false));
    }

    #[test]
    fn bursts_only_while_spinning_on_cores_of_their_own() {
        for (own_core, over, bursts) in [
            (true, false, true),
            (false, false, true),
            (true, true, false),
        ] {
            let mut b = Backoff {
                step: 0,
                blocks: 0,
                spins: spin_rounds(own_core, over),
            };
            assert_eq!(b.burst(8), if bursts { 8 } else { 1 }, "{own_core} {over}");
            for _ in 0..b.spins {
                b.snooze();
            }
            assert_eq!(b.burst(8), 1);
        }
    }

    #[test]
    fn sleep_is_capped() {
        let mut b = Backoff::new();
        for _ in 0..b.spins + YIELDS {
            b.snooze();
        }
        assert!(b.is_sleeping());
        let mut last = Duration::ZERO;
        for _ in 0..20 {
            let d = b.sleep_time();
            assert!(d >= last, "the sleep shrank from {last:?} to {d:?}");
            assert!(
                d <= Duration::from_micros(MAX_SLEEP_US),
                "{d:?} above the cap"
            );
            last = d;
            b.snooze();
        }
        assert_eq!(last, Duration::from_micros(MAX_SLEEP_US));
        b.reset();
        assert!(!b.is_sleeping());
    }

    #[test]
    fn blocking_timeouts_double_to_the_cap_and_restart_after_progress() {
        let mut b = Backoff::new();
        let mut got = Vec::new();
        for _ in 0..8 {
            b.block(|t| got.push(t.as_micros()));
        }
        assert_eq!(got, [1, 2, 4, 8, 16, 32, 50, 50]);
        b.reset();
        b.block(|t| got.push(t.as_micros()));
        assert_eq!(got[8], 1);
    }
}
