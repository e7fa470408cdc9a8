//! Goodbyes: a rank entering `MPI_Finalize` tells its peers, and their receives that only it
//! could match fail instead of waiting forever.
//!
//! - **Saying it** ([`Engine::goodbye`], at the start of `MPI_Finalize`, before its barrier): a
//!   `BYE` frame to every peer this rank has a channel with ([`Transport::has_channel`]: every
//!   rank of its node; an off-node peer it opened a connection to, or has frames queued for),
//!   and to every peer that asked for it (`WATCH`, below). It is queued behind everything
//!   this rank sent that peer before, and a transport keeps each sender's order, so every
//!   earlier message is delivered (and matched) first. No connection is opened for it: an
//!   off-node peer never connected to was never sent anything.
//! - **Hearing it** (`BYE` from world rank `w`): `w` is marked finalized, and every posted
//!   receive that only finalized ranks can match completes at once with `MPI_ERR_OTHER` and
//!   [`Status::finalized`]: one from `w`, or `MPI_ANY_SOURCE` when every other rank of its
//!   communicator has finalized. A receive or probe made later that only such ranks can match
//!   fails the same way (after taking a message already here, which still matches first).
//!   `MPI_ERR_OTHER`: no standard class names a peer that has finalized (ULFM's
//!   `MPI_ERR_PROC_FAILED` is for failed processes and not in the standard ABI's `mpi.h`); the
//!   message names the peer.
//!   Which world ranks a communicator's ranks are is the runtime's knowledge, asked through
//!   [`Engine::set_members`] (only for contexts of point-to-point traffic: the library's own
//!   collective traffic, `MPI_Finalize`'s barrier included, is never failed).
//! - **Asking for it** (`WATCH`): a receive from an off-node peer that never connected to this
//!   rank would hear no goodbye. So a receive that has waited [`WATCH_AFTER`] for off-node
//!   ranks (found by a scan every [`SCAN_EVERY`] progress passes while receives are posted in a
//!   job that spans nodes) asks each of them once to say goodbye to this rank too (opening
//!   this rank's connection to it, which a long wait can afford); a rank asked after its
//!   goodbye answers at once.
//!
//! Costs for jobs that never finalize early: a branch on a counter where a receive or probe
//! would be posted or reported empty, and, in a job that spans nodes, a counter per progress
//! pass while receives are posted.

use super::*;
use crate::standard::consts::MPI_ERR_OTHER;
use crate::transport::FLAG_UNLESS_GONE;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A posted receive waiting at least this long for off-node ranks asks them for their goodbye.
pub const WATCH_AFTER: Duration = Duration::from_secs(1);
/// Progress passes between two looks at how long receives have waited (a look reads the clock).
const SCAN_EVERY: u32 = 1024;
/// Posted receives remembered from one scan to the next.
const SEEN_MAX: usize = 256;

/// The world ranks of a communicator's ranks by the context id of its point-to-point traffic
/// (`None`: not such a context).
pub type Members = Box<dyn Fn(u32) -> Option<Arc<[usize]>> + Send>;

/// What this rank knows about goodbyes (see the module documentation).
pub(super) struct Byes {
    members: Option<Members>,
    /// Per world rank: it said goodbye; how many did.
    gone: Vec<bool>,
    n_gone: usize,
    /// This rank said goodbye.
    said: bool,
    /// Per world rank: it asked for this rank's goodbye (`WATCH`), and this rank asked it.
    watchers: Vec<bool>,
    watched: Vec<bool>,
    /// Some peer is on another node (only then are waiting receives scanned).
    remote: bool,
    ticks: u32,
    /// The last scan, and the posted receives it saw.
    scan_at: Option<Instant>,
    seen: Vec<u64>,
}

impl Byes {
    /// Whether some peer is on another node.
    pub(super) fn remote(&self) -> bool {
        self.remote
    }

    pub(super) fn new(size: usize, near: &[bool]) -> Byes {
        Byes {
            members: None,
            gone: vec![false; size],
            n_gone: 0,
            said: false,
            watchers: vec![false; size],
            watched: vec![false; size],
            remote: near.iter().any(|&n| !n),
            ticks: 0,
            scan_at: None,
            seen: Vec::new(),
        }
    }
}

/// The status of a receive that only finalized ranks could match.
fn finalized_status(source: i32, tag: i32) -> Status {
    Status {
        source,
        tag,
        error: MPI_ERR_OTHER,
        finalized: true,
        ..Status::default()
    }
}

impl State {
    /// Whether some rank said goodbye (the one branch the receive paths pay).
    #[inline]
    pub(super) fn byes_heard(&self) -> bool {
        self.byes.n_gone != 0
    }

    /// Whether a receive or probe on (`ctx`, `src`) can only be matched by ranks that said
    /// goodbye: `Some` with the source to report (`src`, or `MPI_ANY_SOURCE` when every other
    /// rank of the communicator did).
    pub(super) fn finalized_source(&self, ctx: u32, src: i32) -> Option<i32> {
        if self.byes.n_gone == 0 {
            return None;
        }
        let members = (self.byes.members.as_ref()?)(ctx)?;
        let gone = |w: usize| w != self.me && self.byes.gone.get(w).copied().unwrap_or(false);
        if src == MPI_ANY_SOURCE {
            let others = members.iter().filter(|&&w| w != self.me);
            (others.clone().count() > 0 && others.copied().all(gone)).then_some(MPI_ANY_SOURCE)
        } else {
            let w = *members.get(usize::try_from(src).ok()?)?;
            gone(w).then_some(src)
        }
    }

    /// Completes a receive just made (not posted) that only finalized ranks can match; returns
    /// whether it did.
    pub(super) fn fail_if_finalized(&mut self, rreq: u64, ctx: u32, src: i32, tag: i32) -> bool {
        let Some(source) = self.finalized_source(ctx, src) else {
            return false;
        };
        if let Some(r) = self.reqs.get_mut(rreq) {
            r.status = finalized_status(source, tag);
        }
        self.complete(rreq);
        true
    }

    /// World rank `w` said goodbye: fail the posted receives that only finalized ranks can
    /// match now.
    pub(super) fn on_bye(&mut self, w: usize) {
        if w == self.me || std::mem::replace(&mut self.byes.gone[w], true) {
            return;
        }
        self.byes.n_gone += 1;
        tracing::debug!("engine: rank {w} called MPI_Finalize");
        // A receive waiting without a request is failed here like any posted one.
        self.direct_to_posted();
        let mut i = 0;
        while i < self.posted.len() {
            let p = &self.posted[i];
            let (rreq, ctx, src, tag) = (p.rreq, p.ctx, p.src, p.tag);
            match self.finalized_source(ctx, src) {
                Some(source) => {
                    self.posted.remove(i);
                    if let Some(Req {
                        kind: ReqKind::Recv(r),
                        status,
                        ..
                    }) = self.reqs.get_mut(rreq)
                    {
                        r.posted = false;
                        *status = finalized_status(source, tag);
                    }
                    self.complete(rreq);
                }
                None => i += 1,
            }
        }
    }

    /// World rank `w` asks for this rank's goodbye.
    pub(super) fn on_watch(&mut self, w: usize) {
        self.byes.watchers[w] = true;
        if self.byes.said {
            self.send_ctrl(w, bye_header());
        }
    }
}

fn bye_header() -> Header {
    // A peer that has ended needs no goodbye: dropped where it is gone.
    Header {
        kind: kind::BYE,
        flags: FLAG_UNLESS_GONE,
        ..Default::default()
    }
}

impl Engine {
    /// How this engine learns the world ranks of a communicator from its context id (see the
    /// module documentation; without it no receive fails for a finalized peer).
    pub fn set_members(&mut self, members: Members) {
        self.st.byes.members = Some(members);
    }

    /// Say goodbye (the start of `MPI_Finalize`): see the module documentation.
    pub fn goodbye(&mut self) {
        self.st.byes.said = true;
        for p in 0..self.size {
            if p != self.st.me
                && (self.st.byes.watchers[p]
                    || !self.st.outq[p].is_empty()
                    || self.tp.has_channel(p))
            {
                self.st.enqueue(p, Out::Ctrl(bye_header()));
            }
        }
        self.flush_all();
    }

    /// Whether a receive or probe on (`ctx`, `src`) can only be matched by ranks that called
    /// `MPI_Finalize`: `Some` with the source to report (`src`, or `MPI_ANY_SOURCE`).
    pub fn finalized_source(&self, ctx: u32, src: i32) -> Option<i32> {
        self.st.finalized_source(ctx, src)
    }

    /// Whether world rank `w` said goodbye.
    pub fn finalized(&self, w: usize) -> bool {
        self.st.byes.gone.get(w).copied().unwrap_or(false)
    }

    /// One progress pass's share of watching for receives that wait on off-node ranks.
    #[inline]
    pub(super) fn tick_watch(&mut self) {
        if !self.st.byes.remote || self.st.posted.is_empty() {
            return;
        }
        self.st.byes.ticks = self.st.byes.ticks.wrapping_add(1);
        if self.st.byes.ticks.is_multiple_of(SCAN_EVERY) {
            self.scan_waiting(Instant::now());
        }
    }

    /// Asks the off-node ranks that receives posted since the last scan (at least
    /// [`WATCH_AFTER`] ago) wait for to say goodbye to this rank too.
    pub(super) fn scan_waiting(&mut self, now: Instant) {
        if self
            .st
            .byes
            .scan_at
            .is_some_and(|t| now.duration_since(t) < WATCH_AFTER)
        {
            return;
        }
        let Some(members) = self.st.byes.members.as_ref() else {
            return;
        };
        let prev = std::mem::take(&mut self.st.byes.seen);
        let mut ask = Vec::new();
        for p in self.st.posted.iter().take(SEEN_MAX) {
            self.st.byes.seen.push(p.rreq);
            if !prev.contains(&p.rreq) {
                continue;
            }
            let Some(m) = members(p.ctx) else {
                continue;
            };
            let from: &[usize] = if p.src == MPI_ANY_SOURCE {
                &m
            } else {
                match usize::try_from(p.src).ok().and_then(|s| m.get(s)) {
                    Some(w) => std::slice::from_ref(w),
                    None => continue,
                }
            };
            for &w in from {
                let b = &self.st.byes;
                if w != self.st.me && !self.st.near[w] && !b.watched[w] && !b.gone[w] {
                    ask.push(w);
                }
            }
        }
        self.st.byes.scan_at = Some(now);
        for w in ask {
            if !std::mem::replace(&mut self.st.byes.watched[w], true) {
                tracing::debug!("engine: a receive waits on rank {w}: asking for its goodbye");
                self.st.send_ctrl(
                    w,
                    Header {
                        kind: kind::WATCH,
                        ..Default::default()
                    },
                );
            }
        }
        self.flush_all();
    }
}
