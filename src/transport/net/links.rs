//! Connection set-up between the ranks of a job on several nodes, on first use.
//!
//! Every rank listens once at `MPI_Init` and publishes its handle through the bootstrap; a
//! [`Links`] holds the listener and every off-node peer's handle, and nothing else until a
//! connection is needed:
//! - **Out** ([`Links::dial`]): the first frame this rank writes to a peer starts a connection
//!   to that peer's listener (the interface's [`SendComm`] on the dialing side, [`RecvComm`]
//!   on the accepting side), unless the peer dialed this rank first and the backend carries
//!   both directions: then the caller answers on that connection's other direction
//!   ([`RecvComm::reverse`]), and the dialer, which cannot know whether it will, awaits the
//!   peer's hello there ([`Links::await_back`], [`Link::Back`]); a peer that closes that
//!   direction unused ends the wait. Two ranks that start sending to each other at once each
//!   dial, and neither waits for the other: which connection they keep is the caller's rule
//!   ([`super::frames`]: the lower rank's; the higher rank gives up its dial in flight
//!   ([`Links::stop_dialing_to`]) or moves off its own connection, its hello on the other
//!   direction marked [`MOVED_BIT`]).
//! - **In** ([`Links::progress`] with `accept`): connections other ranks opened to this one
//!   are accepted whenever this rank makes progress, and named by their first message, the
//!   sender's world rank (tag [`TAG_HELLO`], which the caller sends first on every
//!   connection it gets from [`Links::progress`]). So a receive from `MPI_ANY_SOURCE` hears a
//!   peer that never heard from this rank: the peer connects to it.
//! - **Patience**: a dial waits for the peer to accept, which it does only inside MPI calls;
//!   a peer busy outside MPI for longer than the backend's accept time limit makes the dial
//!   fail after that limit, and [`Links`] dials again (a peer that is gone refuses the new
//!   dial at once). A dial that fails sooner (refused, unreachable) comes back as
//!   [`Link::Failed`] naming the peer: an error unless everything waiting for that peer may be
//!   dropped when it is gone ([`crate::transport::FLAG_UNLESS_GONE`]).
//! - A connection that fails before its hello arrived carried nothing: it is dropped (a peer
//!   that gave up a dial, or closed at `MPI_Finalize` while its dial was in flight), whether
//!   the failure shows while the hello is awaited or already when its receive is posted (a
//!   dialer that gave up after the backend accepted resets the connection at once if the
//!   backend's last set-up bytes were still unread). A dial that fails is removed before the
//!   error is returned.
//!
//! - **Lanes**: a pair of ranks may hold a second connection each way for bulk data
//!   ([`super::frames`]: large messages moved straight between the users' buffers), dialed
//!   the same way by the first bulk transfer to the peer; its hello carries [`BULK_BIT`], so
//!   the accepting side knows which lane it is.
//!
//! Every frame connection opened and accepted is counted ([`Links::opened`],
//! [`Links::accepted`]), bulk connections apart ([`Links::bulk_opened`]), for the log at
//! `MPI_Finalize` and the tests that check a job opens only the connections its traffic needs.

use super::{Connector, Handle, Listener, MemKind, Mr, Net, NetError, NetResult};
use super::{RecvBuf, RecvComm, Request, SendComm};
use crate::sys::socket::PollFd;
use std::time::{Duration, Instant};

/// Tag of the first message of a connection: the sender's world rank (8 bytes, little endian),
/// with [`BULK_BIT`] on a bulk connection.
pub const TAG_HELLO: i32 = 1;
/// The bit of a hello that marks a bulk connection.
pub const BULK_BIT: u64 = 1 << 63;
/// The bit of a hello on the other direction of a connection that says the sender moved its
/// frames there from a connection it had dialed itself (which ends with a goodbye): the
/// receiver delivers that connection's frames first.
pub const MOVED_BIT: u64 = 1 << 62;

/// A connection being dialed: the peer, the backend's set-up, when it started.
struct Dial {
    peer: usize,
    bulk: bool,
    conn: Box<dyn Connector>,
    since: Instant,
}

/// An accepted connection whose hello has not arrived: the comm, the hello's buffer (boxed: the
/// backend writes into it while the comm moves), its registration and the receive. `back`:
/// the other direction of a connection this rank dialed to that peer, which the peer may use
/// or decline ([`Links::await_back`]).
struct Greeting {
    comm: Box<dyn RecvComm>,
    buf: Box<[u8; 8]>,
    mr: Mr,
    req: Request,
    back: Option<usize>,
}

/// A connection [`Links::progress`] completed.
pub enum Link {
    /// Dialed by this rank to `peer` (`true`: the bulk lane): the caller sends the hello
    /// ([`hello`]) first.
    Out(usize, bool, Box<dyn SendComm>),
    /// Opened by `peer` to this rank (`true`: the bulk lane), its hello received.
    In(usize, bool, Box<dyn RecvComm>),
    /// `peer` sends its frames to this rank on the other direction of the frame connection
    /// this rank dialed to it: its hello arrived there. `true`: the peer moved there from a
    /// connection of its own to this rank ([`MOVED_BIT`]), whose frames come first.
    Back(usize, bool, Box<dyn RecvComm>),
    /// The dial to `peer` (`true`: the bulk lane) failed (refused, reset, closed during
    /// set-up): the peer is gone or unreachable. The caller decides whether that is an error.
    Failed(usize, bool, NetError),
}

/// The hello this rank sends first on every connection it sends on (`bulk`: on the bulk lane;
/// `moved`: see [`MOVED_BIT`]).
pub fn hello(me: usize, bulk: bool, moved: bool) -> [u8; 8] {
    let bits = if bulk { BULK_BIT } else { 0 } | if moved { MOVED_BIT } else { 0 };
    (me as u64 | bits).to_le_bytes()
}

/// The connection set-up of one rank. See the module documentation.
pub struct Links {
    me: usize,
    dev: usize,
    listener: Box<dyn Listener>,
    /// Every rank's handle; `None` for ranks this rank never connects to (its node).
    handles: Vec<Option<Handle>>,
    dialing: Vec<Dial>,
    greeting: Vec<Greeting>,
    /// How long a dial may go on before a failure counts as "the peer is busy" (redial).
    patience: Duration,
    opened: Vec<usize>,
    accepted: Vec<usize>,
    bulk_opened: usize,
    bulk_accepted: usize,
    /// Kept for the life of the comms (declared last: dropped after the listener).
    net: Box<dyn Net>,
}

impl Links {
    /// Links of rank `me` through device `dev` of `net`; `listener` is this rank's (its handle
    /// already published), `handles[p]` peer `p`'s. `patience`: the backend's accept time
    /// limit (see the module documentation).
    pub fn new(
        net: Box<dyn Net>,
        dev: usize,
        listener: Box<dyn Listener>,
        me: usize,
        handles: Vec<Option<Handle>>,
        patience: Duration,
    ) -> Links {
        Links {
            me,
            dev,
            listener,
            handles,
            dialing: Vec::new(),
            greeting: Vec::new(),
            patience,
            opened: Vec::new(),
            accepted: Vec::new(),
            bulk_opened: 0,
            bulk_accepted: 0,
            net,
        }
    }

    /// The backend.
    pub fn net(&self) -> &dyn Net {
        &*self.net
    }

    /// The backend's device these links use.
    pub fn dev(&self) -> usize {
        self.dev
    }

    /// Starts a connection to `peer` (`bulk`: on the bulk lane) unless one is being dialed.
    pub fn dial(&mut self, peer: usize, bulk: bool) -> NetResult<()> {
        if self.dialing(peer, bulk) {
            return Ok(());
        }
        let h = self.handles.get(peer).copied().flatten().ok_or_else(|| {
            NetError::new(format!(
                "net: rank {}: no network handle of rank {peer} (a rank of this node?)",
                self.me
            ))
        })?;
        let conn = self
            .net
            .connect(self.dev, &h)
            .map_err(|e| self.about(peer, e))?;
        self.dialing.push(Dial {
            peer,
            bulk,
            conn,
            since: Instant::now(),
        });
        Ok(())
    }

    /// `e`, naming the peer's rank.
    fn about(&self, peer: usize, e: NetError) -> NetError {
        NetError::new(format!(
            "net: rank {}: connection to rank {peer}: {e}",
            self.me
        ))
    }

    /// Whether a connection to `peer` (`bulk`: on the bulk lane) is being dialed.
    pub fn dialing(&self, peer: usize, bulk: bool) -> bool {
        self.dialing
            .iter()
            .any(|d| d.peer == peer && d.bulk == bulk)
    }

    /// Whether set-up is in progress on either side (a dial, or an accepted connection whose
    /// hello has not arrived): the caller then accepts at every progress call. The other
    /// directions of dialed connections do not count: a peer may never send on one.
    pub fn busy(&self) -> bool {
        !self.dialing.is_empty() || self.greeting.iter().any(|g| g.back.is_none())
    }

    /// Waits for `peer`'s hello on `comm`, the other direction of the frame connection this
    /// rank dialed to it: the peer sends its frames there unless it dialed this rank too
    /// (then it closes that direction, and the wait ends quietly). Checked by the progress
    /// calls that accept ([`Links::progress`]), and a waiting thread sleeps on it too
    /// ([`Links::wait_fds`]).
    pub fn await_back(&mut self, peer: usize, comm: Box<dyn RecvComm>) -> NetResult<()> {
        if let Some(g) = self.greet(comm)? {
            self.greeting.push(Greeting {
                back: Some(peer),
                ..g
            });
        }
        Ok(())
    }

    /// What a thread that waits can sleep on for the other directions still awaited; `false`
    /// when one shows on no descriptor.
    pub fn wait_fds(&self, out: &mut Vec<PollFd>) -> bool {
        let waits = self.greeting.iter().filter(|g| g.back.is_some());
        super::wait_fds(waits.map(|g| g.comm.wait_on()), out)
    }

    /// Posts the hello's receive on a new connection; `None` when the connection already
    /// failed (it carried nothing: a dialer that gave up, a peer that declined).
    fn greet(&self, mut c: Box<dyn RecvComm>) -> NetResult<Option<Greeting>> {
        let mut buf = Box::new([0u8; 8]);
        let mr = c.reg_mr(buf.as_ptr(), 8, MemKind::Host)?;
        let rb = RecvBuf {
            ptr: buf.as_mut_ptr(),
            size: 8,
            tag: TAG_HELLO,
            mr,
        };
        // SAFETY: the boxed buffer moves with the comm into `greeting` and is read only after
        // the receive completed (or dropped with the comm).
        let req = match unsafe { c.irecv(&[rb]) } {
            Ok(Some(req)) => req,
            Ok(None) => return Err(NetError::new("net: no request slot for the hello")),
            // Posting the receive reads what already arrived: a dialer that gave up (closing,
            // or dialing again) after the backend accepted may have reset the connection
            // already. It carried nothing: drop it, as below.
            Err(e) => {
                tracing::debug!(
                    "net: rank {}: a connection from {} closed before its hello: {e}",
                    self.me,
                    c.peer()
                );
                return Ok(None);
            }
        };
        Ok(Some(Greeting {
            comm: c,
            buf,
            mr,
            req,
            back: None,
        }))
    }

    /// Peers this rank dialed and accepted connections from, in order.
    pub fn opened(&self) -> &[usize] {
        &self.opened
    }
    pub fn accepted(&self) -> &[usize] {
        &self.accepted
    }

    /// Bulk connections this rank dialed and accepted.
    pub fn bulk_opened(&self) -> (usize, usize) {
        (self.bulk_opened, self.bulk_accepted)
    }

    /// Whether this rank can connect to `peer` (it has its handle: a rank on another node).
    pub fn reaches(&self, peer: usize) -> bool {
        self.handles.get(peer).is_some_and(Option::is_some)
    }

    /// Gives up every dial of a frame connection in flight (at close: nothing was written to
    /// them); bulk dials go on (bulk sends queued for them wait for them).
    pub fn stop_dialing(&mut self) {
        self.dialing.retain(|d| d.bulk);
    }

    /// Gives up the dial of a frame connection to `peer` in flight (nothing was written to it:
    /// the peer's accept of it, if any, ends before its hello).
    pub fn stop_dialing_to(&mut self, peer: usize) {
        self.dialing.retain(|d| d.bulk || d.peer != peer);
    }

    /// Moves set-up along: polls the dials, accepts new connections when `accept`, and takes
    /// the hellos that arrived; completed connections go to `out`. `known(p, bulk)` says
    /// whether a connection from `p` on that lane was already taken (a second one is an error).
    pub fn progress(
        &mut self,
        accept: bool,
        known: &dyn Fn(usize, bool) -> bool,
        out: &mut Vec<Link>,
    ) -> NetResult<bool> {
        let mut moved = false;
        let mut i = 0;
        while i < self.dialing.len() {
            match self.dialing[i].conn.poll() {
                Ok(None) => i += 1,
                Ok(Some(c)) => {
                    let d = self.dialing.swap_remove(i);
                    if d.bulk {
                        self.bulk_opened += 1;
                    } else {
                        self.opened.push(d.peer);
                    }
                    out.push(Link::Out(d.peer, d.bulk, c));
                    moved = true;
                }
                Err(e) if self.dialing[i].since.elapsed() >= self.patience => {
                    let p = self.dialing[i].peer;
                    tracing::debug!(
                        "net: rank {}: rank {p} has not accepted yet ({e}); dialing again",
                        self.me
                    );
                    let h = self.handles[p].expect("a dialed peer has a handle");
                    self.dialing[i].conn = self
                        .net
                        .connect(self.dev, &h)
                        .map_err(|e| self.about(p, e))?;
                    self.dialing[i].since = Instant::now();
                    i += 1;
                }
                Err(e) => {
                    let d = self.dialing.swap_remove(i);
                    out.push(Link::Failed(d.peer, d.bulk, self.about(d.peer, e)));
                    moved = true;
                }
            }
        }
        if accept {
            while let Some(c) = self.listener.accept()? {
                moved = true;
                if let Some(g) = self.greet(c)? {
                    self.greeting.push(g);
                }
            }
        }
        let mut i = 0;
        while i < self.greeting.len() {
            let mut n = [0usize];
            let g = &mut self.greeting[i];
            // The other directions of dialed connections only with the accepts: a peer may
            // never send there, and each test reads the socket.
            if g.back.is_some() && !accept {
                i += 1;
                continue;
            }
            match g.comm.test(g.req, &mut n) {
                Ok(false) => i += 1,
                Err(e) => {
                    let g = self.greeting.swap_remove(i);
                    tracing::debug!(
                        "net: rank {}: a connection from {} closed before its hello: {e}",
                        self.me,
                        g.comm.peer()
                    );
                    moved = true;
                }
                Ok(true) => {
                    let mut g = self.greeting.swap_remove(i);
                    g.comm.dereg_mr(g.mr)?;
                    let word = u64::from_le_bytes(*g.buf);
                    let bulk = word & BULK_BIT != 0;
                    let moved_here = word & MOVED_BIT != 0;
                    let p = (word & !(BULK_BIT | MOVED_BIT)) as usize;
                    let remote = self.handles.get(p).is_some_and(Option::is_some);
                    let fits = match g.back {
                        // The caller checks what it knows of the peer's other connection.
                        Some(b) => b == p && !bulk,
                        None => !moved_here && !known(p, bulk),
                    };
                    if n[0] != 8 || !remote || !fits {
                        return Err(NetError::new(format!(
                            "net: rank {}: unexpected hello from {} (rank {p})",
                            self.me,
                            g.comm.peer()
                        )));
                    }
                    if g.back.is_some() {
                        out.push(Link::Back(p, moved_here, g.comm));
                    } else if bulk {
                        self.bulk_accepted += 1;
                        out.push(Link::In(p, bulk, g.comm));
                    } else {
                        self.accepted.push(p);
                        out.push(Link::In(p, bulk, g.comm));
                    }
                    moved = true;
                }
            }
        }
        Ok(moved)
    }
}
