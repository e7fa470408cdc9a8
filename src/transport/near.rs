//! Single copies whose source and destination lie a short distance apart modulo the page.
//!
//! On some processors (AMD Zen cores among them) the string-move copy that the kernel uses for
//! `process_vm_readv`/`process_vm_writev` (and glibc's `memcpy` for mid sizes) runs several
//! times slower when `(destination - source) mod 4096` is small but not zero: the loads keep
//! hitting the lines the stores just wrote (4 KiB aliasing). Two buffers of the same size
//! allocated one after the other by two processes that ran the same code (a benchmark's send
//! and receive buffers, a halo exchange's) are a few bytes apart in exactly that way.
//!
//! The shared-memory transport measures at set-up whether this machine has the trait (a read
//! at such a distance against the same read at distance zero, [`is_slow`]); where it does, a
//! read or write of such a pair goes through a bounce buffer placed half a page away from both
//! ends ([`bounce_at`]): two copies at full speed instead of one at a fraction of it.

/// Distances (bytes, modulo the page) below this are "near".
pub const NEAR: usize = 64;
const PAGE: usize = 4096;

/// Whether a copy from `src` to `dst` (addresses) has its ends a near, nonzero distance apart
/// modulo the page.
pub fn is_near(dst: usize, src: usize) -> bool {
    let d = dst.wrapping_sub(src) & (PAGE - 1);
    d != 0 && d < NEAR
}

/// Whether the machine's near copies are slow enough to bounce: the measured near read runs
/// at less than half the rate of the far one.
pub fn is_slow(far_gbps: f64, near_gbps: f64) -> bool {
    far_gbps > 0.0 && near_gbps > 0.0 && near_gbps * 2.0 < far_gbps
}

/// The offset in a buffer starting at `base` (at least a page longer than the copy) where a
/// bounce of a copy into `dst` starts: half a page from `dst` modulo the page, so that neither
/// the copy into the bounce nor the one out of it is near (each leg's distance is the near
/// distance plus or minus half a page).
pub fn bounce_at(base: usize, dst: usize) -> usize {
    let want = (dst + PAGE / 2) & (PAGE - 1);
    want.wrapping_sub(base) & (PAGE - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn near_is_a_small_nonzero_distance_modulo_the_page() {
        assert!(!is_near(0x10000, 0x10000));
        assert!(!is_near(0x10000 + 4096, 0x10000));
        assert!(is_near(0x10010, 0x10000));
        assert!(is_near(0x10000 + 65536 + 16, 0x10000));
        assert!(is_near(0x7000_0008, 0x1000_0000));
        assert!(!is_near(0x10040, 0x10000));
        assert!(!is_near(0x10800, 0x10000));
        // A destination just below the source is 4080 bytes "ahead": not near.
        assert!(!is_near(0x10000 - 16, 0x10000));
    }

    #[test]
    fn slow_only_when_the_near_read_is_under_half() {
        // The build VM: far 8.3 GB/s, near 2.1 (benches/micro/near_copy.c).
        assert!(is_slow(8.3, 2.1));
        assert!(!is_slow(8.3, 7.9));
        assert!(!is_slow(8.3, 4.2));
        assert!(!is_slow(0.0, 2.0));
        assert!(!is_slow(8.0, 0.0));
    }

    /// Both legs of a bounced copy are far, whatever the near distance and the bounce
    /// buffer's own alignment.
    #[test]
    fn a_bounce_makes_both_legs_far() {
        for base in [0x5000usize, 0x5008, 0x5010, 0x5ff8, 0x6123] {
            for src in [0x10000usize, 0x10008, 0x2_0ff0] {
                for d in 1..NEAR {
                    let dst = src + 65536 + d;
                    assert!(is_near(dst, src));
                    let off = bounce_at(base, dst);
                    assert!(off < PAGE);
                    let b = base + off;
                    assert!(!is_near(b, src), "base {base:#x} src {src:#x} d {d}");
                    assert!(!is_near(dst, b), "base {base:#x} src {src:#x} d {d}");
                }
            }
        }
    }
}
