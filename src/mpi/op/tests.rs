//! Unit tests of the op/type table and every reduction kernel.

use super::*;
use crate::standard::consts as c;
use BuiltinOp::*;

fn bytes<T: Prim>(v: &[T]) -> Vec<u8> {
    let mut out = vec![0u8; v.len() * T::N];
    for (x, ch) in v.iter().zip(out.chunks_exact_mut(T::N)) {
        x.st(ch);
    }
    out
}
fn vals<T: Prim>(b: &[u8]) -> Vec<T> {
    b.chunks_exact(T::N).map(T::ld).collect()
}
/// reduce on typed values; also on unaligned copies, which must agree.
fn red<T: Prim + PartialEq + std::fmt::Debug>(
    op: BuiltinOp,
    b: Basic,
    a: &[T],
    io: &[T],
) -> Vec<T> {
    let x = bytes(a);
    let mut y = bytes(io);
    reduce(op, Elem::Basic(b), &x, &mut y).unwrap();
    let res = vals::<T>(&y);
    // unaligned: shift both buffers by different odd offsets
    let mut xa = vec![0u8; x.len() + 3];
    xa[3..].copy_from_slice(&x);
    let mut ya = vec![0u8; y.len() + 1];
    ya[1..].copy_from_slice(&bytes(io));
    reduce(op, Elem::Basic(b), &xa[3..], &mut ya[1..]).unwrap();
    assert_eq!(vals::<T>(&ya[1..]), res, "unaligned {:?} {:?}", op, b);
    res
}

#[test]
fn check_table() {
    use Basic::*;
    let ok = |op, e| check(op, e).is_ok();
    let b = Elem::Basic;
    for &t in Basic::ALL {
        assert!(ok(Replace, b(t)) && ok(NoOp, b(t)), "{}", t.name());
        assert!(!ok(Minloc, b(t)) && !ok(Maxloc, b(t)), "{}", t.name());
    }
    for t in [
        Int,
        Unsigned,
        Long,
        UnsignedLongLong,
        Int8,
        Uint64,
        SignedChar,
        Aint,
        Offset,
        Count,
        FInteger,
    ] {
        for op in [Sum, Prod, Min, Max, Band, Bor, Bxor, Land, Lor, Lxor] {
            assert!(ok(op, b(t)), "{} {}", op.name(), t.name());
        }
    }
    for t in [Float, Double, LongDouble, FReal, FDoublePrecision] {
        assert!(ok(Sum, b(t)) && ok(Prod, b(t)) && ok(Min, b(t)) && ok(Max, b(t)));
        for op in [Band, Bor, Bxor, Land, Lor, Lxor] {
            assert!(!ok(op, b(t)), "{} {}", op.name(), t.name());
        }
    }
    for t in [FloatComplex, DoubleComplex, LongDoubleComplex, FComplex] {
        assert!(ok(Sum, b(t)) && ok(Prod, b(t)));
        assert!(!ok(Min, b(t)) && !ok(Max, b(t)) && !ok(Band, b(t)) && !ok(Land, b(t)));
    }
    for t in [CBool, FLogical] {
        assert!(ok(Land, b(t)) && ok(Lor, b(t)) && ok(Lxor, b(t)));
        assert!(!ok(Sum, b(t)) && !ok(Max, b(t)) && !ok(Band, b(t)));
    }
    assert!(ok(Band, b(Byte)) && ok(Bor, b(Byte)) && ok(Bxor, b(Byte)));
    assert!(!ok(Sum, b(Byte)) && !ok(Land, b(Byte)) && !ok(Min, b(Byte)));
    for t in [Char, WChar, FCharacter, Packed] {
        for op in [Sum, Prod, Min, Max, Band, Land] {
            assert!(!ok(op, b(t)), "{} {}", op.name(), t.name());
        }
    }
    for &p in Elem::PAIRS {
        assert!(ok(Minloc, p) && ok(Maxloc, p) && ok(Replace, p) && ok(NoOp, p));
        for op in [Sum, Prod, Min, Max, Band, Land] {
            assert!(!ok(op, p));
        }
    }
    let e = check(Sum, b(CBool)).unwrap_err();
    assert_eq!(e.class, c::MPI_ERR_OP);
    assert!(
        e.msg.contains("MPI_SUM") && e.msg.contains("MPI_C_BOOL"),
        "{}",
        e.msg
    );
    let e = reduce(Minloc, b(Double), &[0; 8], &mut [0; 8]).unwrap_err();
    assert_eq!(e.class, c::MPI_ERR_OP);
    assert!(e.msg.contains("MPI_MINLOC") && e.msg.contains("MPI_DOUBLE"));
    let e = check(Maxloc, Elem::Pair(DoubleComplex, Int)).unwrap_err();
    assert_eq!(e.class, c::MPI_ERR_OP);
}

#[test]
fn integer_ops() {
    use Basic::*;
    let a = [i32::MAX, -7, 5, 0, 12, -1];
    let b = [1, 3, 0, 0, 10, i32::MIN];
    assert_eq!(
        red(Sum, Int, &a, &b),
        vec![i32::MIN, -4, 5, 0, 22, i32::MAX]
    );
    assert_eq!(
        red(Prod, Int, &a, &b),
        vec![i32::MAX, -21, 0, 0, 120, i32::MIN]
    );
    assert_eq!(red(Min, Int, &a, &b), vec![1, -7, 0, 0, 10, i32::MIN]);
    assert_eq!(red(Max, Int32, &a, &b), vec![i32::MAX, 3, 5, 0, 12, -1]);
    assert_eq!(red(Band, Int, &a, &b), vec![1, -7 & 3, 0, 0, 8, i32::MIN]);
    assert_eq!(red(Bor, Int, &a, &b), vec![i32::MAX, -7 | 3, 5, 0, 14, -1]);
    assert_eq!(
        red(Bxor, Int, &a, &b),
        vec![i32::MAX ^ 1, -7 ^ 3, 5, 0, 6, i32::MAX]
    );
    assert_eq!(red(Land, Int, &a, &b), vec![1, 1, 0, 0, 1, 1]);
    assert_eq!(red(Lor, Int, &a, &b), vec![1, 1, 1, 0, 1, 1]);
    assert_eq!(red(Lxor, Int, &a, &b), vec![0, 0, 1, 0, 0, 0]);
    // other widths and signedness
    assert_eq!(
        red::<u8>(Sum, UnsignedChar, &[250, 1], &[10, 2]),
        vec![4, 3]
    );
    assert_eq!(
        red::<i8>(Sum, Int8, &[127, -128], &[1, -1]),
        vec![-128, 127]
    );
    assert_eq!(red::<i8>(Min, SignedChar, &[-3, 4], &[2, -9]), vec![-3, -9]);
    assert_eq!(
        red::<u16>(Prod, Uint16, &[300, 2], &[300, 3]),
        vec![(90000u32 % 65536) as u16, 6]
    );
    assert_eq!(
        red::<i16>(Max, Short, &[-300, 2], &[-301, 3]),
        vec![-300, 3]
    );
    assert_eq!(
        red::<u32>(Min, Unsigned, &[u32::MAX, 0], &[1, 5]),
        vec![1, 0]
    );
    assert_eq!(
        red::<i64>(Sum, Long, &[i64::MAX, -5], &[1, 2]),
        vec![i64::MIN, -3]
    );
    assert_eq!(
        red::<i64>(Sum, Count, &[1 << 40], &[1]),
        vec![(1 << 40) + 1]
    );
    assert_eq!(
        red::<u64>(Max, Uint64, &[u64::MAX, 1], &[0, 2]),
        vec![u64::MAX, 2]
    );
    assert_eq!(
        red::<u64>(Bxor, UnsignedLongLong, &[0xff00], &[0x0ff0]),
        vec![0xf0f0]
    );
    // byte, C bool, Fortran logical
    assert_eq!(
        red::<u8>(Band, Byte, &[0xf0, 0x3c], &[0xff, 0x0f]),
        vec![0xf0, 0x0c]
    );
    assert_eq!(
        red::<u8>(Land, CBool, &[1, 1, 0, 0], &[1, 0, 1, 0]),
        vec![1, 0, 0, 0]
    );
    assert_eq!(
        red::<u8>(Lor, CBool, &[1, 1, 0, 0], &[1, 0, 1, 0]),
        vec![1, 1, 1, 0]
    );
    assert_eq!(
        red::<u8>(Lxor, CBool, &[1, 1, 0, 0], &[1, 0, 1, 0]),
        vec![0, 1, 1, 0]
    );
    assert_eq!(red::<i32>(Lor, FLogical, &[0, 7], &[0, 0]), vec![0, 1]);
}

#[test]
fn float_ops() {
    use Basic::*;
    let a = [1.5f64, -2.0, 1e300, 0.25];
    let b = [2.0f64, 3.0, 1e300, -0.5];
    assert_eq!(red(Sum, Double, &a, &b), vec![3.5, 1.0, 2e300, -0.25]);
    assert_eq!(
        red(Prod, Double, &a, &b),
        vec![3.0, -6.0, f64::INFINITY, -0.125]
    );
    assert_eq!(red(Min, Double, &a, &b), vec![1.5, -2.0, 1e300, -0.5]);
    assert_eq!(
        red(Max, FDoublePrecision, &a, &b),
        vec![2.0, 3.0, 1e300, 0.25]
    );
    let a = [1.5f32, -2.0, 7.0];
    let b = [2.0f32, 3.0, -7.5];
    assert_eq!(red(Sum, Float, &a, &b), vec![3.5, 1.0, -0.5]);
    assert_eq!(red(Prod, FReal, &a, &b), vec![3.0, -6.0, -52.5]);
    assert_eq!(red(Min, Float, &a, &b), vec![1.5, -2.0, -7.5]);
    assert_eq!(red(Max, Float, &a, &b), vec![2.0, 3.0, 7.0]);
}

#[test]
fn large_arrays_match_scalar() {
    // long enough for the vector loops, odd length for the tails
    let n = 1001;
    let a: Vec<f64> = (0..n).map(|i| (i as f64) * 0.5 - 100.0).collect();
    let b: Vec<f64> = (0..n).map(|i| 300.0 - (i as f64) * 0.75).collect();
    let s = red(Sum, Basic::Double, &a, &b);
    let mn = red(Min, Basic::Double, &a, &b);
    let mx = red(Max, Basic::Double, &a, &b);
    for i in 0..n {
        assert_eq!(s[i], a[i] + b[i]);
        assert_eq!(mn[i], a[i].min(b[i]));
        assert_eq!(mx[i], a[i].max(b[i]));
    }
    let a: Vec<i64> = (0..n as i64).map(|i| i * 1_000_003 - 7).collect();
    let b: Vec<i64> = (0..n as i64).map(|i| 500_000_000 - i * 999_983).collect();
    let s = red(Sum, Basic::Int64, &a, &b);
    let mn = red(Min, Basic::Int64, &a, &b);
    for i in 0..n {
        assert_eq!(s[i], a[i] + b[i]);
        assert_eq!(mn[i], a[i].min(b[i]));
    }
    let a: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let b: Vec<f32> = (0..n).map(|i| (n - i) as f32).collect();
    assert!(red(Max, Basic::Float, &a, &b)
        .iter()
        .enumerate()
        .all(|(i, &v)| v == a[i].max(b[i])));
    let a: Vec<i32> = (0..n as i32).collect();
    assert!(red(Sum, Basic::Int, &a, &a)
        .iter()
        .enumerate()
        .all(|(i, &v)| v == 2 * i as i32));
}

#[test]
fn complex_ops() {
    let a = [
        Cx {
            re: 1.0f64,
            im: 2.0,
        },
        Cx { re: 0.5, im: -1.0 },
    ];
    let b = [
        Cx {
            re: 3.0f64,
            im: 4.0,
        },
        Cx { re: 2.0, im: 2.0 },
    ];
    assert_eq!(
        red(Prod, Basic::DoubleComplex, &a, &b),
        vec![Cx { re: -5.0, im: 10.0 }, Cx { re: 3.0, im: -1.0 }]
    );
    assert_eq!(
        red(Sum, Basic::DoubleComplex, &a, &b),
        vec![Cx { re: 4.0, im: 6.0 }, Cx { re: 2.5, im: 1.0 }]
    );
    let a = [Cx {
        re: 1.0f32,
        im: 2.0,
    }];
    let b = [Cx {
        re: 3.0f32,
        im: 4.0,
    }];
    assert_eq!(
        red(Prod, Basic::FloatComplex, &a, &b),
        vec![Cx { re: -5.0, im: 10.0 }]
    );
    assert_eq!(
        red(Sum, Basic::FComplex, &a, &b),
        vec![Cx { re: 4.0, im: 6.0 }]
    );
}

/// Packed (value, index) pairs.
fn pairs<V: Prim>(v: &[(V, i32)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (x, i) in v {
        let mut b = vec![0u8; V::N + 4];
        x.st(&mut b[..V::N]);
        i.st(&mut b[V::N..]);
        out.extend(b);
    }
    out
}
fn unpairs<V: Prim>(b: &[u8]) -> Vec<(V, i32)> {
    b.chunks_exact(V::N + 4)
        .map(|c| (V::ld(&c[..V::N]), i32::ld(&c[V::N..])))
        .collect()
}

#[test]
fn minloc_maxloc() {
    let a = [(1.0f64, 5), (2.0, 1), (3.0, 7), (4.0, 2)];
    let b = [(2.0f64, 0), (2.0, 3), (3.0, 4), (1.0, 9)];
    let mut y = pairs(&b);
    reduce(Minloc, Elem::DOUBLE_INT, &pairs(&a), &mut y).unwrap();
    assert_eq!(y.len(), 48);
    assert_eq!(
        unpairs::<f64>(&y),
        vec![(1.0, 5), (2.0, 1), (3.0, 4), (1.0, 9)]
    );
    let mut y = pairs(&b);
    reduce(Maxloc, Elem::DOUBLE_INT, &pairs(&a), &mut y).unwrap();
    assert_eq!(
        unpairs::<f64>(&y),
        vec![(2.0, 0), (2.0, 1), (3.0, 4), (4.0, 2)]
    );
    // 2INT, FLOAT_INT, SHORT_INT (6 packed bytes: unaligned elements), LONG_INT
    let mut y = pairs(&[(4i32, 3), (9, 2)]);
    reduce(Minloc, Elem::TWO_INT, &pairs(&[(4i32, 1), (8, 5)]), &mut y).unwrap();
    assert_eq!(unpairs::<i32>(&y), vec![(4, 1), (8, 5)]);
    let mut y = pairs(&[(-1.5f32, 3), (9.0, 2)]);
    reduce(
        Maxloc,
        Elem::FLOAT_INT,
        &pairs(&[(-1.5f32, 6), (9.5, 5)]),
        &mut y,
    )
    .unwrap();
    assert_eq!(unpairs::<f32>(&y), vec![(-1.5, 3), (9.5, 5)]);
    let mut y = pairs(&[(7i16, 3), (-2, 2), (5, 8)]);
    assert_eq!(y.len(), 18);
    reduce(
        Maxloc,
        Elem::SHORT_INT,
        &pairs(&[(7i16, 1), (-3, 0), (6, 9)]),
        &mut y,
    )
    .unwrap();
    assert_eq!(unpairs::<i16>(&y), vec![(7, 1), (-2, 2), (6, 9)]);
    let mut y = pairs(&[(i64::MIN, 4)]);
    reduce(Minloc, Elem::LONG_INT, &pairs(&[(i64::MIN, 4)]), &mut y).unwrap();
    assert_eq!(unpairs::<i64>(&y), vec![(i64::MIN, 4)]);
}

// ---- long double helpers (x86-64 80-bit): exact f64 -> f80 in software
fn f80(x: f64) -> [u8; 16] {
    let bits = x.to_bits();
    let s = (bits >> 63) as u16;
    let e = ((bits >> 52) & 0x7ff) as i32;
    let f = bits & ((1 << 52) - 1);
    let (exp, mant): (u16, u64) = if e == 0 && f == 0 {
        (0, 0)
    } else if e == 0x7ff {
        (0x7fff, 1 << 63 | f << 11)
    } else if e == 0 {
        let lz = f.leading_zeros() as i32;
        ((63 - 1074 - lz + 16383) as u16, f << lz)
    } else {
        ((e - 1023 + 16383) as u16, 1 << 63 | f << 11)
    };
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&mant.to_le_bytes());
    out[8..10].copy_from_slice(&(s << 15 | exp).to_le_bytes());
    out
}
fn ld_red(op: BuiltinOp, a: &[f64], b: &[f64]) -> Vec<u8> {
    let x: Vec<u8> = a.iter().flat_map(|&v| f80(v)).collect();
    let mut y: Vec<u8> = b.iter().flat_map(|&v| f80(v)).collect();
    reduce(op, Elem::Basic(Basic::LongDouble), &x, &mut y).unwrap();
    y
}
fn val10(b: &[u8]) -> &[u8] {
    &b[..10]
}

#[test]
fn long_double_exact() {
    // 1 + 2^-60 is exact in 80 bits (not in f64)
    let y = ld_red(Sum, &[1.0], &[2f64.powi(-60)]);
    let mant = u64::from_le_bytes(y[..8].try_into().unwrap());
    let se = u16::from_le_bytes(y[8..10].try_into().unwrap());
    assert_eq!((se, mant), (16383, 1 << 63 | 1 << 3));
    let y = ld_red(Prod, &[3.0, -0.5], &[5.0, 8.0]);
    assert_eq!(val10(&y[..16]), val10(&f80(15.0)));
    assert_eq!(val10(&y[16..]), val10(&f80(-4.0)));
    let y = ld_red(Min, &[3.0, -0.5, -2.0, 0.0], &[5.0, -8.0, 1e-310, -0.0]);
    let want: Vec<u8> = [3.0, -8.0, -2.0, -0.0]
        .iter()
        .flat_map(|&v| f80(v))
        .collect();
    assert_eq!(y, want);
    let y = ld_red(Max, &[3.0, -0.5, -2.0, 1e-310], &[5.0, -8.0, -3.0, 1e-311]);
    let want: Vec<u8> = [5.0, -0.5, -2.0, 1e-310]
        .iter()
        .flat_map(|&v| f80(v))
        .collect();
    assert_eq!(y, want);
    // unaligned buffers
    let x: Vec<u8> = std::iter::once(0).chain(f80(2.5)).collect();
    let mut y: Vec<u8> = [0, 0, 0].into_iter().chain(f80(4.0)).collect();
    reduce(Sum, Elem::Basic(Basic::LongDouble), &x[1..], &mut y[3..]).unwrap();
    assert_eq!(val10(&y[3..]), val10(&f80(6.5)));
    // LONG_DOUBLE_INT: 20 packed bytes
    let pair = |v: f64, i: i32| -> Vec<u8> {
        let mut b = f80(v).to_vec();
        b.extend(i.to_ne_bytes());
        b
    };
    let x: Vec<u8> = [pair(1.0, 4), pair(-3.0, 9)].concat();
    let mut y: Vec<u8> = [pair(1.0, 2), pair(-2.0, 1)].concat();
    reduce(Minloc, Elem::LONG_DOUBLE_INT, &x, &mut y).unwrap();
    assert_eq!(y, [pair(1.0, 2), pair(-3.0, 9)].concat());
}

#[test]
fn long_double_complex() {
    let c = |re: f64, im: f64| -> Vec<u8> { [f80(re), f80(im)].concat() };
    let x = c(1.0, 2.0);
    let mut y = c(3.0, 4.0);
    reduce(Prod, Elem::Basic(Basic::LongDoubleComplex), &x, &mut y).unwrap();
    assert_eq!(val10(&y[..16]), val10(&f80(-5.0)));
    assert_eq!(val10(&y[16..]), val10(&f80(10.0)));
    let mut y = c(3.0, 4.0);
    reduce(Sum, Elem::Basic(Basic::LongDoubleComplex), &x, &mut y).unwrap();
    assert_eq!(val10(&y[..16]), val10(&f80(4.0)));
    assert_eq!(val10(&y[16..]), val10(&f80(6.0)));
}

#[test]
fn reduce_into_typed_memory() {
    use std::sync::Arc;
    let int = Arc::new(TypeDesc::predefined(Basic::Int));
    // every other int of 8: [0, 2, 4, 6] get += 10, 20, 30, 40
    let v = TypeDesc::vector(4, 1, 2, &int).unwrap();
    let mut mem: Vec<i32> = (0..8).collect();
    let src = bytes(&[10i32, 20, 30, 40]);
    // SAFETY: mem holds one element of v (8 ints).
    let n = unsafe { reduce_into(Sum, &v, 1, &src, 0, mem.as_mut_ptr() as *mut u8) }.unwrap();
    assert_eq!(n, 16);
    assert_eq!(mem, vec![10, 1, 22, 3, 34, 5, 46, 7]);
    // a window of the stream: elements 1..3 only
    let mut mem: Vec<i32> = (0..8).collect();
    // SAFETY: as above.
    unsafe {
        reduce_into(
            Max,
            &v,
            1,
            &bytes(&[100i32, -1]),
            4,
            mem.as_mut_ptr() as *mut u8,
        )
    }
    .unwrap();
    assert_eq!(mem, vec![0, 1, 100, 3, 4, 5, 6, 7]);
    // contiguous fast path, large enough for several chunks elsewhere
    let c = TypeDesc::contiguous(3, &int).unwrap();
    let mut mem = vec![1i32; 3 * 40_000];
    let src = bytes(&vec![2i32; 3 * 40_000]);
    // SAFETY: mem holds 40000 elements of c.
    unsafe { reduce_into(Prod, &c, 40_000, &src, 0, mem.as_mut_ptr() as *mut u8) }.unwrap();
    assert!(mem.iter().all(|&x| x == 2));
    // strided, many chunks
    let r = TypeDesc::resized(&int, 0, 8).unwrap();
    let mut mem = vec![5i32; 2 * 50_000];
    let src = bytes(&(0..50_000).collect::<Vec<i32>>());
    // SAFETY: mem holds 50000 elements of r (extent 8).
    let n = unsafe { reduce_into(Sum, &r, 50_000, &src, 0, mem.as_mut_ptr() as *mut u8) }.unwrap();
    assert_eq!(n, 200_000);
    assert!((0..50_000).all(|i| mem[2 * i] == 5 + i as i32 && mem[2 * i + 1] == 5));
    // DOUBLE_INT in memory: 16-byte structs with 4 bytes of padding left alone
    let di = Arc::new(TypeDesc::pair(Elem::DOUBLE_INT));
    let t = TypeDesc::contiguous(2, &di).unwrap();
    let mut mem = [0xeeu8; 32];
    mem[..8].copy_from_slice(&3.0f64.to_ne_bytes());
    mem[8..12].copy_from_slice(&7i32.to_ne_bytes());
    mem[16..24].copy_from_slice(&1.0f64.to_ne_bytes());
    mem[24..28].copy_from_slice(&2i32.to_ne_bytes());
    let src = pairs(&[(3.0f64, 4), (0.5, 9)]);
    // SAFETY: mem holds one element of t.
    unsafe { reduce_into(Minloc, &t, 1, &src, 0, mem.as_mut_ptr()) }.unwrap();
    assert_eq!(f64::from_ne_bytes(mem[..8].try_into().unwrap()), 3.0);
    assert_eq!(i32::from_ne_bytes(mem[8..12].try_into().unwrap()), 4);
    assert_eq!(f64::from_ne_bytes(mem[16..24].try_into().unwrap()), 0.5);
    assert_eq!(i32::from_ne_bytes(mem[24..28].try_into().unwrap()), 9);
    assert_eq!(
        (&mem[12..16], &mem[28..32]),
        (&[0xee; 4][..], &[0xee; 4][..])
    );
    // errors: mixed type, split element, wrong op
    let db = Arc::new(TypeDesc::predefined(Basic::Double));
    let s = TypeDesc::create_struct(&[1, 1], &[0, 8], &[&int, &db]).unwrap();
    let mut m = [0u8; 16];
    // SAFETY: m holds one element of s; nothing is written on error.
    let e = unsafe { reduce_into(Sum, &s, 1, &[0; 12], 0, m.as_mut_ptr()) }.unwrap_err();
    assert_eq!(e.class, c::MPI_ERR_TYPE);
    // SAFETY: as above.
    let e = unsafe { reduce_into(Sum, &v, 1, &[0; 6], 0, m.as_mut_ptr()) }.unwrap_err();
    assert_eq!(e.class, c::MPI_ERR_ARG);
    // SAFETY: as above.
    let e = unsafe { reduce_into(Band, &r, 1, &[0; 4], 0, m.as_mut_ptr()) };
    assert!(e.is_ok());
    // SAFETY: as above.
    let e = unsafe { reduce_into(Minloc, &r, 1, &[0; 4], 0, m.as_mut_ptr()) }.unwrap_err();
    assert_eq!(e.class, c::MPI_ERR_OP);
}

#[test]
fn replace_noop_and_lengths() {
    let x = bytes(&[1i32, 2, 3]);
    let mut y = bytes(&[7i32, 8, 9]);
    reduce(NoOp, Elem::Basic(Basic::Int), &x, &mut y).unwrap();
    assert_eq!(vals::<i32>(&y), vec![7, 8, 9]);
    reduce(Replace, Elem::DOUBLE_INT, &[5u8; 12], &mut [0u8; 12]).unwrap();
    reduce(Replace, Elem::Basic(Basic::Int), &x, &mut y).unwrap();
    assert_eq!(vals::<i32>(&y), vec![1, 2, 3]);
    // inout decides the count; a trailing partial element is left alone
    let mut y = bytes(&[10i32, 20]);
    y.push(0xaa);
    reduce(Sum, Elem::Basic(Basic::Int), &x, &mut y).unwrap();
    assert_eq!(vals::<i32>(&y[..8]), vec![11, 22]);
    assert_eq!(y[8], 0xaa);
    let e = reduce(
        Sum,
        Elem::Basic(Basic::Int),
        &x[..4],
        &mut bytes(&[1i32, 2]),
    )
    .unwrap_err();
    assert_eq!(e.class, c::MPI_ERR_ARG);
    reduce(Sum, Elem::Basic(Basic::Int), &[], &mut []).unwrap();
    assert!(Sum.is_commutative() && Minloc.is_commutative() && !Replace.is_commutative());
    for &op in BuiltinOp::ALL {
        assert_eq!(BuiltinOp::from_name(op.name()), Some(op));
    }
    assert_eq!(BuiltinOp::from_name("MPI_OP_NULL"), None);
}

#[test]
fn half_precision_types() {
    use super::half::{bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16};
    let enc16 = |v: &[f32]| -> Vec<u8> {
        v.iter()
            .flat_map(|&x| f32_to_f16(x).to_ne_bytes())
            .collect()
    };
    let dec16 = |b: &[u8]| -> Vec<f32> {
        b.chunks(2)
            .map(|c| f16_to_f32(u16::from_ne_bytes([c[0], c[1]])))
            .collect()
    };
    let f16 = Elem::Basic(Basic::Float16);
    let input = enc16(&[1.0, 2.5, -3.0, f32::NAN]);
    let mut io = enc16(&[0.5, 1.0, 7.0, 4.0]);
    reduce(BuiltinOp::Sum, f16, &input, &mut io).unwrap();
    let got = dec16(&io);
    assert_eq!(&got[..3], &[1.5, 3.5, 4.0]);
    assert!(got[3].is_nan());
    let mut io = enc16(&[0.5, 1.0, 7.0, 4.0]);
    reduce(BuiltinOp::Min, f16, &input, &mut io).unwrap();
    assert_eq!(
        dec16(&io),
        vec![0.5, 1.0, -3.0, 4.0],
        "a NaN input never replaces the value"
    );
    let mut io = enc16(&[0.5, 1.0, 7.0, 4.0]);
    reduce(BuiltinOp::Max, f16, &input, &mut io).unwrap();
    assert_eq!(dec16(&io), vec![1.0, 2.5, 7.0, 4.0]);
    // Rounded to binary16 after each operation: 2048 + 1 is not representable.
    let mut io = enc16(&[2048.0]);
    reduce(BuiltinOp::Sum, f16, &enc16(&[1.0]), &mut io).unwrap();
    assert_eq!(dec16(&io), vec![2048.0]);

    let bf = Elem::Basic(Basic::Bfloat16);
    let encb = |v: &[f32]| -> Vec<u8> {
        v.iter()
            .flat_map(|&x| f32_to_bf16(x).to_ne_bytes())
            .collect()
    };
    let mut io = encb(&[3.0, -0.5]);
    reduce(BuiltinOp::Prod, bf, &encb(&[2.0, 4.0]), &mut io).unwrap();
    let got: Vec<f32> = io
        .chunks(2)
        .map(|c| bf16_to_f32(u16::from_ne_bytes([c[0], c[1]])))
        .collect();
    assert_eq!(got, vec![6.0, -2.0]);
    // Bitwise and logical ops are not defined on floating types.
    assert!(check(BuiltinOp::Band, f16).is_err());
    assert!(check(BuiltinOp::Lor, bf).is_err());
    assert!(check(BuiltinOp::Sum, bf).is_ok());
}
