//! Transports: how framed messages move between the ranks of one job.
//!
//! The contract is deliberately narrow ([`Transport`]):
//! - [`Transport::try_send`] pushes one framed message (a fixed [`Header`] plus an inline payload
//!   of at most [`Transport::max_payload`] bytes) to a world rank, or returns `false` when the
//!   channel to that rank is full (the caller keeps it and retries later; nothing is buffered
//!   inside the transport).
//! - [`Transport::poll`] hands incoming messages to a callback with the source world rank, the
//!   header and the payload; the payload slice is only valid during the callback. Messages from
//!   one sender arrive in the order they were sent (FIFO per pair).
//! - [`Transport::read_remote`] is an optional single-copy read of another rank's memory
//!   (Linux CMA `process_vm_readv` for [`shm`], a plain copy for [`inproc`]); it returns
//!   `false` when not available, and the engine then pipelines data through the channel instead.
//! - [`Transport::copy_rates`] and [`Transport::own_cores`] report what was measured at set-up
//!   (copy and single-copy read rates; whether two ranks each have a core of their own), the
//!   inputs of the engine's rendezvous choice (`engine::rndv`).
//!
//! - **Bulk transfers** (optional: [`Transport::bulk_min`] is `None` where there are none): a
//!   message's data moved as one operation of the layer below, straight from the sender's
//!   buffer into the receiver's, beside the frames. [`Transport::bulk_send`] and
//!   [`Transport::bulk_recv`] queue one transfer each; the transfers between one sender and
//!   one receiver are matched in the order each side queued them (the engine queues them in
//!   the order of a frame both sides see: the receiver's clear-to-send), and
//!   [`Transport::bulk_poll`] reports each one once when it is complete (a send: its buffer may
//!   be reused; a receive: its bytes are in). The network frames ([`net::frames`]) move them
//!   over a second backend connection per pair of ranks, striped by the backend. Where
//!   [`Transport::bulk_device`] holds, either end of a transfer may be device memory
//!   (GPUDirect RDMA: the backend registers device buffers with the NIC).
//!
//! A transport starts no threads of its own (the network backend's helper threads move socket data,
//! see `net::tcp`); the engine drives it from the calling thread.
//!
//! Implementations: [`shm::ShmTransport`] (one `/dev/shm` segment per rank, one SPSC ring per
//! sender), [`net::frames::NetFrames`] (to ranks on other nodes, over a network backend),
//! [`route::Routed`] (a job on several nodes: per peer one of the two, chosen at set-up) and
//! [`inproc::InprocTransport`] (in-process queues, for multi-rank tests with threads).

pub mod inproc;
pub mod near;
pub mod net;
pub mod route;
pub mod shm;

/// The fixed header of every framed message. Its meaning is defined by the engine
/// (`engine::p2p`); the transport only carries it. 48 bytes, `repr(C)`, plain data.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Header {
    /// Message kind (engine protocol).
    pub kind: u8,
    /// Protocol flags.
    pub flags: u8,
    pub _pad: u16,
    /// Communicator context id.
    pub ctx: u32,
    /// Sender's rank in the communicator.
    pub src_rank: i32,
    pub tag: i32,
    /// Total message length in bytes.
    pub total: u64,
    /// Sender-side request id.
    pub sreq: u64,
    /// Receiver-side request id.
    pub rreq: u64,
    /// Kind-dependent: a buffer address (rendezvous) or a byte offset (fragments).
    pub arg: u64,
}

pub const HEADER_BYTES: usize = std::mem::size_of::<Header>();

/// The one bit of [`Header::flags`] a transport reads (the engine owns the others): the frame
/// is a question or an answer its receiver may no longer need, because the receiver may have
/// ended. A transport that finds the receiver gone while connecting to it drops such a frame
/// instead of failing.
pub const FLAG_UNLESS_GONE: u8 = 128;
const _: () = assert!(HEADER_BYTES == 48);

/// Rates measured at set-up on a cache-resident buffer (GB/s, 1e9 bytes per second).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CopyRates {
    /// `memcpy` by one core.
    pub copy_gbps: f64,
    /// The single-copy read ([`Transport::read_remote`]) by one core.
    pub read_gbps: f64,
    /// The same read with its ends 16 bytes apart modulo the page ([`near`]).
    pub near_read_gbps: f64,
}

/// Whether the device buffer at an address, of a length, registers for bulk transfers
/// ([`Transport::device_registration`]): `Err` with the reason where it does not.
pub type RegCheck = std::sync::Arc<dyn Fn(usize, usize) -> Result<(), String> + Send + Sync>;

/// A bulk transfer that completed ([`Transport::bulk_poll`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BulkDone {
    /// The peer (world rank): the receiver of a send, the sender of a receive.
    pub peer: usize,
    /// The id the engine gave the transfer when it queued it.
    pub id: u64,
    /// A send (else a receive).
    pub send: bool,
    /// Bytes moved.
    pub bytes: usize,
}

/// A channel between the ranks of one job. See the module documentation.
pub trait Transport: Send {
    /// Largest payload one [`Transport::try_send`] accepts, to any peer.
    fn max_payload(&self) -> usize;

    /// Largest payload one [`Transport::try_send`] to `dst` accepts (at least
    /// [`Transport::max_payload`]): a transport that reaches some peers through a channel with
    /// larger frames (the network's, beside shared-memory rings) says so per peer, so that a
    /// message to them takes fewer frames. Default: [`Transport::max_payload`].
    fn max_payload_to(&self, _dst: usize) -> usize {
        self.max_payload()
    }

    /// Push one message to world rank `dst` (never this rank). `false`: the channel is full,
    /// nothing was sent, try again after polling.
    fn try_send(&mut self, dst: usize, hdr: &Header, payload: &[u8]) -> bool;

    /// Deliver up to a bounded number of incoming messages to `f(source world rank, header,
    /// payload)`; returns how many were delivered.
    fn poll(&mut self, f: &mut dyn FnMut(usize, &Header, &[u8])) -> usize;

    /// [`Transport::try_send`] for a frame that may wait for more frames to the same peer
    /// (combined with them into one network operation where the transport aggregates): it
    /// leaves by the next [`Transport::post_held`] or [`Transport::poll`]. Default: sent as
    /// by `try_send`.
    fn try_send_held(&mut self, dst: usize, hdr: &Header, payload: &[u8]) -> bool {
        self.try_send(dst, hdr, payload)
    }

    /// Sends what [`Transport::try_send_held`] left waiting. Default: nothing waits.
    fn post_held(&mut self) {}

    /// Adds to `out` the descriptors a thread waiting for this transport's progress may sleep
    /// on (`poll`, with a timeout: nothing is lost if the answer is incomplete), and returns
    /// whether they are complete: whether, until one of them is ready, polling this transport
    /// would deliver nothing and complete no send or bulk transfer that is in flight now.
    /// Default: none, not complete.
    fn wait_fds(&self, _out: &mut Vec<crate::sys::socket::PollFd>) -> bool {
        false
    }

    /// Whether world rank `peer` is on this node (decided at set-up). A device buffer goes to
    /// a peer on another node as a host copy (no CUDA IPC or pipe across nodes).
    fn same_node(&self, _peer: usize) -> bool {
        true
    }

    /// Whether a frame to world rank `peer` would travel on a channel that is open or being
    /// opened (a network connection this rank dialed), rather than open one. The goodbye of
    /// `MPI_Finalize` (`engine::bye`) goes only where this holds.
    fn has_channel(&self, _peer: usize) -> bool {
        true
    }

    /// Whether [`Transport::read_remote`] may work for `src` (decided at set-up).
    fn can_read_remote(&self, _src: usize) -> bool {
        false
    }

    /// Copy `dst.len()` bytes at address `addr` in the memory of world rank `src` into `dst`
    /// with a single copy. `false` when not supported or when the kernel refused.
    ///
    /// # Safety
    /// `addr .. addr + dst.len()` must be a valid buffer of `src` that stays untouched until
    /// `src` learns that the read is done.
    unsafe fn read_remote(&mut self, _src: usize, _addr: u64, _dst: &mut [u8]) -> bool {
        false
    }

    /// Copy `src` to address `addr` in the memory of world rank `dst` with a single copy (the
    /// mirror of [`Transport::read_remote`], allowed wherever reads from `dst` are). `false`
    /// when not supported or when the kernel refused.
    ///
    /// # Safety
    /// `addr .. addr + src.len()` must be a buffer of `dst` that `dst` has handed to this rank
    /// for writing and does not touch until it learns that the write is done.
    unsafe fn write_remote(&mut self, _dst: usize, _addr: u64, _src: &[u8]) -> bool {
        false
    }

    /// The shared-copy slots between this rank and world rank `peer` (`engine/coop.rs`):
    /// addresses (in this process) of the table for messages this rank sends to `peer` and of
    /// the table for messages `peer` sends to this rank, each [`shm::COPY_SLOTS`] slots of
    /// [`shm::COPY_SLOT_BYTES`] bytes, 64-byte aligned, zero at creation, mapped in both
    /// processes as long as the transport lives. `None`: not offered for that peer (no
    /// single copies to it, or not on this node).
    fn copy_slots(&self, _peer: usize) -> Option<(usize, usize)> {
        None
    }

    /// The smallest rendezvous message (bytes) from or to world rank `peer` that the receiver
    /// should move as a bulk transfer; `None`: no bulk transfers with `peer` (the default).
    fn bulk_min(&self, _peer: usize) -> Option<usize> {
        None
    }

    /// Whether world rank `peer` is on another node and reached directly over the network
    /// (not through a forwarder): a rendezvous with it costs a network round trip, so the
    /// engine sends messages of up to one network frame to it eagerly. Default: no.
    fn net_direct(&self, _peer: usize) -> bool {
        false
    }

    /// Whether bulk transfers with world rank `peer` may also send from and receive into
    /// device memory (the network backend registers device buffers with the NIC: GPUDirect
    /// RDMA). Only this rank's side: the engine agrees it with the peer in the rendezvous.
    /// Default: no.
    fn bulk_device(&self, _peer: usize) -> bool {
        false
    }

    /// Whether a particular device buffer can go in bulk transfers: a backend that registers
    /// device memory may still refuse some buffers (VMM memory without the GPUDirect RDMA
    /// flag, managed or pool memory). The engine asks before it agrees to a GPUDirect
    /// transfer with a buffer (only where [`Transport::bulk_device`] holds for the peer), so
    /// the registration of the transfer itself cannot fail; a buffer that passes may stay
    /// registered in the backend's cache, where the transfer finds it. `None`: no check, every
    /// device buffer can (the default).
    fn device_registration(&self) -> Option<RegCheck> {
        None
    }

    /// Queues a bulk send of `len` bytes at `data` to world rank `dst`, reported as `id` by
    /// [`Transport::bulk_poll`] once `data` may be reused. It is matched with the receive of the
    /// same place in the order `dst` queues its bulk receives from this rank, which must be of
    /// the same length. `dev`: `data` is device memory (only where
    /// [`Transport::bulk_device`] holds for `dst`). `false`: no bulk transfers to `dst`
    /// (nothing was queued).
    ///
    /// # Safety
    /// `data .. data + len` must be host memory (device memory with `dev`) that stays readable
    /// and unchanged until the transfer is reported complete.
    unsafe fn bulk_send(
        &mut self,
        _dst: usize,
        _id: u64,
        _data: *const u8,
        _len: usize,
        _dev: bool,
    ) -> bool {
        false
    }

    /// Queues a bulk receive of `len` bytes into `buf` from world rank `src` (see
    /// [`Transport::bulk_send`]; `dev`: `buf` is device memory). `false`: no bulk transfers
    /// from `src` (nothing was queued).
    ///
    /// # Safety
    /// `buf .. buf + len` must be host memory (device memory with `dev`) nobody else touches
    /// until the transfer is reported complete.
    unsafe fn bulk_recv(
        &mut self,
        _src: usize,
        _id: u64,
        _buf: *mut u8,
        _len: usize,
        _dev: bool,
    ) -> bool {
        false
    }

    /// Moves the queued bulk transfers on and hands each completed one to `f`, once; returns
    /// how many completed.
    fn bulk_poll(&mut self, _f: &mut dyn FnMut(BulkDone)) -> usize {
        0
    }

    /// Copy rates of this machine measured at set-up (`None`: not measured).
    fn copy_rates(&self) -> Option<CopyRates> {
        None
    }

    /// Whether this rank and world rank `peer` are each bound to one core of their own (so
    /// both can be assumed to run at the same time), as found at set-up.
    fn own_cores(&self, _peer: usize) -> bool {
        false
    }

    /// Whether another rank of this node last ran on the CPU this rank runs on now: each rank
    /// publishes its CPU (`sched_getcpu`) when it asks. Unbound ranks that the scheduler put on
    /// one core take turns on it; a waiter that spins there only keeps the rank it waits for
    /// from answering. Cheap (a few shared-memory reads); false where not known.
    fn shares_cpu(&self) -> bool {
        false
    }

    /// Addresses (in this process) of every rank's collective slot area, in world rank order:
    /// [`crate::engine::flag::AREA`] bytes each, 64-byte aligned, zero at creation, shared by
    /// the whole job and mapped as long as the transport lives. `None`: not offered.
    fn coll_slots(&self) -> Option<Vec<usize>> {
        None
    }

    /// Addresses (in this process) of every rank's collective record ring, in world rank
    /// order, 0 for a rank whose ring is not mapped here: [`crate::engine::collcheck::AREA`]
    /// bytes each, 8-byte aligned, zero at creation, mapped as long as the transport lives.
    /// Empty: not offered.
    fn coll_records(&self) -> Vec<usize> {
        Vec::new()
    }

    /// Addresses (in this process) of every rank's agreement words, in world rank order, 0 for
    /// a rank whose words are not mapped here: [`crate::engine::agree::words::BYTES`] bytes
    /// each, 8-byte aligned, zero at creation, mapped as long as the transport lives. Empty:
    /// not offered.
    fn agree_words(&self) -> Vec<usize> {
        Vec::new()
    }

    /// Addresses (in this process) of every rank's collective scratch area, in world rank
    /// order, and the data bytes of each: [`shm::SCRATCH_CTRL_BYTES`] + that many bytes,
    /// 64-byte aligned, zero at creation, shared by the whole job and mapped as long as the
    /// transport lives. `None`: not offered (or not the same size on every rank).
    fn coll_scratch(&self) -> Option<(Vec<usize>, usize)> {
        None
    }
}
