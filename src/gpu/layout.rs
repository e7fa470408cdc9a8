//! Layouts of derived datatypes for the GPU pack kernel (`kernels/pack.cuh`): pure logic,
//! tested without a GPU.
//!
//! [`Layout::of`] flattens one element of a type into its runs of bytes in packed order
//! (adjacent pieces merged, also across basic types) and describes them either as a strided
//! descriptor (`n` runs of `blen` bytes, one every `stride` bytes: vectors, subarray rows,
//! resized types, whatever their count) or as a list of runs to upload to the device. `count`
//! elements repeat the element layout every extent, which the kernel computes itself, so the list
//! never grows with `count`. [`Layout::desc`] fills the kernel's [`PackDesc`] (word width, threads
//! per run, chunking); `emulate` (tests) runs the kernel's index arithmetic on the host.

use crate::mpi::datatype::TypeDesc;

/// The byte range, relative to the buffer address, that `count` elements of `t` touch:
/// `[lo, hi)` (empty when `count` or the type's size is 0).
pub fn span(t: &TypeDesc, count: usize) -> (isize, isize) {
    if count == 0 || t.size() == 0 {
        return (0, 0);
    }
    let step = (count as isize - 1) * t.extent();
    (t.true_lb() + step.min(0), t.true_ub() + step.max(0))
}

/// One run of an element's bytes: `struct PackRun` of kernels/pack.cuh.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Run {
    /// Byte offset from the element's address.
    pub disp: i64,
    /// Bytes.
    pub len: u64,
    /// Offset of these bytes in the element's packed bytes.
    pub poff: u64,
}

/// Bytes of one [`Run`] in device memory.
pub const RUN_BYTES: usize = std::mem::size_of::<Run>();

/// How the runs of one element are described to the kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Shape {
    /// Run j covers `[first + j * stride, + blen)`, packed at `j * blen`.
    Strided { first: i64, stride: i64, blen: u64 },
    /// The runs, uploaded to device memory.
    List(Vec<Run>),
}

/// One element of a type as the pack kernel sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub shape: Shape,
    /// Runs per element.
    pub nruns: usize,
    /// Packed bytes per element (the type's size).
    pub esize: usize,
    /// The longest run.
    pub max_run: usize,
    /// OR of every run's offset, length and packed offset: its lowest set bit bounds the width
    /// of the words the kernel may move.
    pub bits: u64,
}

/// `struct PackDesc` of kernels/pack.cuh.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PackDesc {
    pub mem: u64,
    pub packed: u64,
    pub ext: i64,
    pub esize: u64,
    pub items: u64,
    pub nruns: u64,
    pub cpb: u64,
    pub chunk: u64,
    pub len: u64,
    pub first: i64,
    pub stride: i64,
    pub blen: u64,
    pub runs: u64,
    pub wshift: u32,
    pub group: u32,
    pub unpack: u32,
    pub pad: u32,
}

// The layout of kernels/pack.cuh (checked against the header by gpu::kabi's test).
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<Run>() == 24 && offset_of!(Run, poff) == 16);
    assert!(size_of::<PackDesc>() == 120 && offset_of!(PackDesc, runs) == 96);
    assert!(offset_of!(PackDesc, wshift) == 104 && offset_of!(PackDesc, pad) == 116);
};

/// Threads per block of the pack kernel.
pub const BLOCK: u32 = 512;
/// Most blocks of one pack launch (grid-stride beyond).
pub const MAX_GRID: u32 = 1024;
/// Most words one lane copies of one chunk when the runs are uniform.
const WORDS_PER_LANE: usize = 4;
/// Most chunks of one run (list layouts with uneven runs: bounds the empty items).
const MAX_CHUNKS: usize = 16;

/// Streaming flattener: merges adjacent pieces, checks for a stride, keeps at most `max_runs`
/// runs of a list.
struct Flat {
    cur: Option<Run>,
    n: usize,
    first: Run,
    second_disp: i64,
    strided: bool,
    list: Vec<Run>,
    over: bool,
    max_runs: usize,
    max_run: usize,
    bits: u64,
}

impl Flat {
    fn finish_run(&mut self, r: Run) {
        self.bits |= r.disp as u64 | r.len | r.poff;
        self.max_run = self.max_run.max(r.len as usize);
        match self.n {
            0 => self.first = r,
            1 => self.second_disp = r.disp,
            _ => {}
        }
        if self.n >= 1 {
            let stride = self.second_disp.wrapping_sub(self.first.disp);
            let want = self
                .first
                .disp
                .wrapping_add(stride.wrapping_mul(self.n as i64));
            if r.len != self.first.len || r.disp != want {
                self.strided = false;
            }
        }
        self.n += 1;
        if self.list.len() < self.max_runs {
            self.list.push(r);
        } else {
            self.over = true;
        }
    }
}

impl Layout {
    /// The layout of one element of `t`: None when the type holds no data, or when it needs a
    /// list of more than `max_runs` runs.
    pub fn of(t: &TypeDesc, max_runs: usize) -> Option<Layout> {
        let size = t.size();
        if size == 0 {
            return None;
        }
        let mut f = Flat {
            cur: None,
            n: 0,
            first: Run::default(),
            second_disp: 0,
            strided: true,
            list: Vec::new(),
            over: false,
            max_runs,
            max_run: 0,
            bits: 0,
        };
        t.for_each_piece(1, 0, size, |mem, pk, n| {
            let (mem, pk, n) = (mem as i64, pk as u64, n as u64);
            if let Some(c) = &mut f.cur {
                if c.disp + c.len as i64 == mem && c.poff + c.len == pk {
                    c.len += n;
                    return;
                }
            }
            if let Some(done) = f.cur.replace(Run {
                disp: mem,
                len: n,
                poff: pk,
            }) {
                f.finish_run(done);
            }
        });
        if let Some(done) = f.cur.take() {
            f.finish_run(done);
        }
        let shape = if f.strided {
            let stride = if f.n > 1 {
                f.second_disp - f.first.disp
            } else {
                0
            };
            f.bits |= stride as u64;
            Shape::Strided {
                first: f.first.disp,
                stride,
                blen: f.first.len,
            }
        } else if f.over {
            return None;
        } else {
            Shape::List(f.list)
        };
        Some(Layout {
            shape,
            nruns: f.n,
            esize: size,
            max_run: f.max_run,
            bits: f.bits,
        })
    }

    /// Bytes of device memory the run list needs (0 for a strided layout).
    pub fn list_bytes(&self) -> usize {
        match &self.shape {
            Shape::Strided { .. } => 0,
            Shape::List(r) => r.len() * RUN_BYTES,
        }
    }

    /// The kernel descriptor moving the first `len` packed bytes of `count` elements (extent
    /// `ext`) at device address `mem` to (`unpack` false) or from `packed`; `runs`: the device
    /// address of the uploaded list (ignored for a strided layout).
    #[allow(clippy::too_many_arguments)]
    pub fn desc(
        &self,
        mem: u64,
        packed: u64,
        ext: isize,
        count: usize,
        len: usize,
        runs: u64,
        unpack: bool,
    ) -> PackDesc {
        let len = len.min(count.saturating_mul(self.esize));
        let count = len.div_ceil(self.esize);
        let all = self.bits | ext as u64 | self.esize as u64 | mem | packed | len as u64;
        let wshift = all.trailing_zeros().min(4);
        let w = 1usize << wshift;
        let total: usize = self.esize;
        let mean_words = (total / self.nruns).max(1) / w;
        let group = prev_pow2(mean_words.clamp(1, 32));
        let mut chunk = group * w * WORDS_PER_LANE;
        if matches!(self.shape, Shape::List(_)) {
            chunk = chunk.max(self.max_run.div_ceil(MAX_CHUNKS).next_multiple_of(w));
        }
        let cpb = self.max_run.div_ceil(chunk).max(1);
        let (runs, first, stride, blen) = match &self.shape {
            Shape::Strided {
                first,
                stride,
                blen,
            } => (0, *first, *stride, *blen),
            Shape::List(_) => (runs, 0, 0, 0),
        };
        PackDesc {
            mem,
            packed,
            ext: ext as i64,
            esize: self.esize as u64,
            items: (count * self.nruns * cpb) as u64,
            nruns: self.nruns as u64,
            cpb: cpb as u64,
            chunk: chunk as u64,
            len: len as u64,
            first,
            stride,
            blen,
            runs,
            wshift,
            group: group as u32,
            unpack: unpack as u32,
            pad: 0,
        }
    }
}

/// The grid of a launch of `d` (blocks of [`BLOCK`] threads).
pub fn grid(d: &PackDesc) -> u32 {
    let threads = d.items.saturating_mul(d.group as u64);
    threads.div_ceil(BLOCK as u64).clamp(1, MAX_GRID as u64) as u32
}

fn prev_pow2(x: usize) -> usize {
    1 << (usize::BITS - 1 - x.max(1).leading_zeros())
}

/// Run the kernel's index arithmetic (kernels/pack.cuh `pack_items`) on the host, thread by
/// thread, over host memory: `d.mem`/`d.packed` are host addresses here.
///
/// # Safety
/// Every byte `d` moves is valid memory.
#[cfg(test)]
pub unsafe fn emulate(d: &PackDesc, runs: &[Run]) {
    let g = d.group as u64;
    let threads = grid(d) as u64 * BLOCK as u64;
    let ngroups = threads / g;
    let w = 1u64 << d.wshift;
    for t in 0..threads {
        let lane = t & (g - 1);
        let mut it = t / g;
        while it < d.items {
            let (c, b) = (it % d.cpb, it / d.cpb);
            let (j, e) = (b % d.nruns, b / d.nruns);
            let (disp, rlen, poff) = if d.runs != 0 {
                let r = runs[j as usize];
                (r.disp, r.len, r.poff)
            } else {
                (d.first + j as i64 * d.stride, d.blen, j * d.blen)
            };
            let o = c * d.chunk;
            it += ngroups;
            if o >= rlen {
                continue;
            }
            let mut n = (rlen - o).min(d.chunk);
            let p = e * d.esize + poff + o;
            if p >= d.len {
                continue;
            }
            n = n.min(d.len - p);
            let m = d.mem.wrapping_add((e as i64 * d.ext + disp) as u64) + o;
            let k = d.packed + p;
            let (src, dst) = if d.unpack != 0 { (k, m) } else { (m, k) };
            assert!(src % w == 0 && dst % w == 0, "misaligned word");
            let mut x = lane;
            while x < n / w {
                std::ptr::copy_nonoverlapping(
                    (src + x * w) as *const u8,
                    (dst + x * w) as *mut u8,
                    w as usize,
                );
                x += g;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mpi::datatype::Basic;
    use std::sync::Arc;

    #[test]
    fn span_of_types() {
        let int = Arc::new(TypeDesc::predefined(crate::mpi::datatype::Basic::Int32));
        assert_eq!(span(&int, 0), (0, 0));
        assert_eq!(span(&int, 5), (0, 20));
        // vector of 3 blocks of 1 int, stride 2: extent 20 bytes (last block has no tail gap).
        let v = Arc::new(TypeDesc::vector(3, 1, 2, &int).unwrap());
        assert_eq!(span(&v, 1), (0, 20));
        assert_eq!(span(&v, 2), (0, 40));
        // Negative extent through resized.
        let r = TypeDesc::resized(&int, 0, -8).unwrap();
        assert_eq!(span(&r, 3), (-16, 4));
    }

    fn p(b: Basic) -> Arc<TypeDesc> {
        Arc::new(TypeDesc::predefined(b))
    }

    fn runs_of(l: &Layout) -> Vec<Run> {
        match &l.shape {
            Shape::List(r) => r.clone(),
            Shape::Strided { .. } => Vec::new(),
        }
    }

    /// Pack and unpack `count` elements of `t` through the emulated kernel at several buffer
    /// alignments and received prefixes, against the host packer; unpacking must keep the gaps.
    fn check(t: &TypeDesc, count: usize) {
        let l = Layout::of(t, 1 << 16).expect("layout");
        let runs = runs_of(&l);
        let (lo, hi) = span(t, count);
        let span = (hi - lo) as usize;
        let total = t.packed_size(count);
        for shift in [0usize, 1, 2, 4, 8, 16] {
            // The user's buffer: span bytes of a pattern, placed so that element 0 is at
            // `base`, which is `shift` bytes past a 16-byte boundary.
            let mut mem = vec![0u8; span + 64];
            let off0 = (16 - (mem.as_ptr() as usize + 16) % 16) % 16 + 16 + shift;
            for (i, b) in mem.iter_mut().enumerate() {
                *b = (i * 7 + 3) as u8;
            }
            let base = (mem.as_mut_ptr() as usize + off0) as isize - lo;
            let mut want = vec![0u8; total];
            // SAFETY: the span of `count` elements lies in `mem`.
            unsafe { t.pack(count, base as *const u8, &mut want) };
            let mut packed = vec![0u8; total + 32];
            let poff = (16 - packed.as_ptr() as usize % 16) % 16;
            let pk = packed.as_mut_ptr() as u64 + poff as u64;
            let d = l.desc(base as u64, pk, t.extent(), count, total, 1, false);
            // SAFETY: as above; the packed window holds `total` bytes.
            unsafe { emulate(&d, &runs) };
            assert_eq!(
                &packed[poff..poff + total],
                &want[..],
                "pack count {count} shift {shift} {d:?}"
            );
            // Unpack prefixes into poisoned memory: compare with the host unpacker.
            for cut in [total, total / 2 + 1, 1, 0] {
                let src: Vec<u8> = (0..total).map(|i| (i * 13 + 5) as u8).collect();
                packed[poff..poff + total].copy_from_slice(&src);
                let mut gpu = vec![0xEEu8; span + 64];
                let mut host = gpu.clone();
                let gb = (gpu.as_mut_ptr() as usize + off0) as isize - lo;
                let hb = (host.as_mut_ptr() as usize + off0) as isize - lo;
                let d = l.desc(gb as u64, pk, t.extent(), count, cut, 1, true);
                // SAFETY: as above.
                unsafe {
                    emulate(&d, &runs);
                    t.unpack_range(count, &src[..cut], 0, hb as *mut u8);
                }
                assert!(
                    gpu == host,
                    "unpack count {count} shift {shift} cut {cut} {d:?}"
                );
            }
        }
    }

    #[test]
    fn vector_is_strided() {
        let int = p(Basic::Int32);
        let v = TypeDesc::vector(3, 2, 5, &int).unwrap();
        let l = Layout::of(&v, 16).unwrap();
        assert_eq!(
            l.shape,
            Shape::Strided {
                first: 0,
                stride: 20,
                blen: 8
            }
        );
        assert_eq!((l.nruns, l.esize, l.list_bytes()), (3, 24, 0));
        for count in [1, 2, 5] {
            check(&v, count);
        }
        // A million blocks need no list (and no list budget).
        let big = TypeDesc::vector(1 << 20, 1, 2, &p(Basic::Double)).unwrap();
        let l = Layout::of(&big, 16).unwrap();
        assert_eq!(l.nruns, 1 << 20);
        assert_eq!(l.list_bytes(), 0);
    }

    #[test]
    fn indexed_irregular_is_a_list() {
        let int = p(Basic::Int32);
        // Blocks at 0 (2 ints), 5 (1), 7 (3), 10 (1): 7..10 and 10..11 are adjacent, so the
        // last two merge into one run of 4 ints.
        let t = TypeDesc::indexed(&[2, 1, 3, 1], &[0, 5, 7, 10], &int).unwrap();
        let l = Layout::of(&t, 16).unwrap();
        assert_eq!(
            runs_of(&l),
            vec![
                Run {
                    disp: 0,
                    len: 8,
                    poff: 0
                },
                Run {
                    disp: 20,
                    len: 4,
                    poff: 8
                },
                Run {
                    disp: 28,
                    len: 16,
                    poff: 12
                },
            ]
        );
        assert_eq!(l.max_run, 16);
        for count in [1, 3, 4] {
            check(&t, count);
        }
        // Over the cap: no layout (the host path packs it).
        assert!(Layout::of(&t, 2).is_none());
        assert!(Layout::of(&t, 3).is_some());
    }

    #[test]
    fn struct_with_gaps_merges_across_types() {
        let (i, d, c, f) = (
            p(Basic::Int32),
            p(Basic::Double),
            p(Basic::Char),
            p(Basic::Float),
        );
        // int at 0, float at 4 (adjacent: one run of 8), double at 16, char at 28; extent 32.
        let t = TypeDesc::create_struct(&[1, 1, 1, 1], &[0, 4, 16, 28], &[&i, &f, &d, &c]).unwrap();
        let l = Layout::of(&t, 16).unwrap();
        assert_eq!(l.nruns, 3);
        assert_eq!(t.extent(), 32);
        for count in [1, 2, 7] {
            check(&t, count);
        }
    }

    #[test]
    fn resized_and_negative_extents() {
        let int = p(Basic::Int32);
        let r = TypeDesc::resized(&int, 0, -8).unwrap();
        check(&r, 3);
        // A struct of two ints with a gap, resized larger (count > 1 leaves gaps after it).
        let s = Arc::new(TypeDesc::create_struct(&[1, 2], &[0, 12], &[&int, &int]).unwrap());
        let rs = TypeDesc::resized(&s, -4, 40).unwrap();
        for count in [1, 2, 5] {
            check(&rs, count);
        }
        // Negative displacements and a negative extent.
        let neg = Arc::new(TypeDesc::hindexed(&[1, 2], &[-16, 8], &int).unwrap());
        let rn = TypeDesc::resized(&neg, 0, -48).unwrap();
        for count in [1, 4] {
            check(&rn, count);
        }
        // A vector of vectors (subarray-like rows): each element strided.
        let row = Arc::new(TypeDesc::vector(4, 3, 7, &p(Basic::Int16)).unwrap());
        let rr = TypeDesc::resized(&row, 0, 100).unwrap();
        check(&rr, 3);
    }

    #[test]
    fn big_runs_are_chunked() {
        // Two runs of 1 MiB and a small one: chunks keep the item count bounded and every byte
        // moves once.
        let ch = p(Basic::Char);
        let t =
            TypeDesc::hindexed(&[1 << 20, 3, 1 << 20], &[0, (1 << 20) + 5, 3 << 20], &ch).unwrap();
        let l = Layout::of(&t, 16).unwrap();
        let d = l.desc(1 << 20, 1 << 30, t.extent(), 2, 2 * t.size(), 8, false);
        assert!(d.cpb as usize <= MAX_CHUNKS, "{d:?}");
        assert!(d.chunk * d.cpb >= 1 << 20);
        check(&t, 2);
        let v = TypeDesc::vector(3, 100_000, 200_000, &p(Basic::Double)).unwrap();
        let l = Layout::of(&v, 16).unwrap();
        let d = l.desc(0, 0, v.extent(), 1, v.size(), 0, false);
        assert_eq!((d.wshift, d.group), (4, 32));
        assert_eq!(d.chunk, 32 * 16 * 4);
        assert_eq!(d.items, 3 * d.cpb);
        check(&v, 1);
    }

    #[test]
    fn word_width_follows_alignment() {
        let v = TypeDesc::vector(4, 2, 4, &p(Basic::Double)).unwrap();
        let l = Layout::of(&v, 16).unwrap();
        assert_eq!(
            l.desc(0x1000, 0x2000, v.extent(), 1, 64, 0, false).wshift,
            4
        );
        assert_eq!(
            l.desc(0x1008, 0x2000, v.extent(), 1, 64, 0, false).wshift,
            3
        );
        assert_eq!(
            l.desc(0x1000, 0x2001, v.extent(), 1, 64, 0, false).wshift,
            0
        );
        // A prefix of 61 bytes moves bytes.
        assert_eq!(l.desc(0x1000, 0x2000, v.extent(), 1, 61, 0, true).wshift, 0);
        // Prefixes limit the elements visited.
        let d = l.desc(0x1000, 0x2000, v.extent(), 10, 70, 0, true);
        assert_eq!(d.items, 2 * 4 * d.cpb);
    }
}
