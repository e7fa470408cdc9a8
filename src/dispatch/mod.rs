//! Collective dispatch, below the C ABI: the ABI validates a call's arguments and describes it
//! ([`CollSpec`]); this module chooses the path that runs it.

mod call;
mod flag;
mod gpu;
mod internal;
mod schedule;

pub(crate) use call::{in_place, CollSpec, Reduction, Side, TBlock};
pub(crate) use flag::flag_quick;
pub(crate) use gpu::release_gpu;
pub use internal::{allgather_bytes, allreduce_band_u64, barrier_world};

use crate::mpi::error::{MpiError, MpiResult};
use flag::run_flag;
use gpu::try_gpu;

/// Run a blocking collective.
pub(crate) unsafe fn run_blocking(spec: CollSpec) -> MpiResult<()> {
    // GPU-native first, then the flag slots: each declines the same way on every rank.
    if try_gpu(&spec)? || run_flag(&spec)? {
        return Ok(());
    }
    let k = spec.start()?;
    let st = crate::abi::runtime::wait_kind(k)?;
    if st.error != 0 {
        return Err(MpiError::new(st.error, "collective failed"));
    }
    Ok(())
}
