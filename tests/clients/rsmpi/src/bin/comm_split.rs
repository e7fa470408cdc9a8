//! Communicator management: dup, split by color/key, split by shared memory, groups,
//! comm compare, create from group, comm names.
use mpi::topology::{Color, CommunicatorRelation, GroupRelation};
use mpi::traits::*;
use std::hash::{Hash, Hasher};

fn main() {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());

    let dup = world.duplicate();
    assert_eq!(dup.size(), size);
    assert_eq!(dup.rank(), rank);
    assert_eq!(world.compare(&dup), CommunicatorRelation::Congruent);
    assert_eq!(world.compare(&world), CommunicatorRelation::Identical);

    // Even/odd split, reversed key order.
    let half = world
        .split_by_color_with_key(Color::with_value(rank % 2), size - rank)
        .expect("split returned COMM_NULL");
    let half_size = (size + 1 - rank % 2) / 2;
    assert_eq!(half.size(), half_size);
    assert_eq!(half.rank(), half_size - 1 - rank / 2);
    let mut sum = 0;
    half.all_reduce_into(&rank, &mut sum, mpi::collective::SystemOperation::sum());
    let expect: i32 = (0..size).filter(|r| r % 2 == rank % 2).sum();
    assert_eq!(sum, expect);

    // Undefined color -> no communicator.
    let none = world.split_by_color(if rank == 0 { Color::undefined() } else { Color::with_value(1) });
    assert_eq!(none.is_none(), rank == 0);

    // Shared-memory split: the ranks of this rank's node (GPUMPI_NODE_ID where nodes are
    // emulated on one host, else the processor name), in world rank order.
    let node = std::env::var("GPUMPI_NODE_ID")
        .unwrap_or_else(|_| mpi::environment::processor_name().expect("processor name"));
    let mut h = std::collections::hash_map::DefaultHasher::new();
    node.hash(&mut h);
    let mine_h = h.finish();
    let mut nodes = vec![0u64; size as usize];
    world.all_gather_into(&mine_h, &mut nodes[..]);
    let same: Vec<i32> = (0..size).filter(|&r| nodes[r as usize] == mine_h).collect();
    let shm = world.split_shared(rank);
    assert_eq!(shm.size(), same.len() as i32);
    assert_eq!(Some(shm.rank()), same.iter().position(|&r| r == rank).map(|p| p as i32));

    // Groups.
    let g = world.group();
    assert_eq!(g.size(), size);
    let evens: Vec<i32> = (0..size).filter(|r| r % 2 == 0).collect();
    let eg = g.include(&evens[..]);
    assert_eq!(eg.size(), evens.len() as i32);
    assert_eq!(eg.rank().is_some(), rank % 2 == 0);
    let og = g.difference(&eg);
    assert_eq!(og.size(), size - eg.size());
    assert_eq!(g.compare(&world.group()), GroupRelation::Identical);
    let from_group = world.split_by_subgroup_collective(&eg);
    assert_eq!(from_group.is_some(), rank % 2 == 0);
    if let Some(c) = from_group {
        assert_eq!(c.size(), eg.size());
        c.barrier();
    }

    // Names. (rsmpi 0.8.2's `get_name` reads a dropped temporary in release builds, so the
    // name is read back through the raw binding instead.)
    dup.set_name("gpumpi-dup");
    assert_eq!(raw_name(&dup), "gpumpi-dup");
    assert_eq!(raw_name(&world), "MPI_COMM_WORLD");
    world.barrier();
    println!("rank {rank}: comm OK");
}

fn raw_name<C: Communicator>(c: &C) -> String {
    let mut buf = vec![0 as std::os::raw::c_char; mpi::ffi::MPI_MAX_OBJECT_NAME as usize + 1];
    let mut len = 0;
    // SAFETY: buf holds MPI_MAX_OBJECT_NAME chars plus a spare NUL; MPI writes at most that.
    let rc = unsafe { mpi::ffi::MPI_Comm_get_name(c.as_raw(), buf.as_mut_ptr(), &mut len) };
    assert_eq!(rc, 0, "MPI_Comm_get_name failed");
    let bytes: Vec<u8> = buf[..len as usize].iter().map(|&b| b as u8).collect();
    String::from_utf8(bytes).expect("name is not UTF-8")
}
