//! A small, bounded pool of page-locked host buffers for staging device memory: copies between
//! the device and pinned memory run at copy-engine speed and touch no fresh (page-faulting)
//! pages. Buffers come in power-of-two size classes (at least 64 KiB), are kept for reuse when
//! released, and the pool never holds more than `GPUMPI_CUDA_STAGING_POOL` bytes of pinned
//! memory; beyond that (or when pinning fails) a plain heap buffer is used instead.

use crate::sys::cuda;
use std::ops::{Deref, DerefMut};
use std::sync::{LazyLock, Mutex};

const MIN_CLASS: usize = 64 << 10;

struct Pool {
    /// Released pinned buffers: (class bytes, address).
    free: Vec<(usize, usize)>,
    /// Pinned bytes allocated in all (free and in use).
    total: usize,
    limit: usize,
}

static POOL: LazyLock<Mutex<Pool>> = LazyLock::new(|| {
    Mutex::new(Pool {
        free: Vec::new(),
        total: 0,
        limit: crate::config::snapshot().cuda.staging_pool,
    })
});

enum Mem {
    Pinned { addr: usize, class: usize },
    Heap(Vec<u8>),
}

/// A host staging buffer of `len` bytes (contents unspecified until written).
pub struct HostBuf {
    mem: Mem,
    len: usize,
}

// SAFETY: the buffer is exclusively owned; pinned memory is ordinary host memory to the CPU.
unsafe impl Send for HostBuf {}

impl HostBuf {
    /// A buffer of `len` bytes, pinned when the pool allows it. `ctx`: a context to allocate
    /// pinned memory in (it is portable to every context).
    pub fn new(len: usize, ctx: Option<cuda::Context>) -> HostBuf {
        let class = len.next_power_of_two().max(MIN_CLASS);
        if let Some(ctx) = ctx {
            let mut p = POOL.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(i) = p.free.iter().position(|&(c, _)| c == class) {
                let (_, addr) = p.free.swap_remove(i);
                return HostBuf {
                    mem: Mem::Pinned { addr, class },
                    len,
                };
            }
            if p.total + class <= p.limit {
                if let Ok(addr) = cuda::with_context(ctx, || cuda::host_alloc(class)) {
                    p.total += class;
                    return HostBuf {
                        mem: Mem::Pinned {
                            addr: addr as usize,
                            class,
                        },
                        len,
                    };
                }
            } else if let Some(i) = p.free.iter().position(|&(c, _)| c > class) {
                // Full: release a free buffer of another class so the next request fits.
                let (c, addr) = p.free.swap_remove(i);
                p.total -= c;
                // SAFETY: a pooled buffer from host_alloc, not in use.
                unsafe { cuda::host_free(addr as *mut u8) };
            }
        }
        HostBuf {
            mem: Mem::Heap(vec![0u8; len]),
            len,
        }
    }

    /// Wrap a heap vector (for holding packed host data the same way as staged data).
    pub fn from_vec(v: Vec<u8>) -> HostBuf {
        let len = v.len();
        HostBuf {
            mem: Mem::Heap(v),
            len,
        }
    }

    pub fn is_pinned(&self) -> bool {
        matches!(self.mem, Mem::Pinned { .. })
    }

    /// The bytes as an owned vector (copies pinned memory).
    pub fn into_vec(self) -> Vec<u8> {
        let mut s = self;
        match std::mem::replace(&mut s.mem, Mem::Heap(Vec::new())) {
            Mem::Heap(mut v) => {
                v.truncate(s.len);
                v
            }
            m @ Mem::Pinned { .. } => {
                s.mem = m;
                s.to_vec()
            }
        }
    }
}

impl Deref for HostBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.mem {
            // SAFETY: a pinned block of at least `len` bytes owned by this buffer.
            Mem::Pinned { addr, .. } => unsafe {
                std::slice::from_raw_parts(*addr as *const u8, self.len)
            },
            Mem::Heap(v) => &v[..self.len],
        }
    }
}

impl DerefMut for HostBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        match &mut self.mem {
            // SAFETY: as for deref, exclusively borrowed.
            Mem::Pinned { addr, .. } => unsafe {
                std::slice::from_raw_parts_mut(*addr as *mut u8, self.len)
            },
            Mem::Heap(v) => &mut v[..self.len],
        }
    }
}

impl Drop for HostBuf {
    fn drop(&mut self) {
        if let Mem::Pinned { addr, class } = self.mem {
            let mut p = POOL.lock().unwrap_or_else(|e| e.into_inner());
            p.free.push((class, addr));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heap_fallback_without_cuda() {
        let mut b = HostBuf::new(1000, None);
        assert!(!b.is_pinned());
        assert_eq!(b.len(), 1000);
        b[999] = 7;
        let v = b.into_vec();
        assert_eq!(v.len(), 1000);
        assert_eq!(v[999], 7);
        assert_eq!(HostBuf::new(0, None).len(), 0);
    }
}
