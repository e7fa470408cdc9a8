// Kernels of the GPU-native collectives (src/gpu/nvlink/mod.rs), included by primitives.cu so that
// one nvcc invocation builds one fatbin. Peer buffers are CUDA IPC mappings: loads and stores
// to them travel over NVLink (or PCIe) directly; these kernels never synchronize across GPUs,
// the host orders their launches (src/gpu/nvlink/mod.rs says how).
//
// - gpumpi_reduce_n_<op>_<type>(Dsts, m, Srcs, k, n): d0[i] = ... = d(m-1)[i] = s0[i] op s1[i]
//   op ... op s(k-1)[i], the same operand order on every rank, so every rank computes
//   bit-identical results.
// - gpumpi_copy_segs(Segs): blockIdx.y picks a (dst, src, len) segment, blockIdx.x strides it.

#define GPUMPI_MAXP 8

struct Srcs {
    const void *p[GPUMPI_MAXP];
};

struct Seg {
    uint64_t dst, src, len;
};
struct Segs {
    Seg s[GPUMPI_MAXP];
};

template <typename T, typename Op>
__device__ __forceinline__ uint4 op_pack(uint4 a, uint4 b) {
    T *pa = reinterpret_cast<T *>(&a);
    const T *pb = reinterpret_cast<const T *>(&b);
#pragma unroll
    for (int j = 0; j < (int)(16 / sizeof(T)); j++) pa[j] = Op::apply(pa[j], pb[j]);
    return a;
}

// The result goes to dst and to the m - 1 further places in `also` (peers' buffers: two-shot
// with its allgather fused into the reduction), each element by the thread that computed it.
struct Dsts {
    void *p[GPUMPI_MAXP];
};

template <typename T>
__device__ __forceinline__ void put_all(const Dsts &o, int m, uint64_t i, uint4 v) {
#pragma unroll
    for (int j = 0; j < GPUMPI_MAXP; j++)
        if (j < m) reinterpret_cast<uint4 *>(o.p[j])[i] = v;
}

template <typename T, typename Op>
__device__ __forceinline__ void reduce_n(const Dsts &o, int m, const Srcs &s, int k, uint64_t n) {
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    const uint64_t tid = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    uintptr_t mis = 0;
#pragma unroll
    for (int j = 0; j < GPUMPI_MAXP; j++) {
        if (j < k) mis |= (uintptr_t)s.p[j];
        if (j < m) mis |= (uintptr_t)o.p[j];
    }
    uint64_t done = 0;
    if ((mis & 15) == 0) {
        const uint64_t nv = n * sizeof(T) / 16;
        uint64_t i = tid;
        if (k == 2) {
            // One peer per kernel (two_shot_ring): four vectors per source in flight per
            // thread, as the copy kernel, to keep more NVLink reads outstanding.
            const uint4 *s0 = reinterpret_cast<const uint4 *>(s.p[0]);
            const uint4 *s1 = reinterpret_cast<const uint4 *>(s.p[1]);
            for (; i + 3 * stride < nv; i += 4 * stride) {
                uint4 a[4], b[4];
#pragma unroll
                for (int u = 0; u < 4; u++) {
                    a[u] = s0[i + u * stride];
                    b[u] = s1[i + u * stride];
                }
#pragma unroll
                for (int u = 0; u < 4; u++) put_all<T>(o, m, i + u * stride, op_pack<T, Op>(a[u], b[u]));
            }
        }
        // Two vectors per source in flight per thread.
        for (; i + stride < nv; i += 2 * stride) {
            uint4 v0[GPUMPI_MAXP], v1[GPUMPI_MAXP];
#pragma unroll
            for (int j = 0; j < GPUMPI_MAXP; j++)
                if (j < k) {
                    v0[j] = reinterpret_cast<const uint4 *>(s.p[j])[i];
                    v1[j] = reinterpret_cast<const uint4 *>(s.p[j])[i + stride];
                }
            uint4 a0 = v0[0], a1 = v1[0];
#pragma unroll
            for (int j = 1; j < GPUMPI_MAXP; j++)
                if (j < k) {
                    a0 = op_pack<T, Op>(a0, v0[j]);
                    a1 = op_pack<T, Op>(a1, v1[j]);
                }
            put_all<T>(o, m, i, a0);
            put_all<T>(o, m, i + stride, a1);
        }
        for (; i < nv; i += stride) {
            uint4 v[GPUMPI_MAXP];
#pragma unroll
            for (int j = 0; j < GPUMPI_MAXP; j++)
                if (j < k) v[j] = reinterpret_cast<const uint4 *>(s.p[j])[i];
            uint4 a = v[0];
#pragma unroll
            for (int j = 1; j < GPUMPI_MAXP; j++)
                if (j < k) a = op_pack<T, Op>(a, v[j]);
            put_all<T>(o, m, i, a);
        }
        done = nv * 16 / sizeof(T);
    }
    for (uint64_t e = done + tid; e < n; e += stride) {
        T a = reinterpret_cast<const T *>(s.p[0])[e];
        for (int j = 1; j < k; j++) a = Op::apply(a, reinterpret_cast<const T *>(s.p[j])[e]);
        for (int j = 0; j < m; j++) reinterpret_cast<T *>(o.p[j])[e] = a;
    }
}

#define REDUCE_N_KERNEL(OPNAME, OP, TNAME, T)                                                   \
    extern "C" __global__ void gpumpi_reduce_n_##OPNAME##_##TNAME(Dsts o, int m, Srcs s, int k, \
                                                                   uint64_t n) {                \
        reduce_n<T, OP<T>>(o, m, s, k, n);                                                      \
    }
FOR_OPS(REDUCE_N_KERNEL)

extern "C" __global__ void gpumpi_copy_segs(Segs segs) {
    const Seg sg = segs.s[blockIdx.y];
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    const uint64_t tid = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    uint8_t *dst = reinterpret_cast<uint8_t *>(sg.dst);
    const uint8_t *src = reinterpret_cast<const uint8_t *>(sg.src);
    const uint64_t n = sg.len;
    uint64_t done = 0;
    if (((sg.dst | sg.src) & 15) == 0) {
        const uint64_t nv = n / 16;
        const uint4 *s = reinterpret_cast<const uint4 *>(src);
        uint4 *d = reinterpret_cast<uint4 *>(dst);
        uint64_t i = tid;
        for (; i + 3 * stride < nv; i += 4 * stride) {
            uint4 a = s[i], b = s[i + stride], c = s[i + 2 * stride], e = s[i + 3 * stride];
            d[i] = a;
            d[i + stride] = b;
            d[i + 2 * stride] = c;
            d[i + 3 * stride] = e;
        }
        for (; i < nv; i += stride) d[i] = s[i];
        done = nv * 16;
    }
    for (uint64_t i = done + tid; i < n; i += stride) dst[i] = src[i];
}
