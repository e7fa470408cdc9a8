// Allreduce through pinned shared host memory driven by one kernel per rank (src/gpu/hostmem/,
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
// with s = g mod depth. A block runs A(r), B(r - 1), C(r - 2) in one iteration, so every wait is
// for work the peers did an iteration earlier: one wait at the start of an iteration (one
// thread per peer polls its counters) and one publication at its end (depth >= 3: the slot
// reuse waits are as old). Data other GPUs wrote is read with __ldcv (never a stale cached
// line). Every writing thread fences at system scope before the barrier after which thread 0
// publishes the counters, as the resident kernel does.

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

// Thread p (one per peer, at once) waits until peer p's counters of this block are at least
// need[0..3] (A, B, C; 0: no need); the barrier then releases the block.
__device__ __forceinline__ void har_wait(const HostAr &a, const unsigned long long need[3]) {
    const int p = threadIdx.x;
    if (p < a.n && p != a.me) {
        for (int st = 0; st < 3; st++) {
            if (need[st] == 0) continue;
            volatile unsigned long long *f = har_flag(a, p, st);
            while (*f < need[st]) {
            }
        }
        __threadfence();
    }
    __syncthreads();
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
    const unsigned long long D = a.depth;
    for (unsigned long long it = 0; it < a.rounds + 2; it++) {
        // This iteration runs A(it), B(it - 1), C(it - 2) (those that exist); everything it
        // waits for, the peers did in their previous iteration, so it waits once, for all.
        const bool runA = it < a.rounds, runB = it >= 1 && it <= a.rounds, runC = it >= 2;
        const unsigned long long gA = a.base + it, gB = gA - 1, gC = gA - 2;
        unsigned long long need[3] = {0, 0, 0};
        if (runB) need[0] = gB + 1;                         // their in[s][me] of round gB
        if (runC) need[1] = gC + 1;                         // their out[s] of round gC
        if (runA && gA >= D) need[1] = max(need[1], gA - D + 1);  // my in[s] read by all
        if (runB && gB >= D) need[2] = gB - D + 1;          // my out[s] read by all
        har_wait(a, need);
        bool wrote = false;
        if (runA) {
            const int s = (int)(gA % D);
            for (int j = 0; j < a.n; j++) {
                if (j == a.me) continue;
                unsigned long long at, cnt = har_slice(a, it, j, &at);
                if (cnt == 0) continue;
                har_copy<T>(reinterpret_cast<T *>(har_in(a, a.me, s, j)) + soff, in + at, cnt, false);
                wrote = true;
            }
        }
        if (runB) {
            const int s = (int)(gB % D);
            unsigned long long at, cnt = har_slice(a, it - 1, a.me, &at);
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
            wrote |= cnt > 0;
        }
        if (runC) {
            const int s = (int)(gC % D);
            for (int p = 0; p < a.n; p++) {
                if (p == a.me) continue;
                unsigned long long at, cnt = har_slice(a, it - 2, p, &at);
                if (cnt == 0) continue;
                har_copy<T>(out + at, reinterpret_cast<const T *>(har_out(a, p, s)) + soff, cnt, true);
            }
        }
        // One publication for the three stages: the writing threads' stores to host memory
        // are visible system-wide before the counters; C's loads have completed (their values
        // are stored) once every thread has passed the barrier.
        if (wrote) __threadfence_system();
        __syncthreads();
        if (threadIdx.x == 0) {
            if (runA) *har_flag(a, a.me, 0) = gA + 1;
            if (runB) *har_flag(a, a.me, 1) = gB + 1;
            if (runC) *har_flag(a, a.me, 2) = gC + 1;
        }
    }
}

#define HOST_AR_KERNEL(OPNAME, OP, TNAME, T)                                          \
    extern "C" __global__ void __launch_bounds__(512) gpumpi_host_allreduce_##OPNAME##_##TNAME(HostAr a) { \
        host_allreduce<T, OP<T>>(a);                                                  \
    }
FOR_OPS(HOST_AR_KERNEL)
