//! Attribute caching on communicators and datatypes (MPI 5.0 §7.7), and the
//! predefined attributes of MPI_COMM_WORLD (MPI_TAG_UB and friends).
//! Copy and delete callbacks run without any library lock held.

use crate::abi::consts as c;
use crate::abi::ffi::*;
use crate::mpi::error::{MpiError, MpiResult};
use crate::mpi_bail;
use crate::runtime::objects::{comm, nonnull, objects, CommObj, Keyval, ObjKind};
use crate::runtime::types::{dtype, DtypeObj};
use std::collections::BTreeMap;
use std::os::raw::{c_int, c_void};

type CopyFn =
    unsafe extern "C" fn(usize, c_int, *mut c_void, *mut c_void, *mut c_void, *mut c_int) -> c_int;
type DeleteFn = unsafe extern "C" fn(usize, c_int, *mut c_void, *mut c_void) -> c_int;

fn fn_value<F: Copy>(f: Option<F>) -> usize {
    // SAFETY: F is a function pointer type (same size as usize).
    f.map(|f| unsafe { std::mem::transmute_copy::<F, usize>(&f) })
        .unwrap_or(0)
}

fn create_keyval(kind: ObjKind, copy: usize, delete: usize, extra: *mut c_void) -> c_int {
    let mut o = objects();
    let k = o.next_keyval;
    o.next_keyval += 1;
    o.keyvals.insert(
        k,
        Keyval {
            kind,
            copy,
            delete,
            extra: extra as usize,
            freed: false,
            refs: 0,
        },
    );
    k
}

fn keyval(k: c_int, kind: ObjKind) -> MpiResult<(usize, usize, usize)> {
    let o = objects();
    match o.keyvals.get(&k) {
        // A freed keyval stays usable for attributes already attached (MPI 5.0 §7.7.2).
        Some(kv) if kv.kind == kind => Ok((kv.copy, kv.delete, kv.extra)),
        Some(kv) if kv.kind != kind => mpi_bail!(
            MPI_ERR_KEYVAL,
            "keyval {k} was created for another kind of object"
        ),
        _ => mpi_bail!(MPI_ERR_KEYVAL, "invalid keyval {k}"),
    }
}

fn free_keyval(k: *mut c_int, kind: ObjKind) -> MpiResult<()> {
    nonnull(k, "keyval")?;
    // SAFETY: checked non-null.
    let kv = unsafe { *k };
    keyval(kv, kind)?;
    objects().keyvals.get_mut(&kv).unwrap().freed = true;
    // SAFETY: as above.
    unsafe { *k = c::MPI_KEYVAL_INVALID };
    Ok(())
}

/// Call a delete callback for one attribute.
fn call_delete(handle: usize, k: c_int, delete: usize, val: usize, extra: usize) -> MpiResult<()> {
    if delete == 0 {
        return Ok(());
    }
    // SAFETY: the user registered this delete function for this kind of object.
    let f: DeleteFn = unsafe { std::mem::transmute(delete) };
    let rc = unsafe { f(handle, k, val as *mut c_void, extra as *mut c_void) };
    if rc != 0 {
        return Err(MpiError::new(
            rc,
            format!("the delete callback of keyval {k} failed"),
        ));
    }
    Ok(())
}

fn keyval_any(k: c_int) -> Option<(usize, usize, usize)> {
    objects()
        .keyvals
        .get(&k)
        .map(|kv| (kv.copy, kv.delete, kv.extra))
}

/// Copy attributes for MPI_Comm_dup / MPI_Type_dup: call each keyval's copy callback.
pub fn copy_attrs(
    old_handle: usize,
    attrs: &BTreeMap<i32, usize>,
) -> MpiResult<BTreeMap<i32, usize>> {
    let mut out = BTreeMap::new();
    for (&k, &v) in attrs {
        let Some((copy, _, extra)) = keyval_any(k) else {
            continue;
        };
        match copy {
            0 => {}
            1 => {
                out.insert(k, v);
            }
            f => {
                // SAFETY: the user registered this copy function.
                let f: CopyFn = unsafe { std::mem::transmute(f) };
                let mut newval: usize = 0;
                let mut flag: c_int = 0;
                let rc = unsafe {
                    f(
                        old_handle,
                        k,
                        extra as *mut c_void,
                        v as *mut c_void,
                        &mut newval as *mut usize as *mut c_void,
                        &mut flag,
                    )
                };
                if rc != 0 {
                    return Err(MpiError::new(
                        rc,
                        format!("the copy callback of keyval {k} failed"),
                    ));
                }
                if flag != 0 {
                    out.insert(k, newval);
                }
            }
        }
    }
    Ok(out)
}

/// Delete every attribute (MPI_Comm_free / MPI_Type_free), calling delete callbacks.
pub fn delete_all(handle: usize, attrs: BTreeMap<i32, usize>) -> MpiResult<()> {
    for (k, v) in attrs {
        if let Some((_, delete, extra)) = keyval_any(k) {
            call_delete(handle, k, delete, v, extra)?;
        }
    }
    Ok(())
}

pub fn delete_all_comm_attrs(h: MPI_Comm, cm: &CommObj) -> MpiResult<()> {
    let attrs = std::mem::take(&mut *cm.attrs.lock().unwrap());
    delete_all(h as usize, attrs)
}

pub fn delete_all_type_attrs(h: MPI_Datatype, d: &DtypeObj) -> MpiResult<()> {
    let attrs = std::mem::take(&mut *d.attrs.lock().unwrap());
    delete_all(h as usize, attrs)
}

// ---- communicators ----

pub unsafe fn MPI_Comm_create_keyval(
    copy_fn: Option<
        unsafe extern "C" fn(
            MPI_Comm,
            c_int,
            *mut c_void,
            *mut c_void,
            *mut c_void,
            *mut c_int,
        ) -> c_int,
    >,
    delete_fn: Option<unsafe extern "C" fn(MPI_Comm, c_int, *mut c_void, *mut c_void) -> c_int>,
    comm_keyval: *mut c_int,
    extra_state: *mut c_void,
) -> MpiResult<()> {
    nonnull(comm_keyval, "comm_keyval")?;
    *comm_keyval = create_keyval(
        ObjKind::Comm,
        fn_value(copy_fn),
        fn_value(delete_fn),
        extra_state,
    );
    Ok(())
}

pub unsafe fn MPI_Comm_free_keyval(comm_keyval: *mut c_int) -> MpiResult<()> {
    free_keyval(comm_keyval, ObjKind::Comm)
}

pub unsafe fn MPI_Comm_set_attr(
    cm: MPI_Comm,
    k: c_int,
    attribute_val: *mut c_void,
) -> MpiResult<()> {
    let o = comm(cm)?;
    if predefined_attr(k).is_some() {
        mpi_bail!(MPI_ERR_KEYVAL, "keyval {k} is predefined and read-only");
    }
    let (_, delete, extra) = keyval(k, ObjKind::Comm)?;
    let old = o.attrs.lock().unwrap().insert(k, attribute_val as usize);
    if let Some(v) = old {
        call_delete(cm as usize, k, delete, v, extra)?;
    }
    Ok(())
}

/// Storage for the values of the predefined attributes (they are returned by address).
static PREDEF: [std::sync::atomic::AtomicI32; 8] =
    [const { std::sync::atomic::AtomicI32::new(0) }; 8];

fn predefined_attr(k: c_int) -> Option<usize> {
    match k {
        _ if k == c::MPI_TAG_UB => Some(0),
        _ if k == c::MPI_HOST => Some(1),
        _ if k == c::MPI_IO => Some(2),
        _ if k == c::MPI_WTIME_IS_GLOBAL => Some(3),
        _ if k == c::MPI_UNIVERSE_SIZE => Some(4),
        _ if k == c::MPI_APPNUM => Some(5),
        _ if k == c::MPI_LASTUSEDCODE => Some(6),
        _ => None,
    }
}

pub unsafe fn MPI_Comm_get_attr(
    cm: MPI_Comm,
    k: c_int,
    attribute_val: *mut c_void,
    flag: *mut c_int,
) -> MpiResult<()> {
    let o = comm(cm)?;
    nonnull(flag, "flag")?;
    nonnull(attribute_val, "attribute_val")?;
    if let Some(slot) = predefined_attr(k) {
        use std::sync::atomic::Ordering::Relaxed;
        let world = crate::runtime::world_size()? as i32;
        let value = match slot {
            0 => super::p2p::TAG_UB,
            1 => c::MPI_PROC_NULL,
            2 => c::MPI_ANY_SOURCE,
            3 => 0,
            4 => world,
            5 => 0,
            _ => super::errhandler::last_used_code(),
        };
        PREDEF[slot].store(value, Relaxed);
        *(attribute_val as *mut *mut c_int) = PREDEF[slot].as_ptr();
        *flag = 1;
        return Ok(());
    }
    keyval(k, ObjKind::Comm)?;
    match o.attrs.lock().unwrap().get(&k) {
        Some(&v) => {
            *(attribute_val as *mut usize) = v;
            *flag = 1;
        }
        None => *flag = 0,
    }
    Ok(())
}

pub unsafe fn MPI_Comm_delete_attr(cm: MPI_Comm, k: c_int) -> MpiResult<()> {
    let o = comm(cm)?;
    let (_, delete, extra) = keyval(k, ObjKind::Comm)?;
    let Some(v) = o.attrs.lock().unwrap().remove(&k) else {
        mpi_bail!(MPI_ERR_KEYVAL, "no attribute is set for keyval {k}")
    };
    call_delete(cm as usize, k, delete, v, extra)
}

// ---- datatypes ----

pub unsafe fn MPI_Type_create_keyval(
    copy_fn: Option<
        unsafe extern "C" fn(
            MPI_Datatype,
            c_int,
            *mut c_void,
            *mut c_void,
            *mut c_void,
            *mut c_int,
        ) -> c_int,
    >,
    delete_fn: Option<unsafe extern "C" fn(MPI_Datatype, c_int, *mut c_void, *mut c_void) -> c_int>,
    type_keyval: *mut c_int,
    extra_state: *mut c_void,
) -> MpiResult<()> {
    nonnull(type_keyval, "type_keyval")?;
    *type_keyval = create_keyval(
        ObjKind::Type,
        fn_value(copy_fn),
        fn_value(delete_fn),
        extra_state,
    );
    Ok(())
}

pub unsafe fn MPI_Type_free_keyval(type_keyval: *mut c_int) -> MpiResult<()> {
    free_keyval(type_keyval, ObjKind::Type)
}

pub unsafe fn MPI_Type_set_attr(
    datatype: MPI_Datatype,
    k: c_int,
    attribute_val: *mut c_void,
) -> MpiResult<()> {
    let d = dtype(datatype)?;
    let (_, delete, extra) = keyval(k, ObjKind::Type)?;
    let old = d.attrs.lock().unwrap().insert(k, attribute_val as usize);
    if let Some(v) = old {
        call_delete(datatype as usize, k, delete, v, extra)?;
    }
    Ok(())
}

pub unsafe fn MPI_Type_get_attr(
    datatype: MPI_Datatype,
    k: c_int,
    attribute_val: *mut c_void,
    flag: *mut c_int,
) -> MpiResult<()> {
    let d = dtype(datatype)?;
    nonnull(flag, "flag")?;
    keyval(k, ObjKind::Type)?;
    match d.attrs.lock().unwrap().get(&k) {
        Some(&v) => {
            *(attribute_val as *mut usize) = v;
            *flag = 1;
        }
        None => *flag = 0,
    }
    Ok(())
}

pub unsafe fn MPI_Type_delete_attr(datatype: MPI_Datatype, k: c_int) -> MpiResult<()> {
    let d = dtype(datatype)?;
    let (_, delete, extra) = keyval(k, ObjKind::Type)?;
    let Some(v) = d.attrs.lock().unwrap().remove(&k) else {
        mpi_bail!(MPI_ERR_KEYVAL, "no attribute is set for keyval {k}")
    };
    call_delete(datatype as usize, k, delete, v, extra)
}
