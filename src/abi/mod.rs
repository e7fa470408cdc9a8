//! The C ABI: every `#[no_mangle] extern "C"` function of the MPI-5.0
//! standard ABI (and its `PMPI_` twin). Wrappers are generated from
//! `mpi-abi/`; they validate, convert handles, catch panics and route errors
//! through the error handler of the object the call was made on.

pub use crate::standard::consts;
pub mod errh;
pub use crate::standard::ffi;
pub mod imp;
pub mod width;

use crate::mpi::error::{MpiError, MpiResult};
use ffi::*;
use std::os::raw::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The object whose error handler an error is raised on.
#[derive(Clone, Copy, Debug)]
pub enum ErrObj {
    None,
    Comm(MPI_Comm),
    Win(MPI_Win),
    File(MPI_File),
    Session(MPI_Session),
}

/// Run one MPI function body: catch panics (no panic crosses the C ABI), and
/// route an error through the error handler of `obj`, prefixed with `func`.
pub fn guard(func: &'static str, obj: ErrObj, body: impl FnOnce() -> MpiResult<()>) -> c_int {
    let r = {
        let _call = crate::gpu::CallScope::enter();
        catch_unwind(AssertUnwindSafe(body))
    };
    match r {
        Ok(Ok(())) => consts::MPI_SUCCESS,
        Ok(Err(e)) => raise(func, obj, e),
        Err(p) => raise(
            func,
            obj,
            MpiError::intern(format!("internal panic: {}", panic_text(&p))),
        ),
    }
}

/// Like [`guard`] for the few functions whose C return type is not `int`.
pub fn guard_value<T>(func: &'static str, default: T, body: impl FnOnce() -> T) -> T {
    let r = {
        let _call = crate::gpu::CallScope::enter();
        catch_unwind(AssertUnwindSafe(body))
    };
    match r {
        Ok(v) => v,
        Err(p) => {
            raise(
                func,
                ErrObj::None,
                MpiError::intern(format!("internal panic: {}", panic_text(&p))),
            );
            default
        }
    }
}

/// The body of every exported function outside the implemented subset.
pub fn unsupported(func: &'static str) -> c_int {
    raise(
        func,
        ErrObj::None,
        MpiError::new(
            consts::MPI_ERR_UNSUPPORTED_OPERATION,
            format!("{func} is not implemented by gpumpi"),
        ),
    )
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".into()
    }
}

/// Raise `err` from `func` on `obj`'s error handler and return the code to give back to the caller.
pub fn raise(func: &'static str, obj: ErrObj, err: MpiError) -> c_int {
    errh::raise(func, obj, err)
}
include!(concat!(env!("OUT_DIR"), "/wrappers.rs"));
