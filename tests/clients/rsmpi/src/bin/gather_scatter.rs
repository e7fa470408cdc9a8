//! Gather/scatter family: gather, allgather, scatter, alltoall, the varcount (v) variants.
use mpi::datatype::{Partition, PartitionMut};
use mpi::traits::*;
use mpi::Count;

fn main() {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    let n = size as usize;
    let root = world.process_at_rank(0);

    let mine = [rank as u64 * 3, rank as u64 * 3 + 1];
    if rank == 0 {
        let mut all = vec![0u64; 2 * n];
        root.gather_into_root(&mine[..], &mut all[..]);
        assert_eq!(all, (0..2 * n as u64).map(|i| (i / 2) * 3 + i % 2).collect::<Vec<_>>());
    } else {
        root.gather_into(&mine[..]);
    }

    let mut all = vec![0i32; n];
    world.all_gather_into(&(rank * rank), &mut all[..]);
    assert_eq!(all, (0..size).map(|r| r * r).collect::<Vec<_>>());

    let mut got = 0.0f64;
    if rank == 0 {
        let src: Vec<f64> = (0..size).map(|r| r as f64 + 0.25).collect();
        root.scatter_into_root(&src[..], &mut got);
    } else {
        root.scatter_into(&mut got);
    }
    assert_eq!(got, rank as f64 + 0.25);

    let send: Vec<i32> = (0..size).map(|d| rank * 100 + d).collect();
    let mut recv = vec![0i32; n];
    world.all_to_all_into(&send[..], &mut recv[..]);
    assert_eq!(recv, (0..size).map(|s| s * 100 + rank).collect::<Vec<_>>());

    // Varcount: rank r contributes r+1 elements.
    let counts: Vec<Count> = (0..size).map(|r| r + 1).collect();
    let displs: Vec<Count> = counts.iter().scan(0, |a, &c| { let d = *a; *a += c; Some(d) }).collect();
    let total: usize = counts.iter().sum::<Count>() as usize;
    let contrib = vec![rank as i16; rank as usize + 1];
    let mut buf = vec![-1i16; total];
    {
        let mut part = PartitionMut::new(&mut buf[..], counts.clone(), &displs[..]);
        world.all_gather_varcount_into(&contrib[..], &mut part);
    }
    let expect: Vec<i16> = (0..size).flat_map(|r| std::iter::repeat(r as i16).take(r as usize + 1)).collect();
    assert_eq!(buf, expect);

    if rank == 0 {
        let mut buf = vec![-1i16; total];
        let mut part = PartitionMut::new(&mut buf[..], counts.clone(), &displs[..]);
        root.gather_varcount_into_root(&contrib[..], &mut part);
        assert_eq!(buf, expect);
    } else {
        root.gather_varcount_into(&contrib[..]);
    }

    let mut part_recv = vec![0i16; rank as usize + 1];
    if rank == 0 {
        let part = Partition::new(&expect[..], counts.clone(), &displs[..]);
        root.scatter_varcount_into_root(&part, &mut part_recv[..]);
    } else {
        root.scatter_varcount_into(&mut part_recv[..]);
    }
    assert!(part_recv.iter().all(|&v| v == rank as i16));
    println!("rank {rank}: gather/scatter OK");
}
