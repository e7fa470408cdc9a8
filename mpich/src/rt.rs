//! The runtime of the generated forwarders: the core's entry points, and the translation of
//! handles, statuses, error codes and buffer sentinels between the MPICH ABI and the standard ABI.
//!
//! Handles: a predefined MPICH handle maps to its standard value through the generated tables
//! (`Kind::to_std`/`from_std`). A user object's MPICH handle is `0xC000_0000 | i` where
//! `0x1000 + i` is the object's standard-ABI integer form (`MPI_X_toint`, which carries the
//! object's table index and 12 bits of its generation, so a freed handle is still detected):
//! MPICH marks its own object handles by the top two bits (`HANDLE_KIND_INDIRECT` = 3 is the
//! pattern used here), so a user handle can never equal a predefined MPICH value. An MPICH int
//! that is neither becomes a standard handle that names no object, which the core reports as an
//! invalid handle of the parameter's kind.

pub use crate::gen::Core;
use crate::gen::{
    error_from_std, error_to_std, rank_from_std, rank_to_std, tag_from_std, tag_to_std,
};
use crate::sys::Library;
use std::os::raw::{c_char, c_int, c_void};
use std::sync::OnceLock;

/// MPICH's `MPI_ERR_INTERN` (mpi.h).
pub const MPICH_ERR_INTERN: c_int = 16;

/// The standard ABI's `MPI_Status`: source, tag, error, then 5 ints the core owns (the byte count
/// in the first two, the cancelled flag in the third: gpumpi's `abi::request`).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq)]
pub struct StdStatus {
    pub source: c_int,
    pub tag: c_int,
    pub error: c_int,
    pub internal: [c_int; 5],
}

/// MPICH's `MPI_Status`: the count in `count_lo` and bits 1.. of `count_hi_and_cancelled`, the
/// cancelled flag in bit 0.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq)]
pub struct MpichStatus {
    pub count_lo: c_int,
    pub count_hi_and_cancelled: c_int,
    pub source: c_int,
    pub tag: c_int,
    pub error: c_int,
}

static CORE: OnceLock<Core> = OnceLock::new();

/// The standard-ABI entry points, resolved at the first call. A library that cannot be found
/// ends the process with a message naming where it was looked for: no MPI call can work then.
pub fn core() -> &'static Core {
    CORE.get_or_init(|| {
        let load = || -> Result<Core, String> {
            let lib: &'static Library = Box::leak(Box::new(Library::open()?));
            // SAFETY: every symbol is looked up by its own name in libmpi_abi.so.1, whose
            // functions have the standard-ABI signatures the generated Core declares.
            unsafe { Core::load(&mut |n| lib.sym(n)) }
        };
        load().unwrap_or_else(|e| {
            eprintln!("gpumpi (libmpi.so.12): {e}");
            std::process::abort()
        })
    })
}

/// A handle type's translation (generated per type).
pub trait Kind {
    const NAME: &'static str;
    const STD_NULL: usize;
    const MPICH_NULL: c_int;
    /// The standard value of a predefined MPICH handle.
    fn to_std(v: c_int) -> Option<usize>;
    /// The MPICH value of a predefined standard handle.
    fn from_std(h: usize) -> Option<c_int>;
    /// # Safety
    /// `c` holds the core's entry points.
    unsafe fn toint(c: &Core, h: usize) -> c_int;
    /// # Safety
    /// As for `toint`.
    unsafe fn fromint(c: &Core, i: c_int) -> usize;
}

const USER_BITS: u32 = 0xC000_0000;
const USER_MASK: u32 = 0x3fff_ffff;
/// The first standard-ABI integer form of a user object (gpumpi's `mpi::handles::to_int`).
const STD_INT_BASE: u32 = 0x1000;

/// The MPICH integer of a user object whose standard integer form is `i` (None: out of range).
pub fn user_to_mpich(i: c_int) -> Option<c_int> {
    let u = i as u32;
    (u >= STD_INT_BASE && u - STD_INT_BASE <= USER_MASK)
        .then(|| (USER_BITS | (u - STD_INT_BASE)) as c_int)
}

/// The standard integer form of an MPICH user handle (None: not one).
pub fn mpich_to_user(v: c_int) -> Option<c_int> {
    let u = v as u32;
    (u & USER_BITS == USER_BITS).then(|| ((u & USER_MASK) + STD_INT_BASE) as c_int)
}

/// The standard handle of MPICH handle `v`.
/// # Safety
/// `c` holds the core's entry points.
pub unsafe fn h_in<K: Kind>(c: &Core, v: c_int) -> usize {
    if let Some(h) = K::to_std(v) {
        return h;
    }
    // Neither predefined nor a user handle: an integer form that names no live object.
    K::fromint(c, mpich_to_user(v).unwrap_or(c_int::MAX))
}

/// The MPICH handle of standard handle `h`; Err(MPI_ERR_INTERN) for an object whose integer form
/// does not fit (more than 2^18 objects of one kind alive at once).
/// # Safety
/// `c` holds the core's entry points.
pub unsafe fn h_out<K: Kind>(c: &Core, h: usize) -> Result<c_int, c_int> {
    if let Some(v) = K::from_std(h) {
        return Ok(v);
    }
    let i = K::toint(c, h);
    user_to_mpich(i).ok_or_else(|| {
        eprintln!(
            "gpumpi (libmpi.so.12): {} handle {h:#x} (integer form {i:#x}) has no MPICH-ABI value",
            K::NAME
        );
        MPICH_ERR_INTERN
    })
}

/// The initial value of a handle output: no handle of any kind, so that a stored handle
/// (MPI_*_NULL included) is told apart from an output the call did not write.
pub const UNSET: usize = usize::MAX;

/// Record a translation error `e` unless the call already failed (its error is the one to report).
pub fn keep_err(rc: &mut c_int, e: c_int) {
    if *rc == 0 {
        *rc = e;
    }
}

/// A standard error code as MPICH's: the predefined classes by the table, codes added at run
/// time (above both ABIs' predefined classes) unchanged.
pub fn err_from_std(rc: c_int) -> c_int {
    error_from_std(rc)
}

/// MPI_STATUS_IGNORE / MPI_STATUSES_IGNORE ((MPI_Status*)1), or NULL.
pub fn status_ignored(p: *const MpichStatus) -> bool {
    p.is_null() || p as usize == 1
}

/// The standard form of an MPICH status (None when ignored).
/// # Safety
/// `p` is ignored or points to a status.
pub unsafe fn status_in(p: *const MpichStatus) -> Option<StdStatus> {
    if status_ignored(p) {
        return None;
    }
    Some(status_to_std(&*p))
}

pub fn status_to_std(s: &MpichStatus) -> StdStatus {
    let hi = (s.count_hi_and_cancelled as u32 >> 1) as u64;
    let count = (s.count_lo as u32 as u64) | (hi << 32);
    StdStatus {
        source: rank_to_std(s.source),
        tag: tag_to_std(s.tag),
        error: error_to_std(s.error),
        internal: [
            count as u32 as c_int,
            (count >> 32) as c_int,
            s.count_hi_and_cancelled & 1,
            0,
            0,
        ],
    }
}

/// The MPICH form of a standard status.
pub fn status_out(s: &StdStatus) -> MpichStatus {
    let count = (s.internal[0] as u32 as u64) | ((s.internal[1] as u32 as u64) << 32);
    let cancelled = u32::from(s.internal[2] != 0);
    MpichStatus {
        count_lo: count as u32 as c_int,
        count_hi_and_cancelled: ((((count >> 32) as u32) << 1) | cancelled) as c_int,
        source: rank_from_std(s.source),
        tag: tag_from_std(s.tag),
        error: err_from_std(s.error),
    }
}

/// MPI_IN_PLACE and MPI_BUFFER_AUTOMATIC ((void*)-1 and -2 in MPICH) as the standard ABI's
/// (void*)1 and (void*)2; any other address unchanged.
pub fn buf_in(p: *const c_void) -> *const c_void {
    match p as isize {
        -1 => std::ptr::without_provenance(1),
        -2 => std::ptr::without_provenance(2),
        _ => p,
    }
}

/// A returned buffer address: the standard ABI's MPI_BUFFER_AUTOMATIC ((void*)2) as MPICH's.
/// # Safety
/// `p` points to a pointer.
pub unsafe fn buf_out(p: *mut *mut c_void) {
    if *p as usize == 2 {
        *p = -2isize as *mut c_void;
    }
}

/// An array length from a count parameter (a negative count is the core's error to report:
/// nothing is read).
pub fn nlen(v: i64) -> usize {
    v.max(0) as usize
}

/// The size of a (translated) communicator, 0 when the handle is invalid.
/// # Safety
/// `c` holds the core's entry points.
pub unsafe fn comm_size(c: &Core, comm: usize) -> usize {
    let mut n: c_int = 0;
    if (c.MPI_Comm_size)(comm, &mut n) != 0 {
        return 0;
    }
    n.max(0) as usize
}

/// Copy the NUL-terminated `src` into `dst`, a buffer of `max` chars (MPICH's size for it),
/// truncating, and store the copied length in `*resultlen` when given.
/// # Safety
/// `dst` has room for `max` chars; `resultlen` is NULL or valid.
pub unsafe fn copy_str(src: &[c_char], dst: *mut c_char, max: usize, resultlen: *mut c_int) {
    let len = src
        .iter()
        .position(|&c| c == 0)
        .unwrap_or(src.len())
        .min(max.saturating_sub(1));
    std::ptr::copy_nonoverlapping(src.as_ptr(), dst, len);
    *dst.add(len) = 0;
    if !resultlen.is_null() {
        *resultlen = len as c_int;
    }
}

fn report_panic(p: Box<dyn std::any::Any + Send>) {
    let msg = p
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    eprintln!("gpumpi (libmpi.so.12): internal panic: {msg}");
}

/// Run a forwarder's body; a panic becomes MPI_ERR_INTERN (none crosses the C ABI).
pub fn guard_rc(f: impl FnOnce() -> c_int) -> c_int {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|p| {
        report_panic(p);
        MPICH_ERR_INTERN
    })
}

/// As [`guard_rc`] for a function whose result is a value: `default` on a panic.
pub fn guard_val<R>(default: R, f: impl FnOnce() -> R) -> R {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|p| {
        report_panic(p);
        default
    })
}

/// The answer of a function whose gpumpi handles have no MPICH form (MPIX_Stream): an error
/// code of class MPI_ERR_UNSUPPORTED_OPERATION whose string names the call, raised on
/// MPI_COMM_WORLD's error handler, as MPICH's code.
pub fn unavailable(name: &str) -> c_int {
    let c = core();
    let mut code: c_int = 0;
    // SAFETY: out-pointer to a local; the string is NUL-terminated and outlives the call.
    unsafe {
        // The standard ABI's MPI_ERR_UNSUPPORTED_OPERATION and MPI_COMM_WORLD.
        let class: c_int = 55;
        let world: usize = 0x101;
        if (c.MPI_Add_error_code)(class, &mut code) != 0 {
            return err_from_std(class);
        }
        let msg = std::ffi::CString::new(format!(
            "{name}: MPIX streams are not available through the MPICH ABI (libmpi.so.12); build the program against gpumpi's mpi.h and mpi-ext.h"
        ))
        .unwrap_or_default();
        (c.MPI_Add_error_string)(code, msg.as_ptr());
        (c.MPI_Comm_call_errhandler)(world, code);
    }
    err_from_std(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_round_trip() {
        let m = MpichStatus {
            count_lo: -5,
            count_hi_and_cancelled: (3 << 1) | 1,
            source: -2, // MPI_ANY_SOURCE
            tag: -1,    // MPI_ANY_TAG
            error: 19,  // MPI_ERR_REQUEST
        };
        let s = status_to_std(&m);
        assert_eq!(s.source, -1);
        assert_eq!(s.tag, -2);
        assert_eq!(s.error, 7);
        let count = (s.internal[0] as u32 as u64) | ((s.internal[1] as u64) << 32);
        assert_eq!(count, (3u64 << 32) | 0xffff_fffb);
        assert_eq!(s.internal[2], 1);
        assert_eq!(status_out(&s), m);
    }

    #[test]
    fn user_handles() {
        assert_eq!(user_to_mpich(0x1000), Some(0xC000_0000_u32 as c_int));
        assert_eq!(
            user_to_mpich(0x1000 + 0x2345),
            Some(0xC000_2345_u32 as c_int)
        );
        assert_eq!(
            mpich_to_user(0xC000_2345_u32 as c_int),
            Some(0x1000 + 0x2345)
        );
        assert_eq!(user_to_mpich(0x0fff), None);
        assert_eq!(user_to_mpich(0x4000_1000), None);
        // Predefined MPICH handles are never user handles.
        for v in [
            0x4400_0000_u32,
            0x8c00_0000,
            0x4c00_0405,
            0x0400_0000,
            0x5800_0003,
        ] {
            assert_eq!(mpich_to_user(v as c_int), None, "{v:#x}");
        }
    }

    #[test]
    fn sentinels() {
        assert_eq!(buf_in(-1isize as *const c_void) as usize, 1);
        assert_eq!(buf_in(-2isize as *const c_void) as usize, 2);
        assert_eq!(buf_in(0x1000 as *const c_void) as usize, 0x1000);
        assert!(status_ignored(std::ptr::without_provenance(1)));
        assert!(status_ignored(std::ptr::null()));
    }
}
