//! Records of a collective call asked of ranks on other nodes.
//!
//! The record rings of `engine::collcheck` show a rank the calls of its own node's ranks only,
//! and the notes of `engine::collnote` travel with messages: a rank that waits in a call for a
//! rank on another node that called something else and sends it nothing (a reduce to another
//! root, a gather whose root is another rank) would learn nothing from either. So while a call
//! waits, the check asks the off-node ranks it waits on for their record of the call (`ASK`,
//! a header naming the context and sequence); their engine answers from its own ring as it
//! makes progress (`TELL`, the record's 32 bytes, or nothing while it has none), and the
//! waiting rank compares the answer as it would read the record on its node
//! (`engine::coll::CollExec::check_waiting`). Costs: nothing until a call has waited for
//! `collcheck::CHECK_EVERY`; then one small frame each way per peer waited on, repeated at
//! growing intervals only while the peer has no record of the call yet.
//!
//! Answers are kept per (peer, context, sequence), the last [`KEPT`]; asking again drops the
//! earlier answer, so a communicator that reuses a context id never reads an old one.

use super::collcheck::{Record, Rings};
use super::*;
use crate::transport::FLAG_UNLESS_GONE;

/// Answers kept.
const KEPT: usize = 64;

impl State {
    /// Peer `src` asks for this rank's record of call (`h.ctx`, `h.tag`).
    pub(super) fn on_ask(&mut self, src: usize, h: &Header) {
        let rec = self
            .records
            .and_then(|r| r.find(self.me, h.ctx, h.tag as u32));
        // The asker may have finished the call and ended meanwhile: the answer is dropped
        // where it is gone.
        let t = Header {
            kind: kind::TELL,
            flags: FLAG_UNLESS_GONE,
            ctx: h.ctx,
            tag: h.tag,
            ..Default::default()
        };
        match rec {
            Some(r) if src != self.me => {
                self.enqueue(src, Out::CtrlP(t, Box::from(&r.to_bytes()[..])))
            }
            _ => self.send_ctrl(src, t),
        }
    }

    /// Peer `src` told its record of call (`h.ctx`, `h.tag`) (payload `p`; empty: none yet).
    pub(super) fn on_tell(&mut self, src: usize, h: &Header, p: &[u8]) {
        let seq = h.tag as u32;
        let Some(rec) = Record::from_bytes(p, h.ctx, seq) else {
            return;
        };
        self.told
            .retain(|t| !(t.0 == src && t.1 == h.ctx && t.2 == seq));
        if self.told.len() == KEPT {
            self.told.pop_front();
        }
        self.told.push_back((src, h.ctx, seq, rec));
    }
}

impl Engine {
    /// This rank's collective record rings, from which it answers the peers' questions.
    pub fn set_records(&mut self, rings: Rings) {
        self.st.records = Some(rings);
    }

    /// Ask world rank `peer` (on another node) for its record of call (`ctx`, `seq`); an
    /// earlier answer is dropped.
    pub fn ask_record(&mut self, peer: usize, ctx: u32, seq: u32) {
        self.st
            .told
            .retain(|t| !(t.0 == peer && t.1 == ctx && t.2 == seq));
        self.st.send_ctrl(
            peer,
            // A rank asked may have finished its side of the call and ended: the question
            // is dropped where it is gone.
            Header {
                kind: kind::ASK,
                flags: FLAG_UNLESS_GONE,
                ctx,
                tag: seq as i32,
                ..Default::default()
            },
        );
        self.flush_all();
    }

    /// The record of call (`ctx`, `seq`) world rank `peer` told, if it did.
    pub fn told_record(&self, peer: usize, ctx: u32, seq: u32) -> Option<Record> {
        self.st
            .told
            .iter()
            .rev()
            .find(|t| t.0 == peer && t.1 == ctx && t.2 == seq)
            .map(|t| t.3)
    }
}
