//! IEEE 754 binary16 and bfloat16 <-> f32, rounding to nearest even (what CUDA's
//! `__float2half_rn` / `__float2bfloat16_rn` do), for the MPIX half-precision datatypes.
//! No dependency: bit manipulation only; every f16 and bf16 value converts to f32 exactly.

/// binary16 bits -> f32 (exact).
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h as u32) & 0x8000) << 16;
    let exp = ((h >> 10) & 0x1f) as u32;
    let mant = (h & 0x3ff) as u32;
    match exp {
        0 => {
            // zero or subnormal: mant x 2^-24, exact in f32
            let v = mant as f32 * (1.0 / 16_777_216.0);
            if sign != 0 {
                -v
            } else {
                v
            }
        }
        31 => f32::from_bits(sign | 0x7f80_0000 | (mant << 13)),
        _ => f32::from_bits(sign | ((exp + 112) << 23) | (mant << 13)),
    }
}

/// f32 -> binary16 bits, round to nearest even; overflow to infinity, NaN stays NaN.
pub fn f32_to_f16(f: f32) -> u16 {
    let x = f.to_bits();
    let sign = ((x >> 16) & 0x8000) as u16;
    let exp = ((x >> 23) & 0xff) as i32;
    let mant = x & 0x7f_ffff;
    if exp == 0xff {
        let nan = if mant != 0 {
            0x200 | (mant >> 13) as u16
        } else {
            0
        };
        return sign | 0x7c00 | nan;
    }
    let e = exp - 112; // the binary16 exponent field
    if e >= 31 {
        return sign | 0x7c00;
    }
    if e <= 0 {
        // binary16 subnormal (or zero): q x 2^-24 with q = m >> (14 - e)
        if e < -10 {
            return sign;
        }
        let m = mant | 0x80_0000;
        let shift = (14 - e) as u32;
        let q = m >> shift;
        let rem = m & ((1 << shift) - 1);
        let half = 1 << (shift - 1);
        let q = if rem > half || (rem == half && q & 1 == 1) {
            q + 1
        } else {
            q
        };
        return sign | q as u16;
    }
    let mut h = ((e as u32) << 10) | (mant >> 13);
    let rem = mant & 0x1fff;
    if rem > 0x1000 || (rem == 0x1000 && h & 1 == 1) {
        h += 1; // a carry into the exponent is right, up to infinity
    }
    sign | h as u16
}

/// bfloat16 bits -> f32 (exact).
pub fn bf16_to_f32(b: u16) -> f32 {
    f32::from_bits((b as u32) << 16)
}

/// f32 -> bfloat16 bits, round to nearest even; NaN stays (quiet) NaN.
pub fn f32_to_bf16(f: f32) -> u16 {
    let x = f.to_bits();
    if f.is_nan() {
        return ((x >> 16) | 0x40) as u16;
    }
    let r = x.wrapping_add(0x7fff + ((x >> 16) & 1));
    (r >> 16) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_known_values() {
        assert_eq!(f32_to_f16(1.0), 0x3c00);
        assert_eq!(f32_to_f16(-2.0), 0xc000);
        assert_eq!(f32_to_f16(65504.0), 0x7bff);
        assert_eq!(
            f32_to_f16(65520.0),
            0x7c00,
            "the tie above the largest rounds to inf"
        );
        assert_eq!(f32_to_f16(65519.0), 0x7bff);
        assert_eq!(f32_to_f16(f32::INFINITY), 0x7c00);
        assert!(f16_to_f32(f32_to_f16(f32::NAN)).is_nan());
        let tiny = 2f32.powi(-24);
        assert_eq!(f32_to_f16(tiny), 0x0001);
        assert_eq!(
            f32_to_f16(tiny / 2.0),
            0x0000,
            "a tie rounds to even (zero)"
        );
        assert_eq!(f32_to_f16(tiny * 1.5), 0x0002, "a tie rounds to even (2)");
        assert_eq!(f32_to_f16(tiny * 0.75), 0x0001);
        assert_eq!(f32_to_f16(2f32.powi(-14)), 0x0400, "smallest normal");
        assert_eq!(
            f32_to_f16(1.0 + 2f32.powi(-11)),
            0x3c00,
            "tie to even stays"
        );
        assert_eq!(
            f32_to_f16(1.0 + 3.0 * 2f32.powi(-11)),
            0x3c02,
            "tie to even goes up"
        );
        assert_eq!(f16_to_f32(0x3555), 0.333_251_95);
    }

    #[test]
    fn every_f16_round_trips() {
        for h in 0..=u16::MAX {
            let f = f16_to_f32(h);
            if f.is_nan() {
                assert!(f16_to_f32(f32_to_f16(f)).is_nan());
            } else {
                assert_eq!(f32_to_f16(f), h, "{h:#06x} -> {f}");
            }
        }
    }

    #[test]
    fn f16_rounding_matches_f64_reference() {
        // Midpoints and neighbours of consecutive binary16 values round as nearest-even says.
        for h in 0x0000u16..0x7bff {
            let (a, b) = (f16_to_f32(h) as f64, f16_to_f32(h + 1) as f64);
            let mid = ((a + b) / 2.0) as f32;
            let want = if h & 1 == 0 { h } else { h + 1 };
            assert_eq!(f32_to_f16(mid), want, "midpoint after {h:#06x}");
            let below = f32::from_bits(mid.to_bits() - 1);
            if (below as f64) > a {
                assert_eq!(f32_to_f16(below), h);
            }
        }
    }

    #[test]
    fn bf16_known_values_and_round_trip() {
        assert_eq!(f32_to_bf16(1.0), 0x3f80);
        assert_eq!(f32_to_bf16(-1.5), 0xbfc0);
        assert_eq!(
            f32_to_bf16(f32::from_bits(0x3f80_8000)),
            0x3f80,
            "tie to even stays"
        );
        assert_eq!(
            f32_to_bf16(f32::from_bits(0x3f81_8000)),
            0x3f82,
            "tie to even goes up"
        );
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f80_8001)), 0x3f81);
        assert!(bf16_to_f32(f32_to_bf16(f32::NAN)).is_nan());
        assert_eq!(f32_to_bf16(f32::MAX), 0x7f80, "rounds up to infinity");
        for b in 0..=u16::MAX {
            let f = bf16_to_f32(b);
            if !f.is_nan() {
                assert_eq!(f32_to_bf16(f), b);
            }
        }
    }
}
