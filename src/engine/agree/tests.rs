//! The agreement protocol with threads as ranks over heap slot areas, as `engine::flag`'s
//! tests: ranks that start passing device memory at different calls, mixed host and device
//! calls, small and large calls, set-up ("ready") paths; every rank must reach the same
//! verdict in every call, and that verdict must be "GPU" exactly when every rank passed
//! device memory.

use super::*;
use crate::engine::collcheck::CallNo;
use crate::engine::flag::{FlagOp, AREA, SLOT_MAX};
use std::sync::atomic::{AtomicU8, AtomicUsize};
use std::sync::Arc;

/// `n` zeroed areas of `bytes` each (64-byte aligned), leaked.
pub(super) fn areas(n: usize, bytes: usize) -> &'static [usize] {
    let area: &'static mut [u64] = Box::leak(vec![0u64; n * bytes / 8 + 8].into_boxed_slice());
    let start = (area.as_mut_ptr() as usize + 63) & !63;
    Box::leak(
        (0..n)
            .map(|r| start + r * bytes)
            .collect::<Vec<_>>()
            .into_boxed_slice(),
    )
}

fn slot_areas(n: usize) -> &'static [usize] {
    areas(n, AREA)
}

/// A hash of the seeds (splitmix64's finalizer).
pub(super) fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

pub(super) const HOST: u8 = 1;
pub(super) const GPU: u8 = 2;

/// One job: `n` ranks, `calls` calls; rank r passes host memory before its own start call,
/// then device memory in most calls.
fn job(n: usize, calls: u64, seed: u64) {
    let bases = slot_areas(n);
    // Larger calls' host path (the scratch areas, schedules) does not use the flag slots:
    // other slot areas stand for it.
    let other = slot_areas(n);
    let starts: Arc<Vec<u64>> = Arc::new(
        (0..n)
            .map(|r| match mix(seed ^ (r as u64) << 20) % 4 {
                0 => u64::MAX, // never
                x => 1 + mix(seed + x + r as u64) % calls,
            })
            .collect(),
    );
    let device = move |starts: &[u64], r: usize, k: u64| {
        k >= starts[r] && !mix(seed ^ k << 8 ^ r as u64).is_multiple_of(5)
    };
    let small = move |k: u64| !mix(seed ^ k << 32).is_multiple_of(3);
    let verdicts: Arc<Vec<AtomicU8>> = Arc::new(
        (0..(calls as usize + 1) * n)
            .map(|_| AtomicU8::new(0))
            .collect(),
    );
    let idles = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..n)
        .map(|me| {
            let verdicts = verdicts.clone();
            let idles = idles.clone();
            let starts = starts.clone();
            std::thread::spawn(move || {
                // SAFETY: leaked, aligned, zeroed areas shared by the threads.
                let s = unsafe { Slots::new(bases, me, SLOT_MAX) };
                // SAFETY: as above.
                let s2 = unsafe { Slots::new(other, me, SLOT_MAX) };
                let state = State::new();
                let mut ready = false;
                let mut idle = || {
                    assert!(
                        idles.fetch_add(1, Ordering::Relaxed) < 20_000_000,
                        "the ranks hang"
                    );
                    std::thread::yield_now();
                    Ok(())
                };
                for k in 1..=calls {
                    // Uneven arrival.
                    for _ in 0..mix(seed ^ k ^ (me as u64) << 40) % 4 {
                        std::thread::yield_now();
                    }
                    let no = CallNo::new(k);
                    let dev = device(&starts, me, k);
                    if dev {
                        state.see();
                    }
                    let sm = small(k);
                    let words = [k, !k, 8, !8];
                    let role = role(sm, dev, state.seen(), || sm && ready, state.stable());
                    let a = no.nested(1).flag();
                    let gpu = match role {
                        Role::Skip => false,
                        Role::Tell => {
                            tell(&s, a, words, &mut idle).unwrap();
                            false
                        }
                        Role::Round => {
                            let part = Part {
                                device: dev,
                                seen: state.seen(),
                                words,
                            };
                            let v = round(&s, &state, a, part, &mut idle).unwrap();
                            assert_eq!(v.mismatch, None);
                            v.device
                        }
                        Role::Trust => {
                            // The GPU path's own agreement: every rank must take part.
                            let mut all = true;
                            s.exchange(a, &[dev as u8], &mut idle, &mut |r, b| {
                                let b = b.unwrap_or_else(|| {
                                    panic!("rank {r} skipped call {k} that rank {me} trusted")
                                });
                                all &= b == [1];
                            })
                            .unwrap();
                            all
                        }
                    };
                    if gpu {
                        if sm {
                            ready = true;
                        }
                        // The GPU path: a round every rank must take part in.
                        s.exchange(no.nested(2).flag(), &[7], &mut idle, &mut |r, b| {
                            assert_eq!(b, Some(&[7u8][..]), "rank {r} in call {k}");
                        })
                        .unwrap();
                    } else {
                        // The host path: the call's own round (for a larger call, not in the
                        // flag slots).
                        let one = 1u64.to_ne_bytes();
                        let mut out = [0u8; 8];
                        let sum = |i: &[u8], o: &mut [u8]| {
                            let x = u64::from_ne_bytes(i.try_into().unwrap());
                            let y = u64::from_ne_bytes((&*o).try_into().unwrap());
                            o.copy_from_slice(&(x + y).to_ne_bytes());
                            Ok(())
                        };
                        let op = FlagOp::Allreduce {
                            input: one.as_ptr(),
                            output: out.as_mut_ptr(),
                            len: 8,
                            reduce: &sum,
                        };
                        // SAFETY: buffers of 8 bytes.
                        let host = if sm { &s } else { &s2 };
                        unsafe { host.run(no.flag(), &op, &mut idle) }
                            .unwrap_or_else(|e| panic!("rank {me} call {k}: {}", e.msg));
                        assert_eq!(u64::from_ne_bytes(out), n as u64);
                    }
                    verdicts[k as usize * n + me]
                        .store(if gpu { GPU } else { HOST }, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    for k in 1..=calls {
        let all_dev = (0..n).all(|r| device(&starts, r, k));
        for r in 0..n {
            let v = verdicts[k as usize * n + r].load(Ordering::Relaxed);
            assert_eq!(
                v,
                if all_dev { GPU } else { HOST },
                "seed {seed} n {n} call {k} rank {r}"
            );
        }
    }
}

#[test]
fn every_rank_reaches_the_same_verdict() {
    for n in 1..=5 {
        for seed in 0..12 {
            job(n, 60, seed * 7919 + n as u64);
        }
    }
}

/// The race the protocol exists for: rank 1 passes device memory for the first time in a call
/// in which rank 0 (host memory, never seen device memory) has already gone on; rank 0 does
/// not wait for anything, rank 1 counts it as "no", and both meet at the flag round.
#[test]
fn a_skipper_ahead_of_a_first_device_call() {
    let bases = slot_areas(2);
    let t0 = std::thread::spawn(move || {
        // SAFETY: as in `job`.
        let s = unsafe { Slots::new(bases, 0, SLOT_MAX) };
        let st = State::new();
        assert_eq!(
            role(true, false, st.seen(), || unreachable!(), st.stable()),
            Role::Skip
        );
        assert_eq!(
            role(false, false, st.seen(), || unreachable!(), st.stable()),
            Role::Tell
        );
        let mut out = [0u8; 1];
        let op = FlagOp::Bcast {
            root: 0,
            buf: out.as_mut_ptr(),
            len: 1,
        };
        // The root of a bcast does not wait: it is gone before rank 1 arrives.
        // SAFETY: 1-byte buffer.
        unsafe { s.run(CallNo::new(3).flag(), &op, &mut || Ok(())) }.unwrap();
    });
    t0.join().unwrap();
    // SAFETY: as in `job`.
    let s = unsafe { Slots::new(bases, 1, SLOT_MAX) };
    let st = State::new();
    st.see();
    assert_eq!(
        role(true, true, st.seen(), || false, st.stable()),
        Role::Round
    );
    let part = Part {
        device: true,
        seen: true,
        words: [1, !1, 8, !8],
    };
    let v = round(&s, &st, CallNo::new(3).nested(1).flag(), part, &mut || {
        Ok(())
    })
    .unwrap();
    assert_eq!(
        v,
        Verdict {
            device: false,
            mismatch: None
        }
    );
    assert!(!st.stable(), "a skipper has not seen device memory");
    let mut buf = [9u8; 1];
    let op = FlagOp::Bcast {
        root: 0,
        buf: buf.as_mut_ptr(),
        len: 1,
    };
    // SAFETY: 1-byte buffer.
    unsafe { s.run(CallNo::new(3).flag(), &op, &mut || Ok(())) }.unwrap();
    assert_eq!(buf, [0u8]);
}

/// Rounds where every rank has seen device memory latch `stable` on every rank; a rank's
/// "tell" carries its agreement words, so a different call is still found.
#[test]
fn stable_latches_and_tell_carries_the_call() {
    let bases = slot_areas(2);
    let rec = |bytes: u64| [1, !1, bytes, !bytes];
    let t = std::thread::spawn(move || {
        // SAFETY: as in `job`.
        let s = unsafe { Slots::new(bases, 0, SLOT_MAX) };
        let st = State::new();
        let part = Part {
            device: false,
            seen: true,
            words: rec(8),
        };
        let v = round(&s, &st, 10, part, &mut || Ok(())).unwrap();
        assert!(!v.device && st.stable());
        assert_eq!(
            role(false, false, st.seen(), || false, st.stable()),
            Role::Tell,
            "not seen here"
        );
        tell(&s, 20, rec(80), &mut || Ok(())).unwrap();
    });
    // SAFETY: as in `job`.
    let s = unsafe { Slots::new(bases, 1, SLOT_MAX) };
    let st = State::new();
    st.see();
    let part = Part {
        device: true,
        seen: true,
        words: rec(8),
    };
    round(&s, &st, 10, part, &mut || Ok(())).unwrap();
    assert!(st.stable());
    assert_eq!(role(false, true, true, || false, st.stable()), Role::Trust);
    assert_eq!(
        role(true, true, true, || false, st.stable()),
        Role::Round,
        "small calls keep their round"
    );
    let part = Part {
        words: rec(8),
        ..part
    };
    let v = round(&s, &st, 20, part, &mut || Ok(())).unwrap();
    assert_eq!(v.mismatch, Some(crate::standard::consts::MPI_ERR_TRUNCATE));
    assert!(!v.device);
    t.join().unwrap();
}
