// The wide resident kernel of mid-size collectives (src/gpu/resident/mid.rs): the resident
// kernel's protocol (kernels/resident.cuh: a command in mapped pinned host memory, completion in
// mapped host memory, flags carrying (call number << 1 | ok), exit after `idle_ns` without a
// command) run by a grid of blocks, so that vectors of up to a few MiB move at NVLink speed:
// one block alone cannot keep enough stores in flight.
//
// Block 0 polls the command and hands it to the other blocks through `MidGrid` in device memory
// (a generation word: (launch epoch << 32) | broadcast number, so a relaunch never sees the
// previous launch's words as new). A command runs on its first `nblk` blocks (kind >> 16); each
// takes one chunk (16-byte aligned, `mid_chunk`) of every piece of data and exchanges its own
// flags with the same block of every peer, so the blocks never wait for each other. Flags are
// one release store per peer after the block's barrier and acquire loads (no system fence by
// every storing thread). Every block of the grid, active or not, then reports the command in
// its own word of `MidDone` in mapped host memory (no count between blocks); the host waits for
// all of them, so block 0 hands over the next command only after every block took this one.
//
// Scratch of one rank for one communicator (device memory, mapped by every peer with CUDA IPC):
// flags u64 [2 phases][2 parities][RES_MID_BLOCKS_MAX blocks][GPUMPI_MAXP senders] at 0, the
// ResDesc at RES_MID_DESC_OFF, data at RES_MID_DATA_OFF: the push area [2 parities][nranks]
// [slot], then the gather area of two-shot [2 parities][slot]. Parity reuse as in
// resident.cuh: a rank starts a call of parity p only after every peer finished the previous
// mid-size call, so their reads of the call before that (parity p) are over.
//
// Commands (kind & 0xffff):
// - RES_ALLREDUCE (one-shot): every rank pushes its vector into slot (p, me) of every peer,
//   then reduces the n slots of its own scratch into its output.
// - RES_AR_TWO_SHOT: the vector in n slices (mid_chunk over n); rank q's slice of every rank is
//   pushed into rank q's slot (p, sender); rank q reduces it and pushes the result into every
//   rank's gather area (phase 1 flags), from which each rank copies the others' slices.
// - RES_ALLTOALL, RES_ALLGATHER: every rank pushes its block for q (alltoall: block q of the
//   send buffer; allgather: the send buffer) into slot (p, me) of q; each copies its slots out.
// - RES_COPY: no peers and no scratch: the first `nblk` blocks copy one chunk each of `bytes`
//   bytes from src to dst (a point-to-point pull from a peer GPU's mapped buffer, 16-byte
//   aligned ends).
// - With RES_MID_LL in the kind (one-shot allreduce, alltoall, allgather of at most a quarter
//   slot): no flags and no fence. The pieces for peers travel as LL words in the LL area
//   [2 parities][nranks][RES_MID_LL_SLOT] after the gather area: 16-byte stores of {4 data
//   bytes, tag, 4 data bytes, tag}, tag = the sender's (flagv << 1 | ok) with bit 31 set (each
//   8-byte half arrives whole, so a word whose two tags match carries its data). The receiving
//   block polls its chunk's words, copies the data into its plain slot (p, sender) and zeroes
//   the words (so a word is nonzero only between its store and its reading, and no tag of an
//   earlier call lingers there to be taken for the current one; only a released command can
//   leave words behind, which the next LL call over them waits past), then reduces or copies
//   out as above. A released command (mismatched peers) is seen in the block's first-phase
//   flags, as with flags.

#define RES_AR_TWO_SHOT 5u
#define RES_MID_LL 0x8000u
#define RES_MID_BLOCKS_MAX 64
#define RES_MID_DESC_OFF 16384ull
#define RES_MID_DATA_OFF 20480ull
#define RES_MID_GRID_BYTES 128

// Device memory shared by the blocks of one launch (zeroed once at allocation).
struct MidGrid {
    unsigned long long cmd[8]; // the command, as block 0 read it
    unsigned long long gen;    // (epoch << 32) | broadcast number of this launch
};
static_assert(sizeof(MidGrid) <= RES_MID_GRID_BYTES, "MidGrid fits its allocation");

// The wide kernel's completion, mapped host memory: `ResDone` (block 0 says `exited` there)
// followed by one word per block: (command seq << 1) | status (1: every rank ok, or the block
// took no part).
struct MidDone {
    unsigned long long seq; // unused (ResDone's place)
    unsigned long long exited;
    unsigned long long blk[RES_MID_BLOCKS_MAX];
};

// Piece i of `parts` of `len` bytes: (offset, length), in 16-byte units except the last piece
// (the same function as src/gpu/resident/mid.rs, chunk()).
__device__ __forceinline__ void mid_chunk(unsigned long long len, unsigned long long parts,
                                          unsigned long long i, unsigned long long *off,
                                          unsigned long long *n) {
    const unsigned long long units = (len + 15) / 16;
    const unsigned long long per = (units + parts - 1) / parts;
    unsigned long long s = i * per * 16, e = (i + 1) * per * 16;
    if (s > len) s = len;
    if (e > len) e = len;
    *off = s;
    *n = e - s;
}

__device__ __forceinline__ volatile unsigned long long *mid_flag(unsigned long long scratch, int phase,
                                                                 unsigned long long par, int blk,
                                                                 int sender) {
    return reinterpret_cast<volatile unsigned long long *>(scratch) +
           ((phase * 2 + par) * RES_MID_BLOCKS_MAX + blk) * GPUMPI_MAXP + sender;
}

// Reduce `elems` elements of the n operands at src(q) into every destination dst(k), k < nd
// (two-shot writes its slice's result into every rank's gather area at once): 16-byte packs
// where every address is aligned, elements otherwise.
template <typename T, typename Op, typename Src, typename Dst>
__device__ void mid_reduce(int n, Src src, int nd, Dst dst, unsigned long long elems) {
    bool aligned = true;
    for (int q = 0; q < n; q++) aligned = aligned && (((unsigned long long)src(q)) & 15) == 0;
    for (int k = 0; k < nd; k++) aligned = aligned && (((unsigned long long)dst(k)) & 15) == 0;
    constexpr int L = 16 / sizeof(T);
    unsigned long long done = 0;
    if (aligned) {
        const unsigned long long nv = elems / L;
        for (unsigned long long i = threadIdx.x; i < nv; i += blockDim.x) {
            uint4 v[GPUMPI_MAXP];
#pragma unroll
            for (int q = 0; q < GPUMPI_MAXP; q++)
                if (q < n) v[q] = __ldcg(reinterpret_cast<const uint4 *>(src(q)) + i);
            T *a = reinterpret_cast<T *>(&v[0]);
#pragma unroll
            for (int q = 1; q < GPUMPI_MAXP; q++) {
                if (q < n) {
                    const T *b = reinterpret_cast<const T *>(&v[q]);
#pragma unroll
                    for (int l = 0; l < L; l++) a[l] = Op::apply(a[l], b[l]);
                }
            }
            for (int k = 0; k < nd; k++) reinterpret_cast<uint4 *>(dst(k))[i] = v[0];
        }
        done = nv * L;
    }
    for (unsigned long long i = done + threadIdx.x; i < elems; i += blockDim.x) {
        T a = __ldcg(reinterpret_cast<const T *>(src(0)) + i);
        for (int q = 1; q < n; q++) a = Op::apply(a, __ldcg(reinterpret_cast<const T *>(src(q)) + i));
        for (int k = 0; k < nd; k++) reinterpret_cast<T *>(dst(k))[i] = a;
    }
}

template <typename T, typename Src, typename Dst>
__device__ void mid_reduce_op(unsigned int op, int n, Src src, int nd, Dst dst, unsigned long long elems) {
    switch (op) {
    case 0: mid_reduce<T, OpSum<T>>(n, src, nd, dst, elems); break;
    case 1: mid_reduce<T, OpProd<T>>(n, src, nd, dst, elems); break;
    case 2: mid_reduce<T, OpMin<T>>(n, src, nd, dst, elems); break;
    default: mid_reduce<T, OpMax<T>>(n, src, nd, dst, elems); break;
    }
}

// The op and type switch of a reduction of `bytes` bytes (types as in resident.cuh).
template <typename Src, typename Dst>
__device__ void mid_reduce_any(unsigned int op, unsigned int type, int n, Src src, int nd, Dst dst,
                               unsigned long long bytes) {
    switch (type) {
    case 0: mid_reduce_op<int32_t>(op, n, src, nd, dst, bytes / 4); break;
    case 1: mid_reduce_op<long long>(op, n, src, nd, dst, bytes / 8); break;
    case 2: mid_reduce_op<float>(op, n, src, nd, dst, bytes / 4); break;
    case 3: mid_reduce_op<double>(op, n, src, nd, dst, bytes / 8); break;
    case 4: mid_reduce_op<__half>(op, n, src, nd, dst, bytes / 2); break;
    default: mid_reduce_op<__nv_bfloat16>(op, n, src, nd, dst, bytes / 2); break;
    }
}

// Store `len` bytes from src at dst(q) for every rank q < n (allreduce, allgather: the same
// piece for every rank), each 16-byte word loaded once and stored n times where everything is
// aligned.
template <typename Dst>
__device__ __forceinline__ void mid_push_same(int n, const char *src, unsigned long long len, Dst dst) {
    bool aligned = (reinterpret_cast<unsigned long long>(src) & 15) == 0;
    for (int q = 0; q < n; q++) aligned = aligned && (reinterpret_cast<unsigned long long>(dst(q)) & 15) == 0;
    if (!aligned) {
        for (int q = 0; q < n; q++) res_copy(dst(q), src, len);
        return;
    }
    const unsigned long long nv = len / 16;
    for (unsigned long long i = threadIdx.x; i < nv; i += blockDim.x) {
        const uint4 v = __ldcg(reinterpret_cast<const uint4 *>(src) + i);
        for (int q = 0; q < n; q++) reinterpret_cast<uint4 *>(dst(q))[i] = v;
    }
    for (unsigned long long i = nv * 16 + threadIdx.x; i < len; i += blockDim.x) {
        const char v = __ldcg(src + i);
        for (int q = 0; q < n; q++) dst(q)[i] = v;
    }
}

// Set my flag of (phase, parity, block) at every rank, after this block's stores: the barrier
// orders every thread's stores before the release store of each flag (release is cumulative),
// so no thread needs a system fence of its own.
__device__ __forceinline__ void mid_signal(const ResDesc &d, int phase, unsigned long long par, int blk,
                                           unsigned long long v) {
    __syncthreads();
    if (threadIdx.x < d.nranks) {
        unsigned long long *f = const_cast<unsigned long long *>(mid_flag(d.peers[threadIdx.x], phase, par, blk, (int)d.rank));
        asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(f), "l"(v) : "memory");
    }
}

// Wait for every rank's flag of (phase, parity, block) in my scratch (acquire loads: the
// block's loads after the barrier see the data the flag was released after); whether all
// said ok.
__device__ __forceinline__ bool mid_wait(const ResDesc &d, int phase, unsigned long long par, int blk,
                                         unsigned long long flagv, int *all_ok) {
    if (threadIdx.x < d.nranks) {
        const unsigned long long *f = const_cast<const unsigned long long *>(mid_flag(d.peers[d.rank], phase, par, blk, threadIdx.x));
        unsigned long long v;
        for (;;) {
            asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(f) : "memory");
            if ((v >> 1) == flagv) break;
        }
        if (!(v & 1)) *all_ok = 0;
    }
    __syncthreads();
    return *all_ok != 0;
}

// The LL area's slot: room for the LL words (twice the data, the last word padded) of a
// quarter data slot (src/gpu/resident/mid.rs, ll_slot: the two must agree).
__device__ __forceinline__ unsigned long long mid_ll_slot(unsigned long long slot) {
    return ((slot / 2 + 15) & ~15ull) + 16;
}

// The tag of LL words: the sender's flag (flagv << 1 | ok), bit 31 set (never 0, the value of
// a consumed word).
__device__ __forceinline__ unsigned int mid_ll_tag(unsigned long long sig) {
    return (unsigned int)sig | 0x80000000u;
}

// `len` bytes from src (nullptr: zeros, a rank whose buffers do not qualify) as LL words at ll
// (16 bytes per 8 data bytes; the last word padded with zeros).
__device__ __forceinline__ void mid_ll_put(char *ll, const char *src, unsigned long long len, unsigned int tag) {
    const unsigned long long units = (len + 7) / 8;
    const bool al = src != nullptr && (reinterpret_cast<unsigned long long>(src) & 7) == 0;
    for (unsigned long long u = threadIdx.x; u < units; u += blockDim.x) {
        unsigned long long v = 0;
        if (src != nullptr) {
            if (al && 8 * u + 8 <= len) {
                v = __ldcg(reinterpret_cast<const unsigned long long *>(src) + u);
            } else {
                for (unsigned long long k = 0; k < 8 && 8 * u + k < len; k++)
                    v |= (unsigned long long)(unsigned char)__ldcg(src + 8 * u + k) << (8 * k);
            }
        }
        asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(ll + 16 * u), "r"((unsigned int)v),
                     "r"(tag), "r"((unsigned int)(v >> 32)), "r"(tag)
                     : "memory");
    }
}

// Wait for the LL words of `len` bytes at ll tagged `tag` (either ok bit), store their data at
// plain (8 bytes per word, 8-byte aligned) and zero them. A word tagged "not ok" clears
// *all_ok; so does a release (the first-phase flag `rel` set to flagv << 1 by the host), which
// also ends the wait.
__device__ __forceinline__ void mid_ll_get(char *plain, char *ll, unsigned long long len, unsigned int tag,
                                           const unsigned long long *rel, unsigned long long flagv,
                                           int *all_ok) {
    const unsigned long long units = (len + 7) / 8;
    for (unsigned long long u = threadIdx.x; u < units; u += blockDim.x) {
        unsigned int x, t0, y, t1;
        for (unsigned int spin = 1;; spin++) {
            asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                         : "=r"(x), "=r"(t0), "=r"(y), "=r"(t1)
                         : "l"(ll + 16 * u)
                         : "memory");
            if ((t0 | 1u) == (tag | 1u) && (t1 | 1u) == (tag | 1u)) break;
            if ((spin & 1023u) == 0) {
                unsigned long long r;
                asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(r) : "l"(rel) : "memory");
                if (r == flagv << 1) {
                    *all_ok = 0;
                    return;
                }
            }
        }
        if (!(t0 & t1 & 1u)) *all_ok = 0;
        *reinterpret_cast<unsigned long long *>(plain + 8 * u) = (unsigned long long)y << 32 | x;
        asm volatile("st.volatile.global.v4.u32 [%0], {%1,%1,%1,%1};" ::"l"(ll + 16 * u), "r"(0u) : "memory");
    }
}

extern "C" __global__ void gpumpi_resident_mid(const volatile ResCmd *cmd, volatile MidDone *done,
                                               MidGrid *grid, unsigned long long epoch,
                                               unsigned long long idle_ns, unsigned long long last_seq) {
    __shared__ ResCmd c;
    __shared__ ResDesc dsc;
    __shared__ int go, all_ok;
    volatile MidGrid *g = grid;
    unsigned long long seen = last_seq;  // block 0: the last command's seq
    unsigned long long gen = epoch << 32; // thread 0: the last broadcast taken
    for (;;) {
        if (blockIdx.x == 0) {
            if (threadIdx.x < 32) {
                // Exit (action 2) reaches the other blocks as a command of kind 0; the host's
                // relaunch queues behind this whole grid on the kernel's stream.
                unsigned long long v = 0;
                // Quiet: every block has reported command `seen` (block 0 finishes its chunk
                // first, the others may still be copying theirs).
                auto quiet = [&] {
                    bool all = true;
                    for (unsigned int b = threadIdx.x; b < gridDim.x; b += 32) all = all && (done->blk[b] >> 1) == seen;
                    return __all_sync(0xffffffffu, all) != 0;
                };
                const int action =
                    res_poll(cmd, reinterpret_cast<volatile ResDone *>(done), epoch, idle_ns, seen, &v, quiet);
                if (threadIdx.x < 8) reinterpret_cast<unsigned long long *>(&c)[threadIdx.x] = action == 1 ? v : 0;
                __syncwarp();
                if (threadIdx.x == 0) {
                    // Hand the command (kind 0: exit) to the other blocks.
                    for (int k = 0; k < 8; k++) g->cmd[k] = reinterpret_cast<unsigned long long *>(&c)[k];
                    __threadfence();
                    g->gen = ++gen;
                    go = action == 1;
                }
            }
        } else if (threadIdx.x == 0) {
            unsigned long long x;
            while ((x = g->gen) <= gen) {
            }
            gen = x;
            __threadfence();
            for (int k = 0; k < 8; k++) reinterpret_cast<unsigned long long *>(&c)[k] = g->cmd[k];
            go = c.kind != 0;
        }
        __syncthreads();
        if (!go) return;
        if ((c.kind & 0xffffu) == RES_COPY) {
            // A receiver's pull of a device message (src/gpu/resident/kernel.rs, copy_wide):
            // block blk < nblk copies its chunk of src to dst (device memory of this GPU, or a
            // peer's buffer mapped through CUDA IPC); no scratch, no flags, no descriptor.
            const int nblk = (int)(c.kind >> 16), blk = (int)blockIdx.x;
            if (blk < nblk) {
                unsigned long long co, cl;
                mid_chunk(c.bytes, nblk, blk, &co, &cl);
                res_copy(reinterpret_cast<char *>(c.dst) + co, reinterpret_cast<const char *>(c.src) + co, cl);
            }
            // The bytes are visible device-wide before the host hears of them.
            __threadfence();
            __syncthreads();
            if (threadIdx.x == 0) done->blk[blk] = c.seq << 1 | 1;
            seen = c.seq;
            __syncthreads();
            continue;
        }
        if (threadIdx.x == 0) all_ok = 1;
        if (threadIdx.x < sizeof(ResDesc) / 8)
            reinterpret_cast<unsigned long long *>(&dsc)[threadIdx.x] =
                __ldcv(reinterpret_cast<const unsigned long long *>(c.desc) + threadIdx.x);
        __syncthreads();
        const unsigned int kind = c.kind & 0xffffu & ~RES_MID_LL;
        const bool ll = (c.kind & RES_MID_LL) != 0;
        const int nblk = (int)(c.kind >> 16), blk = (int)blockIdx.x;
        const int n = (int)dsc.nranks, me = (int)dsc.rank;
        const unsigned long long par = c.flagv & 1, slot = dsc.slot, b = c.bytes;
        const unsigned long long sig = c.flagv << 1 | (c.ok ? 1 : 0);
        auto push = [&](int q, int from) { // slot (par, from) of rank q
            return reinterpret_cast<char *>(dsc.peers[q]) + RES_MID_DATA_OFF + (par * n + from) * slot;
        };
        auto gather = [&](int q) {
            return reinterpret_cast<char *>(dsc.peers[q]) + RES_MID_DATA_OFF + 2ull * n * slot + par * slot;
        };
        auto ll_at = [&](int q, int from) { // LL slot (par, from) of rank q
            return reinterpret_cast<char *>(dsc.peers[q]) + RES_MID_DATA_OFF + 2ull * (n + 1) * slot +
                   (par * n + from) * mid_ll_slot(slot);
        };
        const char *src = reinterpret_cast<const char *>(c.src);
        char *dst = reinterpret_cast<char *>(c.dst);
        if (blk < nblk) {
            if (kind == RES_AR_TWO_SHOT) {
                // Phase 0: my piece of slice q to rank q.
                if (c.ok) {
                    for (int q = 0; q < n; q++) {
                        unsigned long long so, sl, co, cl;
                        mid_chunk(b, n, q, &so, &sl);
                        mid_chunk(sl, nblk, blk, &co, &cl);
                        res_copy(push(q, me) + co, src + so + co, cl);
                    }
                }
                mid_signal(dsc, 0, par, blk, sig);
                if (mid_wait(dsc, 0, par, blk, c.flagv, &all_ok)) {
                    // Phase 1: my slice's piece reduced into my output and every peer's
                    // gather area.
                    unsigned long long so, sl, co, cl;
                    mid_chunk(b, n, me, &so, &sl);
                    mid_chunk(sl, nblk, blk, &co, &cl);
                    mid_reduce_any(
                        c.op, c.type, n, [&](int q) { return push(me, q) + co; }, n,
                        [&](int k) { return k == me ? dst + so + co : gather(k) + so + co; }, cl);
                    mid_signal(dsc, 1, par, blk, c.flagv << 1 | 1);
                    mid_wait(dsc, 1, par, blk, c.flagv, &all_ok);
                    for (int q = 0; q < n; q++) {
                        if (q == me) continue;
                        mid_chunk(b, n, q, &so, &sl);
                        mid_chunk(sl, nblk, blk, &co, &cl);
                        res_copy(dst + so + co, gather(me) + so + co, cl);
                    }
                }
            } else {
                unsigned long long co, cl;
                mid_chunk(b, nblk, blk, &co, &cl);
                const bool a2a = kind == RES_ALLTOALL;
                bool go_on;
                if (ll) {
                    // My pieces to the peers as LL words, mine into my plain slot; then the
                    // peers' words into my plain slots.
                    const unsigned int tag = mid_ll_tag(sig);
                    for (int q = 0; q < n; q++) {
                        const char *from = c.ok ? src + (a2a ? q * b : 0) + co : nullptr;
                        if (q != me)
                            mid_ll_put(ll_at(q, me) + 2 * co, from, cl, tag);
                        else if (from != nullptr)
                            res_copy(push(me, me) + co, from, cl);
                    }
                    if (!c.ok) all_ok = 0;
                    for (int q = 0; q < n; q++) {
                        if (q == me) continue;
                        const unsigned long long *rel =
                            const_cast<const unsigned long long *>(mid_flag(dsc.peers[me], 0, par, blk, q));
                        mid_ll_get(push(me, q) + co, ll_at(me, q) + 2 * co, cl, tag, rel, c.flagv, &all_ok);
                    }
                    __syncthreads();
                    go_on = all_ok != 0;
                } else {
                    if (c.ok && a2a) {
                        res_copy_n(
                            n, cl, [&](int q) { return src + q * b + co; },
                            [&](int q) { return push(q, me) + co; });
                    } else if (c.ok) {
                        mid_push_same(n, src + co, cl, [&](int q) { return push(q, me) + co; });
                    }
                    mid_signal(dsc, 0, par, blk, sig);
                    go_on = mid_wait(dsc, 0, par, blk, c.flagv, &all_ok);
                }
                if (go_on) {
                    if (kind == RES_ALLREDUCE) {
                        mid_reduce_any(
                            c.op, c.type, n, [&](int q) { return push(me, q) + co; }, 1,
                            [&](int) { return dst + co; }, cl);
                    } else {
                        res_copy_n(
                            n, cl, [&](int q) { return push(me, q) + co; },
                            [&](int q) { return dst + q * b + co; });
                    }
                }
            }
        }
        // Results visible device-wide, then this block's word (an inactive block says ok).
        __threadfence();
        __syncthreads();
        if (threadIdx.x == 0) done->blk[blk] = c.seq << 1 | ((blk >= nblk || all_ok) ? 1 : 0);
        seen = c.seq;
        __syncthreads();
    }
}
