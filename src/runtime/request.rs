//! Request objects behind `MPI_Request` handles: point-to-point operations in
//! the engine, nonblocking collectives, persistent templates, generalized
//! requests. Completion runs the request's post-processing step (unpacking a
//! derived-datatype receive into the user's buffer) exactly once.

use super::objects::CommObj;
use crate::engine::coll::CollExec;
use crate::engine::collcheck::{Rings, Watch};
use crate::engine::{Engine, ReqId};
use crate::mpi::error::{MpiError, MpiResult};
use crate::standard::consts as c;
use crate::standard::ffi::MPI_Status;
use std::sync::Arc;

/// Completion information, independent of the C layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Status {
    pub source: i32,
    pub tag: i32,
    pub error: i32,
    pub bytes: usize,
    pub cancelled: bool,
    /// A receive that failed because only ranks that called `MPI_Finalize` could match it
    /// (`engine::bye`; `source` names the rank, or is `MPI_ANY_SOURCE`).
    pub finalized: bool,
}

impl Status {
    /// The "empty" status of MPI 5.0 §3.7.3 (PROC_NULL, inactive requests).
    pub const EMPTY: Status = Status {
        source: c::MPI_ANY_SOURCE,
        tag: c::MPI_ANY_TAG,
        error: 0,
        bytes: 0,
        cancelled: false,
        finalized: false,
    };

    pub fn proc_null() -> Status {
        Status {
            source: c::MPI_PROC_NULL,
            ..Status::EMPTY
        }
    }

    /// Write into a C status (unless it is MPI_STATUS_IGNORE). `set_error` only for multiple completions.
    pub unsafe fn store(&self, st: *mut MPI_Status, set_error: bool) {
        if st.is_null() {
            return;
        }
        // SAFETY: non-null status pointers point at a caller-owned MPI_Status.
        let s = &mut *st;
        s.MPI_SOURCE = self.source;
        s.MPI_TAG = self.tag;
        if set_error {
            s.MPI_ERROR = self.error;
        }
        Self::set_count(s, self.bytes as i64, self.cancelled);
    }

    /// The error of a receive that only ranks that called `MPI_Finalize` could match
    /// ([`Status::finalized`]), else `None`.
    pub fn finalized_error(&self) -> Option<MpiError> {
        self.finalized.then(|| finalized_error(self.source))
    }

    pub fn set_count(s: &mut MPI_Status, bytes: i64, cancelled: bool) {
        s.MPI_internal[0] = bytes as u32 as i32;
        s.MPI_internal[1] = (bytes >> 32) as i32;
        s.MPI_internal[2] = cancelled as i32;
    }

    /// Bytes recorded in a C status.
    pub fn bytes_of(s: &MPI_Status) -> i64 {
        (s.MPI_internal[0] as u32 as i64) | ((s.MPI_internal[1] as i64) << 32)
    }

    pub fn cancelled_of(s: &MPI_Status) -> bool {
        s.MPI_internal[2] != 0
    }
}

impl From<crate::engine::Status> for Status {
    fn from(s: crate::engine::Status) -> Self {
        Status {
            source: s.source,
            tag: s.tag,
            error: s.error,
            bytes: s.bytes,
            cancelled: s.cancelled,
            finalized: s.finalized,
        }
    }
}

/// The error (`MPI_ERR_OTHER`) of a receive or probe from `source` (a communicator rank, or
/// `MPI_ANY_SOURCE`) that only ranks that called `MPI_Finalize` could match.
pub fn finalized_error(source: i32) -> MpiError {
    if source == c::MPI_ANY_SOURCE {
        MpiError::new(
            c::MPI_ERR_OTHER,
            "MPI_ANY_SOURCE: every other rank of the communicator called MPI_Finalize; \
             no message it sent before matches",
        )
    } else {
        MpiError::new(
            c::MPI_ERR_OTHER,
            format!(
                "rank {source} of the communicator called MPI_Finalize; \
                 no message it sent before matches"
            ),
        )
    }
}

/// Work to do when a request completes (e.g. unpack a temporary buffer).
pub type Post = Box<dyn FnOnce(&mut Status) -> MpiResult<()> + Send>;

/// Builds a fresh active operation each time a persistent request is started.
pub type Starter = Box<dyn FnMut(&mut Engine) -> MpiResult<ReqKind> + Send>;

/// The collective consistency check of a nonblocking collective still waiting
/// (`engine::collcheck`): the watch of its record and the record rings it reads (mapped while
/// the runtime, and so every request, lives).
pub struct CollCheck {
    pub watch: Watch,
    pub rings: Rings,
}

/// Generalized request callbacks (MPI 5.0 §13.2).
pub struct Grequest {
    pub query: usize,
    pub free: usize,
    pub cancel: usize,
    pub extra: usize,
    pub complete: bool,
}

pub enum ReqKind {
    /// A point-to-point operation in the engine; `hold` keeps a packed temporary alive.
    Engine {
        id: ReqId,
        post: Option<Post>,
        hold: Option<crate::gpu::pool::HostBuf>,
    },
    /// A nonblocking collective; `hold` keeps packed temporaries alive.
    Coll {
        exec: Box<CollExec>,
        post: Option<Post>,
        result: Option<MpiResult<()>>,
        hold: Vec<crate::gpu::pool::HostBuf>,
        /// The collective consistency check of a call still waiting.
        check: Option<Box<CollCheck>>,
    },
    /// Complete from the start (PROC_NULL and the like).
    Done(Status),
    Grequest(Grequest),
    /// A persistent request that has not been started (or has completed).
    Inactive,
    /// MPI_Isendrecv(_replace): complete when both halves are; the status is the receive's.
    Pair {
        recv: Box<Request>,
        send: Box<Request>,
        rst: Option<Status>,
        sst: Option<Status>,
    },
}

pub struct Request {
    pub kind: ReqKind,
    pub persistent: Option<Starter>,
    /// The communicator of the call that made the request: an error of its completion (in the
    /// Wait and Test families) is raised on its error handler.
    pub comm: Option<Arc<CommObj>>,
}

// SAFETY: requests hold raw user-buffer pointers that MPI semantics give to the library until
// completion; they are only touched under the runtime lock.
unsafe impl Send for Request {}

impl Request {
    pub fn new(kind: ReqKind) -> Self {
        Request {
            kind,
            persistent: None,
            comm: None,
        }
    }

    /// The request, its errors raised on `comm`'s handler.
    pub fn on(self, comm: &Arc<CommObj>) -> Self {
        Request {
            comm: Some(comm.clone()),
            ..self
        }
    }

    /// Advance a nonblocking collective; true when it needs no more progress calls.
    pub fn advance(&mut self, engine: &mut Engine) -> bool {
        match &mut self.kind {
            ReqKind::Coll {
                exec,
                result,
                check,
                ..
            } => {
                if result.is_some() {
                    return true;
                }
                match exec.advance(engine) {
                    // collcheck hook: a call that waits long compares its peers' records of it;
                    // a mismatch ends it with an error (what it still has posted is withdrawn).
                    Ok(false) => match check {
                        Some(c) => match c.watch.poll_with(&c.rings, || exec.check_waiting(engine))
                        {
                            Ok(()) => false,
                            Err(e) => {
                                // The ranks it still sends to learn it too (engine::collnote).
                                if !exec.is_done() {
                                    let found = c.watch.finding(&c.rings);
                                    exec.give_up(engine, found);
                                }
                                *result = Some(Err(e));
                                true
                            }
                        },
                        None => false,
                    },
                    Ok(true) => {
                        *result = Some(Ok(()));
                        true
                    }
                    Err(e) => {
                        *result = Some(Err(e));
                        true
                    }
                }
            }
            _ => true,
        }
    }

    /// Test for completion. On completion the post step runs and the request becomes
    /// `Inactive` (persistent) or should be freed by the caller (`Ok(Some(..))`).
    pub fn test(&mut self, engine: &mut Engine) -> MpiResult<Option<Status>> {
        self.test_with(engine, true)
    }

    /// [`Request::test`] for a caller that has just made progress (the wait loops, MPI_Test):
    /// a point-to-point request is only looked at, not progressed a second time.
    pub fn test_after_progress(&mut self, engine: &mut Engine) -> MpiResult<Option<Status>> {
        self.test_with(engine, false)
    }

    fn test_with(&mut self, engine: &mut Engine, progress: bool) -> MpiResult<Option<Status>> {
        let st = match &mut self.kind {
            ReqKind::Inactive => return Ok(Some(Status::EMPTY)),
            ReqKind::Done(s) => *s,
            ReqKind::Engine { id, .. } => {
                let s = if progress {
                    engine.test(*id)
                } else {
                    engine.take(*id)
                };
                match s {
                    Some(s) => Status::from(s),
                    None => return Ok(None),
                }
            }
            ReqKind::Coll { .. } => {
                self.advance(engine);
                let ReqKind::Coll { result, .. } = &mut self.kind else {
                    unreachable!()
                };
                match result.take() {
                    None => return Ok(None),
                    Some(Err(e)) => {
                        self.kind = ReqKind::Inactive;
                        return Err(e);
                    }
                    Some(Ok(())) => Status::EMPTY,
                }
            }
            ReqKind::Pair {
                recv,
                send,
                rst,
                sst,
            } => {
                if rst.is_none() {
                    *rst = recv.test_with(engine, progress)?;
                }
                if sst.is_none() {
                    *sst = send.test_with(engine, progress)?;
                }
                match (*rst, *sst) {
                    (Some(r), Some(s)) => Status {
                        error: if r.error != 0 { r.error } else { s.error },
                        ..r
                    },
                    _ => return Ok(None),
                }
            }
            ReqKind::Grequest(g) => {
                if !g.complete {
                    return Ok(None);
                }
                let mut cs = MPI_Status::default();
                if g.query != 0 {
                    // SAFETY: the user registered this MPI_Grequest_query_function.
                    let f: unsafe extern "C" fn(*mut std::ffi::c_void, *mut MPI_Status) -> i32 =
                        unsafe { std::mem::transmute(g.query) };
                    let rc = unsafe { f(g.extra as *mut _, &mut cs) };
                    if rc != 0 {
                        return Err(MpiError::new(
                            rc,
                            "the generalized request's query function failed",
                        ));
                    }
                }
                if g.free != 0 {
                    // SAFETY: the user registered this MPI_Grequest_free_function.
                    let f: unsafe extern "C" fn(*mut std::ffi::c_void) -> i32 =
                        unsafe { std::mem::transmute(g.free) };
                    unsafe { f(g.extra as *mut _) };
                }
                Status {
                    source: cs.MPI_SOURCE,
                    tag: cs.MPI_TAG,
                    error: cs.MPI_ERROR,
                    bytes: Status::bytes_of(&cs).max(0) as usize,
                    cancelled: Status::cancelled_of(&cs),
                    finalized: false,
                }
            }
        };
        let mut st = st;
        let old = std::mem::replace(&mut self.kind, ReqKind::Inactive);
        let post = match old {
            ReqKind::Engine { post, .. } | ReqKind::Coll { post, .. } => post,
            _ => None,
        };
        if let Some(p) = post {
            if !st.cancelled {
                p(&mut st)?;
            }
        }
        Ok(Some(st))
    }

    /// Whether the request is a persistent one.
    pub fn is_persistent(&self) -> bool {
        self.persistent.is_some()
    }
}
