//! The library's own collectives (context-id agreement, split, finalize, the GPU paths' set-up),
//! on host memory: they never take the GPU paths, which use them.

use super::call::{CollSpec, Reduction, Side};
use super::{run_blocking, run_numbered};
use crate::coll::CollKind;
use crate::engine::collcheck::CallNo;
use crate::mpi::datatype::Elem;
use crate::mpi::error::MpiResult;
use crate::mpi::op::BuiltinOp;
use crate::runtime::objects::{comm, CommObj};
use crate::runtime::types;
use crate::standard::consts as c;
use std::os::raw::c_void;
use std::sync::Arc;

/// MPI_Barrier on MPI_COMM_WORLD (used by MPI_Finalize).
pub fn barrier_world() -> MpiResult<()> {
    // SAFETY: no user buffers.
    unsafe { run_blocking(CollSpec::new(CollKind::Barrier, comm(c::MPI_COMM_WORLD)?)) }
}

/// An allreduce of u64 words with bitwise AND over a communicator (context-id agreement).
pub fn allreduce_band_u64(cm: &Arc<CommObj>, words: &mut [u64]) -> MpiResult<()> {
    allreduce_band_u64_at(cm, words, None)
}

/// [`allreduce_band_u64`] as call number `no` (an internal collective of a GPU path; `None`:
/// the communicator's next call).
pub(super) fn allreduce_band_u64_at(
    cm: &Arc<CommObj>,
    words: &mut [u64],
    no: Option<CallNo>,
) -> MpiResult<()> {
    let dt = types::committed(c::MPI_UINT64_T)?;
    let mut s = CollSpec::new(CollKind::Allreduce, cm.clone());
    s.red = Some((
        Reduction::Builtin(
            BuiltinOp::Band,
            Elem::Basic(crate::mpi::datatype::Basic::Uint64),
        ),
        true,
    ));
    s.bytes = words.len() * 8;
    s.in_place = true;
    s.host_only = true;
    s.recv = Some(Side::one(
        words.as_mut_ptr() as *const c_void,
        words.len(),
        &dt,
    ));
    s.recv_is_input = true;
    // SAFETY: `words` outlives the blocking call.
    unsafe { run_maybe_numbered(s, no) }
}

/// Run `s` as call number `no`, or as the communicator's next call.
unsafe fn run_maybe_numbered(s: CollSpec, no: Option<CallNo>) -> MpiResult<()> {
    match no {
        Some(no) => run_numbered(&s, no),
        None => run_blocking(s),
    }
}

/// An allgather of fixed-size byte records over a communicator (split, create_group).
pub fn allgather_bytes(cm: &Arc<CommObj>, mine: &[u8]) -> MpiResult<Vec<u8>> {
    allgather_bytes_at(cm, mine, None)
}

/// [`allgather_bytes`] as call number `no` (as [`allreduce_band_u64_at`]).
pub(super) fn allgather_bytes_at(
    cm: &Arc<CommObj>,
    mine: &[u8],
    no: Option<CallNo>,
) -> MpiResult<Vec<u8>> {
    let n = mine.len();
    let mut out = vec![0u8; n * cm.size()];
    out[cm.rank * n..(cm.rank + 1) * n].copy_from_slice(mine);
    let dt = types::BYTE.clone();
    let mut s = CollSpec::new(CollKind::Allgather, cm.clone());
    s.bytes = n;
    s.in_place = true;
    s.host_only = true;
    s.recv = Some(Side::regular(
        out.as_mut_ptr() as *const c_void,
        cm.size(),
        n,
        &dt,
    ));
    s.recv_is_input = true;
    // SAFETY: `out` outlives the blocking call.
    unsafe { run_maybe_numbered(s, no)? };
    Ok(out)
}
