//! The "external32" data representation (MPI_Pack_external, file views):
//! big-endian, byte aligned, with the standard's fixed sizes. Where a native
//! type is wider than its external32 size (`long`: 8 -> 4, `wchar_t`: 4 -> 2)
//! packing keeps the low-order bytes, as MPICH does; unpacking sign-extends
//! signed types and zero-extends unsigned ones. `long double` (x87 80-bit)
//! becomes IEEE binary128: exact on packing, rounded to nearest-even on
//! unpacking (binary128 has 112 fraction bits, x87 has 63).

use super::{Basic, TypeDesc};
use crate::mpi::error::MpiResult;
use crate::mpi_bail;

impl Basic {
    /// Bytes of one value in the external32 representation.
    pub const fn external32_size(self) -> usize {
        match self {
            Basic::Long | Basic::UnsignedLong => 4,
            Basic::WChar => 2,
            _ => self.size(),
        }
    }
}

/// How one basic value is converted.
#[derive(Clone, Copy)]
enum Conv {
    /// Reverse the bytes of each `n`-byte part (n = 1: plain copy).
    Swap(usize),
    /// Native 8-byte integer to 4 bytes (signed: sign-extend on the way back).
    Narrow8to4 { signed: bool },
    /// Native 4-byte wchar_t to 2 bytes.
    Narrow4to2,
    /// x87 80-bit (16 bytes of storage) to binary128, per part.
    F80,
}

fn conv(b: Basic) -> Conv {
    use Basic::*;
    match b {
        Long => Conv::Narrow8to4 { signed: true },
        UnsignedLong => Conv::Narrow8to4 { signed: false },
        WChar => Conv::Narrow4to2,
        LongDouble | LongDoubleComplex => Conv::F80,
        FloatComplex | FComplex | FComplex8 => Conv::Swap(4),
        DoubleComplex | FDoubleComplex | FComplex16 => Conv::Swap(8),
        _ => Conv::Swap(b.size()),
    }
}

fn f80_to_f128_be(x: &[u8], out: &mut [u8]) {
    let m = u64::from_le_bytes(x[..8].try_into().unwrap());
    let se = u16::from_le_bytes(x[8..10].try_into().unwrap());
    // binary128: sign, 15-bit exponent (same bias), 112-bit fraction without
    // the integer bit that x87 stores explicitly.
    let frac = ((m & !(1u64 << 63)) as u128) << 49;
    let v = ((se as u128) << 112) | frac;
    out[..16].copy_from_slice(&v.to_be_bytes());
}

fn f128_be_to_f80(x: &[u8], out: &mut [u8]) {
    let v = u128::from_be_bytes(x[..16].try_into().unwrap());
    let mut se = (v >> 112) as u16;
    let exp = se & 0x7fff;
    let frac = v & ((1u128 << 112) - 1);
    let mut m = (frac >> 49) as u64;
    if exp == 0x7fff {
        // inf / NaN: keep a NaN a NaN even when only low fraction bits were set
        if frac != 0 && m == 0 {
            m = 1;
        }
    } else {
        // round to nearest, ties to even, on the 49 dropped bits
        let rest = frac & ((1u128 << 49) - 1);
        let half = 1u128 << 48;
        if rest > half || (rest == half && m & 1 == 1) {
            m += 1;
            if m == 1 << 63 {
                // carry out of the 63 fraction bits
                m = 0;
                se += 1;
            }
        }
    }
    let exp = se & 0x7fff;
    let int_bit = if exp != 0 { 1u64 << 63 } else { 0 };
    let m = if exp == 0x7fff && m == 0 {
        1u64 << 63
    } else {
        m | int_bit
    };
    out[..8].copy_from_slice(&m.to_le_bytes());
    out[8..10].copy_from_slice(&se.to_le_bytes());
    out[10..16].fill(0);
}

impl TypeDesc {
    /// Bytes of `count` elements in external32 (`MPI_Pack_external_size`).
    pub fn external32_size(&self, count: usize) -> usize {
        let per: usize = self
            .blocks
            .iter()
            .map(|b| b.count * b.basic.external32_size())
            .sum();
        per.saturating_mul(count)
    }

    /// Pack `count` elements at `src` into `dst` in external32; returns the
    /// bytes written. MPI_ERR_TRUNCATE when `dst` is too small (nothing useful
    /// is written then).
    ///
    /// # Safety
    /// As `pack`.
    pub unsafe fn pack_external(
        &self,
        count: usize,
        src: *const u8,
        dst: &mut [u8],
    ) -> MpiResult<usize> {
        let total = self.external32_size(count);
        if dst.len() < total {
            mpi_bail!(
                MPI_ERR_TRUNCATE,
                "external32 data needs {} bytes, the buffer has {}",
                total,
                dst.len()
            );
        }
        let mut o = 0usize;
        for i in 0..count {
            let base = i as isize * self.extent();
            for b in self.blocks.iter() {
                let (ns, es) = (b.basic.size(), b.basic.external32_size());
                let c = conv(b.basic);
                for k in 0..b.count {
                    // SAFETY: the caller guarantees every byte of the type map
                    // of `count` elements is readable at `src`.
                    let v = unsafe {
                        std::slice::from_raw_parts(
                            src.offset(base + b.disp + (k * ns) as isize),
                            ns,
                        )
                    };
                    let out = &mut dst[o..o + es];
                    match c {
                        Conv::Swap(n) => {
                            for (p, q) in v.chunks_exact(n).zip(out.chunks_exact_mut(n)) {
                                for j in 0..n {
                                    q[j] = p[n - 1 - j];
                                }
                            }
                        }
                        Conv::Narrow8to4 { .. } => {
                            let x = u64::from_ne_bytes(v.try_into().unwrap()) as u32;
                            out.copy_from_slice(&x.to_be_bytes());
                        }
                        Conv::Narrow4to2 => {
                            let x = u32::from_ne_bytes(v.try_into().unwrap()) as u16;
                            out.copy_from_slice(&x.to_be_bytes());
                        }
                        Conv::F80 => {
                            for (p, q) in v.chunks_exact(16).zip(out.chunks_exact_mut(16)) {
                                f80_to_f128_be(p, q);
                            }
                        }
                    }
                    o += es;
                }
            }
        }
        Ok(o)
    }

    /// Unpack external32 data into `count` elements at `dst`; returns the
    /// bytes consumed. MPI_ERR_TRUNCATE when `src` is too short.
    ///
    /// # Safety
    /// As `unpack`.
    pub unsafe fn unpack_external(
        &self,
        count: usize,
        src: &[u8],
        dst: *mut u8,
    ) -> MpiResult<usize> {
        let total = self.external32_size(count);
        if src.len() < total {
            mpi_bail!(
                MPI_ERR_TRUNCATE,
                "external32 data of {} bytes is shorter than {}",
                src.len(),
                total
            );
        }
        let mut o = 0usize;
        for i in 0..count {
            let base = i as isize * self.extent();
            for b in self.blocks.iter() {
                let (ns, es) = (b.basic.size(), b.basic.external32_size());
                let c = conv(b.basic);
                for k in 0..b.count {
                    // SAFETY: the caller guarantees every byte of the type map
                    // of `count` elements is writable at `dst`, apart from `src`.
                    let out = unsafe {
                        std::slice::from_raw_parts_mut(
                            dst.offset(base + b.disp + (k * ns) as isize),
                            ns,
                        )
                    };
                    let v = &src[o..o + es];
                    match c {
                        Conv::Swap(n) => {
                            for (p, q) in v.chunks_exact(n).zip(out.chunks_exact_mut(n)) {
                                for j in 0..n {
                                    q[j] = p[n - 1 - j];
                                }
                            }
                        }
                        Conv::Narrow8to4 { signed } => {
                            let x = u32::from_be_bytes(v.try_into().unwrap());
                            let y = if signed {
                                x as i32 as i64 as u64
                            } else {
                                x as u64
                            };
                            out.copy_from_slice(&y.to_ne_bytes());
                        }
                        Conv::Narrow4to2 => {
                            let x = u16::from_be_bytes(v.try_into().unwrap()) as u32;
                            out.copy_from_slice(&x.to_ne_bytes());
                        }
                        Conv::F80 => {
                            for (p, q) in v.chunks_exact(16).zip(out.chunks_exact_mut(16)) {
                                f128_be_to_f80(p, q);
                            }
                        }
                    }
                    o += es;
                }
            }
        }
        Ok(o)
    }
}
