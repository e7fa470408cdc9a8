//! The point-to-point engine: matching, protocols, requests, progress; and the collective
//! executor ([`coll`]) that runs schedules over it.
//!
//! # Contract
//! - One [`Engine`] per process, used under one process-wide lock by the ABI layer. It starts no
//!   threads: work happens in [`Engine::progress`] (and in the calls that invoke it: `test`,
//!   `iprobe`, `improbe`, `wait`). Blocking waits use [`Backoff`].
//! - Buffers passed to [`Engine::isend`], [`Engine::irecv`] and [`Engine::imrecv`] must stay valid
//!   (and, for receives, unaliased) until the request completes (MPI semantics).
//! - Matching is on (context id, source rank in the communicator, tag) with `MPI_ANY_SOURCE` and
//!   `MPI_ANY_TAG` wildcards; posted receives and unexpected messages are each kept in order, so
//!   messages from one sender on one context never overtake each other.
//! - A send to this rank never touches the transport (loopback queue).
//! - Nonblocking collectives: [`Engine::start_coll`] turns a [`coll::CollExec`] into a request
//!   that `progress` advances; blocking ones may instead loop on `CollExec::advance`.
//!
//! # Protocols (message kinds in [`Header::kind`])
//! - **Eager** (`len <= eager limit`; to an off-node peer reached directly, every message of
//!   at most [`OFF_NODE_EAGER_MAX`] bytes, below the bulk threshold where the peer takes bulk
//!   transfers): `EAGER` frame with
//!   the first bytes that fit a frame to that peer ([`Transport::max_payload_to`]: the
//!   network's frames to an off-node peer reached directly, so a message below the bulk
//!   threshold goes as one), then `FRAG` frames. A receive that matches copies straight out
//!   of the ring; otherwise the message is buffered on the heap (unexpected queue). The send
//!   completes when the last frame is in the ring, or, for a synchronous send, when the
//!   receiver's `ACK` (sent at match time) arrives.
//! - **Rendezvous** (`len > eager limit`): `RTS` carrying the sender's buffer address. When a
//!   receive matches, the receiver reads `min(len, capacity)` bytes straight from the sender's
//!   memory (CMA `process_vm_readv`, a single copy) and sends `FIN`; the send completes on `FIN`.
//!   Where [`rndv::choose`] says so (both ranks bound to cores of their own and concurrent
//!   copies measured at least twice the read rate, or below a user-set `GPUMPI_SHM_CMA_MIN`),
//!   or without CMA, the receiver instead sends `CTS(want)` and the sender streams `DATA`
//!   frames through the ring as space allows (the ring bounds the buffering); the send
//!   completes when the last frame is in the ring. Rendezvous sends are therefore always
//!   synchronous.
//! - **Shared read** (a host rendezvous of at least [`coop::MIN_BYTES`] whose sender had a
//!   free shared-copy slot for the peer): the RTS carries the slot's index (`FLAG_COOP`, in
//!   `rreq`). A receiver that reads ([`rndv::RndvPath::SharedRead`]) opens the slot and both
//!   ranks copy chunks of the message (see [`coop`]); `FIN` as for the read.
//! - **Device rendezvous** (both buffers exported device memory, CUDA IPC): the RTS carries the
//!   sender's export. Below `GPUMPI_GPU_P2P_PUSH` bytes the receiver copies peer to local and
//!   sends `FIN` (pull); from there on it answers `PUT` carrying the export of its own buffer,
//!   the sender copies local to peer and sends `DONE` (push: copy engines write to a peer faster
//!   than they read from one). A sender that cannot map the receiver's buffer streams the data
//!   instead (`DATA` frames, as after a `CTS`). The device operations sit behind
//!   [`devcopy::DevCopy`] (CUDA in the library, a host-memory fake in the tests).
//! - **Piped device rendezvous** (the sender's device buffer is not exportable, or CUDA IPC is
//!   off): the RTS carries the descriptor of the sender's pipe to the receiver (pinned shared
//!   host memory, made by the device copies). The receiver numbers the message in that pipe, starts its side
//!   (copy engines copying slots into its device buffer, or the CPU for a host buffer) and
//!   answers `PIPE` with the number; the sender starts its side (its copy engines fill the
//!   slots). Each side completes its request when its own side is through: no FIN. A receiver
//!   that cannot open the pipe asks for streamed data instead (`CTS`), and a sender without a
//!   pipe stages the buffer in host memory and sends an ordinary host message.
//! - **Device rendezvous between nodes** (a device buffer at either end, the peer on another
//!   node: no IPC, no pipe, no CMA): the sender's RTS says its buffer is device memory
//!   (`FLAG_DEVNET`) and the receiver always answers `CTS`; a receiver into device memory
//!   marks it `FLAG_CREDIT` with a byte limit. The data moves in chunks pipelined through host
//!   memory, device-to-host copies overlapping the network at the sender and host-to-device
//!   copies at the receiver, the receiver's `CREDIT` frames raising the limit ([`devnet`]).
//!   The send completes when its last chunk is in the transport, the receive when its last
//!   chunk is on the device.
//! - **Bulk rendezvous between nodes** (host buffers at both ends, the peer on another node,
//!   `min(len, capacity)` at least the transport's [`Transport::bulk_min`] for that peer):
//!   the receiver queues a bulk receive of that many bytes into its buffer with the transport
//!   and answers `BULK` (instead of `CTS`); the sender queues a bulk send of them from its
//!   buffer. The transport matches the two by their order (the order of the `BULK` frames,
//!   first in first out), moves the bytes as one network message between the two buffers
//!   ([`rndv::bulk`] decides), and reports each end complete; the send completes then, the
//!   receive when its bytes are in.
//! - **GPUDirect RDMA between nodes**: the same bulk rendezvous with a device buffer at one
//!   end or both, where each device end's transport takes device memory in bulk transfers
//!   ([`Transport::bulk_device`]: the network backend registers it with the NIC). A device
//!   sender says in its RTS (`FLAG_DEVNET`, `rreq` = [`RTS_DEV_BULK`]) that it can, from the
//!   bulk threshold on and only where its buffer registers
//!   ([`Transport::device_registration`]); the receiver answers `BULK` only if every device
//!   end can ([`rndv::bulk`]), its own device buffer registering too, else `CTS` (the
//!   pipeline through host memory above). A buffer agreed on so never fails to register. Nothing is staged: the NIC reads the sender's
//!   buffer and writes the receiver's. Each choice is logged at debug level.
//! - Truncation: the receive completes with `MPI_ERR_TRUNCATE` and the bytes that fit; the
//!   sender completes normally.
//! - **Notes** (`FLAG_NOTE`): a send may carry a [`Note`] of [`NOTE_BYTES`] opaque bytes (the
//!   collective consistency check's description of the sender's call, `collnote::Note`),
//!   appended to the payload of its first frame (EAGER: after the data it carries, which is
//!   that many bytes shorter; RTS: after its payload). The receiver strips it at arrival and
//!   keeps it with the receive ([`Engine::note`]). Messages without a note are unchanged.
//! - **Refusal** (`REFUSE`): the messages of a collective call this rank gave up
//!   ([`Engine::refuse`]) that arrive later or wait unexpected: an RTS is answered `REFUSE`
//!   (with the rank's note) and the send completes with `MPI_ERR_OTHER` ([`Engine::refused`]);
//!   a complete eager message is dropped ([`refuse`]).
//! - **Questions** (`ASK`, `TELL`): a collective call waiting on a rank of another node asks
//!   for that rank's record of the call ([`Engine::ask_record`]); the rank's engine answers
//!   from its own record ring as it makes progress ([`ask`]). Both carry
//!   `transport::FLAG_UNLESS_GONE`: either end may have finished the call and ended, and a
//!   question or answer to a rank that has ended is dropped by the network transport.

pub mod agree;
mod ask;
pub mod backoff;
pub mod bye;
pub mod coll;
pub mod collcheck;
pub mod collnote;
pub mod coop;
pub mod devcopy;
pub mod devnet;
pub mod flag;
mod p2p;
mod refuse;
pub mod rndv;
pub mod scratch;
mod slab;

pub use backoff::Backoff;

use crate::mpi::error::MpiResult;
use crate::standard::consts::{MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_ERR_TRUNCATE, MPI_SUCCESS};
use crate::transport::{Header, Transport};
use slab::Slab;
use std::collections::{HashMap, VecDeque};

/// Completion status of a request or a probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Status {
    /// Source rank in the communicator (receives/probes).
    pub source: i32,
    pub tag: i32,
    /// `MPI_SUCCESS` or an error class (`MPI_ERR_TRUNCATE`).
    pub error: i32,
    /// Bytes delivered (receives), sent (sends), or the message length (probes).
    pub bytes: usize,
    pub cancelled: bool,
    /// A receive that failed (`MPI_ERR_OTHER`) because only ranks that called `MPI_Finalize`
    /// could match it ([`bye`]): `source` is that rank, or `MPI_ANY_SOURCE` when every other
    /// rank of the communicator did.
    pub finalized: bool,
}

/// A request of this engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReqId(pub u64);

/// A message taken out of matching by [`Engine::improbe`], to receive with [`Engine::imrecv`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MsgId(pub u64);

/// Arguments of [`Engine::isend`].
#[derive(Clone, Copy, Debug)]
pub struct SendArgs {
    pub buf: *const u8,
    pub len: usize,
    pub dst_world: usize,
    /// Communicator context id.
    pub ctx: u32,
    /// Sender's rank in the communicator (what the receiver matches and sees as source).
    pub src_rank: i32,
    pub tag: i32,
    /// Synchronous send: completes only after the receiver matched.
    pub sync: bool,
    /// `buf` is device memory (`None`: host memory the CPU may read); see [`DevSend`].
    pub dev: Option<DevSend>,
    /// Bytes the receive keeps beside the data (see the protocol summary).
    pub note: Option<Note>,
}

/// A host receive in the engine's terms ([`Engine::recv_start`]): at most `cap` bytes into
/// `buf`, from `src` (communicator rank or `MPI_ANY_SOURCE`) with `tag` (or `MPI_ANY_TAG`) on
/// context `ctx`.
#[derive(Clone, Copy, Debug)]
pub struct RecvArgs {
    pub buf: *mut u8,
    pub cap: usize,
    pub ctx: u32,
    pub src: i32,
    pub tag: i32,
}

/// Bytes of a [`Note`].
pub const NOTE_BYTES: usize = collnote::NOTE_BYTES;

/// The largest message sent eagerly to an off-node peer above the configured eager limit
/// ([`Engine::eager_to`]): what an unexpected one may hold on its receiver's heap (Open MPI's
/// TCP path sends up to 64 KiB eagerly too).
pub const OFF_NODE_EAGER_MAX: usize = 64 << 10;

/// The eager limit for messages to one peer, from the configured `limit`: to an off-node peer
/// reached directly (`net_direct`, [`Transport::net_direct`]: not behind a PXN forwarder),
/// every message of at most [`OFF_NODE_EAGER_MAX`] bytes goes eagerly (a rendezvous round trip
/// over the network costs more than the copies eager data takes), below its bulk threshold
/// `bulk_min` where it takes bulk transfers (from there on the bulk transfer pays for its
/// round trip); `limit` otherwise. The threshold is this rank's setting: a receiver takes an
/// eager message of any size, so ranks that differ still agree.
fn eager_limit_to(limit: usize, net_direct: bool, bulk_min: Option<usize>) -> usize {
    if !net_direct {
        return limit;
    }
    let below = bulk_min.map_or(OFF_NODE_EAGER_MAX, |m| m.saturating_sub(1));
    limit.max(below.min(OFF_NODE_EAGER_MAX))
}

/// What a message may carry beside its data for the receiver's collective check (opaque here).
pub type Note = [u8; NOTE_BYTES];

/// How a device send buffer ([`SendArgs::dev`]) reaches the receiver.
#[derive(Clone, Copy, Debug)]
pub enum DevSend {
    /// Exported for CUDA IPC (the device copies' export, [`devcopy::EXPORT_BYTES`] bytes):
    /// always rendezvous; the receiver copies peer to local, or asks for the data streamed
    /// (then staged through host memory here).
    Ipc([u8; devcopy::EXPORT_BYTES]),
    /// Device (or managed) memory that CUDA IPC cannot share (or IPC is off): the receiver
    /// takes it through a pipe (see the protocol summary), or it is staged in host memory.
    Pipe,
}

mod kind {
    pub const EAGER: u8 = 1;
    pub const FRAG: u8 = 2;
    pub const RTS: u8 = 3;
    pub const CTS: u8 = 4;
    pub const DATA: u8 = 5;
    pub const FIN: u8 = 6;
    pub const ACK: u8 = 7;
    /// Receiver -> sender of a device rendezvous: write `total` bytes into the buffer whose
    /// export is the payload, for receive `rreq`.
    pub const PUT: u8 = 8;
    /// Sender -> receiver: the data of receive `rreq` is written (answer to `PUT`).
    pub const DONE: u8 = 9;
    /// Receiver -> sender of a piped rendezvous: send `total` bytes through the pipe as the
    /// message whose first chunk is `arg`.
    pub const PIPE: u8 = 10;
    /// Receiver -> sender of a message pipelined through host memory (`devnet`): send bytes
    /// up to `arg` of the message for receive `rreq`.
    pub const CREDIT: u8 = 11;
    /// Receiver -> sender of a rendezvous message (RTS) of a collective call the receiver
    /// gave up ([`super::Engine::refuse`]): send `sreq` completes with `MPI_ERR_OTHER`; the
    /// payload, when present, is the receiver's note of the call (what it found).
    pub const REFUSE: u8 = 12;
    /// A rank waiting in a collective call -> a rank on another node it waits on: send your
    /// record of call (`ctx`, sequence `tag`) ([`super::ask`]).
    pub const ASK: u8 = 13;
    /// The answer to `ASK`: the record (payload), or none yet (no payload).
    pub const TELL: u8 = 14;
    /// Receiver -> sender of a host rendezvous to another node: send bytes `0..total` of
    /// `sreq` as one bulk transfer (the receiver queued its bulk receive for receive `rreq`).
    pub const BULK: u8 = 15;
    /// The sender called `MPI_Finalize`: it sends no more point-to-point messages
    /// ([`super::bye`]).
    pub const BYE: u8 = 16;
    /// The sender waits in a receive for this rank: say goodbye to it too ([`super::bye`]).
    pub const WATCH: u8 = 17;
}
const FLAG_SYNC: u8 = 1;
/// RTS payload: the CUDA IPC export of the sender's device buffer.
const FLAG_IPC: u8 = 2;
/// RTS payload: the descriptor of the sender's pipe (its buffer is device memory).
const FLAG_PIPE: u8 = 4;
/// RTS: the sender offers shared-copy slot `rreq` ([`coop`]).
const FLAG_COOP: u8 = 8;
/// EAGER/RTS: the payload ends with a [`Note`].
const FLAG_NOTE: u8 = 16;
/// RTS: the sender's buffer is device memory sent to another node: the data comes only as
/// streamed chunks ([`devnet`]), never by a read of the sender's memory.
const FLAG_DEVNET: u8 = 32;
/// CTS: the receiver pipelines into device memory ([`devnet`]): send bytes up to `arg`, more
/// as `CREDIT` frames allow.
const FLAG_CREDIT: u8 = 64;
/// `rreq` of an RTS with [`FLAG_DEVNET`] (which never offers a shared-copy slot, the other use
/// of that field): the sender can send its device buffer as a bulk transfer
/// ([`Transport::bulk_device`]), so the receiver may answer `BULK`.
const RTS_DEV_BULK: u64 = 1;
// Bit 128 is the transport's (`crate::transport::FLAG_UNLESS_GONE`: ASK and TELL carry it).

/// Engine tunables.
#[derive(Clone, Copy, Debug)]
pub struct EngineConfig {
    /// Messages of at most this many bytes are sent eagerly.
    pub eager_limit: usize,
    /// A user-set single-copy threshold: host rendezvous messages of at least this many bytes
    /// are read, smaller ones streamed (where reads work). `None`: [`rndv::choose`] decides
    /// from the transport's measurements.
    pub cma_min: Option<usize>,
    /// Device rendezvous messages of at least this many bytes are pushed by the sender
    /// (`usize::MAX`: never); see the protocol summary.
    pub push_min: usize,
    /// Shared reads ([`coop`]) where the transport offers slots.
    pub share: bool,
}

impl EngineConfig {
    /// From `GPUMPI_EAGER_LIMIT`, `GPUMPI_SHM_CMA_MIN` (unset: measured choice),
    /// `GPUMPI_GPU_P2P_PUSH` and `GPUMPI_SHM_CMA_SHARE` ([`crate::config::snapshot`]).
    pub fn from_env() -> Self {
        let c = crate::config::snapshot();
        EngineConfig {
            eager_limit: c.p2p.eager_limit,
            cma_min: c.shm.cma_min,
            push_min: c.p2p.gpu_push_min,
            share: c.shm.cma_share,
        }
    }
}

struct SendState {
    buf: *const u8,
    len: usize,
    hdr: Header,
    /// Every frame carrying data is in the transport (or the data was read by the receiver).
    pushed: bool,
    /// Synchronous eager send still waiting for the receiver's ACK.
    need_ack: bool,
    /// `buf` is device memory ([`SendArgs::dev`]: exported or piped):
    /// the CPU must not read it.
    dev: bool,
    /// Host copy of a device buffer, made when the receiver asked for streamed data.
    staged: Option<devcopy::HostStage>,
    /// The shared-copy slot offered with the RTS: (peer, slot), freed when the send completes.
    coop: Option<(usize, u8)>,
    /// The note the first frame carries (`FLAG_NOTE`).
    note: Option<Note>,
    /// The receiver refused the message (`kind::REFUSE`), with its note if it sent one.
    refused: Option<Option<Note>>,
    /// The data goes as a bulk transfer (queued with the transport, which reads `buf` until
    /// it reports the transfer complete).
    bulk: bool,
}

struct RecvState {
    buf: *mut u8,
    cap: usize,
    /// Still in the posted queue (not matched).
    posted: bool,
    /// Bytes expected to arrive after the match (eager: the message length; streamed
    /// rendezvous: what was asked for), and bytes arrived so far.
    expect: usize,
    got: usize,
    /// `buf` is device memory: writes go through host-to-device copies (or peer copies).
    dev: bool,
    /// A streamed message into device memory gathers here (page-locked host memory) and goes
    /// to the device in one copy when complete, not one copy per frame.
    stage: Option<devcopy::HostStage>,
    /// The matched message's note.
    note: Option<Note>,
    /// Where the data goes instead of the caller's buffer after [`Engine::detach`].
    owned: Option<Vec<u8>>,
    /// A message from another node pipelined into device memory chunk by chunk ([`devnet`]).
    pipe: Option<Box<devnet::RxPipe>>,
    /// The data comes as a bulk transfer the transport writes into `buf`.
    bulk: bool,
}

enum ReqKind {
    Send(SendState),
    Recv(RecvState),
    /// A nonblocking collective (`None` while its executor is running).
    Coll(Option<Box<coll::CollExec>>),
}

struct Req {
    done: bool,
    freed: bool,
    status: Status,
    kind: ReqKind,
}

enum UBody {
    /// Eager data received so far (fragments arrive in order, so it is a prefix).
    Eager { data: EagerData },
    Rndv {
        addr: u64,
        dev: Option<DevRef>,
        /// The shared-copy slot the sender offered.
        coop: Option<u8>,
    },
}

/// The largest send to the calling rank that [`Engine::send_now`] delivers at once (through a
/// copy on the stack); a larger one takes the loopback queue.
const SELF_NOW_MAX: usize = 1024;

/// Bytes of an unexpected eager message kept in its queue entry itself, so that small
/// messages that arrive before their receive cost no allocation of their own.
const INLINE: usize = 64;

/// The data of an unexpected eager message received so far: in place up to [`INLINE`] bytes,
/// on the heap beyond.
enum EagerData {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Vec<u8>),
}

impl EagerData {
    /// The store for a message of `total` bytes whose first frame carried `first`.
    fn new(total: usize, first: &[u8]) -> Self {
        let mut d = if total <= INLINE {
            EagerData::Inline {
                len: 0,
                bytes: [0; INLINE],
            }
        } else {
            EagerData::Heap(Vec::with_capacity(total))
        };
        d.extend(first);
        d
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            EagerData::Inline { len, bytes } => &bytes[..*len as usize],
            EagerData::Heap(v) => v,
        }
    }

    fn len(&self) -> usize {
        self.as_slice().len()
    }

    /// Append the next fragment (onto the heap once the bytes no longer fit in place).
    fn extend(&mut self, p: &[u8]) {
        match self {
            EagerData::Inline { len, bytes } if *len as usize + p.len() <= INLINE => {
                let at = *len as usize;
                bytes[at..at + p.len()].copy_from_slice(p);
                *len = (at + p.len()) as u8;
            }
            EagerData::Inline { .. } => {
                let mut v = self.as_slice().to_vec();
                v.extend_from_slice(p);
                *self = EagerData::Heap(v);
            }
            EagerData::Heap(v) => v.extend_from_slice(p),
        }
    }
}

/// How a rendezvous sender's device buffer is reached (the RTS payload).
enum DevRef {
    /// The buffer's CUDA IPC export.
    Ipc(Box<[u8]>),
    /// The descriptor of the sender's pipe.
    Pipe(Box<[u8]>),
    /// Device memory on another node: streamed in chunks ([`devnet`]), or sent from the
    /// device as one bulk transfer where the sender offered that (`bulk`, [`RTS_DEV_BULK`]).
    Net { bulk: bool },
}

impl DevRef {
    fn from_rts(h: &Header, p: &[u8]) -> Option<DevRef> {
        let b = || p.to_vec().into_boxed_slice();
        if h.flags & FLAG_IPC != 0 {
            Some(DevRef::Ipc(b()))
        } else if h.flags & FLAG_PIPE != 0 {
            Some(DevRef::Pipe(b()))
        } else if h.flags & FLAG_DEVNET != 0 {
            Some(DevRef::Net {
                bulk: h.rreq == RTS_DEV_BULK,
            })
        } else {
            None
        }
    }
}

struct Unexp {
    src_world: usize,
    ctx: u32,
    src_rank: i32,
    tag: i32,
    total: usize,
    sreq: u64,
    sync: bool,
    body: UBody,
    note: Option<Note>,
}

/// What [`Engine::recv_now`] found among the unexpected messages.
enum Arrived {
    /// The first match, received.
    Taken(Status),
    /// No match.
    Nothing,
    /// The first match needs a posted receive (rendezvous, synchronous, incomplete, noted).
    NotSimple,
}

#[derive(Clone, Copy)]
enum FragTarget {
    Recv(u64),
    Unexp(u64),
}

enum Out {
    Ctrl(Header),
    /// A control frame with a payload (RTS with an IPC export).
    CtrlP(Header, Box<[u8]>),
    /// Frames of an eager send, from byte `off` (`first`: the EAGER frame is not sent yet).
    Eager {
        sreq: u64,
        off: usize,
        first: bool,
    },
    /// Streamed rendezvous data (no CMA) for receive `rreq`, bytes `off..end`.
    Stream {
        sreq: u64,
        rreq: u64,
        off: usize,
        end: usize,
    },
}

struct PostedRecv {
    rreq: u64,
    ctx: u32,
    src: i32,
    tag: i32,
}

/// A rendezvous whose data the receiver reads directly (CMA, or memcpy for self).
struct PendingRead {
    rreq: u64,
    src_world: usize,
    sreq: u64,
    addr: u64,
    want: usize,
    /// The sender's device buffer export: read peer to local with CUDA instead of CMA.
    ipc: Option<Box<[u8]>>,
    /// A shared read: the sender's slot, and the job once the slot is open.
    coop: Option<(u8, Option<coop::Job>)>,
}

/// A send whose shared-copy slot the sender watches, to copy chunks once the receiver opens it.
#[derive(Clone, Copy)]
struct CoopSend {
    peer: usize,
    slot: u8,
    sreq: u64,
}

/// A device rendezvous whose data the sender writes into the receiver's buffer (`PUT`): what
/// finishes it (`then.way` is [`Way::Push`]) and the export of the receiver's device buffer.
struct PendingWrite {
    then: AfterCopy,
    export: Box<[u8]>,
}

/// A peer copy of a device rendezvous (CUDA IPC) in flight, polled by `progress`: the engine
/// answers other messages meanwhile (a ring of Sendrecv calls, each rank reading or writing
/// one peer while another waits for its answer, must not run one copy after another).
struct Copying {
    copy: Box<dyn devcopy::Pending>,
    then: AfterCopy,
}

/// What finishes a device copy of `want` bytes between send `sreq` and receive `rreq`, by way.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Way {
    /// The receiver read the sender's buffer: FIN to the sender `peer`, the receive completes.
    Pull,
    /// The sender wrote the receiver's buffer: DONE to the receiver `peer`, the send's data is
    /// out.
    Push,
    /// The receiver's side of a pipe is through: the receive completes.
    PipeIn,
    /// The sender's side of a pipe is through: the send's data is out.
    PipeOut,
}

struct AfterCopy {
    way: Way,
    peer: usize,
    sreq: u64,
    rreq: u64,
    want: usize,
}

/// Everything but the transport, so the transport's poll callback can borrow it.
struct State {
    me: usize,
    reqs: Slab<Req>,
    posted: VecDeque<PostedRecv>,
    unexp: Slab<Unexp>,
    unexp_order: VecDeque<u64>,
    frags: HashMap<(usize, u64), FragTarget>,
    outq: Vec<VecDeque<Out>>,
    busy: usize,
    loopq: VecDeque<(Header, Vec<u8>)>,
    reads: Vec<PendingRead>,
    writes: Vec<PendingWrite>,
    copying: Vec<Copying>,
    /// Device copies (the library's CUDA ones once installed; a fake in tests;
    /// [`devcopy::NoDevice`] until then).
    dev: Box<dyn devcopy::DevCopy>,
    /// Per peer: the inputs of the rendezvous choice ([`rndv::PeerFacts`]).
    peers: Vec<rndv::PeerFacts>,
    /// The transport's measured copy rates.
    rates: Option<crate::transport::CopyRates>,
    /// Per world rank: on this node ([`Transport::same_node`]). Device buffers reach a peer on
    /// another node as host copies.
    near: Vec<bool>,
    cma_min: Option<usize>,
    /// Per peer: the streamed rendezvous being timed (receive, start), one at a time.
    stream_watch: Vec<Option<(u64, std::time::Instant)>>,
    push_min: usize,
    /// Per peer: the shared-copy slot tables ([`Transport::copy_slots`]: to it, from it).
    slots: Vec<Option<(usize, usize)>>,
    /// Per peer: the slots of sends to it in use (bit i: slot i).
    slots_busy: Vec<u64>,
    /// Sends with an offered slot not yet opened or still with chunks to claim.
    coop_tx: Vec<CoopSend>,
    /// Device messages between nodes pipelined through host memory ([`devnet`]): its
    /// settings, the sending sides, and the receives (with their sender and send) whose
    /// chunks are on their way to the device.
    pipe_cfg: devnet::PipeConfig,
    tx_pipes: Vec<devnet::TxPipe>,
    rx_pipes: Vec<(u64, usize, u64)>,
    /// Where device messages spent their time ([`devnet::Stats`]).
    dev_stats: devnet::Stats,
    /// Collective schedule steps on device memory ([`coll::DevSteps`]).
    coll_dev: coll::DevSteps,
    /// Collective calls this rank gave up (context, tag, its note), newest last
    /// ([`refuse`]): their messages that arrive later are refused.
    refused: VecDeque<(u32, i32, Option<Note>)>,
    /// This rank's collective records (to answer `ASK`), and the records off-node peers
    /// told (peer, context, sequence, record), newest last ([`ask`]).
    records: Option<collcheck::Rings>,
    told: VecDeque<(usize, u32, u32, collcheck::Record)>,
    /// Per peer: the transport's bulk threshold ([`Transport::bulk_min`]) and whether its
    /// bulk transfers take device memory ([`Transport::bulk_device`]).
    bulk_min: Vec<Option<usize>>,
    bulk_dev: Vec<bool>,
    /// Per peer: the largest message sent to it eagerly ([`eager_limit_to`]).
    eager_max: Vec<usize>,
    /// Whether one device buffer can go in bulk transfers ([`Transport::device_registration`]):
    /// asked before this rank offers or accepts GPUDirect RDMA with it.
    dev_reg: Option<crate::transport::RegCheck>,
    /// Bulk transfers to hand to the transport, in order: receives and sends.
    bulk_rx: Vec<BulkJob>,
    bulk_tx: Vec<BulkJob>,
    bulk_live: usize,
    /// Bulk transfers completed (both ways).
    bulk_count: u64,
    /// Goodbyes said and heard ([`bye`]).
    byes: bye::Byes,
    /// The blocking receive waiting without a request ([`Engine::recv_direct`]), if any.
    direct: Option<Direct>,
}

/// A blocking receive waiting without a request ([`Engine::recv_direct`]). It stands for the
/// first posted receive: it is made only while no receive is posted and no unexpected message
/// matches it, and an arriving message is matched against it before the posted queue, so every
/// receive posted after it matches after it. A complete eager message (one frame, not
/// synchronous, no note) is copied straight into its buffer; any other message that matches
/// it, or a goodbye (which must be able to fail it), first makes it a posted request at the
/// head of the queue ([`State::direct_to_posted`]), which then proceeds as every posted one.
struct Direct {
    buf: *mut u8,
    cap: usize,
    ctx: u32,
    src: i32,
    tag: i32,
    state: DirectState,
}

#[derive(Clone, Copy)]
enum DirectState {
    Waiting,
    Received(Status),
    Posted(u64),
}

/// How [`Engine::recv_direct`] started a receive.
pub enum DirectStart {
    /// Received at once.
    Received(Status),
    /// Waiting without a request: [`Engine::direct_poll`] tells when it is done.
    Waiting,
    /// Posted as the engine request.
    Posted(ReqId),
}

/// A bulk transfer for the transport ([`Transport::bulk_send`], [`Transport::bulk_recv`]): the
/// peer, the request (a send or a receive), the buffer, its bytes, and whether it is device
/// memory.
#[derive(Clone, Copy, Debug)]
struct BulkJob {
    peer: usize,
    req: u64,
    buf: usize,
    len: usize,
    dev: bool,
}

/// The point-to-point engine. See the module documentation.
pub struct Engine {
    tp: Box<dyn Transport>,
    st: State,
    /// Active nonblocking collectives (request ids), advanced by `progress`.
    colls: Vec<u64>,
    in_colls: bool,
    size: usize,
    eager_limit: usize,
    /// Per world rank: the largest frame payload to it ([`Transport::max_payload_to`]).
    max_payload: Vec<usize>,
    /// The first frame of an eager send with a note, assembled (kept for reuse).
    note_frame: Vec<u8>,
}

// SAFETY: the raw buffer pointers in requests are only dereferenced by the engine's methods, and
// the engine is used by one thread at a time (the ABI layer holds it under a process-wide lock);
// the transport is Send.
unsafe impl Send for Engine {}

#[inline]
fn matches(want_ctx: u32, want_src: i32, want_tag: i32, ctx: u32, src: i32, tag: i32) -> bool {
    want_ctx == ctx
        && (want_src == MPI_ANY_SOURCE || want_src == src)
        && (want_tag == MPI_ANY_TAG || want_tag == tag)
}

impl Engine {
    /// An engine over `transport` for rank `my_world_rank` of `world_size`, eager limit from
    /// `GPUMPI_EAGER_LIMIT`.
    pub fn new(transport: Box<dyn Transport>, my_world_rank: usize, world_size: usize) -> Self {
        let mut e = Self::with_config(
            transport,
            my_world_rank,
            world_size,
            EngineConfig::from_env(),
        );
        e.set_net_pipeline(devnet::PipeConfig::from_env());
        e
    }

    /// The chunking of device messages between nodes ([`devnet`]; the default until set).
    pub fn set_net_pipeline(&mut self, cfg: devnet::PipeConfig) {
        self.st.pipe_cfg = cfg;
    }

    pub fn with_config(
        transport: Box<dyn Transport>,
        my_world_rank: usize,
        world_size: usize,
        cfg: EngineConfig,
    ) -> Self {
        let max_payload: Vec<usize> = (0..world_size)
            .map(|r| transport.max_payload_to(r).max(8))
            .collect();
        let peers: Vec<rndv::PeerFacts> = (0..world_size)
            .map(|r| rndv::PeerFacts {
                can_read: r == my_world_rank || transport.can_read_remote(r),
                own_cores: r != my_world_rank && transport.own_cores(r),
                stream_stalled: false,
                crowded: false,
            })
            .collect();
        let slots = (0..world_size)
            .map(|r| {
                (cfg.share && r != my_world_rank)
                    .then(|| transport.copy_slots(r))
                    .flatten()
            })
            .collect();
        let rates = transport.copy_rates();
        let near: Vec<bool> = (0..world_size).map(|r| transport.same_node(r)).collect();
        let byes = bye::Byes::new(world_size, &near);
        let bulk_min: Vec<Option<usize>> = (0..world_size).map(|r| transport.bulk_min(r)).collect();
        let bulk_dev = (0..world_size).map(|r| transport.bulk_device(r)).collect();
        let eager_max = (0..world_size)
            .map(|r| eager_limit_to(cfg.eager_limit, transport.net_direct(r), bulk_min[r]))
            .collect();
        let dev_reg = transport.device_registration();
        tracing::debug!(
            "engine: rank {my_world_rank}/{world_size}, eager limit {} bytes, single-copy threshold {:?} (None: measured choice), rates {rates:?}, frame payload {} bytes (up to {} to some peers)",
            cfg.eager_limit,
            cfg.cma_min,
            transport.max_payload().max(8),
            max_payload.iter().max().copied().unwrap_or(8)
        );
        Engine {
            tp: transport,
            st: State {
                me: my_world_rank,
                reqs: Slab::new(),
                posted: VecDeque::new(),
                unexp: Slab::new(),
                unexp_order: VecDeque::new(),
                frags: HashMap::new(),
                outq: (0..world_size).map(|_| VecDeque::new()).collect(),
                busy: 0,
                loopq: VecDeque::new(),
                reads: Vec::new(),
                writes: Vec::new(),
                copying: Vec::new(),
                dev: Box::new(devcopy::NoDevice),
                stream_watch: vec![None; world_size],
                peers,
                near,
                rates,
                cma_min: cfg.cma_min,
                push_min: cfg.push_min,
                slots,
                slots_busy: vec![0; world_size],
                coop_tx: Vec::new(),
                pipe_cfg: devnet::PipeConfig::default(),
                tx_pipes: Vec::new(),
                rx_pipes: Vec::new(),
                dev_stats: devnet::Stats::default(),
                coll_dev: coll::DevSteps::default(),
                refused: VecDeque::new(),
                records: None,
                told: VecDeque::new(),
                bulk_min,
                bulk_dev,
                eager_max,
                dev_reg,
                bulk_rx: Vec::new(),
                bulk_tx: Vec::new(),
                bulk_live: 0,
                direct: None,
                bulk_count: 0,
                byes,
            },
            colls: Vec::new(),
            in_colls: false,
            size: world_size,
            eager_limit: cfg.eager_limit,
            max_payload,
            note_frame: Vec::new(),
        }
    }

    pub fn world_rank(&self) -> usize {
        self.st.me
    }

    pub fn world_size(&self) -> usize {
        self.size
    }

    pub fn eager_limit(&self) -> usize {
        self.eager_limit
    }

    /// The eager limit for messages to `dst` ([`eager_limit_to`], fixed at set-up).
    fn eager_to(&self, dst: usize) -> usize {
        self.st.eager_max[dst]
    }

    /// Whether this rank is bound to a core no other rank shares (every peer's
    /// [`rndv::PeerFacts::own_cores`]; false for a single rank).
    pub fn own_core(&self) -> bool {
        self.size > 1
            && (0..self.size)
                .filter(|&r| r != self.st.me)
                .all(|r| self.st.peers[r].own_cores)
    }

    /// Whether another rank of this node last ran on this rank's CPU
    /// ([`Transport::shares_cpu`]).
    pub fn shares_cpu(&self) -> bool {
        self.tp.shares_cpu()
    }

    /// The transport's collective slot areas ([`Transport::coll_slots`]).
    pub fn coll_slots(&self) -> Option<Vec<usize>> {
        self.tp.coll_slots()
    }

    /// The transport's collective record rings ([`Transport::coll_records`]).
    pub fn coll_records(&self) -> Vec<usize> {
        self.tp.coll_records()
    }

    /// The transport's agreement words ([`Transport::agree_words`]).
    pub fn agree_words(&self) -> Vec<usize> {
        self.tp.agree_words()
    }

    /// The transport's collective scratch areas ([`Transport::coll_scratch`]).
    pub fn coll_scratch(&self) -> Option<(Vec<usize>, usize)> {
        self.tp.coll_scratch()
    }

    /// Install the device copies: the library's CUDA ones at MPI_Init, a host-memory fake in
    /// the engine's tests.
    pub fn set_device_copies(&mut self, d: Box<dyn devcopy::DevCopy>) {
        self.st.dev = d;
    }

    /// Whether this rank shares its CPUs with more ranks than there are CPUs (the node's ranks,
    /// or the job's ranks on this machine: [`rndv::PeerFacts::crowded`]; false until set).
    pub fn set_crowded(&mut self, yes: bool) {
        for f in &mut self.st.peers {
            f.crowded = yes;
        }
    }

    /// Change the single-copy threshold (see [`EngineConfig::cma_min`]).
    pub fn set_cma_min(&mut self, bytes: Option<usize>) {
        self.st.cma_min = bytes;
    }

    /// Start a send.
    ///
    /// # Safety
    /// `a.buf .. a.buf + a.len` must stay valid and unmodified until the request completes.
    pub unsafe fn isend(&mut self, a: SendArgs) -> MpiResult<ReqId> {
        if a.dst_world >= self.size {
            crate::mpi_bail!(
                MPI_ERR_INTERN,
                "isend to world rank {} of {}",
                a.dst_world,
                self.size
            );
        }
        debug_assert!(
            !matches!(a.dev, Some(DevSend::Ipc(_))) || a.dst_world != self.st.me,
            "no IPC to self"
        );
        let near = self.st.near[a.dst_world];
        let ipc = match a.dev {
            Some(DevSend::Ipc(e)) if a.dst_world != self.st.me && near => Some(e),
            _ => None,
        };
        // A device buffer CUDA IPC cannot share (or any device buffer to a peer on another
        // node) goes through the pipe to the receiver, or, without one (or to this rank, or
        // off the node), as a host copy made now.
        // A device rendezvous to another node is pipelined through host memory ([`devnet`])
        // once the receiver asks for it, or sent from the device as one bulk transfer where
        // both ends' transports take device memory (GPUDirect RDMA).
        let eager_limit = self.eager_to(a.dst_world);
        let dev_bulk = a.dst_world != self.st.me && self.st.bulk_dev[a.dst_world];
        let devnet = a.dev.is_some()
            && !near
            && a.dst_world != self.st.me
            && (self.st.pipe_cfg.on || dev_bulk)
            && a.len > eager_limit;
        // GPUDirect RDMA is offered only for a message the receiver may take in bulk (from the
        // threshold on) and only where this very buffer registers with the NIC: a receiver
        // answering `BULK` then finds it ready, and a buffer that cannot be registered takes
        // the pipeline through host memory.
        let offer = devnet
            && dev_bulk
            && self.st.bulk_min[a.dst_world].is_some_and(|m| a.len >= m)
            && self.st.dev_registers(a.buf as usize, a.len).map_or_else(
                |e| {
                    tracing::debug!(
                        "engine: rank {}: {} bytes device to rank {}: no GPUDirect RDMA offered, through host memory (the device buffer does not register with the NIC: {e})",
                        self.st.me,
                        a.len,
                        a.dst_world
                    );
                    false
                },
                |()| true,
            );
        let (mut buf, mut staged, mut pipe) = (a.buf, None, None);
        if a.dev.is_some() && ipc.is_none() && !devnet {
            if a.dst_world != self.st.me && near {
                pipe = self.st.dev.pipe_offer(self.st.me, a.dst_world);
            }
            if pipe.is_none() {
                let t0 = std::time::Instant::now();
                // SAFETY: the caller guarantees a.buf..a.buf+a.len is (device) memory to read.
                match unsafe { self.st.dev.dtoh_stage(a.buf as usize, a.len) } {
                    Ok(v) => {
                        self.st.dev_stats.staged.add(a.len, t0);
                        buf = v.as_ptr();
                        staged = Some(v);
                    }
                    Err(e) => crate::mpi_bail!(
                        MPI_ERR_OTHER,
                        "copying a device send buffer to host memory failed: {e}"
                    ),
                }
            }
        }
        let eager = a.len <= eager_limit && ipc.is_none() && pipe.is_none();
        // A note needs room in the first frame (every transport here has it).
        let note = a
            .note
            .filter(|_| self.max_payload[a.dst_world] >= 2 * NOTE_BYTES);
        let coop = if !eager && a.dev.is_none() && a.dst_world != self.st.me {
            self.st.offer_slot(a.dst_world, a.len)
        } else {
            None
        };
        let hdr = Header {
            kind: if eager { kind::EAGER } else { kind::RTS },
            flags: if a.sync { FLAG_SYNC } else { 0 }
                | if ipc.is_some() { FLAG_IPC } else { 0 }
                | if pipe.is_some() { FLAG_PIPE } else { 0 }
                | if coop.is_some() { FLAG_COOP } else { 0 }
                | if note.is_some() { FLAG_NOTE } else { 0 }
                | if devnet { FLAG_DEVNET } else { 0 },
            ctx: a.ctx,
            src_rank: a.src_rank,
            tag: a.tag,
            total: a.len as u64,
            rreq: if offer {
                RTS_DEV_BULK
            } else {
                coop.map_or(0, u64::from)
            },
            arg: buf as u64,
            ..Default::default()
        };
        let status = Status {
            source: a.src_rank,
            tag: a.tag,
            error: MPI_SUCCESS,
            bytes: a.len,
            cancelled: false,
            finalized: false,
        };
        let sreq = self.st.reqs.insert(Req {
            done: false,
            freed: false,
            status,
            kind: ReqKind::Send(SendState {
                buf,
                len: a.len,
                hdr,
                pushed: false,
                need_ack: eager && a.sync,
                dev: ipc.is_some() || pipe.is_some() || devnet,
                staged,
                coop: coop.map(|i| (a.dst_world, i)),
                note,
                refused: None,
                bulk: false,
            }),
        });
        if let Some(slot) = coop {
            self.st.coop_tx.push(CoopSend {
                peer: a.dst_world,
                slot,
                sreq,
            });
        }
        let mut hdr = hdr;
        hdr.sreq = sreq;
        if let Some(Req {
            kind: ReqKind::Send(s),
            ..
        }) = self.st.reqs.get_mut(sreq)
        {
            s.hdr.sreq = sreq;
        }
        if a.dst_world == self.st.me {
            if eager {
                // SAFETY: the caller guarantees buf..buf+len is valid (a zero length needs no
                // read); a device buffer was staged above.
                let mut data = if a.len == 0 {
                    Vec::new()
                } else {
                    unsafe { std::slice::from_raw_parts(buf, a.len) }.to_vec()
                };
                data.extend_from_slice(note.as_ref().map_or(&[][..], |n| &n[..]));
                self.st.loopq.push_back((hdr, data));
                self.st.mark_pushed(sreq);
            } else {
                let data = note.map_or(Vec::new(), |n| n.to_vec());
                self.st.loopq.push_back((hdr, data));
            }
        } else {
            let out = if eager {
                Out::Eager {
                    sreq,
                    off: 0,
                    first: true,
                }
            } else {
                let p: Option<Box<[u8]>> = match (ipc, pipe) {
                    (Some(b), _) => Some(b.to_vec().into_boxed_slice()),
                    (None, Some(d)) => Some(d),
                    (None, None) => None,
                };
                match (p, note) {
                    (p, Some(n)) => {
                        let mut v = p.map_or(Vec::new(), |p| p.into_vec());
                        v.extend_from_slice(&n);
                        Out::CtrlP(hdr, v.into_boxed_slice())
                    }
                    (Some(p), None) => Out::CtrlP(hdr, p),
                    (None, None) => Out::Ctrl(hdr),
                }
            };
            self.st.enqueue(a.dst_world, out);
            self.flush(a.dst_world);
            // Frames a PXN forwarder held for aggregation leave before the call returns: the
            // application may compute for long before its next MPI call.
            self.tp.post_held();
        }
        Ok(ReqId(sreq))
    }

    /// A send that is complete as soon as it is in the transport, written there at once when
    /// it can be: a standard eager send of host memory to another rank, no note, that fits
    /// one frame, with nothing queued to that rank before it (so it cannot overtake an earlier
    /// message), into free ring space; or the same send to this rank, delivered at once when
    /// nothing sent to this rank before waits in the loopback queue. No request is made: the
    /// receiver needs the sender's request only for an acknowledgement (synchronous sends) or
    /// to match later fragments, and this message has neither. Returns whether it was sent; `false` leaves nothing
    /// behind (the caller takes [`Engine::isend`]).
    ///
    /// # Safety
    /// `a.buf .. a.buf + a.len` must be valid to read for the duration of the call.
    pub unsafe fn send_now(&mut self, a: &SendArgs) -> bool {
        let to_self = a.dst_world == self.st.me;
        if a.sync
            || (to_self && a.len > SELF_NOW_MAX)
            || a.dev.is_some()
            || a.note.is_some()
            || a.dst_world >= self.size
            || a.len > self.eager_to(a.dst_world)
            || (a.len > self.max_payload[a.dst_world] && !to_self)
            || (to_self && !self.st.loopq.is_empty())
            || !self.st.outq[a.dst_world].is_empty()
        {
            return false;
        }
        let hdr = Header {
            kind: kind::EAGER,
            ctx: a.ctx,
            src_rank: a.src_rank,
            tag: a.tag,
            total: a.len as u64,
            ..Default::default()
        };
        let data = if a.len == 0 {
            &[][..]
        } else {
            // SAFETY: the caller guarantees a.buf..a.buf+a.len is readable.
            unsafe { std::slice::from_raw_parts(a.buf, a.len) }
        };
        if to_self {
            // Delivered here and now, as progress would deliver it from the loopback queue
            // (empty: nothing sent to this rank earlier is still waiting there): into a
            // matching posted receive, else into the unexpected queue. Through a copy on the
            // stack: the matching receive's buffer may be this very buffer (an `MPI_Irecv`
            // and an `MPI_Send` of one buffer to self), and deliveries copy without overlap.
            let mut bounce = [0u8; SELF_NOW_MAX];
            bounce[..data.len()].copy_from_slice(data);
            let me = self.st.me;
            self.st.on_frame(me, &hdr, &bounce[..data.len()]);
            return true;
        }
        let sent = self.tp.try_send(a.dst_world, &hdr, data);
        if sent {
            self.tp.post_held();
        }
        sent
    }

    /// A receive that completes at once, without a request, from a message already here:
    /// the first unexpected message matching (`ctx`, `src`, `tag`) when it is a complete eager
    /// message needing nothing more of this rank (see `State::take_arrived`); when none
    /// matches and the receive is small (at most [`INLINE`] bytes), the same after one
    /// progress pass, which queues what the transport holds (small messages in place, no
    /// allocation). Returns the status when it received; `None` leaves the matching state as
    /// the caller's [`Engine::irecv`] needs it: a message that matches but must be received
    /// through a request stays first in line.
    ///
    /// Order is MPI's: an unexpected message matches no posted receive (a receive posted
    /// takes the first unexpected one that matches, and an arriving message the first
    /// posted one), so an earlier posted receive can never be passed, and the queue keeps
    /// each sender's order.
    ///
    /// Without `pass`, only a message already queued here is taken (a nonblocking receive,
    /// which is usually posted before its message comes and must not delay what its caller
    /// does next).
    ///
    /// # Safety
    /// `r.buf .. r.buf + r.cap` must be host memory valid to write for the duration of the call.
    pub unsafe fn recv_now(&mut self, r: &RecvArgs, pass: bool) -> Option<Status> {
        // SAFETY (both calls): the caller guarantees the buffer is writable.
        match unsafe { self.st.take_arrived(r) } {
            Arrived::Taken(s) => return Some(s),
            Arrived::NotSimple => return None,
            Arrived::Nothing => {}
        }
        if !pass || r.cap > INLINE || !self.progress() {
            return None;
        }
        match unsafe { self.st.take_arrived(r) } {
            Arrived::Taken(s) => Some(s),
            _ => None,
        }
    }

    /// Receives at once what is here ([`Engine::recv_now`], with or without its progress
    /// `pass`: `Err` with the status), else posts the receive ([`Engine::irecv`]: `Ok` with
    /// its request).
    ///
    /// # Safety
    /// The buffer is valid to write, and the receive's, until the request completes.
    pub unsafe fn recv_start(
        &mut self,
        r: &RecvArgs,
        pass: bool,
    ) -> MpiResult<Result<ReqId, Status>> {
        // SAFETY (both calls): the caller's contract.
        if let Some(st) = unsafe { self.recv_now(r, pass) } {
            return Ok(Err(st));
        }
        Ok(Ok(unsafe {
            self.irecv(r.buf, r.cap, r.ctx, r.src, r.tag)
        }?))
    }

    /// Start a blocking receive of host memory: a message already here is received at once
    /// ([`Engine::recv_now`] without its pass); when none matches, and no receive is posted,
    /// none waits this way already (another thread's) and no rank said goodbye, the receive
    /// waits without a request ([`Direct`]): the caller then makes progress and asks
    /// [`Engine::direct_poll`] until it is done. Otherwise the receive is posted.
    /// Only on a job within one node (goodbyes of off-node ranks are watched through the
    /// posted queue).
    ///
    /// # Safety
    /// The buffer is valid to write, and the receive's, until the receive is done; while it
    /// waits without a request, the caller must call [`Engine::direct_poll`] until it returns
    /// a result, or [`Engine::direct_abandon`].
    pub unsafe fn recv_direct(&mut self, r: &RecvArgs) -> MpiResult<DirectStart> {
        // SAFETY: the caller guarantees the buffer is writable.
        match unsafe { self.st.take_arrived(r) } {
            Arrived::Taken(s) => return Ok(DirectStart::Received(s)),
            Arrived::NotSimple => {}
            Arrived::Nothing
                if self.st.direct.is_none()
                    && self.st.posted.is_empty()
                    && !self.st.byes.remote()
                    && !self.st.byes_heard() =>
            {
                self.st.direct = Some(Direct {
                    buf: r.buf,
                    cap: r.cap,
                    ctx: r.ctx,
                    src: r.src,
                    tag: r.tag,
                    state: DirectState::Waiting,
                });
                return Ok(DirectStart::Waiting);
            }
            Arrived::Nothing => {}
        }
        // SAFETY: the caller's contract.
        let id = unsafe { self.irecv(r.buf, r.cap, r.ctx, r.src, r.tag) }?;
        Ok(DirectStart::Posted(id))
    }

    /// What became of the receive waiting without a request: `None` while it waits, its
    /// status once received, or the request it became (then waited for as any engine
    /// request). Either result ends the wait without a request.
    pub fn direct_poll(&mut self) -> Option<Result<Status, ReqId>> {
        let d = self.st.direct.as_ref()?;
        let out = match d.state {
            DirectState::Waiting => return None,
            DirectState::Received(s) => Ok(s),
            DirectState::Posted(id) => Err(ReqId(id)),
        };
        self.st.direct = None;
        Some(out)
    }

    /// Give up the receive waiting without a request (its caller stops waiting: an error or
    /// an unwind), so that nothing writes its buffer later. A request it became stays posted
    /// (as one whose wait was abandoned).
    pub fn direct_abandon(&mut self) {
        self.st.direct = None;
    }

    /// Post a receive of at most `cap` bytes from `src` (communicator rank or `MPI_ANY_SOURCE`)
    /// with `tag` (or `MPI_ANY_TAG`) on context `ctx`.
    ///
    /// # Safety
    /// `buf .. buf + cap` must stay valid and unaliased until the request completes.
    pub unsafe fn irecv(
        &mut self,
        buf: *mut u8,
        cap: usize,
        ctx: u32,
        src: i32,
        tag: i32,
    ) -> MpiResult<ReqId> {
        self.irecv_dev(buf, cap, false, ctx, src, tag)
    }

    /// [`Engine::irecv`] into device memory when `dev` (this process's CUDA device buffer):
    /// a sender's exported device buffer is copied peer to local, host-protocol data is copied
    /// host to device.
    ///
    /// # Safety
    /// As [`Engine::irecv`].
    pub unsafe fn irecv_dev(
        &mut self,
        buf: *mut u8,
        cap: usize,
        dev: bool,
        ctx: u32,
        src: i32,
        tag: i32,
    ) -> MpiResult<ReqId> {
        let rreq = self.st.insert_recv(buf, cap, dev);
        let found = self.st.unexp_order.iter().position(|&u| {
            let m = self.st.unexp.get(u).expect("unexpected entry");
            matches(ctx, src, tag, m.ctx, m.src_rank, m.tag)
        });
        match found {
            Some(pos) => {
                let uid = self.st.unexp_order.remove(pos).unwrap();
                let m = self.st.unexp.remove(uid).unwrap();
                self.st.bind(rreq, uid, m);
                // Single-copy reads wait for the next progress call: a Sendrecv posts its send
                // right after this receive, and a long read here would hold the send's RTS back
                // (serializing a ring of Sendrecv calls).
                self.flush_all();
            }
            // Only ranks that called MPI_Finalize could match it: it fails now.
            None if self.st.byes_heard() && self.st.fail_if_finalized(rreq, ctx, src, tag) => {}
            None => {
                if let Some(Req {
                    kind: ReqKind::Recv(r),
                    ..
                }) = self.st.reqs.get_mut(rreq)
                {
                    r.posted = true;
                }
                self.st.posted.push_back(PostedRecv {
                    rreq,
                    ctx,
                    src,
                    tag,
                });
            }
        }
        Ok(ReqId(rreq))
    }

    /// Nonblocking probe (makes progress first).
    pub fn iprobe(&mut self, ctx: u32, src: i32, tag: i32) -> Option<Status> {
        self.progress();
        self.st
            .find_unexp(ctx, src, tag)
            .map(|(_, uid)| self.st.unexp_status(uid))
    }

    /// Nonblocking matched probe: the message leaves matching and can only be received with
    /// [`Engine::imrecv`].
    pub fn improbe(&mut self, ctx: u32, src: i32, tag: i32) -> Option<(MsgId, Status)> {
        self.progress();
        let (pos, uid) = self.st.find_unexp(ctx, src, tag)?;
        self.st.unexp_order.remove(pos);
        Some((MsgId(uid), self.st.unexp_status(uid)))
    }

    /// Receive a message obtained from [`Engine::improbe`].
    ///
    /// # Safety
    /// As [`Engine::irecv`].
    pub unsafe fn imrecv(&mut self, msg: MsgId, buf: *mut u8, cap: usize) -> MpiResult<ReqId> {
        self.imrecv_dev(msg, buf, cap, false)
    }

    /// [`Engine::imrecv`] into device memory when `dev` (see [`Engine::irecv_dev`]).
    ///
    /// # Safety
    /// As [`Engine::irecv`].
    pub unsafe fn imrecv_dev(
        &mut self,
        msg: MsgId,
        buf: *mut u8,
        cap: usize,
        dev: bool,
    ) -> MpiResult<ReqId> {
        let Some(m) = self.st.unexp.remove(msg.0) else {
            crate::mpi_bail!(
                MPI_ERR_REQUEST,
                "message handle was already received or is invalid"
            );
        };
        let rreq = self.st.insert_recv(buf, cap, dev);
        self.st.bind(rreq, msg.0, m);
        self.flush_all();
        Ok(ReqId(rreq))
    }

    /// The status of a completed request, which is then released; `None` while incomplete
    /// (makes progress once when incomplete).
    pub fn test(&mut self, req: ReqId) -> Option<Status> {
        if !self.is_done(req) {
            self.progress();
        }
        self.take(req)
    }

    /// [`Engine::test`] without the progress pass: the status of a completed request, which
    /// is then released; `None` while incomplete.
    pub fn take(&mut self, req: ReqId) -> Option<Status> {
        if !self.is_done(req) {
            return None;
        }
        self.st.reqs.remove(req.0).map(|r| r.status)
    }

    /// Whether `req` is complete, without releasing it or making progress.
    pub fn is_done(&self, req: ReqId) -> bool {
        match self.st.reqs.get(req.0) {
            Some(r) => r.done,
            None => panic!("engine: unknown request id {:#x}", req.0),
        }
    }

    /// The note the message a receive matched carried (`None`: none, or not a receive).
    pub fn note(&self, req: ReqId) -> Option<Note> {
        match self.st.reqs.get(req.0) {
            Some(Req {
                kind: ReqKind::Recv(rs),
                ..
            }) => rs.note,
            _ => None,
        }
    }

    /// The notes of the unexpected messages on context `ctx` with tag `tag`, with their
    /// senders (ranks in the communicator).
    pub fn unexpected_notes(&self, ctx: u32, tag: i32) -> Vec<(usize, Note)> {
        self.st
            .unexp_order
            .iter()
            .filter_map(|&u| self.st.unexp.get(u))
            .filter(|m| m.ctx == ctx && m.tag == tag)
            .filter_map(|m| Some((m.src_rank as usize, m.note?)))
            .collect()
    }

    /// Whether world rank `peer` is on this node ([`Transport::same_node`]).
    pub fn same_node(&self, peer: usize) -> bool {
        self.st.near.get(peer).copied().unwrap_or(true)
    }

    /// The status of a completed request without releasing it (`MPI_Request_get_status`).
    pub fn peek(&self, req: ReqId) -> Option<Status> {
        self.st.reqs.get(req.0).filter(|r| r.done).map(|r| r.status)
    }

    /// Cancel: a receive that has not matched completes as cancelled; anything else is left
    /// alone (sends are never cancelled). Returns whether the request was cancelled.
    pub fn cancel(&mut self, req: ReqId) -> bool {
        let Some(r) = self.st.reqs.get_mut(req.0) else {
            return false;
        };
        if let ReqKind::Recv(rs) = &mut r.kind {
            if rs.posted {
                rs.posted = false;
                r.done = true;
                r.status = Status {
                    source: MPI_ANY_SOURCE,
                    tag: MPI_ANY_TAG,
                    error: MPI_SUCCESS,
                    bytes: 0,
                    cancelled: true,
                    finalized: false,
                };
                self.st.posted.retain(|p| p.rreq != req.0);
                return true;
            }
        }
        false
    }

    /// Make an unfinished host send or matched receive independent of its caller's buffer: the
    /// data not yet handed to the transport is read from a copy the request owns from now on,
    /// and the data still to arrive goes to a buffer the request owns. For operations given
    /// up in flight (a collective schedule abandoned when its peers called something else),
    /// whose buffers the caller may free or reuse once its call returned. Device buffers,
    /// sends already in the transport (bulk transfers included), and receives whose data a
    /// copy already in progress writes (a shared read, a pipe, a bulk transfer) are left as
    /// they are: `true` for those, and for a matched receive left as it is (a shared read, a
    /// pipe, a bulk transfer, device memory), whose writes into the caller's buffer the caller
    /// must let end ([`Engine::progress`] until [`Engine::is_done`]) before that buffer may go
    /// away; they end, since a bulk transfer is agreed by both ends and the sender's part is
    /// never cancelled.
    pub fn detach(&mut self, req: ReqId) -> bool {
        let busy = self
            .st
            .reads
            .iter()
            .any(|r| r.rreq == req.0 && r.coop.is_some())
            || self.st.copying.iter().any(|c| c.then.rreq == req.0);
        if let Some(Req {
            kind: ReqKind::Recv(rs),
            done: false,
            ..
        }) = self.st.reqs.get_mut(req.0)
        {
            if rs.posted || rs.cap == 0 {
                return false;
            }
            if !rs.dev && !busy && !rs.bulk && rs.stage.is_none() {
                let mut v = vec![0u8; rs.cap];
                rs.buf = v.as_mut_ptr();
                rs.owned = Some(v);
                return false;
            }
            return true;
        }
        if let Some(Req {
            kind: ReqKind::Send(s),
            done: false,
            ..
        }) = self.st.reqs.get_mut(req.0)
        {
            if s.bulk {
                // An agreed bulk transfer reads the caller's buffer until it ends.
                return true;
            }
            if s.dev || s.pushed || s.staged.is_some() || s.len == 0 {
                return false;
            }
            // SAFETY: the send's buffer is valid for len bytes until the send completes (the
            // contract of isend), and the caller detaches before its buffer goes away.
            let v = unsafe { std::slice::from_raw_parts(s.buf, s.len) }.to_vec();
            s.buf = v.as_ptr();
            s.staged = Some(Box::new(v));
        }
        false
    }

    /// Release a request; an incomplete one is released when it completes.
    pub fn free(&mut self, req: ReqId) {
        let done = match self.st.reqs.get_mut(req.0) {
            Some(r) => {
                r.freed = true;
                r.done
            }
            None => return,
        };
        if done {
            self.st.reqs.remove(req.0);
        }
    }

    /// Block (with [`Backoff`]) until `req` completes; returns its status and releases it.
    pub fn wait(&mut self, req: ReqId) -> Status {
        let mut b = Backoff::new();
        loop {
            if self.is_done(req) {
                return self.st.reqs.remove(req.0).expect("request").status;
            }
            if self.progress() {
                b.reset();
            } else {
                b.snooze();
            }
        }
    }

    /// Start a nonblocking collective: the returned request completes (test/wait/free like any
    /// other) when the schedule has run; its status carries the error class of a failed step.
    /// `progress` advances it.
    pub fn start_coll(&mut self, exec: coll::CollExec) -> ReqId {
        let id = self.st.reqs.insert(Req {
            done: false,
            freed: false,
            status: Status::default(),
            kind: ReqKind::Coll(Some(Box::new(exec))),
        });
        self.colls.push(id);
        self.advance_colls();
        ReqId(id)
    }

    fn advance_colls(&mut self) -> bool {
        if self.in_colls {
            return false;
        }
        self.in_colls = true;
        let mut did = false;
        let mut i = 0;
        while i < self.colls.len() {
            let id = self.colls[i];
            let exec = match self.st.reqs.get_mut(id) {
                Some(Req {
                    kind: ReqKind::Coll(x),
                    ..
                }) => x.take(),
                _ => None,
            };
            let Some(mut exec) = exec else {
                self.colls.swap_remove(i);
                continue;
            };
            let r = exec.advance(self);
            let Some(req) = self.st.reqs.get_mut(id) else {
                unreachable!("collective request vanished")
            };
            match r {
                Ok(false) => {
                    req.kind = ReqKind::Coll(Some(exec));
                    i += 1;
                    continue;
                }
                Ok(true) => {
                    req.status = Status {
                        source: MPI_ANY_SOURCE,
                        tag: MPI_ANY_TAG,
                        ..Status::default()
                    }
                }
                Err(e) => {
                    tracing::debug!("engine: nonblocking collective failed: {e}");
                    req.status = Status {
                        source: MPI_ANY_SOURCE,
                        tag: MPI_ANY_TAG,
                        error: e.class,
                        ..Status::default()
                    };
                }
            }
            drop(exec);
            self.st.complete(id);
            self.colls.swap_remove(i);
            did = true;
        }
        self.in_colls = false;
        did
    }

    /// Bulk transfers this rank completed so far, sends and receives ([`Transport::bulk_send`]).
    pub fn bulk_transfers(&self) -> u64 {
        self.st.bulk_count
    }

    /// Number of live requests (for leak checks in tests).
    pub fn live_requests(&self) -> usize {
        self.st.reqs.len()
    }

    /// Make progress: deliver incoming messages, perform pending single-copy reads, push queued
    /// frames. Returns whether anything happened.
    pub fn progress(&mut self) -> bool {
        let mut did = false;
        while let Some((h, p)) = self.st.loopq.pop_front() {
            let me = self.st.me;
            self.st.on_frame(me, &h, &p);
            did = true;
        }
        let st = &mut self.st;
        if self.tp.poll(&mut |src, h, p| st.on_frame(src, h, p)) > 0 {
            did = true;
        }
        if self.st.bulk_live > 0 || !self.st.bulk_rx.is_empty() || !self.st.bulk_tx.is_empty() {
            did |= self.run_bulk();
        }
        if !self.st.reads.is_empty() || !self.st.writes.is_empty() {
            // Frames already queued (an RTS, FINs) go out before a possibly long copy.
            if self.st.busy > 0 {
                self.flush_all();
            }
            let wrote = !self.st.writes.is_empty();
            self.run_writes();
            if self.run_reads() || wrote {
                did = true;
            }
        }
        if !self.st.coop_tx.is_empty() && self.run_coop_sends() {
            did = true;
        }
        if !self.st.copying.is_empty() {
            self.poll_copies();
            did = true;
        }
        if (!self.st.tx_pipes.is_empty() || !self.st.rx_pipes.is_empty()) && self.run_pipes() {
            did = true;
        }
        if self.st.busy > 0 && self.flush_all() {
            did = true;
        }
        if !self.colls.is_empty() && self.advance_colls() {
            did = true;
        }
        // What this pass wrote and the transport held for aggregation (a PXN forwarder's
        // frames) leaves now, not at the next MPI call.
        self.tp.post_held();
        self.tick_watch();
        did
    }

    /// Hand the queued bulk transfers to the transport, in order, and finish the ones it
    /// reports complete. Returns whether any completed.
    fn run_bulk(&mut self) -> bool {
        for BulkJob {
            peer,
            req: rreq,
            buf,
            len,
            dev,
        } in std::mem::take(&mut self.st.bulk_rx)
        {
            // SAFETY: the receive owns buf..buf+len (len <= cap) until it completes, which
            // happens only when the transport reports this transfer.
            if unsafe { self.tp.bulk_recv(peer, rreq, buf as *mut u8, len, dev) } {
                self.st.bulk_live += 1;
            } else {
                tracing::error!("engine: no bulk transfers from rank {peer}");
                self.st.fail(rreq);
                self.st.complete(rreq);
            }
        }
        for BulkJob {
            peer,
            req: sreq,
            buf,
            len,
            dev,
        } in std::mem::take(&mut self.st.bulk_tx)
        {
            // SAFETY: the send's buffer holds len bytes and stays unchanged until the send
            // completes, which happens only when the transport reports this transfer.
            if unsafe { self.tp.bulk_send(peer, sreq, buf as *const u8, len, dev) } {
                self.st.bulk_live += 1;
            } else {
                tracing::error!(
                    "engine: rank {peer} asked for a bulk transfer this rank cannot make"
                );
                if let Some(q) = self.st.reqs.get_mut(sreq) {
                    q.status.error = crate::standard::consts::MPI_ERR_OTHER;
                }
                self.st.mark_pushed(sreq);
            }
        }
        let st = &mut self.st;
        let n = self.tp.bulk_poll(&mut |d| st.bulk_done(d));
        self.st.bulk_live -= n;
        n > 0
    }

    /// Write pushed device rendezvous data into the receivers' buffers (see `kind::PUT`).
    fn run_writes(&mut self) {
        let writes = std::mem::take(&mut self.st.writes);
        for PendingWrite { mut then, export } in writes {
            let Some(Req {
                kind: ReqKind::Send(s),
                ..
            }) = self.st.reqs.get(then.sreq)
            else {
                continue;
            };
            then.want = then.want.min(s.len);
            // SAFETY: the send's device buffer holds len >= want bytes until the send
            // completes; the receiver keeps its buffer (a posted receive) until our DONE.
            let r = unsafe {
                self.st
                    .dev
                    .write(then.peer, &export, s.buf as usize, then.want)
            };
            self.st.started(then, r);
        }
    }

    /// Finish the peer copies that are done (see [`Copying`]).
    fn poll_copies(&mut self) {
        let mut i = 0;
        while i < self.st.copying.len() {
            let r = match self.st.copying[i].copy.done() {
                Ok(false) => {
                    i += 1;
                    continue;
                }
                Ok(true) => Ok(()),
                Err(e) => Err(e),
            };
            let c = self.st.copying.swap_remove(i);
            self.st.after_copy(c.then, r);
        }
    }

    /// Where this rank's device messages spent their time ([`devnet::Stats`]), one line for
    /// the log at `MPI_Finalize`; `None` when it moved none.
    pub fn device_net_report(&self) -> Option<String> {
        self.st.dev_stats.report()
    }

    /// The collective schedule steps this rank ran on device memory ([`coll::DevSteps`]).
    pub fn coll_device_steps(&self) -> coll::DevSteps {
        self.st.coll_dev
    }

    /// One line for the log at `MPI_Finalize` of the collective steps on device memory;
    /// `None` when there were none.
    pub fn coll_device_report(&self) -> Option<String> {
        let c = self.st.coll_dev;
        (c != coll::DevSteps::default()).then(|| {
            format!(
                "collective steps on device memory: {} sends ({} bytes), {} receives ({} bytes), {} copies, {} reductions",
                c.sends, c.send_bytes, c.recvs, c.recv_bytes, c.copies, c.reduces
            )
        })
    }

    /// Whether peer copies of device messages are in flight: a blocking wait should poll
    /// without sleeping, since nothing but polling tells when they finish.
    pub fn device_copies_pending(&self) -> bool {
        !self.st.copying.is_empty() || !self.st.tx_pipes.is_empty() || !self.st.rx_pipes.is_empty()
    }

    /// The descriptors a thread waiting for this engine's progress may sleep on, and whether
    /// they are complete (see [`Transport::wait_fds`]): not while the engine itself has work
    /// that only polling moves (frames queued for a full channel, single-copy reads or
    /// writes, device copies, bulk transfers not yet handed over).
    pub fn wait_fds(&self, out: &mut Vec<crate::sys::socket::PollFd>) -> bool {
        let st = &self.st;
        let own = st.busy > 0
            || !st.loopq.is_empty()
            || !st.reads.is_empty()
            || !st.writes.is_empty()
            || !st.coop_tx.is_empty()
            || !st.bulk_rx.is_empty()
            || !st.bulk_tx.is_empty()
            || self.device_copies_pending();
        !own && self.tp.wait_fds(out)
    }

    /// Move the device messages pipelined between nodes on ([`devnet`]): the senders' chunks
    /// to the transport, the receivers' chunks to the device, credits back. Returns whether
    /// anything moved.
    fn run_pipes(&mut self) -> bool {
        let mut moved = false;
        let mut i = 0;
        while i < self.st.tx_pipes.len() {
            let State {
                tx_pipes,
                reqs,
                dev,
                ..
            } = &mut self.st;
            let p = &mut tx_pipes[i];
            let (buf, on_dev) = match reqs.get(p.sreq) {
                Some(Req {
                    kind: ReqKind::Send(s),
                    ..
                }) => (s.buf as usize, s.dev && s.staged.is_none()),
                _ => {
                    tx_pipes.swap_remove(i);
                    continue;
                }
            };
            let (peer, rreq) = (p.peer, p.rreq);
            let maxp = self.max_payload[peer];
            let tp = &mut self.tp;
            // SAFETY: the send's buffer holds len >= want bytes and stays valid until the send
            // completes, which is only after the pipe is done (below).
            moved |= unsafe {
                p.step(&**dev, buf, on_dev, maxp, &mut |off, b| {
                    let h = Header {
                        kind: kind::DATA,
                        rreq,
                        arg: off as u64,
                        ..Default::default()
                    };
                    tp.try_send(peer, &h, b)
                })
            };
            if !p.done() {
                i += 1;
                continue;
            }
            let p = tx_pipes.swap_remove(i);
            self.st.dev_stats.tx.add(p.want(), p.start);
            self.st.dev_stats.tx_chunks += p.copies;
            if p.failed.is_some() {
                if let Some(q) = self.st.reqs.get_mut(p.sreq) {
                    q.status.error = crate::standard::consts::MPI_ERR_OTHER;
                }
            }
            self.st.mark_pushed(p.sreq);
            moved = true;
        }
        let mut i = 0;
        while i < self.st.rx_pipes.len() {
            let (rreq, peer, sreq) = self.st.rx_pipes[i];
            let Some(Req {
                kind: ReqKind::Recv(rs),
                ..
            }) = self.st.reqs.get_mut(rreq)
            else {
                self.st.rx_pipes.swap_remove(i);
                continue;
            };
            let Some(pipe) = rs.pipe.as_mut() else {
                self.st.rx_pipes.swap_remove(i);
                continue;
            };
            let (m, credit) = pipe.step();
            moved |= m;
            let failed = pipe.failed.is_some();
            let finished = pipe.done() && rs.got >= rs.expect;
            if finished {
                self.st.dev_stats.rx.add(pipe.want(), pipe.start);
                self.st.dev_stats.rx_chunks += pipe.copies;
                rs.pipe = None;
            }
            if let Some(limit) = credit.filter(|_| !finished) {
                let h = Header {
                    kind: kind::CREDIT,
                    sreq,
                    rreq,
                    arg: limit as u64,
                    ..Default::default()
                };
                self.st.send_ctrl(peer, h);
            }
            if finished {
                self.st.rx_pipes.swap_remove(i);
                if failed {
                    self.st.fail(rreq);
                }
                self.st.complete(rreq);
                moved = true;
            } else {
                i += 1;
            }
        }
        moved
    }

    /// Carry out the pending single-copy reads. A shared read whose last chunks the sender is
    /// still writing stays pending. Returns whether any data moved or a receive completed.
    fn run_reads(&mut self) -> bool {
        let reads = std::mem::take(&mut self.st.reads);
        let mut moved = false;
        for mut r in reads {
            let Some(Req {
                kind: ReqKind::Recv(rs),
                ..
            }) = self.st.reqs.get(r.rreq)
            else {
                continue;
            };
            let (buf, dev) = (rs.buf, rs.dev);
            // A failed single-copy read means the peer refuses CMA (not a failed device copy).
            let mut refused = r.ipc.is_none();
            let ok = if r.want == 0 {
                true
            } else if let Some(ipc) = &r.ipc {
                if !self
                    .st
                    .dev
                    .worth_mapping(r.src_world, ipc, buf as usize, dev, r.want)
                {
                    self.st.request_stream(r.rreq, r.src_world, r.sreq, r.want);
                    continue;
                }
                // SAFETY: buf holds at least want bytes owned by this receive; the sender keeps
                // its device buffer until our FIN.
                let then = AfterCopy {
                    way: Way::Pull,
                    peer: r.src_world,
                    sreq: r.sreq,
                    rreq: r.rreq,
                    want: r.want,
                };
                let c = unsafe {
                    self.st
                        .dev
                        .read(r.src_world, ipc, buf as usize, dev, r.want)
                };
                self.st.started(then, c);
                continue;
            } else if r.src_world == self.st.me {
                // SAFETY: self-send rendezvous: the sender's (host) buffer is live in this
                // process until FIN is processed, the receive buffer holds at least want bytes,
                // and MPI forbids the two from overlapping.
                unsafe {
                    let src = std::slice::from_raw_parts(r.addr as usize as *const u8, r.want);
                    State::put(&*self.st.dev, buf, dev, 0, src)
                }
            } else if let Some((slot, job)) = &mut r.coop {
                let (slot, mut j) = (*slot, *job);
                let out = self.shared_read(&r, buf, slot, &mut j, &mut moved);
                r.coop = Some((slot, j));
                match out {
                    Some(ok) => ok,
                    None => {
                        self.st.reads.push(r);
                        continue;
                    }
                }
            } else if dev {
                let (src, addr) = (r.src_world, r.addr);
                let tp = &mut self.tp;
                // SAFETY: as below, through page-locked host rounds into the device buffer
                // (buf holds at least want bytes owned by this receive).
                match unsafe {
                    self.st.dev.fill(buf as usize, r.want, &mut |off, chunk| {
                        tp.read_remote(src, addr + off as u64, chunk)
                    })
                } {
                    Ok(ok) => ok,
                    Err(e) => {
                        tracing::error!("engine: copying a message to the device failed: {e}");
                        refused = false;
                        false
                    }
                }
            } else {
                // SAFETY: buf holds at least want bytes (want <= cap) and is owned by this
                // receive; the remote range is the sender's buffer, kept until our FIN.
                unsafe {
                    self.tp.read_remote(
                        r.src_world,
                        r.addr,
                        std::slice::from_raw_parts_mut(buf, r.want),
                    )
                }
            };
            moved = true;
            if ok {
                let fin = Header {
                    kind: kind::FIN,
                    sreq: r.sreq,
                    ..Default::default()
                };
                self.st.send_ctrl(r.src_world, fin);
                self.st.complete(r.rreq);
            } else {
                if refused {
                    // CMA refused at run time: fall back to streaming for this peer from now on.
                    tracing::debug!(
                        "engine: single-copy read from rank {} failed; streaming instead",
                        r.src_world
                    );
                    self.st.peers[r.src_world].can_read = false;
                }
                self.st.request_stream(r.rreq, r.src_world, r.sreq, r.want);
            }
        }
        moved
    }

    /// Copy the chunks of shared read `r` (into host buffer `buf`) that this rank can claim,
    /// opening the sender's slot first (`job`). `Some(ok)`: the receive's data is all in
    /// (`false`: a read failed, the slot is closed); `None`: the sender is still writing a
    /// chunk. `moved` is set when a chunk was copied here.
    fn shared_read(
        &mut self,
        r: &PendingRead,
        buf: *mut u8,
        slot: u8,
        job: &mut Option<coop::Job>,
        moved: &mut bool,
    ) -> Option<bool> {
        let (_, table) = self.st.slots[r.src_world].expect("a shared read has slots");
        // SAFETY: the table is the transport's, mapped while the engine lives; slot < COPY_SLOTS
        // (checked when the RTS arrived).
        let s = unsafe { coop::Slot::at(table, slot as usize) };
        let j = *job.get_or_insert_with(|| s.open(buf as u64, r.want));
        while let Some((off, n)) = s.take_back(&j).or_else(|| s.claim(&j)) {
            // SAFETY: off + n <= want <= cap: buf holds them and is owned by this receive; the
            // remote range is the sender's buffer, kept until our FIN.
            let ok = unsafe {
                self.tp.read_remote(
                    r.src_world,
                    r.addr + off as u64,
                    std::slice::from_raw_parts_mut(buf.add(off), n),
                )
            };
            if !ok {
                s.close(&j);
                return Some(false);
            }
            s.finish();
            *moved = true;
        }
        s.all_done(&j).then_some(true)
    }

    /// Copy chunks of the sends whose receivers opened their shared-copy slots ([`coop`]).
    /// Returns whether a chunk was written.
    fn run_coop_sends(&mut self) -> bool {
        let mut wrote = false;
        let mut i = 0;
        while i < self.st.coop_tx.len() {
            let c = self.st.coop_tx[i];
            let (buf, len) = match self.st.reqs.get(c.sreq) {
                Some(Req {
                    done: false,
                    kind: ReqKind::Send(s),
                    ..
                }) => (s.buf, s.len),
                _ => {
                    self.st.coop_tx.swap_remove(i);
                    continue;
                }
            };
            let (table, _) = self.st.slots[c.peer].expect("an offered slot has a table");
            // SAFETY: the transport's table, mapped while the engine lives; slot < COPY_SLOTS.
            let s = unsafe { coop::Slot::at(table, c.slot as usize) };
            let Some(job) = s.opened() else {
                i += 1;
                continue;
            };
            while let Some((off, n)) = s.claim(&job) {
                if off + n > len {
                    // A receiver asking for more than was sent: leave it to its own reads
                    // (which the kernel bounds to mapped memory).
                    s.give_back(&job, off);
                    break;
                }
                // SAFETY: off + n <= len: the send buffer holds them until the send completes
                // (after the receiver's FIN); the receiver handed over raddr + want through the
                // slot and keeps it until every chunk is done.
                let ok = unsafe {
                    self.tp.write_remote(
                        c.peer,
                        job.raddr + off as u64,
                        std::slice::from_raw_parts(buf.add(off), n),
                    )
                };
                if !ok {
                    s.give_back(&job, off);
                    // Writes to that peer fail: offer it no more slots.
                    self.st.peers[c.peer].can_read = false;
                    break;
                }
                s.finish();
                wrote = true;
            }
            self.st.coop_tx.swap_remove(i);
        }
        wrote
    }

    fn flush_all(&mut self) -> bool {
        let mut did = false;
        for d in 0..self.size {
            if !self.st.outq[d].is_empty() {
                did |= self.flush(d);
            }
        }
        did
    }

    /// Push queued frames for `dst` until the channel is full. Returns whether any went out.
    /// A protocol frame with more frames queued behind it is written held
    /// ([`Transport::try_send_held`]), so that the frames of one flush (a pass's answers to a
    /// window of requests-to-send) leave as one network operation where the transport
    /// aggregates; the last frame is written with `try_send`, which posts them all, and a flush
    /// that stops early posts what it held.
    fn flush(&mut self, dst: usize) -> bool {
        let maxp = self.max_payload[dst];
        let mut did = false;
        let mut held = false;
        loop {
            let more = self.st.outq[dst].len() > 1;
            let Some(front) = self.st.outq[dst].front_mut() else {
                self.st.busy -= 1;
                if held {
                    self.tp.post_held();
                }
                return did;
            };
            match front {
                Out::Ctrl(_) | Out::CtrlP(..) => {
                    let (h, p): (&Header, &[u8]) = match &*front {
                        Out::Ctrl(h) => (h, &[]),
                        Out::CtrlP(h, p) => (h, p),
                        _ => unreachable!("matched a control frame"),
                    };
                    let ok = if more {
                        self.tp.try_send_held(dst, h, p)
                    } else {
                        self.tp.try_send(dst, h, p)
                    };
                    if !ok {
                        if held {
                            self.tp.post_held();
                        }
                        return did;
                    }
                    held |= more;
                    self.st.outq[dst].pop_front();
                }
                Out::Eager { sreq, off, first } => {
                    let sreq = *sreq;
                    let Some(Req {
                        kind: ReqKind::Send(s),
                        ..
                    }) = self.st.reqs.get(sreq)
                    else {
                        self.st.outq[dst].pop_front();
                        continue;
                    };
                    let note = s.note.filter(|_| *first);
                    let room = maxp - note.map_or(0, |_| NOTE_BYTES);
                    let n = (s.len - *off).min(room);
                    // SAFETY: the send buffer is valid for len bytes until the send completes,
                    // which happens only after its last frame is pushed.
                    let mut data = if n == 0 {
                        &[][..]
                    } else {
                        unsafe { std::slice::from_raw_parts(s.buf.add(*off), n) }
                    };
                    if let Some(note) = note {
                        // The first frame's data, then its note (the send's header says so).
                        self.note_frame.clear();
                        self.note_frame.extend_from_slice(data);
                        self.note_frame.extend_from_slice(&note);
                        data = &self.note_frame;
                    }
                    let h = if *first {
                        s.hdr
                    } else {
                        Header {
                            kind: kind::FRAG,
                            sreq,
                            arg: *off as u64,
                            ..Default::default()
                        }
                    };
                    if !self.tp.try_send(dst, &h, data) {
                        if held {
                            self.tp.post_held();
                        }
                        return did;
                    }
                    *first = false;
                    *off += n;
                    if *off >= s.len {
                        self.st.outq[dst].pop_front();
                        self.st.mark_pushed(sreq);
                    }
                }
                Out::Stream {
                    sreq,
                    rreq,
                    off,
                    end,
                } => {
                    let sreq = *sreq;
                    let Some(Req {
                        kind: ReqKind::Send(s),
                        ..
                    }) = self.st.reqs.get(sreq)
                    else {
                        self.st.outq[dst].pop_front();
                        continue;
                    };
                    let n = (*end - *off).min(maxp);
                    // SAFETY: as above; end <= len.
                    let data = unsafe { std::slice::from_raw_parts(s.buf.add(*off), n) };
                    let h = Header {
                        kind: kind::DATA,
                        rreq: *rreq,
                        arg: *off as u64,
                        ..Default::default()
                    };
                    if !self.tp.try_send(dst, &h, data) {
                        if held {
                            self.tp.post_held();
                        }
                        return did;
                    }
                    *off += n;
                    if *off >= *end {
                        self.st.outq[dst].pop_front();
                        self.st.mark_pushed(sreq);
                    }
                }
            }
            did = true;
        }
    }
}

#[cfg(test)]
mod bye_tests;
#[cfg(test)]
mod coll_dev_tests;
#[cfg(test)]
mod net_tests;
#[cfg(test)]
mod pxn_tests;
#[cfg(test)]
mod tests;
