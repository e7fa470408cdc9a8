//! libibverbs, loaded with `dlopen` at run time (`GPUMPI_IBVERBS_LIB`, else `libibverbs.so.1`),
//! so that libmpi_abi loads and works where it is absent. Every unsafe call into libibverbs is
//! in this file; `transport::net::ib` builds the backend on the safe wrappers below.
//!
//! **Which entry points, and how.** Only the subset the backend uses is resolved. Most of it is
//! exported by libibverbs (`ibv_get_device_list`, `ibv_open_device`, `ibv_query_port`,
//! `ibv_query_gid`, `ibv_alloc_pd`, `ibv_reg_mr`, `ibv_create_cq`, `ibv_create_qp`,
//! `ibv_modify_qp`, ...), and is called through `dlsym`. Three optional exports are resolved
//! when present: `ibv_reg_mr_iova2` (rdma-core 22+: the only way to pass
//! `IBV_ACCESS_RELAXED_ORDERING`), `ibv_reg_dmabuf_mr` (rdma-core 34+: device memory as a dma-buf)
//! and `_ibv_query_gid_ex` (rdma-core 32+: the GID's type, RoCE v1 or v2; without it the type is
//! read from sysfs as NCCL does). The data path (`ibv_post_send`, `ibv_post_recv`,
//! `ibv_poll_cq`) consists of `static inline` functions in `verbs.h` that call through the
//! `ops` table embedded in `struct ibv_context` (the provider fills it at open); there are no
//! exported symbols for them. We do what the inline functions do: read the function pointer
//! from `context->ops` (at the fixed offsets of rdma-core's `struct ibv_context_ops`, unchanged
//! since libibverbs 1.1) and call it. The struct layouts below follow rdma-core's `verbs.h` on
//! LP64 (sizes pinned by the unit tests); the test double `tests/support/fake_ibverbs.c`
//! implements the same ABI.
//!
//! Contract: [`verbs`] never panics and fails with a message naming the library where it is
//! missing or lacks a required symbol. Wrapper objects own their verbs object and release it
//! on drop (QP before CQ before PD before context, enforced by the `Arc`s they hold).

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::{Arc, OnceLock};

// ---------------------------------------------------------------------------------------------
// ABI: constants and structs of verbs.h (rdma-core), LP64.

pub const PORT_ACTIVE: u32 = 4;
pub const LINK_LAYER_INFINIBAND: u8 = 1;
pub const LINK_LAYER_ETHERNET: u8 = 2;

pub const ACCESS_LOCAL_WRITE: i32 = 1;
pub const ACCESS_REMOTE_WRITE: i32 = 2;
pub const ACCESS_REMOTE_READ: i32 = 4;
/// `IBV_ACCESS_RELAXED_ORDERING` (= `IBV_ACCESS_OPTIONAL_FIRST`): only honored through
/// `ibv_reg_mr_iova2`/`ibv_reg_dmabuf_mr`.
pub const ACCESS_RELAXED_ORDERING: i32 = 1 << 20;

pub const QPT_RC: u32 = 2;
pub const QPS_RESET: u32 = 0;
pub const QPS_INIT: u32 = 1;
pub const QPS_RTR: u32 = 2;
pub const QPS_RTS: u32 = 3;
pub const QPS_ERR: u32 = 6;

const QP_STATE: c_int = 1;
const QP_ACCESS_FLAGS: c_int = 1 << 3;
const QP_PKEY_INDEX: c_int = 1 << 4;
const QP_PORT: c_int = 1 << 5;
const QP_AV: c_int = 1 << 7;
const QP_PATH_MTU: c_int = 1 << 8;
const QP_TIMEOUT: c_int = 1 << 9;
const QP_RETRY_CNT: c_int = 1 << 10;
const QP_RNR_RETRY: c_int = 1 << 11;
const QP_RQ_PSN: c_int = 1 << 12;
const QP_MAX_QP_RD_ATOMIC: c_int = 1 << 13;
const QP_MIN_RNR_TIMER: c_int = 1 << 15;
const QP_SQ_PSN: c_int = 1 << 16;
const QP_MAX_DEST_RD_ATOMIC: c_int = 1 << 17;
const QP_DEST_QPN: c_int = 1 << 20;

pub const WR_RDMA_WRITE: u32 = 0;
pub const WR_RDMA_WRITE_WITH_IMM: u32 = 1;
pub const WR_SEND: u32 = 2;
pub const WR_RDMA_READ: u32 = 4;
pub const SEND_SIGNALED: u32 = 2;

pub const WC_SUCCESS: u32 = 0;
pub const WC_RECV: u32 = 1 << 7;
pub const WC_RECV_RDMA_WITH_IMM: u32 = WC_RECV + 1;
pub const WC_WITH_IMM: u32 = 2;

/// GID types (`enum ibv_gid_type` of `ibv_gid_entry`).
pub const GID_TYPE_IB: u32 = 0;
pub const GID_TYPE_ROCE_V1: u32 = 1;
pub const GID_TYPE_ROCE_V2: u32 = 2;

/// `struct ibv_port_attr` (the exported `ibv_query_port` fills the fields up to `flags`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct PortAttr {
    pub state: u32,
    pub max_mtu: u32,
    pub active_mtu: u32,
    pub gid_tbl_len: i32,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    pub port_cap_flags2: u16,
    pub active_speed_ex: u32,
}

/// `struct ibv_gid_entry` (`_ibv_query_gid_ex`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct GidEntry {
    gid: [u8; 16],
    gid_index: u32,
    port_num: u32,
    gid_type: u32,
    ndev_ifindex: u32,
}

/// `struct ibv_sge`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// `struct ibv_send_wr` (128 bytes): the `wr.rdma` member of the union, the rest as padding.
#[repr(C)]
struct SendWr {
    wr_id: u64,
    next: *mut SendWr,
    sg_list: *mut Sge,
    num_sge: c_int,
    opcode: u32,
    send_flags: u32,
    imm_data: u32,
    remote_addr: u64,
    rkey: u32,
    _wr_rest: [u32; 5],
    _qp_type: u32,
    _bind_mw: [u64; 6],
}

/// `struct ibv_recv_wr`.
#[repr(C)]
struct RecvWr {
    wr_id: u64,
    next: *mut RecvWr,
    sg_list: *mut Sge,
    num_sge: c_int,
}

/// `struct ibv_wc` (48 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Wc {
    pub wr_id: u64,
    pub status: u32,
    pub opcode: u32,
    pub vendor_err: u32,
    pub byte_len: u32,
    /// Immediate data in network byte order (as the wire carries it).
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: u32,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct QpCap {
    max_send_wr: u32,
    max_recv_wr: u32,
    max_send_sge: u32,
    max_recv_sge: u32,
    max_inline_data: u32,
}

/// `struct ibv_qp_init_attr`.
#[repr(C)]
struct QpInitAttr {
    qp_context: *mut c_void,
    send_cq: *mut c_void,
    recv_cq: *mut c_void,
    srq: *mut c_void,
    cap: QpCap,
    qp_type: u32,
    sq_sig_all: c_int,
}

/// `struct ibv_ah_attr` (32 bytes, `grh` first).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct AhAttr {
    dgid: [u8; 16],
    flow_label: u32,
    sgid_index: u8,
    hop_limit: u8,
    traffic_class: u8,
    dlid: u16,
    sl: u8,
    src_path_bits: u8,
    static_rate: u8,
    is_global: u8,
    port_num: u8,
}

/// `struct ibv_qp_attr` (140 bytes).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct QpAttr {
    qp_state: u32,
    cur_qp_state: u32,
    path_mtu: u32,
    path_mig_state: u32,
    qkey: u32,
    rq_psn: u32,
    sq_psn: u32,
    dest_qp_num: u32,
    qp_access_flags: u32,
    cap: QpCap,
    ah_attr: AhAttr,
    alt_ah_attr: AhAttr,
    pkey_index: u16,
    alt_pkey_index: u16,
    en_sqd_async_notify: u8,
    sq_draining: u8,
    max_rd_atomic: u8,
    max_dest_rd_atomic: u8,
    min_rnr_timer: u8,
    port_num: u8,
    timeout: u8,
    retry_cnt: u8,
    rnr_retry: u8,
    alt_port_num: u8,
    alt_timeout: u8,
    rate_limit: u32,
}

/// The head of `struct ibv_mr`.
#[repr(C)]
struct RawMr {
    context: *mut c_void,
    pd: *mut c_void,
    addr: *mut c_void,
    length: usize,
    handle: u32,
    lkey: u32,
    rkey: u32,
}

/// The head of `struct ibv_qp`.
#[repr(C)]
struct RawQp {
    context: *mut RawContext,
    qp_context: *mut c_void,
    pd: *mut c_void,
    send_cq: *mut c_void,
    recv_cq: *mut c_void,
    srq: *mut c_void,
    handle: u32,
    qp_num: u32,
    state: u32,
    qp_type: u32,
}

/// The head of `struct ibv_cq`.
#[repr(C)]
struct RawCq {
    context: *mut RawContext,
}

type PostSendFn = unsafe extern "C" fn(*mut RawQp, *mut SendWr, *mut *mut SendWr) -> c_int;
type PostRecvFn = unsafe extern "C" fn(*mut RawQp, *mut RecvWr, *mut *mut RecvWr) -> c_int;
type PollCqFn = unsafe extern "C" fn(*mut RawCq, c_int, *mut Wc) -> c_int;

/// `struct ibv_context_ops`: 32 function pointers; the data path uses `poll_cq` (index 11),
/// `post_send` (25) and `post_recv` (26), exactly as verbs.h's inline functions do.
#[repr(C)]
struct ContextOps {
    _before_poll: [*mut c_void; 11],
    poll_cq: Option<PollCqFn>,
    _middle: [*mut c_void; 13],
    post_send: Option<PostSendFn>,
    post_recv: Option<PostRecvFn>,
    _after: [*mut c_void; 5],
}

/// The head of `struct ibv_context`.
#[repr(C)]
struct RawContext {
    device: *mut c_void,
    ops: ContextOps,
}

// ---------------------------------------------------------------------------------------------
// The library.

type GetDeviceListFn = unsafe extern "C" fn(*mut c_int) -> *mut *mut c_void;
type FreeDeviceListFn = unsafe extern "C" fn(*mut *mut c_void);
type GetDeviceNameFn = unsafe extern "C" fn(*mut c_void) -> *const c_char;
type OpenDeviceFn = unsafe extern "C" fn(*mut c_void) -> *mut RawContext;
type CloseDeviceFn = unsafe extern "C" fn(*mut RawContext) -> c_int;
type QueryPortFn = unsafe extern "C" fn(*mut RawContext, u8, *mut PortAttr) -> c_int;
type QueryGidFn = unsafe extern "C" fn(*mut RawContext, u8, c_int, *mut [u8; 16]) -> c_int;
type QueryGidExFn =
    unsafe extern "C" fn(*mut RawContext, u32, u32, *mut GidEntry, u32, usize) -> c_int;
type AllocPdFn = unsafe extern "C" fn(*mut RawContext) -> *mut c_void;
type DeallocPdFn = unsafe extern "C" fn(*mut c_void) -> c_int;
type RegMrFn = unsafe extern "C" fn(*mut c_void, *mut c_void, usize, c_int) -> *mut RawMr;
type RegMrIova2Fn = unsafe extern "C" fn(*mut c_void, *mut c_void, usize, u64, u32) -> *mut RawMr;
type RegDmabufMrFn = unsafe extern "C" fn(*mut c_void, u64, usize, u64, c_int, c_int) -> *mut RawMr;
type DeregMrFn = unsafe extern "C" fn(*mut RawMr) -> c_int;
type CreateCqFn =
    unsafe extern "C" fn(*mut RawContext, c_int, *mut c_void, *mut c_void, c_int) -> *mut RawCq;
type DestroyCqFn = unsafe extern "C" fn(*mut RawCq) -> c_int;
type CreateQpFn = unsafe extern "C" fn(*mut c_void, *mut QpInitAttr) -> *mut RawQp;
type ModifyQpFn = unsafe extern "C" fn(*mut RawQp, *mut QpAttr, c_int) -> c_int;
type DestroyQpFn = unsafe extern "C" fn(*mut RawQp) -> c_int;

/// The resolved entry points.
pub struct Verbs {
    path: String,
    get_device_list: GetDeviceListFn,
    free_device_list: FreeDeviceListFn,
    get_device_name: GetDeviceNameFn,
    open_device: OpenDeviceFn,
    close_device: CloseDeviceFn,
    query_port: QueryPortFn,
    query_gid: QueryGidFn,
    query_gid_ex: Option<QueryGidExFn>,
    alloc_pd: AllocPdFn,
    dealloc_pd: DeallocPdFn,
    reg_mr: RegMrFn,
    reg_mr_iova2: Option<RegMrIova2Fn>,
    reg_dmabuf_mr: Option<RegDmabufMrFn>,
    dereg_mr: DeregMrFn,
    create_cq: CreateCqFn,
    destroy_cq: DestroyCqFn,
    create_qp: CreateQpFn,
    modify_qp: ModifyQpFn,
    destroy_qp: DestroyQpFn,
}

// SAFETY: the entry points are plain function pointers into a library that stays loaded (the
// handle is never closed); libibverbs is thread-safe for the calls used here.
unsafe impl Send for Verbs {}
// SAFETY: as above.
unsafe impl Sync for Verbs {}

fn dl_error() -> String {
    // SAFETY: dlerror returns NULL or a valid C string owned by libc.
    let p = unsafe { libc::dlerror() };
    if p.is_null() {
        "unknown dlopen error".into()
    } else {
        // SAFETY: non-NULL C string from dlerror.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// The errno of the last failed libc/verbs call, as an `io::Error`.
fn last_os_error() -> std::io::Error {
    std::io::Error::last_os_error()
}

impl Verbs {
    fn load(path: &str) -> Result<Verbs, String> {
        let c = CString::new(path).map_err(|_| format!("{path}: NUL in library path"))?;
        // SAFETY: dlopen with a valid C string; the handle is intentionally never closed (the
        // entry points stay valid for the life of the process).
        let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if h.is_null() {
            return Err(format!("cannot load {path}: {}", dl_error()));
        }
        let sym = |name: &str| -> *mut c_void {
            let n = CString::new(name).unwrap();
            // SAFETY: `h` is a live handle from dlopen, `n` a valid C string.
            unsafe { libc::dlsym(h, n.as_ptr()) }
        };
        macro_rules! req {
            ($t:ty, $name:literal) => {{
                let p = sym($name);
                if p.is_null() {
                    return Err(format!("{path} lacks {}", $name));
                }
                // SAFETY: the symbol is the libibverbs function of this name, whose C
                // signature the target type mirrors.
                unsafe { std::mem::transmute::<*mut c_void, $t>(p) }
            }};
        }
        macro_rules! opt {
            ($t:ty, $name:literal) => {{
                let p = sym($name);
                // SAFETY: as in `req!`; a null pointer maps to None.
                (!p.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, $t>(p) })
            }};
        }
        Ok(Verbs {
            path: path.to_string(),
            get_device_list: req!(GetDeviceListFn, "ibv_get_device_list"),
            free_device_list: req!(FreeDeviceListFn, "ibv_free_device_list"),
            get_device_name: req!(GetDeviceNameFn, "ibv_get_device_name"),
            open_device: req!(OpenDeviceFn, "ibv_open_device"),
            close_device: req!(CloseDeviceFn, "ibv_close_device"),
            query_port: req!(QueryPortFn, "ibv_query_port"),
            query_gid: req!(QueryGidFn, "ibv_query_gid"),
            query_gid_ex: opt!(QueryGidExFn, "_ibv_query_gid_ex"),
            alloc_pd: req!(AllocPdFn, "ibv_alloc_pd"),
            dealloc_pd: req!(DeallocPdFn, "ibv_dealloc_pd"),
            reg_mr: req!(RegMrFn, "ibv_reg_mr"),
            reg_mr_iova2: opt!(RegMrIova2Fn, "ibv_reg_mr_iova2"),
            reg_dmabuf_mr: opt!(RegDmabufMrFn, "ibv_reg_dmabuf_mr"),
            dereg_mr: req!(DeregMrFn, "ibv_dereg_mr"),
            create_cq: req!(CreateCqFn, "ibv_create_cq"),
            destroy_cq: req!(DestroyCqFn, "ibv_destroy_cq"),
            create_qp: req!(CreateQpFn, "ibv_create_qp"),
            modify_qp: req!(ModifyQpFn, "ibv_modify_qp"),
            destroy_qp: req!(DestroyQpFn, "ibv_destroy_qp"),
        })
    }

    /// The library's path as loaded.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Whether `ibv_reg_mr_iova2` exists (relaxed ordering can be asked for).
    pub fn has_iova2(&self) -> bool {
        self.reg_mr_iova2.is_some()
    }

    /// Whether `ibv_reg_dmabuf_mr` exists.
    pub fn has_dmabuf(&self) -> bool {
        self.reg_dmabuf_mr.is_some()
    }

    /// The names of the RDMA devices, in the library's order.
    pub fn device_names(&'static self) -> Vec<String> {
        self.with_devices(|devs| devs.iter().map(|&d| self.name_of(d)).collect())
    }

    fn name_of(&self, d: *mut c_void) -> String {
        // SAFETY: `d` comes from the current device list; the name is a C string it owns.
        let p = unsafe { (self.get_device_name)(d) };
        if p.is_null() {
            return String::new();
        }
        // SAFETY: non-null NUL-terminated string owned by the device.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    fn with_devices<R>(&self, f: impl FnOnce(&[*mut c_void]) -> R) -> R {
        let mut n: c_int = 0;
        // SAFETY: `n` is a valid out-pointer; the list is freed below.
        let list = unsafe { (self.get_device_list)(&mut n) };
        if list.is_null() || n <= 0 {
            if !list.is_null() {
                // SAFETY: list from ibv_get_device_list.
                unsafe { (self.free_device_list)(list) };
            }
            return f(&[]);
        }
        // SAFETY: the list holds `n` device pointers.
        let devs = unsafe { std::slice::from_raw_parts(list, n as usize) }.to_vec();
        let r = f(&devs);
        // SAFETY: list from ibv_get_device_list, freed once; contexts opened from it stay valid.
        unsafe { (self.free_device_list)(list) };
        r
    }
}

/// libibverbs, loaded once per process: `GPUMPI_IBVERBS_LIB` when set, else
/// `libibverbs.so.1`. An `Err` says why (missing library, missing symbol).
pub fn verbs() -> Result<&'static Verbs, String> {
    static V: OnceLock<Result<Verbs, String>> = OnceLock::new();
    V.get_or_init(|| Verbs::load(&crate::config::snapshot().net.ibverbs_lib))
        .as_ref()
        .map_err(Clone::clone)
}

// ---------------------------------------------------------------------------------------------
// Safe wrappers.

/// An open device (`ibv_context`).
pub struct Context {
    v: &'static Verbs,
    raw: *mut RawContext,
    name: String,
}

// SAFETY: an ibv_context may be used from any thread (libibverbs locks internally).
unsafe impl Send for Context {}
// SAFETY: as above.
unsafe impl Sync for Context {}

impl Context {
    /// Opens the device called `name`.
    pub fn open(v: &'static Verbs, name: &str) -> Result<Arc<Context>, String> {
        let raw = v.with_devices(|devs| {
            let d = devs.iter().copied().find(|&d| v.name_of(d) == name);
            // SAFETY: `d` is a device of the live list.
            d.map(|d| unsafe { (v.open_device)(d) })
        });
        match raw {
            None => Err(format!("no RDMA device {name}")),
            Some(p) if p.is_null() => Err(format!("ibv_open_device({name}): {}", last_os_error())),
            Some(raw) => Ok(Arc::new(Context {
                v,
                raw,
                name: name.to_string(),
            })),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn query_port(&self, port: u8) -> Result<PortAttr, String> {
        let mut a = PortAttr::default();
        // SAFETY: live context; `a` is a full-size ibv_port_attr the call fills.
        let r = unsafe { (self.v.query_port)(self.raw, port, &mut a) };
        if r != 0 {
            return Err(format!("ibv_query_port({}:{port}) failed ({r})", self.name));
        }
        Ok(a)
    }

    /// The GID at `index` of `port`, or `None` where the index is outside the table.
    pub fn query_gid(&self, port: u8, index: i32) -> Option<[u8; 16]> {
        let mut g = [0u8; 16];
        // SAFETY: live context; `g` is a 16-byte union ibv_gid.
        let r = unsafe { (self.v.query_gid)(self.raw, port, index, &mut g) };
        (r == 0).then_some(g)
    }

    /// The type of the GID at `index` (`GID_TYPE_*`): `_ibv_query_gid_ex` where the library has
    /// it, else sysfs (`/sys/class/infiniband/DEV/ports/P/gid_attrs/types/I`); `None` if neither
    /// says.
    pub fn gid_type(&self, port: u8, index: i32) -> Option<u32> {
        if let Some(f) = self.v.query_gid_ex {
            let mut e = GidEntry::default();
            // SAFETY: live context; `e` is an ibv_gid_entry of the size passed.
            let r = unsafe {
                f(
                    self.raw,
                    port as u32,
                    index as u32,
                    &mut e,
                    0,
                    std::mem::size_of::<GidEntry>(),
                )
            };
            return (r == 0).then_some(e.gid_type);
        }
        let p = format!(
            "/sys/class/infiniband/{}/ports/{port}/gid_attrs/types/{index}",
            self.name
        );
        let t = std::fs::read_to_string(p).ok()?;
        let t = t.trim().to_ascii_lowercase();
        Some(if t.contains("v2") {
            GID_TYPE_ROCE_V2
        } else if t.contains("roce") {
            GID_TYPE_ROCE_V1
        } else {
            GID_TYPE_IB
        })
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: every PD/CQ/QP holds an Arc of this context, so none is alive any more.
        unsafe { (self.v.close_device)(self.raw) };
    }
}

/// A protection domain.
pub struct Pd {
    ctx: Arc<Context>,
    raw: *mut c_void,
}

// SAFETY: verbs objects may be used from any thread.
unsafe impl Send for Pd {}
// SAFETY: as above.
unsafe impl Sync for Pd {}

impl Pd {
    pub fn new(ctx: &Arc<Context>) -> Result<Arc<Pd>, String> {
        // SAFETY: live context.
        let raw = unsafe { (ctx.v.alloc_pd)(ctx.raw) };
        if raw.is_null() {
            return Err(format!("ibv_alloc_pd({}): {}", ctx.name, last_os_error()));
        }
        Ok(Arc::new(Pd {
            ctx: ctx.clone(),
            raw,
        }))
    }

    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }
}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: MRs and QPs hold an Arc of this PD: none is alive.
        unsafe { (self.ctx.v.dealloc_pd)(self.raw) };
    }
}

/// How a memory region is registered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegKind {
    /// `ibv_reg_mr` (host memory, or device memory where nvidia-peermem is loaded).
    Plain,
    /// `ibv_reg_mr_iova2` with the address as IOVA (relaxed ordering allowed).
    Iova2,
    /// `ibv_reg_dmabuf_mr(fd, offset)` with the address as IOVA.
    DmaBuf { fd: i32, offset: u64 },
}

/// A registered memory region. Deregistered on drop.
pub struct MemRegion {
    pd: Arc<Pd>,
    raw: *mut RawMr,
    pub lkey: u32,
    pub rkey: u32,
    pub addr: u64,
    pub len: usize,
}

// SAFETY: an ibv_mr may be used and released from any thread.
unsafe impl Send for MemRegion {}
// SAFETY: as above.
unsafe impl Sync for MemRegion {}

/// A failed registration: the call, the errno and the text.
#[derive(Debug, Clone)]
pub struct RegError {
    pub call: &'static str,
    pub errno: i32,
    pub msg: String,
}

impl MemRegion {
    /// Registers `addr..addr+len` with `access` (`ACCESS_*`) through the call `how` names.
    /// The memory is not touched here; the NIC reads and writes it later as `access` allows,
    /// and the region must stay allocated until this object is dropped (the caller's contract,
    /// as for any DMA mapping).
    pub fn register(
        pd: &Arc<Pd>,
        addr: u64,
        len: usize,
        access: i32,
        how: RegKind,
    ) -> Result<MemRegion, RegError> {
        let v = pd.ctx.v;
        let (call, raw) = match how {
            // SAFETY: live PD; libibverbs only records the range (it pins host pages, which
            // stay owned by the caller).
            RegKind::Plain => ("ibv_reg_mr", unsafe {
                (v.reg_mr)(pd.raw, addr as *mut c_void, len, access)
            }),
            RegKind::Iova2 => match v.reg_mr_iova2 {
                // SAFETY: as above.
                Some(f) => ("ibv_reg_mr_iova2", unsafe {
                    f(pd.raw, addr as *mut c_void, len, addr, access as u32)
                }),
                None => {
                    return Err(RegError {
                        call: "ibv_reg_mr_iova2",
                        errno: libc::ENOSYS,
                        msg: format!("{} has no ibv_reg_mr_iova2", v.path),
                    })
                }
            },
            RegKind::DmaBuf { fd, offset } => match v.reg_dmabuf_mr {
                // SAFETY: live PD; `fd` is a dma-buf descriptor the caller keeps open for the
                // call (the kernel takes its own reference).
                Some(f) => ("ibv_reg_dmabuf_mr", unsafe {
                    f(pd.raw, offset, len, addr, fd, access)
                }),
                None => {
                    return Err(RegError {
                        call: "ibv_reg_dmabuf_mr",
                        errno: libc::ENOSYS,
                        msg: format!("{} has no ibv_reg_dmabuf_mr", v.path),
                    })
                }
            },
        };
        if raw.is_null() {
            let e = last_os_error();
            return Err(RegError {
                call,
                errno: e.raw_os_error().unwrap_or(0),
                msg: e.to_string(),
            });
        }
        // SAFETY: non-null ibv_mr returned by the call.
        let (lkey, rkey) = unsafe { ((*raw).lkey, (*raw).rkey) };
        Ok(MemRegion {
            pd: pd.clone(),
            raw,
            lkey,
            rkey,
            addr,
            len,
        })
    }
}

impl Drop for MemRegion {
    fn drop(&mut self) {
        // SAFETY: the MR is deregistered once; the caller no longer posts work using it.
        unsafe { (self.pd.ctx.v.dereg_mr)(self.raw) };
    }
}

/// A completion queue.
pub struct Cq {
    ctx: Arc<Context>,
    raw: *mut RawCq,
    poll: PollCqFn,
}

// SAFETY: a CQ may be polled from any thread (one at a time: `poll` takes `&self` but the
// owner serializes its use).
unsafe impl Send for Cq {}
// SAFETY: as above.
unsafe impl Sync for Cq {}

impl Cq {
    pub fn new(ctx: &Arc<Context>, entries: usize) -> Result<Arc<Cq>, String> {
        // SAFETY: live context; no completion channel, no event vector.
        let raw = unsafe {
            (ctx.v.create_cq)(
                ctx.raw,
                entries as c_int,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
        };
        if raw.is_null() {
            return Err(format!(
                "ibv_create_cq({}, {entries}): {}",
                ctx.name,
                last_os_error()
            ));
        }
        // SAFETY: the CQ's context is the live context whose ops table the provider filled.
        let poll = unsafe { (*(*raw).context).ops.poll_cq };
        let Some(poll) = poll else {
            // SAFETY: CQ just created.
            unsafe { (ctx.v.destroy_cq)(raw) };
            return Err(format!("{}: provider has no poll_cq", ctx.name));
        };
        Ok(Arc::new(Cq {
            ctx: ctx.clone(),
            raw,
            poll,
        }))
    }

    /// Polls up to `wc.len()` completions without blocking: the number written to `wc`, or an
    /// error when the provider reports one (a CQ overrun, for example).
    pub fn poll(&self, wc: &mut [Wc]) -> Result<usize, String> {
        // SAFETY: live CQ; `wc` has room for `wc.len()` entries (this is ibv_poll_cq).
        let n = unsafe { (self.poll)(self.raw, wc.len() as c_int, wc.as_mut_ptr()) };
        if n < 0 {
            return Err(format!(
                "ibv_poll_cq on {} failed ({n}): completion queue overrun or device error",
                self.ctx.name
            ));
        }
        Ok(n as usize)
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: the QPs that use this CQ hold an Arc of it: none is alive.
        unsafe { (self.ctx.v.destroy_cq)(self.raw) };
    }
}

/// Where the remote end of a queue pair is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Dest {
    pub qpn: u32,
    pub psn: u32,
    pub lid: u16,
    pub gid: [u8; 16],
    /// Use the GRH (RoCE, or IB across subnets).
    pub global: bool,
}

/// A reliable-connected queue pair.
pub struct Qp {
    pd: Arc<Pd>,
    _cq: Arc<Cq>,
    raw: *mut RawQp,
    post_send: PostSendFn,
    post_recv: PostRecvFn,
    pub qpn: u32,
}

// SAFETY: a QP may be posted to from any thread (its owner serializes use).
unsafe impl Send for Qp {}
// SAFETY: as above.
unsafe impl Sync for Qp {}

/// One remote operation for [`Qp::post_send`].
#[derive(Clone, Copy, Debug)]
pub struct Op {
    pub wr_id: u64,
    /// `WR_RDMA_WRITE`, `WR_RDMA_WRITE_WITH_IMM`, `WR_RDMA_READ`, `WR_SEND`.
    pub opcode: u32,
    pub local: Sge,
    pub remote_addr: u64,
    pub rkey: u32,
    /// Immediate data (host order; sent in network order).
    pub imm: u32,
    pub signaled: bool,
}

impl Qp {
    /// Creates an RC queue pair whose send and receive completions go to `cq`.
    pub fn new_rc(pd: &Arc<Pd>, cq: &Arc<Cq>, max_send: u32, max_recv: u32) -> Result<Qp, String> {
        let mut ia = QpInitAttr {
            qp_context: std::ptr::null_mut(),
            send_cq: cq.raw as *mut c_void,
            recv_cq: cq.raw as *mut c_void,
            srq: std::ptr::null_mut(),
            cap: QpCap {
                max_send_wr: max_send,
                max_recv_wr: max_recv,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            qp_type: QPT_RC,
            sq_sig_all: 0,
        };
        // SAFETY: live PD and CQ; `ia` is a valid ibv_qp_init_attr.
        let raw = unsafe { (pd.ctx.v.create_qp)(pd.raw, &mut ia) };
        if raw.is_null() {
            return Err(format!(
                "ibv_create_qp({}): {}",
                pd.ctx.name,
                last_os_error()
            ));
        }
        // SAFETY: the new QP's context is the PD's live context; read its ops as verbs.h does.
        let (qpn, ps, pr) = unsafe {
            (
                (*raw).qp_num,
                (*(*raw).context).ops.post_send,
                (*(*raw).context).ops.post_recv,
            )
        };
        let (Some(post_send), Some(post_recv)) = (ps, pr) else {
            // SAFETY: QP just created, never used.
            unsafe { (pd.ctx.v.destroy_qp)(raw) };
            return Err(format!(
                "{}: provider lacks post_send/post_recv",
                pd.ctx.name
            ));
        };
        Ok(Qp {
            pd: pd.clone(),
            _cq: cq.clone(),
            raw,
            post_send,
            post_recv,
            qpn,
        })
    }

    fn modify(&self, a: &mut QpAttr, mask: c_int, what: &str) -> Result<(), String> {
        // SAFETY: live QP, valid attribute struct.
        let r = unsafe { (self.pd.ctx.v.modify_qp)(self.raw, a, mask) };
        if r != 0 {
            return Err(format!(
                "ibv_modify_qp({} qp {}) to {what} failed: {}",
                self.pd.ctx.name,
                self.qpn,
                std::io::Error::from_raw_os_error(r)
            ));
        }
        Ok(())
    }

    /// RESET -> INIT on `port` with remote read/write access.
    pub fn to_init(&self, port: u8) -> Result<(), String> {
        let mut a = QpAttr {
            qp_state: QPS_INIT,
            pkey_index: 0,
            port_num: port,
            qp_access_flags: (ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ) as u32,
            ..Default::default()
        };
        self.modify(
            &mut a,
            QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS,
            "INIT",
        )
    }

    /// INIT -> RTR towards `dest` with path MTU `mtu` (`IBV_MTU_*`, 1..=5) and the local
    /// GID index `sgid` (used with the GRH).
    pub fn to_rtr(&self, port: u8, dest: &Dest, mtu: u32, sgid: u8) -> Result<(), String> {
        let mut a = QpAttr {
            qp_state: QPS_RTR,
            path_mtu: mtu,
            dest_qp_num: dest.qpn,
            rq_psn: dest.psn,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            ..Default::default()
        };
        a.ah_attr.dlid = dest.lid;
        a.ah_attr.port_num = port;
        if dest.global {
            a.ah_attr.is_global = 1;
            a.ah_attr.dgid = dest.gid;
            a.ah_attr.sgid_index = sgid;
            a.ah_attr.hop_limit = 255;
        }
        self.modify(
            &mut a,
            QP_STATE
                | QP_AV
                | QP_PATH_MTU
                | QP_DEST_QPN
                | QP_RQ_PSN
                | QP_MAX_DEST_RD_ATOMIC
                | QP_MIN_RNR_TIMER,
            "RTR",
        )
    }

    /// RTR -> RTS with the send PSN `psn`.
    pub fn to_rts(&self, psn: u32, timeout: u8, retry: u8) -> Result<(), String> {
        let mut a = QpAttr {
            qp_state: QPS_RTS,
            timeout,
            retry_cnt: retry,
            rnr_retry: 7,
            sq_psn: psn,
            max_rd_atomic: 1,
            ..Default::default()
        };
        self.modify(
            &mut a,
            QP_STATE | QP_TIMEOUT | QP_RETRY_CNT | QP_RNR_RETRY | QP_SQ_PSN | QP_MAX_QP_RD_ATOMIC,
            "RTS",
        )
    }

    /// Moves the QP to the error state (outstanding work completes with flush errors).
    pub fn to_error(&self) -> Result<(), String> {
        let mut a = QpAttr {
            qp_state: QPS_ERR,
            ..Default::default()
        };
        self.modify(&mut a, QP_STATE, "ERR")
    }

    /// Posts `ops` as one chain of send work requests (ibv_post_send through the context's
    /// ops table).
    ///
    /// # Safety
    /// Each `local` range must lie in a region registered with its `lkey` and stay valid (and,
    /// for writes and sends, unchanged; for reads, unaccessed) until its completion is polled
    /// or the QP is destroyed; `remote_addr`/`rkey` name memory the peer registered.
    pub unsafe fn post_send(&self, ops: &[Op]) -> Result<(), String> {
        let mut sges: smallvec::SmallVec<[Sge; 8]> = ops.iter().map(|o| o.local).collect();
        let mut wrs: smallvec::SmallVec<[SendWr; 8]> = ops
            .iter()
            .zip(sges.iter_mut())
            .map(|(o, s)| SendWr {
                wr_id: o.wr_id,
                next: std::ptr::null_mut(),
                sg_list: s,
                num_sge: if o.local.length == 0 { 0 } else { 1 },
                opcode: o.opcode,
                send_flags: if o.signaled { SEND_SIGNALED } else { 0 },
                imm_data: o.imm.to_be(),
                remote_addr: o.remote_addr,
                rkey: o.rkey,
                _wr_rest: [0; 5],
                _qp_type: 0,
                _bind_mw: [0; 6],
            })
            .collect();
        for i in 1..wrs.len() {
            let p: *mut SendWr = &mut wrs[i];
            wrs[i - 1].next = p;
        }
        if wrs.is_empty() {
            return Ok(());
        }
        let mut bad: *mut SendWr = std::ptr::null_mut();
        // SAFETY: live QP; the WR chain and its SGEs live on this frame for the call (the
        // provider copies them); the caller guarantees the memory they name.
        let r = unsafe { (self.post_send)(self.raw, wrs.as_mut_ptr(), &mut bad) };
        if r != 0 {
            return Err(format!(
                "ibv_post_send on {} qp {}: {}",
                self.pd.ctx.name,
                self.qpn,
                std::io::Error::from_raw_os_error(r)
            ));
        }
        Ok(())
    }

    /// Posts receive work requests with ids `ids` and no buffer (they only take completions of
    /// RDMA writes with immediate).
    pub fn post_recv_empty(&self, ids: &[u64]) -> Result<(), String> {
        for &id in ids {
            let mut wr = RecvWr {
                wr_id: id,
                next: std::ptr::null_mut(),
                sg_list: std::ptr::null_mut(),
                num_sge: 0,
            };
            let mut bad: *mut RecvWr = std::ptr::null_mut();
            // SAFETY: live QP; a zero-SGE receive names no memory.
            let r = unsafe { (self.post_recv)(self.raw, &mut wr, &mut bad) };
            if r != 0 {
                return Err(format!(
                    "ibv_post_recv on {} qp {}: {}",
                    self.pd.ctx.name,
                    self.qpn,
                    std::io::Error::from_raw_os_error(r)
                ));
            }
        }
        Ok(())
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        // SAFETY: destroyed once; its CQ and PD outlive it through the Arcs held.
        unsafe { (self.pd.ctx.v.destroy_qp)(self.raw) };
    }
}

/// Host memory that the NIC writes while this process reads it (credit FIFOs, size slots): a
/// page-aligned, zeroed allocation read and written only with volatile accesses.
pub struct NicMem {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: plain memory; accesses are volatile and the owner serializes them.
unsafe impl Send for NicMem {}

impl NicMem {
    pub fn new(len: usize) -> NicMem {
        let len = len.max(1).next_multiple_of(4096);
        let layout = std::alloc::Layout::from_size_align(len, 4096).unwrap();
        // SAFETY: non-zero size layout.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        NicMem { ptr, len }
    }

    pub fn addr(&self) -> u64 {
        self.ptr as u64
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    /// Reads the u64 at byte `off` (8-aligned).
    pub fn load(&self, off: usize) -> u64 {
        assert!(off + 8 <= self.len && off.is_multiple_of(8));
        std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        // SAFETY: in bounds and aligned (checked); the NIC may write it concurrently, hence
        // the volatile read of a whole word.
        unsafe { std::ptr::read_volatile(self.ptr.add(off) as *const u64) }
    }

    /// Writes the u64 at byte `off` (8-aligned).
    pub fn store(&self, off: usize, v: u64) {
        assert!(off + 8 <= self.len && off.is_multiple_of(8));
        // SAFETY: in bounds and aligned (checked).
        unsafe { std::ptr::write_volatile(self.ptr.add(off) as *mut u64, v) };
        std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
    }
}

impl Drop for NicMem {
    fn drop(&mut self) {
        let layout = std::alloc::Layout::from_size_align(self.len, 4096).unwrap();
        // SAFETY: allocated in `new` with this layout; the MRs over it are dropped first by
        // the owner.
        unsafe { std::alloc::dealloc(self.ptr, layout) };
    }
}

/// The soft and hard `RLIMIT_MEMLOCK` in bytes (`None` = unlimited).
pub fn memlock_limit() -> (Option<u64>, Option<u64>) {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: valid out-pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut r) } != 0 {
        return (None, None);
    }
    let f = |v: libc::rlim_t| (v != libc::RLIM_INFINITY).then_some(v);
    (f(r.rlim_cur), f(r.rlim_max))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn struct_layouts_match_rdma_core_lp64() {
        assert_eq!(size_of::<SendWr>(), 128);
        assert_eq!(offset_of!(SendWr, imm_data), 36);
        assert_eq!(offset_of!(SendWr, remote_addr), 40);
        assert_eq!(offset_of!(SendWr, rkey), 48);
        assert_eq!(size_of::<RecvWr>(), 32);
        assert_eq!(size_of::<Wc>(), 48);
        assert_eq!(offset_of!(Wc, imm_data), 24);
        assert_eq!(offset_of!(Wc, wc_flags), 36);
        assert_eq!(size_of::<AhAttr>(), 32);
        assert_eq!(size_of::<QpAttr>(), 140);
        assert_eq!(offset_of!(QpAttr, ah_attr), 56);
        assert_eq!(offset_of!(QpAttr, pkey_index), 120);
        assert_eq!(offset_of!(QpAttr, port_num), 129);
        assert_eq!(offset_of!(QpAttr, rate_limit), 136);
        assert_eq!(size_of::<QpInitAttr>(), 64);
        assert_eq!(offset_of!(PortAttr, link_layer), 46);
        assert_eq!(size_of::<PortAttr>(), 56);
        assert_eq!(size_of::<ContextOps>(), 32 * 8);
        assert_eq!(offset_of!(RawContext, ops), 8);
        assert_eq!(offset_of!(RawQp, qp_num), 52);
        assert_eq!(offset_of!(RawMr, lkey), 36);
        assert_eq!(size_of::<GidEntry>(), 32);
    }

    #[test]
    fn a_missing_library_is_an_error_not_a_panic() {
        let e = Verbs::load("/nonexistent/libibverbs.so.1").err().unwrap();
        assert!(
            e.contains("cannot load /nonexistent/libibverbs.so.1"),
            "{e}"
        );
    }
}
