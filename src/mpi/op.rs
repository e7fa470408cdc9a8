//! Builtin reduction operations over packed data.
//!
//! Contract (see docs/CONTRACTS.md §2):
//! - `check(op, elem)` is the standard's op/type table (MPI 5.0 §6.9.2).
//! - `reduce(op, elem, input, inout)` computes `inout[i] = input[i] op inout[i]`
//!   for `inout.len() / elem.size()` elements of the *packed* representation
//!   (a pair type is its value followed directly by its index, no padding; see
//!   `Elem::size`). Buffers may have any alignment. Integer arithmetic wraps;
//!   logical ops treat nonzero as true and produce 0/1.
//! - MINLOC/MAXLOC: on equal values the smaller index wins.
//! - Floating MIN/MAX are `if a < b { a } else { b }` with `a` the input:
//!   when either is NaN the inout value stays (like MPICH's C macros).
//! - Strict table: MPI_CHAR, MPI_WCHAR, MPI_CHARACTER and MPI_PACKED take
//!   only REPLACE/NO_OP; complex types take no MIN/MAX.
//! - `long double` is the x86-64 80-bit x87 format: SUM/PROD are computed with
//!   x87 instructions (80-bit results rounded by the x87 control word, as the
//!   application's own `long double` arithmetic is; no detour through `f64`),
//!   MIN/MAX by an exact software comparison. On other architectures
//!   reductions on `long double` fail with MPI_ERR_OP.
//! - `reduce_into` reduces packed data into memory laid out by a `TypeDesc`
//!   (accumulate, reduce_local on derived types).
//! - Aligned SUM/PROD/MIN/MAX on 4- and 8-byte types run as plain slice loops
//!   that the compiler vectorises (about 40 GB/s in cache on x86-64);
//!   unaligned buffers go element by element through byte loads.

use crate::mpi::datatype::{Basic, Elem, TypeClass, TypeDesc};
use crate::mpi::error::MpiResult;
use crate::mpi_bail;
use std::cmp::Ordering;

/// The predefined reduction operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BuiltinOp {
    Sum,
    Min,
    Max,
    Prod,
    Band,
    Bor,
    Bxor,
    Land,
    Lor,
    Lxor,
    Minloc,
    Maxloc,
    Replace,
    NoOp,
}

impl BuiltinOp {
    pub const ALL: &'static [BuiltinOp] = &[
        BuiltinOp::Sum,
        BuiltinOp::Min,
        BuiltinOp::Max,
        BuiltinOp::Prod,
        BuiltinOp::Band,
        BuiltinOp::Bor,
        BuiltinOp::Bxor,
        BuiltinOp::Land,
        BuiltinOp::Lor,
        BuiltinOp::Lxor,
        BuiltinOp::Minloc,
        BuiltinOp::Maxloc,
        BuiltinOp::Replace,
        BuiltinOp::NoOp,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            BuiltinOp::Sum => "MPI_SUM",
            BuiltinOp::Min => "MPI_MIN",
            BuiltinOp::Max => "MPI_MAX",
            BuiltinOp::Prod => "MPI_PROD",
            BuiltinOp::Band => "MPI_BAND",
            BuiltinOp::Bor => "MPI_BOR",
            BuiltinOp::Bxor => "MPI_BXOR",
            BuiltinOp::Land => "MPI_LAND",
            BuiltinOp::Lor => "MPI_LOR",
            BuiltinOp::Lxor => "MPI_LXOR",
            BuiltinOp::Minloc => "MPI_MINLOC",
            BuiltinOp::Maxloc => "MPI_MAXLOC",
            BuiltinOp::Replace => "MPI_REPLACE",
            BuiltinOp::NoOp => "MPI_NO_OP",
        }
    }

    /// The op of an MPI name ("MPI_SUM"), for building the ABI handle table
    /// from the generated constants by name.
    pub fn from_name(name: &str) -> Option<BuiltinOp> {
        BuiltinOp::ALL.iter().copied().find(|o| o.name() == name)
    }

    /// All builtin ops are commutative except REPLACE (and NO_OP, which keeps
    /// the target): collectives may reorder operands only when this is true.
    pub const fn is_commutative(self) -> bool {
        !matches!(self, BuiltinOp::Replace | BuiltinOp::NoOp)
    }
}

fn class_allows(op: BuiltinOp, class: TypeClass) -> bool {
    use BuiltinOp::*;
    use TypeClass as C;
    match op {
        Replace | NoOp => true,
        Min | Max => matches!(class, C::Integer | C::Floating),
        Sum | Prod => matches!(class, C::Integer | C::Floating | C::Complex),
        Land | Lor | Lxor => matches!(class, C::Integer | C::Logical),
        Band | Bor | Bxor => matches!(class, C::Integer | C::Byte),
        Minloc | Maxloc => false,
    }
}

/// Is `op` defined on `elem` (MPI 5.0 §6.9.2)? `MPI_ERR_OP` otherwise.
pub fn check(op: BuiltinOp, elem: Elem) -> MpiResult<()> {
    let ok = match elem {
        Elem::Basic(b) => class_allows(op, b.class()),
        Elem::Pair(v, i) => {
            let num = |c: TypeClass| matches!(c, TypeClass::Integer | TypeClass::Floating);
            matches!(
                op,
                BuiltinOp::Minloc | BuiltinOp::Maxloc | BuiltinOp::Replace | BuiltinOp::NoOp
            ) && num(v.class())
                && num(i.class())
        }
    };
    if !ok {
        mpi_bail!(
            MPI_ERR_OP,
            "{} is not defined for datatype {}",
            op.name(),
            elem.name()
        );
    }
    Ok(())
}

/// `inout[i] = input[i] op inout[i]` for `inout.len() / elem.size()` packed
/// elements. `input` must hold at least as many elements.
pub fn reduce(op: BuiltinOp, elem: Elem, input: &[u8], inout: &mut [u8]) -> MpiResult<()> {
    check(op, elem)?;
    let sz = elem.size();
    let n = inout.len() / sz;
    let bytes = n * sz;
    if input.len() < bytes {
        mpi_bail!(
            MPI_ERR_ARG,
            "reduction input has {} bytes, {} elements of {} need {}",
            input.len(),
            n,
            elem.name(),
            bytes
        );
    }
    let (input, inout) = (&input[..bytes], &mut inout[..bytes]);
    match op {
        BuiltinOp::NoOp => Ok(()),
        BuiltinOp::Replace => {
            inout.copy_from_slice(input);
            Ok(())
        }
        _ => match elem {
            Elem::Basic(b) => reduce_basic(op, b, input, inout),
            Elem::Pair(v, i) => reduce_loc(op == BuiltinOp::Minloc, v, i, input, inout),
        },
    }
}

/// Packed bytes handled per step by `reduce_into` for non-contiguous types.
const REDUCE_CHUNK: usize = 64 * 1024;

/// Reduce packed data into typed memory: for the packed-stream bytes
/// `[skip, skip + src.len())` of `count` elements of `t` at `dst`, compute
/// `dst = src op dst` (MPI_Accumulate, MPI_Reduce_local on derived types).
/// `t` must be made of one `Elem` (`t.elem()`), and `skip` and `src.len()`
/// must be whole elements of it. Returns the bytes of `src` consumed
/// (fewer when the stream of `count` elements ends first).
///
/// Non-contiguous types are handled by packing a chunk of `dst`, reducing
/// it and unpacking it back, so padding inside `dst` is never touched.
///
/// # Safety
/// `dst` must point to `count` elements of `t` (every byte of the type map
/// readable and writable), not overlapping `src`.
pub unsafe fn reduce_into(
    op: BuiltinOp,
    t: &TypeDesc,
    count: usize,
    src: &[u8],
    skip: usize,
    dst: *mut u8,
) -> MpiResult<usize> {
    let Some(elem) = t.elem() else {
        mpi_bail!(
            MPI_ERR_TYPE,
            "{} needs a datatype made of one predefined type",
            op.name()
        );
    };
    check(op, elem)?;
    let es = elem.size();
    if !skip.is_multiple_of(es) || !src.len().is_multiple_of(es) {
        mpi_bail!(
            MPI_ERR_ARG,
            "reduction range {}+{} is not whole elements of {}",
            skip,
            src.len(),
            elem.name()
        );
    }
    let total = t.packed_size(count);
    let len = src.len().min(total.saturating_sub(skip));
    if len == 0 || op == BuiltinOp::NoOp {
        return Ok(len);
    }
    if t.is_contiguous(count) {
        // SAFETY: the data of `count` elements is one run of `total` bytes at
        // dst + true_lb (caller's contract); [skip, skip + len) lies inside it.
        let io =
            unsafe { std::slice::from_raw_parts_mut(dst.offset(t.true_lb() + skip as isize), len) };
        reduce(op, elem, &src[..len], io)?;
        return Ok(len);
    }
    let chunk = (REDUCE_CHUNK / es).max(1) * es;
    let mut tmp = vec![0u8; chunk.min(len)];
    let mut off = 0;
    while off < len {
        let n = chunk.min(len - off);
        let buf = &mut tmp[..n];
        // SAFETY: caller's contract on dst; the range is inside the stream.
        unsafe { t.pack_range(count, dst, skip + off, buf) };
        reduce(op, elem, &src[off..off + n], buf)?;
        // SAFETY: as above.
        unsafe { t.unpack_range(count, buf, skip + off, dst) };
        off += n;
    }
    Ok(len)
}

// ------------------------------------------------------------------ kernels

/// A plain number read from / written to native-endian bytes. Implementors
/// are plain numbers (or `repr(C)` pairs of them) with `N == size_of::<Self>()`,
/// so every bit pattern is a valid value.
trait Prim: Copy {
    const N: usize;
    fn ld(b: &[u8]) -> Self;
    #[cfg_attr(not(test), allow(dead_code))] // used by the tests
    fn st(self, b: &mut [u8]);
}

macro_rules! prim {
    ($($t:ty),*) => {$(
        impl Prim for $t {
            const N: usize = std::mem::size_of::<$t>();
            #[inline(always)]
            fn ld(b: &[u8]) -> Self {
                <$t>::from_ne_bytes(b[..Self::N].try_into().unwrap())
            }
            #[inline(always)]
            fn st(self, b: &mut [u8]) {
                b[..Self::N].copy_from_slice(&self.to_ne_bytes())
            }
        }
    )*};
}
prim!(i8, u8, i16, u16, i32, u32, i64, u64, f32, f64);

/// A complex number (C layout: real then imaginary part).
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
struct Cx<T> {
    re: T,
    im: T,
}

impl<T: Prim> Prim for Cx<T> {
    const N: usize = 2 * T::N;
    #[inline(always)]
    fn ld(b: &[u8]) -> Self {
        Cx {
            re: T::ld(&b[..T::N]),
            im: T::ld(&b[T::N..2 * T::N]),
        }
    }
    #[inline(always)]
    fn st(self, b: &mut [u8]) {
        self.re.st(&mut b[..T::N]);
        self.im.st(&mut b[T::N..2 * T::N]);
    }
}

/// `inout[i] = f(input[i], inout[i])`. Both slices hold a whole number of `T`.
/// When both are aligned for `T` this is a plain slice loop the compiler
/// vectorises; otherwise element by element through byte loads.
#[inline(always)]
fn map2<T: Prim>(input: &[u8], inout: &mut [u8], f: impl Fn(T, T) -> T) {
    debug_assert_eq!(input.len(), inout.len());
    debug_assert_eq!(inout.len() % T::N, 0);
    let n = inout.len() / T::N;
    let al = std::mem::align_of::<T>();
    if (input.as_ptr() as usize).is_multiple_of(al) && (inout.as_ptr() as usize).is_multiple_of(al)
    {
        // SAFETY: both pointers are aligned for T and cover n * size_of::<T>()
        // bytes (T::N == size_of::<T>() for every Prim); T is plain numbers, so
        // every bit pattern is valid; `input` and `inout` cannot overlap (one
        // is borrowed mutably).
        let (a, b) = unsafe {
            (
                std::slice::from_raw_parts(input.as_ptr() as *const T, n),
                std::slice::from_raw_parts_mut(inout.as_mut_ptr() as *mut T, n),
            )
        };
        for (x, y) in a.iter().zip(b.iter_mut()) {
            *y = f(*x, *y);
        }
    } else {
        let (pa, pb) = (input.as_ptr() as *const T, inout.as_mut_ptr() as *mut T);
        for k in 0..n {
            // SAFETY: k < n and both slices hold n * size_of::<T>() bytes;
            // unaligned reads/writes of plain numbers (every bit pattern valid).
            unsafe {
                let y = pb.add(k).read_unaligned();
                pb.add(k).write_unaligned(f(pa.add(k).read_unaligned(), y));
            }
        }
    }
}

macro_rules! int_kernel {
    ($t:ty, $op:expr, $a:expr, $b:expr) => {{
        use BuiltinOp::*;
        match $op {
            Sum => map2::<$t>($a, $b, |x, y| x.wrapping_add(y)),
            Prod => map2::<$t>($a, $b, |x, y| x.wrapping_mul(y)),
            Min => map2::<$t>($a, $b, |x, y| if x < y { x } else { y }),
            Max => map2::<$t>($a, $b, |x, y| if x > y { x } else { y }),
            Band => map2::<$t>($a, $b, |x, y| x & y),
            Bor => map2::<$t>($a, $b, |x, y| x | y),
            Bxor => map2::<$t>($a, $b, |x, y| x ^ y),
            Land => map2::<$t>($a, $b, |x, y| ((x != 0) & (y != 0)) as $t),
            Lor => map2::<$t>($a, $b, |x, y| ((x != 0) | (y != 0)) as $t),
            Lxor => map2::<$t>($a, $b, |x, y| ((x != 0) ^ (y != 0)) as $t),
            Minloc | Maxloc | Replace | NoOp => unreachable!("handled by reduce"),
        }
    }};
}

macro_rules! float_kernel {
    ($t:ty, $op:expr, $a:expr, $b:expr) => {{
        use BuiltinOp::*;
        match $op {
            Sum => map2::<$t>($a, $b, |x, y| x + y),
            Prod => map2::<$t>($a, $b, |x, y| x * y),
            Min => map2::<$t>($a, $b, |x, y| if x < y { x } else { y }),
            Max => map2::<$t>($a, $b, |x, y| if x > y { x } else { y }),
            _ => unreachable!("rejected by check"),
        }
    }};
}

macro_rules! complex_kernel {
    ($t:ty, $op:expr, $a:expr, $b:expr) => {{
        match $op {
            // Componentwise: one loop over twice as many reals.
            BuiltinOp::Sum => map2::<$t>($a, $b, |x, y| x + y),
            BuiltinOp::Prod => map2::<Cx<$t>>($a, $b, |x, y| Cx {
                re: x.re * y.re - x.im * y.im,
                im: x.re * y.im + x.im * y.re,
            }),
            _ => unreachable!("rejected by check"),
        }
    }};
}

fn reduce_basic(op: BuiltinOp, b: Basic, a: &[u8], io: &mut [u8]) -> MpiResult<()> {
    use Basic::*;
    match b {
        SignedChar | Int8 | FInteger1 => int_kernel!(i8, op, a, io),
        UnsignedChar | Uint8 | Byte | CBool => int_kernel!(u8, op, a, io),
        Short | Int16 | FInteger2 => int_kernel!(i16, op, a, io),
        UnsignedShort | Uint16 => int_kernel!(u16, op, a, io),
        Int | Int32 | FInteger | FInteger4 | FLogical => int_kernel!(i32, op, a, io),
        Unsigned | Uint32 => int_kernel!(u32, op, a, io),
        Long | LongLong | Int64 | Aint | Offset | Count | FInteger8 => int_kernel!(i64, op, a, io),
        UnsignedLong | UnsignedLongLong | Uint64 => int_kernel!(u64, op, a, io),
        Float | FReal | FReal4 => float_kernel!(f32, op, a, io),
        Double | FDoublePrecision | FReal8 => float_kernel!(f64, op, a, io),
        FloatComplex | FComplex | FComplex8 => complex_kernel!(f32, op, a, io),
        DoubleComplex | FDoubleComplex | FComplex16 => complex_kernel!(f64, op, a, io),
        Float16 => half_kernel(op, a, io, half::f16_to_f32, half::f32_to_f16),
        Bfloat16 => half_kernel(op, a, io, half::bf16_to_f32, half::f32_to_bf16),
        LongDouble => return f80::reduce_real(op, a, io),
        LongDoubleComplex => return f80::reduce_complex(op, a, io),
        Char | WChar | FCharacter | Packed => unreachable!("rejected by check"),
    }
    Ok(())
}

/// SUM/PROD/MIN/MAX on 16-bit floats: each pair computed in f32 and rounded back to nearest
/// even (as the GPU kernels do); MIN/MAX keep the inout value unless the input compares
/// smaller/larger (so a NaN never replaces it), like the other floating types.
fn half_kernel(op: BuiltinOp, a: &[u8], io: &mut [u8], to: fn(u16) -> f32, from: fn(f32) -> u16) {
    for (x, y) in a.chunks_exact(2).zip(io.chunks_exact_mut(2)) {
        let (xb, yb) = (u16::ld(x), u16::ld(y));
        let (xf, yf) = (to(xb), to(yb));
        let r = match op {
            BuiltinOp::Sum => from(xf + yf),
            BuiltinOp::Prod => from(xf * yf),
            BuiltinOp::Min => {
                if xf < yf {
                    xb
                } else {
                    yb
                }
            }
            BuiltinOp::Max => {
                if xf > yf {
                    xb
                } else {
                    yb
                }
            }
            _ => unreachable!("rejected by check"),
        };
        y.copy_from_slice(&r.to_ne_bytes());
    }
}

/// Compare two packed values of basic type `b` (integer or floating).
#[inline(always)]
fn cmp_val(b: Basic, x: &[u8], y: &[u8]) -> Option<Ordering> {
    use Basic::*;
    match b {
        SignedChar | Int8 | FInteger1 => i8::ld(x).partial_cmp(&i8::ld(y)),
        UnsignedChar | Uint8 => u8::ld(x).partial_cmp(&u8::ld(y)),
        Short | Int16 | FInteger2 => i16::ld(x).partial_cmp(&i16::ld(y)),
        UnsignedShort | Uint16 => u16::ld(x).partial_cmp(&u16::ld(y)),
        Int | Int32 | FInteger | FInteger4 => i32::ld(x).partial_cmp(&i32::ld(y)),
        Unsigned | Uint32 => u32::ld(x).partial_cmp(&u32::ld(y)),
        Long | LongLong | Int64 | Aint | Offset | Count | FInteger8 => {
            i64::ld(x).partial_cmp(&i64::ld(y))
        }
        UnsignedLong | UnsignedLongLong | Uint64 => u64::ld(x).partial_cmp(&u64::ld(y)),
        Float | FReal | FReal4 => f32::ld(x).partial_cmp(&f32::ld(y)),
        Double | FDoublePrecision | FReal8 => f64::ld(x).partial_cmp(&f64::ld(y)),
        LongDouble => f80::cmp(x, y),
        _ => None,
    }
}

/// MINLOC / MAXLOC on packed (value, index) pairs:
/// take the input's pair when its value is better, the smaller index on a tie.
fn reduce_loc(min: bool, v: Basic, i: Basic, a: &[u8], io: &mut [u8]) -> MpiResult<()> {
    let vs = v.size();
    let sz = vs + i.size();
    let better = if min {
        Ordering::Less
    } else {
        Ordering::Greater
    };
    for (x, y) in a.chunks_exact(sz).zip(io.chunks_exact_mut(sz)) {
        match cmp_val(v, &x[..vs], &y[..vs]) {
            Some(o) if o == better => y.copy_from_slice(x),
            Some(Ordering::Equal) if cmp_val(i, &x[vs..], &y[vs..]) == Some(Ordering::Less) => {
                y[vs..].copy_from_slice(&x[vs..]);
            }
            _ => {}
        }
    }
    Ok(())
}

mod f80;
pub mod half;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod bench;
