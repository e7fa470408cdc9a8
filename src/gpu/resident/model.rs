//! A model of the one-block resident kernel's flag protocol (kernels/resident.cuh) and of its
//! host side (`run`, `release`, `call_failed`, `Res::run`), explored over every interleaving of
//! the ranks' steps: calls that every rank makes alike must finish with every rank's data,
//! and a call whose shape differs between the ranks (given up) must never keep a later call
//! from finishing. The flag values and the barrier after a given-up call come from the real
//! [`Chain`].
//!
//! One rank's state: its host (which call, whether it waits at the barrier or for its kernel,
//! whether it released the kernel) and its kernel (step 1: data and flag into every rank's
//! scratch at the call's parity; step 2: each flag word of my scratch read until it carries
//! the call's value, one word at a time, as the kernel's threads do; step 3: every rank's slot
//! read). A release writes every flag word of my scratch at the call's parity with the call's
//! value and "not ok"; it may be repeated while the kernel has not finished (`Res::run`
//! releases again every `RELEASE_AGAIN`). The ranks' records make a differing call visible to
//! a rank once the peer has started that call; when the release comes is free.

use super::{flag_value, Chain};
use std::collections::HashMap;

const N: usize = 3;

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum HostAt {
    /// About to start call `call`.
    Enter,
    /// At the host barrier of call `call` (after a given-up call).
    Barrier,
    /// Waiting for the kernel's completion of call `call`.
    Wait,
    /// Every call made.
    Finished,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
struct Host {
    call: u8,
    at: HostAt,
    chain: Chain,
    flagv: u64,
    released: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum KernAt {
    Idle,
    /// The host posted a command: step 1 next.
    Posted,
    /// Step 2: the words of `seen` carried the call's value.
    Waiting,
    /// Step 3: every rank's slot read (one step).
    Finishing,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
struct Kern {
    at: KernAt,
    call: u8,
    flagv: u64,
    seen: u8,
    all_ok: bool,
    /// The last completion: (call, status).
    done: Option<(u8, bool)>,
}

#[derive(Clone, PartialEq, Eq, Hash, Debug)]
struct State {
    /// flags[rank][parity][sender]: the flag words of each rank's scratch.
    flags: [[[u64; N]; 2]; N],
    /// data[rank][parity][sender]: which call's data (call + 1) each slot holds.
    data: [[[u8; N]; 2]; N],
    host: [Host; N],
    kern: [Kern; N],
}

struct Model<'a> {
    n: usize,
    /// shapes[rank][call]: the digest of each rank's call (they differ in a mismatched call).
    shapes: &'a [Vec<u16>],
}

impl Model<'_> {
    fn calls(&self) -> usize {
        self.shapes[0].len()
    }

    fn mismatched(&self, call: usize) -> bool {
        (1..self.n).any(|r| self.shapes[r][call] != self.shapes[0][call])
    }

    /// Whether rank `p` has started call `call` (its record of it is published).
    fn started(&self, s: &State, p: usize, call: usize) -> bool {
        s.host[p].call as usize >= call
    }

    fn start(&self) -> State {
        let host = Host {
            call: 0,
            at: HostAt::Enter,
            chain: Chain::default(),
            flagv: 0,
            released: false,
        };
        let kern = Kern {
            at: KernAt::Idle,
            call: 0,
            flagv: 0,
            seen: 0,
            all_ok: true,
            done: None,
        };
        State {
            flags: [[[0; N]; 2]; N],
            data: [[[0; N]; 2]; N],
            host: [host; N],
            kern: [kern; N],
        }
    }

    fn post(&self, s: &mut State, r: usize) {
        let h = s.host[r];
        s.kern[r] = Kern {
            at: KernAt::Posted,
            call: h.call,
            flagv: h.flagv,
            seen: 0,
            all_ok: true,
            done: s.kern[r].done,
        };
        s.host[r].at = HostAt::Wait;
        s.host[r].released = false;
    }

    /// Every state one step of rank `r` (host or kernel) leads to; `Err`: a call that every
    /// rank made alike read another call's data.
    fn steps(&self, s: &State, r: usize, out: &mut Vec<State>) -> Result<(), String> {
        let n = self.n;
        let all = (1u8 << n) - 1;
        let h = s.host[r];
        let call = h.call as usize;
        match h.at {
            HostAt::Finished => {}
            HostAt::Enter => {
                let mut t = s.clone();
                let (flagv, sync) = t.host[r].chain.next(call as u64, self.shapes[r][call]);
                t.host[r].flagv = flagv;
                if sync {
                    t.host[r].at = HostAt::Barrier;
                } else {
                    self.post(&mut t, r);
                }
                out.push(t);
            }
            HostAt::Barrier => {
                let through = (0..n).all(|p| {
                    s.host[p].call as usize > call
                        || (s.host[p].call as usize == call && s.host[p].at != HostAt::Enter)
                });
                if through {
                    let mut t = s.clone();
                    self.post(&mut t, r);
                    out.push(t);
                }
            }
            HostAt::Wait => {
                let k = s.kern[r];
                if k.done.is_some_and(|(c, _)| c as usize == call) {
                    let (_, ok) = k.done.expect("checked");
                    let mut t = s.clone();
                    if self.mismatched(call) {
                        // Every rank fails the call (the dispatch layer's `call_failed`).
                        t.host[r].chain.stop(call as u64);
                    } else if !ok || h.released {
                        return Err(format!(
                            "rank {r}: call {call}, the same on every rank, did not run (status \
                             {ok}, released {})",
                            h.released
                        ));
                    }
                    t.host[r].call += 1;
                    t.host[r].at = if t.host[r].call as usize == self.calls() {
                        HostAt::Finished
                    } else {
                        HostAt::Enter
                    };
                    t.kern[r].at = KernAt::Idle;
                    out.push(t);
                } else if self.mismatched(call)
                    && (0..n).any(|p| {
                        self.shapes[p][call] != self.shapes[r][call] && self.started(s, p, call)
                    })
                {
                    // The peers' records show the difference: release (again).
                    let mut t = s.clone();
                    let par = (h.flagv & 1) as usize;
                    for q in 0..n {
                        t.flags[r][par][q] = h.flagv << 1;
                    }
                    t.host[r].released = true;
                    out.push(t);
                }
            }
        }
        let k = s.kern[r];
        let par = (k.flagv & 1) as usize;
        match k.at {
            KernAt::Idle => {}
            KernAt::Posted => {
                let mut t = s.clone();
                for p in 0..n {
                    t.data[p][par][r] = k.call + 1;
                    t.flags[p][par][r] = k.flagv << 1 | 1;
                }
                t.kern[r].at = KernAt::Waiting;
                out.push(t);
            }
            KernAt::Waiting => {
                for q in (0..n).filter(|q| k.seen & 1 << q == 0) {
                    let v = s.flags[r][par][q];
                    if v >> 1 != k.flagv {
                        continue;
                    }
                    let mut t = s.clone();
                    let kk = &mut t.kern[r];
                    kk.seen |= 1 << q;
                    kk.all_ok &= v & 1 == 1;
                    if kk.seen == all {
                        if kk.all_ok {
                            kk.at = KernAt::Finishing;
                        } else {
                            kk.at = KernAt::Idle;
                            kk.done = Some((k.call, false));
                        }
                    }
                    out.push(t);
                }
            }
            KernAt::Finishing => {
                if let Some(q) = (0..n).find(|&q| s.data[r][par][q] != k.call + 1) {
                    return Err(format!(
                        "rank {r}: call {} read rank {q}'s slot holding call {}'s data",
                        k.call,
                        s.data[r][par][q] as i32 - 1
                    ));
                }
                let mut t = s.clone();
                t.kern[r].at = KernAt::Idle;
                t.kern[r].done = Some((k.call, true));
                out.push(t);
            }
        }
        Ok(())
    }

    /// Explore every interleaving; `Err` names a state from which the calls cannot all finish
    /// (or a wrong read). Returns the number of states.
    fn check(&self) -> Result<usize, String> {
        let mut index: HashMap<State, usize> = HashMap::new();
        let mut states = vec![self.start()];
        let mut back: Vec<Vec<usize>> = vec![Vec::new()];
        index.insert(states[0].clone(), 0);
        let mut next = Vec::new();
        let mut i = 0;
        while i < states.len() {
            next.clear();
            for r in 0..self.n {
                self.steps(&states[i], r, &mut next)?;
            }
            for t in next.drain(..) {
                if t == states[i] {
                    continue;
                }
                let j = match index.get(&t) {
                    Some(&j) => j,
                    None => {
                        index.insert(t.clone(), states.len());
                        states.push(t);
                        back.push(Vec::new());
                        states.len() - 1
                    }
                };
                back[j].push(i);
            }
            i += 1;
        }
        // The states from which every call can still finish.
        let mut can = vec![false; states.len()];
        let mut todo: Vec<usize> = (0..states.len())
            .filter(|&i| {
                states[i].host[..self.n]
                    .iter()
                    .all(|h| h.at == HostAt::Finished)
            })
            .collect();
        if todo.is_empty() {
            return Err("no interleaving finishes every call".into());
        }
        for &i in &todo {
            can[i] = true;
        }
        while let Some(i) = todo.pop() {
            for &j in &back[i] {
                if !can[j] {
                    can[j] = true;
                    todo.push(j);
                }
            }
        }
        match (0..states.len()).find(|&i| !can[i]) {
            None => Ok(states.len()),
            Some(i) => {
                let s = &states[i];
                let mut m = String::from("a state from which the calls cannot all finish:");
                for r in 0..self.n {
                    m += &format!(
                        "\n  rank {r}: host {:?} call {} flag {:#x} released {}, kernel {:?} \
                         call {} seen {:#b}, my words {:x?}",
                        s.host[r].at,
                        s.host[r].call,
                        s.host[r].flagv,
                        s.host[r].released,
                        s.kern[r].at,
                        s.kern[r].call,
                        s.kern[r].seen,
                        s.flags[r]
                    );
                }
                Err(m)
            }
        }
    }
}

/// The digest of an allreduce of `bytes` bytes of ints.
fn shape(bytes: usize) -> u16 {
    super::shape_digest(super::RES_ALLREDUCE, 0, 0, bytes)
}

/// The calls of tests/gpu/gpu_mismatch.c's case 7 on the resident kernel of MPI_COMM_WORLD:
/// a correct call before (so the given-up call has parity 0, as the call after it), the
/// mismatched allreduce (32 bytes at rank 0, 64 elsewhere), then two correct ones. Before
/// the barrier after a given-up call, a rank that gave up first wrote its next call's flag
/// into a peer's scratch before that peer's release overwrote it: the peer's kernel waited for
/// it for ever.
#[test]
fn a_given_up_call_never_blocks_the_next_ones() {
    let (a, b) = (shape(32), shape(64));
    assert_eq!(flag_value(0, 0, a) & 1, 1, "the first call has parity 1");
    for n in [2usize, 3] {
        let shapes: Vec<Vec<u16>> = (0..n)
            .map(|r| vec![a, if r == 0 { a } else { b }, a, a])
            .collect();
        let m = Model { n, shapes: &shapes };
        let states = m.check().unwrap_or_else(|e| panic!("{n} ranks: {e}"));
        assert!(
            states > 100,
            "{n} ranks: the model explored {states} states"
        );
    }
}

/// A given-up call after two correct ones (so the call after it has the parity of the call
/// before it, whose slots a late peer may still read), at three ranks: one rank differs, so
/// the others can give up while a peer still finishes the call before.
#[test]
fn a_given_up_call_never_disturbs_the_call_before() {
    let (a, b) = (shape(32), shape(64));
    let shapes: Vec<Vec<u16>> = (0..3)
        .map(|r| vec![a, a, if r == 1 { b } else { a }, a])
        .collect();
    let m = Model {
        n: 3,
        shapes: &shapes,
    };
    let states = m.check().unwrap_or_else(|e| panic!("{e}"));
    assert!(states > 100, "the model explored {states} states");
}
