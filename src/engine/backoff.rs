//! Bounded back-off for blocking waits: spin, then yield, then sleep with a growing delay capped
//! at 50 us. Oversubscribed ranks (7 ranks on 2 cores) hand the core over quickly instead of
//! spinning the machine to a halt, while a lone waiter still reacts within a few hundred ns.
//!
//! The spin phase is short (20 rounds of progress, about 1-2 us): a reply from a peer on another
//! core comes within it, and a peer that shares this core (unbound ranks, a loaded machine) can
//! only answer once we yield, so every extra spin is latency (300 spins made an 8-byte allreduce
//! of 2 ranks sharing a core take 16 us; 20 make it 3 us). Yields then go on for a while (each
//! is a syscall of well under 1 us when nothing else is runnable) before sleeping starts.
//!
//! ```ignore
//! let mut b = Backoff::new();
//! while !done() {
//!     if engine.progress() { b.reset() } else { b.snooze() }
//! }
//! ```

use std::time::Duration;

const SPINS: u32 = 20;
const YIELDS: u32 = 500;
const MAX_SLEEP_US: u64 = 50;

#[derive(Debug, Default, Clone)]
pub struct Backoff {
    step: u32,
}

impl Backoff {
    pub fn new() -> Self {
        Backoff { step: 0 }
    }

    /// For ranks that share cores with other ranks (more ranks than cores): no spinning, yield
    /// from the first wait (the peer that must answer may be waiting for this core).
    pub fn yielding() -> Self {
        Backoff { step: SPINS }
    }

    /// Call after progress was made: start spinning again.
    pub fn reset(&mut self) {
        self.step = 0;
    }

    /// Wait a little; each call waits at least as long as the previous one, up to 50 us.
    pub fn snooze(&mut self) {
        if self.step < SPINS {
            std::hint::spin_loop();
        } else if self.step < SPINS + YIELDS {
            std::thread::yield_now();
        } else {
            std::thread::sleep(self.sleep_time());
        }
        self.step = self.step.saturating_add(1);
    }

    /// The sleep of the next `snooze` once spinning and yielding are over: doubling from 1 us,
    /// capped at 50 us.
    fn sleep_time(&self) -> Duration {
        let k = self.step.saturating_sub(SPINS + YIELDS).min(6);
        Duration::from_micros((1u64 << k).min(MAX_SLEEP_US))
    }

    /// Whether the spinning phase is over (callers may release locks around `snooze` then).
    pub fn is_sleeping(&self) -> bool {
        self.step >= SPINS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sleep_is_capped() {
        let mut b = Backoff::new();
        for _ in 0..SPINS + YIELDS {
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
}
