//! MPI_Info (MPI 5.0 §10): ordered key/value string lists.

use super::util::*;
use crate::abi::consts as c;
use crate::abi::ffi::*;
use crate::mpi::error::MpiResult;
use crate::mpi_bail;
use crate::runtime::objects::{info_obj, objects};
use std::os::raw::{c_char, c_int};
use std::sync::{Arc, Mutex};

const MAX_KEY: usize = 255;
const MAX_VAL: usize = 1023;

pub unsafe fn MPI_Info_create(info: *mut MPI_Info) -> MpiResult<()> {
    let h = objects().infos.insert(Arc::new(Mutex::new(Vec::new())));
    out(info, "info", h as MPI_Info)
}

pub unsafe fn MPI_Info_create_env(
    _argc: c_int,
    _argv: *mut *mut c_char,
    info: *mut MPI_Info,
) -> MpiResult<()> {
    MPI_Info_create(info)
}

fn key_ok(k: &str) -> MpiResult<()> {
    if k.is_empty() || k.len() > MAX_KEY {
        mpi_bail!(
            MPI_ERR_INFO_KEY,
            "info key {k:?} is empty or longer than {MAX_KEY} characters"
        );
    }
    Ok(())
}

pub unsafe fn MPI_Info_set(
    info: MPI_Info,
    key: *const c_char,
    value: *const c_char,
) -> MpiResult<()> {
    let i = info_obj(info)?;
    let k = read_cstr(key, "key")?;
    let v = read_cstr(value, "value")?;
    key_ok(k)?;
    if v.len() > MAX_VAL {
        mpi_bail!(
            MPI_ERR_INFO_VALUE,
            "info value for {k:?} is longer than {MAX_VAL} characters"
        );
    }
    let mut l = i.lock().unwrap();
    match l.iter_mut().find(|e| e.0 == k) {
        Some(e) => e.1 = v.to_string(),
        None => l.push((k.to_string(), v.to_string())),
    }
    Ok(())
}

pub unsafe fn MPI_Info_delete(info: MPI_Info, key: *const c_char) -> MpiResult<()> {
    let i = info_obj(info)?;
    let k = read_cstr(key, "key")?;
    key_ok(k)?;
    let mut l = i.lock().unwrap();
    match l.iter().position(|e| e.0 == k) {
        Some(p) => {
            l.remove(p);
            Ok(())
        }
        None => mpi_bail!(MPI_ERR_INFO_NOKEY, "info key {k:?} is not set"),
    }
}

fn lookup(info: MPI_Info, k: &str) -> MpiResult<Option<String>> {
    key_ok(k)?;
    Ok(info_obj(info)?
        .lock()
        .unwrap()
        .iter()
        .find(|e| e.0 == k)
        .map(|e| e.1.clone()))
}

pub unsafe fn MPI_Info_get(
    info: MPI_Info,
    key: *const c_char,
    valuelen: c_int,
    value: *mut c_char,
    flag: *mut c_int,
) -> MpiResult<()> {
    let k = read_cstr(key, "key")?;
    let cap = nonneg(valuelen, "valuelen")?;
    match lookup(info, k)? {
        Some(v) => {
            // valuelen excludes the terminating NUL (MPI 5.0 §10).
            write_cstr(&v, value, cap + 1, std::ptr::null_mut())?;
            out(flag, "flag", 1)
        }
        None => out(flag, "flag", 0),
    }
}

pub unsafe fn MPI_Info_get_string(
    info: MPI_Info,
    key: *const c_char,
    buflen: *mut c_int,
    value: *mut c_char,
    flag: *mut c_int,
) -> MpiResult<()> {
    let k = read_cstr(key, "key")?;
    crate::runtime::objects::nonnull(buflen, "buflen")?;
    match lookup(info, k)? {
        Some(v) => {
            let cap = (*buflen).max(0) as usize;
            if cap > 0 {
                write_cstr(&v, value, cap, std::ptr::null_mut())?;
            }
            *buflen = v.len() as c_int + 1;
            out(flag, "flag", 1)
        }
        None => out(flag, "flag", 0),
    }
}

pub unsafe fn MPI_Info_get_valuelen(
    info: MPI_Info,
    key: *const c_char,
    valuelen: *mut c_int,
    flag: *mut c_int,
) -> MpiResult<()> {
    let k = read_cstr(key, "key")?;
    match lookup(info, k)? {
        Some(v) => {
            out(valuelen, "valuelen", v.len() as c_int)?;
            out(flag, "flag", 1)
        }
        None => out(flag, "flag", 0),
    }
}

pub unsafe fn MPI_Info_get_nkeys(info: MPI_Info, nkeys: *mut c_int) -> MpiResult<()> {
    let n = info_obj(info)?.lock().unwrap().len();
    out(nkeys, "nkeys", n as c_int)
}

pub unsafe fn MPI_Info_get_nthkey(info: MPI_Info, n: c_int, key: *mut c_char) -> MpiResult<()> {
    let i = info_obj(info)?;
    let l = i.lock().unwrap();
    if n < 0 || n as usize >= l.len() {
        mpi_bail!(
            MPI_ERR_ARG,
            "key index {n} is out of range (the info object has {} keys)",
            l.len()
        );
    }
    write_cstr(&l[n as usize].0, key, MAX_KEY + 1, std::ptr::null_mut())
}

pub unsafe fn MPI_Info_dup(info: MPI_Info, newinfo: *mut MPI_Info) -> MpiResult<()> {
    let v = info_obj(info)?.lock().unwrap().clone();
    let h = objects().infos.insert(Arc::new(Mutex::new(v)));
    out(newinfo, "newinfo", h as MPI_Info)
}

pub unsafe fn MPI_Info_free(info: *mut MPI_Info) -> MpiResult<()> {
    crate::runtime::objects::nonnull(info, "info")?;
    let h = *info as usize;
    if h == c::MPI_INFO_ENV as usize || objects().infos.remove(h).is_none() {
        mpi_bail!(
            MPI_ERR_INFO,
            "invalid info handle {h:#x} (freed, predefined, or not an info object)"
        );
    }
    *info = c::MPI_INFO_NULL;
    Ok(())
}
