//! The protocol of `engine::posted` in random interleavings: one sender, one receiver, a FIFO
//! channel of frames between them, the shared slot word, completion flags that land late.
//! Every run logs the order in which the receiver's matching logically happened (a receive
//! posted, a frame taken in, a claim, a cancel) and replays it through plain MPI matching (a
//! posted list and an unexpected queue): the matches and cancels must be the same.

use super::*;
use std::cell::Cell;
use std::collections::{HashMap, VecDeque};

struct CellSlot(Cell<u64>);

impl Slot for CellSlot {
    fn load(&self) -> Word {
        Word(self.0.get())
    }
    fn cas(&self, old: Word, new: Word) -> Result<(), Word> {
        let cur = self.0.get();
        if cur == old.0 {
            self.0.set(new.0);
            Ok(())
        } else {
            Err(Word(cur))
        }
    }
}

struct Lcg(u64);
impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

const CTX: u32 = 3;
const ME: i32 = 5; // the sender's rank in the communicator

#[derive(Clone, Copy, Debug)]
enum Ev {
    Post(usize),
    Arrive(usize),
    Cancel(usize),
}

#[derive(Default, Debug, PartialEq)]
struct Outcome {
    msg_to: HashMap<usize, usize>,
    cancelled: Vec<usize>,
}

/// Plain MPI matching of the logged events.
fn replay(log: &[Ev], msgs: &[MsgEnv], recvs: &[RecvEnv]) -> Outcome {
    let mut out = Outcome::default();
    let mut posted: Vec<usize> = Vec::new();
    let mut unexp: VecDeque<usize> = VecDeque::new();
    for e in log {
        match *e {
            Ev::Post(r) => {
                if let Some(i) = unexp.iter().position(|&m| recvs[r].matches(&msgs[m])) {
                    let m = unexp.remove(i).unwrap();
                    out.msg_to.insert(m, r);
                } else {
                    posted.push(r);
                }
            }
            Ev::Arrive(m) => {
                if let Some(i) = posted.iter().position(|&r| recvs[r].matches(&msgs[m])) {
                    out.msg_to.insert(m, posted.remove(i));
                } else {
                    unexp.push_back(m);
                }
            }
            Ev::Cancel(r) => {
                if let Some(i) = posted.iter().position(|&x| x == r) {
                    posted.remove(i);
                    out.cancelled.push(r);
                }
            }
        }
    }
    out
}

struct Run {
    slot: CellSlot,
    rx: Rx,
    tx: Tx,
    /// The envelope the receiver last wrote into the slot.
    slot_env: RecvEnv,
    msgs: Vec<MsgEnv>,
    msg_ok: Vec<bool>,
    recvs: Vec<RecvEnv>,
    recv_ok: Vec<bool>,
    next_msg: usize,
    next_recv: usize,
    channel: VecDeque<usize>,
    /// Claims whose flag has not landed: (message, receive, generation).
    flying: VecDeque<(usize, usize, u32)>,
    /// Flags landed: the generation.
    landed: Option<(usize, usize, u32)>,
    posted: Vec<usize>,
    unexp: VecDeque<usize>,
    published_id: Option<usize>,
    log: Vec<Ev>,
    got: Outcome,
    claims: usize,
}

impl Run {
    fn new(seed: u64, n: usize) -> Run {
        let mut g = Lcg(seed);
        let msgs: Vec<MsgEnv> = (0..n)
            .map(|_| MsgEnv {
                ctx: CTX,
                src: ME,
                tag: 1 + g.next(2) as i32,
                len: [8, 64, 200][g.next(3) as usize],
            })
            .collect();
        let msg_ok = (0..n).map(|_| g.next(4) != 0).collect();
        let recvs: Vec<RecvEnv> = (0..n)
            .map(|_| RecvEnv {
                ctx: if g.next(8) == 0 { CTX + 1 } else { CTX },
                src: if g.next(5) == 0 { ANY } else { ME },
                tag: [1, 2, ANY][g.next(3) as usize],
                cap: [64, 256][g.next(2) as usize],
            })
            .collect();
        let recv_ok = (0..n).map(|_| g.next(4) != 0).collect();
        Run {
            slot: CellSlot(Cell::new(0)),
            rx: Rx::default(),
            tx: Tx::default(),
            slot_env: RecvEnv {
                ctx: 0,
                src: ANY,
                tag: ANY,
                cap: 0,
            },
            msgs,
            msg_ok,
            recvs,
            recv_ok,
            next_msg: 0,
            next_recv: 0,
            channel: VecDeque::new(),
            flying: VecDeque::new(),
            landed: None,
            posted: Vec::new(),
            unexp: VecDeque::new(),
            published_id: None,
            log: Vec::new(),
            got: Outcome::default(),
            claims: 0,
        }
    }

    /// The receiver publishes the first posted receive that could match the sender, if it may.
    fn republish(&mut self) {
        if self.rx.published().is_some() {
            return;
        }
        let Some(i) = self
            .posted
            .iter()
            .position(|&r| self.recvs[r].could_match_from(CTX, ME))
        else {
            return;
        };
        let r = self.posted[i];
        let earlier: Vec<RecvEnv> = self.posted[..i].iter().map(|&x| self.recvs[x]).collect();
        if !may_publish(&self.recvs[r], self.recv_ok[r], &earlier) {
            return;
        }
        self.slot_env = self.recvs[r];
        assert!(self.rx.publish(&self.slot, self.recvs[r]));
        self.published_id = Some(r);
    }

    /// The receiver learned that its published receive was claimed: it leaves the posted list.
    fn drop_claimed(&mut self) {
        if let Some(r) = self.published_id {
            if let Some(i) = self.posted.iter().position(|&x| x == r) {
                self.posted.remove(i);
            }
        }
    }

    fn send(&mut self) {
        let m = self.next_msg;
        self.next_msg += 1;
        let w = self.slot.load();
        let env = self.slot_env;
        match self
            .tx
            .try_claim(&self.slot, w, &env, &self.msgs[m], self.msg_ok[m])
        {
            Some(gen) => {
                assert!(self.channel.is_empty(), "claim with frames in flight");
                let r = self.published_id.expect("a claim needs a publication");
                self.log.push(Ev::Arrive(m));
                self.got.msg_to.insert(m, r);
                self.flying.push_back((m, r, gen));
                self.claims += 1;
            }
            None => self.channel.push_back(m),
        }
    }

    fn take_frame(&mut self) {
        let Some(m) = self.channel.pop_front() else {
            return;
        };
        match self.rx.on_frame(&self.slot, &self.msgs[m]) {
            Frame::Claimed => self.drop_claimed(),
            Frame::Revoked => self.published_id = None,
            Frame::None | Frame::Kept => {}
        }
        self.log.push(Ev::Arrive(m));
        let found = self
            .posted
            .iter()
            .position(|&r| self.recvs[r].matches(&self.msgs[m]));
        match found {
            Some(i) => {
                let r = self.posted.remove(i);
                assert_ne!(
                    Some(r),
                    self.published_id,
                    "a frame matched a published receive"
                );
                self.got.msg_to.insert(m, r);
            }
            None => self.unexp.push_back(m),
        }
        self.republish();
    }

    fn post(&mut self) {
        let r = self.next_recv;
        self.next_recv += 1;
        self.log.push(Ev::Post(r));
        if let Some(i) = self
            .unexp
            .iter()
            .position(|&m| self.recvs[r].matches(&self.msgs[m]))
        {
            let m = self.unexp.remove(i).unwrap();
            self.got.msg_to.insert(m, r);
        } else {
            self.posted.push(r);
            self.republish();
        }
    }

    fn cancel(&mut self, pick: usize) {
        if self.posted.is_empty() {
            return;
        }
        let i = pick % self.posted.len();
        let r = self.posted[i];
        let ok = if self.published_id == Some(r) {
            let ok = self.rx.revoke(&self.slot);
            if ok {
                self.published_id = None;
            } else {
                // Claimed: the receive completes with the claimed message.
                assert!(
                    self.flying.iter().any(|f| f.1 == r) || self.landed.is_some_and(|f| f.1 == r)
                );
                self.drop_claimed();
            }
            ok
        } else {
            true
        };
        if ok {
            self.posted.retain(|&x| x != r);
            self.got.cancelled.push(r);
        }
        self.log.push(Ev::Cancel(r));
        self.republish();
    }

    fn land(&mut self) {
        if self.landed.is_none() {
            self.landed = self.flying.pop_front();
        }
    }

    fn poll(&mut self) {
        if let Some((_, r, gen)) = self.landed {
            if gen == self.rx.gen() {
                let env = self
                    .rx
                    .complete(&self.slot)
                    .expect("a landed flag completes");
                assert_eq!(env, self.recvs[r]);
                self.drop_claimed();
                self.published_id = None;
                self.landed = None;
                self.republish();
            }
        }
    }
}

fn one(seed: u64, n: usize) -> usize {
    let mut run = Run::new(seed, n);
    let mut g = Lcg(seed ^ 0x9e37_79b9);
    while run.next_msg < n
        || run.next_recv < n
        || !run.channel.is_empty()
        || !run.flying.is_empty()
        || run.landed.is_some()
    {
        match g.next(7) {
            0 if run.next_msg < n => run.send(),
            1 if run.next_recv < n => run.post(),
            2 => run.take_frame(),
            3 => run.land(),
            4 => run.poll(),
            5 if g.next(6) == 0 => {
                let p = g.next(64) as usize;
                run.cancel(p)
            }
            _ => {}
        }
    }
    let want = replay(&run.log, &run.msgs, &run.recvs);
    assert_eq!(
        run.got, want,
        "seed {seed}: matches and cancels differ from plain matching"
    );
    // Every message is matched or still unexpected, once.
    assert_eq!(run.got.msg_to.len() + run.unexp.len(), n, "seed {seed}");
    run.claims
}

/// Many random interleavings: every claim takes the receive a frame would have matched at that
/// point, so the matches and cancels equal plain MPI matching of the same order of events; a
/// good share of the messages go by claim.
#[test]
fn claims_match_like_frames_in_random_interleavings() {
    let mut claims = 0;
    for seed in 0..3000 {
        claims += one(seed, 24);
    }
    assert!(claims > 1000, "only {claims} claims in 3000 runs");
}

/// The sender claims only with every earlier message taken in, a matching envelope and room:
/// not with a frame in flight, not for another tag, not past the capacity.
#[test]
fn a_claim_needs_order_envelope_and_room() {
    let slot = CellSlot(Cell::new(0));
    let (mut rx, mut tx) = (Rx::default(), Tx::default());
    let r = RecvEnv {
        ctx: CTX,
        src: ME,
        tag: 7,
        cap: 64,
    };
    let m = |tag, len| MsgEnv {
        ctx: CTX,
        src: ME,
        tag,
        len,
    };
    // Frame A (tag 7) was sent before the publication and has not arrived: no claim, so the
    // message goes as frame B.
    tx.sent = 1;
    assert!(rx.publish(&slot, r));
    assert_eq!(tx.try_claim(&slot, slot.load(), &r, &m(7, 8), true), None);
    // A arrives and takes the receive back; published again, B does the same.
    assert_eq!(rx.on_frame(&slot, &m(7, 8)), Frame::Revoked);
    assert_eq!(slot.load().state(), State::Empty);
    assert!(rx.publish(&slot, r));
    assert_eq!(rx.on_frame(&slot, &m(7, 8)), Frame::Revoked);
    assert!(rx.publish(&slot, r));
    // Wrong tag, too long, not eligible: no claim; each goes as a frame, which keeps the
    // receive (another tag: `seen` moves on) or takes it back (it may match: the usual path
    // truncates the long one).
    for (tag, len, ok) in [(8, 8, true), (7, 65, true), (7, 8, false)] {
        assert_eq!(tx.try_claim(&slot, slot.load(), &r, &m(tag, len), ok), None);
        let f = rx.on_frame(&slot, &m(tag, len));
        if tag == 7 {
            assert_eq!(f, Frame::Revoked);
            assert!(rx.publish(&slot, r));
        } else {
            assert_eq!(f, Frame::Kept);
        }
    }
    assert_eq!(slot.load().seen(), tx.sent);
    let gen = tx.try_claim(&slot, slot.load(), &r, &m(7, 64), true);
    assert_eq!(gen, Some(rx.gen()));
    // Claimed: a cancel fails; the next message goes as a frame and cannot take it; the flag
    // completes it.
    assert!(!rx.revoke(&slot));
    assert_eq!(tx.try_claim(&slot, slot.load(), &r, &m(7, 8), true), None);
    assert_eq!(rx.on_frame(&slot, &m(7, 8)), Frame::Claimed);
    assert_eq!(rx.complete(&slot), Some(r));
    assert_eq!(slot.load().state(), State::Empty);
    assert_eq!(rx.taken, tx.sent);
}

/// An any-source receive is never published, nor one behind an earlier receive that could take
/// the sender's messages (any source or the same source, same communicator); a receive of
/// another communicator does not stand in the way.
#[test]
fn what_may_be_published() {
    let r = |ctx, src, tag| RecvEnv {
        ctx,
        src,
        tag,
        cap: 8,
    };
    assert!(may_publish(&r(CTX, ME, 1), true, &[]));
    assert!(!may_publish(&r(CTX, ME, 1), false, &[]));
    assert!(!may_publish(&r(CTX, ANY, 1), true, &[]));
    assert!(!may_publish(&r(CTX, ME, 1), true, &[r(CTX, ANY, 9)]));
    assert!(!may_publish(&r(CTX, ME, 1), true, &[r(CTX, ME, 2)]));
    assert!(may_publish(
        &r(CTX, ME, 1),
        true,
        &[r(CTX + 1, ANY, ANY), r(CTX, ME + 1, 1)]
    ));
}

/// A claim after the receiver published again (a new generation) fails even with the same
/// `seen`: the sender's word is stale.
#[test]
fn a_stale_word_cannot_claim_a_later_publication() {
    let slot = CellSlot(Cell::new(0));
    let (mut rx, mut tx) = (Rx::default(), Tx::default());
    let r = RecvEnv {
        ctx: CTX,
        src: ME,
        tag: ANY,
        cap: 64,
    };
    assert!(rx.publish(&slot, r));
    let stale = slot.load();
    assert!(rx.revoke(&slot));
    assert!(rx.publish(&slot, r));
    let m = MsgEnv {
        ctx: CTX,
        src: ME,
        tag: 1,
        len: 8,
    };
    assert_eq!(tx.try_claim(&slot, stale, &r, &m, true), None);
    assert_eq!(Word::new(State::Claimed, (1 << 22) + 5, 1 << 41).gen(), 5);
    assert_eq!(Word::new(State::Posted, 3, 77).seen(), 77);
    assert_eq!(Word::new(State::Posted, 3, 77).state(), State::Posted);
}
