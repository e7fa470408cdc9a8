//! Which path a receiver's pull of a contiguous device message from a peer GPU's CUDA-IPC-mapped
//! buffer into its own device memory takes (`gpu::p2p`), chosen from what the pulls of this
//! process measure, not from a size tuned on one machine:
//! - [`Path::Narrow`]: the one-block resident kernel (one host <-> kernel round trip; at most
//!   16 KiB, [`NARROW_MAX`]), alone up to [`MEASURE_ABOVE`];
//! - [`Path::Wide`]: the wide resident kernel (one round trip, one block per 4 KiB loading over
//!   the link at once);
//! - [`Path::Engine`]: the copy engine (`cuMemcpyAsync`, an event the engine polls): a fixed
//!   driver cost of several microseconds, the links' full bandwidth.
//!
//! With `GPUMPI_GPU_PULL=auto` (the default), pulls of `MEASURE_ABOVE < len <= MEASURE_MAX` are
//! sorted into power-of-two size classes, per (device, peer); in each class every path that can
//! take the pull is first tried [`FIRST`] times, then the path with the lowest of its last
//! [`WINDOW`] times is taken, and every [`REPROBE`]-th pull of the class takes the next path in
//! turn (so a path that became cheaper, or a winner that became dearer, is seen). A probe costs
//! at most the difference between two paths, once per [`REPROBE`] pulls. The times are what
//! the caller measured: a resident copy from its command to its completion, a copy-engine copy
//! from its issue to the engine's seeing its event done.
//!
//! Pure: no CUDA here; `gpu::p2p` says which paths can take a pull and reports the times.

use std::collections::HashMap;

/// A pull's path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// The one-block resident kernel.
    Narrow,
    /// The wide resident kernel.
    Wide,
    /// The copy engine.
    Engine,
}

impl Path {
    fn index(self) -> usize {
        match self {
            Path::Narrow => 0,
            Path::Wide => 1,
            Path::Engine => 2,
        }
    }
}

/// `GPUMPI_GPU_PULL`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Measured per size class ([`Picker`]).
    Auto,
    /// The one-block kernel up to [`NARROW_MAX`], the copy engine above.
    Engine,
    /// The wide kernel for every pull it can take, whatever the size (tests of that path).
    Wide,
}

impl Mode {
    /// `auto`, `ce` or `wide` (case and blanks ignored); `None` otherwise.
    pub fn parse(s: &str) -> Option<Mode> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Some(Mode::Auto),
            "ce" => Some(Mode::Engine),
            "wide" => Some(Mode::Wide),
            _ => None,
        }
    }
}

/// Largest pull the one-block kernel takes (its copy limit).
pub const NARROW_MAX: usize = crate::gpu::resident::kernel::COPY_MAX;
/// Pulls up to this take the one-block kernel without measuring: its one round trip with one
/// block is as fast as the wide kernel's there (4 KiB collectives tie, benches/NOTES.md) and
/// faster than the copy engine's fixed cost.
pub const MEASURE_ABOVE: usize = 4 << 10;
/// Largest pull that is measured; larger ones take the copy engine (its bandwidth is the links'
/// full bandwidth, and its fixed cost is small against the transfer).
pub const MEASURE_MAX: usize = 64 << 20;
/// Times each path is tried in a class before the picker chooses.
pub const FIRST: usize = 2;
/// Times kept per path and class: the lowest is the path's estimate.
pub const WINDOW: usize = 4;
/// Every this many pulls of a class, the next path in turn is taken once.
pub const REPROBE: u64 = 64;

/// The size class of a measured pull: 0 for `MEASURE_ABOVE + 1 ..= 2 * MEASURE_ABOVE`, one
/// more per doubling; `None` outside the measured sizes.
pub fn class(len: usize) -> Option<usize> {
    if len <= MEASURE_ABOVE || len > MEASURE_MAX {
        return None;
    }
    let bits = (usize::BITS - (len - 1).leading_zeros()) as usize;
    Some(bits - MEASURE_ABOVE.trailing_zeros() as usize - 1)
}

/// The last [`WINDOW`] times of one path in one class.
#[derive(Clone, Copy, Default, Debug)]
struct Times {
    ns: [u64; WINDOW],
    n: usize,
}

impl Times {
    fn add(&mut self, ns: u64) {
        self.ns[self.n % WINDOW] = ns;
        self.n += 1;
    }

    fn best(&self) -> Option<u64> {
        self.ns[..self.n.min(WINDOW)].iter().copied().min()
    }
}

#[derive(Clone, Copy, Default, Debug)]
struct Class {
    times: [Times; 3],
    pulls: u64,
}

/// The measured choice of one (device, peer) pair.
#[derive(Default, Debug)]
pub struct Picker {
    classes: HashMap<usize, Class>,
}

impl Picker {
    /// The path for a pull of `len` bytes that `can` (in order of preference while untried:
    /// the order in which paths are first tried) can take; `can` is not empty.
    pub fn pick(&mut self, len: usize, can: &[Path]) -> Path {
        let Some(k) = class(len) else {
            return can[0];
        };
        if can.len() == 1 {
            return can[0];
        }
        let c = self.classes.entry(k).or_default();
        c.pulls += 1;
        if let Some(&p) = can.iter().find(|p| c.times[p.index()].n < FIRST) {
            return p;
        }
        if c.pulls.is_multiple_of(REPROBE) {
            return can[(c.pulls / REPROBE) as usize % can.len()];
        }
        *can.iter()
            .min_by_key(|p| c.times[p.index()].best().unwrap_or(u64::MAX))
            .expect("can is not empty")
    }

    /// A pull of `len` bytes by `path` took `ns` nanoseconds.
    pub fn record(&mut self, len: usize, path: Path, ns: u64) {
        if let Some(k) = class(len) {
            self.classes.entry(k).or_default().times[path.index()].add(ns);
        }
    }
}

/// The paths that can take a pull of `len` bytes under `mode`: the one-block kernel where
/// `narrow` (resident copies are usable here) and `len <= NARROW_MAX`, the wide kernel where
/// `wide` (usable, and the ends aligned), the copy engine always; in the order the picker tries
/// them. Without measuring (`mode` not auto, or outside the measured sizes) the first is taken.
pub fn candidates(mode: Mode, len: usize, narrow: bool, wide: bool) -> Vec<Path> {
    let narrow = narrow && len <= NARROW_MAX;
    let mut v = Vec::with_capacity(3);
    match mode {
        Mode::Wide if wide => v.push(Path::Wide),
        Mode::Auto if class(len).is_some() => {
            if wide {
                v.push(Path::Wide);
            }
            if narrow {
                v.push(Path::Narrow);
            }
        }
        _ => {}
    }
    if narrow && !v.contains(&Path::Narrow) {
        v.push(Path::Narrow);
    }
    v.push(Path::Engine);
    if mode != Mode::Auto || class(len).is_none() {
        v.truncate(1);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_by_doubling() {
        assert_eq!(class(4096), None);
        assert_eq!(class(4097), Some(0));
        assert_eq!(class(8192), Some(0));
        assert_eq!(class(8193), Some(1));
        assert_eq!(class(16 << 10), Some(1));
        assert_eq!(class(32 << 10), Some(2));
        assert_eq!(class(1 << 20), Some(7));
        assert_eq!(class(MEASURE_MAX), Some(13));
        assert_eq!(class(MEASURE_MAX + 1), None);
        assert_eq!(class(0), None);
    }

    #[test]
    fn modes_parse() {
        assert_eq!(Mode::parse(" AUTO "), Some(Mode::Auto));
        assert_eq!(Mode::parse("ce"), Some(Mode::Engine));
        assert_eq!(Mode::parse("wide"), Some(Mode::Wide));
        assert_eq!(Mode::parse("kernel"), None);
    }

    #[test]
    fn candidates_by_mode_and_size() {
        use Path::*;
        // Auto: the one-block kernel alone up to 4 KiB, then every usable path measured; the
        // copy engine alone above the measured sizes.
        assert_eq!(candidates(Mode::Auto, 4096, true, true), [Narrow]);
        assert_eq!(
            candidates(Mode::Auto, 4097, true, true),
            [Wide, Narrow, Engine]
        );
        assert_eq!(
            candidates(Mode::Auto, 16 << 10, true, true),
            [Wide, Narrow, Engine]
        );
        assert_eq!(
            candidates(Mode::Auto, (16 << 10) + 1, true, true),
            [Wide, Engine]
        );
        assert_eq!(candidates(Mode::Auto, 1 << 20, true, false), [Engine]);
        assert_eq!(candidates(Mode::Auto, 8 << 10, false, false), [Engine]);
        assert_eq!(
            candidates(Mode::Auto, MEASURE_MAX + 1, true, true),
            [Engine]
        );
        // `ce`: today's rule, whatever the wide kernel could do.
        assert_eq!(candidates(Mode::Engine, 16 << 10, true, true), [Narrow]);
        assert_eq!(candidates(Mode::Engine, 32 << 10, true, true), [Engine]);
        // `wide`: every size it can take; otherwise as `ce`.
        assert_eq!(candidates(Mode::Wide, 1, true, true), [Wide]);
        assert_eq!(candidates(Mode::Wide, 1 << 30, true, true), [Wide]);
        assert_eq!(candidates(Mode::Wide, 8, true, false), [Narrow]);
        assert_eq!(candidates(Mode::Wide, 1 << 20, true, false), [Engine]);
        // Resident copies off (a GPU shared by processes, GPUMPI_GPU_SMALL_COPY=0): the engine.
        assert_eq!(candidates(Mode::Auto, 8, false, false), [Engine]);
    }

    /// A machine: each path's time for `len` bytes, `a + len / bw` (ns, bytes per ns).
    struct Machine {
        cost: [(f64, f64); 3],
    }

    impl Machine {
        fn time(&self, p: Path, len: usize) -> u64 {
            let (a, bw) = self.cost[p.index()];
            (a + len as f64 / bw) as u64
        }
    }

    /// Run `pulls` pulls of `len` on `m`, recording each; the paths taken.
    fn drive(p: &mut Picker, m: &Machine, len: usize, pulls: usize) -> Vec<Path> {
        (0..pulls)
            .map(|_| {
                let can = candidates(Mode::Auto, len, true, true);
                let path = p.pick(len, &can);
                p.record(len, path, m.time(path, len));
                path
            })
            .collect()
    }

    /// How often the cheapest path on `m` was taken in `paths` (of a pull of `len`).
    fn share_of_best(m: &Machine, len: usize, paths: &[Path]) -> f64 {
        let can = candidates(Mode::Auto, len, true, true);
        let best = *can.iter().min_by_key(|p| m.time(**p, len)).unwrap();
        paths.iter().filter(|&&p| p == best).count() as f64 / paths.len() as f64
    }

    /// The H100 pair of the measurements (benches/NOTES.md, issue of the device latency step):
    /// the one-block kernel ~1 us + one block's ~10 GB/s, the wide one ~1.3 us + ~150 GB/s, the
    /// copy engine ~8 us + ~370 GB/s. The wide kernel from 8 KiB to a few MiB, then the copy
    /// engine; on a machine whose copy engine has no fixed cost to speak of (and a slow wide
    /// kernel) the copy engine everywhere above 4 KiB.
    #[test]
    fn picks_the_measured_cheapest_path_per_size() {
        let h100 = Machine {
            cost: [(1000.0, 10.0), (1300.0, 150.0), (8000.0, 370.0)],
        };
        let cheap_ce = Machine {
            cost: [(1000.0, 2.0), (3000.0, 20.0), (500.0, 50.0)],
        };
        for (m, expect) in [
            (
                &h100,
                &[
                    (8 << 10, Path::Wide),
                    (32 << 10, Path::Wide),
                    (1 << 20, Path::Wide),
                    (16 << 20, Path::Engine),
                ][..],
            ),
            (
                &cheap_ce,
                &[
                    (8 << 10, Path::Engine),
                    (1 << 20, Path::Engine),
                    (16 << 20, Path::Engine),
                ][..],
            ),
        ] {
            let mut p = Picker::default();
            for &(len, want) in expect {
                let paths = drive(&mut p, m, len, 1000);
                let can = candidates(Mode::Auto, len, true, true);
                assert_eq!(
                    *can.iter().min_by_key(|q| m.time(**q, len)).unwrap(),
                    want,
                    "the model's cheapest at {len}"
                );
                // Trials: FIRST per path; then one probe per REPROBE pulls.
                let share = share_of_best(m, len, &paths);
                assert!(
                    share > 0.97,
                    "{len} B: the cheapest path {share} of the time"
                );
                assert_eq!(paths[paths.len() - 2], want, "{len} B settles on {want:?}");
            }
        }
    }

    /// Noise: one slow sample of the winner (a preempted pull) does not move the choice for
    /// longer than the window; a path that became dearer is left after WINDOW pulls, and one
    /// that became cheaper is found at its next probe.
    #[test]
    fn follows_a_change_and_ignores_a_spike() {
        let len = 64 << 10;
        let mut p = Picker::default();
        let fast_wide = Machine {
            cost: [(1000.0, 10.0), (1300.0, 150.0), (8000.0, 370.0)],
        };
        drive(&mut p, &fast_wide, len, 200);
        p.record(len, Path::Wide, 1_000_000);
        let can = candidates(Mode::Auto, len, true, true);
        assert_eq!(
            p.pick(len, &can),
            Path::Wide,
            "one spike is not the estimate"
        );
        // The wide kernel now slow (the GPU busy): the engine within a window of pulls.
        let slow_wide = Machine {
            cost: [(1000.0, 10.0), (50_000.0, 150.0), (8000.0, 370.0)],
        };
        let paths = drive(&mut p, &slow_wide, len, 3 * REPROBE as usize);
        assert!(
            paths[WINDOW + 1..]
                .iter()
                .filter(|&&q| q == Path::Wide)
                .count()
                <= 4,
            "the dearer wide kernel is left: {paths:?}"
        );
        assert_eq!(paths[paths.len() - 2], Path::Engine);
        // And fast again: found at the next probe of it.
        let paths = drive(&mut p, &fast_wide, len, 3 * REPROBE as usize);
        let back = paths.iter().position(|&q| q == Path::Wide).unwrap();
        assert!(back < 2 * REPROBE as usize, "probed within two rounds");
        assert_eq!(paths[paths.len() - 2], Path::Wide);
    }

    /// Classes are separate: what is learnt at 1 MiB does not decide 8 KiB.
    #[test]
    fn classes_learn_separately() {
        let mut p = Picker::default();
        let m = Machine {
            cost: [(1000.0, 10.0), (1300.0, 150.0), (8000.0, 370.0)],
        };
        drive(&mut p, &m, 16 << 20, 100);
        let can = candidates(Mode::Auto, 8 << 10, true, true);
        assert_eq!(
            p.pick(8 << 10, &can),
            Path::Wide,
            "untried there: tried first"
        );
    }
}
