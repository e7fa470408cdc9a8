// The resident kernel of small collectives (src/gpu/resident.rs): one block that stays on the
// device, polls a command in mapped pinned host memory, exchanges data with its peers'
// resident kernels through per-communicator scratch buffers (CUDA IPC mappings, NVLink stores
// plus a flag per (parity, sender)), and reports completion in mapped host memory. No kernel
// launch and no stream synchronize per call: a call costs a host <-> running-kernel round trip
// plus an NVLink flag exchange.
//
// It exits by itself after `idle_ns` without a command (so it never holds an SM, or delays a
// cudaDeviceSynchronize, for longer than that); the host relaunches it when it sees `exited`
// equal to the epoch it was launched with.
//
// Flags carry (call number << 1 | ok): a rank whose buffers do not qualify still takes part, and
// every kernel then reports "not done", so all ranks fall back together without a host
// round of agreement.
//
// Scratch layout of one rank for one communicator: flags u64[2][8] (parity, sender) at 0, data
// at 256: [2][8][slot] bytes. Double-buffered by the call's parity: a sender writes parity k&1
// of call k only after every peer finished call k-1 (it saw their flags of call k-1), so the
// slots of call k-2 are free.

#define RES_ALLREDUCE 1u
#define RES_ALLTOALL 2u
#define RES_ALLGATHER 3u
#define RES_COPY 4u // a small copy for point-to-point staging (res_small_copy)
#define RES_DATA_OFF 256ull

// One 64-byte cache line, read by the kernel in one access (so the fields it reads belong to the
// seq it reads): the host writes the fields, then seq.
struct ResCmd {
    unsigned long long seq;
    unsigned int kind, op, type;
    unsigned int ok; // this rank's buffers qualify; the op runs only if every rank's do
    unsigned long long bytes; // allreduce: the vector; alltoall/allgather: one block
    unsigned long long src, dst;
    unsigned long long flagv; // the communicator's call number (>= 1)
    unsigned long long desc;  // device address of the communicator's ResDesc
};

// Per communicator, in this rank's scratch at RES_DESC_OFF (written once at set-up).
struct ResDesc {
    unsigned int nranks, rank;
    unsigned long long slot;
    unsigned long long peers[GPUMPI_MAXP]; // scratch of every rank, as mapped here
    unsigned long long host; // the scratch is pinned host memory (no P2P): reads bypass caches
};
#define RES_DESC_OFF 128ull

struct ResDone {
    unsigned long long seq; // (command seq << 1) | status: 1 done, 0 some rank was not ok
    unsigned long long exited;
};

__device__ __forceinline__ unsigned long long res_now() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// A load from scratch written by another GPU: through L2 only (ld.cg) for device memory (a
// resident kernel's L1 would keep stale lines across calls); uncached (ld.cv) for host memory,
// which no cache of this GPU sees being rewritten.
template <bool HOSTMEM, typename T> __device__ __forceinline__ T res_ld(const T *p) {
    if (HOSTMEM) return __ldcv(p);
    return __ldcg(p);
}

// Copy through L2 only (ld.cg): a resident kernel's L1 would keep stale lines across calls.
// Returns whether this thread stored anything (only those threads need a fence afterwards).
// PAIRS: two words per thread in flight (both loads issued before either store; the compiler
// cannot know that dst does not alias src, so a plain loop waits for each load, a whole NVLink
// or PCIe round trip for a peer's or the host's memory, before the next one). It costs registers:
// only the one-block kernel uses it (the wide one is at its 128-register limit).
template <bool HOSTMEM = false, bool PAIRS = false>
__device__ __forceinline__ bool res_copy(char *dst, const char *src, unsigned long long n) {
    bool wrote = false;
    if ((((unsigned long long)dst | (unsigned long long)src) & 15) == 0) {
        const unsigned long long nv = n / 16, step = blockDim.x;
        const uint4 *s = reinterpret_cast<const uint4 *>(src);
        uint4 *d = reinterpret_cast<uint4 *>(dst);
        unsigned long long i = threadIdx.x;
        for (; PAIRS && i + step < nv; i += 2 * step) {
            const uint4 a = res_ld<HOSTMEM>(s + i), b = res_ld<HOSTMEM>(s + i + step);
            d[i] = a;
            d[i + step] = b;
            wrote = true;
        }
        for (; i < nv; i += step) {
            d[i] = res_ld<HOSTMEM>(s + i);
            wrote = true;
        }
        for (unsigned long long i = nv * 16 + threadIdx.x; i < n; i += blockDim.x) {
            dst[i] = res_ld<HOSTMEM>(src + i);
            wrote = true;
        }
    } else {
        for (unsigned long long i = threadIdx.x; i < n; i += blockDim.x) {
            dst[i] = res_ld<HOSTMEM>(src + i);
            wrote = true;
        }
    }
    return wrote;
}

template <bool HOSTMEM, typename T, typename Op>
__device__ void res_reduce(T *dst, const char *base, unsigned long long slot, int n,
                           unsigned long long elems) {
    for (unsigned long long i = threadIdx.x; i < elems; i += blockDim.x) {
        // All operands' loads issued before the first combine (L2 latency once, not n times).
        T v[GPUMPI_MAXP];
#pragma unroll
        for (int q = 0; q < GPUMPI_MAXP; q++)
            if (q < n) v[q] = res_ld<HOSTMEM>(reinterpret_cast<const T *>(base + q * slot) + i);
        T a = v[0];
#pragma unroll
        for (int q = 1; q < GPUMPI_MAXP; q++)
            if (q < n) a = Op::apply(a, v[q]);
        dst[i] = a;
    }
}

// Copy `n` blocks of `b` bytes at once, block q from src(q) to dst(q): every thread takes
// (block, 16-byte word) pairs, so small blocks to or from several ranks go in parallel.
// Falls back to byte copies when anything is not 16-byte aligned. Returns whether this thread
// stored anything.
template <bool HOSTMEM = false, bool PAIRS = false, typename Src, typename Dst>
__device__ __forceinline__ bool res_copy_n(int n, unsigned long long b, Src src, Dst dst) {
    bool wrote = false;
    bool aligned = (b & 15) == 0;
    for (int q = 0; q < n; q++)
        aligned = aligned && ((((unsigned long long)src(q)) | ((unsigned long long)dst(q))) & 15) == 0;
    if (aligned) {
        const unsigned long long nv = b / 16, total = nv * (unsigned long long)n, step = blockDim.x;
        // PAIRS: two words per thread in flight, as in res_copy.
        for (unsigned long long i = threadIdx.x; i < total; i += (PAIRS ? 2 : 1) * step) {
            const int q = (int)(i / nv);
            const unsigned long long j = i % nv;
            const uint4 a = res_ld<HOSTMEM>(reinterpret_cast<const uint4 *>(src(q)) + j);
            wrote = true;
            if constexpr (PAIRS) {
                const unsigned long long i2 = i + step;
                if (i2 < total) {
                    const int q2 = (int)(i2 / nv);
                    const unsigned long long j2 = i2 % nv;
                    const uint4 b2 = res_ld<HOSTMEM>(reinterpret_cast<const uint4 *>(src(q2)) + j2);
                    reinterpret_cast<uint4 *>(dst(q))[j] = a;
                    reinterpret_cast<uint4 *>(dst(q2))[j2] = b2;
                    continue;
                }
            }
            reinterpret_cast<uint4 *>(dst(q))[j] = a;
        }
    } else {
        for (int q = 0; q < n; q++) wrote |= res_copy<HOSTMEM, PAIRS>(dst(q), src(q), b);
    }
    return wrote;
}

// op: 0 sum, 1 prod, 2 min, 3 max; type: 0 i32, 1 i64, 2 f32, 3 f64, 4 f16, 5 bf16
// (the orders of OPS and TYPES in src/gpu/kernels.rs).
template <bool HOSTMEM, typename T>
__device__ void res_reduce_op(unsigned int op, T *dst, const char *base, unsigned long long slot,
                              int n, unsigned long long elems) {
    switch (op) {
    case 0: res_reduce<HOSTMEM, T, OpSum<T>>(dst, base, slot, n, elems); break;
    case 1: res_reduce<HOSTMEM, T, OpProd<T>>(dst, base, slot, n, elems); break;
    case 2: res_reduce<HOSTMEM, T, OpMin<T>>(dst, base, slot, n, elems); break;
    default: res_reduce<HOSTMEM, T, OpMax<T>>(dst, base, slot, n, elems); break;
    }
}

// Step 3 of a command: reduce or gather from my slots into the destination.
template <bool HOSTMEM>
__device__ void res_finish(const ResCmd &c, const char *base, unsigned long long slot, int n) {
    const unsigned long long b = c.bytes;
    if (c.kind == RES_ALLREDUCE) {
        switch (c.type) {
        case 0: res_reduce_op<HOSTMEM, int32_t>(c.op, reinterpret_cast<int32_t *>(c.dst), base, slot, n, b / 4); break;
        case 1: res_reduce_op<HOSTMEM, long long>(c.op, reinterpret_cast<long long *>(c.dst), base, slot, n, b / 8); break;
        case 2: res_reduce_op<HOSTMEM, float>(c.op, reinterpret_cast<float *>(c.dst), base, slot, n, b / 4); break;
        case 3: res_reduce_op<HOSTMEM, double>(c.op, reinterpret_cast<double *>(c.dst), base, slot, n, b / 8); break;
        case 4: res_reduce_op<HOSTMEM, __half>(c.op, reinterpret_cast<__half *>(c.dst), base, slot, n, b / 2); break;
        default: res_reduce_op<HOSTMEM, __nv_bfloat16>(c.op, reinterpret_cast<__nv_bfloat16 *>(c.dst), base, slot, n, b / 2); break;
        }
    } else {
        res_copy_n<HOSTMEM>(
            n, b, [&](int q) { return base + q * slot; },
            [&](int q) { return reinterpret_cast<char *>(c.dst) + q * b; });
    }
}

// RES_COPY: one small copy between this device's memory and mapped pinned host memory, for
// point-to-point messages of device buffers (src/gpu/resident.rs, copy_small): no launch and no
// stream synchronize per copy.
// - op 0, device -> host: word i of the 8-byte-word area at dst is (seq << 32) | bytes 4i..4i+3
//   of src (an LL protocol as NCCL's: the host checks each word's tag, so no system fence is
//   needed before the completion store).
// - op 1, host -> device: from mapped host memory at src (uncached reads), or, with type 1,
//   from the command line itself (up to 16 bytes in flagv/desc); a device-scope fence before
//   the completion store makes the bytes visible to whatever the host runs next.
__device__ void res_small_copy(const ResCmd &c) {
    const unsigned long long n = c.bytes;
    if (c.op == 0) {
        const unsigned char *s = reinterpret_cast<const unsigned char *>(c.src);
        volatile unsigned long long *ll = reinterpret_cast<volatile unsigned long long *>(c.dst);
        const unsigned long long tag = (c.seq & 0xffffffffull) << 32;
        const bool al = (reinterpret_cast<unsigned long long>(s) & 3) == 0;
        for (unsigned long long i = threadIdx.x; i < (n + 3) / 4; i += blockDim.x) {
            unsigned int w = 0;
            if (al && 4 * i + 4 <= n) {
                w = __ldcg(reinterpret_cast<const unsigned int *>(s) + i);
            } else {
                for (unsigned long long b = 0; b < 4 && 4 * i + b < n; b++)
                    w |= (unsigned int)__ldcg(s + 4 * i + b) << (8 * b);
            }
            ll[i] = tag | w;
        }
    } else {
        char *d = reinterpret_cast<char *>(c.dst);
        if (c.type == 1) {
            const char *in = reinterpret_cast<const char *>(&c.flagv);
            if (threadIdx.x < n) d[threadIdx.x] = in[threadIdx.x];
        } else {
            res_copy<true, true>(d, reinterpret_cast<const char *>(c.src), n);
        }
        __threadfence();
    }
}

// Warp 0 of a resident kernel: poll the whole command line in one coalesced read per poll
// (each read of mapped host memory is a PCIe round trip) until its seq differs from `seen`:
// returns 1, with this lane's word of the line (lanes 0-7) in *v. After `idle_ns` without a
// command (re-checked after the decision), and once `quiet()` (called by the whole warp) says
// that the kernel has finished command `seen` everywhere, says so in `done->exited` (the host
// relaunches when it sees `exited` for this epoch and its command not done, and the new launch
// runs that command: a kernel that exited while some of its blocks still ran the command would
// have it run twice) and returns 2.
template <typename Quiet>
__device__ int res_poll(const volatile ResCmd *cmd, volatile ResDone *done, unsigned long long epoch,
                        unsigned long long idle_ns, unsigned long long seen, unsigned long long *out,
                        Quiet quiet) {
    const volatile unsigned long long *w = reinterpret_cast<const volatile unsigned long long *>(cmd);
    const unsigned long long t0 = res_now();
    int action = 0;
    unsigned long long v = 0;
    while (action == 0) {
        v = threadIdx.x < 8 ? w[threadIdx.x] : 0;
        if (__shfl_sync(0xffffffffu, v, 0) != seen) {
            action = 1;
        } else if (__shfl_sync(0xffffffffu, threadIdx.x == 0 && res_now() - t0 > idle_ns ? 1 : 0, 0) && quiet() &&
                   threadIdx.x == 0) {
            __threadfence_system();
            if (w[0] == seen) {
                done->exited = epoch;
                __threadfence_system();
                action = 2;
            }
        }
        action = __shfl_sync(0xffffffffu, action, 0);
    }
    *out = v;
    return action;
}

// 512 threads per block (src/gpu/resident/kernel.rs): at most 128 registers per thread.
extern "C" __global__ void __launch_bounds__(512)
gpumpi_resident(const volatile ResCmd *cmd, volatile ResDone *done, unsigned long long epoch,
                unsigned long long idle_ns, unsigned long long last_seq) {
    __shared__ ResCmd c;
    __shared__ ResDesc dsc;
    __shared__ int go, all_ok;
    unsigned long long seen = last_seq;
    for (;;) {
        if (threadIdx.x < 32) {
            unsigned long long v = 0;
            // One block: every command is finished when it polls.
            const int action = res_poll(cmd, done, epoch, idle_ns, seen, &v, [] { return true; });
            if (action == 1 && threadIdx.x < 8) reinterpret_cast<unsigned long long *>(&c)[threadIdx.x] = v;
            if (threadIdx.x == 0) {
                go = action == 1;
                all_ok = 1;
            }
        }
        __syncthreads();
        if (!go) return;
        if (c.kind == RES_COPY) {
            res_small_copy(c);
            __syncthreads();
            if (threadIdx.x == 0) done->seq = c.seq << 1 | 1;
            seen = c.seq;
            continue;
        }
        if (threadIdx.x < sizeof(ResDesc) / 8)
            reinterpret_cast<unsigned long long *>(&dsc)[threadIdx.x] =
                __ldcv(reinterpret_cast<const unsigned long long *>(c.desc) + threadIdx.x);
        __syncthreads();
        const int n = (int)dsc.nranks, me = (int)dsc.rank;
        const unsigned long long par = c.flagv & 1, slot = dsc.slot, b = c.bytes;
        // 1. My data into every rank's slot (par, me), if my buffers qualify.
        bool wrote = false;
        if (c.ok) {
            const bool a2a = c.kind == RES_ALLTOALL;
            wrote = res_copy_n<false, true>(
                n, b,
                [&](int p) { return reinterpret_cast<const char *>(c.src) + (a2a ? p * b : 0); },
                [&](int p) {
                    return reinterpret_cast<char *>(dsc.peers[p]) + RES_DATA_OFF + (par * GPUMPI_MAXP + me) * slot;
                });
        }
        if (wrote) __threadfence_system();
        __syncthreads();
        if (threadIdx.x < (unsigned)n) {
            volatile unsigned long long *f =
                reinterpret_cast<volatile unsigned long long *>(dsc.peers[threadIdx.x]) + par * GPUMPI_MAXP + me;
            *f = c.flagv << 1 | (c.ok ? 1 : 0);
        }
        // 2. Wait for every rank's data in my scratch.
        if (threadIdx.x < (unsigned)n) {
            volatile unsigned long long *f =
                reinterpret_cast<volatile unsigned long long *>(dsc.peers[me]) + par * GPUMPI_MAXP + threadIdx.x;
            unsigned long long v;
            while (((v = *f) >> 1) != c.flagv) {
            }
            if (!(v & 1)) all_ok = 0;
            // Acquire at system scope: the data came over PCIe into host memory.
            if (dsc.host) __threadfence_system();
        }
        __syncthreads();
        __threadfence();
        if (!all_ok) {
            // Some rank's buffers do not qualify: nothing is done; every rank saw the same
            // flags, so every host falls back together.
            if (threadIdx.x == 0) done->seq = c.seq << 1; // status 0
            seen = c.seq;
            __syncthreads();
            continue;
        }
        // 3. Reduce or gather from my slots into the destination.
        const char *base = reinterpret_cast<const char *>(dsc.peers[me]) + RES_DATA_OFF + par * GPUMPI_MAXP * slot;
        if (dsc.host)
            res_finish<true>(c, base, slot, n);
        else
            res_finish<false>(c, base, slot, n);
        // Results are visible device-wide (L2) before the host hears of them.
        __threadfence();
        __syncthreads();
        // Status and sequence number in one store, and no system fence after it: a fence.sys
        // costs ~1.3 us here (benches/NOTES.md), and nothing after the store needs ordering
        // with it (the host only waits for it to arrive).
        if (threadIdx.x == 0) done->seq = c.seq << 1 | 1;
        seen = c.seq;
    }
}
