//! Error handlers: every error detected in an MPI call is raised here, on the
//! handler of the object the call was made on (MPI 5.0 §9.3). Predefined
//! handlers: ERRORS_ARE_FATAL (default) and ERRORS_ABORT print the message and
//! end the job; ERRORS_RETURN returns the code; user handlers are called with
//! the object and the code, then the code is returned.

use super::consts as c;
use super::ErrObj;
use crate::mpi::error::{MpiError, MpiResult};
use crate::mpi_bail;
use crate::runtime::objects::{self, CommObj, ErrhCall, ErrhObj, ObjKind};
use std::cell::RefCell;
use std::os::raw::c_int;
use std::sync::Arc;

thread_local! {
    /// The full text of the last error raised on this thread ("MPI_Send: MPI_ERR_RANK: ...").
    pub static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
    /// The communicator of a request whose completion failed in the current call (the Wait and
    /// Test families): the call's error is raised on its handler. Taken by the next raise.
    static REQUEST_COMM: RefCell<Option<Arc<CommObj>>> = const { RefCell::new(None) };
}

/// Note that a request made on `comm` completed with an error in the current call.
pub fn failed_request_on(comm: Option<Arc<CommObj>>) {
    REQUEST_COMM.with(|r| *r.borrow_mut() = comm);
}

/// Resolve an error handler handle.
pub fn lookup(h: usize) -> MpiResult<Option<Arc<ErrhObj>>> {
    if h == c::MPI_ERRORS_ARE_FATAL as usize
        || h == c::MPI_ERRORS_RETURN as usize
        || h == c::MPI_ERRORS_ABORT as usize
    {
        return Ok(None);
    }
    if h == c::MPI_ERRHANDLER_NULL as usize {
        mpi_bail!(
            MPI_ERR_ERRHANDLER,
            "the error handler is MPI_ERRHANDLER_NULL"
        );
    }
    match objects::objects().errhs.get(h) {
        Some(e) => Ok(Some(e)),
        None => mpi_bail!(MPI_ERR_ERRHANDLER, "invalid error handler handle {h:#x}"),
    }
}

/// Whether `code` is an error code: a predefined class, MPI_ERR_LASTCODE (clients enumerate
/// every `MPI_ERR_*` constant), or one added by MPI_Add_error_class or MPI_Add_error_code (and
/// not removed).
pub fn is_code(code: i32) -> bool {
    (0..=62).contains(&code)
        || code == c::MPI_ERR_LASTCODE
        || objects::objects().errors.codes.contains_key(&code)
}

/// Check an error code argument (MPI_Error_class, MPI_Error_string): anything else is
/// MPI_ERR_ARG.
pub fn check_code(code: i32) -> MpiResult<()> {
    if !is_code(code) {
        mpi_bail!(
            MPI_ERR_ARG,
            "{code} is not an error code (neither a predefined class nor one added by \
             MPI_Add_error_class or MPI_Add_error_code)"
        );
    }
    Ok(())
}

/// The error class of an error code (user codes from MPI_Add_error_code map to their class).
pub fn class_of(code: i32) -> i32 {
    if (0..=62).contains(&code) {
        return code;
    }
    objects::objects()
        .errors
        .codes
        .get(&code)
        .map(|e| e.0)
        .unwrap_or(code)
}

pub fn raise(func: &'static str, obj: ErrObj, err: MpiError) -> c_int {
    let text = format!("{func}: {err}");
    tracing::debug!("{text}");
    LAST_ERROR.with(|l| *l.borrow_mut() = text.clone());
    let code = err.class;
    let request_comm = REQUEST_COMM.with(|r| r.borrow_mut().take());
    // Which handler, and the handle to pass to a user handler.
    let (handler, handle) = match obj {
        // A failed request's completion: its communicator's handler.
        ErrObj::None if request_comm.is_some() => {
            let c = request_comm.unwrap();
            let handler = *c.errh.lock().unwrap_or_else(|e| e.into_inner());
            (handler, objects::comm_handle(&c))
        }
        ErrObj::Comm(h) => match objects::comm(h) {
            Ok(cm) => (
                *cm.errh.lock().unwrap_or_else(|e| e.into_inner()),
                h as usize,
            ),
            // No communicator to raise it on (MPI_COMM_NULL, a freed or foreign handle).
            Err(_) => (self_handler(), c::MPI_COMM_SELF as usize),
        },
        // Files default to ERRORS_RETURN (MPI 5.0 §14.7); windows and sessions are not implemented
        // yet, so their errors are not tied to an existing object either.
        ErrObj::File(_) => (c::MPI_ERRORS_RETURN as usize, 0),
        ErrObj::Win(_) | ErrObj::Session(_) | ErrObj::None => {
            (self_handler(), c::MPI_COMM_SELF as usize)
        }
    };
    if handler == c::MPI_ERRORS_RETURN as usize {
        return code;
    }
    if handler == c::MPI_ERRORS_ARE_FATAL as usize || handler == c::MPI_ERRORS_ABORT as usize {
        crate::runtime::fatal(&text, code);
    }
    match lookup(handler) {
        // SAFETY: the user registered this handler for this kind of object, and `handle` is one.
        Ok(Some(e)) => unsafe { e.invoke(handle, code) },
        _ => crate::runtime::fatal(&text, code),
    }
}

/// The handler of MPI_COMM_SELF: errors not tied to an object are raised on it (MPI 4.0 §9.3).
fn self_handler() -> usize {
    let o = objects::objects();
    match &o.self_ {
        Some(w) => *w.errh.lock().unwrap_or_else(|e| e.into_inner()),
        None => c::MPI_ERRORS_ARE_FATAL as usize,
    }
}

/// Create a user error handler object (its function was checked for NULL by the caller).
pub fn create(kind: ObjKind, call: ErrhCall) -> usize {
    objects::objects()
        .errhs
        .insert(Arc::new(ErrhObj { kind, call }))
}

/// The standard's description of an error class.
pub fn class_string(class: i32) -> &'static str {
    match class {
        0 => "No error",
        1 => "Invalid buffer pointer",
        2 => "Invalid count argument",
        3 => "Invalid datatype argument",
        4 => "Invalid tag argument",
        5 => "Invalid communicator",
        6 => "Invalid rank",
        7 => "Invalid request (handle)",
        8 => "Invalid root",
        9 => "Invalid group",
        10 => "Invalid operation",
        11 => "Invalid topology",
        12 => "Invalid dimension argument",
        13 => "Invalid argument of some other kind",
        14 => "Unknown error",
        15 => "Message truncated on receive",
        16 => "Known error not in this list",
        17 => "Internal MPI (implementation) error",
        18 => "Pending request",
        19 => "Error code is in status",
        20 => "Permission denied",
        21 => "Error related to the amode passed to MPI_FILE_OPEN",
        22 => "Invalid assertion argument",
        23 => "Invalid file name",
        24 => "Invalid base passed to MPI_FREE_MEM",
        25 => "An error occurred in a user supplied data conversion function",
        26 => "Invalid displacement argument",
        27 => "Conversion functions could not be registered because a data representation identifier was already defined",
        28 => "File exists",
        29 => "File operation could not be completed, as the file is currently open by some process",
        30 => "Invalid file handle",
        31 => "Key longer than MPI_MAX_INFO_KEY",
        32 => "Invalid key passed to MPI_INFO_DELETE",
        33 => "Value longer than MPI_MAX_INFO_VAL",
        34 => "Invalid info argument",
        35 => "Other I/O error",
        36 => "Invalid keyval has been passed",
        37 => "Invalid locktype argument",
        38 => "Invalid service name passed to MPI_LOOKUP_NAME",
        39 => "MPI_ALLOC_MEM failed because memory is exhausted",
        40 => "Collective argument not identical on all processes",
        41 => "Not enough space",
        42 => "File does not exist",
        43 => "Invalid port name",
        44 => "Quota exceeded",
        45 => "Read-only file or file system",
        46 => "Memory cannot be attached",
        47 => "Conflicting accesses to window",
        48 => "Target memory is not part of the window",
        49 => "Memory cannot be shared",
        50 => "Wrong synchronization of RMA calls",
        51 => "Invalid service name passed to MPI_UNPUBLISH_NAME",
        52 => "Invalid size argument",
        53 => "Error in spawning processes",
        54 => "Unsupported datarep passed to MPI_FILE_SET_VIEW",
        55 => "Unsupported operation",
        56 => "Invalid window argument",
        57 => "Passed window has the wrong flavor for the called function",
        58 => "Operation failed because a peer process has aborted",
        59 => "Value is too large to store",
        60 => "Invalid session handle",
        61 => "Invalid error handler",
        62 => "Error in the MPI ABI (MPI_ERR_ABI)",
        _ => "Unknown error code",
    }
}
