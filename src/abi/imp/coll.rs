//! Collective operations, blocking, nonblocking and persistent (MPI 5.0 chapter 6).
//!
//! Each call is turned into a [`CollSpec`]: the user's typed buffers described
//! as blocks, resolved and validated once. `crate::dispatch` runs it: blocking calls on the
//! first path that takes them (GPU, flag slots, schedule), `MPI_I*` and `*_init` as schedules
//! (a request; `*_init` keep the spec and start it anew at every `MPI_Start`).

use super::p2p::check_count;
use super::util::*;
use crate::abi::consts as c;
use crate::abi::ffi::*;
use crate::abi::width::{UserFn, Width};
use crate::coll::CollKind;
use crate::dispatch::{flag_quick, in_place, run_blocking, CollSpec, Reduction, Side, TBlock};
use crate::mpi::error::MpiResult;
use crate::mpi::op as ops;
use crate::mpi_bail;
use crate::runtime::objects::{
    builtin_op, comm, nonnull, objects, CommObj, ExtraState, OpObj, UserOpFn,
};
use crate::runtime::request::{ReqKind, Request, Starter};
use crate::runtime::types::{self, DtypeObj};
use crate::runtime::{self, new_request};
use smallvec::SmallVec;
use std::os::raw::{c_int, c_void};
use std::sync::Arc;

/// Resolve (op, datatype) into a reduction; `commute` reports the op's commutativity.
fn reduction(op: MPI_Op, dth: MPI_Datatype, dt: &DtypeObj) -> MpiResult<(Reduction, bool)> {
    if op == c::MPI_OP_NULL {
        mpi_bail!(MPI_ERR_OP, "the operation is MPI_OP_NULL");
    }
    if let Some(b) = builtin_op(op) {
        let Some(e) = dt.desc.elem() else {
            mpi_bail!(MPI_ERR_TYPE, "a predefined operation needs a datatype made of one basic type (or a MINLOC/MAXLOC pair type)")
        };
        ops::check(b, e)?;
        return Ok((Reduction::Builtin(b, e), true));
    }
    let o = objects().ops.get(op as usize);
    match o {
        Some(o) => {
            if !dt.desc.is_contiguous(1) {
                mpi_bail!(
                    MPI_ERR_TYPE,
                    "user-defined operations on non-contiguous datatypes are not supported yet"
                );
            }
            let commute = o.commute;
            Ok((
                Reduction::User {
                    op: o,
                    dt: dth,
                    size: dt.size(),
                },
                commute,
            ))
        }
        None => mpi_bail!(
            MPI_ERR_OP,
            "invalid operation handle {:#x} (freed, or not an op)",
            op as usize
        ),
    }
}

/// How a collective call is completed.
#[derive(Clone, Copy)]
enum Mode {
    Blocking,
    Nonblocking(*mut MPI_Request),
    Persistent(*mut MPI_Request),
}

unsafe fn run(spec: CollSpec, mode: Mode) -> MpiResult<()> {
    match mode {
        Mode::Blocking => run_blocking(spec),
        Mode::Nonblocking(req) => {
            nonnull(req, "request")?;
            let k = crate::dispatch::start(&spec)?;
            super::p2p::submit_on(req, Some(&spec.comm), |_| Ok(k))
        }
        Mode::Persistent(req) => {
            nonnull(req, "request")?;
            let comm = spec.comm.clone();
            let starter: Starter =
                Box::new(move |_: &mut crate::engine::Engine| crate::dispatch::start(&spec));
            *req = runtime::with(|rt| {
                Ok(new_request(
                    rt,
                    Request {
                        kind: ReqKind::Inactive,
                        persistent: Some(starter),
                        comm: Some(comm),
                    },
                ))
            })? as MPI_Request;
            Ok(())
        }
    }
}

fn check_root(cm: &CommObj, root: c_int) -> MpiResult<usize> {
    if root < 0 || root as usize >= cm.size() {
        mpi_bail!(
            MPI_ERR_ROOT,
            "root {root} is not in a communicator of size {}",
            cm.size()
        );
    }
    Ok(root as usize)
}

fn counts<T: AsI64>(p: *const T, n: usize, what: &str) -> MpiResult<Vec<i64>> {
    // SAFETY: the caller passes n elements.
    unsafe { i64s(p, n, what) }
}

// ---- specs per collective ----

fn barrier_spec(cm: MPI_Comm) -> MpiResult<CollSpec> {
    Ok(CollSpec::new(CollKind::Barrier, comm(cm)?))
}

unsafe fn bcast_spec(
    buf: *mut c_void,
    count: i64,
    dt: MPI_Datatype,
    root: c_int,
    cm: MPI_Comm,
) -> MpiResult<CollSpec> {
    let mut s = CollSpec::new(CollKind::Bcast, comm(cm)?);
    let count = check_count(count)?;
    let dt = types::committed(dt)?;
    s.root = check_root(&s.comm, root)?;
    s.bytes = dt.desc.packed_size(count);
    s.recv = Some(Side::one(buf, count, &dt));
    s.recv_is_input = s.root == s.comm.rank;
    Ok(s)
}

unsafe fn reduce_like(
    kind: CollKind,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: i64,
    dth: MPI_Datatype,
    op: MPI_Op,
    root: Option<c_int>,
    cm: MPI_Comm,
) -> MpiResult<CollSpec> {
    let mut s = CollSpec::new(kind, comm(cm)?);
    let count = check_count(count)?;
    let dt = types::committed(dth)?;
    if let Some(r) = root {
        s.root = check_root(&s.comm, r)?;
    }
    s.red = Some(reduction(op, dth, &dt)?);
    s.bytes = dt.desc.packed_size(count);
    let i_am_root = root.is_none() || s.root == s.comm.rank;
    s.in_place = in_place(sendbuf) && i_am_root;
    if in_place(sendbuf) && !i_am_root {
        mpi_bail!(MPI_ERR_BUFFER, "MPI_IN_PLACE is only valid at the root");
    }
    if !s.in_place {
        s.send = Some(Side::one(sendbuf, count, &dt));
    }
    if i_am_root {
        s.recv = Some(Side::one(recvbuf, count, &dt));
        s.recv_is_input = s.in_place;
    }
    Ok(s)
}

unsafe fn gather_spec(
    sendbuf: *const c_void,
    sendcount: i64,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: i64,
    recvtype: MPI_Datatype,
    root: c_int,
    cm: MPI_Comm,
) -> MpiResult<CollSpec> {
    let comm = comm(cm)?;
    let mut s = CollSpec::new(CollKind::Gather, comm.clone());
    s.root = check_root(&comm, root)?;
    let me_root = s.root == comm.rank;
    s.in_place = in_place(sendbuf) && me_root;
    if me_root {
        let rt = types::committed(recvtype)?;
        let rc = check_count(recvcount)?;
        s.recv = Some(Side::regular(recvbuf, comm.size(), rc, &rt));
        s.recv_is_input = s.in_place;
        s.bytes = rt.desc.packed_size(rc);
    }
    if !s.in_place {
        let st = types::committed(sendtype)?;
        let sc = check_count(sendcount)?;
        s.send = Some(Side::one(sendbuf, sc, &st));
        s.bytes = st.desc.packed_size(sc);
    }
    Ok(s)
}

unsafe fn gatherv_spec(
    sendbuf: *const c_void,
    sendcount: i64,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: &[i64],
    displs: &[i64],
    recvtype: MPI_Datatype,
    root: c_int,
    cm: MPI_Comm,
) -> MpiResult<CollSpec> {
    let comm = comm(cm)?;
    let mut s = CollSpec::new(CollKind::Gatherv, comm.clone());
    s.root = check_root(&comm, root)?;
    let me_root = s.root == comm.rank;
    s.in_place = in_place(sendbuf) && me_root;
    if me_root {
        let rt = types::committed(recvtype)?;
        let side = Side::varying(recvbuf, recvcounts, displs, &rt)?;
        s.bytes = side.blocks[comm.rank]
            .dt
            .desc
            .packed_size(side.blocks[comm.rank].count);
        s.recv = Some(side);
        s.recv_is_input = s.in_place;
    }
    if !s.in_place {
        let st = types::committed(sendtype)?;
        let sc = check_count(sendcount)?;
        s.send = Some(Side::one(sendbuf, sc, &st));
        s.bytes = st.desc.packed_size(sc);
    }
    Ok(s)
}

unsafe fn scatter_spec(
    sendbuf: *const c_void,
    sendcount: i64,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: i64,
    recvtype: MPI_Datatype,
    root: c_int,
    cm: MPI_Comm,
) -> MpiResult<CollSpec> {
    let comm = comm(cm)?;
    let mut s = CollSpec::new(CollKind::Scatter, comm.clone());
    s.root = check_root(&comm, root)?;
    let me_root = s.root == comm.rank;
    s.in_place = in_place(recvbuf) && me_root;
    if me_root {
        let st = types::committed(sendtype)?;
        let sc = check_count(sendcount)?;
        s.send = Some(Side::regular(sendbuf, comm.size(), sc, &st));
        s.bytes = st.desc.packed_size(sc);
    }
    if !s.in_place {
        let rt = types::committed(recvtype)?;
        let rc = check_count(recvcount)?;
        s.recv = Some(Side::one(recvbuf, rc, &rt));
        s.bytes = rt.desc.packed_size(rc);
    }
    Ok(s)
}

unsafe fn scatterv_spec(
    sendbuf: *const c_void,
    sendcounts: &[i64],
    displs: &[i64],
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: i64,
    recvtype: MPI_Datatype,
    root: c_int,
    cm: MPI_Comm,
) -> MpiResult<CollSpec> {
    let comm = comm(cm)?;
    let mut s = CollSpec::new(CollKind::Scatterv, comm.clone());
    s.root = check_root(&comm, root)?;
    let me_root = s.root == comm.rank;
    s.in_place = in_place(recvbuf) && me_root;
    if me_root {
        let st = types::committed(sendtype)?;
        let side = Side::varying(sendbuf, sendcounts, displs, &st)?;
        s.bytes = side.blocks[comm.rank]
            .dt
            .desc
            .packed_size(side.blocks[comm.rank].count);
        s.send = Some(side);
    }
    if !s.in_place {
        let rt = types::committed(recvtype)?;
        let rc = check_count(recvcount)?;
        s.recv = Some(Side::one(recvbuf, rc, &rt));
        s.bytes = rt.desc.packed_size(rc);
    }
    Ok(s)
}

unsafe fn allgather_spec(
    sendbuf: *const c_void,
    sendcount: i64,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: i64,
    recvtype: MPI_Datatype,
    cm: MPI_Comm,
) -> MpiResult<CollSpec> {
    let comm = comm(cm)?;
    let mut s = CollSpec::new(CollKind::Allgather, comm.clone());
    let rt = types::committed(recvtype)?;
    let rc = check_count(recvcount)?;
    s.in_place = in_place(sendbuf);
    s.recv = Some(Side::regular(recvbuf, comm.size(), rc, &rt));
    s.recv_is_input = s.in_place;
    s.bytes = rt.desc.packed_size(rc);
    if !s.in_place {
        let st = types::committed(sendtype)?;
        let sc = check_count(sendcount)?;
        if st.desc.packed_size(sc) != s.bytes {
            mpi_bail!(
                MPI_ERR_TRUNCATE,
                "send block of {} bytes does not match the receive block of {} bytes",
                st.desc.packed_size(sc),
                s.bytes
            );
        }
        s.send = Some(Side::one(sendbuf, sc, &st));
    }
    Ok(s)
}

unsafe fn allgatherv_spec(
    sendbuf: *const c_void,
    sendcount: i64,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: &[i64],
    displs: &[i64],
    recvtype: MPI_Datatype,
    cm: MPI_Comm,
) -> MpiResult<CollSpec> {
    let comm = comm(cm)?;
    let mut s = CollSpec::new(CollKind::Allgatherv, comm.clone());
    let rt = types::committed(recvtype)?;
    s.in_place = in_place(sendbuf);
    let side = Side::varying(recvbuf, recvcounts, displs, &rt)?;
    s.bytes = side.blocks[comm.rank]
        .dt
        .desc
        .packed_size(side.blocks[comm.rank].count);
    s.recv = Some(side);
    s.recv_is_input = s.in_place;
    if !s.in_place {
        let st = types::committed(sendtype)?;
        let sc = check_count(sendcount)?;
        s.send = Some(Side::one(sendbuf, sc, &st));
    }
    Ok(s)
}

unsafe fn alltoall_spec(
    sendbuf: *const c_void,
    sendcount: i64,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: i64,
    recvtype: MPI_Datatype,
    cm: MPI_Comm,
) -> MpiResult<CollSpec> {
    let comm = comm(cm)?;
    let mut s = CollSpec::new(CollKind::Alltoall, comm.clone());
    let rt = types::committed(recvtype)?;
    let rc = check_count(recvcount)?;
    s.in_place = in_place(sendbuf);
    s.recv = Some(Side::regular(recvbuf, comm.size(), rc, &rt));
    s.recv_is_input = s.in_place;
    s.bytes = rt.desc.packed_size(rc);
    if !s.in_place {
        let st = types::committed(sendtype)?;
        let sc = check_count(sendcount)?;
        s.send = Some(Side::regular(sendbuf, comm.size(), sc, &st));
    }
    Ok(s)
}

unsafe fn alltoallv_spec(
    kind: CollKind,
    send: Option<Side>,
    recv: Side,
    cm: Arc<CommObj>,
) -> MpiResult<CollSpec> {
    let mut s = CollSpec::new(kind, cm);
    s.in_place = send.is_none();
    s.recv_is_input = s.in_place;
    s.send = send;
    s.recv = Some(recv);
    Ok(s)
}

unsafe fn reduce_scatter_spec(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcounts: &[i64],
    dth: MPI_Datatype,
    op: MPI_Op,
    cm: MPI_Comm,
) -> MpiResult<CollSpec> {
    let comm = comm(cm)?;
    let dt = types::committed(dth)?;
    let mut s = CollSpec::new(CollKind::ReduceScatter, comm.clone());
    s.red = Some(reduction(op, dth, &dt)?);
    let total: i64 = recvcounts.iter().sum();
    for &n in recvcounts {
        check_count(n)?;
    }
    s.rs_lens = Some(
        recvcounts
            .iter()
            .map(|&n| dt.desc.packed_size(n as usize))
            .collect(),
    );
    s.in_place = in_place(sendbuf);
    if s.in_place {
        // Input in recvbuf (the whole vector), result at its start.
        s.recv = Some(Side::one(recvbuf, total as usize, &dt));
        s.recv_is_input = true;
    } else {
        s.send = Some(Side::one(sendbuf, total as usize, &dt));
        s.recv = Some(Side::one(recvbuf, recvcounts[comm.rank] as usize, &dt));
    }
    Ok(s)
}

unsafe fn reduce_scatter_block_spec(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcount: i64,
    dth: MPI_Datatype,
    op: MPI_Op,
    cm: MPI_Comm,
) -> MpiResult<CollSpec> {
    let comm = comm(cm)?;
    let dt = types::committed(dth)?;
    let rc = check_count(recvcount)?;
    let mut s = CollSpec::new(CollKind::ReduceScatterBlock, comm.clone());
    s.red = Some(reduction(op, dth, &dt)?);
    s.bytes = dt.desc.packed_size(rc);
    s.in_place = in_place(sendbuf);
    if s.in_place {
        s.recv = Some(Side::one(recvbuf, rc * comm.size(), &dt));
        s.recv_is_input = true;
    } else {
        s.send = Some(Side::one(sendbuf, rc * comm.size(), &dt));
        s.recv = Some(Side::one(recvbuf, rc, &dt));
    }
    Ok(s)
}

// ---- the C entry points ----

/// The blocking, nonblocking and persistent entry points of one collective. `MPI_X<W>` makes
/// them generic over the count width ([`Width`]): the generated `MPI_X_c` forms call them too.
macro_rules! three_modes {
    // With a quick path for the blocking call (`flag_quick`), tried before building the spec.
    ($blocking:ident $(<$w:ident>)?, $nb:ident, $init:ident, ($($arg:ident: $ty:ty),*), $spec:expr, quick: $quick:expr) => {
        pub unsafe fn $blocking $(<$w: Width>)? ($($arg: $ty),*) -> MpiResult<()> {
            if $quick {
                return Ok(());
            }
            run($spec.checked()?, Mode::Blocking)
        }
        three_modes!(@rest $($w)?, $nb, $init, ($($arg: $ty),*), $spec);
    };
    ($blocking:ident $(<$w:ident>)?, $nb:ident, $init:ident, ($($arg:ident: $ty:ty),*), $spec:expr) => {
        pub unsafe fn $blocking $(<$w: Width>)? ($($arg: $ty),*) -> MpiResult<()> { run($spec.checked()?, Mode::Blocking) }
        three_modes!(@rest $($w)?, $nb, $init, ($($arg: $ty),*), $spec);
    };
    (@rest $($w:ident)?, $nb:ident, $init:ident, ($($arg:ident: $ty:ty),*), $spec:expr) => {
        pub unsafe fn $nb $(<$w: Width>)? ($($arg: $ty,)* request: *mut MPI_Request) -> MpiResult<()> { run($spec.checked()?, Mode::Nonblocking(request)) }
        pub unsafe fn $init $(<$w: Width>)? ($($arg: $ty,)* info: MPI_Info, request: *mut MPI_Request) -> MpiResult<()> {
            crate::runtime::objects::check_info(info)?;
            run($spec.checked()?, Mode::Persistent(request))
        }
    };
}

three_modes!(MPI_Barrier, MPI_Ibarrier, MPI_Barrier_init, (cm: MPI_Comm), barrier_spec(cm)?,
    quick: flag_quick(CollKind::Barrier, std::ptr::null(), std::ptr::null_mut(), 0, c::MPI_DATATYPE_NULL, c::MPI_OP_NULL, 0, cm)?);

three_modes!(MPI_Bcast<W>, MPI_Ibcast, MPI_Bcast_init,
    (buffer: *mut c_void, count: W::Count, datatype: MPI_Datatype, root: c_int, cm: MPI_Comm),
    bcast_spec(buffer, count.as_i64(), datatype, root, cm)?,
    quick: flag_quick(CollKind::Bcast, buffer, buffer, count.as_i64(), datatype, c::MPI_OP_NULL, root, cm)?);

three_modes!(MPI_Reduce<W>, MPI_Ireduce, MPI_Reduce_init,
    (sendbuf: *const c_void, recvbuf: *mut c_void, count: W::Count, datatype: MPI_Datatype, op: MPI_Op, root: c_int, cm: MPI_Comm),
    reduce_like(CollKind::Reduce, sendbuf, recvbuf, count.as_i64(), datatype, op, Some(root), cm)?,
    quick: flag_quick(CollKind::Reduce, sendbuf, recvbuf, count.as_i64(), datatype, op, root, cm)?);

three_modes!(MPI_Allreduce<W>, MPI_Iallreduce, MPI_Allreduce_init,
    (sendbuf: *const c_void, recvbuf: *mut c_void, count: W::Count, datatype: MPI_Datatype, op: MPI_Op, cm: MPI_Comm),
    reduce_like(CollKind::Allreduce, sendbuf, recvbuf, count.as_i64(), datatype, op, None, cm)?,
    quick: flag_quick(CollKind::Allreduce, sendbuf, recvbuf, count.as_i64(), datatype, op, 0, cm)?);

three_modes!(MPI_Scan<W>, MPI_Iscan, MPI_Scan_init,
    (sendbuf: *const c_void, recvbuf: *mut c_void, count: W::Count, datatype: MPI_Datatype, op: MPI_Op, cm: MPI_Comm),
    reduce_like(CollKind::Scan, sendbuf, recvbuf, count.as_i64(), datatype, op, None, cm)?);

three_modes!(MPI_Exscan<W>, MPI_Iexscan, MPI_Exscan_init,
    (sendbuf: *const c_void, recvbuf: *mut c_void, count: W::Count, datatype: MPI_Datatype, op: MPI_Op, cm: MPI_Comm),
    reduce_like(CollKind::Exscan, sendbuf, recvbuf, count.as_i64(), datatype, op, None, cm)?);

three_modes!(MPI_Gather<W>, MPI_Igather, MPI_Gather_init,
    (sendbuf: *const c_void, sendcount: W::Count, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: W::Count, recvtype: MPI_Datatype, root: c_int, cm: MPI_Comm),
    gather_spec(sendbuf, sendcount.as_i64(), sendtype, recvbuf, recvcount.as_i64(), recvtype, root, cm)?);

three_modes!(MPI_Scatter<W>, MPI_Iscatter, MPI_Scatter_init,
    (sendbuf: *const c_void, sendcount: W::Count, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: W::Count, recvtype: MPI_Datatype, root: c_int, cm: MPI_Comm),
    scatter_spec(sendbuf, sendcount.as_i64(), sendtype, recvbuf, recvcount.as_i64(), recvtype, root, cm)?);

three_modes!(MPI_Allgather<W>, MPI_Iallgather, MPI_Allgather_init,
    (sendbuf: *const c_void, sendcount: W::Count, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: W::Count, recvtype: MPI_Datatype, cm: MPI_Comm),
    allgather_spec(sendbuf, sendcount.as_i64(), sendtype, recvbuf, recvcount.as_i64(), recvtype, cm)?);

three_modes!(MPI_Alltoall<W>, MPI_Ialltoall, MPI_Alltoall_init,
    (sendbuf: *const c_void, sendcount: W::Count, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: W::Count, recvtype: MPI_Datatype, cm: MPI_Comm),
    alltoall_spec(sendbuf, sendcount.as_i64(), sendtype, recvbuf, recvcount.as_i64(), recvtype, cm)?);

three_modes!(MPI_Reduce_scatter_block<W>, MPI_Ireduce_scatter_block, MPI_Reduce_scatter_block_init,
    (sendbuf: *const c_void, recvbuf: *mut c_void, recvcount: W::Count, datatype: MPI_Datatype, op: MPI_Op, cm: MPI_Comm),
    reduce_scatter_block_spec(sendbuf, recvbuf, recvcount.as_i64(), datatype, op, cm)?);

fn size_of(cm: MPI_Comm) -> MpiResult<usize> {
    Ok(comm(cm)?.size())
}

/// Counts of the root's side of gatherv/scatterv (significant at the root only).
fn root_counts<C: AsI64>(
    cm: MPI_Comm,
    root: c_int,
    p: *const C,
    what: &str,
) -> MpiResult<Vec<i64>> {
    let cmo = comm(cm)?;
    let n = if check_root(&cmo, root)? == cmo.rank {
        cmo.size()
    } else {
        0
    };
    counts(p, n, what)
}

three_modes!(MPI_Gatherv<W>, MPI_Igatherv, MPI_Gatherv_init,
    (sendbuf: *const c_void, sendcount: W::Count, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const W::Count, displs: *const W::Disp, recvtype: MPI_Datatype, root: c_int, cm: MPI_Comm),
    gatherv_spec(sendbuf, sendcount.as_i64(), sendtype, recvbuf, &root_counts(cm, root, recvcounts, "recvcounts")?, &root_counts(cm, root, displs, "displs")?, recvtype, root, cm)?);

three_modes!(MPI_Scatterv<W>, MPI_Iscatterv, MPI_Scatterv_init,
    (sendbuf: *const c_void, sendcounts: *const W::Count, displs: *const W::Disp, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: W::Count, recvtype: MPI_Datatype, root: c_int, cm: MPI_Comm),
    scatterv_spec(sendbuf, &root_counts(cm, root, sendcounts, "sendcounts")?, &root_counts(cm, root, displs, "displs")?, sendtype, recvbuf, recvcount.as_i64(), recvtype, root, cm)?);

three_modes!(MPI_Allgatherv<W>, MPI_Iallgatherv, MPI_Allgatherv_init,
    (sendbuf: *const c_void, sendcount: W::Count, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const W::Count, displs: *const W::Disp, recvtype: MPI_Datatype, cm: MPI_Comm),
    allgatherv_spec(sendbuf, sendcount.as_i64(), sendtype, recvbuf, &counts(recvcounts, size_of(cm)?, "recvcounts")?, &counts(displs, size_of(cm)?, "displs")?, recvtype, cm)?);

unsafe fn alltoallv_args<C: AsI64, D: AsI64>(
    sendbuf: *const c_void,
    sendcounts: *const C,
    sdispls: *const D,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const C,
    rdispls: *const D,
    recvtype: MPI_Datatype,
    cm: MPI_Comm,
) -> MpiResult<CollSpec> {
    let cmo = comm(cm)?;
    let n = cmo.size();
    let rt = types::committed(recvtype)?;
    let recv = Side::varying(
        recvbuf,
        &counts(recvcounts, n, "recvcounts")?,
        &counts(rdispls, n, "rdispls")?,
        &rt,
    )?;
    let send = if in_place(sendbuf) {
        None
    } else {
        let st = types::committed(sendtype)?;
        Some(Side::varying(
            sendbuf,
            &counts(sendcounts, n, "sendcounts")?,
            &counts(sdispls, n, "sdispls")?,
            &st,
        )?)
    };
    alltoallv_spec(CollKind::Alltoallv, send, recv, cmo)
}

three_modes!(MPI_Alltoallv<W>, MPI_Ialltoallv, MPI_Alltoallv_init,
    (sendbuf: *const c_void, sendcounts: *const W::Count, sdispls: *const W::Disp, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const W::Count, rdispls: *const W::Disp, recvtype: MPI_Datatype, cm: MPI_Comm),
    alltoallv_args(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, cm)?);

unsafe fn w_side<C: AsI64, D: AsI64>(
    buf: *const c_void,
    cnts: *const C,
    displs: *const D,
    tys: *const MPI_Datatype,
    n: usize,
) -> MpiResult<Side> {
    let cnts = counts(cnts, n, "counts")?;
    let displs = counts(displs, n, "displs")?;
    let tys = slice(tys, n, "datatypes")?;
    let mut blocks = SmallVec::with_capacity(n);
    for i in 0..n {
        blocks.push(TBlock {
            disp: displs[i] as isize,
            count: check_count(cnts[i])?,
            dt: types::committed(tys[i])?,
        });
    }
    Ok(Side {
        base: buf as usize,
        blocks,
    })
}

unsafe fn alltoallw_args<C: AsI64, D: AsI64>(
    sendbuf: *const c_void,
    sendcounts: *const C,
    sdispls: *const D,
    sendtypes: *const MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const C,
    rdispls: *const D,
    recvtypes: *const MPI_Datatype,
    cm: MPI_Comm,
) -> MpiResult<CollSpec> {
    let cmo = comm(cm)?;
    let n = cmo.size();
    let recv = w_side(recvbuf, recvcounts, rdispls, recvtypes, n)?;
    let send = if in_place(sendbuf) {
        None
    } else {
        Some(w_side(sendbuf, sendcounts, sdispls, sendtypes, n)?)
    };
    alltoallv_spec(CollKind::Alltoallw, send, recv, cmo)
}

three_modes!(MPI_Alltoallw<W>, MPI_Ialltoallw, MPI_Alltoallw_init,
    (sendbuf: *const c_void, sendcounts: *const W::Count, sdispls: *const W::Disp, sendtypes: *const MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const W::Count, rdispls: *const W::Disp, recvtypes: *const MPI_Datatype, cm: MPI_Comm),
    alltoallw_args(sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, cm)?);

three_modes!(MPI_Reduce_scatter<W>, MPI_Ireduce_scatter, MPI_Reduce_scatter_init,
    (sendbuf: *const c_void, recvbuf: *mut c_void, recvcounts: *const W::Count, datatype: MPI_Datatype, op: MPI_Op, cm: MPI_Comm),
    reduce_scatter_spec(sendbuf, recvbuf, &counts(recvcounts, size_of(cm)?, "recvcounts")?, datatype, op, cm)?);

// ---- local reduction and user ops ----

pub unsafe fn MPI_Reduce_local<W: Width>(
    inbuf: *const c_void,
    inoutbuf: *mut c_void,
    count: W::Count,
    datatype: MPI_Datatype,
    op: MPI_Op,
) -> MpiResult<()> {
    reduce_local(inbuf, inoutbuf, check_count(count.as_i64())?, datatype, op)
}

/// MPI_Reduce_local on `n` elements.
unsafe fn reduce_local(
    inbuf: *const c_void,
    inoutbuf: *mut c_void,
    n: usize,
    datatype: MPI_Datatype,
    op: MPI_Op,
) -> MpiResult<()> {
    let dt = types::committed(datatype)?;
    let (red, _) = reduction(op, datatype, &dt)?;
    types::check_buf(inbuf, n, &dt, "inbuf")?;
    types::check_buf(inoutbuf, n, &dt, "inoutbuf")?;
    let bytes = dt.desc.packed_size(n);
    if bytes == 0 {
        return Ok(());
    }
    let (lo, _) = crate::gpu::layout::span(&dt.desc, n);
    let on_device = |p: *const c_void| crate::gpu::is_device((p as *const u8).wrapping_offset(lo));
    if on_device(inbuf) || on_device(inoutbuf as *const c_void) {
        if let (Reduction::Builtin(op, e), true) = (&red, dt.desc.is_contiguous(n)) {
            let off = dt.desc.true_lb();
            let i = (inbuf as *const u8).wrapping_offset(off);
            let o = (inoutbuf as *mut u8).wrapping_offset(off);
            if crate::gpu::stage::reduce_on_device(*op, *e, i, o, bytes)? {
                return Ok(());
            }
        }
        // Staged through the host: pack both (copies device memory), reduce, store back.
        let i = types::pack_all(inbuf, n, &dt)?;
        let mut o = types::pack_all(inoutbuf, n, &dt)?;
        red.apply(&i, &mut o)?;
        return types::unpack_all(&o, inoutbuf, n, &dt);
    }
    if dt.desc.is_contiguous(n) {
        let off = dt.desc.true_lb();
        let i = std::slice::from_raw_parts((inbuf as *const u8).wrapping_offset(off), bytes);
        let o = std::slice::from_raw_parts_mut((inoutbuf as *mut u8).wrapping_offset(off), bytes);
        return red.apply(i, o);
    }
    let i = types::pack_all(inbuf, n, &dt)?;
    let mut o = types::pack_all(inoutbuf, n, &dt)?;
    red.apply(&i, &mut o)?;
    dt.desc.unpack(n, &o, inoutbuf as *mut u8);
    Ok(())
}

pub unsafe fn MPI_Op_create<W: Width>(
    user_fn: Option<W::UserFn>,
    commute: c_int,
    op: *mut MPI_Op,
) -> MpiResult<()> {
    let Some(f) = user_fn else {
        mpi_bail!(MPI_ERR_ARG, "user_fn is NULL")
    };
    new_op(f.user_op(), commute, op)
}

/// MPICH's extension: `user_fn_x` gets the length and datatype by value, and `extra_state`;
/// `destructor_fn` (may be NULL) is called with `extra_state` once the op is freed and no pending
/// call uses it any more.
pub unsafe fn MPIX_Op_create_x(
    user_fn_x: Option<MPIX_User_function_x>,
    destructor_fn: Option<MPIX_Destructor_function>,
    commute: c_int,
    extra_state: *mut c_void,
    op: *mut MPI_Op,
) -> MpiResult<()> {
    let Some(f) = user_fn_x else {
        mpi_bail!(MPI_ERR_ARG, "user_fn_x is NULL")
    };
    // Checked before the state is owned: on an error no op exists, and no destructor runs.
    nonnull(op, "op")?;
    let st = ExtraState {
        extra: extra_state as usize,
        destructor: destructor_fn,
    };
    new_op(UserOpFn::X(f, st), commute, op)
}

unsafe fn new_op(func: UserOpFn, commute: c_int, op: *mut MPI_Op) -> MpiResult<()> {
    nonnull(op, "op")?;
    let h = objects().ops.insert(Arc::new(OpObj {
        func,
        commute: commute != 0,
    }));
    *op = h as MPI_Op;
    Ok(())
}

pub unsafe fn MPI_Op_free(op: *mut MPI_Op) -> MpiResult<()> {
    nonnull(op, "op")?;
    let h = *op as usize;
    if builtin_op(*op).is_some() {
        mpi_bail!(MPI_ERR_OP, "predefined operation {h:#x} cannot be freed");
    }
    // Dropped after the registry lock: the last reference runs an MPIX destructor.
    let Some(freed) = objects().ops.remove(h) else {
        mpi_bail!(MPI_ERR_OP, "invalid operation handle {h:#x}")
    };
    drop(freed);
    *op = c::MPI_OP_NULL;
    Ok(())
}

pub unsafe fn MPI_Op_commutative(op: MPI_Op, commute: *mut c_int) -> MpiResult<()> {
    if builtin_op(op).is_some() {
        return out(commute, "commute", 1);
    }
    let Some(o) = objects().ops.get(op as usize) else {
        mpi_bail!(MPI_ERR_OP, "invalid operation handle {:#x}", op as usize)
    };
    out(commute, "commute", o.commute as c_int)
}
