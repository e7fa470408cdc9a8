//! Initialization, finalization, environment inquiry (MPI 5.0 §11).

use super::util::*;
use crate::abi::consts as c;
use crate::abi::ffi::*;
use crate::mpi::error::MpiResult;
use crate::mpi_bail;
use crate::runtime::objects::{check_info, comm};
use crate::runtime::{self, state};
use std::os::raw::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering};

pub unsafe fn MPI_Init(_argc: *mut c_int, _argv: *mut *mut *mut c_char) -> MpiResult<()> {
    runtime::init(c::MPI_THREAD_SINGLE).map(|_| ())
}

pub unsafe fn MPI_Init_thread(
    _argc: *mut c_int,
    _argv: *mut *mut *mut c_char,
    required: c_int,
    provided: *mut c_int,
) -> MpiResult<()> {
    if ![
        c::MPI_THREAD_SINGLE,
        c::MPI_THREAD_FUNNELED,
        c::MPI_THREAD_SERIALIZED,
        c::MPI_THREAD_MULTIPLE,
    ]
    .contains(&required)
    {
        mpi_bail!(MPI_ERR_ARG, "required thread level {required} is not one of MPI_THREAD_SINGLE/FUNNELED/SERIALIZED/MULTIPLE");
    }
    crate::runtime::objects::nonnull(provided, "provided")?;
    let p = runtime::init(required)?;
    *provided = p;
    Ok(())
}

pub unsafe fn MPI_Initialized(flag: *mut c_int) -> MpiResult<()> {
    out(flag, "flag", state::is_initialized() as c_int)
}

pub unsafe fn MPI_Finalized(flag: *mut c_int) -> MpiResult<()> {
    out(flag, "flag", state::is_finalized() as c_int)
}

pub unsafe fn MPI_Finalize() -> MpiResult<()> {
    runtime::finalize(crate::dispatch::barrier_world)
}

pub unsafe fn MPI_Abort(cm: MPI_Comm, errorcode: c_int) -> MpiResult<()> {
    let name = match comm(cm) {
        Ok(c) => c.name.lock().unwrap().clone(),
        Err(_) => format!("{:#x}", cm as usize),
    };
    let code = if errorcode == 0 { 1 } else { errorcode & 0xff };
    let code = if code == 0 { 1 } else { code };
    runtime::abort(code, &format!("MPI_Abort({name}, {errorcode}) called"))
}

pub unsafe fn MPI_Query_thread(provided: *mut c_int) -> MpiResult<()> {
    let p = runtime::with(|rt| Ok(rt.thread_level))?;
    out(provided, "provided", p)
}

pub unsafe fn MPI_Is_thread_main(flag: *mut c_int) -> MpiResult<()> {
    let f = runtime::with(|rt| Ok(rt.main_thread == std::thread::current().id()))?;
    out(flag, "flag", f as c_int)
}

/// `CLOCK_MONOTONIC` at the first `MPI_Wtime` of the process (ns; 0 until then).
static WTIME_EPOCH_NS: AtomicU64 = AtomicU64::new(0);

pub unsafe fn MPI_Wtime() -> f64 {
    // Seconds since the first call: monotonic; offset by 1 s so it is never 0. Read straight
    // from the clock: timing loops call this around every operation.
    let now = crate::sys::clock_ns(libc::CLOCK_MONOTONIC);
    let mut epoch = WTIME_EPOCH_NS.load(Ordering::Relaxed);
    if epoch == 0 {
        epoch = match WTIME_EPOCH_NS.compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed)
        {
            Ok(_) => now,
            Err(first) => first,
        };
    }
    1.0 + now.saturating_sub(epoch) as f64 * 1e-9
}

pub unsafe fn MPI_Wtick() -> f64 {
    1e-9
}

pub unsafe fn MPI_Get_version(version: *mut c_int, subversion: *mut c_int) -> MpiResult<()> {
    out(version, "version", 5)?;
    out(subversion, "subversion", 0)
}

pub const LIBRARY_VERSION: &str = concat!(
    "gpumpi ",
    env!("CARGO_PKG_VERSION"),
    " (MPI 5.0, standard ABI 1.0)"
);

pub unsafe fn MPI_Get_library_version(
    version: *mut c_char,
    resultlen: *mut c_int,
) -> MpiResult<()> {
    write_cstr(LIBRARY_VERSION, version, 8192, resultlen)
}

/// The MPI standard ABI version this library implements (MPI_Abi_get_version).
pub const ABI_VERSION: (c_int, c_int) = (1, 0);

pub unsafe fn MPI_Abi_get_version(abi_major: *mut c_int, abi_minor: *mut c_int) -> MpiResult<()> {
    out(abi_major, "abi_major", ABI_VERSION.0)?;
    out(abi_minor, "abi_minor", ABI_VERSION.1)
}

/// The node's name: the host name, or `GPUMPI_NODE_ID` where that names the node (set by
/// mpirun for jobs across hosts, or to emulate several nodes on one host), so that ranks with
/// the same processor name are the ranks of one `MPI_COMM_TYPE_SHARED` node.
pub unsafe fn MPI_Get_processor_name(name: *mut c_char, resultlen: *mut c_int) -> MpiResult<()> {
    write_cstr(&crate::bootstrap::node::node_name(), name, 256, resultlen)
}

pub unsafe fn MPI_Alloc_mem(size: MPI_Aint, info: MPI_Info, baseptr: *mut c_void) -> MpiResult<()> {
    if size < 0 {
        mpi_bail!(MPI_ERR_SIZE, "size {size} is negative");
    }
    check_info(info)?;
    crate::runtime::objects::nonnull(baseptr, "baseptr")?;
    // SAFETY: plain allocation; at least one byte so a zero-size request still gets a unique pointer.
    let p = libc::malloc((size as usize).max(1));
    if p.is_null() {
        mpi_bail!(MPI_ERR_NO_MEM, "cannot allocate {size} bytes");
    }
    *(baseptr as *mut *mut c_void) = p;
    Ok(())
}

pub unsafe fn MPI_Free_mem(base: *mut c_void) -> MpiResult<()> {
    // SAFETY: base came from MPI_Alloc_mem (malloc) or is NULL.
    libc::free(base);
    Ok(())
}

pub unsafe fn MPI_Pcontrol(_level: c_int) -> MpiResult<()> {
    Ok(())
}

pub unsafe fn MPI_Comm_rank(cm: MPI_Comm, rank: *mut c_int) -> MpiResult<()> {
    let r = comm(cm)?.rank;
    out(rank, "rank", r as c_int)
}

pub unsafe fn MPI_Comm_size(cm: MPI_Comm, size: *mut c_int) -> MpiResult<()> {
    let s = comm(cm)?.size();
    out(size, "size", s as c_int)
}

/// MPI_Abi_get_info: sizes of the ABI's integer types, as an info object the caller frees.
pub unsafe fn MPI_Abi_get_info(info: *mut MPI_Info) -> MpiResult<()> {
    crate::runtime::objects::nonnull(info, "info")?;
    let kv = [
        ("mpi_aint_size", std::mem::size_of::<MPI_Aint>()),
        ("mpi_count_size", std::mem::size_of::<MPI_Count>()),
        ("mpi_offset_size", std::mem::size_of::<MPI_Offset>()),
    ];
    let v = kv
        .iter()
        .map(|(k, n)| (k.to_string(), n.to_string()))
        .collect();
    *info = crate::runtime::objects::objects()
        .infos
        .insert(std::sync::Arc::new(std::sync::Mutex::new(v))) as MPI_Info;
    Ok(())
}

/// MPI_Get_hw_resource_info (MPI 4.1): the hardware resource types gpumpi knows, as an info
/// object the caller frees: the shared-memory domain (one node), the level
/// MPI_Comm_split_type splits by.
pub unsafe fn MPI_Get_hw_resource_info(hw_info: *mut MPI_Info) -> MpiResult<()> {
    crate::runtime::objects::nonnull(hw_info, "hw_info")?;
    runtime::with(|_| Ok(()))?;
    let v = vec![(
        "mpi_hw_resource_type".to_string(),
        "mpi_shared_memory".to_string(),
    )];
    *hw_info = crate::runtime::objects::objects()
        .infos
        .insert(std::sync::Arc::new(std::sync::Mutex::new(v))) as MPI_Info;
    Ok(())
}

/// What a Fortran layer told the library with MPI_Abi_set_fortran_info / _booleans
/// (gpumpi has no Fortran bindings of its own: it only keeps and returns them).
struct FortranInfo {
    info: Vec<(String, String)>,
    /// (logical_size, true bytes, false bytes)
    booleans: Vec<(usize, Vec<u8>, Vec<u8>)>,
}

static FORTRAN: std::sync::Mutex<FortranInfo> = std::sync::Mutex::new(FortranInfo {
    info: Vec::new(),
    booleans: Vec::new(),
});

/// MPI_Abi_get_fortran_info: the Fortran types gpumpi's datatypes describe (`mpi_X_size` of
/// LOGICAL, INTEGER, REAL, DOUBLE PRECISION; `mpi_X_supported` of each sized Fortran type),
/// overridden by what MPI_Abi_set_fortran_info set, as an info object the caller frees.
pub unsafe fn MPI_Abi_get_fortran_info(info: *mut MPI_Info) -> MpiResult<()> {
    crate::runtime::objects::nonnull(info, "info")?;
    let size = |t: MPI_Datatype| crate::runtime::types::dtype(t).map(|d| d.size()).ok();
    let mut v: Vec<(String, String)> = Vec::new();
    for (name, t) in [
        ("logical", c::MPI_LOGICAL),
        ("integer", c::MPI_INTEGER),
        ("real", c::MPI_REAL),
        ("double_precision", c::MPI_DOUBLE_PRECISION),
    ] {
        if let Some(n) = size(t) {
            v.push((format!("mpi_{name}_size"), n.to_string()));
        }
    }
    for (name, t) in [
        ("logical1", c::MPI_LOGICAL1),
        ("logical2", c::MPI_LOGICAL2),
        ("logical4", c::MPI_LOGICAL4),
        ("logical8", c::MPI_LOGICAL8),
        ("logical16", c::MPI_LOGICAL16),
        ("integer1", c::MPI_INTEGER1),
        ("integer2", c::MPI_INTEGER2),
        ("integer4", c::MPI_INTEGER4),
        ("integer8", c::MPI_INTEGER8),
        ("integer16", c::MPI_INTEGER16),
        ("real2", c::MPI_REAL2),
        ("real4", c::MPI_REAL4),
        ("real8", c::MPI_REAL8),
        ("real16", c::MPI_REAL16),
        ("complex4", c::MPI_COMPLEX4),
        ("complex8", c::MPI_COMPLEX8),
        ("complex16", c::MPI_COMPLEX16),
        ("complex32", c::MPI_COMPLEX32),
        ("double_complex", c::MPI_DOUBLE_COMPLEX),
    ] {
        let ok = size(t).is_some_and(|n| n > 0);
        v.push((format!("mpi_{name}_supported"), ok.to_string()));
    }
    for (k, val) in FORTRAN.lock().unwrap().info.iter() {
        v.retain(|e| e.0 != *k);
        v.push((k.clone(), val.clone()));
    }
    *info = crate::runtime::objects::objects()
        .infos
        .insert(std::sync::Arc::new(std::sync::Mutex::new(v))) as MPI_Info;
    Ok(())
}

pub unsafe fn MPI_Abi_set_fortran_info(info: MPI_Info) -> MpiResult<()> {
    let v = crate::runtime::objects::info_obj(info)?
        .lock()
        .unwrap()
        .clone();
    let mut f = FORTRAN.lock().unwrap();
    for (k, val) in v {
        f.info.retain(|e| e.0 != k);
        f.info.push((k, val));
    }
    Ok(())
}

fn logical_size(n: c_int) -> MpiResult<usize> {
    if !(1..=16).contains(&n) {
        mpi_bail!(MPI_ERR_ARG, "logical_size {n} is not between 1 and 16");
    }
    Ok(n as usize)
}

pub unsafe fn MPI_Abi_set_fortran_booleans(
    logical_size_: c_int,
    logical_true: *mut c_void,
    logical_false: *mut c_void,
) -> MpiResult<()> {
    let n = logical_size(logical_size_)?;
    let t = slice(logical_true as *const u8, n, "logical_true")?.to_vec();
    let f = slice(logical_false as *const u8, n, "logical_false")?.to_vec();
    if t == f {
        mpi_bail!(
            MPI_ERR_ARG,
            "logical_true and logical_false are the same value"
        );
    }
    let mut fi = FORTRAN.lock().unwrap();
    fi.booleans.retain(|e| e.0 != n);
    fi.booleans.push((n, t, f));
    Ok(())
}

pub unsafe fn MPI_Abi_get_fortran_booleans(
    logical_size_: c_int,
    logical_true: *mut c_void,
    logical_false: *mut c_void,
    is_set: *mut c_int,
) -> MpiResult<()> {
    let n = logical_size(logical_size_)?;
    crate::runtime::objects::nonnull(is_set, "is_set")?;
    let fi = FORTRAN.lock().unwrap();
    match fi.booleans.iter().find(|e| e.0 == n) {
        Some((_, t, f)) => {
            crate::runtime::objects::nonnull(logical_true, "logical_true")?;
            crate::runtime::objects::nonnull(logical_false, "logical_false")?;
            std::ptr::copy_nonoverlapping(t.as_ptr(), logical_true as *mut u8, n);
            std::ptr::copy_nonoverlapping(f.as_ptr(), logical_false as *mut u8, n);
            *is_set = 1;
        }
        None => *is_set = 0,
    }
    Ok(())
}
