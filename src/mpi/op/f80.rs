//! x87 80-bit extended precision `long double` (stored in 16 bytes; the
//! value is the first 10: 64-bit mantissa with explicit integer bit, then
//! sign and 15-bit exponent).

use super::BuiltinOp;
use crate::mpi::error::MpiResult;
use std::cmp::Ordering;

const STORAGE: usize = 16;

fn parts(x: &[u8]) -> (bool, u16, u64) {
    let m = u64::from_le_bytes(x[..8].try_into().unwrap());
    let se = u16::from_le_bytes(x[8..10].try_into().unwrap());
    (se & 0x8000 != 0, se & 0x7fff, m)
}

/// Exact comparison; None when either is a NaN.
pub(super) fn cmp(x: &[u8], y: &[u8]) -> Option<Ordering> {
    let (sx, ex, mx) = parts(x);
    let (sy, ey, my) = parts(y);
    let nan = |e: u16, m: u64| e == 0x7fff && (m << 1) != 0;
    if nan(ex, mx) || nan(ey, my) {
        return None;
    }
    let zero = |e: u16, m: u64| e == 0 && m == 0;
    if zero(ex, mx) && zero(ey, my) {
        return Some(Ordering::Equal);
    }
    // Magnitude order is (exponent, mantissa) for canonical encodings.
    let mag = (ex, mx).cmp(&(ey, my));
    Some(match (sx && !zero(ex, mx), sy && !zero(ey, my)) {
        (false, false) => mag,
        (true, true) => mag.reverse(),
        (false, true) => Ordering::Greater,
        (true, false) => Ordering::Less,
    })
}

#[derive(Clone, Copy)]
enum F {
    Add,
    Mul,
}

/// `x (op) y` rounded to 80 bits, by x87 instructions.
#[cfg(target_arch = "x86_64")]
fn arith(f: F, x: &[u8], y: &[u8]) -> [u8; 10] {
    let mut r = [0u8; 10];
    let (px, py, pr) = (x.as_ptr(), y.as_ptr(), r.as_mut_ptr());
    assert!(x.len() >= 10 && y.len() >= 10);
    // SAFETY: px, py point to 10 readable bytes, pr to 10 writable bytes;
    // the x87 stack is empty on entry and left empty (two loads, one
    // popping op, one popping store); the registers are declared clobbered.
    unsafe {
        match f {
            F::Add => std::arch::asm!(
                "fld tbyte ptr [{x}]",
                "fld tbyte ptr [{y}]",
                "faddp",
                "fstp tbyte ptr [{r}]",
                x = in(reg) px, y = in(reg) py, r = in(reg) pr,
                out("st(0)") _, out("st(1)") _, out("st(2)") _, out("st(3)") _,
                out("st(4)") _, out("st(5)") _, out("st(6)") _, out("st(7)") _,
                options(nostack),
            ),
            F::Mul => std::arch::asm!(
                "fld tbyte ptr [{x}]",
                "fld tbyte ptr [{y}]",
                "fmulp",
                "fstp tbyte ptr [{r}]",
                x = in(reg) px, y = in(reg) py, r = in(reg) pr,
                out("st(0)") _, out("st(1)") _, out("st(2)") _, out("st(3)") _,
                out("st(4)") _, out("st(5)") _, out("st(6)") _, out("st(7)") _,
                options(nostack),
            ),
        }
    }
    r
}

#[cfg(target_arch = "x86_64")]
fn neg(x: [u8; 10]) -> [u8; 10] {
    let mut r = x;
    r[9] ^= 0x80;
    r
}

#[cfg(target_arch = "x86_64")]
pub(super) fn reduce_real(op: BuiltinOp, a: &[u8], io: &mut [u8]) -> MpiResult<()> {
    for (x, y) in a.chunks_exact(STORAGE).zip(io.chunks_exact_mut(STORAGE)) {
        match op {
            BuiltinOp::Sum => {
                let r = arith(F::Add, x, y);
                y[..10].copy_from_slice(&r)
            }
            BuiltinOp::Prod => {
                let r = arith(F::Mul, x, y);
                y[..10].copy_from_slice(&r)
            }
            BuiltinOp::Min => {
                if cmp(x, y) == Some(Ordering::Less) {
                    y.copy_from_slice(x)
                }
            }
            BuiltinOp::Max => {
                if cmp(x, y) == Some(Ordering::Greater) {
                    y.copy_from_slice(x)
                }
            }
            _ => unreachable!("rejected by check"),
        }
    }
    Ok(())
}

#[cfg(target_arch = "x86_64")]
pub(super) fn reduce_complex(op: BuiltinOp, a: &[u8], io: &mut [u8]) -> MpiResult<()> {
    for (x, y) in a
        .chunks_exact(2 * STORAGE)
        .zip(io.chunks_exact_mut(2 * STORAGE))
    {
        let (xr, xi) = (&x[..10], &x[STORAGE..STORAGE + 10]);
        let (yr, yi) = (&y[..10], &y[STORAGE..STORAGE + 10]);
        let (re, im) = match op {
            BuiltinOp::Sum => (arith(F::Add, xr, yr), arith(F::Add, xi, yi)),
            BuiltinOp::Prod => {
                let re = arith(F::Add, &arith(F::Mul, xr, yr), &neg(arith(F::Mul, xi, yi)));
                let im = arith(F::Add, &arith(F::Mul, xr, yi), &arith(F::Mul, xi, yr));
                (re, im)
            }
            _ => unreachable!("rejected by check"),
        };
        y[..10].copy_from_slice(&re);
        y[STORAGE..STORAGE + 10].copy_from_slice(&im);
    }
    Ok(())
}

#[cfg(not(target_arch = "x86_64"))]
pub(super) fn reduce_real(op: BuiltinOp, _a: &[u8], _io: &mut [u8]) -> MpiResult<()> {
    crate::mpi_bail!(
        MPI_ERR_OP,
        "{} on MPI_LONG_DOUBLE is only implemented on x86-64",
        op.name()
    )
}

#[cfg(not(target_arch = "x86_64"))]
pub(super) fn reduce_complex(op: BuiltinOp, _a: &[u8], _io: &mut [u8]) -> MpiResult<()> {
    crate::mpi_bail!(
        MPI_ERR_OP,
        "{} on MPI_C_LONG_DOUBLE_COMPLEX is only implemented on x86-64",
        op.name()
    )
}
