//! Packing of derived datatypes on the GPU: the pack kernel (`kernels/pack.cuh`) gathers the
//! runs of a layout in device memory into contiguous bytes, or scatters contiguous bytes into
//! them, without touching the bytes between runs. The contiguous side is device memory of the
//! same device or page-locked host memory (read and written by the kernel over PCIe, so packed
//! bytes cross the bus once and the span of the layout never does).
//!
//! Layouts come from [`super::layout`]: vector-like types (and any count of them) need only a
//! strided descriptor passed with the launch; other types need their run list in device memory.
//! Uploaded lists are cached per type in a small least-recently-used cache (keyed by the type's
//! allocation, held weakly so that the address cannot be reused while cached): at most
//! [`ENTRIES`] types and `GPUMPI_CUDA_PACK_LISTS` bytes of lists (per device and on the host);
//! a type whose list alone is larger is packed on the host. `run` answers Ok(false) whenever
//! this path does not apply, and the caller (`gpu::stage`) takes the host path.

use super::layout::{Layout, Shape, RUN_BYTES};
use crate::mpi::datatype::TypeDesc;
use crate::sys::cuda;
use std::sync::{Arc, Mutex, Weak};

/// Most types whose layouts are cached.
pub const ENTRIES: usize = 32;

/// Whether GPU packing is enabled (`GPUMPI_CUDA_PACK`) and the kernels were built.
pub fn enabled() -> bool {
    super::kernels::embedded() && crate::config::snapshot().cuda.pack
}

/// Bytes of run lists kept (`GPUMPI_CUDA_PACK_LISTS`).
fn budget() -> usize {
    crate::config::snapshot().cuda.pack_lists
}

/// A run list in device memory, freed when the last user drops it.
struct DevList {
    ctx: cuda::Context,
    ptr: usize,
}

impl Drop for DevList {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from mem_alloc in `ctx`; every launch using it holds an Arc and
        // synchronized its stream before dropping it.
        let _ = cuda::with_context(self.ctx, || {
            unsafe { cuda::mem_free(self.ptr) };
            Ok(())
        });
    }
}

struct Entry {
    ty: Weak<TypeDesc>,
    /// None: the type is not packed on the GPU (no data, or its list is over the budget).
    layout: Option<Arc<Layout>>,
    lists: Vec<(i32, Arc<DevList>)>,
    stamp: u64,
}

#[derive(Default)]
struct Cache {
    entries: Vec<Entry>,
    clock: u64,
}

static CACHE: Mutex<Cache> = Mutex::new(Cache {
    entries: Vec::new(),
    clock: 0,
});

impl Cache {
    fn host_bytes(&self) -> usize {
        self.entries
            .iter()
            .filter_map(|e| e.layout.as_ref())
            .map(|l| l.list_bytes())
            .sum()
    }

    /// The entry of `t`, made (flattening the type) at its first use.
    fn entry(&mut self, t: &Arc<TypeDesc>) -> &mut Entry {
        self.clock += 1;
        let now = self.clock;
        let key = Arc::as_ptr(t);
        if let Some(i) = self.entries.iter().position(|e| e.ty.as_ptr() == key) {
            let e = &mut self.entries[i];
            e.stamp = now;
            return e;
        }
        // Dead types first, then least recently used ones, until the new one fits.
        self.entries.retain(|e| e.ty.strong_count() > 0);
        let cap = budget();
        let layout = Layout::of(t, cap / RUN_BYTES).map(Arc::new);
        let need = layout.as_ref().map_or(0, |l| l.list_bytes());
        while !self.entries.is_empty()
            && (self.entries.len() >= ENTRIES || self.host_bytes() + need > cap)
        {
            let lru = (0..self.entries.len())
                .min_by_key(|&i| self.entries[i].stamp)
                .unwrap();
            self.entries.swap_remove(lru);
        }
        self.entries.push(Entry {
            ty: Arc::downgrade(t),
            layout,
            lists: Vec::new(),
            stamp: now,
        });
        self.entries.last_mut().unwrap()
    }
}

/// Move the first `len` packed bytes of `count` elements of `t` between the device buffer
/// `mem` (device `d`) and `packed` (device-accessible: device memory of `d` or page-locked host
/// memory): pack when `unpack` is false. Synchronized before returning. Ok(false): this path
/// does not apply (disabled, no kernel, a type packed on the host).
///
/// # Safety
/// `mem` holds `count` elements of `t` in device memory of `d`; `packed` holds `len` bytes.
#[allow(clippy::too_many_arguments)]
pub unsafe fn run(
    d: super::DevCtx,
    t: &Arc<TypeDesc>,
    mem: usize,
    packed: usize,
    count: usize,
    len: usize,
    unpack: bool,
) -> Result<bool, String> {
    if !enabled() || len == 0 {
        return Ok(len == 0);
    }
    let Some(g) = super::gpu() else {
        return Ok(false);
    };
    let k = g.kernels(d.ordinal)?;
    if !k.has_pack() {
        return Ok(false);
    }
    let (layout, list) = {
        let mut c = CACHE.lock().unwrap_or_else(|e| e.into_inner());
        let e = c.entry(t);
        let Some(layout) = e.layout.clone() else {
            return Ok(false);
        };
        let list = match &layout.shape {
            Shape::Strided { .. } => None,
            Shape::List(runs) => match e.lists.iter().find(|(o, _)| *o == d.ordinal) {
                Some((_, l)) => Some(l.clone()),
                None => {
                    let l = Arc::new(upload(d, runs).map_err(|e| e.to_string())?);
                    e.lists.push((d.ordinal, l.clone()));
                    Some(l)
                }
            },
        };
        (layout, list)
    };
    let desc = layout.desc(
        mem as u64,
        packed as u64,
        t.extent(),
        count,
        len,
        list.as_ref().map_or(0, |l| l.ptr as u64),
        unpack,
    );
    tracing::debug!(
        runs = layout.nruns,
        list = list.is_some(),
        bytes = len,
        unpack,
        device = d.ordinal,
        "derived datatype packed on the GPU"
    );
    let launched = cuda::with_context(d.ctx, || {
        if !k.pack_async(&desc, d.stream)? {
            return Ok(false);
        }
        cuda::stream_synchronize(d.stream)?;
        Ok(true)
    })
    .map_err(|e| e.to_string())?;
    drop(list);
    Ok(launched)
}

/// Copy a run list into new device memory of `d`.
fn upload(d: super::DevCtx, runs: &[super::layout::Run]) -> cuda::CuResult<DevList> {
    let bytes = std::mem::size_of_val(runs);
    // SAFETY: `Run` is plain old data (repr(C), integers only).
    let raw = unsafe { std::slice::from_raw_parts(runs.as_ptr() as *const u8, bytes) };
    cuda::with_context(d.ctx, || {
        let ptr = cuda::mem_alloc(bytes)?;
        let list = DevList { ctx: d.ctx, ptr };
        // SAFETY: a fresh allocation of `bytes` bytes; synchronized before use.
        unsafe { cuda::memcpy_htod_async(ptr, raw, d.stream)? };
        cuda::stream_synchronize(d.stream)?;
        Ok(list)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mpi::datatype::Basic;

    /// On a machine with a GPU (a recorded skip elsewhere): the pack kernel against the host
    /// packer, into device memory and into pinned host memory, and unpacking into poisoned
    /// device memory (the gaps must keep the poison).
    #[test]
    fn kernel_matches_host_packer() {
        let Some(g) = crate::gpu::gpu_or_skip() else {
            return;
        };
        if !enabled() {
            crate::test_skip::gpu_skip(
                &crate::test_skip::current_test(),
                "built without CUDA kernels (no nvcc) or GPUMPI_CUDA_PACK=0",
            );
            return;
        }
        let d = g.device(0).unwrap();
        let int = Arc::new(TypeDesc::predefined(Basic::Int32));
        let dbl = Arc::new(TypeDesc::predefined(Basic::Double));
        let st = Arc::new(
            TypeDesc::create_struct(&[1, 1, 3], &[0, 8, 20], &[&int, &dbl, &int]).unwrap(),
        );
        let vec = Arc::new(TypeDesc::vector(3, 2, 3, &int).unwrap());
        let types: Vec<(Arc<TypeDesc>, usize)> = vec![
            (
                Arc::new(TypeDesc::indexed(&[3, 1, 5, 2, 1], &[0, 4, 6, 13, 17], &int).unwrap()),
                3,
            ),
            (st.clone(), 4),
            (Arc::new(TypeDesc::resized(&vec, 0, 44).unwrap()), 5),
            (Arc::new(TypeDesc::resized(&st, 0, -40).unwrap()), 3),
            (Arc::new(TypeDesc::vector(1 << 20, 1, 3, &int).unwrap()), 1),
            (
                Arc::new(
                    TypeDesc::hvector(1000, 3, 13, &Arc::new(TypeDesc::predefined(Basic::Char)))
                        .unwrap(),
                ),
                2,
            ),
        ];
        for (t, count) in types {
            let (lo, hi) = crate::gpu::layout::span(&t, count);
            let span = (hi - lo) as usize;
            let total = t.packed_size(count);
            let host: Vec<u8> = (0..span).map(|i| (i * 7 + 1) as u8).collect();
            let mut want = vec![0u8; total];
            // SAFETY: `host` holds the span of `count` elements from its start at `lo`.
            unsafe { t.pack(count, host.as_ptr().wrapping_offset(-lo), &mut want) };
            // SAFETY: fresh allocations of the sizes used; every copy is synchronized.
            unsafe {
                let (mem, pk) = cuda::with_context(d.ctx, || {
                    Ok((cuda::mem_alloc(span)?, cuda::mem_alloc(total)?))
                })
                .unwrap();
                let base = mem.wrapping_add_signed(-lo);
                cuda::with_context(d.ctx, || {
                    cuda::memcpy_htod_async(mem, &host, d.stream)?;
                    cuda::stream_synchronize(d.stream)
                })
                .unwrap();
                // Into device memory, then into pinned host memory.
                assert!(run(d, &t, base, pk, count, total, false).unwrap());
                let mut got = vec![0u8; total];
                cuda::with_context(d.ctx, || {
                    cuda::memcpy_dtoh_async(&mut got, pk, d.stream)?;
                    cuda::stream_synchronize(d.stream)
                })
                .unwrap();
                assert!(got == want, "pack to device, count {count}, {t:?}");
                let mut pinned = crate::gpu::pool::HostBuf::new(total, Some(d.ctx));
                assert!(pinned.is_pinned());
                pinned.fill(0);
                assert!(run(d, &t, base, pinned.as_ptr() as usize, count, total, false).unwrap());
                assert!(pinned[..] == want[..], "pack to pinned host, count {count}");
                // Unpack the pinned bytes (and a prefix) into poisoned device memory.
                for cut in [total, total / 2 + 1] {
                    cuda::with_context(d.ctx, || {
                        cuda::memset_async(mem, 0xA5, span, d.stream)?;
                        cuda::stream_synchronize(d.stream)
                    })
                    .unwrap();
                    assert!(run(d, &t, base, pinned.as_ptr() as usize, count, cut, true).unwrap());
                    let mut back = vec![0u8; span];
                    cuda::with_context(d.ctx, || {
                        cuda::memcpy_dtoh_async(&mut back, mem, d.stream)?;
                        cuda::stream_synchronize(d.stream)
                    })
                    .unwrap();
                    let mut exp = vec![0xA5u8; span];
                    t.unpack_range(
                        count,
                        &want[..cut],
                        0,
                        exp.as_mut_ptr().wrapping_offset(-lo),
                    );
                    assert!(back == exp, "unpack cut {cut} of {total}, count {count}");
                }
                cuda::with_context(d.ctx, || {
                    cuda::mem_free(mem);
                    cuda::mem_free(pk);
                    Ok(())
                })
                .unwrap();
            }
        }
        println!("pack kernel ok on device 0");
    }

    #[test]
    fn cache_is_bounded_and_keyed_by_type() {
        let int = Arc::new(TypeDesc::predefined(Basic::Int32));
        let mut c = Cache::default();
        let types: Vec<Arc<TypeDesc>> = (0..ENTRIES + 5)
            .map(|i| Arc::new(TypeDesc::indexed(&[1, 2], &[0, 3 + i as i64], &int).unwrap()))
            .collect();
        for t in &types {
            let e = c.entry(t);
            assert!(e.layout.is_some());
            assert!(e.ty.as_ptr() == Arc::as_ptr(t));
        }
        assert_eq!(c.entries.len(), ENTRIES);
        assert!(c.host_bytes() <= budget());
        // The most recent are kept; a hit does not add an entry.
        let last = types.last().unwrap();
        c.entry(last);
        assert_eq!(c.entries.len(), ENTRIES);
        // A freed type's entry is dropped at the next insert.
        let extra = Arc::new(TypeDesc::indexed(&[2, 1], &[0, 9], &int).unwrap());
        let dead = Arc::new(TypeDesc::indexed(&[3, 1], &[0, 9], &int).unwrap());
        c.entry(&dead);
        let dead_ptr = Arc::as_ptr(&dead);
        drop(dead);
        c.entry(&extra);
        assert!(c.entries.iter().all(|e| e.ty.as_ptr() != dead_ptr));
        // A type without data is cached as "host path".
        let empty = Arc::new(TypeDesc::contiguous(0, &int).unwrap());
        assert!(c.entry(&empty).layout.is_none());
    }
}
