//! Reductions: reduce to root, allreduce (sum/max/min/prod, bitwise, logical), vectors,
//! reduce_local, scan/exscan, reduce_scatter_block and a user-defined operation.
use mpi::collective::{self, SystemOperation, UserOperation};
use mpi::traits::*;

fn main() {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());

    let root = world.process_at_rank(0);
    if rank == 0 {
        let mut sum = 0i32;
        root.reduce_into_root(&rank, &mut sum, SystemOperation::sum());
        assert_eq!(sum, size * (size - 1) / 2);
    } else {
        root.reduce_into(&rank, SystemOperation::sum());
    }

    let mut max = -1i32;
    world.all_reduce_into(&rank, &mut max, SystemOperation::max());
    assert_eq!(max, size - 1);
    let mut min = -1i64;
    world.all_reduce_into(&(rank as i64 + 5), &mut min, SystemOperation::min());
    assert_eq!(min, 5);
    let mut prod = 0.0f64;
    world.all_reduce_into(&2.0f64, &mut prod, SystemOperation::product());
    assert_eq!(prod, 2f64.powi(size));
    let mut bor = 0u32;
    world.all_reduce_into(&(1u32 << rank), &mut bor, SystemOperation::bitwise_or());
    assert_eq!(bor, (1u32 << size) - 1);
    let mut land = false;
    world.all_reduce_into(&true, &mut land, SystemOperation::logical_and());
    assert!(land);

    let v: Vec<f32> = (0..1000).map(|i| (i + rank) as f32).collect();
    let mut out = vec![0f32; 1000];
    world.all_reduce_into(&v[..], &mut out[..], SystemOperation::sum());
    for (i, o) in out.iter().enumerate() {
        assert_eq!(*o, (i as i32 * size + size * (size - 1) / 2) as f32);
    }

    let mut c = 0b1100u16;
    collective::reduce_local_into(&0b1010u16, &mut c, SystemOperation::bitwise_xor());
    assert_eq!(c, 0b0110);

    let mut s = 0i32;
    world.scan_into(&(rank + 1), &mut s, SystemOperation::sum());
    assert_eq!(s, (rank + 1) * (rank + 2) / 2);
    let mut e = 0i32;
    world.exclusive_scan_into(&(rank + 1), &mut e, SystemOperation::sum());
    if rank > 0 {
        assert_eq!(e, rank * (rank + 1) / 2);
    }

    let f: Vec<i32> = (0..size).map(|i| i + 1).collect();
    let mut g = 0i32;
    world.reduce_scatter_block_into(&f[..], &mut g, SystemOperation::sum());
    assert_eq!(g, (rank + 1) * size);

    let mut h = 0i32;
    world.all_reduce_into(
        &(rank + 1),
        &mut h,
        &UserOperation::commutative(|x, y| {
            let x: &[i32] = x.downcast().unwrap();
            let y: &mut [i32] = y.downcast().unwrap();
            for (a, b) in x.iter().zip(y) {
                *b += a;
            }
        }),
    );
    assert_eq!(h, size * (size + 1) / 2);
    println!("rank {rank}: reduce OK");
}
