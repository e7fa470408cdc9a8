//! The collective consistency check between nodes: notes on collective messages.
//!
//! The record rings of `engine::collcheck` show a rank the calls of the ranks of its own node
//! only. On a communicator whose ranks span nodes, a schedule's messages carry what the
//! receiver needs instead, with no message of their own:
//!
//! - every message to a rank on another node carries a [`Note`] of the sender's call (its
//!   collective, root and byte count: the fields of its record; the call's number is the
//!   message's tag), appended to the message's first frame (`engine`'s `FLAG_NOTE`);
//! - the receiver compares a note with its own call ([`disagreement`]), and a receive whose
//!   length differs from what the schedule expects (a schedule's receives are exact, so
//!   the sender's call was another one) is a mismatch too, told by the sender's note or,
//!   on this node, by its record;
//! - a rank that found a mismatch in a call ([`Found`]) puts it into the notes of every
//!   message it still sends in the call, to ranks on every node, and sends at once what
//!   its schedule still has to send, without waiting for its receives (which the ranks of
//!   the other call may never send): so the ranks downstream of the disagreement, which
//!   may agree with this rank and have nothing to wait for, learn it from the first
//!   message they receive ([`CrossCheck`], used by `engine::coll::CollExec`).
//!
//! The classes are those of the check inside a node ([`collcheck::mismatch`]): a different
//! collective is `MPI_ERR_OTHER`, a different root `MPI_ERR_ROOT`, a different byte count
//! `MPI_ERR_TRUNCATE`; the message names the call, both ranks and both calls, and the rank that
//! found it when that is a third one.

pub use super::collcheck::Found;
use super::collcheck::{self, call_name, comm_name, mismatch, Record, Rings};
use crate::mpi::error::MpiError;
use crate::standard::consts::{MPI_ERR_OTHER, MPI_ERR_TRUNCATE};
use std::time::{Duration, Instant};

/// Bytes of an encoded [`Note`].
pub const NOTE_BYTES: usize = 48;

/// What a collective message carries of its sender's call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Note {
    /// The sender's record of the call (its context and sequence are the receiver's: the
    /// message's context and tag say them).
    pub call: Record,
    /// The disagreement the sender found in this call.
    pub found: Option<Found>,
}

const FOUND: u64 = 1;
const FOUND_CALL: u64 = 2;
const MAGIC: u64 = 0x6e6f_7465 << 32;

fn check(w: &[u64; 5]) -> u64 {
    w.iter().fold(0x2545_f491_4f6c_dd1d_u64, |h, &x| {
        (h ^ x).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29)
    })
}

impl Note {
    /// Words: the call (collcheck's record word, byte count), the found call (the same), the
    /// flags with the found class and rank, a hash of the five.
    pub fn encode(&self) -> [u8; NOTE_BYTES] {
        let (fw, fb, flags) = match self.found {
            None => (0, 0, 0),
            Some(f) => {
                let (fw, fb, has) = match f.call {
                    Some(c) => (c.call_word(), c.bytes, FOUND_CALL),
                    None => (0, 0, 0),
                };
                let class = (f.class as u32 as u64 & 0xffff) << 8;
                (fw, fb, FOUND | has | class | (f.rank as u64) << 32)
            }
        };
        let w = [self.call.call_word(), self.call.bytes, fw, fb, flags];
        let mut out = [0u8; NOTE_BYTES];
        for (i, x) in w.iter().chain([check(&w) ^ MAGIC].iter()).enumerate() {
            out[i * 8..i * 8 + 8].copy_from_slice(&x.to_le_bytes());
        }
        out
    }

    /// The note in `b`, carried by a message of call (`ctx`, `seq`); `None` when `b` is not
    /// one.
    pub fn decode(b: &[u8; NOTE_BYTES], ctx: u32, seq: u32) -> Option<Note> {
        let mut w = [0u64; 6];
        for (i, x) in w.iter_mut().enumerate() {
            *x = u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().ok()?);
        }
        let words: [u64; 5] = w[..5].try_into().ok()?;
        if w[5] != check(&words) ^ MAGIC {
            return None;
        }
        let call = Record::from_call_word(ctx, seq, w[0], w[1])?;
        let flags = w[4];
        let found = if flags & FOUND != 0 {
            Some(Found {
                class: ((flags >> 8) & 0xffff) as u16 as i32,
                rank: (flags >> 32) as u32,
                call: if flags & FOUND_CALL != 0 {
                    Some(Record::from_call_word(ctx, seq, w[2], w[3])?)
                } else {
                    None
                },
            })
        } else {
            None
        };
        Some(Note { call, found })
    }
}

/// How the note of a message from rank `from` disagrees with this rank's call `mine`: the
/// sender's own call first, then what the sender found (a rank that agrees with the sender
/// disagrees with the call the sender found).
pub fn disagreement(mine: &Record, from: usize, note: &Note) -> Option<Found> {
    if let Some(class) = mismatch(mine, &note.call) {
        return Some(Found {
            class,
            rank: from as u32,
            call: Some(note.call),
        });
    }
    let f = note.found?;
    match f.call {
        Some(c) => Some(match mismatch(mine, &c) {
            Some(class) => Found { class, ..f },
            None => f,
        }),
        None => Some(f),
    }
}

/// What a receive of `got` bytes from rank `from` says where this rank's schedule expects
/// `want` (`truncated`: more came than fit): a disagreement when the lengths differ, told by
/// the sender's call `theirs` (its note, or its record on this node) where known.
pub fn short(
    mine: &Record,
    from: usize,
    theirs: Option<Record>,
    sizes_differ: bool,
) -> Option<Found> {
    if !sizes_differ {
        return None;
    }
    Some(
        match theirs.and_then(|t| mismatch(mine, &t).map(|c| (c, t))) {
            Some((class, t)) => Found {
                class,
                rank: from as u32,
                call: Some(t),
            },
            None => Found {
                class: MPI_ERR_TRUNCATE,
                rank: from as u32,
                call: None,
            },
        },
    )
}

/// The error of `f`, found by rank `my_rank` (calling `mine`) in a message from rank `from`
/// that carried `got` bytes where its schedule expected `want`.
pub fn error(
    f: &Found,
    my_rank: usize,
    mine: &Record,
    from: usize,
    (got, want): (usize, usize),
) -> MpiError {
    let by = if f.rank as usize != from {
        format!(" (found by rank {from}, which sent it on)")
    } else {
        String::new()
    };
    match f.call {
        Some(c) => {
            let mut e = collcheck::mismatch_error(f.class, my_rank, mine, f.rank as usize, &c);
            e.msg += &by;
            e
        }
        None if by.is_empty() => MpiError::new(
            f.class,
            format!(
                "collective mismatch on {} (its collective {}): a message of rank {from} in it \
                 carried {got} bytes where rank {my_rank}, which called {}, expects {want}",
                comm_name(mine.ctx),
                call_name(mine.seq),
                mine.describe()
            ),
        ),
        None => MpiError::new(
            f.class,
            format!(
                "collective mismatch on {} (its collective {}): rank {} called another \
                 collective or count than rank {my_rank}, which called {}{by}",
                comm_name(mine.ctx),
                call_name(mine.seq),
                f.rank,
                mine.describe()
            ),
        ),
    }
}

/// The check of one schedule's messages on a communicator that spans nodes.
pub struct CrossCheck {
    rec: Record,
    my_rank: usize,
    /// The record rings of this node: a sender on this node is told by its record.
    rings: Option<Rings>,
    /// The note of messages to other nodes while nothing was found.
    plain: [u8; NOTE_BYTES],
    /// What this rank found, and the note every later message carries.
    found: Option<(Found, [u8; NOTE_BYTES])>,
    /// Off-node ranks asked for their record of the call (`engine::ask`): world rank, when
    /// to ask again, the interval after that.
    asks: Vec<(usize, Instant, Duration)>,
}

/// The longest interval between two questions to a rank that has no record of the call yet.
const ASK_MAX: Duration = Duration::from_secs(1);

impl CrossCheck {
    pub fn new(rec: Record, my_rank: usize, rings: Option<Rings>) -> Self {
        CrossCheck {
            rec,
            my_rank,
            rings,
            plain: Note {
                call: rec,
                found: None,
            }
            .encode(),
            found: None,
            asks: Vec::new(),
        }
    }

    /// This rank's record of the call.
    pub fn record(&self) -> &Record {
        &self.rec
    }

    /// Whether world rank `world` was asked for its record of the call.
    pub fn asked(&self, world: usize) -> bool {
        self.asks.iter().any(|a| a.0 == world)
    }

    /// Whether to ask world rank `world` for its record of the call at `now`: at once the
    /// first time, then at intervals doubling from [`collcheck::CHECK_EVERY`] up to
    /// [`ASK_MAX`] (it has none yet: it has not reached the call).
    pub fn ask_due(&mut self, world: usize, now: Instant) -> bool {
        match self.asks.iter_mut().find(|a| a.0 == world) {
            None => {
                self.asks
                    .push((world, now + collcheck::CHECK_EVERY, collcheck::CHECK_EVERY));
                true
            }
            Some(a) if now >= a.1 => {
                a.2 = (a.2 * 2).min(ASK_MAX);
                a.1 = now + a.2;
                true
            }
            Some(_) => false,
        }
    }

    /// Rank `from` (on another node) told its record of the call, `theirs`: the error when it
    /// disagrees with this rank's (remembered for the later notes).
    pub fn told(&mut self, from: usize, theirs: Record) -> Option<MpiError> {
        let class = mismatch(&self.rec, &theirs)?;
        let f = Found {
            class,
            rank: from as u32,
            call: Some(theirs),
        };
        self.keep(f);
        Some(error(&f, self.my_rank, &self.rec, from, (0, 0)))
    }

    /// The note of a message to a rank on this node (`near`) or another.
    pub fn note_to(&self, near: bool) -> Option<[u8; NOTE_BYTES]> {
        match &self.found {
            Some((_, n)) => Some(*n),
            None if near => None,
            None => Some(self.plain),
        }
    }

    /// Whether this rank found a disagreement in the call.
    pub fn found(&self) -> bool {
        self.found.is_some()
    }

    /// Remember `f` (the first finding counts) for the notes of later messages.
    pub fn keep(&mut self, f: Found) {
        if self.found.is_none() {
            let n = Note {
                call: self.rec,
                found: Some(f),
            };
            self.found = Some((f, n.encode()));
        }
    }

    /// A message from rank `from` with `note` that no receive of the schedule took: the error
    /// when the note disagrees with this rank's call (remembered for the later notes).
    pub fn noted(&mut self, from: usize, note: [u8; NOTE_BYTES]) -> Option<MpiError> {
        let n = Note::decode(&note, self.rec.ctx, self.rec.seq)?;
        let f = disagreement(&self.rec, from, &n)?;
        self.keep(f);
        Some(error(&f, self.my_rank, &self.rec, from, (0, 0)))
    }

    /// A send to rank `from` was refused: `from` gave up the call before it received it, and
    /// answered with `note` (what it found). The error (remembered for the later notes): the
    /// disagreement the note shows, else the refusal itself (`MPI_ERR_OTHER`).
    pub fn refused(&mut self, from: usize, note: Option<[u8; NOTE_BYTES]>) -> MpiError {
        let n = note.and_then(|b| Note::decode(&b, self.rec.ctx, self.rec.seq));
        if let Some(f) = n.as_ref().and_then(|n| disagreement(&self.rec, from, n)) {
            self.keep(f);
            return error(&f, self.my_rank, &self.rec, from, (0, 0));
        }
        self.keep(Found {
            class: MPI_ERR_OTHER,
            rank: from as u32,
            call: n.map(|n| n.call),
        });
        MpiError::new(
            MPI_ERR_OTHER,
            format!(
                "collective mismatch on {} (its collective {}): rank {from} gave up the call \
                 before it received the message of rank {}, which called {}",
                comm_name(self.rec.ctx),
                call_name(self.rec.seq),
                self.my_rank,
                self.rec.describe()
            ),
        )
    }

    /// A receive from rank `from` (world rank `world`) completed with `got` bytes where the
    /// schedule expects `want` (`truncated`: more came), carrying `note`: the error when it
    /// shows a disagreement (remembered for the later notes).
    pub fn received(
        &mut self,
        from: usize,
        world: usize,
        note: Option<[u8; NOTE_BYTES]>,
        (got, want, truncated): (usize, usize, bool),
    ) -> Option<MpiError> {
        let note = note.and_then(|b| Note::decode(&b, self.rec.ctx, self.rec.seq));
        let f = note
            .as_ref()
            .and_then(|n| disagreement(&self.rec, from, n))
            .or_else(|| {
                let theirs = note.map(|n| n.call).or_else(|| {
                    self.rings
                        .as_ref()
                        .and_then(|r| r.find(world, self.rec.ctx, self.rec.seq))
                });
                short(&self.rec, from, theirs, got != want || truncated)
            })?;
        self.keep(f);
        Some(error(&f, self.my_rank, &self.rec, from, (got, want)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coll::CollKind;
    use crate::engine::collcheck::{Path, ANY_BYTES, NO_ROOT};
    use crate::standard::consts::MPI_ERR_ROOT;

    fn rec(kind: CollKind, root: usize, bytes: usize) -> Record {
        Record::new(7, 12, kind, root, bytes, Path::Schedule)
    }

    #[test]
    fn notes_round_trip() {
        for kind in CollKind::ALL {
            let call = rec(kind, 3, 400_000);
            for found in [
                None,
                Some(Found {
                    class: MPI_ERR_TRUNCATE,
                    rank: u32::MAX - 1,
                    call: Some(rec(CollKind::Bcast, 0, 40)),
                }),
                Some(Found {
                    class: MPI_ERR_OTHER,
                    rank: 5,
                    call: None,
                }),
            ] {
                let n = Note { call, found };
                assert_eq!(Note::decode(&n.encode(), 7, 12), Some(n));
            }
        }
        let big = Record {
            bytes: (1 << 50) + 3,
            root: u32::MAX - 2,
            ..rec(CollKind::Bcast, 0, 0)
        };
        let n = Note {
            call: big,
            found: None,
        };
        assert_eq!(Note::decode(&n.encode(), 7, 12), Some(n));
        // The context and sequence are the message's.
        assert_eq!(Note::decode(&n.encode(), 9, 1).unwrap().call.ctx, 9);
        // A damaged note is not one.
        let mut b = n.encode();
        b[9] ^= 1;
        assert_eq!(Note::decode(&b, 7, 12), None);
        assert_eq!(Note::decode(&[0; NOTE_BYTES], 7, 12), None);
    }

    #[test]
    fn notes_disagree_with_the_classes_of_the_node_check() {
        let mine = rec(CollKind::Bcast, 0, 40);
        let note = |call| Note { call, found: None };
        assert_eq!(disagreement(&mine, 2, &note(mine)), None);
        let f = disagreement(&mine, 2, &note(rec(CollKind::Bcast, 0, 400_000))).unwrap();
        assert_eq!((f.class, f.rank), (MPI_ERR_TRUNCATE, 2));
        let f = disagreement(&mine, 2, &note(rec(CollKind::Bcast, 1, 40))).unwrap();
        assert_eq!(f.class, MPI_ERR_ROOT);
        let f = disagreement(&mine, 2, &note(rec(CollKind::Reduce, 0, 40))).unwrap();
        assert_eq!(f.class, MPI_ERR_OTHER);
        // What the fields of a correct program may differ in is not compared.
        let g = rec(CollKind::Gatherv, 1, 8);
        assert_eq!(
            (g.bytes, rec(CollKind::Allreduce, 4, 8).root),
            (ANY_BYTES, NO_ROOT)
        );
        assert_eq!(
            disagreement(&g, 2, &note(rec(CollKind::Gatherv, 1, 80))),
            None
        );
        let a = rec(CollKind::Allreduce, 0, 8);
        assert_eq!(
            disagreement(&a, 2, &note(rec(CollKind::Allreduce, 3, 8))),
            None
        );
    }

    /// A rank that agrees with the sender learns from the sender's finding: the finding's call
    /// decides the class where known.
    #[test]
    fn findings_travel() {
        let mine = rec(CollKind::Bcast, 0, 40);
        let other = rec(CollKind::Bcast, 0, 400_000);
        let sent = Note {
            call: mine,
            found: Some(Found {
                class: MPI_ERR_TRUNCATE,
                rank: 0,
                call: Some(other),
            }),
        };
        let f = disagreement(&mine, 2, &sent).unwrap();
        assert_eq!(f, sent.found.unwrap());
        let e = error(&f, 3, &mine, 2, (40, 40));
        assert_eq!(e.class, MPI_ERR_TRUNCATE);
        assert!(
            e.msg
                .contains("rank 0 called bcast (root 0) of 400000 bytes")
                && e.msg.contains("rank 3 called bcast (root 0) of 40 bytes")
                && e.msg.contains("found by rank 2")
                && e.msg.contains("collective #12"),
            "{}",
            e.msg
        );
        // A rank whose call is the found one disagrees with the sender's own call.
        let f = disagreement(&other, 2, &sent).unwrap();
        assert_eq!((f.class, f.rank, f.call), (MPI_ERR_TRUNCATE, 2, Some(mine)));
        // A rank that agrees with both (another difference: the sender's path) takes the
        // finding as it is.
        let unknown = Note {
            call: mine,
            found: Some(Found {
                class: MPI_ERR_OTHER,
                rank: 1,
                call: None,
            }),
        };
        let f = disagreement(&mine, 2, &unknown).unwrap();
        let e = error(&f, 3, &mine, 2, (40, 40));
        assert_eq!(e.class, MPI_ERR_OTHER);
        assert!(
            e.msg.contains("rank 1 called another") && e.msg.contains("found by rank 2"),
            "{}",
            e.msg
        );
    }

    #[test]
    fn lengths_that_differ_are_mismatches() {
        let mine = rec(CollKind::Bcast, 0, 400_000);
        assert_eq!(short(&mine, 1, None, false), None);
        let f = short(&mine, 1, None, true).unwrap();
        assert_eq!((f.class, f.call), (MPI_ERR_TRUNCATE, None));
        let e = error(&f, 2, &mine, 1, (40, 200_000));
        assert!(
            e.msg.contains("rank 1 in it carried 40 bytes where rank 2")
                && e.msg.contains("expects 200000"),
            "{}",
            e.msg
        );
        // The sender's call, where known, names the difference.
        let f = short(&mine, 1, Some(rec(CollKind::Reduce, 0, 400_000)), true).unwrap();
        assert_eq!(f.class, MPI_ERR_OTHER);
    }

    #[test]
    fn a_cross_check_notes_messages_off_the_node_until_it_finds() {
        let mine = rec(CollKind::Bcast, 0, 40);
        let mut c = CrossCheck::new(mine, 3, None);
        assert_eq!(c.note_to(true), None, "nothing on the node while all agree");
        let plain = c.note_to(false).unwrap();
        assert_eq!(Note::decode(&plain, 7, 12).unwrap().call, mine);
        // A matching note and length: nothing.
        assert!(c.received(2, 2, Some(plain), (40, 40, false)).is_none());
        assert!(!c.found());
        // A note of another count: the error, and every later note says so, on the node too.
        let theirs = Note {
            call: rec(CollKind::Bcast, 0, 400_000),
            found: None,
        };
        let e = c
            .received(0, 0, Some(theirs.encode()), (40, 40, true))
            .unwrap();
        assert_eq!(e.class, MPI_ERR_TRUNCATE);
        assert!(c.found());
        let later = Note::decode(&c.note_to(true).unwrap(), 7, 12).unwrap();
        assert_eq!(later.found.unwrap().call, Some(theirs.call));
        assert_eq!(later.found.unwrap().rank, 0);
        // The first finding stays.
        c.received(1, 1, None, (4, 40, false)).unwrap();
        let later = Note::decode(&c.note_to(false).unwrap(), 7, 12).unwrap();
        assert_eq!(later.found.unwrap().rank, 0);
    }

    /// A call waiting on ranks of other nodes asks each of them at once, then at intervals
    /// that double up to ASK_MAX while they have no record of it; a record told that
    /// disagrees is a mismatch of the node check's classes, kept for the later notes.
    #[test]
    fn off_node_ranks_are_asked_at_growing_intervals_and_their_records_compared() {
        let ms = Duration::from_millis;
        let mut c = CrossCheck::new(rec(CollKind::Reduce, 0, 32), 0, None);
        let t0 = Instant::now();
        assert!(!c.asked(5));
        assert!(c.ask_due(5, t0));
        assert!(c.asked(5) && !c.asked(6));
        assert!(!c.ask_due(5, t0 + ms(10)));
        assert!(c.ask_due(5, t0 + ms(20)));
        assert!(!c.ask_due(5, t0 + ms(50)));
        assert!(c.ask_due(5, t0 + ms(60)));
        assert!(c.ask_due(6, t0 + ms(60)), "each rank on its own clock");
        let mut t = t0 + ms(60);
        for _ in 0..12 {
            t += ASK_MAX;
            assert!(c.ask_due(5, t));
        }
        assert!(!c.ask_due(5, t + ASK_MAX - ms(1)), "at most every ASK_MAX");
        assert!(c.ask_due(5, t + ASK_MAX));
        // Records told: the same call is no finding; another root is.
        assert!(c.told(1, rec(CollKind::Reduce, 0, 32)).is_none());
        assert!(!c.found());
        let e = c.told(1, rec(CollKind::Reduce, 1, 32)).unwrap();
        assert_eq!(e.class, MPI_ERR_ROOT);
        assert!(e.msg.contains("rank 1 called reduce (root 1)"), "{}", e.msg);
        assert!(e.msg.contains("rank 0 called reduce (root 0)"), "{}", e.msg);
        assert!(c.found());
        let n = Note::decode(&c.note_to(false).unwrap(), 7, 12).unwrap();
        assert_eq!(n.found.unwrap().rank, 1);
        let mut c = CrossCheck::new(rec(CollKind::Gather, 1, 4), 3, None);
        let e = c.told(0, rec(CollKind::Bcast, 0, 16)).unwrap();
        assert_eq!(e.class, MPI_ERR_OTHER);
        let mut c = CrossCheck::new(rec(CollKind::Allreduce, 0, 8), 1, None);
        assert_eq!(
            c.told(0, rec(CollKind::Allreduce, 0, 8000)).unwrap().class,
            MPI_ERR_TRUNCATE
        );
    }
}
