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
// - With RES_MID_LL128 in the kind (one-shot allreduce, alltoall, allgather up to a slot): no
//   flags, no fence and no copy through the plain slots. The pieces for peers travel as LL128
//   lines in the LL128 area [2 parities][nranks][mid_ll128_slot] (128-byte aligned, after the
//   LL area): 128-byte lines of 15 data words of 8 bytes and a flag word (the last), each line
//   stored by the 8 threads of an octet with one 16-byte store each, the flag word (the
//   sender's flagv << 1 | ok, a value no earlier call of the communicator used) in the eighth
//   thread's second half. A warp's 128-byte line store reaches the peer's memory over NVLink
//   whole (NCCL's LL128 protocol rests on the same property), so a line whose flag word is the
//   call's carries its data. Each block takes a range of lines; its receiving threads poll
//   their lines and reduce or copy them straight into the output, storing a line only once
//   every peer's copy of it said ok (a rank that stages the call afterwards finds its buffers
//   untouched). Flag words are never cleared: the next call of the same parity waits for a
//   larger value.

#define RES_AR_TWO_SHOT 5u
#define RES_MID_LL 0x8000u
#define RES_MID_LL128 0x4000u
// Lines in flight per thread in an LL128 loop (loads issued together, then checked).
#define MID_LL128_U 2
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

// Bytes of the LL128 area of one (parity, sender): the lines of a slot's data (15 words of 8
// bytes per 128-byte line; src/gpu/resident/mid.rs, ll128_slot: the two must agree).
__device__ __forceinline__ unsigned long long mid_ll128_slot(unsigned long long slot) {
    return ((slot + 7) / 8 + 14) / 15 * 128;
}

// The LL128 lines of block blk of nblk for a call of `len` bytes: [*l0, *l1).
__device__ __forceinline__ void mid_ll128_lines(unsigned long long len, int nblk, int blk, unsigned int *l0,
                                                unsigned int *l1) {
    const unsigned int lines = (unsigned int)(((len + 7) / 8 + 14) / 15);
    const unsigned int per = (lines + nblk - 1) / nblk;
    *l0 = min(lines, (unsigned int)blk * per);
    *l1 = min(lines, *l0 + per);
}

// A thread's lines in the LL128 loops: its octet (threadIdx.x / 8) takes MID_LL128_U
// consecutive lines of each batch, from the returned one; lane t = threadIdx.x % 8 holds bytes
// 16 t to 16 t + 16 of each line (for t = 7: 8 data bytes, then the flag word), that is data
// bytes 120 l + 16 t of the call.
__device__ __forceinline__ unsigned int mid_ll128_first(unsigned int base) {
    return base + (threadIdx.x / 8) * MID_LL128_U;
}
__device__ __forceinline__ unsigned int mid_ll128_step() {
    return MID_LL128_U * (blockDim.x / 8);
}

// The bytes below len of the 8 at p + o, one at a time (all loads issued before any is used),
// and their store: an unaligned buffer, or a short last word.
__device__ __noinline__ unsigned long long mid_ld8_bytes(const char *p, unsigned long long len, unsigned long long o) {
    unsigned char b[8];
#pragma unroll
    for (int k = 0; k < 8; k++) b[k] = o + k < len ? (unsigned char)__ldcg(p + o + k) : 0;
    unsigned long long v = 0;
#pragma unroll
    for (int k = 0; k < 8; k++) v |= (unsigned long long)b[k] << (8 * k);
    return v;
}
__device__ __noinline__ void mid_st8_bytes(char *p, unsigned long long len, unsigned long long o,
                                           unsigned long long v) {
#pragma unroll
    for (int k = 0; k < 8; k++)
        if (o + k < len) p[o + k] = (char)(v >> (8 * k));
}

// Data word at byte o of the `len` bytes at p: zero past len or without p, one 8-byte load
// where the word is aligned and whole.
__device__ __forceinline__ unsigned long long mid_ld8(const char *p, unsigned long long len, unsigned long long o) {
    if (p == nullptr || o >= len) return 0;
    if (o + 8 <= len && ((reinterpret_cast<unsigned long long>(p) + o) & 7) == 0)
        return __ldcg(reinterpret_cast<const unsigned long long *>(p + o));
    return mid_ld8_bytes(p, len, o);
}

// Store data word v at byte o of the `len` bytes at p (only its bytes below len).
__device__ __forceinline__ void mid_st8(char *p, unsigned long long len, unsigned long long o, unsigned long long v) {
    if (o >= len) return;
    if (o + 8 <= len && ((reinterpret_cast<unsigned long long>(p) + o) & 7) == 0)
        *reinterpret_cast<unsigned long long *>(p + o) = v;
    else
        mid_st8_bytes(p, len, o, v);
}

// The words of data bytes [120 l + 16 t, +16) of the `len` bytes at p (nullptr: zeros) for the
// MID_LL128_U lines from l: one 8-byte load each where p is 8-byte aligned and the lines lie
// inside len, else word by word (mid_ld8: zeros past len); w1 of lane 7 is `flag`.
__device__ __forceinline__ void mid_ll128_ld(const char *p, unsigned long long len, unsigned int l,
                                             unsigned long long flag, unsigned long long *w0,
                                             unsigned long long *w1) {
    const unsigned int t = threadIdx.x & 7;
    const unsigned long long o = 120ull * l + 16 * t;
    if (p != nullptr && (reinterpret_cast<unsigned long long>(p) & 7) == 0 && 120ull * (l + MID_LL128_U) <= len) {
        const unsigned long long *q = reinterpret_cast<const unsigned long long *>(p + o);
#pragma unroll
        for (int j = 0; j < MID_LL128_U; j++) {
            w0[j] = __ldcg(q + 15 * j);
            w1[j] = t < 7 ? __ldcg(q + 15 * j + 1) : flag;
        }
    } else {
#pragma unroll
        for (int j = 0; j < MID_LL128_U; j++) {
            w0[j] = mid_ld8(p, len, o + 120 * j);
            w1[j] = t < 7 ? mid_ld8(p, len, o + 120 * j + 8) : flag;
        }
    }
}

// Store the words of mid_ll128_ld back at p (only lines below l1, only bytes below len).
__device__ __forceinline__ void mid_ll128_st(char *p, unsigned long long len, unsigned int l, unsigned int l1,
                                             const unsigned long long *w0, const unsigned long long *w1) {
    const unsigned int t = threadIdx.x & 7;
    const unsigned long long o = 120ull * l + 16 * t;
    if ((reinterpret_cast<unsigned long long>(p) & 7) == 0 && 120ull * (l + MID_LL128_U) <= len &&
        l + MID_LL128_U <= l1) {
        unsigned long long *q = reinterpret_cast<unsigned long long *>(p + o);
#pragma unroll
        for (int j = 0; j < MID_LL128_U; j++) {
            q[15 * j] = w0[j];
            if (t < 7) q[15 * j + 1] = w1[j];
        }
    } else {
#pragma unroll
        for (int j = 0; j < MID_LL128_U; j++) {
            if (l + j < l1) {
                mid_st8(p, len, o + 120 * j, w0[j]);
                if (t < 7) mid_st8(p, len, o + 120 * j + 8, w1[j]);
            }
        }
    }
}

// Send lines [l0, l1) of the `len` bytes at src(q) (nullptr: zeros) to area(q) for every peer
// q != me, flag word `tag`; `same`: one source for every peer (loaded once).
template <typename Src, typename Area>
__device__ __forceinline__ void mid_ll128_put(int n, int me, bool same, Src src, Area area, unsigned long long len,
                                              unsigned int l0, unsigned int l1, unsigned long long tag) {
    const unsigned int t = threadIdx.x & 7;
    unsigned long long w0[MID_LL128_U], w1[MID_LL128_U];
    auto store = [&](unsigned int l, char *to) {
        to += 128ull * l + 16 * t;
#pragma unroll
        for (int j = 0; j < MID_LL128_U; j++)
            if (l + j < l1)
                asm volatile("st.volatile.global.v2.u64 [%0], {%1,%2};" ::"l"(to + 128 * j), "l"(w0[j]), "l"(w1[j])
                             : "memory");
    };
#pragma unroll 1
    for (unsigned int base = l0; base < l1; base += mid_ll128_step()) {
        const unsigned int l = mid_ll128_first(base);
#pragma unroll 1
        for (int q = 0; q < n; q++) {
            if (q == me) continue;
            if (!same || q == (me == 0 ? 1 : 0)) {
                if (l < l1) mid_ll128_ld(src(q), len, l, tag, w0, w1);
                // The octet's eight 16-byte stores of a line leave as one warp store.
                __syncwarp();
            }
            store(l, area(q));
        }
    }
}

// Wait until this thread's lines from l (below l1) in `ar` carry flag word `tag` (either ok
// bit; the whole warp waits for its lines): their words in x0, x1; a sender's "not ok" clears
// *ok. False: the command was released (the first-phase flag `rel` set to flagv << 1 by the
// host) before they came.
__device__ __forceinline__ bool mid_ll128_wait(const char *ar, unsigned int l, unsigned int l1,
                                               unsigned long long tag, const unsigned long long *rel,
                                               unsigned long long flagv, unsigned long long *x0,
                                               unsigned long long *x1, bool *ok) {
    const unsigned int lane = threadIdx.x & 31;
    ar += 128ull * l + 16 * (lane & 7);
#pragma unroll 1
    for (unsigned int spin = 1;; spin++) {
#pragma unroll
        for (int j = 0; j < MID_LL128_U; j++) {
            if (l + j < l1)
                asm volatile("ld.volatile.global.v2.u64 {%0,%1}, [%2];"
                             : "=l"(x0[j]), "=l"(x1[j])
                             : "l"(ar + 128 * j)
                             : "memory");
            else
                x0[j] = 0, x1[j] = tag;
        }
        bool miss = false, bad = false;
#pragma unroll
        for (int j = 0; j < MID_LL128_U; j++) {
            const unsigned long long f = __shfl_sync(0xffffffffu, x1[j], lane | 7);
            miss = miss || (f | 1) != (tag | 1);
            bad = bad || !(f & 1);
        }
        if (!__any_sync(0xffffffffu, miss)) {
            if (bad) *ok = false;
            return true;
        }
        if ((spin & 1023u) == 0) {
            unsigned long long r;
            asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(r) : "l"(rel) : "memory");
            if (r == flagv << 1) return false;
        }
    }
}

// a op b on the elements of type T of two 8-byte words, by shifts and bit copies of scalars
// (the words stay whole in their registers: element views of them through memory make the
// compiler split every word into 16-bit pieces, each in a register of its own).
template <int B> struct MidUint;
template <> struct MidUint<2> { typedef unsigned short t; };
template <> struct MidUint<4> { typedef unsigned int t; };
template <> struct MidUint<8> { typedef unsigned long long t; };
template <typename T, typename Op>
__device__ __forceinline__ unsigned long long mid_red8(unsigned long long a, unsigned long long b) {
    typedef typename MidUint<sizeof(T)>::t U;
    constexpr int S = 8 * sizeof(T);
    unsigned long long r = 0;
#pragma unroll
    for (int e = 0; e < 64 / S; e++) {
        const U ua = (U)(a >> (S * e)), ub = (U)(b >> (S * e));
        T ta, tb;
        memcpy(&ta, &ua, sizeof(T));
        memcpy(&tb, &ub, sizeof(T));
        const T tr = Op::apply(ta, tb);
        U ur;
        memcpy(&ur, &tr, sizeof(T));
        r |= (unsigned long long)ur << (S * e);
    }
    return r;
}

// a[j] = a[j] op x[j] on the elements of 8-byte words, j < n.
template <typename T, typename Op>
__device__ __forceinline__ void mid_red_words(unsigned long long *a, const unsigned long long *x, int n) {
#pragma unroll
    for (int j = 0; j < 2 * MID_LL128_U; j++)
        if (j < n) a[j] = mid_red8<T, Op>(a[j], x[j]);
}

template <typename T>
__device__ __forceinline__ void mid_red_words_op(unsigned int op, unsigned long long *a, const unsigned long long *x,
                                                 int n) {
    switch (op) {
    case 0: mid_red_words<T, OpSum<T>>(a, x, n); break;
    case 1: mid_red_words<T, OpProd<T>>(a, x, n); break;
    case 2: mid_red_words<T, OpMin<T>>(a, x, n); break;
    default: mid_red_words<T, OpMax<T>>(a, x, n); break;
    }
}

// The op and type switch of mid_red_words (types as in resident.cuh), once per batch of words.
__device__ __forceinline__ void mid_red_words_any(unsigned int op, unsigned int type, unsigned long long *a,
                                                  const unsigned long long *x, int n) {
    switch (type) {
    case 0: mid_red_words_op<int32_t>(op, a, x, n); break;
    case 1: mid_red_words_op<long long>(op, a, x, n); break;
    case 2: mid_red_words_op<float>(op, a, x, n); break;
    case 3: mid_red_words_op<double>(op, a, x, n); break;
    case 4: mid_red_words_op<__half>(op, a, x, n); break;
    default: mid_red_words_op<__nv_bfloat16>(op, a, x, n); break;
    }
}

// One-shot allreduce over LL128 lines, receiving side: this block's lines of every peer's
// vector (area(q), rel(q): its LL128 slot and release flag) reduced with my own words of src
// (nullptr: I do not take part) into dst, a batch of lines stored once every peer's copy of it
// said ok. Clears *all_ok where a peer or I said not ok or the command was released.
// The op and the type are read where they are used, through `opty` (the command's op and type
// words, volatile): a loop-invariant switch would be hoisted out of the waits, which would
// then be compiled once per op and type, each holding its elements unpacked (more registers
// than the kernel has).
template <typename Area, typename Rel>
__device__ __forceinline__ void mid_ll128_ar(const volatile unsigned int *opty, int n, int me, const char *src,
                                             char *dst, Area area, Rel rel, unsigned long long len, unsigned int l0,
                                             unsigned int l1, unsigned long long tag, unsigned long long flagv,
                                             int *all_ok) {
    const unsigned int t = threadIdx.x & 7;
    bool ok = src != nullptr;
    // a: my words (2 per line: [w0 of each line, w1 of each line]), x: a peer's.
    unsigned long long a[2 * MID_LL128_U], x[2 * MID_LL128_U];
#pragma unroll 1
    for (unsigned int base = l0; base < l1; base += mid_ll128_step()) {
        const unsigned int l = mid_ll128_first(base);
        if (l < l1) mid_ll128_ld(src, len, l, 0, a, a + MID_LL128_U);
#pragma unroll 1
        for (int q = 0; q < n; q++) {
            if (q == me) continue;
            if (!mid_ll128_wait(area(q), l, l1, tag, rel(q), flagv, x, x + MID_LL128_U, &ok)) {
                *all_ok = 0;
                return;
            }
            mid_red_words_any(opty[0], opty[1], a, x, t < 7 ? 2 * MID_LL128_U : MID_LL128_U);
        }
        if (ok && l < l1) mid_ll128_st(dst, len, l, l1, a, a + MID_LL128_U);
    }
    if (!ok) *all_ok = 0;
}

// Alltoall and allgather over LL128 lines, receiving side: this block's lines of every peer's
// block (area(q), rel(q) as above) copied to dst + q * len, each batch of lines once every
// peer's copy of it said ok (at 2 ranks from the words the wait loaded, else loaded again).
template <typename Area, typename Rel>
__device__ __forceinline__ void mid_ll128_copy(int n, int me, bool me_ok, char *dst, Area area, Rel rel,
                                               unsigned long long len, unsigned int l0, unsigned int l1,
                                               unsigned long long tag, unsigned long long flagv, int *all_ok) {
    bool ok = me_ok;
    unsigned long long x0[MID_LL128_U], x1[MID_LL128_U];
#pragma unroll 1
    for (unsigned int base = l0; base < l1; base += mid_ll128_step()) {
        const unsigned int l = mid_ll128_first(base);
#pragma unroll 1
        for (int q = 0; q < n; q++) {
            if (q == me) continue;
            if (!mid_ll128_wait(area(q), l, l1, tag, rel(q), flagv, x0, x1, &ok)) {
                *all_ok = 0;
                return;
            }
        }
        if (!ok || l >= l1) continue;
#pragma unroll 1
        for (int q = 0; q < n; q++) {
            if (q == me) continue;
            if (n > 2) mid_ll128_wait(area(q), l, l1, tag, rel(q), flagv, x0, x1, &ok);
            mid_ll128_st(dst + q * len, len, l, l1, x0, x1);
        }
    }
    if (!ok) *all_ok = 0;
}

// An LL128 command (one-shot allreduce, alltoall, allgather) on block blk of nblk: my lines to
// every peer, then theirs into my output.
__device__ __forceinline__ void mid_ll128_cmd(const ResCmd &c, const ResDesc &dsc, unsigned int kind, int nblk, int blk,
                                           int *all_ok) {
    const int n = (int)dsc.nranks, me = (int)dsc.rank;
    const unsigned long long par = c.flagv & 1, slot = dsc.slot, b = c.bytes;
    const unsigned long long sig = c.flagv << 1 | (c.ok ? 1 : 0);
    const unsigned long long area =
        (RES_MID_DATA_OFF + 2ull * (n + 1) * slot + 2ull * n * mid_ll_slot(slot) + 127) & ~127ull;
    auto at = [&](int q, int from) { // LL128 slot (par, from) of rank q
        return reinterpret_cast<char *>(dsc.peers[q]) + area + (par * n + from) * mid_ll128_slot(slot);
    };
    const char *src = reinterpret_cast<const char *>(c.src);
    char *dst = reinterpret_cast<char *>(c.dst);
    unsigned int l0, l1;
    mid_ll128_lines(b, nblk, blk, &l0, &l1);
    const bool a2a = kind == RES_ALLTOALL;
    mid_ll128_put(
        n, me, !a2a, [&](int q) { return c.ok ? src + (a2a ? q * b : 0) : nullptr; },
        [&](int q) { return at(q, me); }, b, l0, l1, sig);
    auto mine = [&](int q) { return at(me, q); };
    auto rel = [&](int q) { return const_cast<const unsigned long long *>(mid_flag(dsc.peers[me], 0, par, blk, q)); };
    if (kind == RES_ALLREDUCE) {
        mid_ll128_ar(&const_cast<const volatile ResCmd &>(c).op, n, me, c.ok ? src : nullptr, dst, mine, rel, b, l0, l1, sig, c.flagv, all_ok);
    } else {
        if (c.ok) {
            // My own block: this block's bytes of it.
            const unsigned long long o = min(b, 120ull * l0), e = min(b, 120ull * l1);
            const char *from = src + (a2a ? me * b : 0) + o;
            if (from != dst + me * b + o) res_copy(dst + me * b + o, from, e - o);
        }
        mid_ll128_copy(n, me, c.ok, dst, mine, rel, b, l0, l1, sig, c.flagv, all_ok);
    }
}

// 512 threads a block (src/gpu/resident/kernel.rs): at most 128 registers a thread. Without the
// bound ptxas gives the LL128 loops more and the launch fails.
extern "C" __global__ void __launch_bounds__(512) gpumpi_resident_mid(const volatile ResCmd *cmd, volatile MidDone *done,
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
        const unsigned int kind = c.kind & 0xffffu & ~(RES_MID_LL | RES_MID_LL128);
        const bool ll = (c.kind & RES_MID_LL) != 0, ll128 = (c.kind & RES_MID_LL128) != 0;
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
        if (blk < nblk && ll128) {
            mid_ll128_cmd(c, dsc, kind, nblk, blk, &all_ok);
        } else if (blk < nblk) {
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
