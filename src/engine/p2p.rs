//! The protocol side of the engine: matching of incoming messages against posted receives, the
//! unexpected queue, and the handlers of every frame kind (see the protocol summary in the
//! parent module). Nothing here touches the transport: outgoing frames are queued (`outq`,
//! `loopq`) and single-copy reads are recorded (`reads`) for `Engine::progress` to carry out.

use super::rndv::RndvPath;
use super::*;

impl State {
    /// Write `data` at byte `off` of a receive buffer (device memory when `dev`). `false`
    /// when the device copy failed (logged).
    ///
    /// # Safety
    /// `buf + off .. + data.len()` lies in the receive's buffer.
    pub(super) unsafe fn put(
        dc: &dyn devcopy::DevCopy,
        buf: *mut u8,
        dev: bool,
        off: usize,
        data: &[u8],
    ) -> bool {
        if data.is_empty() {
            return true;
        }
        if dev {
            match dc.htod(buf as usize + off, data) {
                Ok(()) => true,
                Err(e) => {
                    tracing::error!("engine: copy into a device receive buffer failed: {e}");
                    false
                }
            }
        } else {
            std::ptr::copy_nonoverlapping(data.as_ptr(), buf.add(off), data.len());
            true
        }
    }

    /// A new receive request (not yet posted or matched).
    pub(super) fn insert_recv(&mut self, buf: *mut u8, cap: usize, dev: bool) -> u64 {
        self.reqs.insert(Req {
            done: false,
            freed: false,
            status: Status::default(),
            kind: ReqKind::Recv(RecvState {
                buf,
                cap,
                posted: false,
                expect: 0,
                got: 0,
                dev,
                stage: None,
                note: None,
                owned: None,
                pipe: None,
                bulk: false,
            }),
        })
    }

    /// Whether receive `rreq` writes device memory.
    fn recv_dev(&self, rreq: u64) -> bool {
        matches!(self.reqs.get(rreq), Some(Req { kind: ReqKind::Recv(rs), .. }) if rs.dev)
    }

    /// Whether the device buffer `addr..addr+len` can go in a bulk transfer (the transport's
    /// check, [`crate::transport::Transport::device_registration`]); the reason where not.
    pub(super) fn dev_registers(&self, addr: usize, len: usize) -> Result<(), String> {
        self.dev_reg
            .as_ref()
            .map_or(Ok(()), |check| check(addr, len))
    }

    /// A free shared-copy slot for a host rendezvous of `len` bytes to `dst`, now offered
    /// ([`coop`]); `None` when none is free or the message is not one to share.
    pub(super) fn offer_slot(&mut self, dst: usize, len: usize) -> Option<u8> {
        let (table, _) = self.slots[dst]?;
        if !coop::offer(len, self.peers[dst].can_read) {
            return None;
        }
        let i = self.slots_busy[dst].trailing_ones() as usize;
        if i >= crate::transport::shm::COPY_SLOTS.min(64) {
            return None;
        }
        self.slots_busy[dst] |= 1u64 << i;
        // SAFETY: the transport's table, mapped while the engine lives; i < COPY_SLOTS.
        unsafe { coop::Slot::at(table, i) }.offer();
        Some(i as u8)
    }

    pub(super) fn enqueue(&mut self, dst: usize, o: Out) {
        if self.outq[dst].is_empty() {
            self.busy += 1;
        }
        self.outq[dst].push_back(o);
    }

    pub(super) fn send_ctrl(&mut self, dst: usize, h: Header) {
        if dst == self.me {
            self.loopq.push_back((h, Vec::new()));
        } else {
            self.enqueue(dst, Out::Ctrl(h));
        }
    }

    pub(super) fn complete(&mut self, id: u64) {
        if let Some(r) = self.reqs.get_mut(id) {
            if let ReqKind::Send(SendState {
                coop: Some((peer, slot)),
                ..
            }) = r.kind
            {
                self.slots_busy[peer] &= !(1u64 << slot);
            }
            r.done = true;
            if r.freed {
                self.reqs.remove(id);
            }
        }
    }

    /// All data of send `id` is out of the user buffer's hands.
    pub(super) fn mark_pushed(&mut self, id: u64) {
        if let Some(Req {
            kind: ReqKind::Send(s),
            ..
        }) = self.reqs.get_mut(id)
        {
            s.pushed = true;
            if !s.need_ack {
                self.complete(id);
            }
        }
    }

    pub(super) fn find_unexp(&self, ctx: u32, src: i32, tag: i32) -> Option<(usize, u64)> {
        self.unexp_order.iter().enumerate().find_map(|(i, &u)| {
            let m = self.unexp.get(u)?;
            matches(ctx, src, tag, m.ctx, m.src_rank, m.tag).then_some((i, u))
        })
    }

    pub(super) fn unexp_status(&self, uid: u64) -> Status {
        let m = self.unexp.get(uid).expect("unexpected entry");
        Status {
            source: m.src_rank,
            tag: m.tag,
            error: MPI_SUCCESS,
            bytes: m.total,
            cancelled: false,
            finalized: false,
        }
    }

    /// Take the first unexpected message that matches (`ctx`, `src`, `tag`) straight into
    /// `buf` (host memory, `cap` bytes), without a request, when that message is a complete
    /// eager one that needs nothing more of this rank: no acknowledgement (synchronous), no
    /// fragments still to come, no note. Truncation is reported as a bound receive reports
    /// it (`MPI_ERR_TRUNCATE`, the bytes that fit).
    ///
    /// # Safety
    /// `r.buf .. r.buf + r.cap` is valid to write.
    pub(super) unsafe fn take_arrived(&mut self, r: &RecvArgs) -> Arrived {
        let (buf, cap) = (r.buf, r.cap);
        let Some((pos, uid)) = self.find_unexp(r.ctx, r.src, r.tag) else {
            return Arrived::Nothing;
        };
        match self.unexp.get(uid) {
            Some(Unexp {
                body: UBody::Eager { data },
                total,
                sync: false,
                note: None,
                ..
            }) if data.len() == *total => {}
            // Its receive must be posted: the general path takes it (and nothing later may
            // pass it).
            _ => return Arrived::NotSimple,
        }
        self.unexp_order.remove(pos);
        let Some(Unexp {
            body: UBody::Eager { data },
            src_rank,
            tag,
            total,
            ..
        }) = self.unexp.remove(uid)
        else {
            unreachable!("the unexpected entry just looked at")
        };
        let n = total.min(cap);
        // SAFETY: the caller guarantees buf..buf+cap is writable; n <= cap, n <= data's length.
        unsafe { std::ptr::copy_nonoverlapping(data.as_slice().as_ptr(), buf, n) };
        Arrived::Taken(Status {
            source: src_rank,
            tag,
            error: if total > cap {
                MPI_ERR_TRUNCATE
            } else {
                MPI_SUCCESS
            },
            bytes: n,
            cancelled: false,
            finalized: false,
        })
    }

    /// The receive waiting without a request ([`Direct`]), if it still waits, becomes a
    /// posted request at the head of the posted queue (it was posted before every other).
    pub(super) fn direct_to_posted(&mut self) {
        let Some(d) = self.direct.as_mut() else {
            return;
        };
        if !matches!(d.state, DirectState::Waiting) {
            return;
        }
        let (buf, cap, ctx, src, tag) = (d.buf, d.cap, d.ctx, d.src, d.tag);
        let rreq = self.insert_recv(buf, cap, false);
        if let Some(Req {
            kind: ReqKind::Recv(r),
            ..
        }) = self.reqs.get_mut(rreq)
        {
            r.posted = true;
        }
        self.posted.push_front(PostedRecv {
            rreq,
            ctx,
            src,
            tag,
        });
        if let Some(d) = self.direct.as_mut() {
            d.state = DirectState::Posted(rreq);
        }
    }

    /// Set the receive's status at match time.
    pub(super) fn matched(
        &mut self,
        rreq: u64,
        src_rank: i32,
        tag: i32,
        total: usize,
    ) -> (*mut u8, usize) {
        let Some(Req {
            kind: ReqKind::Recv(rs),
            status,
            ..
        }) = self.reqs.get_mut(rreq)
        else {
            unreachable!("matched a receive that does not exist")
        };
        rs.posted = false;
        let n = total.min(rs.cap);
        *status = Status {
            source: src_rank,
            tag,
            error: if total > rs.cap {
                MPI_ERR_TRUNCATE
            } else {
                MPI_SUCCESS
            },
            bytes: n,
            cancelled: false,
            finalized: false,
        };
        (rs.buf, rs.cap)
    }

    /// Receive `rreq` takes unexpected message `m` (already out of the queue and the slab).
    pub(super) fn bind(&mut self, rreq: u64, uid: u64, m: Unexp) {
        let (buf, cap) = self.matched(rreq, m.src_rank, m.tag, m.total);
        self.keep_note(rreq, m.note);
        if m.sync {
            self.send_ctrl(
                m.src_world,
                Header {
                    kind: kind::ACK,
                    sreq: m.sreq,
                    ..Default::default()
                },
            );
        }
        match m.body {
            UBody::Eager { data } => {
                let data = data.as_slice();
                let n = data.len().min(cap);
                let dev = self.recv_dev(rreq);
                let t0 = std::time::Instant::now();
                // SAFETY: buf holds cap >= n bytes and is owned by this receive.
                if !unsafe { Self::put(&*self.dev, buf, dev, 0, &data[..n]) } {
                    self.fail(rreq);
                }
                if dev && n > 0 {
                    self.dev_stats.puts.add(n, t0);
                }
                if data.len() == m.total {
                    self.complete(rreq);
                } else {
                    if let Some(Req {
                        kind: ReqKind::Recv(rs),
                        ..
                    }) = self.reqs.get_mut(rreq)
                    {
                        rs.expect = m.total;
                        rs.got = data.len();
                    }
                    self.frags
                        .insert((m.src_world, m.sreq), FragTarget::Recv(rreq));
                    let _ = uid;
                }
            }
            UBody::Rndv { addr, dev, coop } => {
                self.start_rndv(rreq, m.src_world, m.sreq, addr, m.total.min(cap), dev, coop)
            }
        }
    }

    /// Receive `rreq` matched rendezvous `sreq` of `src_world` (buffer `addr`, `want` bytes to
    /// take, `dev`: the sender's device buffer, `coop`: the shared-copy slot it offered): start
    /// the data's way here.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn start_rndv(
        &mut self,
        rreq: u64,
        src_world: usize,
        sreq: u64,
        addr: u64,
        want: usize,
        dev: Option<DevRef>,
        coop: Option<u8>,
    ) {
        let ipc = match dev {
            Some(DevRef::Ipc(e)) => Some(e),
            Some(DevRef::Net { bulk }) => {
                let ends = rndv::BulkEnds {
                    send_dev: true,
                    send_ok: bulk,
                    recv_dev: self.recv_dev(rreq),
                    recv_ok: self.bulk_dev[src_world],
                };
                if self.bulk_or_why(rreq, src_world, sreq, want, ends) {
                    return;
                }
                self.request_stream(rreq, src_world, sreq, want);
                return;
            }
            Some(DevRef::Pipe(desc)) => {
                // The sender's buffer is device memory the CPU cannot read: through the pipe,
                // or else streamed (staged by the sender), never the single-copy read.
                if want == 0 || !self.pipe_in(rreq, src_world, sreq, &desc, want) {
                    self.request_stream(rreq, src_world, sreq, want);
                }
                return;
            }
            None => None,
        };
        if ipc.is_some()
            && want > 0
            && want >= self.push_min
            && self.push(rreq, src_world, sreq, want)
        {
            return;
        }
        // Device receives take the single-copy read at every rendezvous size: it fills the
        // device in page-locked rounds (`DevCopy::fill`), while streamed frames would
        // gather on the host first (measured 1.1 GB/s at 4 MiB streamed, benches/NOTES.md).
        let facts = self.peers[src_world];
        let offered = coop.filter(|&i| {
            (i as usize) < crate::transport::shm::COPY_SLOTS
                && self.slots[src_world].is_some()
                && ipc.is_none()
                && !self.recv_dev(rreq)
        });
        let path = rndv::choose(self.rates, facts, self.cma_min, want, offered.is_some());
        if ipc.is_some()
            || (facts.can_read
                && (src_world == self.me || self.recv_dev(rreq) || path != RndvPath::Stream))
        {
            let coop = offered
                .filter(|_| path == RndvPath::SharedRead)
                .map(|i| (i, self.open_slot(rreq, src_world, i, want)));
            self.reads.push(PendingRead {
                rreq,
                src_world,
                sreq,
                addr,
                want,
                ipc,
                coop,
            });
        } else {
            let ends = rndv::BulkEnds {
                send_dev: false,
                send_ok: false,
                recv_dev: self.recv_dev(rreq),
                recv_ok: self.bulk_dev[src_world],
            };
            if self.bulk_or_why(rreq, src_world, sreq, want, ends) {
                return;
            }
            if self.stream_watch[src_world].is_none() && !self.recv_dev(rreq) {
                self.stream_watch[src_world] = Some((rreq, std::time::Instant::now()));
            }
            self.request_stream(rreq, src_world, sreq, want);
        }
    }

    /// Receive `rreq` takes the `want` bytes of send `sreq` of `src_world` (whose ends are
    /// `ends`) as one bulk transfer where [`rndv::bulk`] says so ([`Self::request_bulk`]);
    /// whether it does. A device end at either side logs the choice (GPUDirect RDMA, or why
    /// the message takes the pipeline through host memory).
    fn bulk_or_why(
        &mut self,
        rreq: u64,
        src_world: usize,
        sreq: u64,
        want: usize,
        ends: rndv::BulkEnds,
    ) -> bool {
        let min = self.bulk_min[src_world];
        let mut bulk = rndv::bulk(min, want, ends);
        let mut why = None;
        if bulk && ends.recv_dev {
            // The receive buffer must register before `BULK` promises it; one that cannot
            // answers `CTS` and takes the pipeline through host memory.
            let buf = match self.reqs.get(rreq) {
                Some(Req {
                    kind: ReqKind::Recv(rs),
                    ..
                }) => rs.buf as usize,
                _ => 0,
            };
            if let Err(e) = self.dev_registers(buf, want) {
                bulk = false;
                why = Some(format!(
                    "the device receive buffer does not register with the NIC: {e}"
                ));
            }
        }
        if ends.send_dev || ends.recv_dev {
            let what = match (ends.send_dev, ends.recv_dev) {
                (true, true) => "device to device",
                (true, false) => "device to host",
                _ => "host to device",
            };
            if bulk {
                tracing::debug!(
                    "engine: rank {}: {want} bytes {what} from rank {src_world}: one bulk transfer between the buffers (GPUDirect RDMA, no staging)",
                    self.me
                );
            } else if want > 0 && !self.near[src_world] {
                tracing::debug!(
                    "engine: rank {}: {want} bytes {what} from rank {src_world}: through host memory ({})",
                    self.me,
                    why.as_deref()
                        .unwrap_or_else(|| rndv::why_not_bulk(min, want, ends))
                );
            }
        }
        if bulk {
            self.request_bulk(rreq, src_world, sreq, want, ends.recv_dev);
        }
        bulk
    }

    /// Receive `rreq` takes the `want` bytes of send `sreq` of `src_world` as one bulk
    /// transfer into its buffer (device memory with `dev`): queued for the transport, and
    /// `BULK` to the sender, both in this order (see the protocol summary).
    fn request_bulk(&mut self, rreq: u64, src_world: usize, sreq: u64, want: usize, dev: bool) {
        let Some(Req {
            kind: ReqKind::Recv(rs),
            ..
        }) = self.reqs.get_mut(rreq)
        else {
            return;
        };
        rs.expect = want;
        rs.got = 0;
        rs.bulk = true;
        self.bulk_rx.push(BulkJob {
            peer: src_world,
            req: rreq,
            buf: rs.buf as usize,
            len: want,
            dev,
        });
        self.send_ctrl(
            src_world,
            Header {
                kind: kind::BULK,
                sreq,
                rreq,
                total: want as u64,
                ..Default::default()
            },
        );
    }

    /// The receiver asks for bytes `0..h.total` of send `h.sreq` as one bulk transfer: from
    /// the device buffer itself where this rank offered that in the RTS (GPUDirect RDMA), else
    /// from host memory (a device buffer staged first).
    fn on_bulk(&mut self, peer: usize, h: &Header) {
        let from_dev = !self.near[peer]
            && self.bulk_dev[peer]
            && matches!(
                self.reqs.get(h.sreq),
                Some(Req { kind: ReqKind::Send(s), .. })
                    if s.dev && s.staged.is_none() && s.hdr.rreq == RTS_DEV_BULK
                        && s.hdr.flags & FLAG_DEVNET != 0
            );
        if !from_dev {
            self.stage_device_send(h.sreq);
        }
        let Some(Req {
            kind: ReqKind::Send(s),
            ..
        }) = self.reqs.get_mut(h.sreq)
        else {
            tracing::error!("engine: bulk request for unknown send {:#x}", h.sreq);
            return;
        };
        let want = (h.total as usize).min(s.len);
        if from_dev {
            tracing::debug!(
                "engine: rank {}: {want} bytes to rank {peer}: one bulk transfer from the device buffer (GPUDirect RDMA, no staging)",
                self.me
            );
        }
        s.bulk = true;
        self.bulk_tx.push(BulkJob {
            peer,
            req: h.sreq,
            buf: s.buf as usize,
            len: want,
            dev: from_dev,
        });
    }

    /// The transport finished bulk transfer `d`: its send's data is out, or its receive's
    /// bytes are in.
    pub(super) fn bulk_done(&mut self, d: crate::transport::BulkDone) {
        self.bulk_count += 1;
        if d.send {
            if let Some(Req {
                kind: ReqKind::Send(s),
                ..
            }) = self.reqs.get_mut(d.id)
            {
                s.bulk = false;
            }
            self.mark_pushed(d.id);
            return;
        }
        if let Some(Req {
            kind: ReqKind::Recv(rs),
            ..
        }) = self.reqs.get_mut(d.id)
        {
            rs.bulk = false;
            rs.got = d.bytes;
        }
        self.complete(d.id);
    }

    /// Receive `rreq` from `src_world` completed its `bytes`: when it was the peer's timed
    /// stream, note whether it ran slower than a single read would have.
    fn stream_done(&mut self, src_world: usize, rreq: u64, bytes: usize) {
        if let Some((r, t0)) = self.stream_watch[src_world] {
            if r == rreq {
                self.stream_watch[src_world] = None;
                let secs = t0.elapsed().as_secs_f64();
                if rndv::stream_stalled(self.rates, bytes, secs) {
                    tracing::debug!(
                        "engine: a streamed message of {bytes} bytes from rank {src_world} took {:.1} us; reading from that rank from now on",
                        secs * 1e6
                    );
                    self.peers[src_world].stream_stalled = true;
                }
            }
        }
    }

    /// Ask the sender of a device rendezvous to write `want` bytes into receive `rreq` (`PUT`);
    /// false (nothing sent) when the receive buffer is not exportable device memory.
    fn push(&mut self, rreq: u64, src_world: usize, sreq: u64, want: usize) -> bool {
        let Some(Req {
            kind: ReqKind::Recv(rs),
            ..
        }) = self.reqs.get_mut(rreq)
        else {
            return false;
        };
        if !rs.dev {
            return false;
        }
        let Some(export) = self.dev.export_range(rs.buf as usize, want) else {
            return false;
        };
        // DONE completes the receive; should the sender stream instead, DATA frames count
        // against these.
        rs.expect = want;
        rs.got = 0;
        let h = Header {
            kind: kind::PUT,
            sreq,
            rreq,
            total: want as u64,
            ..Default::default()
        };
        self.enqueue(src_world, Out::CtrlP(h, export));
        true
    }

    /// Receive `rreq` takes `want` bytes of send `sreq` through `src_world`'s pipe (`desc`):
    /// start this side and tell the sender which chunks are the message's (`PIPE`); false
    /// (nothing sent) when the pipe cannot be used here.
    fn pipe_in(
        &mut self,
        rreq: u64,
        src_world: usize,
        sreq: u64,
        desc: &[u8],
        want: usize,
    ) -> bool {
        let Some(Req {
            kind: ReqKind::Recv(rs),
            ..
        }) = self.reqs.get(rreq)
        else {
            return false;
        };
        // SAFETY: the receive's buffer holds want <= cap bytes and is owned by it until the
        // pipe's ticket is done (the request completes only then).
        let r = unsafe {
            self.dev
                .pipe_recv(self.me, src_world, desc, rs.buf as usize, rs.dev, want)
        };
        match r {
            Ok((start, ticket)) => {
                self.send_ctrl(
                    src_world,
                    Header {
                        kind: kind::PIPE,
                        sreq,
                        rreq,
                        total: want as u64,
                        arg: start,
                        ..Default::default()
                    },
                );
                let then = AfterCopy {
                    way: Way::PipeIn,
                    peer: src_world,
                    sreq,
                    rreq,
                    want,
                };
                self.started(then, Ok(Some(ticket)));
                true
            }
            Err(e) => {
                tracing::debug!("engine: no pipe from rank {src_world} ({e}); streaming instead");
                false
            }
        }
    }

    /// The receiver numbered send `sreq`'s `want` bytes from chunk `start` of the pipe: start
    /// this side.
    fn pipe_out(&mut self, peer: usize, sreq: u64, rreq: u64, start: u64, want: usize) {
        let then = AfterCopy {
            way: Way::PipeOut,
            peer,
            sreq,
            rreq,
            want,
        };
        let Some(Req {
            kind: ReqKind::Send(s),
            ..
        }) = self.reqs.get(sreq)
        else {
            tracing::error!("engine: pipe request for unknown send {sreq:#x}");
            return;
        };
        let want = want.min(s.len);
        // SAFETY: the send's device buffer holds len >= want bytes until the send completes
        // (when the pipe's ticket is done).
        let r = unsafe {
            self.dev
                .pipe_send(self.me, peer, start, s.buf as usize, want)
        };
        self.started(then, r.map(Some));
    }

    /// A peer copy was issued (`r`): keep it for `progress` to poll, or finish it now when
    /// there was nothing to copy or it failed to start.
    pub(super) fn started(
        &mut self,
        then: AfterCopy,
        r: Result<Option<Box<dyn devcopy::Pending>>, String>,
    ) {
        match r {
            Ok(Some(copy)) => self.copying.push(Copying { copy, then }),
            Ok(None) => self.after_copy(then, Ok(())),
            Err(e) => self.after_copy(then, Err(e)),
        }
    }

    /// A peer copy ended (`r`): tell the peer and complete the request, or, when the copy
    /// failed, fall back to streamed data (the sender keeps its buffer until then).
    pub(super) fn after_copy(&mut self, c: AfterCopy, r: Result<(), String>) {
        match (c.way, r) {
            (Way::Pull | Way::Push, Ok(())) => {
                let push = c.way == Way::Push;
                let h = Header {
                    kind: if push { kind::DONE } else { kind::FIN },
                    sreq: c.sreq,
                    rreq: c.rreq,
                    ..Default::default()
                };
                self.send_ctrl(c.peer, h);
                if push {
                    self.mark_pushed(c.sreq);
                } else {
                    self.complete(c.rreq);
                }
            }
            (Way::Push, Err(e)) => {
                tracing::debug!(
                    "engine: CUDA IPC write to rank {} failed ({e}); streaming instead",
                    c.peer
                );
                self.stream_send(c.peer, c.sreq, c.rreq, c.want);
            }
            (Way::Pull, Err(e)) => {
                tracing::debug!(
                    "engine: CUDA IPC read from rank {} failed ({e}); streaming instead",
                    c.peer
                );
                self.request_stream(c.rreq, c.peer, c.sreq, c.want);
            }
            (Way::PipeIn, r) => {
                if let Err(e) = r {
                    // The sender is committed to the pipe: nothing to fall back to.
                    tracing::error!("engine: pipe from rank {} failed: {e}", c.peer);
                    self.fail(c.rreq);
                }
                self.complete(c.rreq);
            }
            (Way::PipeOut, r) => {
                if let Err(e) = r {
                    tracing::error!("engine: pipe to rank {} failed: {e}", c.peer);
                    if let Some(q) = self.reqs.get_mut(c.sreq) {
                        q.status.error = crate::standard::consts::MPI_ERR_OTHER;
                    }
                }
                self.mark_pushed(c.sreq);
            }
        }
    }

    /// Stream bytes `0..want` of send `sreq` to receive `rreq` as DATA frames (staged through
    /// host memory first when the send buffer is device memory).
    pub(super) fn stream_send(&mut self, dst_world: usize, sreq: u64, rreq: u64, want: usize) {
        self.stage_device_send(sreq);
        if want == 0 {
            self.mark_pushed(sreq);
        } else {
            self.enqueue(
                dst_world,
                Out::Stream {
                    sreq,
                    rreq,
                    off: 0,
                    end: want,
                },
            );
        }
    }

    pub(super) fn request_stream(&mut self, rreq: u64, src_world: usize, sreq: u64, want: usize) {
        let far = !self.near[src_world];
        let cfg = self.pipe_cfg;
        let mut credit = None;
        if let Some(Req {
            kind: ReqKind::Recv(rs),
            ..
        }) = self.reqs.get_mut(rreq)
        {
            rs.expect = want;
            rs.got = 0;
            if rs.dev && want > 0 && far && cfg.on {
                // From another node into device memory: chunk by chunk, under credit.
                let p = devnet::RxPipe::new(rs.buf as usize, want.min(rs.cap), cfg);
                credit = Some(p.first_limit());
                rs.pipe = Some(Box::new(p));
            } else if rs.dev && want > 0 {
                rs.stage = self.dev.staging(rs.buf as usize, want.min(rs.cap));
            }
        }
        if credit.is_some() {
            self.rx_pipes.push((rreq, src_world, sreq));
        }
        self.send_ctrl(
            src_world,
            Header {
                kind: kind::CTS,
                flags: if credit.is_some() { FLAG_CREDIT } else { 0 },
                sreq,
                rreq,
                total: want as u64,
                arg: credit.unwrap_or(0) as u64,
                ..Default::default()
            },
        );
        if want == 0 {
            self.complete(rreq);
        }
    }

    /// Copy `p` (bytes at `off` of the message) into receive `rreq`; complete it when all
    /// expected bytes are in.
    pub(super) fn deliver(&mut self, rreq: u64, off: usize, p: &[u8]) {
        let Some(Req {
            kind: ReqKind::Recv(rs),
            ..
        }) = self.reqs.get_mut(rreq)
        else {
            tracing::error!("engine: data for unknown receive {rreq:#x}");
            return;
        };
        let mut ok = true;
        if let Some(pipe) = rs.pipe.as_mut() {
            // SAFETY: the pipe writes only inside its want <= cap bytes of the receive's
            // buffer, which the receive owns until the pipe is done.
            unsafe { pipe.put(&*self.dev, off, p) };
            rs.got += p.len();
            // The receive completes once the chunks are on the device (`Engine::run_pipes`).
            return;
        }
        if off < rs.cap && !p.is_empty() {
            let n = p.len().min(rs.cap - off);
            match &mut rs.stage {
                Some(st) if off + n <= st.len() => st[off..off + n].copy_from_slice(&p[..n]),
                _ => {
                    let t0 = std::time::Instant::now();
                    // SAFETY: off + n <= cap, buf holds cap bytes owned by this receive.
                    ok = unsafe { Self::put(&*self.dev, rs.buf, rs.dev, off, &p[..n]) };
                    if rs.dev {
                        self.dev_stats.puts.add(n, t0);
                    }
                }
            }
        }
        rs.got += p.len();
        if ok && rs.got >= rs.expect {
            if let Some(st) = rs.stage.take() {
                let t0 = std::time::Instant::now();
                let n = rs.expect.min(st.len());
                // SAFETY: the staged bytes are a prefix of the message, at most cap bytes.
                ok = unsafe { Self::put(&*self.dev, rs.buf, rs.dev, 0, &st[..n]) };
                if rs.dev {
                    self.dev_stats.puts.add(n, t0);
                }
            }
        }
        if !ok {
            self.fail(rreq);
            return;
        }
        if rs.got >= rs.expect {
            self.complete(rreq);
        }
    }

    pub(super) fn on_frame(&mut self, src_world: usize, h: &Header, p: &[u8]) {
        match h.kind {
            kind::EAGER | kind::RTS => self.on_new_message(src_world, h, p),
            kind::FRAG => {
                let key = (src_world, h.sreq);
                let off = h.arg as usize;
                let last = match self.frags.get(&key).copied() {
                    Some(FragTarget::Recv(rreq)) => {
                        self.deliver(rreq, off, p);
                        self.reqs.get(rreq).is_none_or(|r| r.done)
                    }
                    Some(FragTarget::Unexp(uid)) => match self.unexp.get_mut(uid) {
                        Some(Unexp {
                            body: UBody::Eager { data },
                            total,
                            ..
                        }) => {
                            data.extend(p);
                            data.len() >= *total
                        }
                        _ => true,
                    },
                    None => {
                        tracing::error!(
                            "engine: fragment of unknown message from rank {src_world}"
                        );
                        false
                    }
                };
                if last {
                    self.frags.remove(&key);
                }
            }
            kind::CTS => self.on_cts(src_world, h),
            kind::BULK => self.on_bulk(src_world, h),
            kind::CREDIT => {
                if let Some(t) = self.tx_pipes.iter_mut().find(|t| t.sreq == h.sreq) {
                    t.credit(h.arg as usize);
                }
            }
            kind::PUT => self.writes.push(PendingWrite {
                then: AfterCopy {
                    way: Way::Push,
                    peer: src_world,
                    sreq: h.sreq,
                    rreq: h.rreq,
                    want: h.total as usize,
                },
                export: p.to_vec().into_boxed_slice(),
            }),
            kind::DONE => self.complete(h.rreq),
            kind::PIPE => self.pipe_out(src_world, h.sreq, h.rreq, h.arg, h.total as usize),
            kind::DATA => {
                self.deliver(h.rreq, h.arg as usize, p);
                let watched = self.stream_watch[src_world].is_some_and(|(r, _)| r == h.rreq);
                if watched && self.reqs.get(h.rreq).is_none_or(|r| r.done) {
                    self.stream_done(src_world, h.rreq, h.arg as usize + p.len());
                }
            }
            kind::FIN => self.mark_pushed(h.sreq),
            kind::REFUSE => self.on_refuse(h.sreq, p),
            kind::ASK => self.on_ask(src_world, h),
            kind::TELL => self.on_tell(src_world, h, p),
            kind::BYE => self.on_bye(src_world),
            kind::WATCH => self.on_watch(src_world),
            kind::ACK => {
                if let Some(Req {
                    kind: ReqKind::Send(s),
                    ..
                }) = self.reqs.get_mut(h.sreq)
                {
                    s.need_ack = false;
                    if s.pushed {
                        self.complete(h.sreq);
                    }
                }
            }
            k => tracing::error!("engine: unknown frame kind {k} from rank {src_world}"),
        }
    }

    /// The receiver asks for streamed data: pipelined ([`devnet`]) where it grants credits
    /// or this send's device buffer goes to another node, else the plain stream.
    fn on_cts(&mut self, peer: usize, h: &Header) {
        let want = h.total as usize;
        let credit = h.flags & FLAG_CREDIT != 0;
        let dev_far = !self.near[peer]
            && matches!(
                self.reqs.get(h.sreq),
                Some(Req { kind: ReqKind::Send(s), .. }) if s.dev && s.staged.is_none()
            );
        if dev_far && !self.pipe_cfg.on {
            // A device send that went out as `FLAG_DEVNET` only to offer a bulk transfer
            // (the pipeline is off here): staged whole, as the setting says.
            self.stage_device_send(h.sreq);
        }
        let dev_far = dev_far && self.pipe_cfg.on;
        if want == 0 || !(credit || dev_far) {
            return self.stream_send(peer, h.sreq, h.rreq, want);
        }
        let Some(Req {
            kind: ReqKind::Send(s),
            ..
        }) = self.reqs.get(h.sreq)
        else {
            tracing::error!("engine: CTS for unknown send {:#x}", h.sreq);
            return;
        };
        let want = want.min(s.len);
        let limit = if credit { h.arg as usize } else { want };
        self.tx_pipes.push(devnet::TxPipe::new(
            peer,
            h.sreq,
            h.rreq,
            want,
            limit,
            self.pipe_cfg,
        ));
    }

    /// The receiver wants streamed data of a send whose buffer is device memory: copy it to
    /// host memory once and stream from there.
    fn stage_device_send(&mut self, sreq: u64) {
        let Some(Req {
            kind: ReqKind::Send(s),
            status,
            ..
        }) = self.reqs.get_mut(sreq)
        else {
            return;
        };
        if !s.dev || s.staged.is_some() {
            return;
        }
        let t0 = std::time::Instant::now();
        // SAFETY: the send's device buffer is valid for len bytes until the send completes.
        match unsafe { self.dev.dtoh_stage(s.buf as usize, s.len) } {
            Ok(v) => {
                self.dev_stats.staged.add(s.len, t0);
                s.buf = v.as_ptr();
                s.staged = Some(v);
            }
            Err(e) => {
                tracing::error!("engine: staging a device send buffer failed: {e}");
                let v = vec![0u8; s.len];
                s.buf = v.as_ptr();
                s.staged = Some(Box::new(v));
                status.error = crate::standard::consts::MPI_ERR_OTHER;
            }
        }
    }

    /// Open slot `i` of the sends from `src_world` for a shared read of `want` bytes into
    /// receive `rreq`, at once, so that the sender may start on chunks before this rank's next
    /// progress call carries out its reads.
    fn open_slot(&mut self, rreq: u64, src_world: usize, i: u8, want: usize) -> Option<coop::Job> {
        let (_, table) = self.slots[src_world]?;
        let Some(Req {
            kind: ReqKind::Recv(rs),
            ..
        }) = self.reqs.get(rreq)
        else {
            return None;
        };
        // SAFETY: the transport's table, mapped while the engine lives; i < COPY_SLOTS (checked
        // by the caller).
        Some(unsafe { coop::Slot::at(table, i as usize) }.open(rs.buf as u64, want))
    }

    /// The shared-copy slot an RTS offers.
    fn offered_slot(h: &Header) -> Option<u8> {
        (h.flags & FLAG_COOP != 0).then_some(h.rreq as u8)
    }

    /// A receive whose data could not be stored completes with MPI_ERR_OTHER.
    pub(super) fn fail(&mut self, rreq: u64) {
        if let Some(r) = self.reqs.get_mut(rreq) {
            r.status.error = crate::standard::consts::MPI_ERR_OTHER;
        }
    }

    /// Receive `rreq` keeps the note of the message it matched.
    fn keep_note(&mut self, rreq: u64, note: Option<Note>) {
        if let (
            Some(Req {
                kind: ReqKind::Recv(rs),
                ..
            }),
            Some(_),
        ) = (self.reqs.get_mut(rreq), note)
        {
            rs.note = note;
        }
    }

    pub(super) fn on_new_message(&mut self, src_world: usize, h: &Header, p: &[u8]) {
        // A note ends the first frame's payload (FLAG_NOTE): the rest is the message's.
        let (p, note) = match p.len().checked_sub(NOTE_BYTES) {
            Some(at) if h.flags & FLAG_NOTE != 0 => {
                let (data, n) = p.split_at(at);
                (data, n.try_into().ok())
            }
            _ => (p, None),
        };
        let total = h.total as usize;
        let sync = h.flags & FLAG_SYNC != 0;
        if let Some(d) = self.direct.as_mut().filter(|d| {
            matches!(d.state, DirectState::Waiting)
                && matches(d.ctx, d.src, d.tag, h.ctx, h.src_rank, h.tag)
        }) {
            if h.kind == kind::EAGER && !sync && note.is_none() && p.len() == total {
                let n = total.min(d.cap);
                // SAFETY: the waiting receive's buffer holds d.cap bytes and is writable until
                // it is done (Engine::recv_direct's contract); n <= d.cap, n <= p.len().
                unsafe { std::ptr::copy_nonoverlapping(p.as_ptr(), d.buf, n) };
                d.state = DirectState::Received(Status {
                    source: h.src_rank,
                    tag: h.tag,
                    error: if total > d.cap {
                        MPI_ERR_TRUNCATE
                    } else {
                        MPI_SUCCESS
                    },
                    bytes: n,
                    cancelled: false,
                    finalized: false,
                });
                return;
            }
            // This message needs a request: the receive becomes the first posted one and
            // matches it below.
            self.direct_to_posted();
        }
        let pos = self
            .posted
            .iter()
            .position(|r| matches(r.ctx, r.src, r.tag, h.ctx, h.src_rank, h.tag));
        if let Some(pos) = pos {
            let rreq = self.posted.remove(pos).unwrap().rreq;
            let (_, cap) = self.matched(rreq, h.src_rank, h.tag, total);
            self.keep_note(rreq, note);
            if h.kind == kind::RTS {
                let dev = DevRef::from_rts(h, p);
                let coop = Self::offered_slot(h);
                self.start_rndv(rreq, src_world, h.sreq, h.arg, total.min(cap), dev, coop);
                return;
            }
            if sync {
                self.send_ctrl(
                    src_world,
                    Header {
                        kind: kind::ACK,
                        sreq: h.sreq,
                        ..Default::default()
                    },
                );
            }
            if let Some(Req {
                kind: ReqKind::Recv(rs),
                ..
            }) = self.reqs.get_mut(rreq)
            {
                rs.expect = total;
                rs.got = 0;
                if rs.dev && p.len() < total && rs.pipe.is_none() && rs.stage.is_none() {
                    // A device receive of an eager message of several frames gathers them in
                    // page-locked memory and copies the message to the device once: each
                    // device copy costs ~8 us whatever its size (4x H100, benches/NOTES.md).
                    rs.stage = self.dev.staging(rs.buf as usize, total.min(rs.cap));
                }
            }
            if p.len() < total {
                self.frags
                    .insert((src_world, h.sreq), FragTarget::Recv(rreq));
            }
            self.deliver(rreq, 0, p);
            if total == 0 {
                self.complete(rreq);
            }
            return;
        }
        if !self.refused.is_empty() && self.refused_message(src_world, h, p) {
            return;
        }
        let body = if h.kind == kind::RTS {
            UBody::Rndv {
                addr: h.arg,
                dev: DevRef::from_rts(h, p),
                coop: Self::offered_slot(h),
            }
        } else {
            UBody::Eager {
                data: EagerData::new(total, p),
            }
        };
        let uid = self.unexp.insert(Unexp {
            src_world,
            ctx: h.ctx,
            src_rank: h.src_rank,
            tag: h.tag,
            total,
            sreq: h.sreq,
            sync,
            body,
            note,
        });
        if h.kind == kind::EAGER && p.len() < total {
            self.frags
                .insert((src_world, h.sreq), FragTarget::Unexp(uid));
        }
        self.unexp_order.push_back(uid);
    }
}
