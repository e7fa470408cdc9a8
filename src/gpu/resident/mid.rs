//! Which resident algorithm takes a call, and the pure arithmetic the wide resident kernel
//! (kernels/resident_mid.cuh) shares with the host: the selection table (data: `tuning.txt`
//! beside this file, replaced by `GPUMPI_GPU_RESIDENT_TUNING`), the size limit
//! (`GPUMPI_GPU_RESIDENT_MAX`), the chunking of a call over the kernel's blocks and the scratch
//! size of a communicator.

use super::kernel::{MID_DATA_OFF, SLOT};
use crate::coll::select::{holds, parse_rows, AlgoRow};
use crate::coll::CollKind;
use std::sync::OnceLock;

/// A resident algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algo {
    /// The one-block kernel (kernels/resident.cuh), at most [`SLOT`] bytes.
    Narrow,
    /// Allreduce: each rank stores its vector into every peer's scratch, each reduces its own.
    OneShot,
    /// Allreduce: reduce-scatter, then allgather, through the scratch.
    TwoShot,
    /// Alltoall, allgather: each rank stores its blocks into the peers' scratch.
    Push,
    /// [`Algo::OneShot`] with the data as LL words (tagged: no flags, no fence), up to a
    /// quarter of the wide limit ([`ll_limit`]).
    OneShotLl,
    /// [`Algo::Push`] with the data as LL words, up to [`ll_limit`].
    PushLl,
    /// [`Algo::OneShot`] with the data as LL128 lines (128-byte lines of 120 data bytes and a
    /// flag word: no flags, no fence, no copy through the plain slots), up to the wide limit.
    OneShotLl128,
    /// [`Algo::Push`] with the data as LL128 lines.
    PushLl128,
    /// Not the resident kernels (the NVLink plans take the call).
    Nvlink,
}

impl Algo {
    fn from_name(s: &str) -> Option<Algo> {
        Some(match s {
            "resident" => Algo::Narrow,
            "one_shot" => Algo::OneShot,
            "two_shot" => Algo::TwoShot,
            "push" => Algo::Push,
            "one_shot_ll" => Algo::OneShotLl,
            "push_ll" => Algo::PushLl,
            "one_shot_ll128" => Algo::OneShotLl128,
            "push_ll128" => Algo::PushLl128,
            "nvlink" => Algo::Nvlink,
            _ => return None,
        })
    }

    /// Whether the algorithm runs collective `kind` at all.
    fn serves(self, kind: CollKind) -> bool {
        match self {
            Algo::Narrow | Algo::Nvlink => matches!(
                kind,
                CollKind::Allreduce | CollKind::Alltoall | CollKind::Allgather
            ),
            Algo::OneShot | Algo::TwoShot | Algo::OneShotLl | Algo::OneShotLl128 => {
                kind == CollKind::Allreduce
            }
            Algo::Push | Algo::PushLl | Algo::PushLl128 => {
                matches!(kind, CollKind::Alltoall | CollKind::Allgather)
            }
        }
    }

    /// Whether it runs on the wide kernel.
    pub fn wide(self) -> bool {
        !matches!(self, Algo::Narrow | Algo::Nvlink)
    }

    /// Whether the wide kernel moves its data as LL words.
    pub fn ll(self) -> bool {
        matches!(self, Algo::OneShotLl | Algo::PushLl)
    }

    /// Whether the wide kernel moves its data as LL128 lines.
    pub fn ll128(self) -> bool {
        matches!(self, Algo::OneShotLl128 | Algo::PushLl128)
    }
}

pub type Row = AlgoRow<Algo>;

/// The built-in table.
pub const DEFAULT_TABLE: &str = include_str!("tuning.txt");

fn parse_table(text: &str) -> Result<Vec<Row>, String> {
    parse_rows(text, "resident tuning table", |kind, name| {
        Algo::from_name(name).filter(|a| a.serves(kind))
    })
}

fn table() -> &'static [Row] {
    static T: OnceLock<Vec<Row>> = OnceLock::new();
    T.get_or_init(|| {
        if let Some(path) = &crate::config::snapshot().gpu.resident_tuning {
            match std::fs::read_to_string(path)
                .map_err(|e| e.to_string())
                .and_then(|t| parse_table(&t))
            {
                Ok(rows) => return rows,
                Err(e) => {
                    tracing::warn!("GPUMPI_GPU_RESIDENT_TUNING={path}: {e}; built-in table used")
                }
            }
        }
        parse_table(DEFAULT_TABLE).expect("the built-in resident tuning table parses")
    })
}

/// The algorithm of the first row of `rows` that matches the call and can serve it: the
/// one-block kernel up to `narrow_max` bytes, the wide one up to `wide_max` (its LL algorithms
/// up to [`ll_limit`] of it). `None`: not the resident kernels (an `nvlink` row, or no row
/// left).
pub fn select_from(
    rows: &[Row],
    kind: CollKind,
    nranks: usize,
    bytes: usize,
    narrow_max: usize,
    wide_max: usize,
) -> Option<Algo> {
    rows.iter()
        .filter(|r| r.kind == kind && r.conds.iter().all(|c| holds(c, nranks, bytes)))
        .map(|r| r.algo)
        .find(|a| match a {
            Algo::Narrow => bytes <= narrow_max,
            Algo::Nvlink => true,
            a if a.ll() => bytes <= ll_limit(wide_max),
            _ => bytes <= wide_max,
        })
        .filter(|a| *a != Algo::Nvlink)
}

/// [`select_from`] on the table in use: `narrow_max` the one-block kernel's limit of the
/// current mode; the wide kernel only with peer access (`ipc`), up to
/// `GPUMPI_GPU_RESIDENT_MAX`.
pub fn select(
    kind: CollKind,
    nranks: usize,
    bytes: usize,
    narrow_max: usize,
    ipc: bool,
) -> Option<Algo> {
    let wide_max = if ipc { wide_limit() } else { 0 };
    select_from(table(), kind, nranks, bytes, narrow_max, wide_max)
}

/// The largest call of the wide kernel (`GPUMPI_GPU_RESIDENT_MAX`, rounded up to 16 bytes; 0
/// when it is not above the one-block kernel's [`SLOT`]): also its slot size.
pub fn wide_limit() -> usize {
    let m = crate::config::snapshot().gpu.resident_max;
    if m <= SLOT {
        0
    } else {
        m.next_multiple_of(16)
    }
}

/// The largest call of the LL algorithms on a wide kernel of slot `slot`: a quarter of it (the
/// LL words, twice the data, go to a separate area of half a slot per sender, [`ll_slot`]).
pub fn ll_limit(slot: usize) -> usize {
    slot / 4
}

/// Bytes of the LL area of one (parity, sender): twice [`ll_limit`], 16-byte aligned, and one
/// word for the padded last one (kernels/resident_mid.cuh, `mid_ll_slot`: the two must agree).
pub fn ll_slot(slot: usize) -> usize {
    (slot / 2).next_multiple_of(16) + 16
}

/// Bytes of the LL128 area of one (parity, sender): the 128-byte lines of `slot` bytes, 120
/// data bytes a line (kernels/resident_mid.cuh, `mid_ll128_slot`: the two must agree).
pub fn ll128_slot(slot: usize) -> usize {
    slot.div_ceil(8).div_ceil(15) * 128
}

/// Offset of the LL128 area in a scratch of `nranks` with slots of `slot` bytes: after the LL
/// area, 128-byte aligned (a line must not straddle two 128-byte segments).
pub fn ll128_area(nranks: usize, slot: usize) -> usize {
    (MID_DATA_OFF + 2 * (nranks + 1) * slot + 2 * nranks * ll_slot(slot)).next_multiple_of(128)
}

/// Piece `i` of `parts` of `len` bytes: (offset, length), in 16-byte units except the last
/// piece (kernels/resident_mid.cuh, `mid_chunk`: the two must agree).
pub fn chunk(len: usize, parts: usize, i: usize) -> (usize, usize) {
    super::super::call::chunk(len, parts, i, 16)
}

/// Least bytes a block of the wide kernel takes in one command (fewer blocks for less data:
/// each block costs a flag exchange with every peer).
pub const BLOCK_MIN: usize = 4 << 10;

/// Blocks a command of `algo` on `bytes` (per rank, as in the shape) runs on, of the `blocks`
/// the communicator agreed: enough that each block moves about [`BLOCK_MIN`] of the largest
/// piece a rank sends one peer (two-shot: one slice of the vector).
pub fn blocks_for(algo: Algo, nranks: usize, bytes: usize, blocks: usize) -> usize {
    let piece = match algo {
        Algo::TwoShot => bytes.div_ceil(nranks.max(1)),
        _ => bytes,
    };
    piece.div_ceil(BLOCK_MIN).clamp(1, blocks.max(1))
}

/// Bytes of one rank's wide scratch for a communicator of `nranks` with slots of `slot` bytes:
/// flags and descriptor, the push area [2][nranks][slot], the gather area [2][slot], the LL
/// area [2][nranks][ll_slot], the LL128 area [2][nranks][ll128_slot].
pub fn scratch_bytes(nranks: usize, slot: usize) -> usize {
    ll128_area(nranks, slot) + 2 * nranks * ll128_slot(slot)
}

#[cfg(test)]
mod tests {
    use super::*;
    use CollKind as K;

    #[test]
    fn the_built_in_table_parses_and_selects_by_size() {
        let rows = parse_table(DEFAULT_TABLE).unwrap();
        let sel = |k, n, b| select_from(&rows, k, n, b, SLOT, 1 << 20);
        for k in [K::Allreduce, K::Alltoall, K::Allgather] {
            assert_eq!(sel(k, 4, 4), Some(Algo::Narrow));
            assert_eq!(sel(k, 2, 4 << 10), Some(Algo::Narrow));
            assert_eq!(
                sel(k, 4, (1 << 20) + 1),
                None,
                "above the limit: NVLink plans"
            );
        }
        for k in [K::Alltoall, K::Allgather] {
            // 2 ranks: LL words up to 128 KiB, then flags.
            assert_eq!(sel(k, 2, SLOT + 4), Some(Algo::PushLl));
            assert_eq!(sel(k, 2, 128 << 10), Some(Algo::PushLl));
            assert_eq!(sel(k, 2, (128 << 10) + 4), Some(Algo::Push));
            assert_eq!(sel(k, 2, 1 << 20), Some(Algo::Push));
            assert_eq!(sel(k, 3, 64 << 10), Some(Algo::Push), "LL only at 2 ranks");
        }
        // Allreduce at 2 ranks: LL words up to 16 KiB, then LL128 lines up to the limit.
        assert_eq!(sel(K::Allreduce, 2, SLOT), Some(Algo::OneShotLl));
        assert_eq!(sel(K::Allreduce, 2, SLOT + 4), Some(Algo::OneShotLl128));
        assert_eq!(sel(K::Allreduce, 2, 1 << 20), Some(Algo::OneShotLl128));
        assert_eq!(
            sel(K::Allreduce, 3, 64 << 10),
            Some(Algo::OneShot),
            "LL128 only at 2 ranks"
        );
        // Allreduce leaves the one-block kernel above 4 KiB; alltoall and allgather above 8 KiB
        // at 2 ranks and at its limit with more.
        assert_eq!(sel(K::Allreduce, 2, (4 << 10) + 4), Some(Algo::OneShotLl));
        assert_eq!(sel(K::Allreduce, 4, 8 << 10), Some(Algo::OneShot));
        assert_eq!(sel(K::Alltoall, 2, 8 << 10), Some(Algo::Narrow));
        assert_eq!(sel(K::Allgather, 2, (8 << 10) + 8), Some(Algo::PushLl));
        assert_eq!(sel(K::Alltoall, 4, SLOT), Some(Algo::Narrow));
        assert_eq!(sel(K::Allgather, 8, SLOT), Some(Algo::Narrow));
        assert_eq!(sel(K::Alltoall, 4, SLOT + 16), Some(Algo::Push));
        assert_eq!(sel(K::Allreduce, 4, 1 << 20), Some(Algo::OneShot));
        assert_eq!(sel(K::Allreduce, 8, 256 << 10), Some(Algo::OneShot));
        assert_eq!(sel(K::Allreduce, 8, (256 << 10) + 8), Some(Algo::TwoShot));
        assert_eq!(sel(K::Alltoall, 8, 1 << 20), Some(Algo::Push));
        assert_eq!(sel(K::Allgather, 3, 100_000), Some(Algo::Push));
        assert_eq!(sel(K::Bcast, 2, 64), None);
        // Host mode (no peer access): the one-block kernel only, with its own limit.
        let host = |k, b| select_from(&rows, k, 4, b, 64 << 10, 0);
        assert_eq!(host(K::Allreduce, 64 << 10), Some(Algo::Narrow));
        assert_eq!(host(K::Alltoall, (64 << 10) + 1), None);
    }

    #[test]
    fn rows_that_cannot_serve_are_skipped_and_bad_rows_are_errors() {
        let rows = parse_table(
            "allreduce bytes<=64k resident\nallreduce nranks>4 nvlink\nallreduce two_shot\n",
        )
        .unwrap();
        // The resident row matches, but 64 KiB is beyond the one-block kernel: next row.
        assert_eq!(
            select_from(&rows, K::Allreduce, 2, 64 << 10, SLOT, 1 << 20),
            Some(Algo::TwoShot)
        );
        assert_eq!(
            select_from(&rows, K::Allreduce, 8, 1024, SLOT, 1 << 20),
            Some(Algo::Narrow)
        );
        assert_eq!(
            select_from(&rows, K::Allreduce, 8, 64 << 10, SLOT, 1 << 20),
            None
        );
        // The wide kernel off (limit 0): nothing above the one-block kernel.
        assert_eq!(select_from(&rows, K::Allreduce, 2, 64 << 10, SLOT, 0), None);
        for bad in [
            "alltoall one_shot",
            "allreduce push",
            "bcast resident",
            "allreduce bytes<x one_shot",
            "allreduce fast",
        ] {
            let e = parse_table(bad).err().expect(bad);
            assert!(e.contains("line 1"), "{e}");
        }
    }

    /// The chunks of the kernel: cover the data exactly once, in order, 16-byte aligned starts,
    /// for every length class and piece count; the two-shot slices of every rank and the blocks'
    /// pieces of each slice do the same.
    #[test]
    fn chunks_cover_every_byte_once_aligned() {
        for len in [
            0usize,
            1,
            2,
            15,
            16,
            17,
            100,
            4096,
            65_538,
            1 << 20,
            (1 << 20) + 6,
        ] {
            for parts in 1..=17 {
                let mut next = 0;
                for i in 0..parts {
                    let (o, n) = chunk(len, parts, i);
                    assert_eq!(o, next, "len {len} parts {parts} piece {i}");
                    assert!(o % 16 == 0 || n == 0);
                    next = o + n;
                }
                assert_eq!(next, len);
            }
            // Two-shot: slices over ranks, then pieces of each slice over blocks.
            for nranks in [2usize, 3, 4, 8] {
                let blocks = blocks_for(Algo::TwoShot, nranks, len.max(1), 16);
                let mut seen = vec![0u8; len];
                for q in 0..nranks {
                    let (so, sl) = chunk(len, nranks, q);
                    for b in 0..blocks {
                        let (co, cl) = chunk(sl, blocks, b);
                        assert!((so + co) % 16 == 0 || cl == 0);
                        for x in &mut seen[so + co..so + co + cl] {
                            *x += 1;
                        }
                    }
                }
                assert!(seen.iter().all(|&x| x == 1), "len {len} nranks {nranks}");
            }
        }
    }

    #[test]
    fn blocks_grow_with_the_data_up_to_the_agreed_count() {
        assert_eq!(blocks_for(Algo::OneShot, 2, 20 << 10, 32), 5);
        assert_eq!(blocks_for(Algo::OneShotLl, 2, 64 << 10, 32), 16);
        assert_eq!(blocks_for(Algo::OneShot, 2, 1, 32), 1);
        assert_eq!(blocks_for(Algo::OneShot, 2, 1 << 20, 32), 32);
        assert_eq!(blocks_for(Algo::Push, 8, 1 << 20, 4), 4);
        assert_eq!(blocks_for(Algo::TwoShot, 4, 256 << 10, 64), 16);
        assert_eq!(blocks_for(Algo::TwoShot, 4, 100, 0), 1);
    }

    /// The scratch holds what the kernel addresses: every push slot (parity, sender), the
    /// gather area of both parities and every LL slot, for the largest call; the LL words of
    /// the largest LL call (16 bytes per 8 data bytes, each block's piece from twice its
    /// offset) fit their LL slot, 16-byte aligned.
    #[test]
    fn scratch_holds_every_slot() {
        for slot in [16400usize, 1 << 20, (1 << 20) + 16, 4 << 20] {
            for n in 1..=crate::gpu::kernels::MAXP {
                let end_push = MID_DATA_OFF + (2 * n) * slot;
                let end_gather = end_push + 2 * slot;
                let end_ll = end_gather + 2 * n * ll_slot(slot);
                assert!(ll128_area(n, slot) >= end_ll && ll128_area(n, slot) < end_ll + 128);
                assert_eq!(ll128_area(n, slot) % 128, 0);
                assert_eq!(
                    scratch_bytes(n, slot),
                    ll128_area(n, slot) + 2 * n * ll128_slot(slot)
                );
            }
            assert_eq!(ll_slot(slot) % 16, 0);
            for len in [ll_limit(slot), ll_limit(slot) - 4, ll_limit(slot) - 12] {
                for blocks in 1..=super::super::kernel::MID_BLOCKS_MAX {
                    for b in 0..blocks {
                        let (o, n) = chunk(len, blocks, b);
                        assert!(2 * o + 16 * n.div_ceil(8) <= ll_slot(slot), "{slot} {len}");
                        assert!(o + 8 * n.div_ceil(8) <= slot, "plain words fit");
                    }
                }
            }
        }
    }

    /// LL128 lines: a slot's data fits its LL128 slot whatever the block count (each block's
    /// lines inside the call's lines: kernels/resident_mid.cuh, `mid_ll128_lines`), and the
    /// LL128 algorithms serve up to the wide limit.
    #[test]
    fn ll128_lines_fit_and_serve_up_to_the_wide_limit() {
        for slot in [16400usize, 1 << 20, (1 << 20) + 16, 4 << 20] {
            assert_eq!(ll128_slot(slot) % 128, 0);
            for len in [1, 119, 120, 121, slot - 4, slot] {
                let lines = len.div_ceil(8).div_ceil(15);
                assert!(lines * 128 <= ll128_slot(slot), "{slot} {len}");
                assert!(lines * 120 >= len, "every byte in a line");
            }
        }
        let rows = parse_table("allreduce one_shot_ll128\nalltoall push_ll128\n").unwrap();
        let sel = |k, b| select_from(&rows, k, 2, b, SLOT, 1 << 20);
        assert_eq!(sel(K::Allreduce, 1 << 20), Some(Algo::OneShotLl128));
        assert_eq!(sel(K::Allreduce, (1 << 20) + 4), None);
        assert_eq!(sel(K::Alltoall, 4 << 10), Some(Algo::PushLl128));
        assert!(Algo::PushLl128.ll128() && Algo::OneShotLl128.wide() && !Algo::OneShotLl128.ll());
        for bad in ["alltoall one_shot_ll128", "allreduce push_ll128"] {
            assert!(parse_table(bad).is_err(), "{bad}");
        }
    }

    /// The LL algorithms: only where they serve, only up to a quarter of the wide limit.
    #[test]
    fn ll_rows_serve_up_to_their_limit() {
        let rows =
            parse_table("allreduce one_shot_ll\nallreduce one_shot\nalltoall push_ll\n").unwrap();
        let sel = |k, b| select_from(&rows, k, 2, b, SLOT, 1 << 20);
        assert_eq!(sel(K::Allreduce, 256 << 10), Some(Algo::OneShotLl));
        assert_eq!(sel(K::Allreduce, (256 << 10) + 4), Some(Algo::OneShot));
        assert_eq!(sel(K::Alltoall, 64 << 10), Some(Algo::PushLl));
        assert_eq!(sel(K::Alltoall, (256 << 10) + 16), None);
        assert!(Algo::OneShotLl.wide() && Algo::PushLl.ll() && !Algo::Push.ll());
        for bad in ["alltoall one_shot_ll", "allreduce push_ll"] {
            assert!(parse_table(bad).is_err(), "{bad}");
        }
    }
}
