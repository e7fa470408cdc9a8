//! Packing: walking the flattened type map over a byte window of the packed stream.

use super::TypeDesc;

impl TypeDesc {
    /// Pack `count` elements at `src` into `dst`; returns the bytes written
    /// (`min(dst.len(), packed_size(count))`: a short `dst` gets a prefix).
    ///
    /// # Safety
    /// `src` must point to a buffer holding `count` elements of this type
    /// (every byte the type map touches must be readable).
    pub unsafe fn pack(&self, count: usize, src: *const u8, dst: &mut [u8]) -> usize {
        // SAFETY: forwarded contract.
        unsafe { self.pack_range(count, src, 0, dst) }
    }

    /// Unpack the packed stream `src` into `count` elements at `dst`; returns
    /// the bytes consumed (`min(src.len(), packed_size(count))`).
    ///
    /// # Safety
    /// `dst` must point to a buffer holding `count` elements of this type
    /// (every byte the type map touches must be writable), not overlapping `src`.
    pub unsafe fn unpack(&self, count: usize, src: &[u8], dst: *mut u8) -> usize {
        // SAFETY: forwarded contract.
        unsafe { self.unpack_range(count, src, 0, dst) }
    }

    /// Pack bytes `[skip, skip + dst.len())` of the packed stream of `count`
    /// elements at `src` into `dst`; returns the bytes written (fewer when the
    /// stream ends first).
    ///
    /// # Safety
    /// As `pack`.
    pub unsafe fn pack_range(
        &self,
        count: usize,
        src: *const u8,
        skip: usize,
        dst: &mut [u8],
    ) -> usize {
        let dp = dst.as_mut_ptr();
        let len = dst.len();
        // SAFETY: the caller guarantees the type map of `count` elements is
        // readable at `src`; `walk` stays inside `dst[..len]`.
        unsafe {
            self.walk(count, skip, len, |mem_off, pk_off, n| {
                copy_small(src.offset(mem_off), dp.add(pk_off), n)
            })
        }
    }

    /// Unpack `src`, which holds bytes `[skip, skip + src.len())` of the packed
    /// stream of `count` elements, into the elements at `dst`; returns the
    /// bytes consumed.
    ///
    /// # Safety
    /// As `unpack`.
    pub unsafe fn unpack_range(
        &self,
        count: usize,
        src: &[u8],
        skip: usize,
        dst: *mut u8,
    ) -> usize {
        let sp = src.as_ptr();
        let len = src.len();
        // SAFETY: the caller guarantees the type map of `count` elements is
        // writable at `dst`; `walk` stays inside `src[..len]`.
        unsafe {
            self.walk(count, skip, len, |mem_off, pk_off, n| {
                copy_small(sp.add(pk_off), dst.offset(mem_off), n)
            })
        }
    }

    /// Pieces of one element at memory offset `base`, from packed offset `r`
    /// inside the element, until the window of `len` bytes is full; `done`
    /// bytes of the window are already filled. Returns the new `done`.
    #[inline]
    fn walk_elem(
        &self,
        base: isize,
        r: usize,
        len: usize,
        mut done: usize,
        f: &mut impl FnMut(isize, usize, usize),
    ) -> usize {
        // Run holding packed offset r inside the element.
        let mut j = self.offs.partition_point(|&o| o <= r) - 1;
        let mut in_run = r - self.offs[j];
        while j < self.runs.len() && done < len {
            let (d, bytes) = self.runs[j];
            let n = (bytes - in_run).min(len - done);
            f(base + d + in_run as isize, done, n);
            done += n;
            in_run = 0;
            j += 1;
        }
        done
    }

    /// The pieces of memory holding packed-stream bytes `[skip, skip + len)`
    /// of `count` elements, in stream order, as `f(offset from the buffer
    /// address, offset inside the window, bytes)`; returns the bytes covered.
    /// For building iovecs (CMA `process_vm_readv`, scatter/gather copies)
    /// without packing. A contiguous layout gives one piece.
    pub fn for_each_piece(
        &self,
        count: usize,
        skip: usize,
        len: usize,
        f: impl FnMut(isize, usize, usize),
    ) -> usize {
        self.walk(count, skip, len, f)
    }

    /// Calls `f(memory offset, offset in the caller's packed window, bytes)`
    /// for each piece of packed-stream bytes `[skip, skip + len)`, in order.
    /// Returns the number of bytes visited.
    #[inline]
    fn walk(
        &self,
        count: usize,
        skip: usize,
        len: usize,
        mut f: impl FnMut(isize, usize, usize),
    ) -> usize {
        let total = self.packed_size(count);
        if skip >= total || len == 0 {
            return 0;
        }
        let len = len.min(total - skip);
        if self.is_contiguous(count) {
            f(self.true_lb + skip as isize, 0, len);
            return len;
        }
        let ext = self.extent();
        let mut i = skip / self.size;
        let r = skip % self.size;
        let mut done = 0usize;
        if r != 0 {
            // The rest of a partial first element.
            done = self.walk_elem(i as isize * ext, r, len, 0, &mut f);
            i += 1;
        }
        let whole = (len - done) / self.size;
        done = match self.uniform {
            4 => whole_elems::<4>(&self.runs, ext, i, whole, done, &mut f),
            8 => whole_elems::<8>(&self.runs, ext, i, whole, done, &mut f),
            16 => whole_elems::<16>(&self.runs, ext, i, whole, done, &mut f),
            _ => whole_elems::<0>(&self.runs, ext, i, whole, done, &mut f),
        };
        i += whole;
        if done < len {
            // The start of a partial last element.
            self.walk_elem(i as isize * ext, 0, len, done, &mut f);
        }
        len
    }
}

/// Whole elements `i0 .. i0 + n`: every run of each. `L` is the common
/// length of all runs, or 0 to take each run's own length.
#[inline(always)]
fn whole_elems<const L: usize>(
    runs: &[(isize, usize)],
    ext: isize,
    i0: usize,
    n: usize,
    mut done: usize,
    f: &mut impl FnMut(isize, usize, usize),
) -> usize {
    for k in 0..n {
        let base = (i0 + k) as isize * ext;
        for &(d, len) in runs {
            let len = if L == 0 { len } else { L };
            f(base + d, done, len);
            done += len;
        }
    }
    done
}

/// Copy `n` bytes; small power-of-two sizes without a memcpy call.
///
/// # Safety
/// `s` readable and `d` writable for `n` bytes, not overlapping.
#[inline(always)]
unsafe fn copy_small(s: *const u8, d: *mut u8, n: usize) {
    // SAFETY: caller guarantees both ranges; unaligned accesses are used.
    unsafe {
        match n {
            4 => (d as *mut u32).write_unaligned((s as *const u32).read_unaligned()),
            8 => (d as *mut u64).write_unaligned((s as *const u64).read_unaligned()),
            16 => (d as *mut u128).write_unaligned((s as *const u128).read_unaligned()),
            2 => (d as *mut u16).write_unaligned((s as *const u16).read_unaligned()),
            1 => *d = *s,
            _ => std::ptr::copy_nonoverlapping(s, d, n),
        }
    }
}
