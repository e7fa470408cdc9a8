// Allreduce through pinned shared host memory driven by one kernel per rank (src/gpu/hostcoll.rs,
// "kernel-driven allreduce"): no copy engines, no stream memory operations, no host work per
// round, so rounds can be small enough for every rank's slots to stay in the CPU's caches.
//
// Each rank's kernel area (`reg[p]`, host memory mapped into every GPU) holds
//   - at HAR_FLAGS: 64-bit counters, one 64-byte line per (stage, block): rank p's block b sets
//     its counter of stage X to g + 1 when it has finished stage X of pipeline round g;
//   - at HAR_DATA: `in[slot][j]` (n slots of `slot` bytes per depth slot) and `out[slot]`.
// Round g (pipeline rounds are numbered per communicator across calls; this call runs rounds
// base .. base + rounds) covers n sub-chunks of `qe` elements; sub-chunk j belongs to rank j.
// Block b of every rank handles the same slice (`qe / gridDim.x` elements) of every sub-chunk,
// so the blocks of a rank never wait for each other, only for the same block of the peers:
//   A: my sub-chunks j != me -> my in[s][j]            (after every peer's B of round g - depth)
//   B: reduce sub-chunk me: mine (device) and every peer's in[s][me], in rank order, into my
//      output and my out[s]               (after every peer's A of g and C of round g - depth)
//   C: every peer's out[s] -> my output sub-chunk p                (after every peer's B of g)
// with s = g mod depth. A block runs A(r), B(r - 1), C(r - 2) in one iteration, so each wait is
// for work the peers did an iteration earlier (depth >= 3 keeps the slot reuse waits off the
// critical path). Data other GPUs wrote is read with __ldcv (never a stale cached line).
// Every writing thread fences at system scope before the barrier after which thread 0 publishes
// the counter, as the resident kernel does.

#define HAR_FLAGS 64
#define HAR_MAXB 128
#define HAR_DATA 32768

struct HostAr {
    const void *in;
    void *out;
    unsigned long long elems;   // elements of the vector
    unsigned long long qe;      // elements per sub-chunk and round (gridDim.x slices of 16 B multiples)
    unsigned long long base;    // pipeline round of this call's first round
    unsigned long long rounds;  // rounds of this call
    unsigned long long slot;    // bytes per slot
    char *reg[GPUMPI_MAXP];     // every rank's kernel area, device-mapped
    int n, me, depth;
};

__device__ __forceinline__ volatile unsigned long long *har_flag(const HostAr &a, int p, int stage) {
    return reinterpret_cast<volatile unsigned long long *>(a.reg[p] + HAR_FLAGS +
                                                           (stage * HAR_MAXB + blockIdx.x) * 64);
}

__device__ __forceinline__ char *har_in(const HostAr &a, int p, int s, int j) {
    return a.reg[p] + HAR_DATA + ((unsigned long long)s * a.n + j) * a.slot;
}

__device__ __forceinline__ char *har_out(const HostAr &a, int p, int s) {
    return a.reg[p] + HAR_DATA + ((unsigned long long)a.depth * a.n + s) * a.slot;
}

// Thread 0 waits until every peer's counter of `stage` (this block's) is at least v; the
// barrier then releases the block.
__device__ __forceinline__ void har_wait(const HostAr &a, int stage, unsigned long long v) {
    if (threadIdx.x == 0) {
        for (int p = 0; p < a.n; p++) {
            if (p == a.me) continue;
            volatile unsigned long long *f = har_flag(a, p, stage);
            while (*f < v) {
            }
        }
        __threadfence();
    }
    __syncthreads();
}

__device__ __forceinline__ void har_signal(const HostAr &a, int stage, unsigned long long v, bool wrote) {
    if (wrote) __threadfence_system();
    __syncthreads();
    if (threadIdx.x == 0) *har_flag(a, a.me, stage) = v;
}

template <typename T>
__device__ __forceinline__ T har_ld(const T *p) {
    if (sizeof(T) == 2) {
        unsigned short u = __ldcv(reinterpret_cast<const unsigned short *>(p));
        return *reinterpret_cast<T *>(&u);
    } else if (sizeof(T) == 4) {
        unsigned int u = __ldcv(reinterpret_cast<const unsigned int *>(p));
        return *reinterpret_cast<T *>(&u);
    } else {
        unsigned long long u = __ldcv(reinterpret_cast<const unsigned long long *>(p));
        return *reinterpret_cast<T *>(&u);
    }
}

// This block's slice of sub-chunk j of local round r: first element in the vector (`*at`) and
// element count (0 past the end of the vector).
__device__ __forceinline__ unsigned long long har_slice(const HostAr &a, unsigned long long r, int j,
                                                        unsigned long long *at) {
    const unsigned long long se = a.qe / gridDim.x;
    const unsigned long long start = (r * a.n + j) * a.qe + blockIdx.x * se;
    *at = start;
    if (start >= a.elems) return 0;
    return min(se, a.elems - start);
}

// dst[i] = src[i] for cnt elements; `host_src`: src is memory other GPUs write.
template <typename T>
__device__ __forceinline__ void har_copy(T *dst, const T *src, unsigned long long cnt, bool host_src) {
    unsigned long long nv = 0;
    if ((((uintptr_t)dst | (uintptr_t)src) & 15) == 0) {
        nv = cnt * sizeof(T) / 16;
        const uint4 *s = reinterpret_cast<const uint4 *>(src);
        uint4 *d = reinterpret_cast<uint4 *>(dst);
        unsigned long long i = threadIdx.x;
        // Four vectors in flight per thread: reads of host memory are PCIe round trips.
        for (; i + 3 * blockDim.x < nv; i += 4 * blockDim.x) {
            uint4 v[4];
#pragma unroll
            for (int u = 0; u < 4; u++) v[u] = host_src ? __ldcv(s + i + u * blockDim.x) : s[i + u * blockDim.x];
#pragma unroll
            for (int u = 0; u < 4; u++) d[i + u * blockDim.x] = v[u];
        }
        for (; i < nv; i += blockDim.x) d[i] = host_src ? __ldcv(s + i) : s[i];
    }
    for (unsigned long long e = nv * 16 / sizeof(T) + threadIdx.x; e < cnt; e += blockDim.x)
        dst[e] = host_src ? har_ld(src + e) : src[e];
}

template <typename T, typename Op>
__device__ void host_allreduce(const HostAr &a) {
    const T *in = reinterpret_cast<const T *>(a.in);
    T *out = reinterpret_cast<T *>(a.out);
    const unsigned long long se = a.qe / gridDim.x;
    const unsigned long long soff = blockIdx.x * se;  // this block's element offset in a slot
    for (unsigned long long it = 0; it < a.rounds + 2; it++) {
        if (it < a.rounds) {  // A
            const unsigned long long r = it, g = a.base + r;
            const int s = (int)(g % a.depth);
            if (g >= (unsigned long long)a.depth) har_wait(a, 1, g - a.depth + 1);
            bool wrote = false;
            for (int j = 0; j < a.n; j++) {
                if (j == a.me) continue;
                unsigned long long at, cnt = har_slice(a, r, j, &at);
                if (cnt == 0) continue;
                har_copy<T>(reinterpret_cast<T *>(har_in(a, a.me, s, j)) + soff, in + at, cnt, false);
                wrote = true;
            }
            har_signal(a, 0, g + 1, wrote);
        }
        if (it >= 1 && it - 1 < a.rounds) {  // B
            const unsigned long long r = it - 1, g = a.base + r;
            const int s = (int)(g % a.depth);
            har_wait(a, 0, g + 1);
            if (g >= (unsigned long long)a.depth) har_wait(a, 2, g - a.depth + 1);
            unsigned long long at, cnt = har_slice(a, r, a.me, &at);
            T *slot = reinterpret_cast<T *>(har_out(a, a.me, s)) + soff;
            const T *src[GPUMPI_MAXP];
            uintptr_t mis = (uintptr_t)(out + at) | (uintptr_t)(in + at) | (uintptr_t)slot;
            for (int p = 0; p < GPUMPI_MAXP; p++) {
                if (p >= a.n) break;
                src[p] = p == a.me ? in + at : reinterpret_cast<const T *>(har_in(a, p, s, a.me)) + soff;
            }
            unsigned long long nv = 0;
            if ((mis & 15) == 0) {
                nv = cnt * sizeof(T) / 16;
                // Two vectors per source in flight per thread.
                for (unsigned long long i = threadIdx.x; i < nv; i += 2 * blockDim.x) {
                    const bool two = i + blockDim.x < nv;
                    uint4 v[2][GPUMPI_MAXP];
#pragma unroll
                    for (int p = 0; p < GPUMPI_MAXP; p++)
                        if (p < a.n) {
                            const uint4 *q = reinterpret_cast<const uint4 *>(src[p]) + i;
                            v[0][p] = p == a.me ? q[0] : __ldcv(q);
                            if (two) v[1][p] = p == a.me ? q[blockDim.x] : __ldcv(q + blockDim.x);
                        }
#pragma unroll
                    for (int u = 0; u < 2; u++) {
                        if (u == 1 && !two) break;
                        uint4 acc = v[u][0];
#pragma unroll
                        for (int p = 1; p < GPUMPI_MAXP; p++)
                            if (p < a.n) acc = op_pack<T, Op>(acc, v[u][p]);
                        reinterpret_cast<uint4 *>(out + at)[i + u * blockDim.x] = acc;
                        reinterpret_cast<uint4 *>(slot)[i + u * blockDim.x] = acc;
                    }
                }
            }
            for (unsigned long long e = nv * 16 / sizeof(T) + threadIdx.x; e < cnt; e += blockDim.x) {
                T acc = a.me == 0 ? src[0][e] : har_ld(src[0] + e);
                for (int p = 1; p < a.n; p++) acc = Op::apply(acc, p == a.me ? src[p][e] : har_ld(src[p] + e));
                out[at + e] = acc;
                slot[e] = acc;
            }
            har_signal(a, 1, g + 1, cnt > 0);
        }
        if (it >= 2) {  // C
            const unsigned long long r = it - 2, g = a.base + r;
            const int s = (int)(g % a.depth);
            har_wait(a, 1, g + 1);
            for (int p = 0; p < a.n; p++) {
                if (p == a.me) continue;
                unsigned long long at, cnt = har_slice(a, r, p, &at);
                if (cnt == 0) continue;
                har_copy<T>(out + at, reinterpret_cast<const T *>(har_out(a, p, s)) + soff, cnt, true);
            }
            // The loads are complete (their values are stored) once every thread passed the
            // barrier: the peers may rewrite their out[s] after this.
            har_signal(a, 2, g + 1, false);
        }
    }
}

#define HOST_AR_KERNEL(OPNAME, OP, TNAME, T)                                          \
    extern "C" __global__ void __launch_bounds__(512) gpumpi_host_allreduce_##OPNAME##_##TNAME(HostAr a) { \
        host_allreduce<T, OP<T>>(a);                                                  \
    }
FOR_OPS(HOST_AR_KERNEL)
