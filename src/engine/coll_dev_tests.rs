//! The collective executor on device operands ([`coll::OnDevice`]): schedules of alltoall
//! (flat, hierarchical, through PXN forwarders), allgather, bcast, allreduce, reduce and
//! reduce_scatter_block (flat and hierarchical) run on buffers
//! the engine takes as device memory (the device copies are faked in host memory), between
//! ranks on different "nodes" over the TCP backend on loopback whose bulk transfers claim
//! device memory (as a backend registering it with the NIC: GPUDirect RDMA), and between
//! ranks of one node over the in-process transport with CUDA IPC faked. Every byte is
//! checked, and so is how it moved: the network's bulk transfers handed over as device
//! memory, no staging copy, the copy steps as device copies, the device steps counted.

use super::coll::{CollExec, DevBuf, DevSteps, OnDevice};
use super::tests::net_device::{ClaimDev, Handed};
use super::tests::slow_dev::{Counts, Slow};
use super::*;
use crate::coll::alltoall::pxn::{self, Via};
use crate::coll::hier::{self, Nodes};
use crate::coll::schedule::{Schedule, Step};
use crate::coll::{CollArgs, CollKind};
use crate::transport::inproc::InprocTransport;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use std::time::{Duration, Instant};

const BULK_MIN: usize = 64 << 10;
const N: usize = 4;

/// A schedule's Tmp as "device memory" (host memory the fake device copies).
struct VecBuf(Vec<u8>);

impl DevBuf for VecBuf {
    fn addr(&self) -> usize {
        self.0.as_ptr() as usize
    }
    fn bytes(&self) -> usize {
        self.0.len()
    }
}

/// Byte `k` of rank `r`'s input.
fn val(r: usize, k: usize) -> u8 {
    (r * 131 + k * 7 + k / 251) as u8
}

/// The collectives run, each with its schedule for a rank and its expected result.
#[derive(Clone, Copy, Debug)]
enum Case {
    /// Alltoall: the flat schedule the table selects, the hierarchical one over 2 nodes of 2,
    /// the PXN one over 2 nodes of 2 (block to the other node through the rank of the
    /// destination's local index).
    Alltoall,
    AlltoallHier,
    AlltoallPxn,
    Allgather,
    AllgatherHier,
    Bcast,
    /// Allreduce (wrapping byte sum), flat and hierarchical.
    Allreduce,
    AllreduceHier,
    /// Reduce to rank 1 (wrapping byte sum), flat and hierarchical.
    Reduce,
    ReduceHier,
    /// Reduce_scatter_block (wrapping byte sum), flat and hierarchical.
    ReduceScatterBlock,
    ReduceScatterBlockHier,
}

const CASES: &[Case] = &[
    Case::Alltoall,
    Case::AlltoallHier,
    Case::AlltoallPxn,
    Case::Allgather,
    Case::AllgatherHier,
    Case::Bcast,
    Case::Allreduce,
    Case::AllreduceHier,
    Case::Reduce,
    Case::ReduceHier,
    Case::ReduceScatterBlock,
    Case::ReduceScatterBlockHier,
];

/// The root of the rooted reductions.
const ROOT: usize = 1;

fn nodes() -> Nodes {
    Nodes::new(&[0, 0, 1, 1])
}

impl Case {
    fn kind(self) -> CollKind {
        match self {
            Case::Alltoall | Case::AlltoallHier | Case::AlltoallPxn => CollKind::Alltoall,
            Case::Allgather | Case::AllgatherHier => CollKind::Allgather,
            Case::Bcast => CollKind::Bcast,
            Case::Allreduce | Case::AllreduceHier => CollKind::Allreduce,
            Case::Reduce | Case::ReduceHier => CollKind::Reduce,
            Case::ReduceScatterBlock | Case::ReduceScatterBlockHier => CollKind::ReduceScatterBlock,
        }
    }

    /// (send bytes, receive bytes) of one rank for `b` bytes per block.
    fn lens(self, b: usize) -> (usize, usize) {
        match self.kind() {
            CollKind::Alltoall => (N * b, N * b),
            CollKind::Allgather => (b, N * b),
            CollKind::Bcast => (0, b),
            CollKind::ReduceScatterBlock => (N * b, b),
            _ => (b, b),
        }
    }

    fn schedule(self, me: usize, b: usize) -> Schedule {
        let mut a = CollArgs::new(me, N, b);
        a.nodes = 2;
        if self.kind() == CollKind::Reduce {
            a.root = ROOT;
        }
        let ns = nodes();
        match self {
            Case::AlltoallHier
            | Case::AllgatherHier
            | Case::AllreduceHier
            | Case::ReduceHier
            | Case::ReduceScatterBlockHier => hier::build(self.kind(), &a, &ns).unwrap(),
            Case::AlltoallPxn => {
                let via = Via::new(&ns, |s, d| (s / 2) * 2 + d % 2);
                assert!(via.forwards(), "some block goes through a forwarder");
                pxn::build(&a, &ns, &via)
            }
            _ => crate::coll::build(self.kind(), &a).unwrap().1,
        }
    }

    /// Rank `me`'s input (its send buffer, or bcast's buffer at the root).
    fn input(self, me: usize, b: usize) -> (Vec<u8>, Vec<u8>) {
        let (s, r) = self.lens(b);
        let send = (0..s).map(|k| val(me, k)).collect();
        let recv = match (self.kind(), me) {
            (CollKind::Bcast, 0) => (0..r).map(|k| val(0, k)).collect(),
            _ => vec![0xEE; r],
        };
        (send, recv)
    }

    fn expected(self, me: usize, b: usize) -> Vec<u8> {
        match self.kind() {
            CollKind::Alltoall => (0..N * b).map(|k| val(k / b, me * b + k % b)).collect(),
            CollKind::Allgather => (0..N * b).map(|k| val(k / b, k % b)).collect(),
            CollKind::Bcast => (0..b).map(|k| val(0, k)).collect(),
            // Only the root receives the result: the other ranks' buffers stay untouched.
            CollKind::Reduce if me != ROOT => vec![0xEE; b],
            CollKind::ReduceScatterBlock => (0..b)
                .map(|k| (0..N).fold(0u8, |acc, r| acc.wrapping_add(val(r, me * b + k))))
                .collect(),
            _ => (0..b)
                .map(|k| (0..N).fold(0u8, |acc, r| acc.wrapping_add(val(r, k))))
                .collect(),
        }
    }
}

/// Wrapping byte sum: `inout += input`.
fn add(input: &[u8], inout: &mut [u8]) {
    for (x, y) in input.iter().zip(inout.iter_mut()) {
        *y = y.wrapping_add(*x);
    }
}

/// Run `case` on rank `me` of `e`, every buffer device memory when `dev`; returns the receive
/// buffer and the schedule.
fn run(
    e: &mut Engine,
    me: usize,
    case: Case,
    b: usize,
    dev: bool,
    tag: i32,
) -> (Vec<u8>, Schedule) {
    let sched = case.schedule(me, b);
    let (send, mut recv) = case.input(me, b);
    let peers: Arc<[usize]> = Arc::from((0..N).collect::<Vec<_>>());
    let host_reduce: coll::ReduceFn = Box::new(|i: &[u8], o: &mut [u8]| {
        add(i, o);
        Ok(())
    });
    // SAFETY: the buffers outlive the executor, which finishes below.
    let mut x = unsafe {
        CollExec::new(
            sched.clone(),
            send.as_ptr(),
            recv.as_mut_ptr(),
            3,
            tag,
            peers,
            me,
            host_reduce,
        )
    };
    if dev {
        let reduce: coll::DevReduceFn = Box::new(|i, o, len| {
            // SAFETY: the fake device's memory is host memory; the executor passes regions
            // of `len` bytes that do not overlap.
            unsafe {
                add(
                    std::slice::from_raw_parts(i as *const u8, len),
                    std::slice::from_raw_parts_mut(o as *mut u8, len),
                )
            };
            Ok(())
        });
        let tmp = (sched.tmp_len > 0)
            .then(|| Box::new(VecBuf(vec![0u8; sched.tmp_len])) as Box<dyn DevBuf>);
        // SAFETY: every buffer counts as device memory for the fake device copies.
        x = unsafe {
            x.on_device(OnDevice {
                send: true,
                recv: true,
                tmp,
                reduce: Some(reduce),
                commutative: true,
            })
        }
        .unwrap();
    }
    let end = Instant::now() + Duration::from_secs(60);
    while !x.advance(e).unwrap() {
        assert!(Instant::now() < end, "rank {me}: {case:?} never completed");
    }
    drop(x);
    (recv, sched)
}

/// The schedule's sends and receives (`len` at least `min`), and its non-empty copy steps.
fn steps(s: &Schedule, min: usize) -> (u64, u64, u64) {
    let (mut tx, mut rx, mut cp) = (0, 0, 0);
    for st in &s.steps {
        match st {
            Step::Send { src, .. } if src.len >= min => tx += 1,
            Step::Recv { dst, .. } if dst.len >= min => rx += 1,
            Step::Copy { src, .. } if src.len > 0 => cp += 1,
            _ => {}
        }
    }
    (tx, rx, cp)
}

/// `N` ranks on `N` "nodes" over loopback TCP, rank `r`'s backend taking device memory in bulk
/// transfers where `claim[r]`; `body(engine, rank, handed, device counts)` on each.
fn ranks(claim: [bool; N], body: fn(&mut Engine, usize, &Handed, &Counts)) {
    let all = crate::transport::net::lazy_tests::loopback_frames(
        N,
        2,
        Duration::from_secs(5),
        b"engine-coll-device",
    );
    let joins: Vec<_> = all
        .into_iter()
        .enumerate()
        .map(|(me, mut frames)| {
            frames.set_bulk_min(Some(BULK_MIN));
            std::thread::spawn(move || {
                let handed = Handed::default();
                let tp = ClaimDev {
                    inner: frames,
                    claim: claim[me],
                    refuse: usize::MAX,
                    handed: handed.clone(),
                };
                let mut e = Engine::with_config(
                    Box::new(tp),
                    me,
                    N,
                    EngineConfig {
                        eager_limit: 4096,
                        cma_min: None,
                        push_min: usize::MAX,
                        share: false,
                    },
                );
                let dev = Slow::new(Duration::ZERO);
                let counts = dev.counts.clone();
                e.set_device_copies(Box::new(dev));
                body(&mut e, me, &handed, &counts);
                assert_eq!(e.live_requests(), 0, "rank {me}: no request left behind");
            })
        })
        .collect();
    for j in joins {
        j.join().unwrap();
    }
}

/// Copies of the fake device: whole (staging, eager data), pipeline chunks, staged sends and
/// device-to-device copies.
fn copies(c: &Counts) -> [usize; 4] {
    [
        c.whole.load(SeqCst),
        c.dtoh.load(SeqCst) + c.htod.load(SeqCst),
        c.staged.load(SeqCst),
        c.dtod.load(SeqCst),
    ]
}

/// Every collective between ranks on different nodes whose backends all take device memory,
/// blocks of 256 KiB (every message at least the bulk threshold): every byte lands, every
/// network message is one bulk transfer from and into device memory (GPUDirect RDMA), nothing
/// is staged or pipelined through host memory, the copy steps are device-to-device copies and
/// the device steps are counted.
#[test]
fn device_collectives_between_nodes_move_by_gpudirect_rdma() {
    ranks([true; N], |e, me, handed, counts| {
        let b = 256 << 10;
        for (i, &case) in CASES.iter().enumerate() {
            handed.lock().unwrap().clear();
            let before = (copies(counts), e.coll_device_steps());
            let (got, sched) = run(e, me, case, b, true, -100 - i as i32);
            assert!(
                got == case.expected(me, b),
                "rank {me}: {case:?}: every byte"
            );
            let (tx, rx, cp) = steps(&sched, BULK_MIN);
            let (all_tx, all_rx, _) = steps(&sched, 0);
            assert_eq!(
                (tx, rx),
                (all_tx, all_rx),
                "{case:?}: every message is bulk-sized"
            );
            let h = handed.lock().unwrap().clone();
            let sent = h.iter().filter(|t| t.0).count() as u64;
            let recvd = h.iter().filter(|t| !t.0).count() as u64;
            assert_eq!(
                (sent, recvd),
                (tx, rx),
                "rank {me}: {case:?}: one bulk transfer per network message"
            );
            assert!(
                h.iter().all(|t| t.1),
                "rank {me}: {case:?}: every bulk transfer from or into device memory: {h:?}"
            );
            let c = copies(counts);
            assert_eq!(
                [c[0] - before.0[0], c[1] - before.0[1], c[2] - before.0[2]],
                [0, 0, 0],
                "rank {me}: {case:?}: nothing staged in host memory (whole, chunks, staged)"
            );
            assert_eq!(
                (c[3] - before.0[3]) as u64,
                cp,
                "rank {me}: {case:?}: each copy step one device copy"
            );
            let d = e.coll_device_steps();
            let was: DevSteps = before.1;
            assert_eq!(
                (
                    d.sends - was.sends,
                    d.recvs - was.recvs,
                    d.copies - was.copies
                ),
                (all_tx, all_rx, cp),
                "rank {me}: {case:?}: device steps counted"
            );
            let reduces = sched
                .steps
                .iter()
                .filter(|s| matches!(s, Step::Reduce { .. } | Step::ReduceRev { .. }))
                .count() as u64;
            assert_eq!(
                d.reduces - was.reduces,
                reduces,
                "rank {me}: {case:?}: every reduction on the device"
            );
            if case.kind() == CollKind::Allreduce && me == 0 {
                assert!(reduces > 0, "{case:?}: rank 0 reduces");
            }
        }
    });
}

/// Small blocks (below the bulk threshold) and a rank whose backend cannot take device memory
/// (rank 3): every byte still lands. Rank 3 hands over no device memory (its device messages
/// go through host memory, per message), and its peers take the bulk transfers with it into
/// and from their device buffers only where their own side can.
#[test]
fn device_collectives_where_a_backend_cannot_take_device_memory() {
    ranks([true, true, true, false], |e, me, handed, counts| {
        for (i, &case) in CASES.iter().enumerate() {
            for (j, b) in [1000usize, 96 << 10].into_iter().enumerate() {
                let (got, _) = run(e, me, case, b, true, -200 - (2 * i + j) as i32);
                assert!(
                    got == case.expected(me, b),
                    "rank {me}: {case:?} {b}: every byte"
                );
            }
        }
        let h = handed.lock().unwrap().clone();
        if me == 3 {
            assert!(h.iter().all(|t| !t.1), "rank 3 hands over no device memory");
            let c = copies(counts);
            assert!(
                c[1] > 0,
                "rank 3 pipelines its device messages through host memory"
            );
        } else {
            assert!(
                h.iter().any(|t| t.1),
                "rank {me}: GPUDirect RDMA where it can"
            );
        }
    });
}

/// The same collectives on host buffers (no `on_device`) run as before: no device step, no
/// device copy.
#[test]
fn host_collectives_between_nodes_take_no_device_step() {
    ranks([true; N], |e, me, handed, counts| {
        for (i, &case) in CASES.iter().enumerate() {
            let b = 96 << 10;
            let (got, _) = run(e, me, case, b, false, -300 - i as i32);
            assert!(
                got == case.expected(me, b),
                "rank {me}: {case:?}: every byte"
            );
        }
        assert_eq!(e.coll_device_steps(), DevSteps::default());
        assert_eq!(copies(counts), [0; 4]);
        assert!(handed.lock().unwrap().iter().all(|t| !t.1));
    });
}

/// Ranks of one node (the in-process transport) with device buffers CUDA IPC can share (the
/// fake device's exports): the executor's sends of device regions are exported, and each
/// receiver copies GPU to GPU from the sender's buffer (the PXN schedule's forward hop
/// included); every byte lands.
#[test]
fn device_collectives_inside_a_node_copy_gpu_to_gpu() {
    let (mut es, fake) = super::tests::dev_group(N, 64, 4096, usize::MAX);
    let b = 8192;
    for (i, &case) in [
        Case::Alltoall,
        Case::AlltoallPxn,
        Case::Allgather,
        Case::Bcast,
    ]
    .iter()
    .enumerate()
    {
        let mut bufs: Vec<(Vec<u8>, Vec<u8>, Vec<u8>)> = (0..N)
            .map(|me| {
                let (s, r) = case.input(me, b);
                (s, r, vec![0u8; case.schedule(me, b).tmp_len])
            })
            .collect();
        {
            let mut book = fake.0.lock().unwrap();
            book.device = bufs
                .iter()
                .flat_map(|(s, r, t)| [s, r, t])
                .map(|v| (v.as_ptr() as usize, v.len()))
                .collect();
            book.reads = 0;
        }
        let peers: Arc<[usize]> = Arc::from((0..N).collect::<Vec<_>>());
        let mut xs: Vec<CollExec> = bufs
            .iter_mut()
            .enumerate()
            .map(|(me, (s, r, t))| {
                let tmp = (!t.is_empty()).then(|| {
                    Box::new(Borrowed(t.as_mut_ptr() as usize, t.len())) as Box<dyn DevBuf>
                });
                // SAFETY: the buffers outlive the executors, which finish below.
                unsafe {
                    CollExec::new(
                        case.schedule(me, b),
                        s.as_ptr(),
                        r.as_mut_ptr(),
                        3,
                        -400 - i as i32,
                        peers.clone(),
                        me,
                        Box::new(|_: &[u8], _: &mut [u8]| Ok(())),
                    )
                    .on_device(OnDevice {
                        send: true,
                        recv: true,
                        tmp,
                        reduce: None,
                        commutative: true,
                    })
                    .unwrap()
                }
            })
            .collect();
        let end = Instant::now() + Duration::from_secs(30);
        let mut done = [false; N];
        while !done.iter().all(|&d| d) {
            for (me, x) in xs.iter_mut().enumerate() {
                if !done[me] {
                    done[me] = x.advance(&mut es[me]).unwrap();
                }
            }
            assert!(Instant::now() < end, "{case:?} never completed");
        }
        drop(xs);
        for (me, (_, r, _)) in bufs.iter().enumerate() {
            assert!(
                *r == case.expected(me, b),
                "rank {me}: {case:?}: every byte"
            );
        }
        let reads = fake.0.lock().unwrap().reads;
        let msgs: u64 = (0..N).map(|me| steps(&case.schedule(me, b), 1).0).sum();
        assert_eq!(
            reads as u64, msgs,
            "{case:?}: every message one GPU-to-GPU copy"
        );
    }
    for e in &es {
        assert_eq!(e.live_requests(), 0);
    }
}

/// Device memory the test owns (the in-process ranks' Tmp, kept in the test's buffers).
struct Borrowed(usize, usize);

impl DevBuf for Borrowed {
    fn addr(&self) -> usize {
        self.0
    }
    fn bytes(&self) -> usize {
        self.1
    }
}

/// Reduce steps between a device region and a host one (no device reduction given) go
/// through host memory with the host reduction, the result landing where the schedule
/// says; a device-to-device copy step is one device copy.
#[test]
fn a_reduction_between_device_and_host_regions_goes_through_host_memory() {
    use crate::coll::schedule::{BufId, Region};
    let mut es: Vec<Engine> = InprocTransport::group(1, 4, 1000, false)
        .into_iter()
        .map(|t| Engine::new(Box::new(t), 0, 1))
        .collect();
    let dev = Slow::new(Duration::ZERO);
    let counts = dev.counts.clone();
    es[0].set_device_copies(Box::new(dev));
    let send: Vec<u8> = (0..64).map(|k| val(1, k)).collect();
    let mut recv: Vec<u8> = (0..64).map(|k| val(2, k)).collect();
    let sched = Schedule {
        steps: vec![
            Step::Copy {
                src: Region::new(BufId::Send, 0, 64),
                dst: Region::new(BufId::Tmp, 0, 64),
            },
            // Device into host, then host into device.
            Step::Reduce {
                src: Region::new(BufId::Tmp, 0, 64),
                dst: Region::new(BufId::Recv, 0, 64),
            },
            Step::Reduce {
                src: Region::new(BufId::Recv, 0, 64),
                dst: Region::new(BufId::Tmp, 0, 64),
            },
            Step::Copy {
                src: Region::new(BufId::Tmp, 0, 64),
                dst: Region::new(BufId::Recv, 0, 64),
            },
        ],
        tmp_len: 64,
    };
    // SAFETY: the buffers outlive the executor.
    let mut x = unsafe {
        CollExec::new(
            sched,
            send.as_ptr(),
            recv.as_mut_ptr(),
            3,
            -500,
            Arc::from(vec![0usize]),
            0,
            Box::new(|i: &[u8], o: &mut [u8]| {
                add(i, o);
                Ok(())
            }),
        )
        .on_device(OnDevice {
            send: true,
            recv: false,
            tmp: Some(Box::new(VecBuf(vec![0u8; 64]))),
            reduce: None,
            commutative: true,
        })
        .unwrap()
    };
    assert!(x.advance(&mut es[0]).unwrap());
    // recv = s + r, then tmp = s + (s + r), copied to recv.
    let want: Vec<u8> = (0..64)
        .map(|k| val(1, k).wrapping_add(val(1, k)).wrapping_add(val(2, k)))
        .collect();
    assert_eq!(recv, want);
    assert_eq!(counts.dtod.load(SeqCst), 1, "Send to Tmp: one device copy");
    let steps = es[0].coll_device_steps();
    assert_eq!((steps.copies, steps.reduces), (2, 2));
}
