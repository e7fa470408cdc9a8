//! How a large allreduce between nodes is cut into pieces (`dispatch::piped`): consecutive
//! ranges of the packed vector, each an allreduce of its own. A plan depends only on what every
//! rank of the call knows alike (the vector's bytes, the element size, the piece size and the
//! most pieces the call may number), so every rank cuts the same pieces.

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
