//! A simulator that executes one schedule per rank in one process over in-memory byte buffers,
//! the way an executor must (see the `coll` module docs), and checks the rules builders rely on:
//! - messages between a pair are matched in FIFO order; a Recv's length must equal the
//!   message's; by default a Send completes only once its Recv has matched it (as with
//!   rendezvous or MPI_Ssend), so a schedule that passes cannot deadlock under any buffering;
//!   [`SendMode::Buffered`] models unlimited eager buffering instead;
//! - no step touches a region that an uncompleted Send/Recv of the same epoch uses in a
//!   conflicting way (write after send, any access to a pending receive), copies do not overlap,
//!   reductions cover whole elements, regions lie inside their buffers;
//! - deadlock (no rank can progress) and messages left unconsumed are errors.
//!
//! Any violation panics with the rank and step; it is a test utility, public so that other
//! layers (e.g. the engine's executor tests) can use it as the reference.

use super::schedule::{BufId, Region, Schedule, Step};
use std::collections::VecDeque;

/// The buffers of one rank. `tmp` is allocated by the simulator from `Schedule::tmp_len`.
#[derive(Clone, Debug, Default)]
pub struct RankBufs {
    pub send: Vec<u8>,
    pub recv: Vec<u8>,
}

/// `op(left, right) -> result` over whole regions (a multiple of the element size).
pub type OpFn<'a> = &'a dyn Fn(&[u8], &[u8]) -> Vec<u8>;

/// When a Send completes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendMode {
    /// At once (unlimited buffering).
    Buffered,
    /// When the receiver has matched it.
    Synchronous,
}

struct RankState {
    pc: usize,
    tmp: Vec<u8>,
    /// (region, queue index, sequence number on that queue)
    pending_sends: Vec<(Region, usize, usize)>,
    /// (peer, region, matched)
    pending_recvs: Vec<(usize, Region, bool)>,
}

fn buf<'a>(b: &'a RankBufs, tmp: &'a [u8], r: &Region, rank: usize, pc: usize) -> &'a [u8] {
    let v: &[u8] = match r.buf {
        BufId::Send => &b.send,
        BufId::Recv => &b.recv,
        BufId::Tmp => tmp,
    };
    assert!(
        r.end() <= v.len(),
        "rank {rank} step {pc}: {r:?} outside its buffer of {} bytes",
        v.len()
    );
    &v[r.off..r.end()]
}

fn write(b: &mut RankBufs, tmp: &mut [u8], r: &Region, data: &[u8], rank: usize, pc: usize) {
    let v: &mut [u8] = match r.buf {
        BufId::Send => panic!("rank {rank} step {pc}: writes the send buffer"),
        BufId::Recv => &mut b.recv,
        BufId::Tmp => tmp,
    };
    assert!(
        r.end() <= v.len(),
        "rank {rank} step {pc}: {r:?} outside its buffer of {} bytes",
        v.len()
    );
    v[r.off..r.end()].copy_from_slice(data);
}

/// Run the schedules (`scheds[i]` on rank i) to completion with synchronous sends. Panics on
/// any rule violation.
pub fn simulate(scheds: &[Schedule], bufs: &mut [RankBufs], elem_size: usize, op: OpFn) {
    simulate_mode(scheds, bufs, elem_size, op, SendMode::Synchronous)
}

/// Run the schedules with the given send completion model.
pub fn simulate_mode(
    scheds: &[Schedule],
    bufs: &mut [RankBufs],
    elem_size: usize,
    op: OpFn,
    mode: SendMode,
) {
    let n = scheds.len();
    assert_eq!(bufs.len(), n);
    let mut queues: Vec<VecDeque<Vec<u8>>> = vec![VecDeque::new(); n * n]; // [src * n + dst]
    let mut pushed = vec![0usize; n * n];
    let mut taken = vec![0usize; n * n];
    let mut st: Vec<RankState> = scheds
        .iter()
        .map(|s| RankState {
            pc: 0,
            tmp: vec![0xA5; s.tmp_len],
            pending_sends: vec![],
            pending_recvs: vec![],
        })
        .collect();
    loop {
        let mut progressed = false;
        let mut all_done = true;
        for rank in 0..n {
            let steps = &scheds[rank].steps;
            let s = &mut st[rank];
            loop {
                // Match pending receives in order (FIFO per peer).
                let mut blocked_peers: Vec<usize> = Vec::new();
                for (peer, region, matched) in s.pending_recvs.iter_mut() {
                    if *matched || blocked_peers.contains(peer) {
                        continue;
                    }
                    if let Some(msg) = queues[*peer * n + rank].pop_front() {
                        taken[*peer * n + rank] += 1;
                        assert_eq!(
                            msg.len(),
                            region.len,
                            "rank {rank}: message from {peer} has {} bytes, receive expects {}",
                            msg.len(),
                            region.len
                        );
                        write(&mut bufs[rank], &mut s.tmp, region, &msg, rank, s.pc);
                        *matched = true;
                        progressed = true;
                    } else {
                        // A later receive from the same peer must not overtake this one.
                        blocked_peers.push(*peer);
                    }
                }
                let at_end = s.pc >= steps.len();
                if at_end {
                    assert!(
                        s.pending_recvs.is_empty() && s.pending_sends.is_empty(),
                        "rank {rank}: schedule ends with communication outstanding (no final Wait)"
                    );
                    break;
                }
                let pc = s.pc;
                let check_free = |r: &Region, write: bool, s: &RankState, what: &str| {
                    for (_, p, _) in &s.pending_recvs {
                        assert!(
                            !p.overlaps(r),
                            "rank {rank} step {pc}: {what} {r:?} touches pending receive {p:?}"
                        );
                    }
                    if write {
                        for (p, _, _) in &s.pending_sends {
                            assert!(
                                !p.overlaps(r),
                                "rank {rank} step {pc}: {what} {r:?} overwrites pending send {p:?}"
                            );
                        }
                    }
                };
                match steps[pc] {
                    Step::Send { peer, src } => {
                        assert!(
                            peer < n && peer != rank,
                            "rank {rank} step {pc}: bad peer {peer}"
                        );
                        check_free(&src, false, s, "send");
                        let data = buf(&bufs[rank], &s.tmp, &src, rank, pc).to_vec();
                        let q = rank * n + peer;
                        queues[q].push_back(data);
                        s.pending_sends.push((src, q, pushed[q]));
                        pushed[q] += 1;
                    }
                    Step::Recv { peer, dst } => {
                        assert!(
                            peer < n && peer != rank,
                            "rank {rank} step {pc}: bad peer {peer}"
                        );
                        assert!(
                            dst.buf != BufId::Send,
                            "rank {rank} step {pc}: receives into the send buffer"
                        );
                        check_free(&dst, true, s, "recv");
                        s.pending_recvs.push((peer, dst, false));
                    }
                    Step::Reduce { src, dst } | Step::ReduceRev { src, dst } => {
                        assert_eq!(
                            src.len, dst.len,
                            "rank {rank} step {pc}: reduce lengths differ"
                        );
                        assert!(
                            dst.len % elem_size == 0,
                            "rank {rank} step {pc}: {} bytes is not whole elements",
                            dst.len
                        );
                        assert!(
                            !src.overlaps(&dst),
                            "rank {rank} step {pc}: reduce operands overlap"
                        );
                        check_free(&src, false, s, "reduce src");
                        check_free(&dst, true, s, "reduce dst");
                        let a = buf(&bufs[rank], &s.tmp, &src, rank, pc).to_vec();
                        let b = buf(&bufs[rank], &s.tmp, &dst, rank, pc).to_vec();
                        let res = if matches!(steps[pc], Step::Reduce { .. }) {
                            op(&a, &b)
                        } else {
                            op(&b, &a)
                        };
                        write(&mut bufs[rank], &mut s.tmp, &dst, &res, rank, pc);
                    }
                    Step::Copy { src, dst } => {
                        assert_eq!(
                            src.len, dst.len,
                            "rank {rank} step {pc}: copy lengths differ"
                        );
                        assert!(
                            !src.overlaps(&dst),
                            "rank {rank} step {pc}: copy regions overlap"
                        );
                        check_free(&src, false, s, "copy src");
                        check_free(&dst, true, s, "copy dst");
                        let a = buf(&bufs[rank], &s.tmp, &src, rank, pc).to_vec();
                        write(&mut bufs[rank], &mut s.tmp, &dst, &a, rank, pc);
                    }
                    Step::Wait => {
                        if s.pending_recvs.iter().any(|p| !p.2) {
                            break; // blocked on a receive
                        }
                        if mode == SendMode::Synchronous
                            && s.pending_sends.iter().any(|&(_, q, seq)| taken[q] <= seq)
                        {
                            break; // blocked on an unmatched send
                        }
                        s.pending_recvs.clear();
                        s.pending_sends.clear();
                    }
                }
                s.pc += 1;
                progressed = true;
            }
            if st[rank].pc < steps.len() {
                all_done = false;
            }
        }
        if all_done {
            break;
        }
        if !progressed {
            let stuck: Vec<String> = st
                .iter()
                .enumerate()
                .filter(|(r, s)| s.pc < scheds[*r].steps.len())
                .map(|(r, s)| {
                    let unmatched: Vec<usize> = s
                        .pending_sends
                        .iter()
                        .filter(|&&(_, q, seq)| taken[q] <= seq)
                        .map(|&(_, q, _)| q % n)
                        .collect();
                    let waiting: Vec<usize> = s
                        .pending_recvs
                        .iter()
                        .filter(|p| !p.2)
                        .map(|p| p.0)
                        .collect();
                    format!(
                        "rank {r} at step {}: receives from {waiting:?}, sends to {unmatched:?} unmatched",
                        s.pc
                    )
                })
                .collect();
            panic!("deadlock: {}", stuck.join("; "));
        }
    }
    for (i, q) in queues.iter().enumerate() {
        assert!(
            q.is_empty(),
            "{} unconsumed message(s) from rank {} to rank {}",
            q.len(),
            i / n,
            i % n
        );
    }
}
