//! The CUDA C primitives of `kernels/*.cu`, compiled by build.rs into a fatbin embedded in the
//! library and loaded into a device's primary context at its first use.
//!
//! The primitives: `copy` (bytes) and `reduce_copy` (`dst[i] = a[i] op b[i]` for sum, prod, min,
//! max on int32, int64, float, double, half, bfloat16; in place when `dst == b`), `reduce_n`,
//! `copy_segs` (collectives) and `pack` (derived datatypes, src/gpu/pack.rs). When the build
//! found no nvcc, [`embedded`] is false and callers stage reductions through the host.

use super::Gpu;
use crate::mpi::datatype::{Basic, Elem};
use crate::mpi::op::BuiltinOp;
use crate::sys::cuda::{self, Function, Stream};
use std::ffi::c_void;

#[cfg(gpumpi_kernels)]
static FATBIN: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/kernels.fatbin"));
#[cfg(not(gpumpi_kernels))]
static FATBIN: &[u8] = &[];

/// Whether the library was built with its kernels.
pub fn embedded() -> bool {
    !FATBIN.is_empty()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KOp {
    Sum,
    Prod,
    Min,
    Max,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KType {
    I32,
    I64,
    F32,
    F64,
    F16,
    Bf16,
}

const OPS: [KOp; 4] = [KOp::Sum, KOp::Prod, KOp::Min, KOp::Max];
const TYPES: [KType; 6] = [
    KType::I32,
    KType::I64,
    KType::F32,
    KType::F64,
    KType::F16,
    KType::Bf16,
];

impl KOp {
    /// The operation's code in the kernels' switches (kernels/resident_mid.cuh
    /// `mid_reduce_op`, kernels/stream_ar.cuh): its position in `OPS`.
    pub fn code(self) -> u32 {
        OPS.iter()
            .position(|&o| o == self)
            .expect("every KOp is in OPS") as u32
    }

    fn name(self) -> &'static str {
        match self {
            KOp::Sum => "sum",
            KOp::Prod => "prod",
            KOp::Min => "min",
            KOp::Max => "max",
        }
    }
}

impl KType {
    /// The element type's code in the kernels' switches (kernels/resident_mid.cuh
    /// `mid_reduce_any`, kernels/stream_ar.cuh): its position in `TYPES`.
    pub fn code(self) -> u32 {
        TYPES
            .iter()
            .position(|&t| t == self)
            .expect("every KType is in TYPES") as u32
    }

    fn name(self) -> &'static str {
        match self {
            KType::I32 => "i32",
            KType::I64 => "i64",
            KType::F32 => "f32",
            KType::F64 => "f64",
            KType::F16 => "f16",
            KType::Bf16 => "bf16",
        }
    }
    pub fn size(self) -> usize {
        match self {
            KType::I32 | KType::F32 => 4,
            KType::I64 | KType::F64 => 8,
            KType::F16 | KType::Bf16 => 2,
        }
    }
}

/// The kernel for a builtin reduction on an element type, if there is one.
pub fn kernel_for(op: BuiltinOp, e: Elem) -> Option<(KOp, KType)> {
    let k = match op {
        BuiltinOp::Sum => KOp::Sum,
        BuiltinOp::Prod => KOp::Prod,
        BuiltinOp::Min => KOp::Min,
        BuiltinOp::Max => KOp::Max,
        _ => return None,
    };
    let Elem::Basic(b) = e else { return None };
    let t = match b {
        Basic::Float => KType::F32,
        Basic::Double => KType::F64,
        Basic::Float16 => KType::F16,
        Basic::Bfloat16 => KType::Bf16,
        Basic::Int32 => KType::I32,
        Basic::Int64 => KType::I64,
        Basic::Int if b.size() == 4 => KType::I32,
        Basic::Long | Basic::LongLong if b.size() == 8 => KType::I64,
        _ => return None,
    };
    Some((k, t))
}

/// The kernels of the stream-ordered allreduce, one per algorithm family.
#[derive(Clone, Copy, Debug)]
pub struct StreamArKernels {
    pub one_shot: Function,
    pub two_shot: Function,
    pub ll: Function,
    pub pipe: Function,
    /// Bcast, allgather and alltoall (kernels/stream_coll.cuh).
    pub coll: Function,
    /// Reduce_scatter_block (kernels/stream_coll.cuh).
    pub reduce_scatter: Function,
}

/// The loaded kernels of one device.
pub struct Kernels {
    reduce: Vec<Function>,
    reduce_n: Vec<Function>,
    copy: Function,
    copy_segs: Function,
    /// The pack kernel of derived datatypes (kernels/pack.cuh).
    pack: Option<Function>,
    /// The resident kernel of small collectives (kernels/resident.cuh).
    pub resident: Option<Function>,
    /// The wide resident kernel of mid-size collectives (kernels/resident_mid.cuh).
    pub resident_mid: Option<Function>,
    /// The kernel-driven allreduce through host memory (kernels/hostar.cuh), per (op, type).
    host_ar: Vec<Function>,
    /// The stream-ordered allreduce of `MPIX_Allreduce_enqueue` (kernels/stream_ar.cuh): the
    /// kernels of flagged rounds (one-shot, two-shot), LL words and pipelined calls.
    pub stream_ar: Option<StreamArKernels>,
}

/// `struct HostAr` of kernels/hostar.cuh: one rank's kernel-driven allreduce through pinned
/// shared host memory (src/gpu/hostmem/mod.rs).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct HostAr {
    pub input: u64,
    pub out: u64,
    pub elems: u64,
    pub qe: u64,
    pub base: u64,
    pub rounds: u64,
    pub slot: u64,
    pub reg: [u64; MAXP],
    pub n: i32,
    pub me: i32,
    pub depth: i32,
}

/// Most operands of one `reduce_n` launch and most segments of one `copy_segs` launch
/// (`GPUMPI_MAXP` in kernels/coll.cuh).
pub const MAXP: usize = 8;

/// `struct Srcs` (and `struct Dsts`, the same layout) of kernels/coll.cuh.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Srcs {
    p: [u64; MAXP],
}

// The layouts of kernels/coll.cuh and kernels/hostar.cuh (checked against the headers by
// gpu::kabi's test).
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<Srcs>() == 8 * MAXP);
    assert!(size_of::<Seg>() == 24 && offset_of!(Seg, src) == 8 && offset_of!(Seg, len) == 16);
    assert!(size_of::<HostAr>() == 136 && offset_of!(HostAr, reg) == 56);
    assert!(offset_of!(HostAr, n) == 56 + 8 * MAXP && offset_of!(HostAr, depth) == 64 + 8 * MAXP);
};

/// `Srcs`, `Dsts` and `Segs` as gpu::kabi's test holds them against kernels/coll.cuh.
#[cfg(test)]
pub(crate) fn layouts() -> Vec<super::kabi::Layout> {
    use std::mem::size_of;
    vec![
        ("Srcs", size_of::<Srcs>(), vec![("p", 0)]),
        ("Dsts", size_of::<Srcs>(), vec![("p", 0)]),
        ("Segs", size_of::<[Seg; MAXP]>(), vec![("s", 0)]),
    ]
}

/// One `struct Seg` of kernels/coll.cuh: copy `len` bytes from `src` to `dst`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct Seg {
    pub dst: u64,
    pub src: u64,
    pub len: u64,
}

impl Kernels {
    /// Load the embedded fatbin into `ctx` (must be current).
    pub(super) fn load() -> Result<Kernels, String> {
        if !embedded() {
            return Err("gpumpi was built without CUDA kernels (no nvcc at build time)".into());
        }
        // cuModuleLoadData wants the image suitably aligned: copy it into u64 words.
        let mut words = vec![0u64; FATBIN.len().div_ceil(8)];
        // SAFETY: `words` has at least FATBIN.len() bytes; the regions do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(
                FATBIN.as_ptr(),
                words.as_mut_ptr() as *mut u8,
                FATBIN.len(),
            )
        };
        // SAFETY: reinterpreting the u64 buffer as bytes of the same length.
        let image =
            unsafe { std::slice::from_raw_parts(words.as_ptr() as *const u8, FATBIN.len()) };
        let m = cuda::module_load(image).map_err(|e| e.to_string())?;
        // One function per (op, type) of a kernel family, in `index` order.
        let family = |prefix: &str| -> Result<Vec<Function>, String> {
            let mut v = Vec::with_capacity(OPS.len() * TYPES.len());
            for op in OPS {
                for t in TYPES {
                    let name = format!("{prefix}_{}_{}\0", op.name(), t.name());
                    let c = std::ffi::CStr::from_bytes_with_nul(name.as_bytes()).unwrap();
                    v.push(cuda::module_function(m, c).map_err(|e| e.to_string())?);
                }
            }
            Ok(v)
        };
        let reduce = family("gpumpi_reduce")?;
        let reduce_n = family("gpumpi_reduce_n")?;
        let host_ar = family("gpumpi_host_allreduce")?;
        let copy = cuda::module_function(m, c"gpumpi_copy").map_err(|e| e.to_string())?;
        let copy_segs = cuda::module_function(m, c"gpumpi_copy_segs").map_err(|e| e.to_string())?;
        let resident = cuda::module_function(m, c"gpumpi_resident").ok();
        let resident_mid = cuda::module_function(m, c"gpumpi_resident_mid").ok();
        let pack = cuda::module_function(m, c"gpumpi_pack").ok();
        let stream_ar = (|| {
            Some(StreamArKernels {
                one_shot: cuda::module_function(m, c"gpumpi_stream_allreduce").ok()?,
                two_shot: cuda::module_function(m, c"gpumpi_stream_allreduce_two").ok()?,
                ll: cuda::module_function(m, c"gpumpi_stream_allreduce_ll").ok()?,
                pipe: cuda::module_function(m, c"gpumpi_stream_allreduce_pipe").ok()?,
                coll: cuda::module_function(m, c"gpumpi_stream_coll").ok()?,
                reduce_scatter: cuda::module_function(m, c"gpumpi_stream_reduce_scatter").ok()?,
            })
        })();
        Ok(Kernels {
            reduce,
            reduce_n,
            copy,
            copy_segs,
            pack,
            resident,
            resident_mid,
            host_ar,
            stream_ar,
        })
    }

    /// Enqueue the kernel-driven allreduce `a` (kernels/hostar.cuh) with `grid` blocks (at most
    /// 128) of 512 threads on `s`.
    ///
    /// # Safety
    /// `a` describes live device buffers and every rank's registered kernel area; every rank
    /// of the communicator launches its own with the same geometry; the context owning `s` is
    /// current.
    pub unsafe fn host_allreduce_async(
        &self,
        op: KOp,
        t: KType,
        a: &HostAr,
        grid: u32,
        s: Stream,
    ) -> cuda::CuResult<()> {
        assert!((1..=128).contains(&grid));
        let f = self.host_ar[Self::index(op, t)];
        let mut a = *a;
        let mut params: [*mut c_void; 1] = [&mut a as *mut HostAr as *mut c_void];
        cuda::launch(f, grid, 512, &mut params, s)
    }

    fn index(op: KOp, t: KType) -> usize {
        let i = OPS.iter().position(|&o| o == op).unwrap();
        let j = TYPES.iter().position(|&x| x == t).unwrap();
        i * TYPES.len() + j
    }

    fn reduce_fn(&self, op: KOp, t: KType) -> Function {
        self.reduce[Self::index(op, t)]
    }

    /// Enqueue `dsts[j][i] = srcs[0][i] op srcs[1][i] op ...` for `n` elements and every
    /// destination on `s` (no synchronization). `grid` bounds the blocks used.
    ///
    /// # Safety
    /// Every pointer is device-accessible from the current context for `n` elements of `t`;
    /// 1 <= srcs.len(), dsts.len() <= MAXP; the context owning `s` is current.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn reduce_n_async(
        &self,
        op: KOp,
        t: KType,
        dsts: &[usize],
        srcs: &[usize],
        n: usize,
        max_grid: u32,
        s: Stream,
    ) -> cuda::CuResult<()> {
        assert!(!srcs.is_empty() && srcs.len() <= MAXP);
        assert!(!dsts.is_empty() && dsts.len() <= MAXP);
        if n == 0 {
            return Ok(());
        }
        let f = self.reduce_n[Self::index(op, t)];
        let (mut a, mut o) = (Srcs::default(), Srcs::default());
        for (slot, &p) in a.p.iter_mut().zip(srcs) {
            *slot = p as u64;
        }
        for (slot, &p) in o.p.iter_mut().zip(dsts) {
            *slot = p as u64;
        }
        let (mut m, mut k, mut n64) = (dsts.len() as i32, srcs.len() as i32, n as u64);
        let vecs = (n * t.size()).div_ceil(16);
        let (grid, block) = grid_for_vecs(vecs, max_grid);
        let mut params: [*mut c_void; 5] = [
            &mut o as *mut Srcs as *mut c_void,
            &mut m as *mut i32 as *mut c_void,
            &mut a as *mut Srcs as *mut c_void,
            &mut k as *mut i32 as *mut c_void,
            &mut n64 as *mut u64 as *mut c_void,
        ];
        cuda::launch(f, grid, block, &mut params, s)
    }

    /// Enqueue the copies `segs` (at most MAXP, empty ones allowed) as one launch on `s`.
    ///
    /// # Safety
    /// Every segment's ranges are device-accessible from the current context; the context
    /// owning `s` is current.
    pub unsafe fn copy_segs_async(
        &self,
        segs: &[Seg],
        max_grid: u32,
        s: Stream,
    ) -> cuda::CuResult<()> {
        for group in segs.chunks(MAXP) {
            let mut a = [Seg::default(); MAXP];
            let mut used = 0;
            let mut longest = 0;
            for sg in group.iter().filter(|g| g.len > 0) {
                a[used] = *sg;
                used += 1;
                longest = longest.max(sg.len as usize);
            }
            if used == 0 {
                continue;
            }
            let per = (max_grid / used as u32).max(1);
            let (grid, block) = grid_for_vecs(longest.div_ceil(16), per);
            let mut params: [*mut c_void; 1] = [a.as_mut_ptr() as *mut c_void];
            cuda::launch_2d(self.copy_segs, (grid, used as u32), block, &mut params, s)?;
        }
        Ok(())
    }

    /// Whether the pack kernel is loaded.
    pub fn has_pack(&self) -> bool {
        self.pack.is_some()
    }

    /// Enqueue the pack kernel (kernels/pack.cuh) for `d` on `s`, [`super::layout::grid`]
    /// blocks of [`super::layout::BLOCK`] threads. Returns false without the kernel.
    ///
    /// # Safety
    /// Every byte `d` moves is device-accessible from the current context (the user's buffer,
    /// the packed bytes, the run list); the context owning `s` is current.
    pub unsafe fn pack_async(
        &self,
        d: &super::layout::PackDesc,
        s: Stream,
    ) -> cuda::CuResult<bool> {
        let Some(f) = self.pack else {
            return Ok(false);
        };
        if d.items == 0 {
            return Ok(true);
        }
        let mut a = *d;
        let mut params: [*mut c_void; 1] = [&mut a as *mut super::layout::PackDesc as *mut c_void];
        cuda::launch(
            f,
            super::layout::grid(d),
            super::layout::BLOCK,
            &mut params,
            s,
        )?;
        Ok(true)
    }
}

/// Blocks of 512 threads for `vecs` 16-byte vectors, at most `max_grid` blocks.
fn grid_for_vecs(vecs: usize, max_grid: u32) -> (u32, u32) {
    let block = 512u32;
    let grid = vecs
        .div_ceil(block as usize)
        .clamp(1, max_grid.max(1) as usize) as u32;
    (grid, block)
}

fn grid_for(n: usize) -> (u32, u32) {
    let block = 256u32;
    let grid = n.div_ceil(block as usize).clamp(1, 2048) as u32;
    (grid, block)
}

impl Gpu {
    /// `dst[i] = a[i] op b[i]` for `n` elements of device memory on device `ordinal`, on
    /// gpumpi's stream, synchronized before returning.
    ///
    /// # Safety
    /// `dst`, `a`, `b` are device-accessible memory of `n` elements of `t` on that device.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn reduce_copy(
        &self,
        ordinal: i32,
        op: KOp,
        t: KType,
        dst: usize,
        a: usize,
        b: usize,
        n: usize,
    ) -> Result<(), String> {
        if n == 0 {
            return Ok(());
        }
        let d = self.device(ordinal)?;
        let k = self.kernels(ordinal)?;
        let f = k.reduce_fn(op, t);
        let (mut dst, mut a, mut b, mut n64) = (dst as u64, a as u64, b as u64, n as u64);
        let (grid, block) = grid_for(n);
        cuda::with_context(d.ctx, || {
            let mut params: [*mut c_void; 4] = [
                &mut dst as *mut u64 as *mut c_void,
                &mut a as *mut u64 as *mut c_void,
                &mut b as *mut u64 as *mut c_void,
                &mut n64 as *mut u64 as *mut c_void,
            ];
            launch_sync(f, grid, block, &mut params, d.stream)
        })
        .map_err(|e| e.to_string())
    }

    /// Copy `len` bytes between device buffers of device `ordinal` with the copy kernel.
    ///
    /// # Safety
    /// Both ranges are device-accessible memory of `len` bytes on that device.
    pub unsafe fn copy_kernel(
        &self,
        ordinal: i32,
        dst: usize,
        src: usize,
        len: usize,
    ) -> Result<(), String> {
        if len == 0 {
            return Ok(());
        }
        let d = self.device(ordinal)?;
        let k = self.kernels(ordinal)?;
        let (mut dst, mut src, mut n64) = (dst as u64, src as u64, len as u64);
        let (grid, block) = grid_for(len / 16 + 1);
        cuda::with_context(d.ctx, || {
            let mut params: [*mut c_void; 3] = [
                &mut dst as *mut u64 as *mut c_void,
                &mut src as *mut u64 as *mut c_void,
                &mut n64 as *mut u64 as *mut c_void,
            ];
            launch_sync(k.copy, grid, block, &mut params, d.stream)
        })
        .map_err(|e| e.to_string())
    }
}

/// # Safety
/// As [`cuda::launch`].
unsafe fn launch_sync(
    f: Function,
    grid: u32,
    block: u32,
    params: &mut [*mut c_void],
    s: Stream,
) -> cuda::CuResult<()> {
    cuda::launch(f, grid, block, params, s)?;
    cuda::stream_synchronize(s)
}

#[cfg(test)]
mod tests {
    //! Run on a machine with a GPU (elsewhere each records a skip): every op and type
    //! against a host reference, in place and out of place, and the copy kernel at unaligned
    //! offsets.
    use super::*;
    use crate::sys::cuda as cu;

    /// The codes the kernels' switches expect (sum, prod, min, max; i32, i64, f32, f64, f16,
    /// bf16), whatever the order of the enums.
    #[test]
    fn op_and_type_codes_are_the_kernels() {
        let ops: Vec<u32> = [KOp::Sum, KOp::Prod, KOp::Min, KOp::Max]
            .iter()
            .map(|o| o.code())
            .collect();
        assert_eq!(ops, [0, 1, 2, 3]);
        let types: Vec<u32> = [
            KType::I32,
            KType::I64,
            KType::F32,
            KType::F64,
            KType::F16,
            KType::Bf16,
        ]
        .iter()
        .map(|t| t.code())
        .collect();
        assert_eq!(types, [0, 1, 2, 3, 4, 5]);
    }

    /// Small integers, exact in every type: encode as the type's bytes.
    fn enc(t: KType, v: i64) -> Vec<u8> {
        match t {
            KType::I32 => (v as i32).to_ne_bytes().to_vec(),
            KType::I64 => v.to_ne_bytes().to_vec(),
            KType::F32 => (v as f32).to_ne_bytes().to_vec(),
            KType::F64 => (v as f64).to_ne_bytes().to_vec(),
            KType::Bf16 => (((v as f32).to_bits() >> 16) as u16).to_ne_bytes().to_vec(),
            KType::F16 => f16_bits(v as f32).to_ne_bytes().to_vec(),
        }
    }

    /// IEEE half bits of an f32 that is exactly representable (small integers).
    fn f16_bits(x: f32) -> u16 {
        if x == 0.0 {
            return 0;
        }
        let b = x.to_bits();
        let sign = ((b >> 16) & 0x8000) as u16;
        let exp = ((b >> 23) & 0xff) as i32 - 127 + 15;
        let man = ((b >> 13) & 0x3ff) as u16;
        sign | ((exp as u16) << 10) | man
    }

    fn host_op(op: KOp, a: i64, b: i64) -> i64 {
        match op {
            KOp::Sum => a + b,
            KOp::Prod => a * b,
            KOp::Min => a.min(b),
            KOp::Max => a.max(b),
        }
    }

    #[test]
    fn kernels_match_host() {
        let Some(g) = crate::gpu::kernels_or_skip() else {
            return;
        };
        let d = g.device(0).unwrap();
        for n in [0usize, 1, 1000, (1 << 20) + 3] {
            for op in OPS {
                for t in TYPES {
                    let es = t.size();
                    // Nonzero values in -8..8 (products stay small: |a*b| <= 64, exact in
                    // half; no zero, so no -0.0 against +0.0 in the byte comparison).
                    let nz = |v: i64| if v == 0 { 1 } else { v };
                    let av: Vec<i64> = (0..n).map(|i| nz((i as i64 * 7 % 16) - 8)).collect();
                    let bv: Vec<i64> = (0..n).map(|i| nz((i as i64 * 5 % 15) - 7)).collect();
                    let a: Vec<u8> = av.iter().flat_map(|&v| enc(t, v)).collect();
                    let b: Vec<u8> = bv.iter().flat_map(|&v| enc(t, v)).collect();
                    let want: Vec<u8> = av
                        .iter()
                        .zip(&bv)
                        .flat_map(|(&x, &y)| enc(t, host_op(op, x, y)))
                        .collect();
                    let bytes = n * es;
                    let (da, db, dd) = cu::with_context(d.ctx, || {
                        Ok((
                            cu::mem_alloc(bytes)?,
                            cu::mem_alloc(bytes)?,
                            cu::mem_alloc(bytes)?,
                        ))
                    })
                    .unwrap();
                    // SAFETY: fresh allocations of `bytes` bytes; synchronized before use.
                    unsafe {
                        cu::with_context(d.ctx, || {
                            cu::memcpy_htod_async(da, &a, d.stream)?;
                            cu::memcpy_htod_async(db, &b, d.stream)?;
                            cu::stream_synchronize(d.stream)
                        })
                        .unwrap();
                        g.reduce_copy(0, op, t, dd, da, db, n).unwrap();
                        // In place: db = da op db.
                        g.reduce_copy(0, op, t, db, da, db, n).unwrap();
                        let mut out = vec![0u8; bytes];
                        let mut inplace = vec![0u8; bytes];
                        cu::with_context(d.ctx, || {
                            cu::memcpy_dtoh_async(&mut out, dd, d.stream)?;
                            cu::memcpy_dtoh_async(&mut inplace, db, d.stream)?;
                            cu::stream_synchronize(d.stream)
                        })
                        .unwrap();
                        assert!(out == want, "{op:?} {t:?} n={n} out of place");
                        assert!(inplace == want, "{op:?} {t:?} n={n} in place");
                        cu::with_context(d.ctx, || {
                            cu::mem_free(da);
                            cu::mem_free(db);
                            cu::mem_free(dd);
                            Ok(())
                        })
                        .unwrap();
                    }
                }
            }
        }
        // Copy kernel: aligned and unaligned ends.
        let len = (1 << 20) + 37;
        let src: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
        let (ds, dd) = cu::with_context(d.ctx, || {
            Ok((cu::mem_alloc(len + 64)?, cu::mem_alloc(len + 64)?))
        })
        .unwrap();
        for (so, dof, n) in [
            (0usize, 0usize, len),
            (3, 0, len - 5),
            (1, 7, 1000),
            (16, 32, 15),
        ] {
            // SAFETY: offsets + n stay inside the len + 64 byte allocations.
            unsafe {
                cu::with_context(d.ctx, || {
                    cu::memcpy_htod_async(ds + so, &src[..n], d.stream)?;
                    cu::stream_synchronize(d.stream)
                })
                .unwrap();
                g.copy_kernel(0, dd + dof, ds + so, n).unwrap();
                let mut out = vec![0u8; n];
                cu::with_context(d.ctx, || {
                    cu::memcpy_dtoh_async(&mut out, dd + dof, d.stream)?;
                    cu::stream_synchronize(d.stream)
                })
                .unwrap();
                assert!(out == src[..n], "copy {so}->{dof} n={n}");
            }
        }
        println!("kernels ok on device 0");
    }

    #[test]
    fn kernel_selection() {
        use crate::mpi::datatype::Basic;
        for (op, b, want) in [
            (BuiltinOp::Sum, Basic::Float, Some((KOp::Sum, KType::F32))),
            (BuiltinOp::Max, Basic::Int64, Some((KOp::Max, KType::I64))),
            (BuiltinOp::Min, Basic::Float16, Some((KOp::Min, KType::F16))),
            (
                BuiltinOp::Sum,
                Basic::Bfloat16,
                Some((KOp::Sum, KType::Bf16)),
            ),
            (BuiltinOp::Band, Basic::Int32, None),
            (BuiltinOp::Sum, Basic::Char, None),
        ] {
            assert_eq!(kernel_for(op, Elem::Basic(b)), want, "{op:?} {b:?}");
        }
    }
}
