//! Device memory in point-to-point messages, for the engine (src/engine): the zero-copy copy
//! between this process's buffer and a peer's exported device buffer (CUDA IPC; the receiver
//! reads, or the sender writes into the receiver's buffer), and the synchronous host<->device
//! copies used when a device buffer meets a host-memory protocol (eager frames, streamed or CMA
//! data).
//!
//! Contract: the peer copies ([`read_ipc`], [`write_ipc`]) return an [`InFlight`] copy that the
//! engine polls while it goes on with other messages (a ring of Sendrecv calls must never wait
//! on one rank's copy to answer another); every other function here has finished its copies
//! when it returns (the stream is synchronized), so the engine may complete the request and tell
//! the peer right after.

use super::ipc::{self, Export};
use crate::sys::cuda;

/// How a peer's exported buffer is copied: the copy engines (`ce`, cuMemcpyAsync) or gpumpi's
/// copy kernel (`kernel`, SMs copying over NVLink). `GPUMPI_GPU_P2P_COPY`.
fn use_kernel() -> bool {
    crate::config::snapshot().p2p.gpu_copy_kernel
}

/// Bytes above which a contiguous device send that CUDA IPC can share goes by device
/// rendezvous (the receiver copies peer to local) instead of eager staging through host memory
/// (`GPUMPI_GPU_IPC_MIN`).
pub fn ipc_min() -> usize {
    crate::config::snapshot().p2p.gpu_ipc_min
}

/// Bytes up to which a pulled message from a buffer this process has not mapped is streamed
/// by its sender the first time (the mapping, milliseconds, is made at the buffer's second
/// message): the eager limit, the size below which messages are staged anyway.
fn first_sight_max() -> usize {
    crate::config::snapshot().p2p.eager_limit
}

/// Whether a pull of `len` bytes from `peer`'s `export` into `dst` (device memory when `dev`)
/// should map the buffer now (see [`first_sight_max`]); a short descriptor: yes (the read
/// reports it).
pub fn worth_mapping(peer: usize, export: &[u8], dst: usize, dev: bool, len: usize) -> bool {
    if len > first_sight_max() {
        return true;
    }
    let Some(e) = Export::from_bytes(export) else {
        return true;
    };
    ipc::known(peer, &e, target_ordinal(dst, dev))
}

/// The device whose context maps a peer's buffer for a copy to `local`: a device buffer's own
/// device; a host target reads through device 0's context.
fn target_ordinal(local: usize, dev: bool) -> i32 {
    if dev {
        super::classify(local as *const u8).device.max(0)
    } else {
        0
    }
}

/// A peer copy issued on its device's stream; `None` from [`read_ipc`] or [`write_ipc`] means
/// there was nothing left to copy (an empty message, or a small pull already done).
pub struct InFlight {
    d: super::DevCtx,
    ev: cuda::Event,
    t0: std::time::Instant,
    len: usize,
}

impl InFlight {
    /// Whether the copy has finished; an error: it failed.
    pub fn done(&self) -> Result<bool, String> {
        let r = cuda::with_context(self.d.ctx, || self.ev.query()).map_err(|e| e.to_string());
        if matches!(r, Ok(true)) && self.len >= 1 << 20 {
            let us = self.t0.elapsed().as_secs_f64() * 1e6;
            tracing::debug!(
                len = self.len,
                us,
                gbs = self.len as f64 / us / 1e3,
                "CUDA IPC copy done"
            );
        }
        r
    }

    /// Wait for the copy to finish.
    #[cfg(test)]
    pub fn wait(self) -> Result<(), String> {
        cuda::with_context(self.d.ctx, || self.ev.synchronize()).map_err(|e| e.to_string())
    }
}

/// Start copying `len` bytes of `peer`'s exported buffer (`export`: [`Export`] bytes) to `dst`:
/// device memory of this process when `dev`, else host memory. Zero-copy over NVLink for
/// device targets (one copy, peer to local): the receiver's side of a pulled message. Copies
/// small enough for the resident kernel are done when this returns (`Ok(None)`).
///
/// # Safety
/// `dst..dst+len` is writable memory of this process owned by the receive until the copy is
/// done; the peer keeps its buffer untouched until told the read is done.
pub unsafe fn read_ipc(
    peer: usize,
    export: &[u8],
    dst: usize,
    dev: bool,
    len: usize,
) -> Result<Option<InFlight>, String> {
    peer_copy(peer, export, dst, dev, len, Way::Pull)
}

/// Start copying `len` bytes of this process's device buffer `src` into `peer`'s exported
/// buffer (`export`): the sender's side of a pushed message, one copy local to peer over NVLink.
///
/// # Safety
/// `src..src+len` is device memory of this process left untouched until the copy is done; the
/// peer's buffer is a posted receive that it leaves untouched until told the write is done.
pub unsafe fn write_ipc(
    peer: usize,
    export: &[u8],
    src: usize,
    len: usize,
) -> Result<Option<InFlight>, String> {
    peer_copy(peer, export, src, true, len, Way::Push)
}

/// The export bytes of the device buffer `addr..addr+len` of this process when CUDA IPC can
/// share it (one exportable allocation holds the whole range), else `None`.
pub fn export_range(addr: usize, len: usize) -> Option<[u8; ipc::EXPORT_BYTES]> {
    let (e, _) = ipc::export(addr)?;
    (e.offset + len as u64 <= e.size).then(|| e.to_bytes())
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Way {
    /// Peer to `local`.
    Pull,
    /// `local` to peer (`local` is device memory).
    Push,
}

/// Start one copy between `peer`'s exported buffer and `local` (device memory of this process
/// when `dev`, else host memory), in the direction `way`.
unsafe fn peer_copy(
    peer: usize,
    export: &[u8],
    local: usize,
    dev: bool,
    len: usize,
    way: Way,
) -> Result<Option<InFlight>, String> {
    let e = Export::from_bytes(export).ok_or("short IPC descriptor")?;
    if len as u64 > e.size.saturating_sub(e.offset) {
        return Err("message longer than the exported allocation".into());
    }
    let g = super::gpu().ok_or("CUDA is not available")?;
    let d = g.device(target_ordinal(local, dev))?;
    let remote = ipc::import(peer, &e, d.ordinal)?;
    if len == 0 {
        return Ok(None);
    }
    let (src, dst) = match way {
        Way::Pull => (remote, local),
        Way::Push => (local, remote),
    };
    if way == Way::Pull && dev {
        // A pull into device memory: the one-block or the wide resident kernel (one host <->
        // kernel round trip, done when this returns) or the copy engine, by size (gpu::pull).
        use super::pull::Path;
        use super::resident::kernel;
        let narrow = kernel::small_copy_ready(d.ordinal, len, kernel::SmallCopy::DevToDev);
        let wide_max = crate::config::snapshot().p2p.gpu_pull_wide_max;
        // Asked only where it could be taken (each check counts towards the kernels' preload).
        let wide = len > super::pull::NARROW_MAX
            && len <= wide_max
            && kernel::wide_copy_ready(d.ordinal, dst, src, len);
        match super::pull::path(len, narrow, wide, wide_max) {
            Path::Narrow => {
                return kernel::copy_small_now(
                    d.ordinal,
                    dst,
                    src,
                    len,
                    kernel::SmallCopy::DevToDev,
                )
                .map(|()| None);
            }
            Path::Wide => {
                static SAID: std::sync::atomic::AtomicBool =
                    std::sync::atomic::AtomicBool::new(false);
                if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
                    tracing::debug!(peer, len, "first device pull by the wide resident kernel");
                }
                return kernel::copy_wide(d.ordinal, dst, src, len).map(|()| None);
            }
            Path::Engine => {}
        }
    } else if way == Way::Pull {
        // A small pull into host memory goes through the device's resident kernel: one host
        // <-> kernel round trip instead of a copy-engine copy and an event to poll.
        let dir = super::resident::kernel::SmallCopy::ToHost;
        if let Some(r) = super::resident::kernel::copy_small(d.ordinal, dst, src, len, dir) {
            return r.map(|()| None);
        }
    }
    if len >= 1 << 20 {
        let kernel = dev && use_kernel();
        tracing::debug!(peer, len, kernel, ?way, "CUDA IPC copy");
    }
    let t0 = std::time::Instant::now();
    let ev = copy(g, d, src, dst, dev, len)?;
    Ok(Some(InFlight { d, ev, t0, len }))
}

/// Issue a copy of device `src` to `dst` (device memory when `dev`, else host) on `d`'s stream;
/// the returned event is recorded after it.
unsafe fn copy(
    g: &super::Gpu,
    d: super::DevCtx,
    src: usize,
    dst: usize,
    dev: bool,
    len: usize,
) -> Result<cuda::Event, String> {
    cuda::with_context(d.ctx, || {
        let ev = cuda::Event::new()?;
        if dev && use_kernel() {
            if let Ok(k) = g.kernels(d.ordinal) {
                let seg = super::kernels::Seg {
                    dst: dst as u64,
                    src: src as u64,
                    len: len as u64,
                };
                let grid = super::device::max_grid(d.ordinal);
                k.copy_segs_async(&[seg], grid, d.stream)?;
                ev.record(d.stream)?;
                return Ok(ev);
            }
        }
        if dev {
            cuda::memcpy_dtod_async(dst, src, len, d.stream)?;
        } else {
            cuda::memcpy_dtoh_async(
                std::slice::from_raw_parts_mut(dst as *mut u8, len),
                src,
                d.stream,
            )?;
        }
        ev.record(d.stream)?;
        Ok(ev)
    })
    .map_err(|e| e.to_string())
}

/// Page-locked host memory for gathering `len` bytes bound for device address `dst` (None when
/// `dst` is not device memory or CUDA is unavailable: the caller copies piece by piece).
pub fn staging_for(dst: usize, len: usize) -> Option<super::pool::HostBuf> {
    super::stage::staging(&super::classify(dst as *const u8), len).ok()
}

/// Bytes per round of [`fill_device`]: large enough that a round's driver calls are noise,
/// small enough that two page-locked buffers stay cheap.
const FILL_CHUNK: usize = 4 << 20;

/// Fill `len` bytes of device memory at `dst` from a host-side source, `read(offset, buf)`
/// filling `buf` with the bytes at `offset` (false: the source failed). Rounds of
/// [`FILL_CHUNK`] bytes alternate between two page-locked buffers, so reading round k overlaps
/// the host-to-device copy of round k-1 (a message of one round takes one buffer). Returns
/// `Ok(false)` when `read` failed (nothing more is read), after the copies already issued have
/// finished.
///
/// # Safety
/// `dst..dst+len` is writable device memory of this process owned by the caller.
pub unsafe fn fill_device(
    dst: usize,
    len: usize,
    mut read: impl FnMut(usize, &mut [u8]) -> bool,
) -> Result<bool, String> {
    let info = super::classify(dst as *const u8);
    let g = super::gpu().ok_or("CUDA is not available")?;
    let d = g.device(info.device.max(0))?;
    let stage = |n| super::stage::staging(&info, n).map_err(|e| e.to_string());
    // One round: one buffer; more: two, alternating.
    let mut bufs = [
        stage(FILL_CHUNK.min(len))?,
        stage(if len > FILL_CHUNK { FILL_CHUNK } else { 0 })?,
    ];
    cuda::with_context(d.ctx, || {
        let events = [cuda::Event::new()?, cuda::Event::new()?];
        let mut ok = true;
        for (k, off) in (0..len).step_by(FILL_CHUNK).enumerate() {
            let n = FILL_CHUNK.min(len - off);
            let b = k % 2;
            if k >= 2 {
                // The copy out of this buffer two rounds ago.
                events[b].synchronize()?;
            }
            if !read(off, &mut bufs[b][..n]) {
                ok = false;
                break;
            }
            cuda::memcpy_htod_async(dst + off, &bufs[b][..n], d.stream)?;
            events[b].record(d.stream)?;
        }
        cuda::stream_synchronize(d.stream)?;
        Ok(ok)
    })
    .map_err(|e| e.to_string())
}

/// Start copying `len` bytes between device memory of this process and host memory on the
/// device's stream (`to_host`: device `dev_addr` to host `host`, else host to device): one
/// chunk of a message pipelined between nodes. Asynchronous where `host` is page-locked
/// ([`staging_for`]).
///
/// # Safety
/// Both ranges are valid for `len` bytes and left alone until the copy is done.
pub unsafe fn chunk_copy(
    dev_addr: usize,
    host: *mut u8,
    len: usize,
    to_host: bool,
) -> Result<InFlight, String> {
    let info = super::classify(dev_addr as *const u8);
    let g = super::gpu().ok_or("CUDA is not available")?;
    let d = g.device(info.device.max(0))?;
    let t0 = std::time::Instant::now();
    let ev = cuda::with_context(d.ctx, || {
        let ev = cuda::Event::new()?;
        if to_host {
            cuda::memcpy_dtoh_async(
                std::slice::from_raw_parts_mut(host, len),
                dev_addr,
                d.stream,
            )?;
        } else {
            cuda::memcpy_htod_async(dev_addr, std::slice::from_raw_parts(host, len), d.stream)?;
        }
        ev.record(d.stream)?;
        Ok(ev)
    })
    .map_err(|e| e.to_string())?;
    Ok(InFlight { d, ev, t0, len })
}

/// Copy host bytes to device address `dst`.
///
/// # Safety
/// `dst..dst+data.len()` is writable device memory of this process.
pub unsafe fn htod(dst: usize, data: &[u8]) -> Result<(), String> {
    let info = super::classify(dst as *const u8);
    super::stage::copy_to_device(&info, dst, data).map_err(|e| e.to_string())
}

/// The `len` bytes at device address `src`, copied to host memory (a send whose receiver could
/// not read it directly).
///
/// # Safety
/// `src..src+len` is readable device memory of this process.
pub unsafe fn dtoh(src: usize, len: usize) -> Result<Vec<u8>, String> {
    let mut v = vec![0u8; len];
    let info = super::classify(src as *const u8);
    super::stage::copy_to_host(&info, src, &mut v).map_err(|e| e.to_string())?;
    Ok(v)
}

/// The `len` bytes at device address `src`, copied into a staging buffer of the pinned pool
/// ([`super::stage::staging`]: page-locked and reused above 4 KiB, where the copy engine then
/// writes it directly instead of through the driver's bounce buffer for pageable memory; the
/// heap, with the resident kernel's small copy, below): a device send staged whole before its
/// frames leave.
///
/// # Safety
/// `src..src+len` is readable device memory of this process.
pub unsafe fn dtoh_stage(src: usize, len: usize) -> Result<super::pool::HostBuf, String> {
    let info = super::classify(src as *const u8);
    let mut b = super::stage::staging(&info, len).map_err(|e| e.to_string())?;
    super::stage::copy_to_host(&info, src, &mut b).map_err(|e| e.to_string())?;
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a machine with a GPU (a recorded skip elsewhere): a device buffer staged whole for
    /// a send comes back byte for byte, in page-locked memory above 4 KiB (the copy engine
    /// writes it directly) and in heap memory at or below.
    #[test]
    fn a_staged_send_buffer_is_page_locked_above_4k() {
        let Some(g) = crate::gpu::gpu_or_skip() else {
            return;
        };
        let d = g.device(0).unwrap();
        for len in [8usize, 4096, 4097, 32 << 10, 60 << 10] {
            let src: Vec<u8> = (0..len).map(|i| (i * 7 + i / 253) as u8).collect();
            let dev = cuda::with_context(d.ctx, || cuda::mem_alloc(len)).unwrap();
            // SAFETY: dev holds len bytes; the copies finish before the checks.
            unsafe {
                cuda::with_context(d.ctx, || {
                    cuda::memcpy_htod_async(dev, &src, d.stream)?;
                    cuda::stream_synchronize(d.stream)
                })
                .unwrap();
                let b = dtoh_stage(dev, len).unwrap();
                assert!(b[..] == src[..], "{len} bytes come back");
                assert_eq!(
                    b.is_pinned(),
                    len > 4096,
                    "{len} bytes: page-locked above 4 KiB"
                );
                drop(b);
                cuda::with_context(d.ctx, || {
                    cuda::mem_free(dev);
                    Ok(())
                })
                .unwrap();
            }
        }
    }

    /// On a machine with a GPU (a recorded skip elsewhere): a push writes this process's device
    /// bytes into an exported buffer at its offset and a pull reads them back, through this
    /// process's own descriptor service (VMM memory, the one kind a process can import from
    /// itself); a range longer than the export is refused before any copy.
    #[test]
    fn push_and_pull_through_an_export() {
        let Some(g) = crate::gpu::gpu_or_skip() else {
            return;
        };
        let d = g.device(0).unwrap();
        let (base, sizes) = cuda::with_context(d.ctx, || {
            cuda::vmm_alloc_chunks(0, &[1], cuda::HANDLE_TYPE_POSIX_FD)
        })
        .unwrap();
        let len = 1 << 20;
        let target = base + 4096;
        let export = export_range(target, len).expect("VMM memory with a handle type exports");
        assert!(
            export_range(target, sizes[0]).is_none(),
            "past the allocation's end"
        );
        let src: Vec<u8> = (0..len).map(|i| (i * 13 % 253) as u8).collect();
        let local = cuda::with_context(d.ctx, || cuda::mem_alloc(len)).unwrap();
        // SAFETY: local holds len bytes of device memory owned by this test; target..+len lies
        // in the test's VMM allocation, exported above.
        unsafe {
            htod(local, &src).unwrap();
            htod(base, &[0xa5u8; 4096]).unwrap();
            let w = write_ipc(usize::MAX - 2, &export, local, len).unwrap();
            w.expect("a copy to wait for").wait().unwrap();
            assert!(
                dtoh(target, len).unwrap() == src,
                "pushed bytes land at the offset"
            );
            assert!(
                dtoh(base, 4096).unwrap().iter().all(|&b| b == 0xa5),
                "nothing before the offset is written"
            );
            htod(local, &vec![0u8; len]).unwrap();
            // A pull into device memory by a resident kernel is done when read_ipc returns
            // (None); one by the copy engine is a copy to wait for.
            if let Some(r) = read_ipc(usize::MAX - 2, &export, local, true, len).unwrap() {
                while !r.done().unwrap() {
                    std::hint::spin_loop();
                }
            }
            assert!(dtoh(local, len).unwrap() == src, "pulled back");
            assert!(write_ipc(usize::MAX - 2, &export, local, 0)
                .unwrap()
                .is_none());
            let e = write_ipc(usize::MAX - 2, &export, local, sizes[0])
                .err()
                .unwrap();
            assert!(e.contains("longer than the exported"), "{e}");
        }
        cuda::with_context(d.ctx, || {
            // SAFETY: local came from mem_alloc above and nothing uses it any more.
            unsafe { cuda::mem_free(local) };
            Ok(())
        })
        .unwrap();
    }

    /// On a machine with a GPU (a recorded skip elsewhere): the pipelined fill over several rounds
    /// and a short tail lands every byte, and a failing source stops it with `Ok(false)`.
    #[test]
    fn fill_device_in_rounds() {
        let Some(g) = crate::gpu::gpu_or_skip() else {
            return;
        };
        let d = g.device(0).unwrap();
        let len = 3 * FILL_CHUNK + 12345;
        let src: Vec<u8> = (0..len)
            .map(|i| (i % 251) as u8 ^ (i >> 20) as u8)
            .collect();
        let dst = cuda::with_context(d.ctx, || cuda::mem_alloc(len)).unwrap();
        let mut calls = 0;
        // SAFETY: dst holds len bytes of device memory owned by this test.
        let ok = unsafe {
            fill_device(dst, len, |off, buf| {
                calls += 1;
                buf.copy_from_slice(&src[off..off + buf.len()]);
                true
            })
        }
        .unwrap();
        assert!(ok);
        assert_eq!(calls, 4);
        let back = unsafe { dtoh(dst, len) }.unwrap();
        assert!(back == src, "every byte lands");
        // A source that fails in the third round.
        let mut k = 0;
        let ok = unsafe {
            fill_device(dst, len, |_, _| {
                k += 1;
                k < 3
            })
        }
        .unwrap();
        assert!(!ok);
        assert_eq!(k, 3, "nothing is read after the failure");
        cuda::with_context(d.ctx, || {
            // SAFETY: dst came from mem_alloc above and nothing uses it any more.
            unsafe { cuda::mem_free(dst) };
            Ok(())
        })
        .unwrap();
    }
}
