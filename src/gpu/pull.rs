//! Which path a receiver's pull of a contiguous device message from a peer GPU's CUDA-IPC-mapped
//! buffer into its own device memory takes (`gpu::p2p`):
//! - [`Path::Narrow`]: the one-block resident kernel (one host <-> kernel round trip), up to
//!   [`NARROW_MAX`];
//! - [`Path::Wide`]: the wide resident kernel (one round trip, one block per 4 KiB loading over
//!   the link at once), above that up to `GPUMPI_GPU_PULL_WIDE_MAX`;
//! - [`Path::Engine`]: the copy engine (`cuMemcpyAsync`, an event the engine polls: a fixed
//!   driver cost of several microseconds, then the links' full bandwidth), above, and wherever
//!   the resident kernels cannot take the pull.
//!
//! The default limit comes from the one-way latency measured on 4x H100 NV18 (benches/NOTES.md):
//! the one-block kernel beats the wide one up to 16 KiB (7.3-7.4 against 7.9-8.0 us); the wide
//! one beats the copy engine from 32 KiB (7.9-8.0 against 10.9-11.8 us) to 1 MiB (11.3-11.5
//! against 13.7-14.8), gaining ~250 GB/s against ~400 on the copy engine, so the two meet
//! near 2-3 MiB.
//!
//! Pure: no CUDA here; `gpu::p2p` says what the resident kernels can take.

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

/// Largest pull the one-block kernel takes (its copy limit).
pub const NARROW_MAX: usize = crate::gpu::resident::kernel::COPY_MAX;

/// The path of a pull of `len` bytes: the one-block kernel where `narrow` (resident copies are
/// usable here for this size) and `len <= NARROW_MAX`; else the wide kernel where `wide` (usable,
/// the ends aligned) and `len <= wide_max` (`GPUMPI_GPU_PULL_WIDE_MAX`); else the copy engine.
pub fn path(len: usize, narrow: bool, wide: bool, wide_max: usize) -> Path {
    if narrow && len <= NARROW_MAX {
        Path::Narrow
    } else if wide && len <= wide_max {
        Path::Wide
    } else {
        Path::Engine
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Default limit (2 MiB): the one-block kernel up to 16 KiB, the wide one to 2 MiB, the
    /// copy engine above; `0` keeps the copy engine above 16 KiB; without the resident kernels
    /// (a GPU shared by processes, `GPUMPI_GPU_SMALL_COPY=0`, kernels not loaded yet) or with
    /// unaligned ends, the copy engine.
    #[test]
    fn path_by_size_and_what_can_take_it() {
        use Path::*;
        let d = crate::config::parse_size("2m").unwrap();
        for (len, want) in [
            (1, Narrow),
            (4096, Narrow),
            (16 << 10, Narrow),
            ((16 << 10) + 1, Wide),
            (32 << 10, Wide),
            (1 << 20, Wide),
            (2 << 20, Wide),
            ((2 << 20) + 1, Engine),
            (64 << 20, Engine),
        ] {
            assert_eq!(path(len, true, true, d), want, "{len} B");
        }
        assert_eq!(path(32 << 10, true, true, 0), Engine, "wide off");
        assert_eq!(
            path(8, true, true, 0),
            Narrow,
            "wide off: small ones unchanged"
        );
        assert_eq!(path(32 << 10, true, false, d), Engine, "unaligned");
        assert_eq!(path(8 << 10, true, false, d), Narrow, "unaligned, small");
        assert_eq!(path(8, false, false, d), Engine, "no resident kernels");
        assert_eq!(
            path(1 << 20, false, false, d),
            Engine,
            "no resident kernels"
        );
        assert_eq!(
            path(8, true, true, 64 << 20),
            Narrow,
            "a large limit: small ones unchanged"
        );
        assert_eq!(path(16 << 20, true, true, 64 << 20), Wide);
    }
}
