//! The functions written by hand (build.rs leaves them out of the generated forwarders): those
//! whose arguments are callbacks, whose contents depend on other arguments, or whose answer is
//! the MPICH ABI's own.

use crate::gen::*;
use crate::rt::*;
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// MPI_F_STATUS_SIZE of the MPICH ABI: a Fortran status is the C status' 5 ints, in order.
const MPICH_F_STATUS_SIZE: usize = 5;

/// -1.-1: this library implements the MPICH ABI, not the standard ABI (MPICH's libmpi.so.12
/// answers the same).
#[no_mangle]
pub unsafe extern "C" fn PMPI_Abi_get_version(
    abi_major: *mut c_int,
    abi_minor: *mut c_int,
) -> c_int {
    guard_rc(|| {
        if abi_major.is_null() || abi_minor.is_null() {
            // The core names the NULL argument through the error handler.
            return err_from_std((core().MPI_Abi_get_version)(abi_major, abi_minor));
        }
        *abi_major = -1;
        *abi_minor = -1;
        0
    })
}
#[no_mangle]
pub unsafe extern "C" fn MPI_Abi_get_version(
    abi_major: *mut c_int,
    abi_minor: *mut c_int,
) -> c_int {
    PMPI_Abi_get_version(abi_major, abi_minor)
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Status_c2f(
    c_status: *const MpichStatus,
    f_status: *mut c_int,
) -> c_int {
    guard_rc(|| {
        if status_ignored(c_status) || f_status.is_null() {
            return err_from_std((core().MPI_Status_c2f)(
                std::ptr::null(),
                std::ptr::null_mut(),
            ));
        }
        std::ptr::copy_nonoverlapping(c_status as *const c_int, f_status, MPICH_F_STATUS_SIZE);
        0
    })
}
#[no_mangle]
pub unsafe extern "C" fn MPI_Status_c2f(
    c_status: *const MpichStatus,
    f_status: *mut c_int,
) -> c_int {
    PMPI_Status_c2f(c_status, f_status)
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Status_f2c(
    f_status: *const c_int,
    c_status: *mut MpichStatus,
) -> c_int {
    guard_rc(|| {
        if f_status.is_null() || status_ignored(c_status) {
            return err_from_std((core().MPI_Status_f2c)(
                std::ptr::null(),
                std::ptr::null_mut(),
            ));
        }
        std::ptr::copy_nonoverlapping(f_status, c_status as *mut c_int, MPICH_F_STATUS_SIZE);
        0
    })
}
#[no_mangle]
pub unsafe extern "C" fn MPI_Status_f2c(
    f_status: *const c_int,
    c_status: *mut MpichStatus,
) -> c_int {
    PMPI_Status_f2c(f_status, c_status)
}

/// The standard ABI's MPI_COMM_SELF (the error handler of calls tied to no object).
const STD_COMM_SELF: usize = 0x102;
/// The standard ABI's MPI_ERR_INTERN.
const STD_ERR_INTERN: c_int = 17;

/// Report an error of this library (not of the core) through MPI_COMM_SELF's error handler, as
/// the core does for calls tied to no object, and return its MPICH class.
unsafe fn raise_self(func: &str, std_code: c_int, msg: &str) -> c_int {
    eprintln!("gpumpi (libmpi.so.12): {func}: {msg}");
    (core().MPI_Comm_call_errhandler)(STD_COMM_SELF, std_code);
    err_from_std(std_code)
}

/// Export `f`'s MPI_ name as a call of its PMPI_ name.
macro_rules! mpi_twin {
    ($mpi:ident => $pmpi:ident ($($a:ident: $t:ty),*)) => {
        #[no_mangle]
        pub unsafe extern "C" fn $mpi($($a: $t),*) -> c_int {
            $pmpi($($a),*)
        }
    };
}

// ---- user reduction operations -------------------------------------------------------------
// The standard's MPI_User_function carries no state, so each user op gets a trampoline of its
// own from a fixed table: the trampoline reads its slot (the MPICH function), translates the
// datatype handle and calls it. A slot is taken by MPI_Op_create and given back by MPI_Op_free.

type MpichUserFn = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_int, *mut c_int);
type MpichUserFnC = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut i64, *mut c_int);

/// How many user ops may exist at once.
const OP_SLOTS: usize = 64;
static OP_FNS: [AtomicUsize; OP_SLOTS] = [const { AtomicUsize::new(0) }; OP_SLOTS];
/// (standard op handle, slot) of the live user ops.
static OP_OWNERS: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());

unsafe fn user_dt(datatype: *mut usize) -> c_int {
    if datatype.is_null() {
        return K_MPI_Datatype::MPICH_NULL;
    }
    h_out::<K_MPI_Datatype>(core(), *datatype).unwrap_or(K_MPI_Datatype::MPICH_NULL)
}

unsafe extern "C" fn op_tramp<const K: usize>(
    a: *mut c_void,
    b: *mut c_void,
    len: *mut c_int,
    dt: *mut usize,
) {
    let f = OP_FNS[K].load(Ordering::Acquire);
    if f != 0 {
        let mut d = user_dt(dt);
        // SAFETY: the slot holds the MPI_User_function given to MPI_Op_create.
        let f: MpichUserFn = std::mem::transmute::<usize, MpichUserFn>(f);
        f(a, b, len, &mut d);
    }
}

unsafe extern "C" fn op_tramp_c<const K: usize>(
    a: *mut c_void,
    b: *mut c_void,
    len: *mut i64,
    dt: *mut usize,
) {
    let f = OP_FNS[K].load(Ordering::Acquire);
    if f != 0 {
        let mut d = user_dt(dt);
        // SAFETY: the slot holds the MPI_User_function_c given to MPI_Op_create_c.
        let f: MpichUserFnC = std::mem::transmute::<usize, MpichUserFnC>(f);
        f(a, b, len, &mut d);
    }
}

macro_rules! table {
    ($f:ident; $($k:literal)*) => { [$($f::<$k> as *const () as usize),*] };
}
fn op_tramps(large: bool) -> [usize; OP_SLOTS] {
    if large {
        table!(op_tramp_c; 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
            32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63)
    } else {
        table!(op_tramp; 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
            32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63)
    }
}

unsafe fn op_create(func: &str, f: usize, large: bool, commute: c_int, op: *mut c_int) -> c_int {
    let c = core();
    let std_create = |t: usize, o: *mut usize| {
        if large {
            (c.MPI_Op_create_c)(t as *const c_void, commute, o)
        } else {
            (c.MPI_Op_create)(t as *const c_void, commute, o)
        }
    };
    if f == 0 || op.is_null() {
        // The core names the bad argument.
        return err_from_std(std_create(
            0,
            if op.is_null() {
                std::ptr::null_mut()
            } else {
                &mut 0
            },
        ));
    }
    let Some(k) = (0..OP_SLOTS).find(|&k| {
        OP_FNS[k]
            .compare_exchange(0, f, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }) else {
        return raise_self(
            func,
            STD_ERR_INTERN,
            &format!("more than {OP_SLOTS} user operations exist at once"),
        );
    };
    let mut h: usize = K_MPI_Op::STD_NULL;
    let rc = std_create(op_tramps(large)[k], &mut h);
    if rc != 0 {
        OP_FNS[k].store(0, Ordering::Release);
        return err_from_std(rc);
    }
    OP_OWNERS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((h, k));
    match h_out::<K_MPI_Op>(c, h) {
        Ok(v) => {
            *op = v;
            0
        }
        Err(e) => e,
    }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Op_create(
    user_fn: *const c_void,
    commute: c_int,
    op: *mut c_int,
) -> c_int {
    guard_rc(|| op_create("MPI_Op_create", user_fn as usize, false, commute, op))
}
mpi_twin!(MPI_Op_create => PMPI_Op_create(user_fn: *const c_void, commute: c_int, op: *mut c_int));

#[no_mangle]
pub unsafe extern "C" fn PMPI_Op_create_c(
    user_fn: *const c_void,
    commute: c_int,
    op: *mut c_int,
) -> c_int {
    guard_rc(|| op_create("MPI_Op_create_c", user_fn as usize, true, commute, op))
}
mpi_twin!(MPI_Op_create_c => PMPI_Op_create_c(user_fn: *const c_void, commute: c_int, op: *mut c_int));

#[no_mangle]
pub unsafe extern "C" fn PMPI_Op_free(op: *mut c_int) -> c_int {
    guard_rc(|| {
        let c = core();
        if op.is_null() {
            return err_from_std((c.MPI_Op_free)(std::ptr::null_mut()));
        }
        let mut h = h_in::<K_MPI_Op>(c, *op);
        let before = h;
        let rc = (c.MPI_Op_free)(&mut h);
        if rc == 0 {
            let mut owners = OP_OWNERS.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(i) = owners.iter().position(|&(o, _)| o == before) {
                let (_, k) = owners.swap_remove(i);
                OP_FNS[k].store(0, Ordering::Release);
            }
            *op = K_MPI_Op::MPICH_NULL;
        }
        err_from_std(rc)
    })
}
mpi_twin!(MPI_Op_free => PMPI_Op_free(op: *mut c_int));

// ---- attribute keyvals -----------------------------------------------------------------------
// The callbacks carry extra_state: the standard-ABI keyval gets a box holding the MPICH
// callbacks and the user's extra_state, and trampolines that translate the handle and keyval.
// A keyval's box lives as long as the process (attributes may outlive MPI_*_free_keyval).

type MpichCopyFn =
    unsafe extern "C" fn(c_int, c_int, *mut c_void, *mut c_void, *mut c_void, *mut c_int) -> c_int;
type MpichDeleteFn = unsafe extern "C" fn(c_int, c_int, *mut c_void, *mut c_void) -> c_int;

struct KeyvalState {
    copy: Option<MpichCopyFn>,
    delete: Option<MpichDeleteFn>,
    extra: *mut c_void,
}

/// MPICH's MPI_COMM_DUP_FN / MPI_TYPE_DUP_FN / MPI_WIN_DUP_FN (mpi.h names this symbol).
#[no_mangle]
pub unsafe extern "C" fn MPIR_Dup_fn(
    _oldcomm: c_int,
    _keyval: c_int,
    _extra_state: *mut c_void,
    attribute_val_in: *mut c_void,
    attribute_val_out: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    *(attribute_val_out as *mut *mut c_void) = attribute_val_in;
    *flag = 1;
    0
}

unsafe extern "C" fn copy_tramp<K: Kind>(
    obj: usize,
    keyval: c_int,
    extra: *mut c_void,
    vin: *mut c_void,
    vout: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    let st = &*(extra as *const KeyvalState);
    let Some(f) = st.copy else { return 0 };
    let o = h_out::<K>(core(), obj).unwrap_or(K::MPICH_NULL);
    error_to_std(f(o, keyval_from_std(keyval), st.extra, vin, vout, flag))
}

unsafe extern "C" fn delete_tramp<K: Kind>(
    obj: usize,
    keyval: c_int,
    val: *mut c_void,
    extra: *mut c_void,
) -> c_int {
    let st = &*(extra as *const KeyvalState);
    let Some(f) = st.delete else { return 0 };
    let o = h_out::<K>(core(), obj).unwrap_or(K::MPICH_NULL);
    error_to_std(f(o, keyval_from_std(keyval), val, st.extra))
}

unsafe fn create_keyval<K: Kind>(
    copy: *const c_void,
    delete: *const c_void,
    keyval: *mut c_int,
    extra: *mut c_void,
    std_create: unsafe extern "C" fn(
        *const c_void,
        *const c_void,
        *mut c_int,
        *mut c_void,
    ) -> c_int,
) -> c_int {
    // MPI_*_NULL_COPY_FN / NULL_DELETE_FN are NULL in both ABIs; MPI_*_DUP_FN is MPIR_Dup_fn here
    // and (fn*)1 in the standard ABI.
    let std_copy: *const c_void = if copy.is_null() {
        std::ptr::null()
    } else if copy as usize == MPIR_Dup_fn as *const () as usize {
        1 as *const c_void
    } else {
        copy_tramp::<K> as *const c_void
    };
    let std_delete: *const c_void = if delete.is_null() {
        std::ptr::null()
    } else {
        delete_tramp::<K> as *const c_void
    };
    let st = Box::into_raw(Box::new(KeyvalState {
        copy: (!copy.is_null()).then(|| std::mem::transmute::<*const c_void, MpichCopyFn>(copy)),
        delete: (!delete.is_null())
            .then(|| std::mem::transmute::<*const c_void, MpichDeleteFn>(delete)),
        extra,
    }));
    let mut k: c_int = 0;
    let rc = std_create(
        std_copy,
        std_delete,
        if keyval.is_null() {
            std::ptr::null_mut()
        } else {
            &mut k
        },
        st as *mut c_void,
    );
    if rc != 0 {
        drop(Box::from_raw(st));
    } else if !keyval.is_null() {
        *keyval = keyval_from_std(k);
    }
    err_from_std(rc)
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Comm_create_keyval(
    comm_copy_attr_fn: *const c_void,
    comm_delete_attr_fn: *const c_void,
    comm_keyval: *mut c_int,
    extra_state: *mut c_void,
) -> c_int {
    guard_rc(|| {
        create_keyval::<K_MPI_Comm>(
            comm_copy_attr_fn,
            comm_delete_attr_fn,
            comm_keyval,
            extra_state,
            core().MPI_Comm_create_keyval,
        )
    })
}
mpi_twin!(MPI_Comm_create_keyval => PMPI_Comm_create_keyval(a: *const c_void, b: *const c_void, k: *mut c_int, e: *mut c_void));

#[no_mangle]
pub unsafe extern "C" fn PMPI_Type_create_keyval(
    type_copy_attr_fn: *const c_void,
    type_delete_attr_fn: *const c_void,
    type_keyval: *mut c_int,
    extra_state: *mut c_void,
) -> c_int {
    guard_rc(|| {
        create_keyval::<K_MPI_Datatype>(
            type_copy_attr_fn,
            type_delete_attr_fn,
            type_keyval,
            extra_state,
            core().MPI_Type_create_keyval,
        )
    })
}
mpi_twin!(MPI_Type_create_keyval => PMPI_Type_create_keyval(a: *const c_void, b: *const c_void, k: *mut c_int, e: *mut c_void));

// ---- error handlers --------------------------------------------------------------------------
// MPI_Comm_errhandler_function carries no state either: a table of trampolines as for user ops.
// An error handler may stay attached to communicators after MPI_Errhandler_free, so its slot is
// kept for the life of the process.

type MpichErrhFn = unsafe extern "C" fn(*mut c_int, *mut c_int);
const ERRH_SLOTS: usize = 64;
static ERRH_FNS: [AtomicUsize; ERRH_SLOTS] = [const { AtomicUsize::new(0) }; ERRH_SLOTS];

unsafe extern "C" fn errh_tramp<const K: usize>(comm: *mut usize, code: *mut c_int) {
    let f = ERRH_FNS[K].load(Ordering::Acquire);
    if f == 0 || comm.is_null() || code.is_null() {
        return;
    }
    let mut c = h_out::<K_MPI_Comm>(core(), *comm).unwrap_or(K_MPI_Comm::MPICH_NULL);
    let mut e = err_from_std(*code);
    // SAFETY: the slot holds the MPI_Comm_errhandler_function given to MPI_Comm_create_errhandler.
    let f: MpichErrhFn = std::mem::transmute::<usize, MpichErrhFn>(f);
    f(&mut c, &mut e);
}

fn errh_tramps() -> [usize; ERRH_SLOTS] {
    table!(errh_tramp; 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
        32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63)
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Comm_create_errhandler(
    comm_errhandler_fn: *const c_void,
    errhandler: *mut c_int,
) -> c_int {
    guard_rc(|| {
        let c = core();
        let f = comm_errhandler_fn as usize;
        if f == 0 || errhandler.is_null() {
            let mut h = 0usize;
            return err_from_std((c.MPI_Comm_create_errhandler)(
                std::ptr::null(),
                if errhandler.is_null() {
                    std::ptr::null_mut()
                } else {
                    &mut h
                },
            ));
        }
        let Some(k) = (0..ERRH_SLOTS).find(|&k| {
            ERRH_FNS[k]
                .compare_exchange(0, f, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        }) else {
            return raise_self(
                "MPI_Comm_create_errhandler",
                STD_ERR_INTERN,
                &format!("more than {ERRH_SLOTS} error handlers created"),
            );
        };
        let mut h: usize = K_MPI_Errhandler::STD_NULL;
        let rc = (c.MPI_Comm_create_errhandler)(errh_tramps()[k] as *const c_void, &mut h);
        if rc != 0 {
            ERRH_FNS[k].store(0, Ordering::Release);
            return err_from_std(rc);
        }
        match h_out::<K_MPI_Errhandler>(c, h) {
            Ok(v) => {
                *errhandler = v;
                0
            }
            Err(e) => e,
        }
    })
}
mpi_twin!(MPI_Comm_create_errhandler => PMPI_Comm_create_errhandler(f: *const c_void, e: *mut c_int));

// ---- generalized requests ---------------------------------------------------------------------

type MpichQueryFn = unsafe extern "C" fn(*mut c_void, *mut MpichStatus) -> c_int;
type MpichFreeFn = unsafe extern "C" fn(*mut c_void) -> c_int;
type MpichCancelFn = unsafe extern "C" fn(*mut c_void, c_int) -> c_int;

struct GreqState {
    query: MpichQueryFn,
    free: MpichFreeFn,
    cancel: MpichCancelFn,
    extra: *mut c_void,
}

unsafe extern "C" fn greq_query(extra: *mut c_void, status: *mut StdStatus) -> c_int {
    let st = &*(extra as *const GreqState);
    let mut m = if status.is_null() {
        MpichStatus::default()
    } else {
        status_out(&*status)
    };
    let rc = (st.query)(st.extra, &mut m);
    if !status.is_null() {
        *status = status_to_std(&m);
    }
    error_to_std(rc)
}

unsafe extern "C" fn greq_free(extra: *mut c_void) -> c_int {
    let st = Box::from_raw(extra as *mut GreqState);
    error_to_std((st.free)(st.extra))
}

unsafe extern "C" fn greq_cancel(extra: *mut c_void, complete: c_int) -> c_int {
    let st = &*(extra as *const GreqState);
    error_to_std((st.cancel)(st.extra, complete))
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Grequest_start(
    query_fn: *const c_void,
    free_fn: *const c_void,
    cancel_fn: *const c_void,
    extra_state: *mut c_void,
    request: *mut c_int,
) -> c_int {
    guard_rc(|| {
        let c = core();
        if query_fn.is_null() || free_fn.is_null() || cancel_fn.is_null() || request.is_null() {
            let mut r = 0usize;
            let rp = if request.is_null() {
                std::ptr::null_mut()
            } else {
                &mut r as *mut usize
            };
            return err_from_std((c.MPI_Grequest_start)(
                query_fn,
                free_fn,
                cancel_fn,
                extra_state,
                rp,
            ));
        }
        let st = Box::into_raw(Box::new(GreqState {
            query: std::mem::transmute::<*const c_void, MpichQueryFn>(query_fn),
            free: std::mem::transmute::<*const c_void, MpichFreeFn>(free_fn),
            cancel: std::mem::transmute::<*const c_void, MpichCancelFn>(cancel_fn),
            extra: extra_state,
        }));
        let mut r: usize = K_MPI_Request::STD_NULL;
        let rc = (c.MPI_Grequest_start)(
            greq_query as *const c_void,
            greq_free as *const c_void,
            greq_cancel as *const c_void,
            st as *mut c_void,
            &mut r,
        );
        if rc != 0 {
            drop(Box::from_raw(st));
            return err_from_std(rc);
        }
        match h_out::<K_MPI_Request>(c, r) {
            Ok(v) => {
                *request = v;
                0
            }
            Err(e) => e,
        }
    })
}
mpi_twin!(MPI_Grequest_start => PMPI_Grequest_start(q: *const c_void, f: *const c_void, c: *const c_void, e: *mut c_void, r: *mut c_int));

// ---- data symbols of MPICH's mpi.h ---------------------------------------------------------------
// `extern int * const MPI_UNWEIGHTED, MPI_WEIGHTS_EMPTY` and `MPI_Fint *MPI_F_STATUS(ES)_IGNORE`:
// distinct addresses that mean "no weights" / "empty weights" / "ignore" when passed back.

/// A pointer exported as a C data symbol.
#[repr(transparent)]
pub struct Sentinel(*const c_int);
// SAFETY: the pointers are never written through; they are compared by address only.
unsafe impl Sync for Sentinel {}

static SENTINEL_STORAGE: [c_int; 4] = [0; 4];

#[no_mangle]
pub static MPI_UNWEIGHTED: Sentinel = Sentinel(&SENTINEL_STORAGE[0]);
#[no_mangle]
pub static MPI_WEIGHTS_EMPTY: Sentinel = Sentinel(&SENTINEL_STORAGE[1]);
#[no_mangle]
pub static MPI_F_STATUS_IGNORE: Sentinel = Sentinel(&SENTINEL_STORAGE[2]);
#[no_mangle]
pub static MPI_F_STATUSES_IGNORE: Sentinel = Sentinel(&SENTINEL_STORAGE[3]);
