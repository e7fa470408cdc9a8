// Where does a mid-size blocking allreduce on a resident grid spend its time? The protocol of
// gpumpi's wide resident kernel (kernels/resident_mid.cuh), without MPI: one host thread per
// GPU writes a command into mapped pinned memory; a resident grid picks it up; each GPU's blocks
// push their chunk of the vector into every peer's scratch (peer access over NVLink), fence,
// flag the same block of every peer, wait for the peers' flags, reduce into the output; the
// completion goes to mapped host memory, where the host spins on it.
//
// Variants (one mode bit each, combined in the table's rows):
//   base     today's design: block 0 polls the command and hands it to the other blocks through
//            device memory; every thread that stored fences at system scope (fence.sc.sys), the
//            block flags the peers with volatile stores and polls theirs; all blocks count
//            themselves finished with an atomic, the last one reports
//   pollall  every block polls the host command itself (no hand-over through device memory)
//   doneblk  every block writes its own completion word; the host checks all of them
//   relacq   one thread per peer: st.release.sys flag after the block barrier, ld.acquire.sys
//            polling (no fence.sc.sys by every storing thread)
//   ll       no flags and no fence: data words carry the call number (NCCL's LL: 16-byte stores
//            of {4 B data, 4 B tag, 4 B data, 4 B tag}); the receiver polls the data itself
//   unroll   four 16-byte loads in flight per thread before the stores
//   twoshot  reduce-scatter then allgather through the scratch (two flag exchanges)
//   launch   no resident grid: one kernel launch (<<<>>>) plus stream synchronize per call
//   echo     the command round trip alone (no data, no flags)
//   desc     every block loads a 16-word descriptor from device memory with ld.cv after the
//            command, as the wide kernel loads its ResDesc per call ("base" and its b/c/d rows
//            have it; "nodesc" rows and the sweeps do not)
//   gN/tN/bK grid blocks, threads per block, least bytes per active block (K KiB; a call of B
//            bytes runs on min(grid, B / K) blocks, as src/gpu/resident/mid.rs blocks_for)
// "stamp" rows also record %globaltimer in block 0 (thread 0) at: command seen, data pushed,
// peer flags seen, reduced, done stored, and print the median of each step (ns).
//
// Correctness: every row first runs `verify` calls whose data depend on the call number, rank
// and position (so a stale slot shows), checked in the reduce; "wrong" counts mismatches. Every
// resident grid exits on an exit command, or by itself after 2 s without one; a 20 s alarm per
// row aborts the process if anything spins.
//
// Build: nvcc -O3 -arch=sm_90 -Ibenches/micro benches/micro/midlat.cu -o midlat (micro.h is beside it);
// run: ./midlat [iters=20000] [gpus=2] [row filter]
// (the filter: a substring of the row names to run, e.g. "relacq").
#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>
#include "micro.h"
typedef unsigned long long u64;

#define MAXG 4
#define MAXB 64
#define SLOT (1ull << 20)
#define DATA_OFF 8192ull // flags u64 [2 phases][2 parities][MAXB][MAXG] below
#define GATHER_OFF (DATA_OFF + 2ull * MAXG * SLOT)
#define LL_OFF (GATHER_OFF + 2ull * SLOT)
#define SCRATCH_BYTES (LL_OFF + 2ull * MAXG * 2 * SLOT)
#define EXIT_BYTES (~0ull)
#define NSTAMP 5

enum {
    M_POLL_ALL = 1,
    M_DONE_BLK = 2,
    M_RELACQ = 4,
    M_UNROLL = 8,
    M_TWO_SHOT = 16,
    M_LL = 32,
    M_STAMP = 64,
    M_ECHO = 128,
    M_LAUNCH = 256,
    M_DESC = 512,
};

struct Cmd { // one 64-byte line in mapped host memory; the host writes seq last
    u64 seq, bytes, nblk, verify, pad[4];
};
struct Grid { // device memory shared by the blocks of one launch (zeroed before it)
    u64 cmd[4];
    u64 gen;
    u64 finished;
};
struct Ctx {
    char *peer[MAXG]; // scratch of every GPU, as mapped here (peer access)
    int n, me, mode;
    const uint4 *src;
    uint4 *dst;
    const volatile Cmd *cmd;
    volatile u64 *done; // [0] the grid's completion, [8 + b] block b's
    Grid *grid;
    const u64 *desc; // 16 words of device memory (M_DESC)
    u64 *stamps; // [call][2 blocks][NSTAMP] (block 0 and the last active block)
    unsigned *err;
    u64 idle_ns, last_seq;
};

__device__ __forceinline__ u64 gtime() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ u64 *flag(char *scratch, int phase, u64 par, int blk, int sender) {
    return reinterpret_cast<u64 *>(scratch) + ((phase * 2 + par) * MAXB + blk) * MAXG + sender;
}
// Piece i of `parts` of `len` 16-byte words: (offset, length) in words.
__device__ __forceinline__ void chunk(u64 len, u64 parts, u64 i, u64 *off, u64 *n) {
    const u64 per = (len + parts - 1) / parts;
    u64 s = i * per, e = (i + 1) * per;
    *off = s < len ? s : len;
    *n = (e < len ? e : len) - *off;
}
// Word i of rank r's vector in verified calls (int32 lanes).
__device__ __forceinline__ uint4 vword(u64 seq, int r, u64 i) {
    unsigned b = (unsigned)(seq * 1000003ull + r * 7919ull + i * 4);
    return make_uint4(b, b + 1, b + 2, b + 3);
}
__device__ __forceinline__ uint4 add4(uint4 a, uint4 b) {
    return make_uint4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}
__device__ __forceinline__ void check(const Ctx &c, u64 seq, u64 i, uint4 v) {
    uint4 e = make_uint4(0, 0, 0, 0);
    for (int r = 0; r < c.n; r++) e = add4(e, vword(seq, r, i));
    if (e.x != v.x || e.y != v.y || e.z != v.z || e.w != v.w) atomicAdd(c.err, 1u);
}
__device__ __forceinline__ void st_flag(u64 *p, u64 v, bool ra) {
    if (ra)
        asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
    else
        *reinterpret_cast<volatile u64 *>(p) = v;
}
__device__ __forceinline__ u64 ld_flag(u64 *p, bool ra) {
    u64 v;
    if (ra)
        asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    else
        v = *reinterpret_cast<volatile u64 *>(p);
    return v;
}
__device__ __forceinline__ void st_v4(uint4 *p, uint4 v) {
    asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z),
                 "r"(v.w)
                 : "memory");
}
__device__ __forceinline__ uint4 ld_v4(const uint4 *p) {
    uint4 v;
    asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p)
                 : "memory");
    return v;
}

// Flag exchange of (phase, parity, block) with the same block of every GPU.
__device__ void exchange(const Ctx &c, int phase, u64 par, int blk, u64 seq, bool wrote) {
    const bool ra = c.mode & M_RELACQ;
    if (!ra && wrote) __threadfence_system();
    __syncthreads();
    if (threadIdx.x < (unsigned)c.n) {
        st_flag(flag(c.peer[threadIdx.x], phase, par, blk, c.me), seq, ra);
        u64 *f = flag(c.peer[c.me], phase, par, blk, threadIdx.x);
        while (ld_flag(f, ra) != seq) {
        }
    }
    __syncthreads();
    if (!ra) __threadfence();
}

// Words [o, o + len) of my vector (the source, or the generated words of a verified call) into
// dst(q) + o for every GPU q; U words in flight per thread.
template <int U, typename Dst>
__device__ bool push(const Ctx &c, u64 seq, bool verify, u64 o, u64 len, Dst dst) {
    bool wrote = false;
    const u64 T = blockDim.x;
    for (u64 i = threadIdx.x; i < len; i += U * T) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; u++)
            if (i + u * T < len) v[u] = verify ? vword(seq, c.me, o + i + u * T) : __ldcg(c.src + o + i + u * T);
        for (int q = 0; q < c.n; q++) {
            uint4 *d = dst(q);
#pragma unroll
            for (int u = 0; u < U; u++)
                if (i + u * T < len) d[o + i + u * T] = v[u];
        }
        wrote = true;
    }
    return wrote;
}

// Reduce words [o, o + len) of the n slots slot(q) into out(k) for k < nd.
template <typename Slot, typename Out>
__device__ void reduce(const Ctx &c, u64 seq, bool verify, u64 o, u64 len, Slot slot, int nd, Out out) {
    for (u64 i = threadIdx.x; i < len; i += blockDim.x) {
        uint4 v[MAXG];
#pragma unroll
        for (int q = 0; q < MAXG; q++)
            if (q < c.n) v[q] = __ldcg(slot(q) + o + i);
        uint4 a = v[0];
#pragma unroll
        for (int q = 1; q < MAXG; q++)
            if (q < c.n) a = add4(a, v[q]);
        for (int k = 0; k < nd; k++) out(k)[o + i] = a;
        if (verify) check(c, seq, o + i, a);
    }
}

__device__ __forceinline__ void stamp(const Ctx &c, u64 call, int blk, int nblk, int k) {
    if ((c.mode & M_STAMP) && threadIdx.x == 0 && (blk == 0 || blk == nblk - 1))
        c.stamps[(call * 2 + (blk == 0 ? 0 : 1)) * NSTAMP + k] = gtime();
}
__device__ __forceinline__ void stamp_sync(const Ctx &c, u64 call, int blk, int nblk, int k) {
    if (c.mode & M_STAMP) __syncthreads();
    stamp(c, call, blk, nblk, k);
}

// One call's data and flags on block `blk` of `nblk` (the vector: `words` 16-byte words).
__device__ void one_call(const Ctx &c, u64 seq, u64 words, int nblk, bool verify, u64 call) {
    const int blk = blockIdx.x, n = c.n, me = c.me;
    const u64 par = seq & 1;
    auto slot_of = [&](int at, int from) { // push slot (par, from) in GPU at's scratch
        return reinterpret_cast<uint4 *>(c.peer[at] + DATA_OFF + (par * MAXG + from) * SLOT);
    };
    if (c.mode & M_LL) {
        // LL: word i of my chunk as two 16-byte stores {x, tag, y, tag}, {z, tag, w, tag}; my own
        // operand straight from the source.
        const unsigned tag = (unsigned)seq;
        auto ll_of = [&](int at, int from) {
            return reinterpret_cast<uint4 *>(c.peer[at] + LL_OFF + (par * MAXG + from) * 2 * SLOT);
        };
        u64 o, len;
        chunk(words, nblk, blk, &o, &len);
        for (u64 i = threadIdx.x; i < len; i += blockDim.x) {
            const uint4 v = verify ? vword(seq, me, o + i) : __ldcg(c.src + o + i);
            for (int q = 0; q < n; q++) {
                if (q == me) continue;
                uint4 *d = ll_of(q, me) + 2 * (o + i);
                st_v4(d, make_uint4(v.x, tag, v.y, tag));
                st_v4(d + 1, make_uint4(v.z, tag, v.w, tag));
            }
        }
        stamp_sync(c, call, blk, nblk, 1);
        stamp(c, call, blk, nblk, 2);
        for (u64 i = threadIdx.x; i < len; i += blockDim.x) {
            uint4 a = verify ? vword(seq, me, o + i) : __ldcg(c.src + o + i);
            for (int q = 0; q < n; q++) {
                if (q == me) continue;
                const uint4 *s = ll_of(me, q) + 2 * (o + i);
                uint4 x, y;
                do { x = ld_v4(s); } while (x.y != tag || x.w != tag);
                do { y = ld_v4(s + 1); } while (y.y != tag || y.w != tag);
                a = add4(a, make_uint4(x.x, x.z, y.x, y.z));
            }
            c.dst[o + i] = a;
            if (verify) check(c, seq, o + i, a);
        }
        stamp_sync(c, call, blk, nblk, 3);
        return;
    }
    if (c.mode & M_TWO_SHOT) {
        bool wrote = false;
        for (int q = 0; q < n; q++) {
            u64 so, sl, co, cl;
            chunk(words, n, q, &so, &sl);
            chunk(sl, nblk, blk, &co, &cl);
            // Only the piece for q: push() writes to every GPU, so go word by word here.
            uint4 *d = slot_of(q, me);
            for (u64 i = threadIdx.x; i < cl; i += blockDim.x) {
                const u64 w = so + co + i;
                d[w] = verify ? vword(seq, me, w) : __ldcg(c.src + w);
                wrote = true;
            }
        }
        stamp_sync(c, call, blk, nblk, 1);
        exchange(c, 0, par, blk, seq, wrote);
        stamp(c, call, blk, nblk, 2);
        u64 so, sl, co, cl;
        chunk(words, n, me, &so, &sl);
        chunk(sl, nblk, blk, &co, &cl);
        reduce(
            c, seq, verify, so + co, cl, [&](int q) { return slot_of(me, q); }, n,
            [&](int k) {
                return k == me ? c.dst
                               : reinterpret_cast<uint4 *>(c.peer[k] + GATHER_OFF + par * SLOT);
            });
        exchange(c, 1, par, blk, seq, cl > threadIdx.x);
        const uint4 *g = reinterpret_cast<const uint4 *>(c.peer[me] + GATHER_OFF + par * SLOT);
        for (int q = 0; q < n; q++) {
            if (q == me) continue;
            chunk(words, n, q, &so, &sl);
            chunk(sl, nblk, blk, &co, &cl);
            for (u64 i = threadIdx.x; i < cl; i += blockDim.x) {
                const uint4 v = __ldcg(g + so + co + i);
                c.dst[so + co + i] = v;
                if (verify) check(c, seq, so + co + i, v);
            }
        }
        stamp_sync(c, call, blk, nblk, 3);
        return;
    }
    u64 o, len;
    chunk(words, nblk, blk, &o, &len);
    auto dst = [&](int q) { return slot_of(q, me); };
    const bool wrote = (c.mode & M_UNROLL) ? push<4>(c, seq, verify, o, len, dst) : push<1>(c, seq, verify, o, len, dst);
    stamp_sync(c, call, blk, nblk, 1);
    exchange(c, 0, par, blk, seq, wrote);
    stamp(c, call, blk, nblk, 2);
    reduce(
        c, seq, verify, o, len, [&](int q) { return slot_of(me, q); }, 1, [&](int) { return c.dst; });
    stamp_sync(c, call, blk, nblk, 3);
}

// Warp 0: poll the command line (lanes 0-7 read one word each) until its seq differs from
// `seen`; returns false after idle_ns without one.
__device__ bool poll(const Ctx &c, u64 seen, u64 *w) {
    const volatile u64 *line = reinterpret_cast<const volatile u64 *>(c.cmd);
    const u64 t0 = gtime();
    for (;;) {
        const u64 v = threadIdx.x < 8 ? line[threadIdx.x] : 0;
        if (__shfl_sync(0xffffffffu, v, 0) != seen) {
            if (threadIdx.x < 4) w[threadIdx.x] = v;
            return true;
        }
        if (__shfl_sync(0xffffffffu, gtime() - t0 > c.idle_ns ? 1 : 0, 0)) return false;
    }
}

extern "C" __global__ void __launch_bounds__(1024) resident(Ctx c) {
    __shared__ u64 w[4];
    __shared__ int last;
    __shared__ u64 dsc[16];
    const int blk = blockIdx.x;
    u64 seen = c.last_seq, gen = 0, call = 0;
    volatile Grid *g = c.grid;
    for (;;) {
        if ((c.mode & M_POLL_ALL) || blk == 0) {
            if (threadIdx.x < 32) {
                if (!poll(c, seen, w) && threadIdx.x == 0) w[1] = EXIT_BYTES;
                __syncwarp();
                if (!(c.mode & M_POLL_ALL) && threadIdx.x == 0) {
                    for (int k = 0; k < 4; k++) g->cmd[k] = w[k];
                    __threadfence();
                    g->gen = ++gen;
                }
            }
        } else if (threadIdx.x == 0) {
            u64 x;
            while ((x = g->gen) <= gen) {
            }
            gen = x;
            __threadfence();
            for (int k = 0; k < 4; k++) w[k] = g->cmd[k];
        }
        __syncthreads();
        const u64 seq = w[0], bytes = w[1];
        const int nblk = (int)w[2];
        const bool verify = w[3] != 0;
        if (bytes == EXIT_BYTES) return;
        stamp(c, call, blk, nblk, 0);
        if (c.mode & M_DESC) {
            if (threadIdx.x < 16) dsc[threadIdx.x] = __ldcv(c.desc + threadIdx.x);
            __syncthreads();
            if (threadIdx.x < 16 && dsc[threadIdx.x] != (u64)threadIdx.x) atomicAdd(c.err, 1u);
        }
        if (!(c.mode & M_ECHO) && blk < nblk) one_call(c, seq, (bytes + 15) / 16, nblk, verify, call);
        // Results visible device-wide before the host hears of them.
        __threadfence();
        __syncthreads();
        if (threadIdx.x == 0) {
            if (c.mode & M_DONE_BLK) {
                c.done[8 + blk] = seq;
            } else {
                last = atomicAdd(&c.grid->finished, 1ull) == gridDim.x - 1;
                if (last) {
                    g->finished = 0;
                    __threadfence();
                    c.done[0] = seq;
                }
            }
        }
        stamp(c, call, blk, nblk, 4);
        seen = seq;
        call++;
        __syncthreads();
    }
}

extern "C" __global__ void __launch_bounds__(1024) launched(Ctx c, u64 seq, u64 bytes, int nblk, int verify, u64 call) {
    stamp(c, call, blockIdx.x, nblk, 0);
    one_call(c, seq, (bytes + 15) / 16, nblk, verify != 0, call);
    stamp(c, call, blockIdx.x, nblk, 4);
}

// ---------------------------------------------------------------------------------------------
struct Row {
    std::string name;
    int mode, grid, threads, bmin_k;
};

static int ng;
static std::vector<Ctx> ctx;
static std::vector<cudaStream_t> st;
static std::vector<u64 *> stamps_dev;
static std::vector<unsigned *> err_dev;
static u64 *cmd_host, *done_host; // 4 KiB per GPU each
static u64 seq_now = 0;
static const char *row_now = "";

static void on_alarm(int) {
    char b[256];
    int k = snprintf(b, sizeof b, "\nwatchdog: row '%s' still running after 20 s; aborting\n", row_now);
    if (write(1, b, k) < 0) {}
    _exit(2);
}

static volatile Cmd *cmd_of(int g) { return reinterpret_cast<volatile Cmd *>(cmd_host + 512 * g); }
static volatile u64 *done_of(int g) { return done_host + 512 * g; }

static const int NVERIFY = 300;

// One row at one size: median/p10/p90 in us over every GPU's timed calls; wrong results; the
// medians of the stamp steps (ns) of block 0 and of the last active block.
static void run(const Row &r, u64 bytes, int iters) {
    row_now = r.name.c_str();
    alarm(20);
    const u64 words = (bytes + 15) / 16;
    const u64 piece = (r.mode & M_TWO_SHOT) ? (words + ng - 1) / ng : words;
    const int nblk = (r.mode & M_ECHO) ? 1 : (int)std::min<u64>(r.grid, std::max<u64>(1, (piece * 16 + r.bmin_k * 1024 - 1) / (r.bmin_k * 1024)));
    const int total = NVERIFY + iters;
    for (int g = 0; g < ng; g++) {
        CK(cudaSetDevice(g));
        CK(cudaMemsetAsync(ctx[g].grid, 0, sizeof(Grid), st[g]));
        CK(cudaMemsetAsync(err_dev[g], 0, 4, st[g]));
        CK(cudaMemsetAsync(stamps_dev[g], 0, sizeof(u64) * 2 * NSTAMP * total, st[g]));
        CK(cudaStreamSynchronize(st[g]));
        for (int b = 0; b < 8 + MAXB; b++) done_of(g)[b] = seq_now;
        ctx[g].mode = r.mode;
        ctx[g].last_seq = seq_now;
        if (!(r.mode & M_LAUNCH)) {
            resident<<<r.grid, r.threads, 0, st[g]>>>(ctx[g]);
            CK(cudaGetLastError());
        }
    }
    const u64 base = seq_now;
    std::vector<std::vector<double>> lat(ng);
    std::vector<std::thread> th;
    for (int g = 0; g < ng; g++)
        th.emplace_back([&, g]() {
            CK(cudaSetDevice(g));
            volatile Cmd *cmd = cmd_of(g);
            volatile u64 *done = done_of(g);
            lat[g].reserve(total);
            for (int i = 0; i < total; i++) {
                const u64 s = base + 1 + i;
                const int verify = i < NVERIFY;
                const double t0 = now();
                if (r.mode & M_LAUNCH) {
                    launched<<<nblk, r.threads, 0, st[g]>>>(ctx[g], s, bytes, nblk, verify, i);
                    CK(cudaStreamSynchronize(st[g]));
                } else {
                    cmd->bytes = bytes;
                    cmd->nblk = nblk;
                    cmd->verify = verify;
                    std::atomic_thread_fence(std::memory_order_seq_cst);
                    cmd->seq = s;
                    if (r.mode & M_DONE_BLK) {
                        for (int b = 0; b < r.grid; b++)
                            while (done[8 + b] != s) {
                            }
                    } else {
                        while (done[0] != s) {
                        }
                    }
                }
                lat[g].push_back(now() - t0);
            }
        });
    for (auto &t : th) t.join();
    seq_now = base + total;
    if (!(r.mode & M_LAUNCH)) {
        seq_now++;
        for (int g = 0; g < ng; g++) {
            cmd_of(g)->bytes = EXIT_BYTES;
            std::atomic_thread_fence(std::memory_order_seq_cst);
            cmd_of(g)->seq = seq_now;
        }
    }
    unsigned wrong = 0;
    for (int g = 0; g < ng; g++) {
        CK(cudaSetDevice(g));
        CK(cudaStreamSynchronize(st[g]));
        unsigned e;
        CK(cudaMemcpy(&e, err_dev[g], 4, cudaMemcpyDeviceToHost));
        wrong += e;
    }
    std::vector<double> all;
    for (auto &l : lat) all.insert(all.end(), l.begin() + NVERIFY + iters / 10, l.end());
    std::sort(all.begin(), all.end());
    const size_t m = all.size();
    printf("%-26s %5d %3d %5d %8llu  %7.2f %7.2f %7.2f  %6u", r.name.c_str(), r.grid, nblk, r.threads,
           (unsigned long long)bytes, all[m / 2] * 1e6, all[m / 10] * 1e6, all[m * 9 / 10] * 1e6, wrong);
    if (r.mode & M_STAMP) {
        // Steps of GPU 0's timed calls: 0->1 seen..pushed, 1->2 flags seen, 2->3 reduced,
        // 3->4 done stored; for block 0 and the last active block; plus when the last block saw
        // the command after block 0 (0->0').
        std::vector<u64> h(2 * NSTAMP * total);
        CK(cudaSetDevice(0));
        CK(cudaMemcpy(h.data(), stamps_dev[0], h.size() * 8, cudaMemcpyDeviceToHost));
        auto med = [&](int b0, int k0, int b1, int k1) {
            std::vector<long long> d;
            for (int i = NVERIFY + iters / 10; i < total; i++) {
                const u64 x = h[(i * 2 + b0) * NSTAMP + k0], y = h[(i * 2 + b1) * NSTAMP + k1];
                if (x && y) d.push_back((long long)(y - x));
            }
            if (d.empty()) return -1ll;
            std::sort(d.begin(), d.end());
            return d[d.size() / 2];
        };
        printf("  | b0 push %5lld flag %5lld red %5lld done %5lld | last: seen+%5lld push %5lld flag %5lld red %5lld done %5lld",
               med(0, 0, 0, 1), med(0, 1, 0, 2), med(0, 2, 0, 3), med(0, 3, 0, 4), med(0, 0, 1, 0), med(1, 0, 1, 1),
               med(1, 1, 1, 2), med(1, 2, 1, 3), med(1, 3, 1, 4));
    }
    printf("\n");
    alarm(0);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    signal(SIGALRM, on_alarm);
    const int iters = argc > 1 ? atoi(argv[1]) : 20000;
    CK(cudaGetDeviceCount(&ng));
    ng = std::min(ng, argc > 2 ? atoi(argv[2]) : 2);
    ng = std::min(ng, MAXG);
    const char *filter = argc > 3 ? argv[3] : "";
    if (ng < 2) {
        printf("need 2 GPUs\n");
        return 0;
    }
    const int total = NVERIFY + iters;
    cmd_host = (u64 *)host_mapped(4096 * ng);
    done_host = (u64 *)host_mapped(4096 * ng);
    memset(cmd_host, 0, 4096 * ng);
    memset(done_host, 0, 4096 * ng);
    ctx.resize(ng);
    st.resize(ng);
    stamps_dev.resize(ng);
    err_dev.resize(ng);
    std::vector<char *> scratch(ng);
    for (int g = 0; g < ng; g++) {
        CK(cudaSetDevice(g));
        for (int p = 0; p < ng; p++)
            if (p != g) {
                cudaError_t e = cudaDeviceEnablePeerAccess(p, 0);
                if (e == cudaErrorPeerAccessAlreadyEnabled) cudaGetLastError();
                else CK(e);
            }
        CK(cudaMalloc(&scratch[g], SCRATCH_BYTES));
        CK(cudaMemset(scratch[g], 0, SCRATCH_BYTES));
        void *src, *dst;
        CK(cudaMalloc(&src, SLOT));
        CK(cudaMalloc(&dst, SLOT));
        CK(cudaMemset(src, 1, SLOT));
        CK(cudaMalloc(&ctx[g].grid, sizeof(Grid)));
        CK(cudaMalloc(&stamps_dev[g], sizeof(u64) * 2 * NSTAMP * total));
        CK(cudaMalloc(&err_dev[g], 4));
        u64 d16[16], *dd;
        for (int k = 0; k < 16; k++) d16[k] = k;
        CK(cudaMalloc(&dd, sizeof d16));
        CK(cudaMemcpy(dd, d16, sizeof d16, cudaMemcpyHostToDevice));
        ctx[g].desc = dd;
        st[g] = stream_nonblocking();
        ctx[g].src = (const uint4 *)src;
        ctx[g].dst = (uint4 *)dst;
        void *cp, *dp;
        CK(cudaHostGetDevicePointer(&cp, cmd_host + 512 * g, 0));
        CK(cudaHostGetDevicePointer(&dp, done_host + 512 * g, 0));
        ctx[g].cmd = (const volatile Cmd *)cp;
        ctx[g].done = (volatile u64 *)dp;
        ctx[g].stamps = stamps_dev[g];
        ctx[g].err = err_dev[g];
        ctx[g].n = ng;
        ctx[g].me = g;
        ctx[g].idle_ns = 2000000000ull;
        CK(cudaDeviceSynchronize());
    }
    for (int g = 0; g < ng; g++)
        for (int q = 0; q < ng; q++) ctx[g].peer[q] = scratch[q];

    const int PA = M_POLL_ALL | M_DESC, DB = M_DONE_BLK, RA = M_RELACQ, BCD = PA | DB | RA, D = M_DESC;
    std::vector<Row> rows = {
        {"echo g1", M_ECHO, 1, 512, 16},
        {"echo g16 (base)", M_ECHO, 16, 512, 16},
        {"echo g16 pollall", M_ECHO | M_POLL_ALL, 16, 512, 16},
        {"echo g16 doneblk", M_ECHO | DB, 16, 512, 16},
        {"echo g16 pollall+doneblk", M_ECHO | M_POLL_ALL | DB, 16, 512, 16},
        {"base", D, 16, 512, 16},
        {"base stamp", D | M_STAMP, 16, 512, 16},
        {"base nodesc", 0, 16, 512, 16},
        {"pollall", PA, 16, 512, 16},
        {"doneblk", D | DB, 16, 512, 16},
        {"relacq", D | RA, 16, 512, 16},
        {"relacq+doneblk", D | RA | DB, 16, 512, 16},
        {"pollall+doneblk+relacq", BCD, 16, 512, 16},
        {"p+d+r stamp", BCD | M_STAMP, 16, 512, 16},
        {"p+d+r nodesc", BCD & ~M_DESC, 16, 512, 16},
        {"relacq+doneblk nodesc", RA | DB, 16, 512, 16},
        {"r+d nodesc unroll", RA | DB | M_UNROLL, 16, 512, 16},
        {"ll", M_LL, 16, 512, 16},
        {"ll+doneblk", M_LL | DB, 16, 512, 16},
        {"ll+pollall+doneblk", M_LL | ((PA | DB) & ~M_DESC), 16, 512, 16},
        {"ll+doneblk stamp", M_LL | DB | M_STAMP, 16, 512, 16},
        {"relacq+doneblk g4", RA | DB, 4, 512, 16},
        {"relacq+doneblk g8", RA | DB, 8, 512, 16},
        {"relacq+doneblk g32", RA | DB, 32, 512, 16},
        {"relacq+doneblk g64", RA | DB, 64, 512, 16},
        {"relacq+doneblk g32 b4", RA | DB, 32, 512, 4},
        {"relacq+doneblk t256", RA | DB, 16, 256, 16},
        {"relacq+doneblk t1024", RA | DB, 16, 1024, 16},
        {"relacq+doneblk g32 t1024", RA | DB, 32, 1024, 16},
        {"ll+doneblk g32 b8", M_LL | DB, 32, 512, 8},
        {"ll+doneblk g64 b4", M_LL | DB, 64, 512, 4},
        {"ll+doneblk g32 t1024 b8", M_LL | DB, 32, 1024, 8},
        {"twoshot", M_TWO_SHOT, 16, 512, 16},
        {"twoshot relacq+doneblk", M_TWO_SHOT | RA | DB, 16, 512, 16},
        {"twoshot r+d g32", M_TWO_SHOT | RA | DB, 32, 512, 16},
        {"launch", M_LAUNCH, 16, 512, 16},
        {"launch relacq", M_LAUNCH | RA, 16, 512, 16},
        {"launch ll", M_LAUNCH | M_LL, 16, 512, 16},
    };
    const u64 sizes[] = {8, 16 << 10, 64 << 10, 256 << 10, 512 << 10, 1 << 20};
    for (int g = 0; g < ng; g++) {
        cudaDeviceProp pr;
        CK(cudaGetDeviceProperties(&pr, g));
        printf("GPU %d: %s, %d SMs\n", g, pr.name, pr.multiProcessorCount);
    }
    printf("midlat: %d GPUs, %d timed calls per row (after %d verified), us per call (host: command "
           "written .. completion seen)\n",
           ng, iters, NVERIFY);
    printf("%-26s %5s %3s %5s %8s  %7s %7s %7s  %6s\n", "row", "grid", "blk", "thr", "bytes", "median",
           "p10", "p90", "wrong");
    for (const Row &r : rows) {
        if (!strstr(r.name.c_str(), filter)) continue;
        for (u64 b : sizes) {
            if ((r.mode & M_ECHO) && b != 8) continue;
            if ((r.mode & M_TWO_SHOT) && b < (256u << 10)) continue;
            run(r, b, iters);
        }
    }
    return 0;
}
