//! A real alltoall between nodes, counted where it leaves for the network: 2 nodes x 4 ranks
//! on 2 rails (local rank i on rail i mod 2), ranks as threads of this process, each an engine
//! over shared memory in process and network frames over TCP on loopback, PXN routing as
//! `MPI_Init` sets it up (`topo::pxn::routes`). Each schedule's executor runs twice (the first
//! call opens the connections); the network operations and cross-rail operations of the second
//! call are read from every rank's frame counters.

use super::*;
use crate::coll::alltoall::{pairwise, pxn, rails};
use crate::coll::hier::{self, Nodes};
use crate::coll::{CollArgs, CollKind, Schedule};
use crate::topo::pxn::{forwarded_to, proxy, routes, Layout};
use crate::transport::inproc::InprocTransport;
use crate::transport::net::frames::Counters;
use crate::transport::route::tests::Counted;
use crate::transport::route::Routed;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Network operations and cross-rail operations of the second of two alltoalls (`len` bytes
/// per pair) whose schedule for rank `r` is `build(r)`, over `l` with PXN on or off; checks
/// every rank's result.
fn second_call_ops(
    l: &Layout,
    pxn_on: bool,
    len: usize,
    build: &(dyn Fn(usize) -> Schedule + Sync),
) -> (u64, u64) {
    let n = l.node_of.len();
    let mut shm = InprocTransport::group(n, 64, 1 << 16, false);
    let mut net = crate::transport::net::lazy_tests::loopback_frames(
        n,
        1,
        Duration::from_secs(10),
        b"pxn-alltoall",
    );
    let counts: Vec<Arc<Mutex<Counters>>> = (0..n).map(|_| Arc::default()).collect();
    let mut engines: Vec<Engine> = (0..n)
        .rev()
        .map(|i| {
            let (a, mut b) = (shm.pop().unwrap(), net.pop().unwrap());
            b.set_rails(l.rail_of[i], l.rail_of.clone());
            let b = Counted(b, counts[i].clone());
            let mut x = Routed::with_routes(Box::new(a), Box::new(b), i, &routes(l, i, pxn_on));
            x.set_forwarded_to(&forwarded_to(l, i, pxn_on));
            Engine::with_config(
                Box::new(x),
                i,
                n,
                EngineConfig {
                    eager_limit: 1 << 20,
                    cma_min: None,
                    push_min: usize::MAX,
                    share: false,
                },
            )
        })
        .collect();
    engines.reverse();
    let block = |s: usize, d: usize, call: usize| -> Vec<u8> {
        (0..len)
            .map(|i| (s * 31 + d * 7 + i + call) as u8)
            .collect()
    };
    // Ranks that finished each call, and the go-ahead for the second one.
    let done = AtomicUsize::new(0);
    let go = AtomicUsize::new(0);
    let peers: Arc<[usize]> = Arc::from((0..n).collect::<Vec<_>>());
    let mut between = Counters::default();
    std::thread::scope(|sc| {
        for (me, mut e) in engines.into_iter().enumerate() {
            let (done, go, peers) = (&done, &go, peers.clone());
            sc.spawn(move || {
                for call in 0..2 {
                    let send: Vec<u8> = (0..n).flat_map(|d| block(me, d, call)).collect();
                    let mut recv = vec![0u8; n * len];
                    // SAFETY: send and recv outlive the executor, which completes below.
                    let mut x = unsafe {
                        crate::engine::coll::CollExec::new(
                            build(me),
                            send.as_ptr(),
                            recv.as_mut_ptr(),
                            5,
                            call as i32,
                            peers.clone(),
                            me,
                            Box::new(|_: &[u8], _: &mut [u8]| unreachable!("no reduction")),
                        )
                    };
                    let end = Instant::now() + Duration::from_secs(30);
                    while !x.advance(&mut e).unwrap() {
                        assert!(
                            Instant::now() < end,
                            "rank {me}: call {call} never completed"
                        );
                    }
                    let want: Vec<u8> = (0..n).flat_map(|s| block(s, me, call)).collect();
                    assert!(recv == want, "rank {me}, call {call}: wrong result");
                    // Keep forwarding for the others until every rank is done, then (after
                    // the first call) until the counters are read.
                    done.fetch_add(1, Ordering::SeqCst);
                    let end = Instant::now() + Duration::from_secs(30);
                    while done.load(Ordering::SeqCst) < n * (call + 1)
                        || (call == 0 && go.load(Ordering::SeqCst) == 0)
                    {
                        e.progress();
                        assert!(Instant::now() < end, "rank {me}: the others never finished");
                    }
                }
                // Every engine closes together (the goodbye exchange is collective).
                done.fetch_add(1, Ordering::SeqCst);
                while done.load(Ordering::SeqCst) < 3 * n {
                    e.progress();
                }
            });
        }
        let end = Instant::now() + Duration::from_secs(60);
        while done.load(Ordering::SeqCst) < n {
            assert!(Instant::now() < end, "the first call never completed");
            std::thread::yield_now();
        }
        for c in &counts {
            let c = c.lock().unwrap();
            between.ops += c.ops;
            between.cross_rail += c.cross_rail;
        }
        go.store(1, Ordering::SeqCst);
    });
    let (mut ops, mut cross) = (0, 0);
    for c in &counts {
        let c = c.lock().unwrap();
        ops += c.ops;
        cross += c.cross_rail;
    }
    (ops - between.ops, cross - between.cross_rail)
}

/// 2 nodes x 4 ranks on 2 rails: with PXN off the pairwise schedule sends one network
/// operation per pair of ranks on different nodes (32), half of them across rails; with PXN on
/// the forwarders send one per (forwarder, destination) (16: divided by the rails) and the
/// rail aggregators one per (pair of nodes, rail) (4: the forwarders' divided by the square of
/// the 2 local ranks per rail), none across rails. The leader schedule (PXN off) sends one per pair of
/// nodes, between the two nodes' lowest ranks (both on rail 0).
#[test]
fn alltoall_network_operations_with_and_without_pxn() {
    let l = Layout {
        node_of: vec![0, 0, 0, 0, 1, 1, 1, 1],
        rail_of: vec![0, 1, 0, 1, 0, 1, 0, 1],
    };
    let n = l.node_of.len();
    let nodes = Nodes::new(&l.node_of);
    let len = 64;
    let args = |r: usize| CollArgs {
        nodes: 2,
        ..CollArgs::new(r, n, len)
    };
    let via = pxn::Via::new(&nodes, |s, d| proxy(&l, s, d, true).unwrap_or(s));
    let agg = rails::Rails::new(&nodes, &l.rail_of);

    let (off, off_cross) = second_call_ops(&l, false, len, &|r| pairwise::build(&args(r)));
    assert_eq!((off, off_cross), (32, 16), "pairwise, PXN off");
    let (lead, lead_cross) = second_call_ops(&l, false, len, &|r| {
        hier::build(CollKind::Alltoall, &args(r), &nodes).unwrap()
    });
    assert_eq!((lead, lead_cross), (2, 0), "leaders, PXN off");
    let (fw, fw_cross) = second_call_ops(&l, true, len, &|r| pxn::build(&args(r), &nodes, &via));
    assert_eq!((fw, fw_cross), (16, 0), "forwarders, PXN on");
    let (ra, ra_cross) = second_call_ops(&l, true, len, &|r| rails::build(&args(r), &nodes, &agg));
    assert_eq!((ra, ra_cross), (4, 0), "rail aggregators, PXN on");
    // The pairwise schedule with PXN on: the transport's forwarders aggregate what reaches
    // them together, never across rails.
    let (pw_on, pw_on_cross) = second_call_ops(&l, true, len, &|r| pairwise::build(&args(r)));
    assert_eq!(pw_on_cross, 0, "pairwise, PXN on");
    assert!(pw_on <= off, "pairwise, PXN on: {pw_on} operations");
}

/// The automatic choice (`coll::alltoall::choice::Plan::build`) on the same 2 nodes x 4 ranks
/// on 2 rails with PXN on: where ranks share CPUs (250 thousandths each, as 8 ranks on 2
/// CPUs), blocks below the plan's size (ranks per node x block below `relay`) take the node
/// leaders (2 network operations, none across rails) and blocks from there on the forwarders
/// (16, none across); where every rank has a CPU the small blocks take the rail aggregators (4).
#[test]
fn alltoall_auto_choice_by_size_and_cpus() {
    use crate::coll::alltoall::choice::{Force, Pick, Plan};
    let l = Layout {
        node_of: vec![0, 0, 0, 0, 1, 1, 1, 1],
        rail_of: vec![0, 1, 0, 1, 0, 1, 0, 1],
    };
    let n = l.node_of.len();
    let nodes = Nodes::new(&l.node_of);
    let mut plan = Plan {
        via: pxn::Via::new(&nodes, |s, d| proxy(&l, s, d, true).unwrap_or(s)),
        rails: rails::Rails::new(&nodes, &l.rail_of),
        per_node: 4,
        relay: 1024,
        milli_cpus: 250,
        force: Force::Auto,
    };
    let run = |plan: &Plan, len: usize| {
        let args = |r: usize| CollArgs {
            nodes: 2,
            ..CollArgs::new(r, n, len)
        };
        let pick = plan.pick(len);
        let ops = second_call_ops(&l, true, len, &|r| {
            let (p, s) = plan.build(&args(r), &nodes).unwrap();
            assert_eq!(p, pick);
            s
        });
        (pick, ops)
    };
    assert_eq!(
        run(&plan, 64),
        (Pick::Leaders, (2, 0)),
        "small, shared CPUs"
    );
    assert_eq!(
        run(&plan, 256),
        (Pick::Forwarders, (16, 0)),
        "large, shared CPUs"
    );
    plan.milli_cpus = 8000;
    assert_eq!(
        run(&plan, 64),
        (Pick::Rails, (4, 0)),
        "small, a CPU per rank"
    );
}

/// The automatic choice of an alltoallv (`Plan::picks_between`, `coll::alltoall::pairs`) on
/// the same 2 nodes x 4 ranks on 2 rails, from the lengths between the two nodes (here all
/// `len`: the mean of what one rank gets from the other node is 4 x `len`, against `relay`
/// 1024): blocks of 64 bytes take the rail aggregators (4 network operations), blocks of 256
/// the forwarders (16), none across rails, whatever the ranks' CPUs (the leaders' schedule
/// takes no blocks of other lengths).
#[test]
fn alltoallv_auto_choice_by_the_lengths_between_nodes() {
    use crate::coll::alltoall::choice::{Force, Pick, Plan};
    use crate::coll::alltoall::pairs;
    use crate::coll::Block;
    let l = Layout {
        node_of: vec![0, 0, 0, 0, 1, 1, 1, 1],
        rail_of: vec![0, 1, 0, 1, 0, 1, 0, 1],
    };
    let n = l.node_of.len();
    let nodes = Nodes::new(&l.node_of);
    let plan = Plan {
        via: pxn::Via::new(&nodes, |s, d| proxy(&l, s, d, true).unwrap_or(s)),
        rails: rails::Rails::new(&nodes, &l.rail_of),
        per_node: 4,
        relay: 1024,
        milli_cpus: 250,
        force: Force::Auto,
    };
    for (len, pick, ops) in [(64, Pick::Rails, 4), (256, Pick::Forwarders, 16)] {
        let blocks: Vec<Block> = (0..n).map(|i| Block::new(i * len, len)).collect();
        let got = second_call_ops(&l, true, len, &|r| {
            let g = nodes.of[r];
            let picks = plan.picks_between(&nodes, g, &|_, _| len);
            assert_eq!(picks[1 - g], pick, "rank {r}, {len} bytes");
            let a = CollArgs {
                nodes: 2,
                ..CollArgs::new(r, n, len)
            };
            pairs::build_blocks(
                &a,
                &nodes,
                &plan.via,
                &plan.rails,
                &picks,
                &|_, _| len,
                &blocks,
                &blocks,
            )
        });
        assert_eq!(got, (ops, 0), "{len} bytes");
    }
}
