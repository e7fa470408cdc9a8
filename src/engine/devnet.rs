//! Device buffers to and from ranks on other nodes, pipelined through host memory.
//!
//! A rendezvous between a device buffer and a rank on another node moves in chunks of
//! [`PipeConfig::chunk`] bytes through host buffers (page-locked where the device copies give
//! them, [`DevCopy::staging`]):
//! - **Sender** ([`TxPipe`]): up to [`PipeConfig::depth`] chunks are copied device to host at
//!   once ([`DevCopy::dtoh_start`], copy engines on a stream); the oldest chunk whose copy is
//!   done goes to the transport as `DATA` frames (which the transport copies into its own
//!   buffers), its host buffer then takes the next chunk. So chunk k+1 is copied while chunk k
//!   is on the wire. A host send buffer streams straight from the user's memory.
//! - **Receiver** ([`RxPipe`]): the frames of a chunk gather in a host buffer; a full chunk is
//!   copied host to device ([`DevCopy::htod_start`]) while the next chunks arrive in the other
//!   buffers. The receive completes when every chunk's copy is done.
//! - **Credits**: a receiver into device memory holds at most `depth` chunks of host memory.
//!   Its `CTS` says so (`FLAG_CREDIT`, the first byte limit in `arg`); each time copies to the
//!   device retire chunks it sends `CREDIT` with the new limit (an absolute byte count, so a
//!   late or repeated credit is harmless). The sender sends no byte at or past the limit.
//!   A receiver into host memory grants the whole message at once (no `FLAG_CREDIT`).
//! - **Order and completion**: frames carry their byte offset, so a chunk is complete when its
//!   bytes are in, in whatever order they came; chunks are retired in order. A failed device
//!   copy does not stop the data flow (the peer still gets or sends every byte, so nothing
//!   hangs): the request completes with an error.
//!
//! Everything here is plain logic over [`DevCopy`] and a send callback: the engine's tests run
//! it with a host-memory fake whose copies finish later, over a real network backend.

use super::devcopy::{pending, DevCopy, Finished, HostStage, Pending};
use std::collections::VecDeque;

/// Chunking of the pipelined path (`GPUMPI_NET_GPU_CHUNK`, `GPUMPI_NET_GPU_DEPTH`,
/// `GPUMPI_NET_GPU_PIPELINE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PipeConfig {
    /// Off: a device send buffer is copied to host memory whole before its message is sent,
    /// and a device receive gathers the whole message in host memory before one copy.
    pub on: bool,
    pub chunk: usize,
    pub depth: usize,
}

impl Default for PipeConfig {
    fn default() -> Self {
        PipeConfig {
            on: true,
            chunk: 1 << 20,
            depth: 4,
        }
    }
}

impl PipeConfig {
    /// From the configuration snapshot.
    pub fn from_env() -> Self {
        let c = crate::config::snapshot();
        PipeConfig {
            on: c.p2p.net_gpu_pipeline,
            chunk: c.p2p.net_gpu_chunk.max(4096),
            depth: c.p2p.net_gpu_depth.max(1),
        }
    }

    /// The bytes a receiver of `want` lets a sender have in flight before its first credit.
    pub fn window(&self, want: usize) -> usize {
        want.min(self.chunk.saturating_mul(self.depth))
    }
}

/// Count, bytes and time of one kind of step of device messages ([`Stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub n: u64,
    pub bytes: u64,
    pub ns: u64,
}

impl Tally {
    /// One more step of `bytes` bytes that began at `since`.
    pub fn add(&mut self, bytes: usize, since: std::time::Instant) {
        self.n += 1;
        self.bytes += bytes as u64;
        self.ns += since.elapsed().as_nanos() as u64;
    }

    fn show(&self, what: &str) -> Option<String> {
        (self.n > 0).then(|| {
            format!(
                "{what} {} ({} B, {:.2} us each)",
                self.n,
                self.bytes / self.n,
                self.ns as f64 / 1e3 / self.n as f64
            )
        })
    }
}

/// Where this rank's device messages spent their time, logged at `MPI_Finalize` with
/// `GPUMPI_DEBUG=2` so that a benchmark run shows it: device send buffers staged whole (the
/// copy to host memory before an eager message leaves), copies of received data into device
/// buffers (an eager frame, or a message gathered whole), and the pipelined messages between
/// nodes from their start (the `CTS` at the sender, the match at the receiver) to their end
/// (the last chunk in the transport, the last chunk on the device), with their chunk copies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub staged: Tally,
    pub puts: Tally,
    pub tx: Tally,
    pub rx: Tally,
    pub tx_chunks: u64,
    pub rx_chunks: u64,
}

impl Stats {
    /// One line, `None` when no device message moved.
    pub fn report(&self) -> Option<String> {
        let parts: Vec<String> = [
            self.staged.show("send buffers staged whole"),
            self.puts.show("copies of received data to the device"),
            self.tx
                .show("pipelined sends")
                .map(|s| format!("{s}, {} chunks", self.tx_chunks)),
            self.rx
                .show("pipelined receives")
                .map(|s| format!("{s}, {} chunks", self.rx_chunks)),
        ]
        .into_iter()
        .flatten()
        .collect();
        (!parts.is_empty()).then(|| parts.join("; "))
    }
}

/// Host memory for one chunk of `len` bytes of device buffer `addr`: page-locked from the
/// device copies where they have it, else the heap.
fn chunk_buffer(dc: &dyn DevCopy, addr: usize, len: usize) -> HostStage {
    match dc.staging(addr, len) {
        Some(b) if b.len() >= len => b,
        _ => Box::new(vec![0u8; len]),
    }
}

struct TxChunk {
    off: usize,
    len: usize,
    buf: HostStage,
    /// The device-to-host copy, until it is seen done.
    copy: Option<Box<dyn Pending>>,
}

/// The sender's side of one pipelined message. See the module documentation.
pub struct TxPipe {
    pub peer: usize,
    pub sreq: u64,
    pub rreq: u64,
    want: usize,
    cfg: PipeConfig,
    /// Bytes the receiver lets this side send (credit).
    limit: usize,
    /// Bytes whose device-to-host copy was started (device send buffers).
    issued: usize,
    /// Bytes the transport took.
    sent: usize,
    chunks: VecDeque<TxChunk>,
    free: Vec<HostStage>,
    /// Device-to-host copies in flight at most at once so far.
    pub peak: usize,
    /// The first device copy that failed (the message's bytes from there are zeros).
    pub failed: Option<String>,
    /// When the pipe was made, and the chunk copies it started ([`Stats`]).
    pub start: std::time::Instant,
    pub copies: u64,
}

impl TxPipe {
    /// Send `want` bytes to `peer`'s receive `rreq`, `limit` of them before the first credit.
    pub fn new(
        peer: usize,
        sreq: u64,
        rreq: u64,
        want: usize,
        limit: usize,
        cfg: PipeConfig,
    ) -> Self {
        TxPipe {
            peer,
            sreq,
            rreq,
            want,
            cfg,
            limit: limit.min(want),
            issued: 0,
            sent: 0,
            chunks: VecDeque::new(),
            free: Vec::new(),
            peak: 0,
            failed: None,
            start: std::time::Instant::now(),
            copies: 0,
        }
    }

    /// The bytes of the message.
    pub fn want(&self) -> usize {
        self.want
    }

    /// A credit from the receiver: it takes bytes up to `limit`.
    pub fn credit(&mut self, limit: usize) {
        self.limit = self.limit.max(limit.min(self.want));
    }

    /// Every byte is in the transport.
    pub fn done(&self) -> bool {
        self.sent >= self.want
    }

    /// Move the message on: start device-to-host copies into free chunk buffers, and hand the
    /// chunks whose copies are done to `send(offset, bytes)` (false: the transport is full) in
    /// pieces of at most `maxp` bytes, up to the credit. `src` is the send buffer (device
    /// memory when `dev`). Returns whether anything moved.
    ///
    /// # Safety
    /// `src..src+want` is the send buffer, valid and unchanged until [`TxPipe::done`] and every
    /// copy started here is seen done (the engine keeps the send incomplete until then).
    pub unsafe fn step(
        &mut self,
        dc: &dyn DevCopy,
        src: usize,
        dev: bool,
        maxp: usize,
        send: &mut dyn FnMut(usize, &[u8]) -> bool,
    ) -> bool {
        let maxp = maxp.max(1);
        let mut moved = false;
        if !dev {
            while self.sent < self.limit {
                let n = (self.limit - self.sent).min(maxp);
                // SAFETY: sent + n <= want: inside the caller's send buffer.
                let b = std::slice::from_raw_parts((src + self.sent) as *const u8, n);
                if !send(self.sent, b) {
                    break;
                }
                self.sent += n;
                moved = true;
            }
            return moved;
        }
        while self.chunks.len() < self.cfg.depth && self.issued < self.want {
            let off = self.issued;
            let len = self.cfg.chunk.min(self.want - off);
            let mut buf = self
                .free
                .pop()
                .unwrap_or_else(|| chunk_buffer(dc, src, self.cfg.chunk.min(self.want)));
            let copy = match dc.dtoh_start(src + off, buf.as_mut_ptr(), len) {
                Ok(c) => Some(c),
                Err(e) => {
                    self.fail(e, &mut buf[..len]);
                    None
                }
            };
            self.chunks.push_back(TxChunk {
                off,
                len,
                buf,
                copy,
            });
            self.issued += len;
            self.copies += 1;
            moved = true;
        }
        let copying = self.chunks.iter().filter(|c| c.copy.is_some()).count();
        self.peak = self.peak.max(copying);
        while let Some(c) = self.chunks.front_mut() {
            if let Some(p) = &c.copy {
                match p.done() {
                    Ok(false) => break,
                    Ok(true) => c.copy = None,
                    Err(e) => {
                        c.copy = None;
                        let len = c.len;
                        let mut b = std::mem::replace(&mut c.buf, Box::new(Vec::new()));
                        self.fail(e, &mut b[..len]);
                        self.chunks.front_mut().expect("the front chunk").buf = b;
                    }
                }
                moved = true;
            }
            let c = self.chunks.front().expect("the front chunk");
            while self.sent < (c.off + c.len).min(self.limit) {
                let n = (c.off + c.len).min(self.limit).min(self.sent + maxp) - self.sent;
                let at = self.sent - c.off;
                if !send(self.sent, &c.buf[at..at + n]) {
                    return moved;
                }
                self.sent += n;
                moved = true;
            }
            if self.sent < c.off + c.len {
                // Waiting for credit.
                break;
            }
            let c = self.chunks.pop_front().expect("the front chunk");
            self.free.push(c.buf);
        }
        moved
    }

    fn fail(&mut self, e: String, buf: &mut [u8]) {
        tracing::error!(
            "engine: copying a device send buffer to host memory for rank {} failed: {e}",
            self.peer
        );
        buf.fill(0);
        self.failed.get_or_insert(e);
    }
}

struct RxChunk {
    off: usize,
    len: usize,
    filled: usize,
    buf: HostStage,
    /// The host-to-device copy, once the chunk is full.
    copy: Option<Box<dyn Pending>>,
}

/// The receiver's side of one pipelined message into device memory. See the module
/// documentation.
pub struct RxPipe {
    dst: usize,
    want: usize,
    cfg: PipeConfig,
    /// Chunks from the oldest not yet retired, in order.
    chunks: VecDeque<RxChunk>,
    free: Vec<HostStage>,
    /// Bytes whose copy to the device is done (whole chunks, in order).
    retired: usize,
    /// The byte limit last granted to the sender.
    granted: usize,
    /// Host-to-device copies in flight at most at once so far.
    pub peak: usize,
    pub failed: Option<String>,
    /// When the pipe was made, and the chunk copies it started ([`Stats`]).
    pub start: std::time::Instant,
    pub copies: u64,
}

impl RxPipe {
    /// Take `want` bytes into device buffer `dst`; the sender may send
    /// [`PipeConfig::window`] bytes before the first credit.
    pub fn new(dst: usize, want: usize, cfg: PipeConfig) -> Self {
        RxPipe {
            dst,
            want,
            cfg,
            chunks: VecDeque::new(),
            free: Vec::new(),
            retired: 0,
            granted: cfg.window(want),
            peak: 0,
            failed: None,
            start: std::time::Instant::now(),
            copies: 0,
        }
    }

    /// The limit of the `CTS`.
    pub fn first_limit(&self) -> usize {
        self.granted
    }

    /// Store `data`, the message's bytes at `off` (bytes past `want` are dropped); a chunk
    /// whose bytes are all in starts its copy to the device.
    ///
    /// # Safety
    /// `dst..dst+want` is the receive's device buffer, owned by it until [`RxPipe::done`].
    pub unsafe fn put(&mut self, dc: &dyn DevCopy, mut off: usize, mut data: &[u8]) {
        while !data.is_empty() && off < self.want {
            let k = off / self.cfg.chunk;
            let base = self.retired / self.cfg.chunk;
            if k < base {
                tracing::error!("engine: a device pipeline chunk arrived twice (offset {off})");
                return;
            }
            while self.chunks.len() <= k - base {
                let c_off = (base + self.chunks.len()) * self.cfg.chunk;
                let len = self.cfg.chunk.min(self.want - c_off);
                let buf = self
                    .free
                    .pop()
                    .unwrap_or_else(|| chunk_buffer(dc, self.dst, self.cfg.chunk.min(self.want)));
                self.chunks.push_back(RxChunk {
                    off: c_off,
                    len,
                    filled: 0,
                    buf,
                    copy: None,
                });
            }
            let c = &mut self.chunks[k - base];
            let at = off - c.off;
            let n = data.len().min(c.len - at);
            c.buf[at..at + n].copy_from_slice(&data[..n]);
            c.filled += n;
            if c.filled >= c.len && c.copy.is_none() {
                self.copies += 1;
                match dc.htod_start(self.dst + c.off, c.buf.as_ptr(), c.len) {
                    Ok(p) => c.copy = Some(p),
                    Err(e) => {
                        tracing::error!(
                            "engine: copying a received chunk to the device failed: {e}"
                        );
                        self.failed.get_or_insert(e);
                        c.copy = Some(pending(Finished));
                    }
                }
            }
            off += n;
            data = &data[n..];
        }
        let copying = self.chunks.iter().filter(|c| c.copy.is_some()).count();
        self.peak = self.peak.max(copying);
    }

    /// Retire the chunks whose copies are done, in order. Returns whether any was retired
    /// and the new credit to send, if it grew.
    pub fn step(&mut self) -> (bool, Option<usize>) {
        let mut moved = false;
        while let Some(c) = self.chunks.front() {
            let Some(p) = &c.copy else { break };
            match p.done() {
                Ok(false) => break,
                Ok(true) => {}
                Err(e) => {
                    tracing::error!("engine: copying a received chunk to the device failed: {e}");
                    self.failed.get_or_insert(e);
                }
            }
            let c = self.chunks.pop_front().expect("the front chunk");
            self.retired += c.len;
            self.free.push(c.buf);
            moved = true;
        }
        let limit = self.want.min(
            self.retired
                .saturating_add(self.cfg.chunk.saturating_mul(self.cfg.depth)),
        );
        if limit > self.granted {
            self.granted = limit;
            (moved, Some(limit))
        } else {
            (moved, None)
        }
    }

    /// Every byte is on the device.
    pub fn done(&self) -> bool {
        self.retired >= self.want
    }

    /// The bytes of the message.
    pub fn want(&self) -> usize {
        self.want
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::tests::slow_dev::Slow;
    use std::time::Duration;

    /// A sender and a receiver pipe joined directly, frames of `maxp` bytes delivered in
    /// reverse order within each round, credits passed back: every byte lands, no more than
    /// `depth` chunks are ever copied at once on either side, and the sender never runs past
    /// the receiver's credit.
    #[test]
    fn chunks_flow_under_credit_and_every_byte_lands() {
        let dev = Slow::new(Duration::from_micros(20));
        for (len, chunk, depth, maxp) in [
            (1usize, 4096usize, 1usize, 1000usize),
            (4096, 4096, 2, 1000),
            (4097, 4096, 2, 4096),
            (100_000, 4096, 3, 1000),
            (100_000, 8192, 1, 3000),
            (1 << 20, 65536, 4, 65536),
        ] {
            let cfg = PipeConfig {
                on: true,
                chunk,
                depth,
            };
            let src: Vec<u8> = (0..len).map(|i| (i * 7 + i / 251) as u8).collect();
            let mut dst = vec![0u8; len];
            let mut rx = RxPipe::new(dst.as_mut_ptr() as usize, len, cfg);
            let mut tx = TxPipe::new(1, 2, 3, len, rx.first_limit(), cfg);
            let end = std::time::Instant::now() + Duration::from_secs(30);
            let mut max_sent = 0;
            while !(tx.done() && rx.done()) {
                let mut frames: Vec<(usize, Vec<u8>)> = Vec::new();
                // SAFETY: src outlives the pipes.
                unsafe {
                    tx.step(&dev, src.as_ptr() as usize, true, maxp, &mut |off, b| {
                        if frames.len() >= 3 {
                            return false;
                        }
                        frames.push((off, b.to_vec()));
                        true
                    })
                };
                for (off, b) in &frames {
                    max_sent = max_sent.max(off + b.len());
                }
                assert!(max_sent <= rx.granted, "the sender stays inside its credit");
                frames.reverse();
                for (off, b) in frames {
                    // SAFETY: dst outlives the pipes.
                    unsafe { rx.put(&dev, off, &b) };
                }
                if let (_, Some(l)) = rx.step() {
                    tx.credit(l);
                }
                assert!(std::time::Instant::now() < end, "the pipes make progress");
            }
            assert!(
                dst == src,
                "len {len} chunk {chunk} depth {depth}: every byte lands"
            );
            assert!(
                tx.peak <= depth && rx.peak <= depth,
                "{} {}",
                tx.peak,
                rx.peak
            );
            if len >= chunk * depth && depth > 1 {
                assert!(tx.peak > 1, "copies overlap on the sender");
            }
        }
    }

    /// The end-of-run line names each kind of step that ran, with its count, mean size and
    /// the chunks of pipelined messages, and nothing for a rank that moved no device message.
    #[test]
    fn the_report_shows_each_step_that_ran() {
        let mut s = Stats::default();
        assert_eq!(s.report(), None);
        let t = std::time::Instant::now();
        s.staged.add(1000, t);
        s.staged.add(3000, t);
        s.rx.add(1 << 20, t);
        s.rx_chunks += 4;
        let r = s.report().unwrap();
        assert!(
            r.starts_with("send buffers staged whole 2 (2000 B, "),
            "{r}"
        );
        assert!(
            r.contains("; pipelined receives 1 (1048576 B, ") && r.ends_with(" us each), 4 chunks"),
            "{r}"
        );
        assert!(
            !r.contains("pipelined sends") && !r.contains("copies of received"),
            "{r}"
        );
    }

    /// A failed copy on either side still moves every byte (zeros for a failed send chunk) and
    /// reports the failure.
    #[test]
    fn a_failed_copy_is_reported_and_the_message_still_ends() {
        let dev = Slow {
            fail: true,
            ..Default::default()
        };
        let cfg = PipeConfig {
            on: true,
            chunk: 4096,
            depth: 2,
        };
        let len = 3 * 4096;
        let mut tx = TxPipe::new(1, 2, 3, len, len, cfg);
        let src = vec![9u8; len];
        let mut got = vec![1u8; len];
        let mut rx = RxPipe::new(got.as_mut_ptr() as usize, len, cfg);
        while !tx.done() {
            // SAFETY: src and got outlive the pipes.
            unsafe {
                tx.step(&dev, src.as_ptr() as usize, true, 1000, &mut |off, b| {
                    rx.put(&dev, off, b);
                    true
                })
            };
            rx.step();
        }
        while !rx.done() {
            rx.step();
        }
        assert!(tx.failed.is_some() && rx.failed.is_some());
        assert!(
            got.iter().all(|&b| b == 1),
            "nothing from a failed copy lands"
        );
    }
}
