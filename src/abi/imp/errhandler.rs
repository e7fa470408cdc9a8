//! Error handlers and error codes/classes/strings (MPI 5.0 §9.3-9.5).

use super::util::*;
use crate::abi::consts as c;
use crate::abi::errh;
use crate::abi::ffi::*;
use crate::mpi::error::MpiResult;
use crate::mpi_bail;
use crate::runtime::objects::{
    self, comm, nonnull, objects, ErrhCall, ErrhFn, ExtraState, ObjKind,
};
use std::os::raw::{c_char, c_int, c_void};

type CommErrhFn = Option<unsafe extern "C" fn(*mut MPI_Comm, *mut c_int, ...)>;

pub unsafe fn MPI_Comm_create_errhandler(
    f: CommErrhFn,
    errhandler: *mut MPI_Errhandler,
) -> MpiResult<()> {
    // SAFETY: all errhandler function types take (pointer to handle, pointer to code, ...).
    let f: Option<ErrhFn> = std::mem::transmute(f);
    let Some(f) = f else {
        mpi_bail!(MPI_ERR_ARG, "comm_errhandler_fn is NULL")
    };
    nonnull(errhandler, "errhandler")?;
    *errhandler = errh::create(ObjKind::Comm, ErrhCall::Std(f)) as MPI_Errhandler;
    Ok(())
}

/// MPICH's extension: the handler gets the communicator and the code by value, and
/// `extra_state`; `destructor_fn` (may be NULL) is called with `extra_state` when the handler
/// object is destroyed, which is at `MPI_Finalize` (`objects::release_errhandlers`).
pub unsafe fn MPIX_Comm_create_errhandler_x(
    comm_errhandler_fn_x: Option<MPIX_Comm_errhandler_function_x>,
    destructor_fn: Option<MPIX_Destructor_function>,
    extra_state: *mut c_void,
    errhandler: *mut MPI_Errhandler,
) -> MpiResult<()> {
    let Some(f) = comm_errhandler_fn_x else {
        mpi_bail!(MPI_ERR_ARG, "comm_errhandler_fn_x is NULL")
    };
    nonnull(errhandler, "errhandler")?;
    let st = ExtraState {
        extra: extra_state as usize,
        destructor: destructor_fn,
    };
    *errhandler = errh::create(ObjKind::Comm, ErrhCall::X(f, st)) as MPI_Errhandler;
    Ok(())
}

pub unsafe fn MPI_Comm_set_errhandler(cm: MPI_Comm, e: MPI_Errhandler) -> MpiResult<()> {
    let cm = comm(cm)?;
    if let Some(o) = errh::lookup(e as usize)? {
        if o.kind != ObjKind::Comm {
            mpi_bail!(
                MPI_ERR_ARG,
                "the error handler was not created for communicators"
            );
        }
    }
    *cm.errh.lock().unwrap() = e as usize;
    Ok(())
}

pub unsafe fn MPI_Comm_get_errhandler(cm: MPI_Comm, e: *mut MPI_Errhandler) -> MpiResult<()> {
    let cm = comm(cm)?;
    let h = *cm.errh.lock().unwrap();
    out(e, "errhandler", h as MPI_Errhandler)
}

pub unsafe fn MPI_Errhandler_free(e: *mut MPI_Errhandler) -> MpiResult<()> {
    nonnull(e, "errhandler")?;
    let h = *e as usize;
    // Freeing a predefined handler is allowed and does nothing; user handlers stay valid while
    // communicators still refer to them (the communicator keeps the handle value), so the object
    // stays in the table until MPI_Finalize (objects::release_errhandlers), where the destructor
    // of an MPIX_Comm_create_errhandler_x handler runs.
    errh::lookup(h)?;
    *e = c::MPI_ERRHANDLER_NULL;
    Ok(())
}

pub unsafe fn MPI_Comm_call_errhandler(cm: MPI_Comm, errorcode: c_int) -> MpiResult<()> {
    comm(cm)?;
    let e = crate::mpi::error::MpiError::new(errorcode, "raised by MPI_Comm_call_errhandler");
    crate::abi::raise("MPI_Comm_call_errhandler", crate::abi::ErrObj::Comm(cm), e);
    Ok(())
}

pub unsafe fn MPI_Error_class(errorcode: c_int, errorclass: *mut c_int) -> MpiResult<()> {
    errh::check_code(errorcode)?;
    out(errorclass, "errorclass", errh::class_of(errorcode))
}

pub unsafe fn MPI_Error_string(
    errorcode: c_int,
    string: *mut c_char,
    resultlen: *mut c_int,
) -> MpiResult<()> {
    errh::check_code(errorcode)?;
    let text = {
        let o = objects();
        if let Some(s) = o.errors.strings.get(&errorcode) {
            s.clone()
        } else if let Some((_, s)) = o.errors.codes.get(&errorcode) {
            s.clone()
        } else {
            let name = crate::mpi::error::class_name(errorcode);
            format!("{name}: {}", errh::class_string(errorcode))
        }
    };
    write_cstr(&text, string, 512, resultlen)
}

pub unsafe fn MPI_Add_error_class(errorclass: *mut c_int) -> MpiResult<()> {
    let mut o = objects();
    let e = &mut o.errors;
    let code = c::MPI_ERR_LASTCODE + 1 + e.last;
    e.last += 1;
    e.codes.insert(code, (code, String::new()));
    drop(o);
    out(errorclass, "errorclass", code)
}

pub unsafe fn MPI_Add_error_code(errorclass: c_int, errorcode: *mut c_int) -> MpiResult<()> {
    let mut o = objects();
    let e = &mut o.errors;
    if !(0..=62).contains(&errorclass) && !e.codes.contains_key(&errorclass) {
        mpi_bail!(MPI_ERR_ARG, "error class {errorclass} does not exist");
    }
    let code = c::MPI_ERR_LASTCODE + 1 + e.last;
    e.last += 1;
    e.codes.insert(code, (errorclass, String::new()));
    drop(o);
    out(errorcode, "errorcode", code)
}

pub unsafe fn MPI_Add_error_string(errorcode: c_int, string: *const c_char) -> MpiResult<()> {
    let s = read_cstr(string, "string")?;
    let mut o = objects();
    if errorcode <= 62 {
        mpi_bail!(
            MPI_ERR_ARG,
            "error code {errorcode} is predefined; its string cannot be changed"
        );
    }
    if !o.errors.codes.contains_key(&errorcode) {
        mpi_bail!(
            MPI_ERR_ARG,
            "error code {errorcode} was not created by MPI_Add_error_code/class"
        );
    }
    o.errors.strings.insert(errorcode, s.to_string());
    Ok(())
}

/// MPI_Remove_error_class (MPI 4.1): a class made by MPI_Add_error_class with no codes left.
pub unsafe fn MPI_Remove_error_class(errorclass: c_int) -> MpiResult<()> {
    let mut o = objects();
    let e = &mut o.errors;
    if e.codes.get(&errorclass).map(|v| v.0) != Some(errorclass) {
        mpi_bail!(
            MPI_ERR_ARG,
            "error class {errorclass} was not created by MPI_Add_error_class"
        );
    }
    if e.codes
        .iter()
        .any(|(&code, v)| code != errorclass && v.0 == errorclass)
    {
        mpi_bail!(
            MPI_ERR_ARG,
            "error class {errorclass} still has error codes: remove them first"
        );
    }
    if e.strings.contains_key(&errorclass) {
        mpi_bail!(
            MPI_ERR_ARG,
            "error class {errorclass} still has a string: call MPI_Remove_error_string first"
        );
    }
    e.codes.remove(&errorclass);
    Ok(())
}

/// MPI_Remove_error_code (MPI 4.1): a code made by MPI_Add_error_code.
pub unsafe fn MPI_Remove_error_code(errorcode: c_int) -> MpiResult<()> {
    let mut o = objects();
    let e = &mut o.errors;
    match e.codes.get(&errorcode) {
        Some(v) if v.0 != errorcode => {}
        _ => mpi_bail!(
            MPI_ERR_ARG,
            "error code {errorcode} was not created by MPI_Add_error_code"
        ),
    }
    if e.strings.contains_key(&errorcode) {
        mpi_bail!(
            MPI_ERR_ARG,
            "error code {errorcode} still has a string: call MPI_Remove_error_string first"
        );
    }
    e.codes.remove(&errorcode);
    Ok(())
}

pub unsafe fn MPI_Remove_error_string(errorcode: c_int) -> MpiResult<()> {
    let mut o = objects();
    if !o.errors.codes.contains_key(&errorcode) {
        mpi_bail!(
            MPI_ERR_ARG,
            "error code {errorcode} was not created by MPI_Add_error_code/class"
        );
    }
    o.errors.strings.remove(&errorcode);
    Ok(())
}

/// The largest error code in use (for the MPI_LASTUSEDCODE attribute).
pub fn last_used_code() -> c_int {
    let o = objects::objects();
    c::MPI_ERR_LASTCODE + o.errors.last
}
