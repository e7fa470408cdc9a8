//! libpmix (PMIx v4/v5 client API), loaded with `dlopen` at run time so that libmpi_abi loads
//! and runs without it. All unsafe code touching libpmix lives here; [`Pmix`] is a safe
//! wrapper used by `bootstrap::pmix`.
//!
//! Struct layouts follow `pmix_common.h` of PMIx 4.x/5.x (checked against the 4.2.2 header with
//! `sizeof`/`offsetof`: `pmix_proc_t` 260 bytes with `rank` at 256, `pmix_value_t` 32 bytes with
//! `data` at 8, `pmix_info_t` 552 bytes with `flags` at 512 and `value` at 520). The unit tests
//! below pin those numbers.

use std::ffi::{c_char, c_int, c_void, CStr, CString};

pub const PMIX_MAX_NSLEN: usize = 255;
pub const PMIX_MAX_KEYLEN: usize = 511;
pub const PMIX_SUCCESS: c_int = 0;
pub const PMIX_RANK_WILDCARD: u32 = u32::MAX - 1;
/// `pmix_scope_t` PMIX_GLOBAL: share with local and remote processes.
pub const PMIX_GLOBAL: u8 = 3;

// pmix_data_type_t values.
pub const PMIX_BOOL: u16 = 1;
pub const PMIX_BYTE: u16 = 2;
pub const PMIX_STRING: u16 = 3;
pub const PMIX_SIZE: u16 = 4;
pub const PMIX_INT: u16 = 6;
pub const PMIX_INT8: u16 = 7;
pub const PMIX_INT16: u16 = 8;
pub const PMIX_INT32: u16 = 9;
pub const PMIX_INT64: u16 = 10;
pub const PMIX_UINT: u16 = 11;
pub const PMIX_UINT8: u16 = 12;
pub const PMIX_UINT16: u16 = 13;
pub const PMIX_UINT32: u16 = 14;
pub const PMIX_UINT64: u16 = 15;
pub const PMIX_BYTE_OBJECT: u16 = 27;
pub const PMIX_PROC_RANK: u16 = 40;

/// `pmix_proc_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PmixProc {
    pub nspace: [c_char; PMIX_MAX_NSLEN + 1],
    pub rank: u32,
}

/// `pmix_byte_object_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PmixByteObject {
    pub bytes: *mut c_char,
    pub size: usize,
}

/// The `data` union of `pmix_value_t`: 24 bytes, 8-aligned (its largest member is
/// `pmix_envar_t`: two pointers and a char). Only the members used here are named.
#[repr(C)]
#[derive(Clone, Copy)]
pub union PmixValueData {
    pub flag: bool,
    pub string: *mut c_char,
    pub size: usize,
    pub int32: i32,
    pub int64: i64,
    pub uint8: u8,
    pub uint16: u16,
    pub uint32: u32,
    pub uint64: u64,
    pub bo: PmixByteObject,
    _envar: [u64; 3],
}

/// `pmix_value_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PmixValue {
    pub type_: u16,
    pub data: PmixValueData,
}

/// `pmix_info_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PmixInfo {
    pub key: [c_char; PMIX_MAX_KEYLEN + 1],
    pub flags: u32,
    pub value: PmixValue,
}

type InitFn = unsafe extern "C" fn(*mut PmixProc, *mut PmixInfo, usize) -> c_int;
type FinalizeFn = unsafe extern "C" fn(*const PmixInfo, usize) -> c_int;
type PutFn = unsafe extern "C" fn(u8, *const c_char, *mut PmixValue) -> c_int;
type CommitFn = unsafe extern "C" fn() -> c_int;
type FenceFn = unsafe extern "C" fn(*const PmixProc, usize, *const PmixInfo, usize) -> c_int;
type GetFn = unsafe extern "C" fn(
    *const PmixProc,
    *const c_char,
    *const PmixInfo,
    usize,
    *mut *mut PmixValue,
) -> c_int;
type AbortFn = unsafe extern "C" fn(c_int, *const c_char, *mut PmixProc, usize) -> c_int;
type ErrorStringFn = unsafe extern "C" fn(c_int) -> *const c_char;
type ValueFreeFn = unsafe extern "C" fn(*mut PmixValue, usize);
type VersionFn = unsafe extern "C" fn() -> *const c_char;

/// The libpmix entry points used by gpumpi.
struct Syms {
    init: InitFn,
    finalize: FinalizeFn,
    put: PutFn,
    commit: CommitFn,
    fence: FenceFn,
    get: GetFn,
    abort: AbortFn,
    error_string: ErrorStringFn,
    value_free: Option<ValueFreeFn>,
    version: Option<VersionFn>,
}

/// A value read with [`Pmix::get`], converted out of libpmix's memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Int(i128),
    Str(String),
    Bytes(Vec<u8>),
    /// A type this wrapper does not convert (its `pmix_data_type_t`).
    Other(u16),
}

/// A loaded libpmix (the handle is never closed: libpmix starts threads of its own).
pub struct Pmix {
    syms: Syms,
    path: String,
}

// SAFETY: the PMIx client API is thread-safe (PMIx serializes calls through its progress
// thread); the struct holds only function pointers.
unsafe impl Send for Pmix {}
// SAFETY: as above.
unsafe impl Sync for Pmix {}

fn dl_error() -> String {
    // SAFETY: dlerror returns NULL or a valid C string owned by libc.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown dlopen error".into()
    } else {
        // SAFETY: non-NULL C string from dlerror.
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

/// Copy `s` into a fixed C char array, NUL-terminated; `false` if it does not fit.
fn fill(dst: &mut [c_char], s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() >= dst.len() || b.contains(&0) {
        return false;
    }
    for (d, c) in dst.iter_mut().zip(b) {
        *d = *c as c_char;
    }
    dst[b.len()] = 0;
    true
}

impl PmixProc {
    pub fn new(nspace: &str, rank: u32) -> Option<Self> {
        let mut p = PmixProc {
            nspace: [0; PMIX_MAX_NSLEN + 1],
            rank,
        };
        fill(&mut p.nspace, nspace).then_some(p)
    }
    pub fn nspace(&self) -> String {
        let b: Vec<u8> = self
            .nspace
            .iter()
            .take_while(|c| **c != 0)
            .map(|c| *c as u8)
            .collect();
        String::from_utf8_lossy(&b).into_owned()
    }
}

impl PmixInfo {
    /// A boolean info (e.g. `pmix.collect`).
    pub fn flag(key: &str, v: bool) -> Option<Self> {
        // SAFETY: PmixInfo is plain data; all-zero is a valid (PMIX_UNDEF) value.
        let mut i: PmixInfo = unsafe { std::mem::zeroed() };
        if !fill(&mut i.key, key) {
            return None;
        }
        i.value.type_ = PMIX_BOOL;
        i.value.data.flag = v;
        Some(i)
    }

    /// An integer info (e.g. `pmix.timeout`).
    pub fn int(key: &str, v: i32) -> Option<Self> {
        // SAFETY: PmixInfo is plain data; all-zero is a valid (PMIX_UNDEF) value.
        let mut i: PmixInfo = unsafe { std::mem::zeroed() };
        if !fill(&mut i.key, key) {
            return None;
        }
        i.value.type_ = PMIX_INT;
        i.value.data.int32 = v;
        Some(i)
    }
}

/// How [`Pmix::get_with`] may look for a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// Wherever libpmix and the launcher look, for as long as it takes.
    Wait,
    /// `pmix.immediate`: a key the local server does not hold is "not found" at once instead
    /// of a request to the host that may wait for a peer that never puts it.
    Immediate,
    /// `pmix.timeout`: as `Wait`, but an error after this many seconds.
    Timeout(u32),
}

impl Pmix {
    /// dlopen the first of `candidates` that loads and resolve the symbols; the error names
    /// every candidate tried and why it failed.
    pub fn load(candidates: &[String]) -> Result<Pmix, String> {
        let mut why = Vec::new();
        for path in candidates {
            let Ok(c) = CString::new(path.as_str()) else {
                continue;
            };
            // SAFETY: dlopen with a valid C string; the handle is intentionally never closed.
            let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
            if h.is_null() {
                why.push(format!("{path}: {}", dl_error()));
                continue;
            }
            match Self::resolve(h) {
                Ok(syms) => {
                    return Ok(Pmix {
                        syms,
                        path: path.clone(),
                    })
                }
                Err(e) => why.push(format!("{path}: {e}")),
            }
        }
        Err(why.join("; "))
    }

    fn resolve(h: *mut c_void) -> Result<Syms, String> {
        let sym = |name: &str| -> Option<*mut c_void> {
            let c = CString::new(name).ok()?;
            // SAFETY: h is a live dlopen handle, c a valid C string.
            let p = unsafe { libc::dlsym(h, c.as_ptr()) };
            (!p.is_null()).then_some(p)
        };
        let need = |name: &str| sym(name).ok_or_else(|| format!("symbol {name} missing"));
        // SAFETY (all transmutes below): each symbol is the PMIx API function of that name,
        // whose C prototype the corresponding fn type reproduces.
        unsafe {
            Ok(Syms {
                init: std::mem::transmute::<*mut c_void, InitFn>(need("PMIx_Init")?),
                finalize: std::mem::transmute::<*mut c_void, FinalizeFn>(need("PMIx_Finalize")?),
                put: std::mem::transmute::<*mut c_void, PutFn>(need("PMIx_Put")?),
                commit: std::mem::transmute::<*mut c_void, CommitFn>(need("PMIx_Commit")?),
                fence: std::mem::transmute::<*mut c_void, FenceFn>(need("PMIx_Fence")?),
                get: std::mem::transmute::<*mut c_void, GetFn>(need("PMIx_Get")?),
                abort: std::mem::transmute::<*mut c_void, AbortFn>(need("PMIx_Abort")?),
                error_string: std::mem::transmute::<*mut c_void, ErrorStringFn>(need(
                    "PMIx_Error_string",
                )?),
                value_free: sym("PMIx_Value_free")
                    .map(|p| std::mem::transmute::<*mut c_void, ValueFreeFn>(p)),
                version: sym("PMIx_Get_version")
                    .map(|p| std::mem::transmute::<*mut c_void, VersionFn>(p)),
            })
        }
    }

    /// The path the library was loaded from.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// PMIx_Get_version, when the library has it.
    pub fn version(&self) -> String {
        match self.syms.version {
            // SAFETY: returns a static C string (or NULL).
            Some(f) => unsafe {
                let p = f();
                if p.is_null() {
                    String::new()
                } else {
                    CStr::from_ptr(p).to_string_lossy().into_owned()
                }
            },
            None => String::new(),
        }
    }

    /// Text of a PMIx status code.
    pub fn error_string(&self, rc: c_int) -> String {
        // SAFETY: PMIx_Error_string returns a static C string for any code.
        let p = unsafe { (self.syms.error_string)(rc) };
        if p.is_null() {
            format!("PMIx status {rc}")
        } else {
            // SAFETY: non-NULL static C string.
            format!("{} ({rc})", unsafe { CStr::from_ptr(p) }.to_string_lossy())
        }
    }

    fn check(&self, what: &str, rc: c_int) -> Result<(), String> {
        if rc == PMIX_SUCCESS {
            Ok(())
        } else {
            Err(format!("{what} failed: {}", self.error_string(rc)))
        }
    }

    /// PMIx_Init: connect to the local PMIx server; returns this process's name.
    pub fn init(&self) -> Result<PmixProc, String> {
        // SAFETY: PmixProc is plain data; zeroed is valid.
        let mut me: PmixProc = unsafe { std::mem::zeroed() };
        // SAFETY: `me` is a valid out-pointer; no info array.
        let rc = unsafe { (self.syms.init)(&mut me, std::ptr::null_mut(), 0) };
        self.check("PMIx_Init", rc).map(|_| me)
    }

    /// PMIx_Put (scope global) of a byte object, then nothing else: call [`Pmix::commit`].
    pub fn put_bytes(&self, key: &str, value: &[u8]) -> Result<(), String> {
        let mut k = [0 as c_char; PMIX_MAX_KEYLEN + 1];
        if !fill(&mut k, key) {
            return Err(format!("PMIx key {key:?} is too long or contains NUL"));
        }
        let mut v = PmixValue {
            type_: PMIX_BYTE_OBJECT,
            data: PmixValueData {
                bo: PmixByteObject {
                    bytes: value.as_ptr() as *mut c_char,
                    size: value.len(),
                },
            },
        };
        // SAFETY: key is NUL-terminated; PMIx_Put copies the value (the bytes are only read).
        let rc = unsafe { (self.syms.put)(PMIX_GLOBAL, k.as_ptr(), &mut v) };
        self.check("PMIx_Put", rc)
    }

    pub fn commit(&self) -> Result<(), String> {
        // SAFETY: no arguments.
        let rc = unsafe { (self.syms.commit)() };
        self.check("PMIx_Commit", rc)
    }

    /// PMIx_Fence over all processes of `ns` (NULL proc list = our namespace), optionally
    /// collecting the data put by every process.
    pub fn fence(&self, collect: bool) -> Result<(), String> {
        let info = PmixInfo::flag("pmix.collect", true).expect("short key");
        let (ip, n) = if collect {
            (&info as *const PmixInfo, 1)
        } else {
            (std::ptr::null(), 0)
        };
        // SAFETY: NULL/0 procs means "all processes of my namespace"; info lives across the call.
        let rc = unsafe { (self.syms.fence)(std::ptr::null(), 0, ip, n) };
        self.check("PMIx_Fence", rc)
    }

    /// PMIx_Get of `key` for `proc`, converted into a [`Value`].
    pub fn get(&self, proc_: &PmixProc, key: &str) -> Result<Value, String> {
        self.get_with(proc_, key, Lookup::Wait)
    }

    /// PMIx_Get, looking for the key as `how` says. (`pmix.optional`, the local store only,
    /// does not see the data a collecting fence brought in under Open MPI 5.0.11: every get
    /// of a peer's key failed with it.)
    pub fn get_with(&self, proc_: &PmixProc, key: &str, how: Lookup) -> Result<Value, String> {
        let mut k = [0 as c_char; PMIX_MAX_KEYLEN + 1];
        if !fill(&mut k, key) {
            return Err(format!("PMIx key {key:?} is too long or contains NUL"));
        }
        let mut out: *mut PmixValue = std::ptr::null_mut();
        let info = match how {
            Lookup::Wait => None,
            Lookup::Immediate => Some(PmixInfo::flag("pmix.immediate", true).expect("short key")),
            Lookup::Timeout(s) => Some(
                PmixInfo::int("pmix.timeout", s.min(i32::MAX as u32) as i32).expect("short key"),
            ),
        };
        let (ip, n) = match &info {
            Some(i) => (i as *const PmixInfo, 1),
            None => (std::ptr::null(), 0),
        };
        // SAFETY: proc_, k and info are valid for the call; `out` receives a value freed below.
        let rc = unsafe { (self.syms.get)(proc_, k.as_ptr(), ip, n, &mut out) };
        self.check(&format!("PMIx_Get({key:?} of rank {})", proc_.rank), rc)?;
        if out.is_null() {
            return Err(format!("PMIx_Get({key:?}) returned no value"));
        }
        // SAFETY: PMIx returned a valid pmix_value_t; we read the member its type names.
        let val = unsafe {
            let v = &*out;
            match v.type_ {
                PMIX_BOOL => Value::Int(v.data.flag as i128),
                PMIX_BYTE | PMIX_UINT8 => Value::Int(v.data.uint8 as i128),
                PMIX_INT8 => Value::Int(v.data.uint8 as i8 as i128),
                PMIX_INT16 => Value::Int(v.data.uint16 as i16 as i128),
                PMIX_UINT16 => Value::Int(v.data.uint16 as i128),
                PMIX_INT | PMIX_INT32 => Value::Int(v.data.int32 as i128),
                PMIX_UINT | PMIX_UINT32 | PMIX_PROC_RANK => Value::Int(v.data.uint32 as i128),
                PMIX_INT64 => Value::Int(v.data.int64 as i128),
                PMIX_SIZE | PMIX_UINT64 => Value::Int(v.data.uint64 as i128),
                PMIX_STRING => Value::Str(if v.data.string.is_null() {
                    String::new()
                } else {
                    CStr::from_ptr(v.data.string).to_string_lossy().into_owned()
                }),
                PMIX_BYTE_OBJECT => Value::Bytes(if v.data.bo.bytes.is_null() {
                    Vec::new()
                } else {
                    std::slice::from_raw_parts(v.data.bo.bytes as *const u8, v.data.bo.size)
                        .to_vec()
                }),
                t => Value::Other(t),
            }
        };
        if let Some(free) = self.syms.value_free {
            // SAFETY: `out` was allocated by PMIx_Get (one value) and is not used after this.
            unsafe { free(out, 1) };
        }
        Ok(val)
    }

    /// PMIx_Abort of the whole namespace (NULL procs). Returns only if the server refused.
    pub fn abort(&self, code: i32, msg: &str) -> Result<(), String> {
        let m = CString::new(msg.replace('\0', " ")).unwrap_or_default();
        // SAFETY: msg is a valid C string; NULL/0 procs = all processes of my namespace.
        let rc = unsafe { (self.syms.abort)(code, m.as_ptr(), std::ptr::null_mut(), 0) };
        self.check("PMIx_Abort", rc)
    }

    pub fn finalize(&self) -> Result<(), String> {
        // SAFETY: no info array.
        let rc = unsafe { (self.syms.finalize)(std::ptr::null(), 0) };
        self.check("PMIx_Finalize", rc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// Numbers printed by a C program compiled against PMIx 4.2.2's pmix.h (same in 5.0).
    #[test]
    fn layouts_match_pmix_common_h() {
        assert_eq!(size_of::<PmixProc>(), 260);
        assert_eq!(offset_of!(PmixProc, rank), 256);
        assert_eq!(size_of::<PmixByteObject>(), 16);
        assert_eq!(size_of::<PmixValue>(), 32);
        assert_eq!(offset_of!(PmixValue, data), 8);
        assert_eq!(size_of::<PmixInfo>(), 552);
        assert_eq!(offset_of!(PmixInfo, flags), 512);
        assert_eq!(offset_of!(PmixInfo, value), 520);
    }

    #[test]
    fn proc_and_info_helpers() {
        let p = PmixProc::new("prterun-vm-1@1", 3).unwrap();
        assert_eq!(p.nspace(), "prterun-vm-1@1");
        assert_eq!(p.rank, 3);
        assert!(PmixProc::new(&"x".repeat(256), 0).is_none());
        let i = PmixInfo::flag("pmix.collect", true).unwrap();
        assert_eq!(i.value.type_, PMIX_BOOL);
        assert!(PmixInfo::flag(&"k".repeat(512), true).is_none());
    }

    #[test]
    fn missing_library_is_an_error_naming_it() {
        let e = Pmix::load(&["/nonexistent/libpmix.so.2".into()])
            .err()
            .unwrap();
        assert!(e.contains("/nonexistent/libpmix.so.2"), "{e}");
    }
}
