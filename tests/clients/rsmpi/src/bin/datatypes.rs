//! Derived datatypes: contiguous, vector, indexed, struct (derive-free), pack/unpack.
use mpi::datatype::{MutView, UserDatatype, View};
use mpi::traits::*;
use mpi::Count;

fn main() {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    let next = world.process_at_rank((rank + 1) % size);
    let prev = world.process_at_rank((rank + size - 1) % size);

    // Vector: every other element of a 16-element array, sent as 8 contiguous values.
    let t = UserDatatype::vector(8, 1, 2, &i32::equivalent_datatype());
    let src: Vec<i32> = (0..16).map(|i| i + 100 * rank).collect();
    let mut dst = vec![0i32; 8];
    let v = unsafe { View::with_count_and_datatype(&src[..], 1, &t) };
    mpi::point_to_point::send_receive_into(&v, &next, &mut dst[..], &prev);
    let p = (rank + size - 1) % size;
    assert_eq!(dst, (0..8).map(|i| 2 * i + 100 * p).collect::<Vec<_>>());

    // Contiguous of doubles received into a strided view.
    let c = UserDatatype::contiguous(4, &f64::equivalent_datatype());
    let s = [1.0f64, 2.0, 3.0, 4.0];
    let mut r = [0f64; 8];
    let sv = unsafe { View::with_count_and_datatype(&s[..], 1, &c) };
    let rt = UserDatatype::vector(4, 1, 2, &f64::equivalent_datatype());
    {
        let mut rv = unsafe { MutView::with_count_and_datatype(&mut r[..], 1, &rt) };
        mpi::point_to_point::send_receive_into(&sv, &next, &mut rv, &prev);
    }
    assert_eq!(r, [1.0, 0.0, 2.0, 0.0, 3.0, 0.0, 4.0, 0.0]);

    // Indexed.
    let blocks: [Count; 2] = [2, 3];
    let displs: [Count; 2] = [0, 5];
    let it = UserDatatype::indexed(&blocks, &displs, &u8::equivalent_datatype());
    let bytes: Vec<u8> = (0..8).collect();
    let mut got = [0u8; 5];
    let bv = unsafe { View::with_count_and_datatype(&bytes[..], 1, &it) };
    mpi::point_to_point::send_receive_into(&bv, &next, &mut got[..], &prev);
    assert_eq!(got, [0, 1, 5, 6, 7]);

    // Struct of (i32, f64) described by hand (MPI_Type_create_struct).
    let mine = [Pair { a: rank, b: rank as f64 / 2.0 }; 3];
    let mut theirs = [Pair::default(); 3];
    mpi::point_to_point::send_receive_into(&mine[..], &next, &mut theirs[..], &prev);
    assert!(theirs.iter().all(|x| *x == Pair { a: p, b: p as f64 / 2.0 }));

    // Pack / unpack.
    let data = [rank as i64, 42, -7];
    let packed = world.pack(&data[..]);
    let mut back = [0i64; 3];
    unsafe { world.unpack_into(&packed, &mut back[..], 0) };
    assert_eq!(back, data);
    println!("rank {rank}: datatypes OK");
}

#[repr(C)]
#[derive(Clone, Copy, Default, PartialEq, Debug)]
struct Pair {
    a: i32,
    b: f64,
}

// SAFETY: the datatype describes exactly the two fields of the #[repr(C)] struct.
unsafe impl Equivalence for Pair {
    type Out = UserDatatype;
    fn equivalent_datatype() -> UserDatatype {
        UserDatatype::structured(
            &[1, 1],
            &[0, 8],
            &[i32::equivalent_datatype(), f64::equivalent_datatype()],
        )
    }
}
