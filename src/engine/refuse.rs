//! Messages of a collective call this rank gave up (its ranks called different collectives,
//! `engine::coll::CollExec::give_up`): nothing will ever receive them here, so they are refused
//! instead of waiting in the unexpected queue forever.
//!
//! A rendezvous sender waits for its receiver; were the receiver's side of the call gone, the
//! sender would wait forever (a rank that agrees with the call the receiver found wrong, and
//! sends to it, may have nothing else to learn the mismatch from: its own receives are done).
//! So the receiver answers such an RTS with `REFUSE`, carrying its note of the call (what it
//! found, `engine::collnote`), and the send completes with `MPI_ERR_OTHER`; the sender's
//! schedule then fails the call with the class the note gives. Eager messages of the call
//! (complete, nobody to take them) are dropped.
//!
//! The calls given up are kept per context and tag (a call's tag is unique on its context
//! until 2^30 more calls), the last [`KEPT`] of them; a context's entries go with its
//! communicator ([`super::Engine::forget_refused`]), since a new communicator with the same
//! context id numbers its calls from 0 again.

use super::*;

/// Calls given up whose late messages are refused.
const KEPT: usize = 64;

impl State {
    /// Whether messages of (`ctx`, `tag`) are refused, with the note to answer them.
    fn refusal(&self, ctx: u32, tag: i32) -> Option<Option<Note>> {
        self.refused
            .iter()
            .rev()
            .find(|r| r.0 == ctx && r.1 == tag)
            .map(|r| r.2)
    }

    /// Refuse the messages of the given-up call (`ctx`, `tag`) from now on, and those
    /// already waiting unexpected.
    pub(super) fn refuse(&mut self, ctx: u32, tag: i32, note: Option<Note>) {
        if self.refused.len() == KEPT {
            self.refused.pop_front();
        }
        self.refused.push_back((ctx, tag, note));
        let waiting: Vec<u64> = self
            .unexp_order
            .iter()
            .copied()
            .filter(|&u| {
                self.unexp.get(u).is_some_and(|m| {
                    m.ctx == ctx
                        && m.tag == tag
                        && match &m.body {
                            UBody::Rndv { .. } => true,
                            UBody::Eager { data } => data.len() >= m.total,
                        }
                })
            })
            .collect();
        for u in waiting {
            self.unexp_order.retain(|&x| x != u);
            if let Some(m) = self.unexp.remove(u) {
                if matches!(m.body, UBody::Rndv { .. }) {
                    self.send_refusal(m.src_world, m.sreq, note);
                }
            }
        }
    }

    /// Forget the calls given up on context `ctx`.
    pub(super) fn forget_refused(&mut self, ctx: u32) {
        self.refused.retain(|r| r.0 != ctx);
    }

    /// A new message (the first frame of `h`, payload `p` without its note) that no posted
    /// receive took: `true` when it belongs to a call given up, and is refused (RTS) or
    /// dropped (an eager message that is complete).
    pub(super) fn refused_message(&mut self, src_world: usize, h: &Header, p: &[u8]) -> bool {
        let Some(note) = self.refusal(h.ctx, h.tag) else {
            return false;
        };
        if h.kind == kind::RTS {
            self.send_refusal(src_world, h.sreq, note);
            true
        } else {
            p.len() as u64 >= h.total
        }
    }

    fn send_refusal(&mut self, dst: usize, sreq: u64, note: Option<Note>) {
        let h = Header {
            kind: kind::REFUSE,
            sreq,
            ..Default::default()
        };
        match note {
            Some(n) if dst != self.me => self.enqueue(dst, Out::CtrlP(h, Box::from(&n[..]))),
            _ => self.send_ctrl(dst, h),
        }
    }

    /// The receiver refused send `sreq` (`kind::REFUSE`, payload `p`: its note or nothing).
    pub(super) fn on_refuse(&mut self, sreq: u64, p: &[u8]) {
        let Some(Req {
            kind: ReqKind::Send(s),
            status,
            done: false,
            ..
        }) = self.reqs.get_mut(sreq)
        else {
            return;
        };
        s.refused = Some(p.try_into().ok());
        status.error = crate::standard::consts::MPI_ERR_OTHER;
        self.complete(sreq);
    }
}

impl Engine {
    /// Refuse the messages of collective call (`ctx`, `tag`), which this rank gave up, from
    /// now on (see the module documentation): a rendezvous sender is answered with `note`.
    pub fn refuse(&mut self, ctx: u32, tag: i32, note: Option<Note>) {
        self.st.refuse(ctx, tag, note);
        self.flush_all();
    }

    /// Forget the calls given up on context `ctx` (its communicator is freed).
    pub fn forget_refused(&mut self, ctx: u32) {
        self.st.forget_refused(ctx);
    }

    /// Whether the receiver refused send `req` (its call there was given up), with the note
    /// it answered; `None`: not refused, or not a send.
    pub fn refused(&self, req: ReqId) -> Option<Option<Note>> {
        match self.st.reqs.get(req.0) {
            Some(Req {
                kind: ReqKind::Send(s),
                ..
            }) => s.refused,
            _ => None,
        }
    }
}
