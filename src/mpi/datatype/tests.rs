//! Unit tests of datatype construction, bounds, elem detection and packing.

use super::*;
use crate::standard::consts as c;

fn p(b: Basic) -> Arc<TypeDesc> {
    Arc::new(TypeDesc::predefined(b))
}
fn a(t: TypeDesc) -> Arc<TypeDesc> {
    Arc::new(t)
}
/// (lb, ub, extent, size, true_lb, true_ub)
fn bounds(t: &TypeDesc) -> (isize, isize, isize, usize, isize, isize) {
    (
        t.lb(),
        t.ub(),
        t.extent(),
        t.size(),
        t.true_lb(),
        t.true_ub(),
    )
}
fn blk(t: &TypeDesc) -> Vec<(isize, Basic, usize)> {
    t.blocks()
        .iter()
        .map(|b| (b.disp, b.basic, b.count))
        .collect()
}

#[test]
fn basic_sizes() {
    assert_eq!(Basic::LongDouble.size(), 16);
    assert_eq!(Basic::LongDoubleComplex.size(), 32);
    assert_eq!(Basic::WChar.size(), 4);
    assert_eq!(Basic::CBool.size(), 1);
    assert_eq!(Basic::Long.size(), 8);
    assert_eq!(Basic::Aint.size(), 8);
    assert_eq!(Basic::FloatComplex.align(), 4);
    for b in Basic::ALL {
        assert!(b.size() % b.align() == 0, "{}", b.name());
        let t = TypeDesc::predefined(*b);
        assert_eq!(
            bounds(&t),
            (
                0,
                b.size() as isize,
                b.size() as isize,
                b.size(),
                0,
                b.size() as isize
            )
        );
        assert!(t.is_contiguous(7));
        assert_eq!(t.elem(), Some(Elem::Basic(*b)));
        assert_eq!(t.envelope(), (0, 0, 0, 0));
    }
}

#[test]
fn names() {
    for &b in Basic::ALL {
        assert_eq!(Elem::from_name(b.name()), Some(Elem::Basic(b)));
    }
    for &e in Elem::PAIRS {
        assert_eq!(Elem::from_name(e.name()), Some(e));
    }
    assert_eq!(Elem::from_name("MPI_2INT"), Some(Elem::TWO_INT));
    assert_eq!(
        Elem::from_name("MPI_LONG_LONG_INT"),
        Some(Elem::Basic(Basic::LongLong))
    );
    assert_eq!(
        Elem::from_name("MPI_CXX_BOOL"),
        Some(Elem::Basic(Basic::CBool))
    );
    assert_eq!(Elem::from_name("MPI_REAL16"), None);
    assert_eq!(TypeDesc::named(Elem::DOUBLE_INT).extent(), 16);
}

#[test]
fn pair_layouts() {
    let cases = [
        (Elem::FLOAT_INT, 8, 8, 4),
        (Elem::DOUBLE_INT, 16, 12, 8),
        (Elem::LONG_INT, 16, 12, 8),
        (Elem::TWO_INT, 8, 8, 4),
        (Elem::SHORT_INT, 8, 6, 4),
        (Elem::LONG_DOUBLE_INT, 32, 20, 16),
    ];
    for (e, ext, size, ioff) in cases {
        assert_eq!(e.extent(), ext, "{}", e.name());
        assert_eq!(e.size(), size, "{}", e.name());
        assert_eq!(e.index_offset(), ioff, "{}", e.name());
        let t = TypeDesc::pair(e);
        assert_eq!(t.extent(), ext as isize);
        assert_eq!(t.size(), size);
        assert_eq!(t.true_ub(), (ioff + 4) as isize);
        assert_eq!(t.elem(), Some(e));
    }
    assert!(TypeDesc::pair(Elem::TWO_INT).is_contiguous(5));
    // one run of 12 bytes, but 16 bytes apart
    assert!(TypeDesc::pair(Elem::DOUBLE_INT).is_contiguous(1));
    assert!(!TypeDesc::pair(Elem::DOUBLE_INT).is_contiguous(2));
    // value and index of different types, no padding: contiguous
    assert!(TypeDesc::pair(Elem::FLOAT_INT).is_contiguous(9));
    let t = TypeDesc::create_struct(&[1, 1], &[0, 4], &[&p(Basic::Int), &p(Basic::Float)]).unwrap();
    assert!(t.is_contiguous(3));
    let t = TypeDesc::create_struct(&[1, 1], &[4, 0], &[&p(Basic::Int), &p(Basic::Float)]).unwrap();
    assert!(
        !t.is_contiguous(1),
        "out of order is not one run in packed order"
    );
    // contiguous of pairs keeps the pair elem
    let di = a(TypeDesc::pair(Elem::DOUBLE_INT));
    let t = TypeDesc::contiguous(3, &di).unwrap();
    assert_eq!(t.elem(), Some(Elem::DOUBLE_INT));
    assert_eq!(bounds(&t), (0, 48, 48, 36, 0, 44));
}

#[test]
fn contiguous_and_zero() {
    let t = TypeDesc::contiguous(3, &p(Basic::Int)).unwrap();
    assert_eq!(bounds(&t), (0, 12, 12, 12, 0, 12));
    assert_eq!(blk(&t), vec![(0, Basic::Int, 3)]);
    assert!(t.is_contiguous(10));
    let z = TypeDesc::contiguous(0, &p(Basic::Int)).unwrap();
    assert_eq!(bounds(&z), (0, 0, 0, 0, 0, 0));
    assert_eq!(z.elem(), Some(Elem::Basic(Basic::Int)));
    // an empty member does not spoil the elem of a struct
    let za = a(z.clone());
    let s = TypeDesc::create_struct(&[1, 1], &[0, 8], &[&p(Basic::Int), &za]).unwrap();
    assert_eq!(s.elem(), Some(Elem::Basic(Basic::Int)));
    assert!(z.blocks().is_empty());
    assert_eq!(
        TypeDesc::contiguous(-1, &p(Basic::Int)).unwrap_err().class,
        c::MPI_ERR_COUNT
    );
}

#[test]
fn vector_bounds() {
    let t = TypeDesc::vector(3, 2, 4, &p(Basic::Double)).unwrap();
    assert_eq!(bounds(&t), (0, 80, 80, 48, 0, 80));
    assert_eq!(
        blk(&t),
        vec![
            (0, Basic::Double, 2),
            (32, Basic::Double, 2),
            (64, Basic::Double, 2)
        ]
    );
    assert!(!t.is_contiguous(1));
    // stride == blocklen: merged to one block, contiguous
    let t = TypeDesc::vector(4, 2, 2, &p(Basic::Int)).unwrap();
    assert_eq!(blk(&t), vec![(0, Basic::Int, 8)]);
    assert!(t.is_contiguous(3));
    // negative stride
    let t = TypeDesc::vector(3, 1, -2, &p(Basic::Int)).unwrap();
    assert_eq!(bounds(&t), (-16, 4, 20, 12, -16, 4));
    assert_eq!(blk(&t)[0], (0, Basic::Int, 1));
    assert_eq!(
        TypeDesc::vector(2, -1, 2, &p(Basic::Int))
            .unwrap_err()
            .class,
        c::MPI_ERR_ARG
    );
    assert_eq!(
        TypeDesc::vector(-2, 1, 2, &p(Basic::Int))
            .unwrap_err()
            .class,
        c::MPI_ERR_COUNT
    );
    // hvector, bytes
    let t = TypeDesc::hvector(2, 3, 100, &p(Basic::Int)).unwrap();
    assert_eq!(bounds(&t), (0, 112, 112, 24, 0, 112));
    assert_eq!(t.kind(), CombinerKind::Hvector);
    let c = t.contents();
    assert_eq!((c.ints, c.addrs, c.types.len()), (vec![2, 3], vec![100], 1));
}

#[test]
fn vector_of_vector() {
    let inner = a(TypeDesc::vector(2, 1, 2, &p(Basic::Int)).unwrap());
    assert_eq!(bounds(&inner), (0, 12, 12, 8, 0, 12));
    let t = TypeDesc::vector(3, 1, 2, &inner).unwrap();
    assert_eq!(bounds(&t), (0, 60, 60, 24, 0, 60));
    let d: Vec<isize> = t.blocks().iter().map(|b| b.disp).collect();
    assert_eq!(d, vec![0, 8, 24, 32, 48, 56]);
    assert_eq!(t.elem(), Some(Elem::Basic(Basic::Int)));
    let c = t.contents();
    assert_eq!(c.ints, vec![3, 1, 2]);
    assert!(Arc::ptr_eq(&c.types[0], &inner));
}

#[test]
fn indexed_family() {
    let int = p(Basic::Int);
    let t = TypeDesc::indexed(&[2, 1], &[4, -1], &int).unwrap();
    assert_eq!(bounds(&t), (-4, 24, 28, 12, -4, 24));
    assert_eq!(blk(&t), vec![(16, Basic::Int, 2), (-4, Basic::Int, 1)]);
    assert_eq!(t.contents().ints, vec![2, 2, 1, 4, -1]);
    let t = TypeDesc::hindexed(&[1, 0, 2], &[3, 1000, 20], &int).unwrap();
    // zero-length block contributes nothing
    assert_eq!(bounds(&t), (3, 28, 25, 12, 3, 28));
    assert_eq!(t.contents().addrs, vec![3, 1000, 20]);
    let t = TypeDesc::indexed_block(2, &[0, 5], &int).unwrap();
    assert_eq!(bounds(&t), (0, 28, 28, 16, 0, 28));
    assert_eq!(t.contents().ints, vec![2, 2, 0, 5]);
    let t = TypeDesc::hindexed_block(1, &[-8, 8], &p(Basic::Double)).unwrap();
    assert_eq!(bounds(&t), (-8, 16, 24, 16, -8, 16));
    assert_eq!(
        TypeDesc::indexed(&[1, -1], &[0, 1], &int)
            .unwrap_err()
            .class,
        c::MPI_ERR_ARG
    );
    assert_eq!(
        TypeDesc::indexed_block(-1, &[0], &int).unwrap_err().class,
        c::MPI_ERR_ARG
    );
}

#[test]
fn struct_padding() {
    let (ch, db, int) = (p(Basic::Char), p(Basic::Double), p(Basic::Int));
    let t = TypeDesc::create_struct(&[1, 1], &[0, 8], &[&ch, &db]).unwrap();
    assert_eq!(bounds(&t), (0, 16, 16, 9, 0, 16));
    let t = TypeDesc::create_struct(&[1, 1], &[0, 8], &[&db, &ch]).unwrap();
    assert_eq!(bounds(&t), (0, 16, 16, 9, 0, 9));
    assert_eq!(t.elem(), None);
    let t = TypeDesc::create_struct(&[1, 1], &[0, 4], &[&int, &ch]).unwrap();
    assert_eq!(bounds(&t), (0, 8, 8, 5, 0, 5));
    // struct { char c[3]; } : align 1, no padding
    let t = TypeDesc::create_struct(&[3], &[0], &[&ch]).unwrap();
    assert_eq!(bounds(&t), (0, 3, 3, 3, 0, 3));
    // negative displacement, padding relative to lb
    let t = TypeDesc::create_struct(&[1, 1], &[-8, 0], &[&db, &ch]).unwrap();
    assert_eq!(bounds(&t), (-8, 8, 16, 9, -8, 1));
    // contiguous of a padded struct uses the padded extent
    let s = a(TypeDesc::create_struct(&[1, 1], &[0, 8], &[&db, &ch]).unwrap());
    let t = TypeDesc::contiguous(2, &s).unwrap();
    assert_eq!(bounds(&t), (0, 32, 32, 18, 0, 25));
    assert_eq!(
        blk(&t),
        vec![
            (0, Basic::Double, 1),
            (8, Basic::Char, 1),
            (16, Basic::Double, 1),
            (24, Basic::Char, 1)
        ]
    );
    let c = s.contents();
    assert_eq!(
        (c.ints, c.addrs, c.types.len()),
        (vec![2, 1, 1], vec![0, 8], 2)
    );
    assert_eq!(
        TypeDesc::create_struct(&[1], &[0, 1], &[&ch])
            .unwrap_err()
            .class,
        c::MPI_ERR_ARG
    );
}

#[test]
fn resized_markers() {
    let int = p(Basic::Int);
    let r = a(TypeDesc::resized(&int, -2, 10).unwrap());
    assert_eq!(bounds(&r), (-2, 8, 10, 4, 0, 4));
    let t = TypeDesc::contiguous(2, &r).unwrap();
    assert_eq!(bounds(&t), (-2, 18, 20, 8, 0, 14));
    assert_eq!(blk(&t), vec![(0, Basic::Int, 1), (10, Basic::Int, 1)]);
    // markers win over data in a struct, and suppress padding
    let db = p(Basic::Double);
    let t = TypeDesc::create_struct(&[1, 1], &[0, 16], &[&r, &db]).unwrap();
    assert_eq!(bounds(&t), (-2, 8, 10, 12, 0, 24));
    assert_eq!(t.elem(), None);
    // resize to a larger extent makes a strided "vector"
    let r16 = a(TypeDesc::resized(&int, 0, 16).unwrap());
    let t = TypeDesc::contiguous(3, &r16).unwrap();
    assert_eq!(bounds(&t), (0, 48, 48, 12, 0, 36));
    assert_eq!(t.elem(), Some(Elem::Basic(Basic::Int)));
    assert!(!t.is_contiguous(1));
    // resized contiguous stays contiguous for one element only
    assert!(r16.is_contiguous(1));
    assert!(!r16.is_contiguous(2));
    let c = r.contents();
    assert_eq!((c.ints.len(), c.addrs, c.types.len()), (0, vec![-2, 10], 1));
    let d = TypeDesc::dup(&r);
    assert_eq!(bounds(&d), bounds(&r));
    assert_eq!(d.kind(), CombinerKind::Dup);
    assert_eq!(d.envelope(), (0, 0, 0, 1));
}

#[test]
fn subarray_orders() {
    let int = p(Basic::Int);
    let t = TypeDesc::subarray(&[4, 5], &[2, 3], &[1, 2], Order::C, &int).unwrap();
    assert_eq!(bounds(&t), (0, 80, 80, 24, 28, 60));
    assert_eq!(blk(&t), vec![(28, Basic::Int, 3), (48, Basic::Int, 3)]);
    let t = TypeDesc::subarray(&[4, 5], &[2, 3], &[1, 2], Order::Fortran, &int).unwrap();
    assert_eq!(bounds(&t), (0, 80, 80, 24, 36, 76));
    assert_eq!(
        blk(&t),
        vec![
            (36, Basic::Int, 2),
            (52, Basic::Int, 2),
            (68, Basic::Int, 2)
        ]
    );
    assert_eq!(t.kind(), CombinerKind::Subarray);
    assert_eq!(t.contents().ints, vec![2, 4, 5, 2, 3, 1, 2, 1]);
    // 3-d, C order, whole array = contiguous
    let t = TypeDesc::subarray(&[2, 3, 4], &[2, 3, 4], &[0, 0, 0], Order::C, &int).unwrap();
    assert_eq!(blk(&t), vec![(0, Basic::Int, 24)]);
    assert!(t.is_contiguous(2));
    assert!(TypeDesc::subarray(&[4], &[3], &[2], Order::C, &int).is_err());
    assert!(TypeDesc::subarray(&[4], &[5], &[0], Order::C, &int).is_err());
}

#[test]
fn darray_layouts() {
    let int = p(Basic::Int);
    use Distrib::{Block, Cyclic};
    const NONE: Distrib = Distrib::None;
    // 1-d block over 3 processes of 10 elements: 4, 4, 2
    for (rank, start, n) in [(0, 0, 4), (1, 4, 4), (2, 8, 2)] {
        let t = TypeDesc::darray(3, rank, &[10], &[Block], &[None], &[3], Order::C, &int).unwrap();
        assert_eq!(blk(&t), vec![(start * 4, Basic::Int, n)]);
        assert_eq!((t.lb(), t.extent()), (0, 40));
    }
    // 1-d cyclic(2) over 2 processes of 7 elements: rank 1 has 2,3,6
    let t = TypeDesc::darray(2, 1, &[7], &[Cyclic], &[Some(2)], &[2], Order::C, &int).unwrap();
    assert_eq!(blk(&t), vec![(8, Basic::Int, 2), (24, Basic::Int, 1)]);
    assert_eq!((t.lb(), t.extent(), t.size()), (0, 28, 12));
    // 2-d 4x6, C order, 2x2 grid, block x block: rank 3 has rows 2..4, cols 3..6
    let t = TypeDesc::darray(
        4,
        3,
        &[4, 6],
        &[Block, Block],
        &[None, None],
        &[2, 2],
        Order::C,
        &int,
    )
    .unwrap();
    assert_eq!(
        blk(&t),
        vec![
            ((2 * 6 + 3) * 4, Basic::Int, 3),
            ((3 * 6 + 3) * 4, Basic::Int, 3)
        ]
    );
    assert_eq!((t.lb(), t.extent(), t.size()), (0, 96, 24));
    // equals the subarray with the same box
    let s = TypeDesc::subarray(&[4, 6], &[2, 3], &[2, 3], Order::C, &int).unwrap();
    assert_eq!(blk(&s), blk(&t));
    // 2-d 4x3 Fortran order, 2x1 grid, cyclic rows x none: rank 1 has rows 1 and 3
    let t = TypeDesc::darray(
        2,
        1,
        &[4, 3],
        &[Cyclic, NONE],
        &[None, None],
        &[2, 1],
        Order::Fortran,
        &int,
    )
    .unwrap();
    let d: Vec<isize> = t.blocks().iter().map(|b| b.disp / 4).collect();
    assert_eq!(d, vec![1, 3, 5, 7, 9, 11]);
    // 2-d cyclic(2) in the outer dimension of a C array: rows 0,1 and 4 of 5 rows, 2 cols
    let t = TypeDesc::darray(
        2,
        0,
        &[5, 2],
        &[Cyclic, NONE],
        &[Some(2), None],
        &[2, 1],
        Order::C,
        &int,
    )
    .unwrap();
    assert_eq!(blk(&t), vec![(0, Basic::Int, 4), (32, Basic::Int, 2)]);
    assert_eq!(t.extent(), 40);
    // every element is owned exactly once over all ranks
    let (g, ps) = ([5i64, 7, 3], [2i64, 3, 1]);
    let mut seen = vec![0; 105];
    for rank in 0..6 {
        let t = TypeDesc::darray(
            6,
            rank,
            &g,
            &[Cyclic, Block, NONE],
            &[Some(2), None, None],
            &ps,
            Order::C,
            &int,
        )
        .unwrap();
        for b in t.blocks() {
            for k in 0..b.count {
                seen[b.disp as usize / 4 + k] += 1;
            }
        }
    }
    assert!(seen.iter().all(|&n| n == 1));
    let c = t.contents();
    assert_eq!(c.ints, vec![2, 0, 2, 5, 2, 1, 2, 2, -1, 2, 1, 0]);
    assert!(TypeDesc::darray(4, 4, &[4], &[Block], &[None], &[4], Order::C, &int).is_err());
    assert!(TypeDesc::darray(3, 0, &[4], &[Block], &[None], &[2], Order::C, &int).is_err());
    assert!(TypeDesc::darray(2, 0, &[9], &[Block], &[Some(4)], &[2], Order::C, &int).is_err());
}

#[test]
fn large_count_contents() {
    let int = p(Basic::Int);
    let t = TypeDesc::hvector(2, 3, 100, &int)
        .unwrap()
        .with_large_counts();
    let c = t.contents();
    assert_eq!(
        (c.ints.len(), c.addrs.len(), c.large.clone()),
        (0, 0, vec![2, 3, 100])
    );
    assert_eq!(t.envelope(), (0, 0, 3, 1));
    let t = TypeDesc::subarray(&[4, 5], &[2, 3], &[1, 2], Order::Fortran, &int)
        .unwrap()
        .with_large_counts();
    let c = t.contents();
    assert_eq!((c.ints, c.large), (vec![2, 1], vec![4, 5, 2, 3, 1, 2]));
    let t = TypeDesc::darray(
        2,
        1,
        &[7],
        &[Distrib::Cyclic],
        &[Some(2)],
        &[2],
        Order::C,
        &int,
    )
    .unwrap()
    .with_large_counts();
    let c = t.contents();
    assert_eq!((c.ints, c.large), (vec![2, 1, 1, 1, 2, 2, 0], vec![7]));
    let r = TypeDesc::resized(&int, -4, 16).unwrap().with_large_counts();
    assert_eq!(r.contents().large, vec![-4, 16]);
    assert_eq!(
        TypeDesc::predefined(Basic::Int)
            .with_large_counts()
            .envelope(),
        (0, 0, 0, 0)
    );
}

#[test]
fn elem_detection() {
    let (int, db) = (p(Basic::Int), p(Basic::Double));
    assert_eq!(
        TypeDesc::vector(3, 1, 2, &db).unwrap().elem(),
        Some(Elem::Basic(Basic::Double))
    );
    assert_eq!(
        TypeDesc::create_struct(&[1, 1], &[0, 8], &[&int, &db])
            .unwrap()
            .elem(),
        None
    );
    assert_eq!(
        TypeDesc::create_struct(&[1, 2], &[0, 8], &[&int, &int])
            .unwrap()
            .elem(),
        Some(Elem::Basic(Basic::Int))
    );
    let pi = a(TypeDesc::pair(Elem::SHORT_INT));
    assert_eq!(
        TypeDesc::vector(2, 1, 3, &pi).unwrap().elem(),
        Some(Elem::SHORT_INT)
    );
    // a user struct {double, int} is not a pair type
    let t = TypeDesc::create_struct(&[1, 1], &[0, 8], &[&db, &int]).unwrap();
    assert_eq!(bounds(&t), (0, 16, 16, 12, 0, 12));
    assert_eq!(t.elem(), None);
    // pairs mixed with ints are nothing
    assert_eq!(
        TypeDesc::create_struct(&[1, 1], &[0, 8], &[&pi, &int])
            .unwrap()
            .elem(),
        None
    );
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + 3) as u8).collect()
}

/// Reference pack through the type map, element by element, byte by byte.
fn ref_pack(t: &TypeDesc, count: usize, buf: &[u8], origin: isize) -> Vec<u8> {
    let mut out = Vec::new();
    for i in 0..count {
        for b in t.blocks() {
            for k in 0..b.bytes() {
                out.push(buf[(origin + i as isize * t.extent() + b.disp + k as isize) as usize]);
            }
        }
    }
    out
}

fn check_roundtrip(t: &TypeDesc, count: usize) {
    // origin so that negative displacements stay in the buffer
    let lo = t
        .true_lb()
        .min(t.true_lb() + (count as isize - 1).max(0) * t.extent())
        .min(0);
    let origin = -lo + 3; // odd: unaligned
    let span = (origin
        + t.true_ub()
            .max(t.true_ub() + (count as isize - 1).max(0) * t.extent())
        + 8) as usize;
    let buf = pattern(span);
    let expect = ref_pack(t, count, &buf, origin);
    assert_eq!(expect.len(), t.packed_size(count));
    let mut packed = vec![0u8; t.packed_size(count)];
    // SAFETY: buf covers every byte of the type map of `count` elements at origin.
    let n = unsafe { t.pack(count, buf.as_ptr().offset(origin), &mut packed) };
    assert_eq!(n, packed.len());
    assert_eq!(packed, expect);
    // partial packing by every chunk size in a small set equals the whole
    for chunk in [1usize, 3, 5, 8, 13, 64] {
        let mut part = vec![0u8; packed.len()];
        let mut off = 0;
        while off < part.len() {
            let end = (off + chunk).min(part.len());
            // SAFETY: as above.
            let n = unsafe {
                t.pack_range(count, buf.as_ptr().offset(origin), off, &mut part[off..end])
            };
            assert_eq!(n, end - off);
            off = end;
        }
        assert_eq!(part, packed, "chunk {chunk}");
    }
    // unpack into zeroes, whole and in pieces: touched bytes equal, others stay 0
    for chunk in [usize::MAX, 1, 7] {
        let mut out = vec![0u8; span];
        let mut off = 0;
        while off < packed.len() {
            let end = off.saturating_add(chunk).min(packed.len());
            // SAFETY: out has the same span as buf.
            let n = unsafe {
                t.unpack_range(
                    count,
                    &packed[off..end],
                    off,
                    out.as_mut_ptr().offset(origin),
                )
            };
            assert_eq!(n, end - off);
            off = end;
        }
        assert_eq!(ref_pack(t, count, &out, origin), packed);
        let touched: usize = out
            .iter()
            .zip(&buf)
            .filter(|(o, b)| o == b && **o != 0)
            .count();
        assert!(touched <= packed.len());
    }
    // a short destination gets a prefix
    if packed.len() > 2 {
        let mut short = vec![0u8; packed.len() - 2];
        // SAFETY: as above.
        let n = unsafe { t.pack(count, buf.as_ptr().offset(origin), &mut short) };
        assert_eq!(n, short.len());
        assert_eq!(short[..], packed[..short.len()]);
    }
}

#[test]
fn pack_roundtrips() {
    let (int, db, ch) = (p(Basic::Int), p(Basic::Double), p(Basic::Char));
    let inner = a(TypeDesc::vector(2, 1, 2, &int).unwrap());
    let r = a(TypeDesc::resized(&int, -2, 10).unwrap());
    let types = vec![
        TypeDesc::predefined(Basic::Double),
        TypeDesc::pair(Elem::DOUBLE_INT),
        TypeDesc::pair(Elem::LONG_DOUBLE_INT),
        TypeDesc::contiguous(5, &int).unwrap(),
        TypeDesc::vector(3, 2, 4, &db).unwrap(),
        TypeDesc::vector(3, 1, -2, &int).unwrap(),
        TypeDesc::vector(3, 1, 2, &inner).unwrap(),
        TypeDesc::indexed(&[2, 1], &[4, -1], &int).unwrap(),
        TypeDesc::create_struct(&[1, 3, 1], &[0, 8, 20], &[&db, &ch, &int]).unwrap(),
        TypeDesc::contiguous(2, &r).unwrap(),
        TypeDesc::subarray(&[4, 5], &[2, 3], &[1, 2], Order::C, &int).unwrap(),
        TypeDesc::contiguous(0, &int).unwrap(),
    ];
    for t in &types {
        for count in [0, 1, 2, 5] {
            check_roundtrip(t, count);
        }
    }
}

#[test]
fn pieces() {
    let t = TypeDesc::vector(3, 2, 4, &p(Basic::Int)).unwrap();
    let mut v = Vec::new();
    let n = t.for_each_piece(2, 6, 100, |m, w, l| v.push((m, w, l)));
    // stream of 2 elements: 48 bytes; from byte 6: rest of run 0, runs 1, 2, then element 1
    assert_eq!(n, 42);
    assert_eq!(
        v,
        vec![
            (6, 0, 2),
            (16, 2, 8),
            (32, 10, 8),
            (40, 18, 8),
            (56, 26, 8),
            (72, 34, 8)
        ]
    );
    let c = TypeDesc::contiguous(4, &p(Basic::Int)).unwrap();
    let mut v = Vec::new();
    c.for_each_piece(10, 4, 20, |m, w, l| v.push((m, w, l)));
    assert_eq!(v, vec![(4, 0, 20)]);
}

#[test]
fn contiguous_pack_offsets_true_lb() {
    // a contiguous type whose data starts at true_lb = 8
    let t = TypeDesc::hindexed(&[2], &[8], &p(Basic::Int)).unwrap();
    assert!(t.is_contiguous(1));
    let buf = pattern(32);
    let mut out = [0u8; 8];
    // SAFETY: buf holds bytes 8..16.
    unsafe { t.pack(1, buf.as_ptr(), &mut out) };
    assert_eq!(out[..], buf[8..16]);
}

#[test]
fn huge_counts() {
    let int = p(Basic::Int);
    let t = TypeDesc::contiguous(1 << 40, &int).unwrap();
    assert_eq!(blk(&t), vec![(0, Basic::Int, 1 << 40)]);
    assert_eq!(t.size(), 4 << 40);
    let t = TypeDesc::vector(1 << 40, 2, 2, &int).unwrap();
    assert_eq!(blk(&t), vec![(0, Basic::Int, 2 << 40)]);
    let t = TypeDesc::vector(1 << 40, 0, 2, &int).unwrap();
    assert_eq!(bounds(&t), (0, 0, 0, 0, 0, 0));
    let e = TypeDesc::vector(1 << 40, 1, 2, &int).unwrap_err();
    assert_eq!(e.class, c::MPI_ERR_NO_MEM);
    let v = a(TypeDesc::vector(2, 1, 2, &int).unwrap());
    let e = TypeDesc::contiguous(1 << 40, &v).unwrap_err();
    assert_eq!(e.class, c::MPI_ERR_NO_MEM);
    // contiguous of a dense struct merges
    let s = a(TypeDesc::create_struct(&[2], &[0], &[&int]).unwrap());
    assert_eq!(
        blk(&TypeDesc::contiguous(1000, &s).unwrap()),
        vec![(0, Basic::Int, 2000)]
    );
}

#[test]
fn count_and_elements() {
    let (int, db, ch) = (p(Basic::Int), p(Basic::Double), p(Basic::Char));
    let s = TypeDesc::create_struct(&[1, 3], &[0, 8], &[&db, &ch]).unwrap();
    assert_eq!(s.size(), 11);
    assert_eq!(s.count_of(22), Some(2));
    assert_eq!(s.count_of(23), None);
    assert_eq!(s.elements_of(22), Some(8));
    assert_eq!(s.elements_of(22 + 8), Some(9));
    assert_eq!(s.elements_of(22 + 10), Some(11));
    assert_eq!(s.elements_of(22 + 4), None);
    assert_eq!(TypeDesc::pair(Elem::DOUBLE_INT).elements_of(24), Some(4));
    let z = TypeDesc::contiguous(0, &int).unwrap();
    assert_eq!(
        (z.count_of(0), z.elements_of(0), z.count_of(4)),
        (Some(0), Some(0), None)
    );
    assert_eq!(TypeDesc::predefined(Basic::Int).elements_of(6), None);
}

#[test]
fn many_small_blocks() {
    let n = 1_000_000usize;
    let t = TypeDesc::vector(n as i64, 1, 2, &p(Basic::Int)).unwrap();
    assert_eq!(t.blocks().len(), n);
    let src: Vec<i32> = (0..2 * n as i32).collect();
    let mut packed = vec![0u8; t.packed_size(1)];
    // SAFETY: src holds 2n ints, the type touches ints 0, 2, .., 2n-2.
    unsafe { t.pack(1, src.as_ptr() as *const u8, &mut packed) };
    for (i, ch) in packed.chunks_exact(4).enumerate() {
        assert_eq!(i32::from_ne_bytes(ch.try_into().unwrap()), 2 * i as i32);
    }
    let mut back = vec![-1i32; 2 * n];
    // SAFETY: back has the same size as src.
    unsafe { t.unpack(1, &packed, back.as_mut_ptr() as *mut u8) };
    for i in 0..n {
        assert_eq!(back[2 * i], 2 * i as i32);
        assert_eq!(back[2 * i + 1], -1);
    }
}

/// The type map of `t` expanded naively from its constructor arguments,
/// independently of the flattening code: one (disp, basic) per value.
fn naive(t: &TypeDesc) -> Vec<(isize, Basic)> {
    let shift = |v: &[(isize, Basic)], by: isize, out: &mut Vec<(isize, Basic)>| {
        out.extend(v.iter().map(|&(d, b)| (d + by, b)));
    };
    let mut out = Vec::new();
    match t.combiner() {
        Combiner::Named(Elem::Basic(b)) => out.push((0, *b)),
        Combiner::Named(e @ Elem::Pair(v, i)) => {
            out.push((0, *v));
            out.push((e.index_offset() as isize, *i));
        }
        Combiner::Dup(old) | Combiner::Resized { old, .. } | Combiner::F90 { old, .. } => {
            out = naive(old)
        }
        Combiner::Contiguous { count, old } => {
            let m = naive(old);
            for k in 0..*count as isize {
                shift(&m, k * old.extent(), &mut out);
            }
        }
        Combiner::Vector {
            count,
            blocklen,
            stride,
            old,
        } => {
            let m = naive(old);
            for i in 0..*count as isize {
                for j in 0..*blocklen as isize {
                    shift(&m, (i * *stride as isize + j) * old.extent(), &mut out);
                }
            }
        }
        Combiner::Hvector {
            count,
            blocklen,
            stride,
            old,
        } => {
            let m = naive(old);
            for i in 0..*count as isize {
                for j in 0..*blocklen as isize {
                    shift(&m, i * stride + j * old.extent(), &mut out);
                }
            }
        }
        Combiner::Indexed {
            blocklens,
            disps,
            old,
        } => {
            let m = naive(old);
            for (bl, d) in blocklens.iter().zip(disps) {
                for j in 0..*bl as isize {
                    shift(&m, (*d as isize + j) * old.extent(), &mut out);
                }
            }
        }
        Combiner::Hindexed {
            blocklens,
            disps,
            old,
        } => {
            let m = naive(old);
            for (bl, d) in blocklens.iter().zip(disps) {
                for j in 0..*bl as isize {
                    shift(&m, d + j * old.extent(), &mut out);
                }
            }
        }
        Combiner::IndexedBlock {
            blocklen,
            disps,
            old,
        } => {
            let m = naive(old);
            for d in disps {
                for j in 0..*blocklen as isize {
                    shift(&m, (*d as isize + j) * old.extent(), &mut out);
                }
            }
        }
        Combiner::HindexedBlock {
            blocklen,
            disps,
            old,
        } => {
            let m = naive(old);
            for d in disps {
                for j in 0..*blocklen as isize {
                    shift(&m, d + j * old.extent(), &mut out);
                }
            }
        }
        Combiner::Struct {
            blocklens,
            disps,
            types,
        } => {
            for ((bl, d), ty) in blocklens.iter().zip(disps).zip(types) {
                let m = naive(ty);
                for j in 0..*bl as isize {
                    shift(&m, d + j * ty.extent(), &mut out);
                }
            }
        }
        Combiner::Subarray {
            sizes,
            subsizes,
            starts,
            order,
            old,
        } => {
            let m = naive(old);
            let nd = sizes.len();
            let fast: Vec<usize> = match order {
                Order::C => (0..nd).rev().collect(),
                Order::Fortran => (0..nd).collect(),
            };
            let mut stride = vec![0isize; nd];
            let mut acc = old.extent();
            for &d in &fast {
                stride[d] = acc;
                acc *= sizes[d] as isize;
            }
            let total: i64 = subsizes.iter().product();
            for mut lin in 0..total {
                let mut disp = 0;
                for &d in &fast {
                    disp += (starts[d] + lin % subsizes[d]) as isize * stride[d];
                    lin /= subsizes[d];
                }
                shift(&m, disp, &mut out);
            }
        }
        Combiner::Darray {
            size,
            rank,
            gsizes,
            distribs,
            dargs,
            psizes,
            order,
            old,
        } => {
            let m = naive(old);
            let nd = gsizes.len();
            let fast: Vec<usize> = match order {
                Order::C => (0..nd).rev().collect(),
                Order::Fortran => (0..nd).collect(),
            };
            let mut coords = vec![0i64; nd];
            let (mut left, mut r) = (*size, *rank);
            for d in 0..nd {
                left /= psizes[d];
                coords[d] = r / left;
                r %= left;
            }
            let owner = |d: usize, g: i64| -> i64 {
                let p = psizes[d];
                match distribs[d] {
                    Distrib::None => coords[d],
                    Distrib::Block => g / dargs[d].unwrap_or((gsizes[d] + p - 1) / p),
                    Distrib::Cyclic => (g / dargs[d].unwrap_or(1)) % p,
                }
            };
            let total: i64 = gsizes.iter().product();
            for lin0 in 0..total {
                let (mut lin, mut disp, mut mine, mut acc) = (lin0, 0isize, true, old.extent());
                for &d in &fast {
                    let g = lin % gsizes[d];
                    lin /= gsizes[d];
                    mine &= owner(d, g) == coords[d];
                    disp += g as isize * acc;
                    acc *= gsizes[d] as isize;
                }
                if mine {
                    shift(&m, disp, &mut out);
                }
            }
        }
    }
    out
}

fn expand(t: &TypeDesc) -> Vec<(isize, Basic)> {
    let mut out = Vec::new();
    for b in t.blocks() {
        for k in 0..b.count {
            out.push((b.disp + (k * b.basic.size()) as isize, b.basic));
        }
    }
    out
}

/// Small deterministic generator (no dependencies).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
    fn int(&mut self, lo: i64, hi: i64) -> i64 {
        lo + self.next((hi - lo + 1) as u64) as i64
    }
}

fn random_type(g: &mut Lcg, depth: u32) -> Arc<TypeDesc> {
    let leaf = [
        Basic::Char,
        Basic::Short,
        Basic::Int,
        Basic::Double,
        Basic::LongDouble,
        Basic::FloatComplex,
    ];
    if depth == 0 || g.next(4) == 0 {
        return match g.next(6) {
            0 => a(TypeDesc::pair(Elem::PAIRS[g.next(6) as usize])),
            _ => p(leaf[g.next(leaf.len() as u64) as usize]),
        };
    }
    let old = random_type(g, depth - 1);
    let n = g.int(0, 3);
    let t = match g.next(12) {
        0 => TypeDesc::contiguous(n, &old),
        1 => TypeDesc::vector(n, g.int(0, 3), g.int(-4, 4), &old),
        2 => TypeDesc::hvector(n, g.int(0, 2), g.int(-40, 40) as isize, &old),
        3 => {
            let bl: Vec<i64> = (0..n).map(|_| g.int(0, 3)).collect();
            let d: Vec<i64> = (0..n).map(|_| g.int(-5, 5)).collect();
            TypeDesc::indexed(&bl, &d, &old)
        }
        4 => {
            let bl: Vec<i64> = (0..n).map(|_| g.int(0, 3)).collect();
            let d: Vec<isize> = (0..n).map(|_| g.int(-50, 50) as isize).collect();
            TypeDesc::hindexed(&bl, &d, &old)
        }
        5 => {
            let d: Vec<i64> = (0..n).map(|_| g.int(-5, 5)).collect();
            TypeDesc::indexed_block(g.int(0, 2), &d, &old)
        }
        6 => {
            let other = random_type(g, depth - 1);
            let d = [g.int(-30, 30) as isize, g.int(-30, 30) as isize];
            TypeDesc::create_struct(&[g.int(0, 2), g.int(1, 2)], &d, &[&old, &other])
        }
        7 => TypeDesc::resized(&old, g.int(-8, 8) as isize, g.int(0, 48) as isize),
        8 => {
            let nd = g.int(1, 3) as usize;
            let sizes: Vec<i64> = (0..nd).map(|_| g.int(1, 4)).collect();
            let sub: Vec<i64> = sizes.iter().map(|&s| g.int(0, s)).collect();
            let st: Vec<i64> = sizes
                .iter()
                .zip(&sub)
                .map(|(&s, &u)| g.int(0, s - u))
                .collect();
            let o = if g.next(2) == 0 {
                Order::C
            } else {
                Order::Fortran
            };
            TypeDesc::subarray(&sizes, &sub, &st, o, &old)
        }
        9 => {
            let nd = g.int(1, 3) as usize;
            let gs: Vec<i64> = (0..nd).map(|_| g.int(1, 6)).collect();
            let ps: Vec<i64> = (0..nd).map(|_| g.int(1, 3)).collect();
            let mut ds = Vec::new();
            let mut da = Vec::new();
            let mut ps2 = ps;
            for psize in ps2.iter_mut() {
                match g.next(3) {
                    0 => {
                        ds.push(Distrib::None);
                        da.push(None);
                        *psize = 1;
                    }
                    1 => {
                        ds.push(Distrib::Block);
                        da.push(None);
                    }
                    _ => {
                        ds.push(Distrib::Cyclic);
                        da.push(if g.next(2) == 0 {
                            None
                        } else {
                            Some(g.int(1, 3))
                        });
                    }
                }
            }
            let size: i64 = ps2.iter().product();
            let o = if g.next(2) == 0 {
                Order::C
            } else {
                Order::Fortran
            };
            TypeDesc::darray(size, g.int(0, size - 1), &gs, &ds, &da, &ps2, o, &old)
        }
        10 => {
            let d: Vec<isize> = (0..n).map(|_| g.int(-50, 50) as isize).collect();
            TypeDesc::hindexed_block(g.int(0, 2), &d, &old)
        }
        _ => Ok(TypeDesc::dup(&old)),
    };
    a(t.unwrap())
}

#[test]
fn random_types_match_naive_expansion() {
    let mut g = Lcg(0x5eed);
    let mut kinds = Vec::new();
    let mut nonempty = 0;
    for iter in 0..3000 {
        let t = random_type(&mut g, 3);
        let want = naive(&t);
        if !kinds.contains(&t.kind()) {
            kinds.push(t.kind());
        }
        nonempty += (t.blocks().len() > 1) as usize;
        assert_eq!(
            expand(&t),
            want,
            "type map, iteration {iter}: {:?}",
            t.combiner()
        );
        assert_eq!(t.size(), want.iter().map(|x| x.1.size()).sum::<usize>());
        if let Some(lo) = want.iter().map(|x| x.0).min() {
            assert_eq!(t.true_lb(), lo, "iteration {iter}");
            assert_eq!(
                t.true_ub(),
                want.iter()
                    .map(|x| x.0 + x.1.size() as isize)
                    .max()
                    .unwrap()
            );
        }
        // blocks are maximal: no two neighbours could have been merged
        for w in t.blocks().windows(2) {
            assert!(!(w[0].basic == w[1].basic && w[0].disp + w[0].bytes() as isize == w[1].disp));
        }
        if t.size() > 0 && t.size() < 4096 && t.extent() >= 0 {
            check_roundtrip(&t, (iter % 3) + 1);
        }
    }
    assert_eq!(kinds.len(), 13, "{kinds:?}");
    assert!(nonempty > 500, "{nonempty}");
}

/// x87 80-bit value of an f64 (exact), in 16 bytes of storage.
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

#[test]
fn external32_values() {
    // one value of each interesting basic, as a struct
    let (int, long, ul, wc, db, ld, sh, b) = (
        p(Basic::Int),
        p(Basic::Long),
        p(Basic::UnsignedLong),
        p(Basic::WChar),
        p(Basic::Double),
        p(Basic::LongDouble),
        p(Basic::Short),
        p(Basic::CBool),
    );
    let t = TypeDesc::create_struct(
        &[1, 1, 1, 1, 1, 1, 1, 1],
        &[0, 8, 16, 24, 32, 48, 64, 66],
        &[&int, &long, &ul, &wc, &db, &ld, &sh, &b],
    )
    .unwrap();
    assert_eq!(t.external32_size(1), 4 + 4 + 4 + 2 + 8 + 16 + 2 + 1);
    let mut mem = [0u8; 80];
    mem[0..4].copy_from_slice(&0x01020304i32.to_ne_bytes());
    mem[8..16].copy_from_slice(&(-2i64).to_ne_bytes());
    mem[16..24].copy_from_slice(&0xfedcba98u64.to_ne_bytes());
    mem[24..28].copy_from_slice(&0x263au32.to_ne_bytes());
    mem[32..40].copy_from_slice(&1.0f64.to_ne_bytes());
    mem[48..64].copy_from_slice(&f80(-1.5));
    mem[64..66].copy_from_slice(&(-3i16).to_ne_bytes());
    mem[66] = 1;
    let mut out = vec![0u8; t.external32_size(1)];
    // SAFETY: mem holds one element of t.
    let n = unsafe { t.pack_external(1, mem.as_ptr(), &mut out) }.unwrap();
    assert_eq!(n, out.len());
    let mut want = vec![
        1, 2, 3, 4, 0xff, 0xff, 0xff, 0xfe, 0xfe, 0xdc, 0xba, 0x98, 0x26, 0x3a,
    ];
    want.extend([0x3f, 0xf0, 0, 0, 0, 0, 0, 0]);
    // binary128 -1.5: sign 1, exponent 0x3fff, fraction .1
    want.extend([0xbf, 0xff, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    want.extend([0xff, 0xfd, 1]);
    assert_eq!(out, want);
    let mut back = [0u8; 80];
    // SAFETY: back holds one element of t.
    let n = unsafe { t.unpack_external(1, &out, back.as_mut_ptr()) }.unwrap();
    assert_eq!(n, out.len());
    for (lo, hi) in [
        (0, 4),
        (8, 16),
        (16, 24),
        (24, 28),
        (32, 40),
        (48, 64),
        (64, 67),
    ] {
        assert_eq!(back[lo..hi], mem[lo..hi], "bytes {lo}..{hi}");
    }
    let mut short = vec![0u8; out.len() - 1];
    // SAFETY: as above.
    let e = unsafe { t.pack_external(1, mem.as_ptr(), &mut short) }.unwrap_err();
    assert_eq!(e.class, c::MPI_ERR_TRUNCATE);
}

#[test]
fn external32_long_double_roundtrip() {
    let ld = p(Basic::LongDouble);
    let t = TypeDesc::contiguous(6, &ld).unwrap();
    // 1 + 2^-60 needs the full x87 mantissa; a denormal; zero; -inf; a NaN; max
    let mut one_eps = f80(1.0);
    one_eps[0] = 8; // mantissa bit 3 = 2^-60
    let mut max = [0u8; 16];
    max[..8].copy_from_slice(&u64::MAX.to_le_bytes());
    max[8..10].copy_from_slice(&0x7ffeu16.to_le_bytes());
    let vals = [
        one_eps,
        f80(5e-324),
        f80(0.0),
        f80(f64::NEG_INFINITY),
        f80(f64::NAN),
        max,
    ];
    let mem: Vec<u8> = vals.concat();
    let mut ext = vec![0u8; t.external32_size(1)];
    // SAFETY: mem holds one element of t.
    unsafe { t.pack_external(1, mem.as_ptr(), &mut ext) }.unwrap();
    let mut back = vec![0u8; 96];
    // SAFETY: back holds one element of t.
    unsafe { t.unpack_external(1, &ext, back.as_mut_ptr()) }.unwrap();
    for i in 0..6 {
        assert_eq!(
            back[16 * i..16 * i + 10],
            mem[16 * i..16 * i + 10],
            "value {i}"
        );
    }
    // rounding on the way back: binary128 1 + 2^-64 + 2^-100 rounds up to 1 + 2^-63
    let v: u128 = (0x3fffu128 << 112) | (1u128 << (112 - 64)) | (1u128 << (112 - 100));
    let mut out = [0u8; 16];
    // SAFETY: out holds one long double.
    unsafe { ld.unpack_external(1, &v.to_be_bytes(), out.as_mut_ptr()) }.unwrap();
    assert_eq!(
        u64::from_le_bytes(out[..8].try_into().unwrap()),
        (1 << 63) | 1
    );
    // a tie (exactly 2^-64) stays even
    let v: u128 = (0x3fffu128 << 112) | (1u128 << (112 - 64));
    // SAFETY: as above.
    unsafe { ld.unpack_external(1, &v.to_be_bytes(), out.as_mut_ptr()) }.unwrap();
    assert_eq!(u64::from_le_bytes(out[..8].try_into().unwrap()), 1 << 63);
}
