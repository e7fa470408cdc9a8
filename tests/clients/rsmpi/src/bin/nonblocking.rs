//! Nonblocking point-to-point and collectives: isend/irecv with wait/test/waitall,
//! self-messages, ibarrier, ibcast, iallreduce, igather.
use mpi::collective::SystemOperation;
use mpi::request::{self, WaitGuard};
use mpi::traits::*;

fn main() {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    let next = (rank + 1) % size;
    let prev = (rank + size - 1) % size;

    // Ring exchange with immediate send/receive and explicit wait/test.
    let out: Vec<i32> = (0..64).map(|i| i * (rank + 1)).collect();
    let mut inp = vec![0i32; 64];
    request::scope(|scope| {
        let rreq = world.process_at_rank(prev).immediate_receive_into(scope, &mut inp[..]);
        let mut sreq = world.process_at_rank(next).immediate_send(scope, &out[..]);
        let status = rreq.wait();
        assert_eq!(status.source_rank(), prev);
        loop {
            match sreq.test() {
                Ok(_) => break,
                Err(r) => sreq = r,
            }
        }
    });
    assert_eq!(inp, (0..64).map(|i| i * (prev + 1)).collect::<Vec<_>>());

    // Several outstanding requests completed together (MPI_Waitall).
    let vals: Vec<u64> = (0..4).map(|k| (rank as u64) << k).collect();
    let mut recv = vec![0u64; 4];
    request::multiple_scope(8, |scope, coll| {
        for (k, r) in recv.iter_mut().enumerate() {
            coll.add(world.process_at_rank(prev).immediate_receive_into_with_tag(scope, r, k as i32));
        }
        for (k, v) in vals.iter().enumerate() {
            coll.add(world.process_at_rank(next).immediate_send_with_tag(scope, v, k as i32));
        }
        let mut statuses = Vec::new();
        coll.wait_all(&mut statuses);
        assert_eq!(statuses.len(), 8);
    });
    assert_eq!(recv, (0..4).map(|k| (prev as u64) << k).collect::<Vec<_>>());

    // Message to self.
    let x = 2.5f32;
    let mut y = 0.0f32;
    request::scope(|scope| {
        let _r = WaitGuard::from(world.this_process().immediate_receive_into(scope, &mut y));
        let _s = WaitGuard::from(world.this_process().immediate_send(scope, &x));
    });
    assert_eq!(x, y);

    // Nonblocking collectives.
    world.immediate_barrier().wait();
    let mut b = if rank == 0 { [7u8, 8, 9] } else { [0u8; 3] };
    request::scope(|scope| {
        world.process_at_rank(0).immediate_broadcast_into(scope, &mut b[..]).wait();
    });
    assert_eq!(b, [7, 8, 9]);
    let mut sum = 0i32;
    request::scope(|scope| {
        world.immediate_all_reduce_into(scope, &rank, &mut sum, SystemOperation::sum()).wait();
    });
    assert_eq!(sum, size * (size - 1) / 2);
    let mut all = vec![0i32; size as usize];
    let one_based = rank + 1;
    request::scope(|scope| {
        world.immediate_all_gather_into(scope, &one_based, &mut all[..]).wait();
    });
    assert_eq!(all, (1..=size).collect::<Vec<_>>());
    println!("rank {rank}: nonblocking OK");
}
