//! Datatype handles: the predefined datatypes of the standard ABI mapped to
//! `mpi::datatype` descriptions, user types in a handle table, and the views
//! point-to-point and collectives use to move typed data as packed bytes.

use super::request::{Post, Status};
use crate::gpu::pool::HostBuf;
use crate::mpi::datatype::{Basic, Combiner, Elem, TypeDesc};
use crate::mpi::error::MpiResult;
use crate::mpi::handles::{Kind, Table};
use crate::mpi_bail;
use crate::standard::consts as c;
use crate::standard::ffi::*;
use std::collections::BTreeMap;
use std::os::raw::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex};

pub struct DtypeObj {
    pub desc: Arc<TypeDesc>,
    pub committed: AtomicBool,
    pub name: Mutex<String>,
    pub attrs: Mutex<BTreeMap<i32, usize>>,
    /// The handle value of a predefined type (0 for user types).
    pub predefined: usize,
}

impl DtypeObj {
    pub fn new(desc: TypeDesc) -> Self {
        Self::from_arc(Arc::new(desc), false)
    }
    pub fn from_arc(desc: Arc<TypeDesc>, committed: bool) -> Self {
        DtypeObj {
            desc,
            committed: AtomicBool::new(committed),
            name: Mutex::new(String::new()),
            attrs: Mutex::new(BTreeMap::new()),
            predefined: 0,
        }
    }
    pub fn size(&self) -> usize {
        self.desc.size()
    }
    pub fn extent(&self) -> isize {
        self.desc.extent()
    }
}

/// Predefined datatype handle values -> the element they describe.
const PREDEFINED: &[(usize, Elem)] = {
    use Basic::*;
    use Elem::Basic as B;
    &[
        (0x201, B(Aint)),
        (0x202, B(Count)),
        (0x203, B(Offset)),
        (0x207, B(Packed)),
        (0x208, B(Short)),
        (0x209, B(Int)),
        (0x20a, B(Long)),
        (0x20b, B(LongLong)),
        (0x20c, B(UnsignedShort)),
        (0x20d, B(Unsigned)),
        (0x20e, B(UnsignedLong)),
        (0x20f, B(UnsignedLongLong)),
        (0x210, B(Float)),
        (0x212, B(FloatComplex)),
        (0x213, B(FloatComplex)),
        (0x214, B(Double)),
        (0x216, B(DoubleComplex)),
        (0x217, B(DoubleComplex)),
        (0x218, B(FLogical)),
        (0x219, B(FInteger)),
        (0x21a, B(FReal)),
        (0x21b, B(FComplex)),
        (0x21c, B(FDoublePrecision)),
        (0x21d, B(FDoubleComplex)),
        (0x220, B(LongDouble)),
        (0x224, B(LongDoubleComplex)),
        (0x225, B(LongDoubleComplex)),
        (0x228, Elem::FLOAT_INT),
        (0x229, Elem::DOUBLE_INT),
        (0x22a, Elem::LONG_INT),
        (0x22b, Elem::TWO_INT),
        (0x22c, Elem::SHORT_INT),
        (0x22d, Elem::LONG_DOUBLE_INT),
        (0x230, Elem::TWO_REAL),
        (0x231, Elem::TWO_DOUBLE_PRECISION),
        (0x232, Elem::TWO_INTEGER),
        (0x238, B(CBool)),
        (0x239, B(CBool)),
        (0x23c, B(WChar)),
        (0x240, B(Int8)),
        (0x241, B(Uint8)),
        (0x243, B(Char)),
        (0x244, B(SignedChar)),
        (0x245, B(UnsignedChar)),
        (0x247, B(Byte)),
        (0x248, B(Int16)),
        (0x249, B(Uint16)),
        (0x250, B(Int32)),
        (0x251, B(Uint32)),
        (0x258, B(Int64)),
        (0x259, B(Uint64)),
        (0x2c1, B(FInteger1)),
        (0x21e, B(FCharacter)),
        (0x2c9, B(FInteger2)),
        (0x2d1, B(FInteger4)),
        (0x2d2, B(FReal4)),
        (0x2d9, B(FInteger8)),
        (0x2da, B(FReal8)),
        (0x2db, B(FComplex8)),
        (0x2e3, B(FComplex16)),
        // gpumpi extensions (mpi-ext.h)
        (0x2f0, B(Float16)),
        (0x2f1, B(Bfloat16)),
    ]
};

/// Names of predefined types whose handle value is shared by two names use the C one.
fn predefined_name(h: usize, e: Elem) -> &'static str {
    match h {
        0x213 => "MPI_CXX_FLOAT_COMPLEX",
        0x217 => "MPI_CXX_DOUBLE_COMPLEX",
        0x225 => "MPI_CXX_LONG_DOUBLE_COMPLEX",
        0x239 => "MPI_CXX_BOOL",
        _ => e.name(),
    }
}

/// Predefined types by handle (handles below 0x1000; a direct index, looked up by every call).
static BUILTIN: LazyLock<Vec<Option<Arc<DtypeObj>>>> = LazyLock::new(|| {
    let mut by_handle: Vec<Option<Arc<DtypeObj>>> = vec![None; 0x1000];
    for (h, o) in PREDEFINED.iter().map(|&(h, e)| {
        let desc = match e {
            Elem::Basic(b) => TypeDesc::predefined(b),
            Elem::Pair(..) => TypeDesc::pair(e),
        };
        let o = DtypeObj {
            desc: Arc::new(desc),
            committed: AtomicBool::new(true),
            name: Mutex::new(predefined_name(h, e).to_string()),
            attrs: Mutex::new(BTreeMap::new()),
            predefined: h,
        };
        (h, Arc::new(o))
    }) {
        assert!(h < 0x1000, "predefined datatype handle {h:#x} above 0xfff");
        by_handle[h] = Some(o);
    }
    by_handle
});

/// MPI_BYTE, for internal byte transfers.
pub static BYTE: LazyLock<Arc<DtypeObj>> = LazyLock::new(|| {
    BUILTIN[c::MPI_BYTE as usize]
        .clone()
        .expect("MPI_BYTE is predefined")
});

pub static TYPES: Mutex<Table<DtypeObj>> = Mutex::new(Table::new(Kind::Datatype));

/// The handle value of the predefined type for an element, if there is one.
pub fn predefined_handle(e: Elem) -> Option<usize> {
    PREDEFINED.iter().find(|p| p.1 == e).map(|p| p.0)
}

pub fn is_predefined(d: &DtypeObj) -> bool {
    d.predefined != 0
}

/// Resolve a datatype handle (committed or not).
pub fn dtype(h: MPI_Datatype) -> MpiResult<Arc<DtypeObj>> {
    let v = h as usize;
    if v == c::MPI_DATATYPE_NULL as usize {
        mpi_bail!(MPI_ERR_TYPE, "the datatype is MPI_DATATYPE_NULL");
    }
    if v < 0x1000 {
        return match BUILTIN[v].as_ref() {
            Some(d) => Ok(d.clone()),
            None if (0x200..0x300).contains(&v) => mpi_bail!(
                MPI_ERR_TYPE,
                "predefined datatype {v:#x} is not supported by gpumpi"
            ),
            None => mpi_bail!(MPI_ERR_TYPE, "invalid datatype handle {v:#x}"),
        };
    }
    match TYPES.lock().unwrap().get(v) {
        Some(d) => Ok(d),
        None => mpi_bail!(
            MPI_ERR_TYPE,
            "invalid datatype handle {v:#x} (freed, or not a datatype)"
        ),
    }
}

/// Resolve a datatype handle that must be committed (every communication call).
/// A predefined datatype, borrowed (no reference count); `None` for any other handle.
#[inline]
pub fn predefined(h: MPI_Datatype) -> Option<&'static DtypeObj> {
    let v = h as usize;
    if v < 0x1000 && v != c::MPI_DATATYPE_NULL as usize {
        BUILTIN[v].as_deref()
    } else {
        None
    }
}

pub fn committed(h: MPI_Datatype) -> MpiResult<Arc<DtypeObj>> {
    let d = dtype(h)?;
    if !d.committed.load(Ordering::Acquire) {
        mpi_bail!(
            MPI_ERR_TYPE,
            "datatype {:#x} is not committed (call MPI_Type_commit first)",
            h as usize
        );
    }
    Ok(d)
}

pub fn insert(d: DtypeObj) -> MPI_Datatype {
    TYPES.lock().unwrap().insert(Arc::new(d)) as MPI_Datatype
}

/// A new handle for a type description (used by MPI_Type_get_contents for derived children).
pub fn handle_for(desc: &Arc<TypeDesc>) -> MPI_Datatype {
    if let Combiner::Named(e) = desc.combiner() {
        if let Some(h) = predefined_handle(*e) {
            return h as MPI_Datatype;
        }
    }
    insert(DtypeObj::from_arc(desc.clone(), true))
}

/// The lowest address a process can map: an access below it (through MPI_BOTTOM, that is a
/// NULL buffer, with offsets that do not reach real memory) can only fault.
const PAGE_ZERO: isize = 4096;

/// Validate a user data buffer argument (`count` elements of `d` at `buf`): the one check every
/// buffer of every communication, pack and reduction call passes, at the call, before any
/// matching or schedule. The special pointer values of the standard ABI are not memory:
/// `MPI_IN_PLACE` (1) and `MPI_BUFFER_AUTOMATIC` (2) are refused wherever the caller passes them
/// here (callers accept `MPI_IN_PLACE` themselves where the standard allows it, and hand only
/// buffers that will be accessed). `MPI_BOTTOM` (NULL) is legal with a type map of absolute
/// addresses; it is refused when the elements would touch the zero page, as a NULL buffer with a
/// predefined, contiguous or other relative type always does.
pub fn check_buf(buf: *const c_void, count: usize, d: &DtypeObj, what: &str) -> MpiResult<()> {
    check_buf_at(buf, 0, count, d, what)
}

/// [`check_buf`] for a block `disp` bytes from `buf` (the v and w collectives' blocks).
pub fn check_buf_at(
    buf: *const c_void,
    disp: isize,
    count: usize,
    d: &DtypeObj,
    what: &str,
) -> MpiResult<()> {
    match buf as usize {
        1 => mpi_bail!(
            MPI_ERR_BUFFER,
            "{what} is MPI_IN_PLACE, which is not allowed for this argument"
        ),
        2 => mpi_bail!(
            MPI_ERR_BUFFER,
            "{what} is MPI_BUFFER_AUTOMATIC, which is not a data buffer"
        ),
        0 => {
            let (lo, hi) = crate::gpu::layout::span(&d.desc, count);
            let (lo, hi) = (lo + disp, hi + disp);
            if hi > lo && lo < PAGE_ZERO {
                mpi_bail!(
                    MPI_ERR_BUFFER,
                    "{what} is NULL (MPI_BOTTOM) but {count} elements of the datatype would access \
                     addresses {lo}..{hi}"
                );
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// The bytes of `count` elements as one contiguous run, packing if needed (and staging device
/// memory to the host through `gpu::stage`).
/// Returns (pointer, length, temporary that must outlive the transfer).
pub unsafe fn send_view(
    buf: *const c_void,
    count: usize,
    d: &DtypeObj,
) -> MpiResult<(*const u8, usize, Option<HostBuf>)> {
    let len = d.desc.packed_size(count);
    if let Some(v) = crate::gpu::stage::packed_from_device(buf as *const u8, count, &d.desc)? {
        return Ok((v.as_ptr(), len, Some(v)));
    }
    if d.desc.is_contiguous(count) {
        // SAFETY: a contiguous type's data starts true_lb bytes from the buffer address.
        return Ok((
            (buf as *const u8).wrapping_offset(d.desc.true_lb()),
            len,
            None,
        ));
    }
    let v = pack_all(buf, count, d)?;
    Ok((v.as_ptr(), len, Some(HostBuf::from_vec(v))))
}

/// A contiguous device (or managed) send buffer for the engine's device rendezvous: (address
/// of the data, length, how the receiver reaches it): the CUDA IPC export for the RTS when the
/// message is longer than `ipc_min` bytes and IPC can share the buffer, else the pipe to the
/// receiver when pipes are on and the message is longer than `pipe_min`. `None`: use
/// [`send_view`].
pub fn device_send(
    buf: *const c_void,
    count: usize,
    d: &DtypeObj,
    ipc_min: usize,
    pipe_min: usize,
) -> Option<(usize, usize, crate::engine::DevSend)> {
    use crate::engine::DevSend;
    let len = d.desc.packed_size(count);
    if len <= ipc_min.min(pipe_min) || !d.desc.is_contiguous(count) {
        return None;
    }
    let addr = (buf as usize).wrapping_add_signed(d.desc.true_lb());
    if !crate::gpu::is_device(addr as *const u8) {
        return None;
    }
    if len > ipc_min {
        if let Some(e) = crate::gpu::p2p::export_range(addr, len) {
            return Some((addr, len, DevSend::Ipc(e)));
        }
    }
    (len > pipe_min && crate::gpu::pipe::enabled()).then_some((addr, len, DevSend::Pipe))
}

/// Pack `count` elements (host or device memory) into a new vector.
pub unsafe fn pack_all(buf: *const c_void, count: usize, d: &DtypeObj) -> MpiResult<Vec<u8>> {
    if let Some(v) = crate::gpu::stage::packed_from_device(buf as *const u8, count, &d.desc)? {
        return Ok(v.into_vec());
    }
    let mut v = vec![0u8; d.desc.packed_size(count)];
    d.desc.pack(count, buf as *const u8, &mut v);
    Ok(v)
}

/// Store packed bytes (a prefix of `count` elements) into a user buffer, host or device.
pub unsafe fn unpack_all(
    src: &[u8],
    buf: *mut c_void,
    count: usize,
    d: &DtypeObj,
) -> MpiResult<()> {
    if crate::gpu::stage::unpack_to_device(src, buf as *mut u8, count, &d.desc)? {
        return Ok(());
    }
    d.desc.unpack_range(count, src, 0, buf as *mut u8);
    Ok(())
}

/// Where the engine receives: `ptr..ptr+cap`, device memory the engine writes itself when `dev`
/// (peer copies, host-to-device copies), and the step that stores a temporary into the user's
/// buffer at completion, if one is used.
pub struct RecvView {
    pub ptr: *mut u8,
    pub cap: usize,
    pub dev: bool,
    pub post: Option<Post>,
}

/// Where to receive `count` elements: the user's memory directly when contiguous (host memory,
/// or device memory of one allocation, written by the engine), else a temporary stored into the
/// user's buffer (unpacked, or copied to the device) by the post step (only the bytes actually
/// received). The buffer is classified once.
pub unsafe fn recv_view(buf: *mut c_void, count: usize, d: &Arc<DtypeObj>) -> MpiResult<RecvView> {
    let len = d.desc.packed_size(count);
    let (lo, _) = crate::gpu::layout::span(&d.desc, count);
    let device = if len > 0 {
        crate::gpu::stage::device_info((buf as *const u8).wrapping_offset(lo))
    } else {
        None
    };
    if d.desc.is_contiguous(count) {
        let ptr = (buf as *mut u8).wrapping_offset(d.desc.true_lb());
        let direct = match &device {
            None => Some(false),
            Some(info) => (info.kind == crate::gpu::cache::MemKind::Device
                && ptr as usize + len <= info.start + info.len)
                .then_some(true),
        };
        if let Some(dev) = direct {
            return Ok(RecvView {
                ptr,
                cap: len,
                dev,
                post: None,
            });
        }
    }
    let mut v = match &device {
        Some(info) => crate::gpu::stage::staging(info, len)?,
        None => HostBuf::from_vec(vec![0u8; len]),
    };
    let ptr = v.as_mut_ptr();
    let d = d.clone();
    let dst = buf as usize;
    let post: Post = Box::new(move |st: &mut Status| {
        let n = st.bytes.min(v.len());
        // SAFETY: the user's buffer holds `count` elements of the type (MPI semantics).
        unsafe { unpack_all(&v[..n], dst as *mut c_void, count, &d) }
    });
    Ok(RecvView {
        ptr,
        cap: len,
        dev: false,
        post: Some(post),
    })
}

/// Number of basic elements in `bytes` of packed data of type `d` (MPI_Get_elements).
pub fn elements_in(d: &DtypeObj, bytes: usize) -> i64 {
    let size = d.desc.size();
    if size == 0 {
        return 0;
    }
    let per: usize = d.desc.blocks().iter().map(|b| b.count).sum();
    let full = bytes / size;
    let mut rem = bytes % size;
    let mut n = full * per;
    for b in d.desc.blocks() {
        let bs = b.basic.size();
        let take = (rem / bs).min(b.count);
        n += take;
        rem -= take * bs;
        if take < b.count {
            break;
        }
    }
    n as i64
}

/// Bytes occupied by the first `n` basic elements of a packed stream of type `d`.
pub fn bytes_for_elements(d: &DtypeObj, n: usize) -> usize {
    let per: usize = d.desc.blocks().iter().map(|b| b.count).sum();
    if per == 0 {
        return 0;
    }
    let mut bytes = (n / per) * d.desc.size();
    let mut rem = n % per;
    for b in d.desc.blocks() {
        let take = rem.min(b.count);
        bytes += take * b.basic.size();
        rem -= take;
        if rem == 0 {
            break;
        }
    }
    bytes
}

/// A count argument: MPI_ERR_COUNT when negative.
pub fn check_count(count: i64) -> MpiResult<usize> {
    if count < 0 {
        mpi_bail!(MPI_ERR_COUNT, "count {count} is negative");
    }
    Ok(count as usize)
}
