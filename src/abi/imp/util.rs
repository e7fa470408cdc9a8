//! Small helpers shared by the implementations: C strings and argument checks.

use crate::mpi::error::MpiResult;
use crate::mpi_bail;
use crate::runtime::objects::nonnull;
use std::ffi::CStr;
use std::os::raw::{c_char, c_int};

/// Copy `s` into a C buffer of `cap` bytes (NUL-terminated, truncated), storing the length in `*len`.
pub unsafe fn write_cstr(s: &str, buf: *mut c_char, cap: usize, len: *mut c_int) -> MpiResult<()> {
    nonnull(buf, "the string buffer")?;
    let bytes = s.as_bytes();
    let n = bytes.len().min(cap.saturating_sub(1));
    // SAFETY: the caller gives a buffer of at least `cap` bytes (the standard's MPI_MAX_* size).
    std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf as *mut u8, n);
    *buf.add(n) = 0;
    if !len.is_null() {
        *len = n as c_int;
    }
    Ok(())
}

/// Read a C string argument.
pub unsafe fn read_cstr<'a>(p: *const c_char, what: &str) -> MpiResult<&'a str> {
    nonnull(p, what)?;
    // SAFETY: the caller passes a NUL-terminated string.
    match CStr::from_ptr(p).to_str() {
        Ok(s) => Ok(s),
        Err(_) => mpi_bail!(MPI_ERR_ARG, "{what} is not valid UTF-8"),
    }
}

/// Store through an output pointer after checking it is not NULL.
pub unsafe fn out<T>(p: *mut T, what: &str, v: T) -> MpiResult<()> {
    nonnull(p, what)?;
    // SAFETY: checked non-null; the caller provides storage for one T.
    p.write(v);
    Ok(())
}

/// Read `n` elements of a C array argument (NULL allowed when n == 0).
pub unsafe fn slice<'a, T>(p: *const T, n: usize, what: &str) -> MpiResult<&'a [T]> {
    if n == 0 {
        return Ok(&[]);
    }
    nonnull(p, what)?;
    // SAFETY: the caller passes an array of at least n elements.
    Ok(std::slice::from_raw_parts(p, n))
}

pub fn nonneg(n: c_int, what: &str) -> MpiResult<usize> {
    if n < 0 {
        mpi_bail!(MPI_ERR_ARG, "{what} {n} is negative");
    }
    Ok(n as usize)
}

/// Integer types of count and displacement arguments (int, MPI_Count, MPI_Aint).
pub trait AsI64: Copy {
    fn as_i64(self) -> i64;
}
impl AsI64 for i32 {
    fn as_i64(self) -> i64 {
        self as i64
    }
}
impl AsI64 for i64 {
    fn as_i64(self) -> i64 {
        self
    }
}
impl AsI64 for isize {
    fn as_i64(self) -> i64 {
        self as i64
    }
}

/// Read an array of `n` counts or displacements (NULL allowed when n == 0).
pub unsafe fn i64s<T: AsI64>(p: *const T, n: usize, what: &str) -> MpiResult<Vec<i64>> {
    Ok(slice(p, n, what)?.iter().map(|x| x.as_i64()).collect())
}
