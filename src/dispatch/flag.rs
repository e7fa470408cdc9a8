//! The flag-slot path: small blocking collectives on MPI_COMM_WORLD through the flag slots of
//! the shared-memory segments (`engine::flag`).

use super::call::{in_place, CollSpec, DevPacked, Reduction, Side};
use crate::coll::CollKind;
use crate::engine::collcheck::{CallNo, Path as CheckPath, Record, Rings, Watch};
use crate::engine::flag::{FlagOp, Slots};
use crate::engine::Backoff;
use crate::gpu::stage::Mirror;
use crate::mpi::error::{MpiError, MpiResult};
use crate::mpi::op::{self as ops};
use crate::runtime;
use crate::runtime::objects::builtin_op;
use crate::runtime::types;
use crate::standard::consts as c;
use crate::standard::ffi::*;
use std::os::raw::{c_int, c_void};

/// A user buffer of a flag collective as one packed host byte range: the user's memory when it
/// is one contiguous host block, else a host mirror (device memory) and/or a packed temporary.
pub(super) struct Flat {
    pub(super) ptr: *mut u8,
    mirror: Option<(Mirror, Side)>,
    dev: Option<DevPacked>,
    tmp: Option<Vec<u8>>,
}

impl Flat {
    /// `fill`: the side holds input (pack it).
    unsafe fn of(side: Option<&Side>, fill: bool) -> MpiResult<Flat> {
        let Some(side) = side else {
            return Ok(Flat {
                ptr: std::ptr::null_mut(),
                mirror: None,
                dev: None,
                tmp: None,
            });
        };
        // Device memory is packed into host memory or staged through a host mirror, as in
        // CollSpec::start.
        if let Some(mut p) = side.device_packed(fill)? {
            return Ok(Flat {
                ptr: p.host.as_mut_ptr(),
                mirror: None,
                dev: Some(p),
                tmp: None,
            });
        }
        let mirror = side.mirrored(true)?;
        let host = mirror.as_ref().map(|(_, s)| s).unwrap_or(side);
        if let [b] = &host.blocks[..] {
            if host.direct() {
                let off = if b.count == 0 {
                    0
                } else {
                    b.disp + b.dt.desc.true_lb()
                };
                return Ok(Flat {
                    ptr: (host.base as *mut u8).wrapping_offset(off),
                    mirror,
                    dev: None,
                    tmp: None,
                });
            }
        }
        let (ptr, _, tmp) = host.map(fill);
        Ok(Flat {
            ptr,
            mirror,
            dev: None,
            tmp,
        })
    }

    /// The send and receive sides of a rooted or reducing call, and where its input is (the
    /// send side, or the receive side in place and for bcast).
    pub(super) unsafe fn sides(spec: &CollSpec) -> MpiResult<(Flat, Flat, *const u8)> {
        let send = Flat::of(spec.send.as_ref(), true)?;
        let recv = Flat::of(spec.recv.as_ref(), spec.recv_is_input)?;
        let input = if spec.send.is_some() {
            send.ptr as *const u8
        } else {
            recv.ptr as *const u8
        };
        Ok((send, recv, input))
    }

    /// Write an output side back: unpack the temporary, copy the mirror to the device.
    pub(super) unsafe fn finish(self, side: Option<&Side>) -> MpiResult<()> {
        let Some(side) = side else { return Ok(()) };
        if let Some(p) = &self.dev {
            return p.unpack(None);
        }
        let host = self.mirror.as_ref().map(|(_, s)| s).unwrap_or(side);
        if let Some(tmp) = &self.tmp {
            host.unpack(tmp, None);
        }
        if let Some((m, _)) = &self.mirror {
            m.flush()?;
        }
        Ok(())
    }
}

/// The world's flag slots and the call's reduction if `run_flag` would serve this call (a rule
/// on values every rank shares: communicator, collective, byte count, op kind).
fn flag_serves(spec: &CollSpec) -> Option<(Slots, Option<&Reduction>)> {
    // Context id 0 is MPI_COMM_WORLD's (reserved at MPI_Init, never reused). The slots are
    // shared memory: only a world on one node has them.
    if spec.comm.ctx != 0 || !spec.comm.one_node {
        return None;
    }
    let red = match (spec.kind, &spec.red) {
        (CollKind::Barrier | CollKind::Bcast, _) => None,
        (CollKind::Reduce | CollKind::Allreduce, Some((r @ Reduction::Builtin(..), _))) => Some(r),
        _ => return None,
    };
    let slots = runtime::world_flag().filter(|s| spec.bytes <= s.max())?;
    Some((slots, red))
}

/// The world's flag slots if `run_flag` would serve this call ([`flag_serves`]).
pub(super) fn flag_eligible(spec: &CollSpec) -> Option<Slots> {
    flag_serves(spec).map(|(slots, _)| slots)
}

/// MPI_COMM_WORLD's small blocking barrier, bcast, reduce and allreduce (predefined ops) through
/// the flag slots of the shared-memory segments (`engine::flag`): no schedule, no messages, no
/// allocation for contiguous host buffers. Whether a call goes this way depends only on what
/// every rank has in common (the collective, the communicator, the byte count, the op and
/// `GPUMPI_SHM_COLL_MAX`), never on where one rank's buffers live: device buffers are staged
/// through host mirrors and non-contiguous ones packed here, so all ranks take the same path.
/// `Ok(false)`: not this path.
pub(super) unsafe fn run_flag(spec: &CollSpec, no: CallNo) -> MpiResult<bool> {
    let Some((slots, red)) = flag_serves(spec) else {
        return Ok(false);
    };
    let k = no.flag();
    let (send, recv, input) = Flat::sides(spec)?;
    let reduce = reducer(red);
    let len = spec.bytes;
    let op = match spec.kind {
        CollKind::Barrier => FlagOp::Barrier,
        CollKind::Bcast => FlagOp::Bcast {
            root: spec.root,
            buf: recv.ptr,
            len,
        },
        CollKind::Reduce => FlagOp::Reduce {
            root: spec.root,
            input,
            output: recv.ptr,
            len,
            reduce: &reduce,
        },
        _ => FlagOp::Allreduce {
            input,
            output: recv.ptr,
            len,
            reduce: &reduce,
        },
    };
    tracing::debug!(
        coll = spec.kind.name(),
        algo = "flag slots",
        bytes = spec.bytes,
        ranks = slots.size(),
        "collective over shared memory"
    );
    // The record of this call, checked while it waits (engine::collcheck).
    let mut watch = check_start(spec, no, CheckPath::Flag);
    let r = slots.run(k, &op, &mut flag_idle(&slots, watch.as_mut()));
    r.map_err(|e| check_refine(watch.as_ref(), e))?;
    let received = match spec.kind {
        CollKind::Bcast => spec.root != spec.comm.rank,
        _ => true,
    };
    if received {
        recv.finish(spec.recv.as_ref())?;
    }
    drop(send);
    Ok(true)
}

/// The reduction callback of a shared-memory collective (`inout = input op inout`; nothing
/// without a reduction).
pub(super) fn reducer(red: Option<&Reduction>) -> impl Fn(&[u8], &mut [u8]) -> MpiResult<()> + '_ {
    move |i, o| match red {
        Some(r) => r.apply(i, o),
        None => Ok(()),
    }
}

/// Publish this rank's record of call `no` of `spec`'s communicator on `path`
/// (engine::collcheck), and return the check of its waits (`None` without record rings).
pub(super) fn check_start(spec: &CollSpec, no: CallNo, path: CheckPath) -> Option<Watch> {
    let rings = runtime::rings()?;
    let rec = Record::new(
        spec.comm.ctx,
        no.tag() as u32,
        spec.kind,
        spec.root,
        spec.bytes,
        path,
    );
    rings.publish(&rec);
    let peers = (spec.comm.ctx != 0).then(|| spec.comm.peers.clone());
    Some(Watch::new(rec, peers, spec.comm.rank))
}

/// [`check_start`] for a call that returns before its waits end (a request's check): the
/// watch with the record rings it reads.
pub(super) fn check_kept(spec: &CollSpec, no: CallNo, path: CheckPath) -> Option<(Watch, Rings)> {
    let rings = runtime::rings()?;
    check_start(spec, no, path).map(|w| (w, rings))
}

/// The error of a flag call that failed, told by the peers' records where they disagree with
/// this rank's.
pub(super) fn check_refine(watch: Option<&Watch>, e: MpiError) -> MpiError {
    match (watch, runtime::rings()) {
        (Some(w), Some(r)) => w.refine(&r, e),
        _ => e,
    }
}

/// What a rank does while waiting on flag slots: progress (other traffic, nonblocking
/// collectives), then back off (spin, yield, sleep) like every blocking call; once the back-off
/// sleeps, `watch` compares the peers' records of the call (engine::collcheck).
fn flag_idle<'a>(
    slots: &Slots,
    watch: Option<&'a mut Watch>,
) -> impl FnMut() -> MpiResult<()> + 'a {
    idle_with(slots.is_oversubscribed(), watch)
}

/// [`flag_idle`] for ranks that share cores (`oversubscribed`) or not; also the wait of the
/// scratch areas (`super::mid`).
pub(super) fn idle_with<'a>(
    oversubscribed: bool,
    mut watch: Option<&'a mut Watch>,
) -> impl FnMut() -> MpiResult<()> + 'a {
    let mut backoff = if oversubscribed {
        Backoff::yielding()
    } else {
        Backoff::new()
    };
    move || {
        let look = backoff.time_to_look();
        let give_way = runtime::with(|rt| {
            rt.progress();
            Ok(look && rt.engine.shares_cpu())
        })?;
        if give_way {
            backoff.give_way();
        }
        backoff.snooze();
        if backoff.is_sleeping() {
            if let (Some(w), Some(r)) = (watch.as_deref_mut(), runtime::rings()) {
                w.poll(&r)?;
            }
        }
        Ok(())
    }
}

/// The blocking MPI_Barrier, MPI_Bcast, MPI_Reduce and MPI_Allreduce (and their `_c` forms) on
/// MPI_COMM_WORLD with a predefined datatype and op on contiguous host buffers: the flag
/// protocol of [`run_flag`] straight from the arguments, without building a [`CollSpec`] (no
/// reference counts, locks or allocations). Declines (`Ok(false)`) at anything unusual (a
/// derived datatype, device memory, an argument error to report); the full path then reaches
/// [`run_flag`] with the same eligibility rule (collective, communicator, byte count, op), so the
/// ranks always agree on the protocol.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn flag_quick(
    kind: CollKind,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: i64,
    dth: MPI_Datatype,
    op: MPI_Op,
    root: c_int,
    cm: MPI_Comm,
) -> MpiResult<bool> {
    if cm != c::MPI_COMM_WORLD {
        return Ok(false);
    }
    // Where GPU-native collectives are attempted, a process that has passed device memory to
    // a collective agrees with the other ranks on the path first (in the GPU paths); one that
    // never has, passing host memory (checked below), skips that agreement
    // (`engine::agree`): the ranks that agree count it as "no".
    if kind != CollKind::Barrier && crate::gpu::device::enabled() && runtime::world_agree().seen() {
        return Ok(false);
    }
    let Some(slots) = runtime::world_flag() else {
        return Ok(false);
    };
    let me = slots.rank();
    let rooted = matches!(kind, CollKind::Bcast | CollKind::Reduce);
    if rooted && (root < 0 || root as usize >= slots.size()) {
        return Ok(false);
    }
    let root = root.max(0) as usize;
    let mut len = 0;
    let mut red = None;
    if kind != CollKind::Barrier {
        let Some(dt) = types::predefined(dth) else {
            return Ok(false);
        };
        if count < 0 || !dt.desc.is_contiguous(count as usize) || dt.desc.true_lb() != 0 {
            return Ok(false);
        }
        len = dt.desc.packed_size(count as usize);
        if len > slots.max() {
            return Ok(false);
        }
        if kind != CollKind::Bcast {
            let (Some(b), Some(e)) = (builtin_op(op), dt.desc.elem()) else {
                return Ok(false);
            };
            if ops::check(b, e).is_err() {
                return Ok(false);
            }
            red = Some((b, e));
        }
    }
    let i_am_root = !rooted || root == me;
    let inplace = kind != CollKind::Bcast && in_place(sendbuf);
    if inplace && !i_am_root {
        return Ok(false);
    }
    let input: *const u8 = match kind {
        CollKind::Bcast => recvbuf as *const u8,
        _ if inplace => recvbuf as *const u8,
        _ => sendbuf as *const u8,
    };
    let output = recvbuf as *mut u8;
    // The standard ABI's special pointers (NULL, MPI_IN_PLACE where not allowed,
    // MPI_BUFFER_AUTOMATIC) are argument errors: the full path reports them.
    let bad = |p: *const u8| p as usize == 1 || p as usize == 2 || (len > 0 && p.is_null());
    if (i_am_root && bad(output)) || (!inplace && bad(input)) {
        return Ok(false);
    }
    let host = |p: *const u8| !crate::gpu::is_device(p);
    if len > 0 && (!host(input) || (i_am_root && !host(output))) {
        return Ok(false);
    }
    let reduce = |i: &[u8], o: &mut [u8]| match red {
        Some((b, e)) => ops::reduce(b, e, i, o),
        None => Ok(()),
    };
    let op = match kind {
        CollKind::Barrier => FlagOp::Barrier,
        CollKind::Bcast => FlagOp::Bcast {
            root,
            buf: output,
            len,
        },
        CollKind::Reduce => FlagOp::Reduce {
            root,
            input,
            output,
            len,
            reduce: &reduce,
        },
        _ => FlagOp::Allreduce {
            input,
            output,
            len,
            reduce: &reduce,
        },
    };
    let Some(world) = runtime::world_comm() else {
        return Ok(false);
    };
    let no = CallNo::new(world.next_coll_seq());
    let k = no.flag();
    tracing::debug!(
        coll = kind.name(),
        algo = "flag slots (quick)",
        bytes = len,
        ranks = slots.size(),
        "collective over shared memory"
    );
    // The record of this call, checked while it waits (engine::collcheck).
    let mut watch = runtime::rings().map(|rings| {
        let rec = Record::new(0, no.tag() as u32, kind, root, len, CheckPath::Flag);
        rings.publish(&rec);
        Watch::new(rec, None, me)
    });
    let r = slots.run(k, &op, &mut flag_idle(&slots, watch.as_mut()));
    r.map_err(|e| {
        // As run_blocking does for a failed call.
        crate::gpu::resident::call_failed(&world.gpu, no.seq);
        check_refine(watch.as_ref(), e)
    })?;
    Ok(true)
}
