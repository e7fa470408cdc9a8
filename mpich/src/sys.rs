//! The dynamic loader: finding and opening libmpi_abi.so.1 and resolving its symbols. Every
//! foreign call of the crate outside the forwarders' own calls is here.

use std::ffi::{CStr, CString};
use std::os::raw::c_void;

/// The standard-ABI library, opened `RTLD_LOCAL` so that its `MPI_` names never mix with this
/// library's MPICH-ABI names in the global scope.
pub struct Library(*mut c_void);

// SAFETY: a dlopen handle is a process-wide token; dlsym may be called from any thread.
unsafe impl Send for Library {}
// SAFETY: as above.
unsafe impl Sync for Library {}

/// The directory this library was loaded from (`dladdr` of one of its functions).
fn own_dir() -> Option<std::path::PathBuf> {
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the address and fills `info`; the function lives in this object.
    let ok = unsafe { libc::dladdr(own_dir as *const c_void, &mut info) };
    if ok == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dli_fname is a NUL-terminated path owned by the loader.
    let path = unsafe { CStr::from_ptr(info.dli_fname) }
        .to_string_lossy()
        .into_owned();
    let path = std::fs::canonicalize(&path).unwrap_or_else(|_| path.into());
    path.parent().map(|p| p.to_path_buf())
}

fn last_error() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated message of the loader.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown error".into()
    } else {
        // SAFETY: checked non-NULL above.
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

impl Library {
    /// Open `libmpi_abi.so.1` from this library's directory (the install's `lib/`), else by the
    /// loader's search path. The error names every place tried.
    pub fn open() -> Result<Library, String> {
        let mut tried = Vec::new();
        let mut candidates = Vec::new();
        if let Some(d) = own_dir() {
            candidates.push(d.join("libmpi_abi.so.1").to_string_lossy().into_owned());
        }
        candidates.push("libmpi_abi.so.1".into());
        for c in candidates {
            let name = CString::new(c.clone()).map_err(|e| e.to_string())?;
            // SAFETY: dlopen with a NUL-terminated name; the handle is kept for the process.
            let h = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
            if !h.is_null() {
                return Ok(Library(h));
            }
            tried.push(format!("{c}: {}", last_error()));
        }
        Err(format!(
            "cannot load libmpi_abi.so.1 ({})",
            tried.join("; ")
        ))
    }

    /// The address of `name` in libmpi_abi.so.1 (and its dependencies), never in this library.
    pub fn sym(&self, name: &str) -> Result<*mut c_void, String> {
        let cname = CString::new(name).map_err(|e| e.to_string())?;
        // SAFETY: a handle from dlopen and a NUL-terminated name.
        let p = unsafe { libc::dlsym(self.0, cname.as_ptr()) };
        if p.is_null() {
            Err(format!("libmpi_abi.so.1 has no symbol {name}"))
        } else {
            Ok(p)
        }
    }
}
