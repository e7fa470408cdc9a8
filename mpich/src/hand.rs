//! The functions written by hand (build.rs leaves them out of the generated forwarders): those
//! whose arguments are callbacks, whose contents depend on other arguments, or whose answer is
//! the MPICH ABI's own.

use crate::gen::*;
use crate::rt::*;
use std::os::raw::{c_int, c_void};

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
// The standard's MPI_User_function carries no state, so every user op is created through the
// core's MPIX_Op_create_x: its extra state is the MPICH function (or, for MPIX_Op_create_x
// itself, a box with the user's function, destructor and extra state), and an adapter translates
// the datatype handle and calls it. No table: any number of ops may exist.

type MpichUserFn = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_int, *mut c_int);
type MpichUserFnC = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut i64, *mut c_int);
type MpichUserFnX = unsafe extern "C" fn(*mut c_void, *mut c_void, i64, c_int, *mut c_void);
type MpichDestructorFn = unsafe extern "C" fn(*mut c_void);
type MpichErrhFn = unsafe extern "C" fn(*mut c_int, *mut c_int);
type MpichErrhFnX = unsafe extern "C" fn(c_int, c_int, *mut c_void);

/// The MPICH handle of a datatype a user function receives.
unsafe fn user_dt(datatype: usize) -> c_int {
    h_out::<K_MPI_Datatype>(core(), datatype).unwrap_or(K_MPI_Datatype::MPICH_NULL)
}

/// The core's MPIX_User_function_x for an MPI_Op_create op: `extra` is the MPI_User_function.
/// Its `int` length is at most c_int::MAX, so longer vectors are handed over in pieces.
unsafe extern "C" fn op_adapter(
    a: *mut c_void,
    b: *mut c_void,
    len: i64,
    dt: usize,
    extra: *mut c_void,
) {
    // SAFETY: op_create stored an MPI_User_function as this op's extra state.
    let f = std::mem::transmute::<*mut c_void, MpichUserFn>(extra);
    let mut d = user_dt(dt);
    let step = c_int::MAX as i64;
    let (mut lb, mut extent) = (0i64, 0i64);
    if len > step {
        (core().MPI_Type_get_extent_c)(dt, &mut lb, &mut extent);
    }
    let mut k = 0i64;
    while k < len {
        let mut n = (len - k).min(step) as c_int;
        let off = (k * extent) as isize;
        f(
            a.wrapping_byte_offset(off),
            b.wrapping_byte_offset(off),
            &mut n,
            &mut d,
        );
        k += step;
    }
}

/// As [`op_adapter`] for an MPI_Op_create_c op (`extra` is the MPI_User_function_c).
unsafe extern "C" fn op_adapter_c(
    a: *mut c_void,
    b: *mut c_void,
    len: i64,
    dt: usize,
    extra: *mut c_void,
) {
    // SAFETY: op_create stored an MPI_User_function_c as this op's extra state.
    let f = std::mem::transmute::<*mut c_void, MpichUserFnC>(extra);
    let (mut n, mut d) = (len, user_dt(dt));
    f(a, b, &mut n, &mut d);
}

/// What an MPIX_*_x object of this library passes to the core as its extra state: the user's
/// function, destructor and extra state.
struct XState<F> {
    func: F,
    destructor: Option<MpichDestructorFn>,
    extra: *mut c_void,
}

impl<F> XState<F> {
    /// A box of the user's arguments (`func` not NULL), as the core's extra state.
    /// # Safety
    /// `func` is a function of type `F` (a function pointer type), `destructor` NULL or an
    /// MPIX_Destructor_function.
    unsafe fn boxed(
        func: *const c_void,
        destructor: *const c_void,
        extra: *mut c_void,
    ) -> *mut c_void {
        Box::into_raw(Box::new(XState {
            func: std::mem::transmute_copy::<*const c_void, F>(&func),
            destructor: (!destructor.is_null())
                .then(|| std::mem::transmute::<*const c_void, MpichDestructorFn>(destructor)),
            extra,
        })) as *mut c_void
    }
}

/// The core's destructor of an [`XState`]: the user's destructor, then the box.
unsafe extern "C" fn x_state_free<F>(p: *mut c_void) {
    let st = Box::from_raw(p as *mut XState<F>);
    if let Some(d) = st.destructor {
        d(st.extra);
    }
}

/// A standard-handle output for a call made only to report its error: NULL where the caller's
/// output is NULL, else `h`.
fn probe_out<T>(out: *mut T, h: &mut usize) -> *mut usize {
    if out.is_null() {
        std::ptr::null_mut()
    } else {
        h
    }
}

/// The result of a core call `rc` that created the object `h`: its MPICH handle stored in `out`.
unsafe fn created<K: Kind>(rc: c_int, h: usize, out: *mut c_int) -> c_int {
    if rc != 0 {
        return err_from_std(rc);
    }
    match h_out::<K>(core(), h) {
        Ok(v) => {
            *out = v;
            0
        }
        Err(e) => e,
    }
}

/// The core's MPIX_User_function_x for an MPIX_Op_create_x op of this library.
unsafe extern "C" fn op_adapter_x(
    a: *mut c_void,
    b: *mut c_void,
    len: i64,
    dt: usize,
    extra: *mut c_void,
) {
    let st = &*(extra as *const XState<MpichUserFnX>);
    (st.func)(a, b, len, user_dt(dt), st.extra);
}

/// Create an op in the core with `adapter` and `extra` (the user's function or an XState box
/// that `destructor` frees); `op` (not NULL) receives the MPICH handle.
unsafe fn op_create_x(
    adapter: *const c_void,
    destructor: *const c_void,
    commute: c_int,
    extra: *mut c_void,
    op: *mut c_int,
) -> c_int {
    let mut h: usize = K_MPI_Op::STD_NULL;
    let rc = (core().MPIX_Op_create_x)(adapter, destructor, commute, extra, &mut h);
    created::<K_MPI_Op>(rc, h, op)
}

unsafe fn op_create(f: *const c_void, large: bool, commute: c_int, op: *mut c_int) -> c_int {
    let c = core();
    if f.is_null() || op.is_null() {
        // The core names the call and the bad argument.
        let create = if large {
            c.MPI_Op_create_c
        } else {
            c.MPI_Op_create
        };
        let mut h = 0usize;
        return err_from_std(create(f, commute, probe_out(op, &mut h)));
    }
    let adapter = if large {
        op_adapter_c as *const c_void
    } else {
        op_adapter as *const c_void
    };
    op_create_x(adapter, std::ptr::null(), commute, f as *mut c_void, op)
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Op_create(
    user_fn: *const c_void,
    commute: c_int,
    op: *mut c_int,
) -> c_int {
    guard_rc(|| op_create(user_fn, false, commute, op))
}
mpi_twin!(MPI_Op_create => PMPI_Op_create(user_fn: *const c_void, commute: c_int, op: *mut c_int));

#[no_mangle]
pub unsafe extern "C" fn PMPI_Op_create_c(
    user_fn: *const c_void,
    commute: c_int,
    op: *mut c_int,
) -> c_int {
    guard_rc(|| op_create(user_fn, true, commute, op))
}
mpi_twin!(MPI_Op_create_c => PMPI_Op_create_c(user_fn: *const c_void, commute: c_int, op: *mut c_int));

/// MPICH's MPIX_Op_create_x: `user_fn_x` receives MPICH datatype handles; `destructor_fn` runs
/// when the core destroys the op (after MPI_Op_free and the last pending call using it).
#[no_mangle]
pub unsafe extern "C" fn PMPIX_Op_create_x(
    user_fn_x: *const c_void,
    destructor_fn: *const c_void,
    commute: c_int,
    extra_state: *mut c_void,
    op: *mut c_int,
) -> c_int {
    guard_rc(|| {
        if user_fn_x.is_null() || op.is_null() {
            let mut h = 0usize;
            let out = probe_out(op, &mut h);
            let create = core().MPIX_Op_create_x;
            return err_from_std(create(user_fn_x, destructor_fn, commute, extra_state, out));
        }
        let st = XState::<MpichUserFnX>::boxed(user_fn_x, destructor_fn, extra_state);
        let free = x_state_free::<MpichUserFnX> as *const c_void;
        let rc = op_create_x(op_adapter_x as *const c_void, free, commute, st, op);
        if rc != 0 {
            // Not created: the user's state stays the user's.
            drop(Box::from_raw(st as *mut XState<MpichUserFnX>));
        }
        rc
    })
}
mpi_twin!(MPIX_Op_create_x => PMPIX_Op_create_x(f: *const c_void, d: *const c_void, commute: c_int, e: *mut c_void, op: *mut c_int));

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
    } else if std::ptr::eq(copy, MPIR_Dup_fn as *const c_void) {
        std::ptr::without_provenance(1)
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
// As for user ops: every handler is created through the core's MPIX_Comm_create_errhandler_x,
// with the MPICH function (or an XState box) as extra state and an adapter that translates the
// communicator and the error code. The core keeps handlers until MPI_Finalize, where the
// destructors of MPIX_Comm_create_errhandler_x handlers run.

/// The core's MPIX_Comm_errhandler_function_x for an MPI_Comm_create_errhandler handler.
unsafe extern "C" fn errh_adapter(comm: usize, code: c_int, extra: *mut c_void) {
    // SAFETY: PMPI_Comm_create_errhandler stored an MPI_Comm_errhandler_function as extra state.
    let f = std::mem::transmute::<*mut c_void, MpichErrhFn>(extra);
    let mut c = h_out::<K_MPI_Comm>(core(), comm).unwrap_or(K_MPI_Comm::MPICH_NULL);
    let mut e = err_from_std(code);
    f(&mut c, &mut e);
}

/// The core's MPIX_Comm_errhandler_function_x for an MPIX_Comm_create_errhandler_x handler.
unsafe extern "C" fn errh_adapter_x(comm: usize, code: c_int, extra: *mut c_void) {
    let st = &*(extra as *const XState<MpichErrhFnX>);
    let c = h_out::<K_MPI_Comm>(core(), comm).unwrap_or(K_MPI_Comm::MPICH_NULL);
    (st.func)(c, err_from_std(code), st.extra);
}

/// Create a handler in the core (see [`op_create_x`]).
unsafe fn errh_create_x(
    adapter: *const c_void,
    destructor: *const c_void,
    extra: *mut c_void,
    errhandler: *mut c_int,
) -> c_int {
    let mut h: usize = K_MPI_Errhandler::STD_NULL;
    let rc = (core().MPIX_Comm_create_errhandler_x)(adapter, destructor, extra, &mut h);
    created::<K_MPI_Errhandler>(rc, h, errhandler)
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Comm_create_errhandler(
    comm_errhandler_fn: *const c_void,
    errhandler: *mut c_int,
) -> c_int {
    guard_rc(|| {
        if comm_errhandler_fn.is_null() || errhandler.is_null() {
            // The core names the call and the bad argument.
            let mut h = 0usize;
            let out = probe_out(errhandler, &mut h);
            return err_from_std((core().MPI_Comm_create_errhandler)(comm_errhandler_fn, out));
        }
        let extra = comm_errhandler_fn as *mut c_void;
        errh_create_x(
            errh_adapter as *const c_void,
            std::ptr::null(),
            extra,
            errhandler,
        )
    })
}
mpi_twin!(MPI_Comm_create_errhandler => PMPI_Comm_create_errhandler(f: *const c_void, e: *mut c_int));

/// MPICH's MPIX_Comm_create_errhandler_x: the handler receives MPICH handles and error codes.
#[no_mangle]
pub unsafe extern "C" fn PMPIX_Comm_create_errhandler_x(
    comm_errhandler_fn_x: *const c_void,
    destructor_fn: *const c_void,
    extra_state: *mut c_void,
    errhandler: *mut c_int,
) -> c_int {
    guard_rc(|| {
        if comm_errhandler_fn_x.is_null() || errhandler.is_null() {
            let mut h = 0usize;
            let out = probe_out(errhandler, &mut h);
            let create = core().MPIX_Comm_create_errhandler_x;
            return err_from_std(create(
                comm_errhandler_fn_x,
                destructor_fn,
                extra_state,
                out,
            ));
        }
        let st = XState::<MpichErrhFnX>::boxed(comm_errhandler_fn_x, destructor_fn, extra_state);
        let free = x_state_free::<MpichErrhFnX> as *const c_void;
        let rc = errh_create_x(errh_adapter_x as *const c_void, free, st, errhandler);
        if rc != 0 {
            drop(Box::from_raw(st as *mut XState<MpichErrhFnX>));
        }
        rc
    })
}
mpi_twin!(MPIX_Comm_create_errhandler_x => PMPIX_Comm_create_errhandler_x(f: *const c_void, d: *const c_void, e: *mut c_void, h: *mut c_int));

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
            let mut h = 0usize;
            let rp = probe_out(request, &mut h);
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
        }
        created::<K_MPI_Request>(rc, r, request)
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
