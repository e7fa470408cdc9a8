//! Broadcast from every root, scalars, vectors and a large buffer.
use mpi::traits::*;

fn main() {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    for root in 0..size {
        let proc_root = world.process_at_rank(root);
        let mut x: u64 = if rank == root { 1000 + root as u64 } else { 0 };
        proc_root.broadcast_into(&mut x);
        assert_eq!(x, 1000 + root as u64);

        let mut v = if rank == root { (0..17).map(|i| i as f64 * 0.5).collect() } else { vec![0.0f64; 17] };
        proc_root.broadcast_into(&mut v[..]);
        assert_eq!(v, (0..17).map(|i| i as f64 * 0.5).collect::<Vec<_>>());
    }
    let n = 3 << 20;
    let mut big = if rank == 0 { (0..n).map(|i| (i % 251) as u8).collect() } else { vec![0u8; n] };
    world.process_at_rank(0).broadcast_into(&mut big[..]);
    assert!(big.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8));
    println!("rank {rank}: bcast OK");
}
