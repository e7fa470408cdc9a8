// Packing of derived datatypes on the GPU (src/gpu/pack.rs, src/gpu/layout.rs), included by
// primitives.cu. One kernel, `gpumpi_pack(PackDesc)`, gathers the runs of a layout in device
// memory into contiguous bytes (pack) or scatters contiguous bytes into the runs (unpack; the
// bytes between runs are never read or written).
//
// The layout of one element is either a strided descriptor (nruns runs of blen bytes, the first
// at `first`, one every `stride` bytes: vector-like types need no list) or a list of runs in
// device memory (`runs`, made by flattening the type map and merging adjacent pieces). Element
// e lies at mem + e * ext and its packed bytes at packed + e * esize. The packed side may be
// device memory or page-locked host memory (with unified addressing a cuMemHostAlloc pointer is
// valid in kernels), so a pack writes each byte over PCIe exactly once.
//
// Work is split into items: (element, run, chunk of `chunk` bytes of the run), item index
// it = ((e * nruns) + j) * cpb + c. A group of `group` threads (a power of two dividing the
// block) copies one item, its lanes striding the item's words. Words are W = 1 << wshift bytes:
// the host chose the widest W dividing every address, offset and length involved. Only the
// first `len` packed bytes move (a received prefix). Grid-stride over items: any grid is
// correct. src/gpu/layout.rs holds a Rust copy of this index arithmetic, tested without a GPU.

struct PackRun {
    int64_t disp;   // byte offset of the run from the element's address
    uint64_t len;   // bytes
    uint64_t poff;  // offset of the run's bytes in the element's packed bytes
};

struct PackDesc {
    uint64_t mem;     // address of element 0 (the user's buffer)
    uint64_t packed;  // the packed bytes
    int64_t ext;      // element extent
    uint64_t esize;   // packed bytes per element
    uint64_t items;   // count * nruns * cpb
    uint64_t nruns;   // runs per element
    uint64_t cpb;     // chunks per run
    uint64_t chunk;   // bytes per chunk (a multiple of W)
    uint64_t len;     // packed bytes to move
    int64_t first;    // strided: offset of run 0
    int64_t stride;   // strided: distance between runs
    uint64_t blen;    // strided: bytes per run
    const PackRun *runs;  // the list, or null for the strided descriptor
    uint32_t wshift;  // log2(W), 0..4
    uint32_t group;   // threads per item
    uint32_t unpack;  // 0: mem -> packed, 1: packed -> mem
    uint32_t pad;
};

template <typename W>
__device__ __forceinline__ void pack_items(const PackDesc &d) {
    const uint64_t G = d.group;
    const uint64_t t = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const uint64_t lane = t & (G - 1);
    const uint64_t ngroups = (uint64_t)gridDim.x * blockDim.x / G;
    for (uint64_t it = t / G; it < d.items; it += ngroups) {
        uint64_t c = 0, b = it;
        if (d.cpb != 1) {
            c = it % d.cpb;
            b = it / d.cpb;
        }
        uint64_t j = 0, e = b;
        if (d.nruns != 1) {
            j = b % d.nruns;
            e = b / d.nruns;
        }
        int64_t disp;
        uint64_t rlen, poff;
        if (d.runs) {
            const PackRun r = d.runs[j];
            disp = r.disp;
            rlen = r.len;
            poff = r.poff;
        } else {
            disp = d.first + (int64_t)j * d.stride;
            rlen = d.blen;
            poff = j * d.blen;
        }
        const uint64_t o = c * d.chunk;
        if (o >= rlen) continue;
        uint64_t n = rlen - o < d.chunk ? rlen - o : d.chunk;
        const uint64_t p = e * d.esize + poff + o;
        if (p >= d.len) continue;
        if (d.len - p < n) n = d.len - p;
        uint8_t *m = reinterpret_cast<uint8_t *>(d.mem + (uint64_t)((int64_t)e * d.ext + disp) + o);
        uint8_t *k = reinterpret_cast<uint8_t *>(d.packed + p);
        const W *src = reinterpret_cast<const W *>(d.unpack ? k : m);
        W *dst = reinterpret_cast<W *>(d.unpack ? m : k);
        const uint64_t nw = n / sizeof(W);
        for (uint64_t w = lane; w < nw; w += G) dst[w] = src[w];
    }
}

extern "C" __global__ void gpumpi_pack(PackDesc d) {
    switch (d.wshift) {
    case 4: pack_items<uint4>(d); break;
    case 3: pack_items<uint64_t>(d); break;
    case 2: pack_items<uint32_t>(d); break;
    case 1: pack_items<uint16_t>(d); break;
    default: pack_items<uint8_t>(d); break;
    }
}
