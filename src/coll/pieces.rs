//! How a large allreduce between nodes is cut into pieces (`dispatch::piped`): consecutive
//! ranges of the packed vector, each an allreduce of its own. A plan depends only on what every
//! rank of the call knows alike (the vector's bytes, the element size, the piece size and the
//! most pieces the call may number), so every rank cuts the same pieces.
//!
//! Whether to cut at all (`GPUMPI_COLL_PIECE=auto`, [`choose`]) depends on the CPUs of every
//! rank of the job, which `MPI_Init` exchanges ([`RankCpus`]), so every rank chooses alike.

use std::collections::BTreeMap;

/// The piece size `GPUMPI_COLL_PIECE=auto` takes when it chooses pieces.
pub const AUTO_MOST: usize = 4 << 20;

/// CPUs each rank needs to itself for `auto` to choose pieces. A pieced collective keeps
/// several threads of a rank busy at once: the calling thread reduces (or copies) one piece
/// while the network's send and receive helper threads move the next (on the TCP backend, two
/// of each per connection by default). With fewer CPUs than that they take turns on a core,
/// and the pieces' extra rounds and wake-ups cost more than the overlap gains: on 1 CPU per
/// rank, pieces are 1.3-1.6x slower than whole calls; on 32, 9-10% faster (benches/NOTES.md).
pub const PIECE_CPUS: usize = 4;

/// One rank's CPUs, as each rank publishes them at `MPI_Init`: the machine it runs on (ranks of
/// one machine share its CPUs, whatever nodes they are told they are on) and the CPUs of its
/// affinity mask.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankCpus {
    /// Names the machine (the kernel's boot id): equal for ranks that share CPUs.
    pub machine: String,
    /// CPU numbers the rank may run on, ascending.
    pub cpus: Vec<usize>,
}

/// CPU numbers beyond this are taken as corrupt input (Linux supports at most 8192 CPUs).
const CPU_LIMIT: usize = 1 << 16;

impl RankCpus {
    /// `machine cpulist`, the list in the kernel's form (`0-3,8,10-11`; `-` when empty).
    pub fn to_text(&self) -> String {
        let mut list = Vec::new();
        let mut i = 0;
        while i < self.cpus.len() {
            let mut j = i;
            while j + 1 < self.cpus.len() && self.cpus[j + 1] == self.cpus[j] + 1 {
                j += 1;
            }
            list.push(match i == j {
                true => self.cpus[i].to_string(),
                false => format!("{}-{}", self.cpus[i], self.cpus[j]),
            });
            i = j + 1;
        }
        let list = if list.is_empty() {
            "-".to_string()
        } else {
            list.join(",")
        };
        format!("{} {list}", self.machine)
    }

    /// The inverse of [`RankCpus::to_text`]; `None` when malformed.
    pub fn parse(s: &str) -> Option<RankCpus> {
        let (machine, list) = s.trim().split_once(' ')?;
        let cpus = match list {
            "-" => Vec::new(),
            "" => return None,
            l => crate::config::parse_index_list(l, CPU_LIMIT - 1)?,
        };
        (!machine.is_empty()).then(|| RankCpus {
            machine: machine.to_string(),
            cpus,
        })
    }
}

/// Thousandths of a CPU each rank has to itself: every CPU of its mask counts `1/k`, where `k`
/// ranks of the same machine may run on that CPU (the CPUs shared out equally among the ranks
/// allowed on them). Integer arithmetic, so every rank computes the same numbers.
pub fn milli_cpus(ranks: &[RankCpus]) -> Vec<usize> {
    let mut users: BTreeMap<(&str, usize), usize> = BTreeMap::new();
    for r in ranks {
        for &c in &r.cpus {
            *users.entry((r.machine.as_str(), c)).or_default() += 1;
        }
    }
    ranks
        .iter()
        .map(|r| {
            r.cpus
                .iter()
                .map(|&c| 1000 / users[&(r.machine.as_str(), c)])
                .sum()
        })
        .collect()
}

/// What `GPUMPI_COLL_PIECE=auto` chose, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Choice {
    /// The piece size: [`AUTO_MOST`], or 0 for whole calls.
    pub most: usize,
    /// The fewest thousandths of a CPU a rank has to itself ([`milli_cpus`]).
    pub least_milli: usize,
    /// The lowest rank that has that few.
    pub rank: usize,
}

/// `GPUMPI_COLL_PIECE=auto` for a job whose rank `r` has the CPUs `ranks[r]`: pieces of
/// [`AUTO_MOST`] when every rank has at least [`PIECE_CPUS`] CPUs to itself, else whole calls
/// (the slowest rank paces every collective). A pure function of every rank's inputs, so all
/// ranks that see the same inputs choose alike.
pub fn choose(ranks: &[RankCpus]) -> Choice {
    let milli = milli_cpus(ranks);
    let (rank, least_milli) = milli
        .iter()
        .copied()
        .enumerate()
        .min_by_key(|&(r, m)| (m, r))
        .unwrap_or((0, 0));
    let most = match !ranks.is_empty() && least_milli >= PIECE_CPUS * 1000 {
        true => AUTO_MOST,
        false => 0,
    };
    Choice {
        most,
        least_milli,
        rank,
    }
}

/// Pieces never shrink below this (unless the configured size is smaller): below it a piece's
/// fixed costs (a schedule, its messages' round trips) outweigh the overlap.
pub const MIN_PIECE: usize = 512 << 10;

/// The piece size for a `bytes`-byte vector with `GPUMPI_COLL_PIECE` = `most`: a quarter of the
/// vector, so that even a vector of a few pieces overlaps copies, network and reduction, but
/// half of it up to 1 MiB pieces (four pieces of a 1-2 MiB vector cost more than they overlap),
/// never less than [`MIN_PIECE`] and never more than `most`.
pub fn size(bytes: usize, most: usize) -> usize {
    (bytes / 4)
        .max((bytes / 2).min(1 << 20))
        .max(MIN_PIECE.min(most))
        .min(most)
}

/// The pieces of a `bytes`-byte vector of `elem`-byte elements: `(offset, length)` ranges that
/// cover it in order, each a whole number of elements, about `piece` bytes each (never less
/// than one element), and at most `max` of them (pieces grow where `bytes / piece` is more).
/// Empty for an empty vector.
pub fn plan(bytes: usize, elem: usize, piece: usize, max: usize) -> Vec<(usize, usize)> {
    let elem = elem.max(1);
    if bytes == 0 || max == 0 {
        return Vec::new();
    }
    let elems = bytes.div_ceil(elem);
    let per = (piece / elem).max(1).max(elems.div_ceil(max));
    (0..elems)
        .step_by(per)
        .map(|e| {
            let off = e * elem;
            (off, (per * elem).min(bytes - off))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::plan;

    use super::{choose, milli_cpus, RankCpus, AUTO_MOST, PIECE_CPUS};

    /// A rank on `machine` allowed on `cpus`.
    fn on(machine: &str, cpus: impl IntoIterator<Item = usize>) -> RankCpus {
        RankCpus {
            machine: machine.to_string(),
            cpus: cpus.into_iter().collect(),
        }
    }

    #[test]
    fn cpu_lists_round_trip_in_the_kernels_form() {
        for (cpus, text) in [
            (vec![], "m -"),
            (vec![0], "m 0"),
            (vec![0, 1], "m 0-1"),
            (vec![0, 1, 2, 3, 8, 10, 11], "m 0-3,8,10-11"),
            (vec![5, 7, 9], "m 5,7,9"),
            ((0..64).collect(), "m 0-63"),
        ] {
            let r = on("m", cpus);
            assert_eq!(r.to_text(), text);
            assert_eq!(RankCpus::parse(text), Some(r));
        }
        // Overlapping and unordered ranges are normalized.
        assert_eq!(RankCpus::parse("m 3,0-2,1"), Some(on("m", 0..4)));
        for bad in [
            "",
            "m",
            "m 3-1",
            "m x",
            "m 1,",
            " 0-3",
            "m 0-99999",
            "m 1--2",
        ] {
            assert_eq!(RankCpus::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn cpus_are_shared_equally_among_the_ranks_of_a_machine_allowed_on_them() {
        // Two ranks of one machine, unbound on 64 CPUs: 32 each.
        assert_eq!(
            milli_cpus(&[on("a", 0..64), on("a", 0..64)]),
            [32000, 32000]
        );
        // The same on two machines: 64 each.
        assert_eq!(
            milli_cpus(&[on("a", 0..64), on("b", 0..64)]),
            [64000, 64000]
        );
        // Bound to disjoint halves: 32 each; one bound to CPU 0, one unbound on 0-3.
        assert_eq!(
            milli_cpus(&[on("a", 0..32), on("a", 32..64)]),
            [32000, 32000]
        );
        assert_eq!(milli_cpus(&[on("a", [0]), on("a", 0..4)]), [500, 3500]);
        // Three ranks on 2 CPUs: a third of each (rounded down per CPU).
        assert_eq!(
            milli_cpus(&[on("a", 0..2), on("a", 0..2), on("a", 0..2)]),
            [666; 3]
        );
        // An unreadable mask counts as no CPU.
        assert_eq!(milli_cpus(&[on("a", []), on("a", 0..2)]), [0, 2000]);
    }

    #[test]
    fn auto_chooses_pieces_only_where_every_rank_has_cpus_to_spare() {
        // Every shape of 1-64 CPUs per machine and 1-8 ranks per machine, on 2 machines, all
        // ranks unbound on all of the machine's CPUs, and bound to equal disjoint shares.
        for cpus in 1..=64usize {
            for local in 1..=8usize {
                let unbound: Vec<RankCpus> = ["a", "b"]
                    .iter()
                    .flat_map(|m| (0..local).map(move |_| on(m, 0..cpus)))
                    .collect();
                let c = choose(&unbound);
                let per = cpus * 1000 / local;
                assert_eq!(c.least_milli, (1000 / local) * cpus, "{cpus} {local}");
                // Pieces exactly when each rank has at least PIECE_CPUS (up to rounding).
                if per >= PIECE_CPUS * 1000 + local {
                    assert_eq!(c.most, AUTO_MOST, "{cpus} {local}");
                }
                if per < PIECE_CPUS * 1000 {
                    assert_eq!(c.most, 0, "{cpus} {local}");
                }
                if cpus >= local {
                    let each = cpus / local;
                    let bound: Vec<RankCpus> = ["a", "b"]
                        .iter()
                        .flat_map(|m| (0..local).map(move |i| on(m, i * each..(i + 1) * each)))
                        .collect();
                    let c = choose(&bound);
                    assert_eq!(c.least_milli, each * 1000);
                    assert_eq!(c.most == AUTO_MOST, each >= PIECE_CPUS, "{cpus} {local}");
                }
            }
        }
    }

    #[test]
    fn the_rank_with_the_fewest_cpus_decides() {
        // Emulated nodes on one machine share it: 2 ranks on 1 CPU (taskset -c 0), on 2, on 8.
        let one = choose(&[on("a", [0]), on("a", [0])]);
        assert_eq!((one.most, one.least_milli, one.rank), (0, 500, 0));
        assert_eq!(choose(&[on("a", 0..2), on("a", 0..2)]).most, 0);
        assert_eq!(choose(&[on("a", 0..8), on("a", 0..8)]).most, AUTO_MOST);
        // Two real nodes of 64 CPUs, but one rank of the second bound to CPUs 0-1.
        let mixed = [
            on("a", 0..64),
            on("a", 0..64),
            on("b", 0..2),
            on("b", 0..64),
        ];
        let c = choose(&mixed);
        assert_eq!((c.most, c.least_milli, c.rank), (0, 1000, 2));
        // The same with that rank on 0-15, each of them shared with one other rank: 8 CPUs.
        let mixed = [
            on("a", 0..64),
            on("a", 0..64),
            on("b", 0..16),
            on("b", 0..64),
        ];
        let c = choose(&mixed);
        assert_eq!((c.most, c.least_milli, c.rank), (AUTO_MOST, 8000, 2));
        // A rank whose mask could not be read: whole calls.
        assert_eq!(choose(&[on("a", 0..64), on("b", [])]).most, 0);
        // No ranks: whole calls.
        assert_eq!(choose(&[]).most, 0);
    }

    #[test]
    fn pieces_cover_the_vector_in_whole_elements() {
        for bytes in [
            1usize,
            3,
            4,
            8,
            12,
            4096,
            (4 << 20) - 4,
            4 << 20,
            (8 << 20) + 12,
            1 << 30,
        ] {
            for elem in [1usize, 2, 4, 8, 12, 16] {
                if bytes % elem != 0 {
                    continue;
                }
                for piece in [1usize, 7, 64 << 10, 4 << 20] {
                    for max in [1usize, 2, 3, 254] {
                        let p = plan(bytes, elem, piece, max);
                        assert!(
                            !p.is_empty() && p.len() <= max,
                            "{bytes} {elem} {piece} {max}"
                        );
                        let mut at = 0;
                        for &(off, len) in &p {
                            assert_eq!(off, at);
                            assert!(len > 0 && len % elem == 0, "{bytes} {elem} {piece} {max}");
                            at += len;
                        }
                        assert_eq!(at, bytes);
                        // Every piece but the last is the same size, at least `piece` bytes
                        // (rounded down to whole elements, at least one).
                        let first = p[0].1;
                        assert!(p[..p.len() - 1].iter().all(|&(_, l)| l == first));
                        if p.len() > 1 {
                            assert!(first >= (piece / elem).max(1) * elem);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn piece_sizes_grow_with_the_vector_up_to_the_setting() {
        use super::{size, MIN_PIECE};
        let m = 4 << 20;
        // Below two pieces of the floor: one piece (the caller runs the call whole).
        assert_eq!(size(768 << 10, m), MIN_PIECE);
        // 1-2 MiB: halves; from 2 MiB: quarters of at least 1 MiB; then the setting.
        assert_eq!(size(1 << 20, m), 512 << 10);
        assert_eq!(size(3 << 19, m), 768 << 10);
        assert_eq!(size(2 << 20, m), 1 << 20);
        assert_eq!(size(4 << 20, m), 1 << 20);
        assert_eq!(size(8 << 20, m), 2 << 20);
        assert_eq!(size(16 << 20, m), 4 << 20);
        assert_eq!(size(1 << 30, m), 4 << 20);
        // A setting below the floor is taken as is.
        assert_eq!(size(1 << 30, 64 << 10), 64 << 10);
        assert_eq!(size(100 << 10, 64 << 10), 64 << 10);
        // Never more than the setting, never less than the floor below it, and pieces only
        // grow with the vector.
        for most in [1usize, 4096, 1 << 20, 4 << 20, 16 << 20] {
            let mut last = 0;
            for bytes in (0..=64usize).map(|k| k << 18) {
                let s = size(bytes, most);
                assert!(s <= most && s >= MIN_PIECE.min(most), "{bytes} {most}: {s}");
                assert!(s >= last, "{bytes} {most}: {s} < {last}");
                last = s;
            }
        }
    }

    #[test]
    fn pieces_of_the_usual_sizes() {
        assert_eq!(plan(16 << 20, 4, 4 << 20, 254).len(), 4);
        assert_eq!(plan((16 << 20) + 4, 4, 4 << 20, 254).len(), 5);
        assert_eq!(
            plan(16 << 20, 4, 4 << 20, 2),
            vec![(0, 8 << 20), (8 << 20, 8 << 20)]
        );
        assert!(plan(0, 4, 4 << 20, 254).is_empty());
        // A piece size that is not a whole number of elements rounds down.
        assert_eq!(plan(36, 12, 30, 254), vec![(0, 24), (24, 12)]);
    }
}
