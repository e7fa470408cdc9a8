//! Staging of device buffers through host memory: the one place the ABI layer calls when a user
//! buffer may be device (or managed) memory. Each helper classifies the pointer; host memory
//! passes through untouched, device memory is copied to or from a host buffer with the copy
//! engine on gpumpi's stream (and the stream synchronized before the host buffer is used), or,
//! for copies of at most 4 KiB, by the resident kernel (`resident::kernel::copy_small`: no launch and
//! no stream synchronize).
//!
//! This is the correct-first path: every call of the subset works with device buffers. The
//! zero-copy path (CUDA IPC between ranks of a node, GPU kernels for reductions) replaces these
//! helpers, not their callers. Derived datatypes on device (not managed) memory are packed and
//! unpacked by the GPU pack kernel (`gpu::pack`) straight to and from page-locked host memory;
//! the host path (a copy of the layout's span, packed by the CPU) is the fallback.

use super::cache::PtrInfo;
use super::layout::span;
use super::pool::HostBuf;
use crate::mpi::datatype::TypeDesc;
use crate::mpi::error::{MpiError, MpiResult};
use crate::sys::cuda;
use std::sync::Arc;

fn cuda_err(what: &str, e: impl std::fmt::Display) -> MpiError {
    MpiError::new(
        crate::standard::consts::MPI_ERR_OTHER,
        format!("CUDA staging ({what}): {e}"),
    )
}

/// The classification of `ptr` when it needs staging (device or managed memory).
pub fn device_info(ptr: *const u8) -> Option<PtrInfo> {
    let i = super::classify(ptr);
    i.kind.needs_staging().then_some(i)
}

fn dev_ctx(info: &PtrInfo) -> MpiResult<super::DevCtx> {
    let g = super::gpu().ok_or_else(|| cuda_err("device", "CUDA is not available"))?;
    let d = g
        .device(info.device.max(0))
        .map_err(|e| cuda_err("device context", e))?;
    // Staging copies need no kernels: the module is loaded by its first user (a reduction, a
    // GPU-native collective), which keeps the first device send/recv cheap (measured 5.0 ms
    // with the load here, benches/NOTES.md).
    Ok(d)
}

/// Staging buffers up to this many bytes are ordinary heap memory ([`staging`]).
const SMALL_PAGEABLE: usize = 4 << 10;

/// A host staging buffer for copies with the device of `info`: pinned when the pool allows,
/// except for small ones. A small copy is one PCIe transaction either way (or the resident
/// kernel's), and a page-locked buffer's first allocation costs ~1 ms, which would sit on the
/// critical path of a process's first device send/recv (benches/NOTES.md).
pub fn staging(info: &PtrInfo, len: usize) -> MpiResult<HostBuf> {
    let d = dev_ctx(info)?;
    if len <= SMALL_PAGEABLE {
        return Ok(HostBuf::from_vec(vec![0u8; len]));
    }
    Ok(HostBuf::new(len, Some(d.ctx)))
}

/// A small copy between device memory (allocation `info`) and host memory by the device's
/// resident kernel, when it takes it (`resident::kernel::copy_small`); None: use the copy engine.
///
/// # Safety
/// As for [`copy_to_host`] (`to_host`) or [`copy_to_device`].
unsafe fn by_resident(
    info: &PtrInfo,
    dst: usize,
    src: usize,
    len: usize,
    to_host: bool,
) -> Option<MpiResult<()>> {
    if info.kind != super::cache::MemKind::Device {
        return None;
    }
    let dir = if to_host {
        super::resident::kernel::SmallCopy::ToHost
    } else {
        super::resident::kernel::SmallCopy::FromHost
    };
    let r = super::resident::kernel::copy_small(info.device, dst, src, len, dir)?;
    let what = if to_host {
        "device to host, resident kernel"
    } else {
        "host to device, resident kernel"
    };
    Some(r.map_err(|e| cuda_err(what, e)))
}

/// Copy `dst.len()` bytes from device address `src` (in the allocation `info`) to host memory.
///
/// # Safety
/// `src..src+dst.len()` lies in device memory the caller may read.
pub unsafe fn copy_to_host(info: &PtrInfo, src: usize, dst: &mut [u8]) -> MpiResult<()> {
    if dst.is_empty() {
        return Ok(());
    }
    if let Some(r) = by_resident(info, dst.as_mut_ptr() as usize, src, dst.len(), true) {
        return r;
    }
    let d = dev_ctx(info)?;
    cuda::with_context(d.ctx, || {
        cuda::memcpy_dtoh_async(dst, src, d.stream)?;
        cuda::stream_synchronize(d.stream)
    })
    .map_err(|e| cuda_err("device to host", e))
}

/// Copy host bytes to device address `dst` (in the allocation `info`).
///
/// # Safety
/// `dst..dst+src.len()` lies in device memory the caller may write.
pub unsafe fn copy_to_device(info: &PtrInfo, dst: usize, src: &[u8]) -> MpiResult<()> {
    if src.is_empty() {
        return Ok(());
    }
    if let Some(r) = by_resident(info, dst, src.as_ptr() as usize, src.len(), false) {
        return r;
    }
    let d = dev_ctx(info)?;
    cuda::with_context(d.ctx, || {
        cuda::memcpy_htod_async(dst, src, d.stream)?;
        cuda::stream_synchronize(d.stream)
    })
    .map_err(|e| cuda_err("host to device", e))
}

/// A host copy of the device bytes `[base + lo, base + hi)`: code written for host memory runs
/// on [`Mirror::base`] as if it were the user's buffer, then [`Mirror::flush`] writes it back.
pub struct Mirror {
    info: PtrInfo,
    dev_lo: usize,
    lo: isize,
    host: HostBuf,
}

impl Mirror {
    /// A mirror when `base + lo` is device memory (None for host memory, or an empty span).
    /// `fill`: copy the device bytes in (inputs, and outputs whose untouched bytes must survive).
    ///
    /// # Safety
    /// The span lies in one device allocation the caller may read.
    pub unsafe fn of(base: usize, lo: isize, hi: isize, fill: bool) -> MpiResult<Option<Mirror>> {
        if hi <= lo {
            return Ok(None);
        }
        let dev_lo = base.wrapping_add_signed(lo);
        let Some(info) = device_info(dev_lo as *const u8) else {
            return Ok(None);
        };
        let mut host = staging(&info, (hi - lo) as usize)?;
        if fill {
            copy_to_host(&info, dev_lo, &mut host)?;
        }
        Ok(Some(Mirror {
            info,
            dev_lo,
            lo,
            host,
        }))
    }

    /// Like [`Mirror::of`] for `count` elements of `t` at `base`.
    ///
    /// # Safety
    /// As for [`Mirror::of`].
    pub unsafe fn of_type(
        base: usize,
        t: &TypeDesc,
        count: usize,
        fill: bool,
    ) -> MpiResult<Option<Mirror>> {
        let (lo, hi) = span(t, count);
        Self::of(base, lo, hi, fill)
    }

    /// The host address standing for the user's buffer address.
    pub fn base(&self) -> usize {
        (self.host.as_ptr() as usize).wrapping_add_signed(-self.lo)
    }

    /// Write the host copy back to the device.
    ///
    /// # Safety
    /// The span is still device memory the caller may write.
    pub unsafe fn flush(&self) -> MpiResult<()> {
        copy_to_device(&self.info, self.dev_lo, &self.host)
    }

    /// The host bytes (for holding as a send buffer).
    pub fn into_host(self) -> HostBuf {
        self.host
    }
}

/// Move packed bytes with the GPU pack kernel (`gpu::pack`) between `count` elements of `t` in
/// device memory at `buf` (in the allocation `info`) and the device-accessible address `packed`
/// (`len` bytes). False when that path does not apply (managed memory, no kernels, disabled, a
/// type packed on the host, or an error, logged): the caller takes the host path.
///
/// # Safety
/// `buf` holds `count` elements of `t`; `packed` holds `len` bytes a kernel may access.
unsafe fn gpu_move(
    info: &PtrInfo,
    t: &Arc<TypeDesc>,
    buf: usize,
    packed: usize,
    count: usize,
    len: usize,
    unpack: bool,
) -> bool {
    use super::cache::MemKind;
    if info.kind != MemKind::Device || !super::pack::enabled() {
        return false;
    }
    let d = match dev_ctx(info) {
        Ok(d) => d,
        Err(_) => return false,
    };
    match super::pack::run(d, t, buf, packed, count, len, unpack) {
        Ok(done) => done,
        Err(e) => {
            tracing::warn!("GPU packing failed ({e}); packing on the host");
            false
        }
    }
}

/// Whether the kernels can address the host bytes at `p` (page-locked memory: with unified
/// addressing a cuMemHostAlloc pointer is valid in kernels of every device as it is).
fn mapped(p: *const u8) -> bool {
    super::classify(p).kind == super::cache::MemKind::PinnedHost
}

/// Pack `count` elements of `t` in device memory at `buf` (allocation `info`) into `dst`
/// (`t.packed_size(count)` bytes of host memory): one copy for a contiguous layout, the pack
/// kernel writing straight into `dst` when it is page-locked, else (the fallback) a copy of the
/// span packed on the host. `pinned`: `dst` is known to be page-locked.
///
/// # Safety
/// `buf` holds `count` elements of `t`.
unsafe fn pack_from(
    info: &PtrInfo,
    buf: *const u8,
    count: usize,
    t: &Arc<TypeDesc>,
    dst: &mut [u8],
    pinned: bool,
) -> MpiResult<()> {
    if t.is_contiguous(count) {
        return copy_to_host(info, buf.wrapping_offset(t.true_lb()) as usize, dst);
    }
    let len = dst.len();
    if pinned
        && gpu_move(
            info,
            t,
            buf as usize,
            dst.as_mut_ptr() as usize,
            count,
            len,
            false,
        )
    {
        return Ok(());
    }
    let m = Mirror::of_type(buf as usize, t, count, true)?.expect("device span");
    t.pack(count, m.base() as *const u8, dst);
    Ok(())
}

/// The packed bytes of `count` elements at `buf` when `buf` is device memory (see
/// [`pack_device_into`] for how). None for host memory.
///
/// # Safety
/// `buf` holds `count` elements of `t`.
pub unsafe fn packed_from_device(
    buf: *const u8,
    count: usize,
    t: &Arc<TypeDesc>,
) -> MpiResult<Option<HostBuf>> {
    let len = t.packed_size(count);
    if len == 0 {
        return Ok(None);
    }
    let (lo, _) = span(t, count);
    let Some(info) = device_info(buf.wrapping_offset(lo)) else {
        return Ok(None);
    };
    let mut v = staging(&info, len)?;
    let pinned = v.is_pinned();
    pack_from(&info, buf, count, t, &mut v, pinned)?;
    Ok(Some(v))
}

/// Pack `count` elements at `buf` into the host bytes `dst` (`t.packed_size(count)` of them)
/// when `buf` is device memory: one device-to-host copy for a contiguous layout; else the GPU
/// pack kernel writing straight into `dst` when `dst` is page-locked (device, not managed,
/// memory; only the packed bytes cross PCIe); else a copy of the span packed on the host.
/// Returns false (nothing done) for host memory.
///
/// # Safety
/// `buf` holds `count` elements of `t`.
pub unsafe fn pack_device_into(
    buf: *const u8,
    count: usize,
    t: &Arc<TypeDesc>,
    dst: &mut [u8],
) -> MpiResult<bool> {
    if dst.is_empty() {
        return Ok(false);
    }
    let (lo, _) = span(t, count);
    let Some(info) = device_info(buf.wrapping_offset(lo)) else {
        return Ok(false);
    };
    let pinned = mapped(dst.as_ptr());
    pack_from(&info, buf, count, t, dst, pinned)?;
    Ok(true)
}

/// Store packed bytes (`src`, possibly a prefix of `count` elements) into device memory at
/// `buf`. Returns false (nothing done) when `buf` is host memory. A contiguous layout is one
/// host-to-device copy; others are scattered by the GPU pack kernel reading `src` (through a
/// page-locked staging copy when `src` is not page-locked), which writes only the layout's
/// bytes. The fallback (managed memory, no kernels) reads the span, unpacks into it on the host
/// and writes it back, so the gaps keep their contents.
///
/// # Safety
/// `buf` holds room for `count` elements of `t`.
pub unsafe fn unpack_to_device(
    src: &[u8],
    buf: *mut u8,
    count: usize,
    t: &Arc<TypeDesc>,
) -> MpiResult<bool> {
    let (lo, hi) = span(t, count);
    if hi <= lo {
        return Ok(false);
    }
    let Some(info) = device_info(buf.wrapping_offset(lo)) else {
        return Ok(false);
    };
    if src.is_empty() {
        return Ok(true);
    }
    if t.is_contiguous(count) {
        copy_to_device(&info, buf.wrapping_offset(t.true_lb()) as usize, src)?;
        return Ok(true);
    }
    let len = src.len().min(t.packed_size(count));
    if info.kind == super::cache::MemKind::Device && super::pack::enabled() {
        // The kernel reads `src` itself when it is page-locked, else a page-locked copy.
        let mut tmp = None;
        let packed = if mapped(src.as_ptr()) {
            Some(src.as_ptr() as usize)
        } else {
            let mut copy = staging(&info, len)?;
            copy.is_pinned().then(|| {
                copy.copy_from_slice(&src[..len]);
                tmp.insert(copy).as_ptr() as usize
            })
        };
        if packed.is_some_and(|p| gpu_move(&info, t, buf as usize, p, count, len, true)) {
            return Ok(true);
        }
    }
    // Keep the gaps of the layout: read the span, unpack into it, write it back.
    let m = Mirror::of(buf as usize, lo, hi, true)?.expect("device span");
    t.unpack_range(count, &src[..len], 0, m.base() as *mut u8);
    m.flush()?;
    Ok(true)
}

/// Pack `count` elements of `t` at device `buf` into device memory at `dst` of the same device
/// (MPI_Pack between device buffers) with the pack kernel, or one copy when contiguous.
/// Returns false (nothing done) when either side is not device memory of one device or the GPU
/// path does not apply.
///
/// # Safety
/// `buf` holds `count` elements of `t`; `dst` has room for their packed bytes.
pub unsafe fn pack_device_to_device(
    buf: *const u8,
    count: usize,
    t: &Arc<TypeDesc>,
    dst: *mut u8,
) -> MpiResult<bool> {
    device_to_device(buf as *mut u8, count, t, dst, t.packed_size(count), false)
}

/// Unpack `len` packed bytes at device `src` into `count` elements of `t` at device `buf` of
/// the same device (MPI_Unpack between device buffers): the pack kernel, or one copy when
/// contiguous. Returns false (nothing done) when the GPU path does not apply.
///
/// # Safety
/// `src` holds `len` bytes; `buf` has room for `count` elements of `t`.
pub unsafe fn unpack_device_to_device(
    src: *const u8,
    len: usize,
    buf: *mut u8,
    count: usize,
    t: &Arc<TypeDesc>,
) -> MpiResult<bool> {
    device_to_device(buf, count, t, src as *mut u8, len, true)
}

/// Between `count` elements of `t` at `buf` and `len` packed bytes at `packed`, both device
/// memory of one device: into the packed bytes (`unpack` false) or out of them.
unsafe fn device_to_device(
    buf: *mut u8,
    count: usize,
    t: &Arc<TypeDesc>,
    packed: *mut u8,
    len: usize,
    unpack: bool,
) -> MpiResult<bool> {
    let Some((info, _)) = same_device(buf.wrapping_offset(span(t, count).0), packed) else {
        return Ok(false);
    };
    let len = len.min(t.packed_size(count));
    if len == 0 {
        return Ok(true);
    }
    if t.is_contiguous(count) {
        let data = buf.wrapping_offset(t.true_lb()) as usize;
        let (dst, src) = if unpack {
            (data, packed as usize)
        } else {
            (packed as usize, data)
        };
        dtod(&info, dst, src, len)?;
        return Ok(true);
    }
    Ok(gpu_move(
        &info,
        t,
        buf as usize,
        packed as usize,
        count,
        len,
        unpack,
    ))
}

/// Both pointers in device (not managed) memory of one device: their classifications.
fn same_device(a: *const u8, b: *const u8) -> Option<(PtrInfo, PtrInfo)> {
    use super::cache::MemKind;
    let (x, y) = (device_info(a)?, device_info(b)?);
    (x.kind == MemKind::Device && y.kind == MemKind::Device && x.device == y.device)
        .then_some((x, y))
}

/// Device-to-device copy of `len` bytes on gpumpi's stream of the device of `info`.
///
/// # Safety
/// Both ranges are device memory of that device.
unsafe fn dtod(info: &PtrInfo, dst: usize, src: usize, len: usize) -> MpiResult<()> {
    let d = dev_ctx(info)?;
    cuda::with_context(d.ctx, || {
        cuda::memcpy_dtod_async(dst, src, len, d.stream)?;
        cuda::stream_synchronize(d.stream)
    })
    .map_err(|e| cuda_err("device to device", e))
}

/// `inout = input op inout` with a GPU kernel when both buffers are device memory of the same
/// device and the op/type pair has a kernel. Returns false (nothing done) otherwise, and the
/// caller stages through the host.
///
/// # Safety
/// Both buffers hold `bytes` bytes of contiguous elements of `e`.
pub unsafe fn reduce_on_device(
    op: crate::mpi::op::BuiltinOp,
    e: crate::mpi::datatype::Elem,
    input: *const u8,
    inout: *mut u8,
    bytes: usize,
) -> MpiResult<bool> {
    let Some((kop, kt)) = super::kernels::kernel_for(op, e) else {
        return Ok(false);
    };
    let (Some(a), Some(b)) = (device_info(input), device_info(inout)) else {
        return Ok(false);
    };
    use super::cache::MemKind;
    if a.kind != MemKind::Device || b.kind != MemKind::Device || a.device != b.device {
        return Ok(false);
    }
    let Some(g) = super::gpu() else {
        return Ok(false);
    };
    if g.kernels(b.device).is_err() {
        return Ok(false);
    }
    let n = bytes / kt.size();
    tracing::debug!(
        ?kop,
        ?kt,
        n,
        device = b.device,
        "reduction on the GPU (kernel)"
    );
    g.reduce_copy(
        b.device,
        kop,
        kt,
        inout as usize,
        input as usize,
        inout as usize,
        n,
    )
    .map_err(|e| cuda_err("reduction kernel", e))?;
    Ok(true)
}

/// Device bytes moved piece by piece through a ring of page-locked host buffers, on the
/// device's own stream (`dispatch::piped`): [`Relay::fetch`] starts copying a piece of device
/// memory into a slot, [`Relay::fetched`] waits for it and hands the slot to the CPU,
/// [`Relay::store`] starts copying a slot back to the device. A slot is fetched into again only
/// after its last store finished, so the copy engine works on the next and the last pieces
/// while the CPU and the network work on the current ones, with pinned memory bounded by the
/// slots whatever the vector's size.
pub struct Relay {
    d: super::DevCtx,
    slots: Vec<RelaySlot>,
}

struct RelaySlot {
    host: HostBuf,
    /// Recorded after the slot's last fetch.
    fetched: cuda::Event,
    /// Recorded after the slot's last store: the slot is free once it has passed.
    stored: cuda::Event,
    /// A store was issued and not yet waited for.
    storing: bool,
}

impl Relay {
    /// `slots` buffers of `piece` bytes each for copies with the device of `info`.
    pub fn new(info: &PtrInfo, piece: usize, slots: usize) -> MpiResult<Relay> {
        let d = dev_ctx(info)?;
        let slots = (0..slots)
            .map(|_| {
                let host = HostBuf::new(piece, Some(d.ctx));
                cuda::with_context(d.ctx, || {
                    Ok(RelaySlot {
                        host,
                        fetched: cuda::Event::new()?,
                        stored: cuda::Event::new()?,
                        storing: false,
                    })
                })
                .map_err(|e| cuda_err("relay events", e))
            })
            .collect::<MpiResult<Vec<_>>>()?;
        Ok(Relay { d, slots })
    }

    /// The number of slots.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether there are no slots.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Start copying pieces of device memory into slot `i`, once the slot's last store has
    /// finished: `(src, off, len)` copies `len` bytes at device address `src` to the slot's
    /// offset `off`.
    ///
    /// # Safety
    /// Each `src..src+len` is device memory of the relay's device, left unchanged until
    /// [`Relay::fetched`] returns; each `off + len` is within the slot.
    pub unsafe fn fetch(&mut self, i: usize, segs: &[(usize, usize, usize)]) -> MpiResult<()> {
        let d = self.d;
        let s = &mut self.slots[i];
        cuda::with_context(d.ctx, || {
            if s.storing {
                s.stored.synchronize()?;
                s.storing = false;
            }
            for &(src, off, len) in segs {
                cuda::memcpy_dtoh_async(&mut s.host[off..off + len], src, d.stream)?;
            }
            s.fetched.record(d.stream)
        })
        .map_err(|e| cuda_err("device to host", e))
    }

    /// Wait for slot `i`'s fetch: its bytes, for the CPU to read and write.
    pub fn fetched(&mut self, i: usize) -> MpiResult<&mut [u8]> {
        let s = &mut self.slots[i];
        cuda::with_context(self.d.ctx, || s.fetched.synchronize())
            .map_err(|e| cuda_err("device to host", e))?;
        Ok(&mut s.host[..])
    }

    /// Start copying pieces of slot `i` to device memory: `(off, dst, len)` copies `len` bytes
    /// at the slot's offset `off` to device address `dst`.
    ///
    /// # Safety
    /// Each `dst..dst+len` is writable device memory of the relay's device, untouched by the
    /// caller until [`Relay::finish`]; the slot's bytes are not written meanwhile.
    pub unsafe fn store(&mut self, i: usize, segs: &[(usize, usize, usize)]) -> MpiResult<()> {
        let d = self.d;
        let s = &mut self.slots[i];
        cuda::with_context(d.ctx, || {
            for &(off, dst, len) in segs {
                cuda::memcpy_htod_async(dst, &s.host[off..off + len], d.stream)?;
            }
            s.stored.record(d.stream)?;
            s.storing = true;
            Ok(())
        })
        .map_err(|e| cuda_err("host to device", e))
    }

    /// Wait for every store issued.
    pub fn finish(&mut self) -> MpiResult<()> {
        let d = self.d;
        for s in &mut self.slots {
            if s.storing {
                cuda::with_context(d.ctx, || s.stored.synchronize())
                    .map_err(|e| cuda_err("host to device", e))?;
                s.storing = false;
            }
        }
        Ok(())
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        // A relay dropped on an error path: no copy may still use its buffers once they go
        // back to the pool.
        if let Err(e) = cuda::with_context(self.d.ctx, || cuda::stream_synchronize(self.d.stream)) {
            tracing::debug!("relay: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_memory_passes_through() {
        let int = Arc::new(TypeDesc::predefined(crate::mpi::datatype::Basic::Int32));
        let data = [1i32, 2, 3];
        // SAFETY: a live array of 3 ints.
        unsafe {
            assert!(packed_from_device(data.as_ptr() as *const u8, 3, &int)
                .unwrap()
                .is_none());
            let mut out = [0i32; 3];
            assert!(!unpack_to_device(&[0u8; 12], out.as_mut_ptr() as *mut u8, 3, &int).unwrap());
            assert!(Mirror::of(data.as_ptr() as usize, 0, 12, true)
                .unwrap()
                .is_none());
        }
    }
}
