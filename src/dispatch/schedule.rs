//! The schedule path: every collective, every mode. Maps the call's blocks into a packed byte
//! space (the user's memory directly when every block is contiguous, else temporaries packed
//! at start and unpacked at completion), builds the schedule `coll::build` selects and hands
//! it to the engine's executor.

use super::call::{CollSpec, DevSides};
use super::flag::check_kept;
use crate::coll::hier::{self, Nodes};
use crate::coll::{self, Block, CollArgs, CollKind};
use crate::engine::coll::CollExec;
use crate::engine::collcheck::{CallNo, Path as CheckPath, Record};
use crate::engine::collnote::CrossCheck;
use crate::mpi::error::{MpiError, MpiResult};
use crate::runtime;
use crate::runtime::objects::COLL_CTX_BIT;
use crate::runtime::request::{CollCheck, Post, ReqKind, Status};
use std::sync::Arc;

/// A collective's operands in packed byte space: the send and receive base pointers and the
/// blocks there (`CollArgs`), the byte count and whether the call is in place.
pub(crate) struct Packed<'a> {
    pub(crate) sptr: *mut u8,
    pub(crate) sblocks: &'a [Block],
    pub(crate) rptr: *mut u8,
    pub(crate) rblocks: &'a [Block],
    pub(crate) bytes: usize,
    pub(crate) in_place: bool,
    /// The collective whose schedule runs the operands, where it is not the call's own (the
    /// pieces of an alltoall run as alltoallv schedules over strided blocks).
    pub(crate) as_kind: Option<CollKind>,
    /// A blocking call: an alltoallv/alltoallw through PXN may first tell its block lengths
    /// inside the node, a gatherv/scatterv between nodes its leaders their members' lengths (a
    /// nonblocking one may not wait for the other ranks at its start).
    pub(crate) tell_counts: bool,
    /// The operands that are device memory, where the schedule runs on them directly
    /// ([`CollSpec::device_sides`]).
    pub(crate) dev: Option<DevSides>,
}

impl crate::engine::coll::DevBuf for crate::gpu::collmem::Scratch {
    fn addr(&self) -> usize {
        crate::gpu::collmem::Scratch::addr(self)
    }
    fn bytes(&self) -> usize {
        crate::gpu::collmem::Scratch::len(self)
    }
}

impl CollSpec {
    /// Start the schedule of call number `no` of the communicator (`None`: the next one).
    pub(crate) unsafe fn start(&self, no: Option<CallNo>) -> MpiResult<ReqKind> {
        self.start_on(no, None)
    }

    /// [`Self::start`] with the hierarchical schedule over `nodes` (`coll::hier`) instead of
    /// the one `coll::build` selects, where `nodes` is given.
    pub(crate) unsafe fn start_on(
        &self,
        no: Option<CallNo>,
        nodes: Option<&Nodes>,
    ) -> MpiResult<ReqKind> {
        // Device buffers are staged through host mirrors (gpu::stage): the send side's mirror
        // is held until completion, the receive side's is written back by the post step.
        // Host buffers (the common case) are used through `self` without cloning their sides.
        // Non-contiguous device layouts are packed into host memory instead (on the GPU where
        // it applies). Exscan leaves rank 0's output unwritten: it is packed too, so it keeps
        // its contents. Where the schedule runs on the device buffers themselves
        // (`device_sides`: contiguous device memory between nodes), nothing is staged.
        let dev = self.device_sides();
        let sdev = match (&self.send, dev) {
            (Some(s), None) => s.device_packed(true)?,
            _ => None,
        };
        let mut rdev = match (&self.recv, dev) {
            (Some(r), None) => {
                r.device_packed(self.recv_is_input || self.kind == CollKind::Exscan)?
            }
            _ => None,
        };
        let smir = match (&self.send, &sdev, dev) {
            (Some(s), None, None) => s.mirrored(true)?,
            _ => None,
        };
        let rmir = match (&self.recv, &rdev, dev) {
            (Some(r), None, None) => r.mirrored(self.recv_mirror_needs_fill(r))?,
            _ => None,
        };
        if let Some(d) = dev {
            tracing::debug!(
                coll = self.kind.name(),
                bytes = self.bytes,
                device = d.device,
                "schedule between nodes on the device buffers (device steps)"
            );
        }
        let send = smir.as_ref().map(|(_, side)| side).or(self.send.as_ref());
        let recv = rmir.as_ref().map(|(_, side)| side).or(self.recv.as_ref());
        let (sptr, sblocks, shold) = match (&sdev, send) {
            (Some(p), _) => (p.host.as_ptr() as *mut u8, p.blocks.clone(), None),
            (None, Some(s)) => s.map(true),
            (None, None) => (std::ptr::null_mut(), Vec::new(), None),
        };
        let (rptr, mut rblocks, rhold) = match (&mut rdev, recv) {
            (Some(p), _) => (p.host.as_mut_ptr(), p.blocks.clone(), None),
            (None, Some(r)) => r.map(self.recv_is_input),
            (None, None) => (std::ptr::null_mut(), Vec::new(), None),
        };
        if let Some(l) = &self.rs_lens {
            rblocks = l.iter().map(|&len| Block::new(0, len)).collect();
        }
        let blocking = no.is_some();
        let no = no.unwrap_or_else(|| CallNo::new(self.comm.next_coll_seq()));
        let (exec, check) = self.launch(
            no,
            nodes,
            Packed {
                sptr,
                sblocks: &sblocks,
                rptr,
                rblocks: &rblocks,
                bytes: self.bytes,
                in_place: self.in_place,
                as_kind: None,
                tell_counts: blocking,
                dev,
            },
        )?;
        let mut hold = Vec::new();
        if let Some(h) = shold {
            hold.push(crate::gpu::pool::HostBuf::from_vec(h));
        }
        if let Some((m, _)) = smir {
            hold.push(m.into_host());
        }
        if let Some(p) = sdev {
            hold.push(p.host);
        }
        let rside = match rmir {
            Some((m, side)) => Some((Some(m), side)),
            None if rhold.is_some() => self.recv.clone().map(|side| (None, side)),
            None => None,
        };
        let post: Option<Post> = match (rhold, rside, rdev) {
            (_, _, Some(p)) => {
                let only = self.unpack_only;
                Some(Box::new(move |_st: &mut Status| p.unpack(only)))
            }
            (_, None, None) => None,
            (tmp, Some((mirror, side)), None) => {
                let only = self.unpack_only;
                Some(Box::new(move |_st: &mut Status| {
                    if let Some(tmp) = tmp {
                        side.unpack(&tmp, only);
                    }
                    if let Some(m) = mirror {
                        m.flush()?;
                    }
                    Ok(())
                }))
            }
        };
        Ok(ReqKind::Coll {
            exec,
            post,
            result: None,
            hold,
            check,
        })
    }

    /// An alltoall between nodes with PXN on (`CommObj::pxn_plan`), or a piece of one (an
    /// alltoallv whose blocks are all `p.bytes` long on every rank): the schedule through the
    /// node leaders (`coll::hier`), one aggregator per node and rail (`coll::alltoall::rails`)
    /// or the PXN forwarders (`coll::alltoall::pxn`), as `Plan::pick` chooses for the block
    /// size. A piece that the plan gives the leaders takes the aggregators.
    fn pxn_alltoall(&self, args: &CollArgs, p: &Packed) -> MpiResult<Option<coll::Schedule>> {
        use coll::alltoall::{choice::Pick, pxn, rails};
        if self.kind != CollKind::Alltoall {
            return Ok(None);
        }
        let (Some(plan), Some(nodes)) = (self.comm.pxn_plan(), self.comm.nodes.as_deref()) else {
            return Ok(None);
        };
        let len = p.bytes;
        let (pick, sched) = match p.as_kind {
            None => plan.build(args, nodes)?,
            Some(CollKind::Alltoallv) => match plan.pick(len) {
                Pick::Forwarders => (
                    Pick::Forwarders,
                    pxn::build_blocks(args, nodes, &plan.via, &|_, _| len, p.sblocks, p.rblocks),
                ),
                // A piece's blocks lie apart in the user's buffers, which the leaders'
                // schedule (whole contiguous buffers) cannot take: the aggregators, the
                // cheaper of the other two below the same size.
                Pick::Rails | Pick::Leaders => (
                    Pick::Rails,
                    rails::build_blocks(
                        args,
                        nodes,
                        &plan.rails,
                        &|_, _| len,
                        p.sblocks,
                        p.rblocks,
                    ),
                ),
            },
            Some(_) => return Ok(None),
        };
        tracing::debug!(
            "alltoall through the PXN {} over {} nodes",
            pick.name(),
            nodes.count()
        );
        Ok(Some(sched))
    }

    /// A blocking alltoallv/alltoallw between nodes with PXN on (`CommObj::pxn_plan`): the
    /// ranks of each node first tell each other their block lengths (`coll::alltoall::counts`,
    /// internal collective `no.nested(..)`, over shared memory), then the blocks between each
    /// pair of nodes go through one aggregator per node and rail (`coll::alltoall::rails`) or
    /// through the forwarders (`coll::alltoall::pxn`), as `Plan::picks_between` chooses from
    /// the lengths between the two nodes or `GPUMPI_PXN_ALLTOALL` forces
    /// (`coll::alltoall::pairs`); both take blocks of any length.
    unsafe fn pxn_alltoallv(
        &self,
        no: CallNo,
        args: &CollArgs,
        p: &Packed,
    ) -> MpiResult<Option<coll::Schedule>> {
        use coll::alltoall::{counts, pairs};
        if !matches!(self.kind, CollKind::Alltoallv | CollKind::Alltoallw)
            || p.as_kind.is_some()
            || !p.tell_counts
        {
            return Ok(None);
        }
        let (Some(plan), Some(nodes)) = (self.comm.pxn_plan(), self.comm.nodes.as_deref()) else {
            return Ok(None);
        };
        let sub = self.subs.get() + 1;
        if sub > CallNo::MAX_SUB {
            return Ok(None);
        }
        self.subs.set(sub);
        let (n, r) = (args.size, args.rank);
        // In place, the blocks for a rank and from it are the same (the receive layout).
        let sblocks = if p.in_place { p.rblocks } else { p.sblocks };
        let mine = counts::row(n, |d| sblocks[d].len, |s| p.rblocks[s].len);
        let g = nodes.of[r];
        let mut rows = vec![0u8; nodes.ranks[g].len() * counts::row_bytes(n)];
        self.exchange_counts(
            no,
            sub,
            counts::build(nodes, r),
            &mine,
            &mut rows,
            "the count exchange inside the node failed",
        )?;
        let lens = counts::NodeLens::new(nodes, g, &rows);
        let len = |s: usize, d: usize| lens.len(s, d);
        // Per pair of nodes, from the lengths between them, which both nodes know: every rank
        // of the two takes the same schedule for the pair without a word between nodes.
        let picks = plan.picks_between(nodes, g, &len);
        tracing::debug!(
            "{} through the PXN {} over {} nodes",
            self.kind.name(),
            pairs::describe(&picks, g),
            nodes.count()
        );
        Ok(Some(pairs::build_blocks(
            args,
            nodes,
            &plan.via,
            &plan.rails,
            &picks,
            &len,
            sblocks,
            p.rblocks,
        )))
    }

    /// Whether call `no` over `p` may exchange its counts before its schedule: a blocking call
    /// of its own (not a collective inside another call), with an internal call number left.
    fn tells_v(&self, no: CallNo, p: &Packed) -> bool {
        p.tell_counts && p.as_kind.is_none() && no.sub == 0 && self.subs.get() < CallNo::MAX_SUB
    }

    /// Before a hierarchical gatherv/scatterv (`coll::hier::build_v`): the leader of each node
    /// without the root learns its members' block lengths (`hier::lens_schedule`, internal
    /// collective `no.nested(..)`: gatherv from its members over shared memory, scatterv from
    /// the root). The members' lengths in node order at such a leader; empty elsewhere.
    unsafe fn node_lens(
        &self,
        no: CallNo,
        args: &CollArgs,
        nodes: &Nodes,
    ) -> MpiResult<Vec<usize>> {
        let (r, root, kind) = (args.rank, args.root, self.kind);
        if !hier::tells_lens(kind, nodes, r, root) {
            return Ok(Vec::new());
        }
        let sub = self.subs.get() + 1;
        self.subs.set(sub);
        let mine = match (kind, r == root) {
            (CollKind::Scatterv, true) => hier::root_lens(nodes, root, |s| args.send_blocks[s].len),
            _ => hier::encode_len(args.bytes).to_vec(),
        };
        let mut lens = vec![0u8; hier::lens_recv_bytes(nodes, r)];
        self.exchange_counts(
            no,
            sub,
            hier::lens_schedule(kind, nodes, r, root),
            &mine,
            &mut lens,
            "the count exchange before the call failed",
        )?;
        Ok(match r != root && nodes.ranks[nodes.of[r]][0] == r {
            true => hier::decode_lens(&lens),
            false => Vec::new(),
        })
    }

    /// Run `sched`, an internal collective of call `no` (sub-call `sub`) that exchanges block
    /// lengths without reductions, from `send` into `recv`, and wait for it; `what` names a
    /// failure.
    fn exchange_counts(
        &self,
        no: CallNo,
        sub: u32,
        sched: coll::Schedule,
        send: &[u8],
        recv: &mut [u8],
        what: &str,
    ) -> MpiResult<()> {
        // SAFETY: `send` and `recv` outlive the executor, which completes before this returns.
        let exec = unsafe {
            CollExec::new(
                sched,
                send.as_ptr(),
                recv.as_mut_ptr(),
                self.comm.ctx | COLL_CTX_BIT,
                no.nested(sub).tag(),
                self.comm.peers.clone(),
                self.comm.rank,
                Box::new(|_: &[u8], _: &mut [u8]| {
                    Err(MpiError::intern("reduction step in the count exchange"))
                }),
            )
        };
        let st = runtime::wait_kind(ReqKind::Coll {
            exec: Box::new(exec),
            post: None,
            result: None,
            hold: Vec::new(),
            check: None,
        })?;
        if st.error != 0 {
            return Err(MpiError::new(st.error, what));
        }
        Ok(())
    }

    /// Build the schedule of call (or internal call) `no` over packed operands `p` (the
    /// hierarchical one over `nodes` where given) and its executor, with the consistency
    /// checks of the call: the record it publishes and, between nodes, the notes its messages
    /// carry (`engine::collnote`).
    pub(crate) unsafe fn launch(
        &self,
        no: CallNo,
        nodes: Option<&Nodes>,
        p: Packed,
    ) -> MpiResult<(Box<CollExec>, Option<Box<CollCheck>>)> {
        let (elem_size, commutative) = match &self.red {
            Some((r, commute)) => (r.elem_size().max(1), *commute),
            None => (1, true),
        };
        let args = CollArgs {
            rank: self.comm.rank,
            size: self.comm.size(),
            root: self.root,
            bytes: p.bytes,
            send_blocks: p.sblocks,
            recv_blocks: p.rblocks,
            elem_size,
            in_place: p.in_place,
            commutative,
            nodes: self.comm.node_count,
        };
        let kind = p.as_kind.unwrap_or(self.kind);
        let pxn = match self.pxn_alltoall(&args, &p)? {
            Some(s) => Some(s),
            None => self.pxn_alltoallv(no, &args, &p)?,
        };
        // Gatherv and scatterv through the node leaders need the node's counts first: a
        // blocking top-level call only (the same on every rank), else the flat schedule.
        let nodes = match nodes {
            Some(_) if hier::SUPPORTED_BLOCKING.contains(&kind) && !self.tells_v(no, &p) => None,
            n => n,
        };
        let (algo, sched) = match (pxn, nodes) {
            (Some(s), _) => ("pxn", Arc::new(s)),
            (None, Some(nodes)) if hier::SUPPORTED_BLOCKING.contains(&kind) => {
                tracing::debug!("hierarchical {} over {} nodes", kind.name(), nodes.count());
                let lens = self.node_lens(no, &args, nodes)?;
                let s = hier::build_v(kind, &args, nodes, &lens, runtime::job_bulk())?;
                ("hierarchical", Arc::new(s))
            }
            (None, Some(nodes)) => {
                tracing::debug!("hierarchical {} over {} nodes", kind.name(), nodes.count());
                ("hierarchical", Arc::new(hier::build(kind, &args, nodes)?))
            }
            (None, None) => coll::build_shared(kind, &args)?,
        };
        tracing::debug!(
            coll = kind.name(),
            algo,
            bytes = p.bytes,
            ranks = self.comm.size(),
            "collective schedule over point-to-point"
        );
        let on_device = match p.dev {
            Some(d) => Some(self.on_device(d, sched.tmp_len)?),
            None => None,
        };
        let reduce: crate::engine::coll::ReduceFn = match self.red.clone() {
            Some((r, _)) => Box::new(move |i: &[u8], o: &mut [u8]| r.apply(i, o)),
            None => Box::new(|_: &[u8], _: &mut [u8]| {
                Err(MpiError::intern(
                    "reduction step in a collective without an operation",
                ))
            }),
        };
        let tag = no.tag();
        // The record of this call, and its check while it waits (engine::collcheck).
        let check = check_kept(self, no, CheckPath::Schedule)
            .map(|(watch, rings)| Box::new(CollCheck { watch, rings }));
        let mut exec = CollExec::new(
            sched,
            p.sptr as *const u8,
            p.rptr,
            self.comm.ctx | COLL_CTX_BIT,
            tag,
            self.comm.peers.clone(),
            self.comm.rank,
            reduce,
        );
        if let Some(o) = on_device {
            exec = exec.on_device(o)?;
        }
        if !self.comm.one_node {
            // Ranks on other nodes do not see this rank's record: its messages carry it
            // (engine::collnote).
            let rec = Record::new(
                self.comm.ctx,
                tag as u32,
                self.kind,
                self.root,
                self.bytes,
                CheckPath::Schedule,
            );
            exec = exec.with_cross_check(CrossCheck::new(rec, self.comm.rank, runtime::rings()));
        }
        Ok((Box::new(exec), check))
    }
}

impl CollSpec {
    /// What the executor needs to run a schedule on device operands `d`: the sides that are
    /// device memory, Tmp (`tmp_len` bytes) in device memory of their device from the
    /// communicator's pool (`gpu::collmem`), and the reduction of device regions (the GPU
    /// kernel, or through host memory for an op or type without one).
    fn on_device(&self, d: DevSides, tmp_len: usize) -> MpiResult<crate::engine::coll::OnDevice> {
        let tmp = match tmp_len {
            0 => None,
            n => Some(Box::new(crate::gpu::collmem::Scratch::take(
                &self.comm.gpu,
                d.device,
                n,
            )?) as Box<dyn crate::engine::coll::DevBuf>),
        };
        let (reduce, commutative) = match self.red.clone() {
            Some((r, commute)) => {
                let builtin = match &r {
                    super::call::Reduction::Builtin(op, e) => Some((*op, *e)),
                    super::call::Reduction::User { .. } => None,
                };
                let f: crate::engine::coll::DevReduceFn = Box::new(move |i, o, len| {
                    // SAFETY: the executor passes device regions of `len` bytes of the call's
                    // elements (its reduce steps on device memory).
                    unsafe {
                        crate::gpu::collmem::reduce(builtin, i, o, len, &mut |a, b| r.apply(a, b))
                    }
                });
                (Some(f), commute)
            }
            None => (None, true),
        };
        Ok(crate::engine::coll::OnDevice {
            send: d.send,
            recv: d.recv,
            tmp,
            reduce,
            commutative,
        })
    }
}
