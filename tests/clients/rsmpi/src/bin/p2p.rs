//! Point-to-point: blocking send/recv ring, any-source receive, probe, sendrecv(_replace),
//! synchronous send, vector messages and PROC_NULL.
use mpi::point_to_point as p2p;
use mpi::topology::Rank;
use mpi::traits::*;

fn main() {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    let next = (rank + 1) % size;
    let prev = (rank + size - 1) % size;

    // Ring with sendrecv.
    let (got, status): (Rank, _) =
        p2p::send_receive(&rank, &world.process_at_rank(next), &world.process_at_rank(prev));
    assert_eq!(got, prev);
    assert_eq!(status.source_rank(), prev);

    // sendrecv_replace the other way.
    let mut x = rank * 10;
    p2p::send_receive_replace_into(&mut x, &world.process_at_rank(prev), &world.process_at_rank(next));
    assert_eq!(x, next * 10);

    // Many-to-one with any source + tags, checked through the status.
    if rank == 0 {
        for _ in 1..size {
            let (msg, status) = world.any_process().receive_vec::<i64>();
            let src = status.source_rank();
            assert_eq!(status.tag(), 100 + src);
            assert_eq!(msg, (0..src as i64 + 3).map(|v| v * src as i64).collect::<Vec<_>>());
        }
    } else {
        let msg: Vec<i64> = (0..rank as i64 + 3).map(|v| v * rank as i64).collect();
        world.process_at_rank(0).send_with_tag(&msg[..], 100 + rank);
    }

    world.barrier();

    // Synchronous send + matched probe from a specific source.
    if size > 1 {
        if rank == 1 {
            world.process_at_rank(0).synchronous_send(&[1.5f64, 2.5, 3.5][..]);
        } else if rank == 0 {
            let (msg, status) = world.process_at_rank(1).matched_probe();
            assert_eq!(status.count(f64::equivalent_datatype()), 3);
            let mut v = [0f64; 3];
            let st = msg.matched_receive_into(&mut v[..]);
            assert_eq!(st.source_rank(), 1);
            assert_eq!(v, [1.5, 2.5, 3.5]);
        }
    }

    // A larger message (crosses eager/rendezvous thresholds in most libraries).
    let n = 1 << 20;
    let big: Vec<u8> = (0..n).map(|i| (i as u32).wrapping_mul(rank as u32 + 7) as u8).collect();
    let mut recv = vec![0u8; n];
    p2p::send_receive_into(&big[..], &world.process_at_rank(next), &mut recv[..], &world.process_at_rank(prev));
    assert!(recv.iter().enumerate().all(|(i, &b)| b == (i as u32).wrapping_mul(prev as u32 + 7) as u8));

    world.barrier();
    println!("rank {rank}: p2p OK");
}
