//! The words' agreement with threads as ranks over heap areas: communicators of several
//! memberships (a dup of the whole job, the halves of a split, a pair, a single rank) with
//! context ids reused by later communicators, ranks that start passing device memory at
//! different calls (so a communicator holds members that have seen device memory and members
//! that have not), set-up ("ready") paths, and host paths in which a bcast's root leaves
//! before the others arrive. Every member must reach the same verdict in every call, and that
//! verdict must be "GPU" exactly when every member passed device memory.

use super::*;
use crate::engine::collcheck::CallNo;
use crate::engine::flag::{FlagOp, Slots, AREA, SLOT_MAX};
use std::sync::atomic::{AtomicU8, AtomicUsize};
use std::sync::Arc;

use super::super::tests::{areas, mix, GPU, HOST};

/// A communicator of the test: its context id, its members (world ranks, in rank order) and
/// the flag slots its host collectives use (areas of its members, in its rank order).
struct Comm {
    ctx: u32,
    members: Vec<usize>,
    slots: &'static [usize],
}

/// The communicators of phase `p` of a job of `n` ranks: a dup of the job, the two halves of
/// a split, and a pair; each phase reuses the context ids of the one before (as after
/// `MPI_Comm_free`), with other memberships.
fn comms(n: usize, p: usize) -> Vec<Comm> {
    let rot = |r: usize| (r + p) % n;
    let mut sets: Vec<Vec<usize>> = vec![(0..n).collect()];
    let half = n.div_ceil(2);
    sets.push((0..half).map(rot).collect());
    if n > half {
        sets.push((half..n).map(rot).collect());
    }
    if n >= 2 {
        sets.push(vec![rot(1), rot(0)]);
    }
    sets.into_iter()
        .enumerate()
        .map(|(i, mut members)| {
            members.sort_unstable();
            if p % 2 == 1 {
                members.reverse();
            }
            Comm {
                ctx: 1 + i as u32,
                slots: areas(members.len(), AREA),
                members,
            }
        })
        .collect()
}

/// One job: `n` ranks, `phases` phases of communicators, `calls` calls per phase, each on one
/// communicator (its members take part, the others go on). Rank r passes host memory before
/// its own start call, then device memory in most calls.
fn job(n: usize, phases: usize, calls: u64, seed: u64) {
    let words = areas(n, BYTES);
    let phase_comms: Arc<Vec<Vec<Comm>>> = Arc::new((0..phases).map(|p| comms(n, p)).collect());
    let total = phases as u64 * calls;
    let starts: Arc<Vec<u64>> = Arc::new(
        (0..n)
            .map(|r| match mix(seed ^ (r as u64) << 20) % 4 {
                0 => u64::MAX, // never
                x => 1 + mix(seed + x + r as u64) % total,
            })
            .collect(),
    );
    // Call t (1-based, over the whole job) runs on communicator `on(t)` of its phase.
    let on = move |t: u64, count: usize| (mix(seed ^ t << 24) % count as u64) as usize;
    let device = move |starts: &[u64], r: usize, t: u64| {
        t >= starts[r] && !mix(seed ^ t << 8 ^ r as u64).is_multiple_of(5)
    };
    let verdicts: Arc<Vec<AtomicU8>> = Arc::new(
        (0..(total as usize + 1) * n)
            .map(|_| AtomicU8::new(0))
            .collect(),
    );
    let idles = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..n)
        .map(|me| {
            let (verdicts, idles, starts, phase_comms) = (
                verdicts.clone(),
                idles.clone(),
                starts.clone(),
                phase_comms.clone(),
            );
            std::thread::spawn(move || {
                // SAFETY: leaked, aligned, zeroed areas shared by the threads.
                let w = unsafe { Words::new(words) };
                let process = super::super::State::new();
                let mut idle = || {
                    assert!(
                        idles.fetch_add(1, Ordering::Relaxed) < 20_000_000,
                        "the ranks hang"
                    );
                    std::thread::yield_now();
                    Ok(())
                };
                for (p, cs) in phase_comms.iter().enumerate() {
                    // A new communicator on each context id: its own state and numbering.
                    let states: Vec<CommState> = cs.iter().map(|_| CommState::new()).collect();
                    let mut ready = vec![false; cs.len()];
                    let mut seqs = vec![0u64; cs.len()];
                    for i in 1..=calls {
                        let t = p as u64 * calls + i;
                        let c = on(t, cs.len());
                        let comm = &cs[c];
                        let Some(rank) = comm.members.iter().position(|&r| r == me) else {
                            continue;
                        };
                        seqs[c] += 1;
                        let no = CallNo::new(seqs[c]);
                        // SAFETY: as above.
                        let s = unsafe { Slots::new(comm.slots, rank, SLOT_MAX) };
                        for _ in 0..mix(seed ^ t ^ (me as u64) << 40) % 4 {
                            std::thread::yield_now();
                        }
                        let dev = device(&starts, me, t);
                        if dev {
                            process.see();
                        }
                        let st = &states[c];
                        let role = comm_role(dev, process.seen(), || ready[c], st.stable());
                        let gpu = match (role, st.number(no.nested(1))) {
                            (Role::Trust, _) => {
                                // The GPU path's own agreement: every member takes part.
                                let mut all = true;
                                s.exchange(
                                    no.nested(1).flag(),
                                    &[dev as u8],
                                    &mut idle,
                                    &mut |r, b| {
                                        let b = b.unwrap_or_else(|| {
                                            panic!("rank {r} left call {t} that rank {me} trusted")
                                        });
                                        all &= b == [1];
                                    },
                                )
                                .unwrap();
                                all
                            }
                            (_, None) => {
                                // The first call on the words: every member's last number.
                                let mine = w.last(me, comm.ctx) >> 1 << 1 | dev as u64;
                                let mut all = Vec::new();
                                s.exchange(
                                    no.nested(1).flag(),
                                    &mine.to_le_bytes(),
                                    &mut idle,
                                    &mut |r, b| {
                                        let b =
                                            b.unwrap_or_else(|| panic!("rank {r} left call {t}"));
                                        all.push(u64::from_le_bytes(b.try_into().unwrap()));
                                    },
                                )
                                .unwrap();
                                st.start(&all)
                            }
                            (Role::Round, Some(v)) => w
                                .round(me, comm.ctx, &comm.members, v, st, &mut idle)
                                .unwrap(),
                            (_, Some(v)) => {
                                w.tell(me, comm.ctx, v);
                                false
                            }
                        };
                        if gpu {
                            ready[c] = true;
                            // The GPU path: a round every member must take part in.
                            s.exchange(no.nested(2).flag(), &[7], &mut idle, &mut |r, b| {
                                assert_eq!(b, Some(&[7u8][..]), "rank {r} in call {t}");
                            })
                            .unwrap();
                        } else {
                            // The host path: a bcast whose root does not wait for anybody.
                            let root = (t as usize) % comm.members.len();
                            let mut buf = [if rank == root { t as u8 } else { 0 }];
                            let op = FlagOp::Bcast {
                                root,
                                buf: buf.as_mut_ptr(),
                                len: 1,
                            };
                            // SAFETY: a 1-byte buffer.
                            unsafe { s.run(no.flag(), &op, &mut idle) }
                                .unwrap_or_else(|e| panic!("rank {me} call {t}: {}", e.msg));
                            assert_eq!(buf, [t as u8]);
                        }
                        verdicts[t as usize * n + me]
                            .store(if gpu { GPU } else { HOST }, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for th in threads {
        th.join().unwrap();
    }
    for t in 1..=total {
        let cs = &phase_comms[((t - 1) / calls) as usize];
        let comm = &cs[on(t, cs.len())];
        let all_dev = comm.members.iter().all(|&r| device(&starts, r, t));
        for r in 0..n {
            let v = verdicts[t as usize * n + r].load(Ordering::Relaxed);
            let want = match (comm.members.contains(&r), all_dev) {
                (false, _) => 0,
                (true, true) => GPU,
                (true, false) => HOST,
            };
            assert_eq!(v, want, "seed {seed} n {n} call {t} rank {r}");
        }
    }
}

#[test]
fn every_member_reaches_the_same_verdict() {
    for n in 1..=5 {
        for seed in 0..12 {
            job(n, 3, 40, seed * 7919 + n as u64);
        }
    }
}

/// The race the words exist for, on a split: rank 2, the bcast's root, has never passed device
/// memory and leaves at once; rank 0 passes device memory for the first time in that call and
/// reads rank 2's "no". Rank 1 is not a member.
#[test]
fn a_host_root_ahead_of_a_first_device_call() {
    let words = areas(3, BYTES);
    let members = [0usize, 2];
    let slots = areas(2, AREA);
    let ctx = 5;
    // SAFETY: leaked, aligned, zeroed areas.
    let w = unsafe { Words::new(words) };
    assert!(w.covers(ctx, &members) && !w.covers(CTXS as u32, &members));
    // Call 1 numbered the communicator (both passed host memory).
    let (s0, s2) = (CommState::new(), CommState::new());
    assert!(!s0.start(&[0, 0]) && !s2.start(&[0, 0]));
    let no = CallNo::new(2).nested(1);
    let v = s0.number(no).unwrap();
    assert_eq!(s2.number(no), Some(v));
    let t = std::thread::spawn(move || {
        assert_eq!(
            comm_role(false, false, || unreachable!(), false),
            Role::Tell
        );
        w.tell(2, ctx, v);
        // SAFETY: as above.
        let s = unsafe { Slots::new(slots, 1, SLOT_MAX) };
        let mut buf = [42u8];
        let op = FlagOp::Bcast {
            root: 1,
            buf: buf.as_mut_ptr(),
            len: 1,
        };
        // SAFETY: a 1-byte buffer; the root does not wait.
        unsafe { s.run(CallNo::new(2).flag(), &op, &mut || Ok(())) }.unwrap();
    });
    t.join().unwrap();
    assert_eq!(comm_role(true, true, || false, false), Role::Round);
    let gpu = w.round(0, ctx, &members, v, &s0, &mut || Ok(())).unwrap();
    assert!(!gpu && !s0.stable());
    // SAFETY: as above.
    let s = unsafe { Slots::new(slots, 0, SLOT_MAX) };
    let mut buf = [0u8];
    let op = FlagOp::Bcast {
        root: 1,
        buf: buf.as_mut_ptr(),
        len: 1,
    };
    // SAFETY: a 1-byte buffer.
    unsafe { s.run(CallNo::new(2).flag(), &op, &mut || Ok(())) }.unwrap();
    assert_eq!(buf, [42]);
    // A rank that has moved on to a later call counts as "no" too, device bit or not.
    w.tell(2, ctx, v + 5);
    assert!(!w
        .round(0, ctx, &members, v + 1, &s0, &mut || Ok(()))
        .unwrap());
    words_store(words[2], ctx, (v + 9) << 1 | 1);
    assert!(!w
        .round(0, ctx, &members, v + 2, &s0, &mut || Ok(()))
        .unwrap());
    assert!(!s0.stable());
}

/// A communicator reusing a context id numbers its calls above every member's last number,
/// so a word left by the communicator before is never read as this one's; a round where every
/// member passes device memory latches `stable`, and then every member trusts the GPU path.
#[test]
fn a_reused_context_id_starts_above_the_old_numbers() {
    let words = areas(2, BYTES);
    // SAFETY: leaked, aligned, zeroed areas.
    let w = unsafe { Words::new(words) };
    let ctx = 3;
    // The communicator before got as far as 1000 on rank 1 (with its device bit).
    w.tell(0, ctx, 7);
    words_store(words[1], ctx, 1000 << 1 | 1);
    let fresh = CommState::new();
    assert_eq!(fresh.number(CallNo::new(1)), None);
    let all = [w.last(0, ctx) | 1, w.last(1, ctx) | 1];
    assert!(fresh.start(&all), "every member passes device memory");
    assert!(fresh.stable());
    assert!(fresh.number(CallNo::new(0)).unwrap() > 1000);
    assert_eq!(comm_role(true, true, || false, fresh.stable()), Role::Trust);
    assert_eq!(
        comm_role(false, true, || false, fresh.stable()),
        Role::Trust
    );
    // A round of two members that both pass device memory (rank 1 on another thread).
    let other = CommState::new();
    other.start(&[w.last(0, ctx) & !1, w.last(1, ctx)]);
    let v = other.number(CallNo::new(2).nested(1)).unwrap();
    assert!(v > 1000);
    let t = std::thread::spawn(move || {
        let st = CommState::new();
        w.round(1, ctx, &[0, 1], v, &st, &mut || Ok(())).unwrap() && st.stable()
    });
    assert!(w.round(0, ctx, &[0, 1], v, &other, &mut || Ok(())).unwrap());
    assert!(t.join().unwrap() && other.stable());
}

/// Store `x` into the word of context id `ctx` at `base` (a rank's words).
fn words_store(base: usize, ctx: u32, x: u64) {
    // SAFETY: `base` is a leaked, aligned words area of the test.
    unsafe { &*((base + ctx as usize * 8) as *const AtomicU64) }.store(x, Ordering::Relaxed);
}
