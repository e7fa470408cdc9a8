// The stream-ordered allreduce kernel (src/gpu/enqueue_kernel.rs): MPIX_Allreduce_enqueue as ONE
// kernel launched on the application's stream, so that it orders with the application's own
// work and a CUDA graph can capture it. No host thread, host function or stream callback: the
// ranks' kernels exchange the data through each other's scratch (device memory of every rank,
// mapped by its peers with CUDA IPC) with NVLink stores and flags or LL words.
//
// The scratch of one rank for one stream communicator (zeroed once at allocation):
// - word 0: the rounds this rank's kernels have run on the communicator so far (the kernel's
//   own counter: every block reads it at its start, the last block to finish advances it, and
//   the next kernel on the stream reads the new value; a replayed graph, whose launch parameters
//   are frozen, so still uses fresh flag values, tags and parities each replay);
// - word 8: blocks finished in the running kernel (reset by the last one);
// - word 16 (SAR_PIPE_END_OFF): the round counter at the end of this rank's last pipelined call;
// - SAR_DONE_OFF: u64 [GPUMPI_MAXP senders]: the same, as each peer's last pipelined call left
//   it when that call had finished entirely (the peer's last block stores it here);
// - flags of flagged rounds at SAR_FLAG_OFF: u64 [2 phases][2 parities][SAR_BLOCKS_MAX blocks]
//   [GPUMPI_MAXP senders]; flags of pipelined calls at SAR_PFLAG_OFF (sar_pflag);
// - data from SAR_DATA_OFF, three areas that no two algorithms share (offsets in StreamAr):
//   flagged rounds' push area [2 parities][nranks senders][slot], then (more than 2 ranks) their
//   gather area [2 parities][nranks x slot]; at pipe_off the pipelined stages [stages][nranks]
//   [stage], then (two-shot) the gather stages as many; at ll_off the LL area [2 parities]
//   [nranks senders][ll_slot].
//
// Round g of the communicator (counted across calls and algorithms) has parity g & 1 and flag
// value g + 1. Within a call, block (or part) b always takes bytes [b * per, (b + 1) * per) of
// a slice, so its part of the scratch is the same in every round, and it exchanges flags only
// with block b of every peer. Algorithms (plan() in enqueue_kernel.rs chooses by size):
// - LL (one round, small vectors): each block sends its part of my vector to every peer as LL
//   words (sar_ll: 8 data bytes per 16-byte store, tagged with the round) into LL slot
//   (parity, me); each thread polls its words from every peer, zeroes them, and reduces. No
//   flag, no fence: one NVLink trip instead of data, fence and flag.
// - One-shot (flagged rounds of `slice` bytes): each block stores its part of my slice into slot
//   (parity, me) of every peer, sets its flag at every peer (release), waits for every peer's
//   flag (acquire), and reduces the n operands (mine from my input, the others from my slots)
//   into my output.
// - Two-shot (flagged, more than 2 ranks): slice q of the round goes to rank q's slot
//   (parity, me) (phase 0); rank q reduces it and stores the result into its own output and
//   into the gather area of every peer (phase 1 flags), from which each rank copies the
//   slices of the others.
// - Pipelined one-shot / two-shot (large vectors, sar_pipe): the same data movement with the
//   blocks in roles (pusher, reducer, gatherer), each running through all rounds on its own
//   over `stages` stages, so that the pushes of later rounds overlap the reduction of earlier
//   ones; its flags hold round values and only grow.
//
// Why a rank may store into a peer's scratch in round g (the peer no longer reads what an
// earlier round left there):
// - Kernels of one stream run one after the other, and every kernel receives a flag or an LL
//   word from every peer (its block 0, or pusher/reducer 0, always has data). So when a peer's
//   kernel k has sent anything, its kernel k - 1 has finished entirely; and when my kernel k
//   starts, every peer has finished its kernels up to k - 2. Only the peer's kernel k - 1 can
//   still be reading, and only its own area: each area needs the argument below just for a
//   kernel k - 1 of its own algorithm family (flagged, LL, pipelined).
// - Flagged rounds, within a call: my block b reaches round g only after it saw block b of every
//   peer set its flag of round g - 1 (both phases for two-shot), which that block sets after it
//   finished reading round g - 2 (its reduce, and its gather copy, use the same part of the
//   scratch that my block b writes in round g). Across calls: when my kernel k - 1 finished,
//   each of its blocks had seen the last-round flags of the same block of every peer, so every
//   peer block had finished the rounds before its last one. My kernel k starts with the other
//   parity than that last round. Its second round (the last one's parity) starts only after a
//   flag of round one from every peer, set by the peer's kernel k, so the peer's kernel k - 1
//   has finished entirely. A block running in kernel k but not in k - 1 (another block count)
//   is covered by the same two facts: they speak of whole kernels. A sender writes a flag's
//   value for round g + 2 only after I set my flag of round g + 1, after I read round g's.
// - LL: a call is one round, consecutive rounds alternate parities, and the LL words of round g
//   are read and zeroed by my kernel k before it ends; a peer writes that parity again in a
//   kernel after k + 1 of its own, i.e. after my kernel k finished. So a word is nonzero only
//   between its store and its reading, and a poll can only see the round's tag or zero.
// - Pipelined, within a call: the pusher of part b writes stage g % stages of peer q for round
//   g only after q's reducer of part b said (flag C) it consumed round g - stages there; the
//   reducer writes q's gather stage after q's gatherer said so (flag E). For the first
//   `stages` rounds of a call, round g - stages was in an earlier pipelined call: the pusher
//   (reducer) waits until q's done word here reached the end of the last pipelined call, which
//   q's last block stores after all its blocks finished. Each flag word is written by one
//   thread in round order and waited for as ">= g + 1", so a value of an earlier call (at most
//   this call's first round) never passes for this call's. The reducer also waits for my own
//   pusher's flag D (in place, my output is my input).
//
// Assumption (as NCCL's): kernels of stream communicators used at the same time on different
// streams fit on the GPU together (at most SAR_BLOCKS_MAX blocks each); a kernel waits for its
// peers' kernels, never for another kernel of its own GPU. Blocks of one pipelined call wait for
// each other only within a part (a pusher for a reducer, through a peer), and a part's blocks
// are adjacent, so any resident prefix of the grid makes progress.

#define SAR_BLOCKS_MAX 128
#define SAR_THREADS 512
#define SAR_PIPE_END_OFF 16ull
#define SAR_DONE_OFF 64ull
#define SAR_FLAG_OFF 4096ull
#define SAR_PFLAG_OFF 36864ull
#define SAR_DATA_OFF 69632ull
#define SAR_ONE_SHOT 0u
#define SAR_TWO_SHOT 1u
#define SAR_LL 2u
#define SAR_PIPE 3u
#define SAR_PIPE_TWO 4u
#define SAR_STAGES_MAX 8

// The launch parameter (by value: fixed for a captured graph, which is what it needs).
struct StreamAr {
    unsigned long long peers[GPUMPI_MAXP]; // every rank's scratch as mapped here (mine at [rank])
    unsigned long long src;      // my input (device-accessible; == dst in place)
    unsigned long long dst;      // my output
    unsigned long long bytes;    // the vector
    unsigned long long slice;    // bytes of one rank's slice of a round (16-byte multiple)
    unsigned long long per;      // bytes of a slice each block (pipelined: each part) takes
    unsigned long long slot;     // flagged rounds: bytes of one sender's slot (>= slice)
    unsigned long long stage;    // pipelined: bytes of one sender's stage (>= slice)
    unsigned long long pipe_off; // pipelined: where the stages start in a rank's scratch
    unsigned long long ll_off;   // LL: where the LL area starts
    unsigned long long ll_slot;  // LL: bytes of one sender's LL slot (twice its data, 16-byte multiple)
    unsigned int nranks, rank, op, type, algo;
    unsigned int parts;  // pipelined: blocks of each role
    unsigned int stages; // pipelined: stages of a sender (2..SAR_STAGES_MAX)
    unsigned int pad;
};

__device__ __forceinline__ void sar_release(unsigned long long *f, unsigned long long v) {
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(f), "l"(v) : "memory");
}

__device__ __forceinline__ unsigned long long sar_acquire(const unsigned long long *f) {
    unsigned long long v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(f) : "memory");
    return v;
}

// Flagged rounds: the flag of (phase, parity, block, sender) in a rank's scratch.
__device__ __forceinline__ unsigned long long *sar_flag(unsigned long long scratch, int phase,
                                                        unsigned long long par, int blk, int sender) {
    return reinterpret_cast<unsigned long long *>(scratch + SAR_FLAG_OFF) +
           ((phase * 2 + par) * SAR_BLOCKS_MAX + blk) * GPUMPI_MAXP + sender;
}

// Set my flag of (phase, parity, block) to `v` at every peer, after this block's stores: the
// barrier orders every thread's stores before the release store of each flag (release is
// cumulative), so no thread needs a system fence of its own.
__device__ __forceinline__ void sar_signal(const StreamAr &a, int phase, unsigned long long par,
                                           unsigned long long v) {
    __syncthreads();
    const int q = threadIdx.x;
    if (q < (int)a.nranks && q != (int)a.rank) sar_release(sar_flag(a.peers[q], phase, par, blockIdx.x, a.rank), v);
}

// Wait until every peer's flag of (phase, parity, block) in my scratch is `v` (acquire loads:
// the block's loads after the barrier see the data the flags were released after).
__device__ __forceinline__ void sar_wait(const StreamAr &a, int phase, unsigned long long par,
                                         unsigned long long v) {
    const int q = threadIdx.x;
    if (q < (int)a.nranks && q != (int)a.rank) {
        const unsigned long long *f = sar_flag(a.peers[a.rank], phase, par, blockIdx.x, q);
        while (sar_acquire(f) != v) {
        }
    }
    __syncthreads();
}

// Copy `n` bytes (16-byte aligned ends: four 16-byte vectors in flight per thread, so that the
// stores into a peer's memory keep NVLink busy; else res_copy). Reads bypass L1 (ld.cg).
__device__ __forceinline__ void sar_copy(char *dst, const char *src, unsigned long long n) {
    if ((((unsigned long long)dst | (unsigned long long)src) & 15) != 0) {
        res_copy(dst, src, n);
        return;
    }
    const unsigned long long nv = n / 16, step = blockDim.x;
    const uint4 *s = reinterpret_cast<const uint4 *>(src);
    uint4 *d = reinterpret_cast<uint4 *>(dst);
    unsigned long long i = threadIdx.x;
    for (; i + 3 * step < nv; i += 4 * step) {
        const uint4 a0 = __ldcg(s + i), a1 = __ldcg(s + i + step), a2 = __ldcg(s + i + 2 * step),
                    a3 = __ldcg(s + i + 3 * step);
        d[i] = a0;
        d[i + step] = a1;
        d[i + 2 * step] = a2;
        d[i + 3 * step] = a3;
    }
    for (; i < nv; i += step) d[i] = __ldcg(s + i);
    for (unsigned long long j = nv * 16 + threadIdx.x; j < n; j += step) dst[j] = __ldcg(src + j);
}

// Store `n` bytes from src at dst(q) for every rank q < nr but `skip` (one-shot: the same part
// for every peer): each 16-byte word loaded once and stored to every peer, four in flight per
// thread; byte copies per peer where anything is not 16-byte aligned.
template <typename Dst>
__device__ __forceinline__ void sar_push_same(int nr, int skip, const char *src, unsigned long long n, Dst dst) {
    bool al = (reinterpret_cast<unsigned long long>(src) & 15) == 0;
    for (int q = 0; q < nr; q++)
        if (q != skip) al = al && (reinterpret_cast<unsigned long long>(dst(q)) & 15) == 0;
    if (!al) {
        for (int q = 0; q < nr; q++)
            if (q != skip) res_copy(dst(q), src, n);
        return;
    }
    const unsigned long long nv = n / 16, step = blockDim.x;
    const uint4 *s = reinterpret_cast<const uint4 *>(src);
    unsigned long long i = threadIdx.x;
    for (; i + 3 * step < nv; i += 4 * step) {
        const uint4 a0 = __ldcg(s + i), a1 = __ldcg(s + i + step), a2 = __ldcg(s + i + 2 * step),
                    a3 = __ldcg(s + i + 3 * step);
        for (int q = 0; q < nr; q++) {
            if (q == skip) continue;
            uint4 *d = reinterpret_cast<uint4 *>(dst(q));
            d[i] = a0;
            d[i + step] = a1;
            d[i + 2 * step] = a2;
            d[i + 3 * step] = a3;
        }
    }
    for (; i < nv; i += step) {
        const uint4 v = __ldcg(s + i);
        for (int q = 0; q < nr; q++)
            if (q != skip) reinterpret_cast<uint4 *>(dst(q))[i] = v;
    }
    for (unsigned long long j = nv * 16 + threadIdx.x; j < n; j += step) {
        const char v = __ldcg(src + j);
        for (int q = 0; q < nr; q++)
            if (q != skip) dst(q)[j] = v;
    }
}

// [off, off + len) of part `blk` of a slice of `slen` bytes, `per` bytes a part (len 0 when it
// has none).
__device__ __forceinline__ void sar_part(unsigned long long per, unsigned long long slen, unsigned long long blk,
                                         unsigned long long *off, unsigned long long *len) {
    unsigned long long s = blk * per, e = s + per;
    if (s > slen) s = slen;
    if (e > slen) e = slen;
    *off = s;
    *len = e - s;
}

// Up to 8 bytes of p at unit u (bytes [8u, 8u + 8) clipped to len; zeros past it).
__device__ __forceinline__ unsigned long long sar_ld8(const char *p, unsigned long long u, unsigned long long len,
                                                      bool al) {
    if (al && 8 * u + 8 <= len) return __ldcg(reinterpret_cast<const unsigned long long *>(p) + u);
    unsigned long long v = 0;
    for (unsigned long long k = 0; k < 8 && 8 * u + k < len; k++)
        v |= (unsigned long long)(unsigned char)__ldcg(p + 8 * u + k) << (8 * k);
    return v;
}

__device__ __forceinline__ void sar_st8(char *p, unsigned long long u, unsigned long long len, bool al,
                                        unsigned long long v) {
    if (al && 8 * u + 8 <= len) {
        reinterpret_cast<unsigned long long *>(p)[u] = v;
        return;
    }
    for (unsigned long long k = 0; k < 8 && 8 * u + k < len; k++) p[8 * u + k] = (char)(v >> (8 * k));
}

// One-shot in LL words, this block's part [off, off + len) of the vector: each 8 bytes of my
// input go to every peer as one 16-byte store {4 data bytes, tag, 4 data bytes, tag} (each
// 8-byte half arrives whole, so a word whose two tags are the round's carries its data); then
// every thread polls the words of its own units from every peer, zeroes them (a word is nonzero
// only between its store and its reading), and reduces the n operands in rank order into my
// output. The same thread reads a unit of my input, pushes it and writes its result, so in
// place is safe.
template <typename T, typename Op>
__device__ void sar_ll(const StreamAr &a, unsigned long long par, unsigned int tag, unsigned long long off,
                       unsigned long long len) {
    const int n = (int)a.nranks, me = (int)a.rank;
    const char *src = reinterpret_cast<const char *>(a.src) + off;
    char *dst = reinterpret_cast<char *>(a.dst) + off;
    const bool al = ((reinterpret_cast<unsigned long long>(src) | reinterpret_cast<unsigned long long>(dst)) & 7) == 0;
    const unsigned long long units = (len + 7) / 8;
    auto ll = [&](int q, int from) {
        return reinterpret_cast<char *>(a.peers[q]) + a.ll_off + (par * n + from) * a.ll_slot + 2 * off;
    };
    for (unsigned long long u = threadIdx.x; u < units; u += blockDim.x) {
        const unsigned long long v = sar_ld8(src, u, len, al);
        for (int q = 0; q < n; q++) {
            if (q == me) continue;
            asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(ll(q, me) + 16 * u),
                         "r"((unsigned int)v), "r"(tag), "r"((unsigned int)(v >> 32)), "r"(tag)
                         : "memory");
        }
    }
    constexpr int L = 8 / sizeof(T);
    for (unsigned long long u = threadIdx.x; u < units; u += blockDim.x) {
        unsigned long long acc = 0;
        for (int q = 0; q < n; q++) {
            unsigned long long w;
            if (q == me) {
                w = sar_ld8(src, u, len, al);
            } else {
                char *p = ll(me, q) + 16 * u;
                unsigned int x, t0, y, t1;
                do {
                    asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                                 : "=r"(x), "=r"(t0), "=r"(y), "=r"(t1)
                                 : "l"(p)
                                 : "memory");
                } while (t0 != tag || t1 != tag);
                asm volatile("st.volatile.global.v4.u32 [%0], {%1,%1,%1,%1};" ::"l"(p), "r"(0u) : "memory");
                w = (unsigned long long)y << 32 | x;
            }
            if (q == 0) {
                acc = w;
            } else {
                T *e = reinterpret_cast<T *>(&acc);
                const T *f = reinterpret_cast<const T *>(&w);
#pragma unroll
                for (int l = 0; l < L; l++) e[l] = Op::apply(e[l], f[l]);
            }
        }
        sar_st8(dst, u, len, al, acc);
    }
}

template <typename T>
__device__ void sar_ll_op(const StreamAr &a, unsigned long long par, unsigned int tag, unsigned long long off,
                          unsigned long long len) {
    switch (a.op) {
    case 0: sar_ll<T, OpSum<T>>(a, par, tag, off, len); break;
    case 1: sar_ll<T, OpProd<T>>(a, par, tag, off, len); break;
    case 2: sar_ll<T, OpMin<T>>(a, par, tag, off, len); break;
    default: sar_ll<T, OpMax<T>>(a, par, tag, off, len); break;
    }
}

__device__ void sar_ll_any(const StreamAr &a, unsigned long long par, unsigned int tag, unsigned long long off,
                           unsigned long long len) {
    switch (a.type) {
    case 0: sar_ll_op<int32_t>(a, par, tag, off, len); break;
    case 1: sar_ll_op<long long>(a, par, tag, off, len); break;
    case 2: sar_ll_op<float>(a, par, tag, off, len); break;
    case 3: sar_ll_op<double>(a, par, tag, off, len); break;
    case 4: sar_ll_op<__half>(a, par, tag, off, len); break;
    default: sar_ll_op<__nv_bfloat16>(a, par, tag, off, len); break;
    }
}

// Pipelined flags in a rank's scratch, u64 [4 kinds][SAR_BLOCKS_MAX parts][GPUMPI_MAXP senders],
// each the last round done + 1 (they only grow):
// D: the sender's pusher stored its part of the round into my stage (my own pusher: it has read
// its input of the round); C: the sender's reducer consumed what I pushed into its stage;
// G: the sender's reducer stored its reduced part into my gather stage; E: the sender's
// gatherer consumed what I stored into its gather stage.
#define SAR_PF_D 0
#define SAR_PF_C 1
#define SAR_PF_G 2
#define SAR_PF_E 3
__device__ __forceinline__ unsigned long long *sar_pflag(unsigned long long scratch, int kind, unsigned int part,
                                                         int sender) {
    return reinterpret_cast<unsigned long long *>(scratch + SAR_PFLAG_OFF) +
           ((unsigned long long)kind * SAR_BLOCKS_MAX + part) * GPUMPI_MAXP + sender;
}

// Wait (threads q < n but me) until peer q no longer reads what it received from me in round
// g - stages (r: the round's index in this call): within the call, its flag `kind` (C or E) of
// this part says so; for the call's first `stages` rounds, the round was in an earlier
// pipelined call, which the peer finished entirely once its done word here reached pipe_end.
__device__ __forceinline__ void sar_room(const StreamAr &a, int kind, unsigned int part, unsigned long long g,
                                         unsigned long long r, unsigned long long pipe_end) {
    const int q = threadIdx.x;
    if (q < (int)a.nranks && q != (int)a.rank) {
        const unsigned long long mine = a.peers[a.rank];
        if (r >= a.stages) {
            const unsigned long long *f = sar_pflag(mine, kind, part, q);
            while (sar_acquire(f) < g - a.stages + 1) {
            }
        } else {
            const unsigned long long *f = reinterpret_cast<const unsigned long long *>(mine + SAR_DONE_OFF) + q;
            while (sar_acquire(f) < pipe_end) {
            }
        }
    }
}

// Wait (threads q < n, `self`: my own flag too) until flag `kind` of this part from every
// sender reached g + 1.
__device__ __forceinline__ void sar_await(const StreamAr &a, int kind, unsigned int part, unsigned long long g,
                                          bool self) {
    const int q = threadIdx.x;
    if (q < (int)a.nranks && (self || q != (int)a.rank)) {
        const unsigned long long *f = sar_pflag(a.peers[a.rank], kind, part, q);
        while (sar_acquire(f) < g + 1) {
        }
    }
}

// Release flag `kind` of this part as g + 1 at every peer (`self`: at me too), after the
// block's barrier.
__device__ __forceinline__ void sar_tell(const StreamAr &a, int kind, unsigned int part, unsigned long long g,
                                         bool self) {
    __syncthreads();
    const int q = threadIdx.x;
    if (q < (int)a.nranks && (self || q != (int)a.rank))
        sar_release(sar_pflag(a.peers[q], kind, part, (int)a.rank), g + 1);
}

// The pipelined allreduce: blocks in roles, `parts` blocks each, every role running through
// all rounds on its own, so that one round's pushes over NVLink overlap the reduction of the
// rounds before. Part b of a round is the same bytes for the pusher, reducer and gatherer b of
// every rank. Round g uses stage g % stages.
// - pusher (role 0): waits for room (sar_room, flag C), stores part b of my slice (one-shot:
//   the round, to every peer; two-shot: slice q to rank q) into stage (s, me) of the peers,
//   then flag D at every peer and at me (my input of the round is read).
// - reducer (role 1): waits for flag D of part b from every rank (me too: in place, my output
//   overwrites my input), reduces the n operands (mine from my input, the others from my
//   stages) in rank order into my output (two-shot: my slice, also into gather stage (s, me)
//   of every peer, after room there: flag E), then flag C (and G) at every peer.
// - gatherer (role 2, two-shot): waits for flag G from every peer, copies gather stage (s, q)
//   into slice q of my output, then flag E at every peer.
__device__ void sar_pipe(const StreamAr &a, unsigned long long first, unsigned long long rounds,
                         unsigned long long pipe_end) {
    const int n = (int)a.nranks, me = (int)a.rank;
    const bool two = a.algo == SAR_PIPE_TWO;
    // The roles of part b are adjacent blocks (b * roles + role), so that any prefix of the
    // grid that is resident holds whole parts, which need nothing but the same parts of the
    // peers to finish: a grid larger than the GPU's free SMs is slower, not stuck.
    const unsigned int roles = two ? 3 : 2, role = blockIdx.x % roles, part = blockIdx.x / roles;
    const unsigned long long round = two ? a.slice * n : a.slice, K = a.stages;
    const char *src = reinterpret_cast<const char *>(a.src);
    char *dst = reinterpret_cast<char *>(a.dst);
    auto stage = [&](int q, unsigned long long s, int from) {
        return reinterpret_cast<char *>(a.peers[q]) + a.pipe_off + (s * n + from) * a.stage;
    };
    auto gstage = [&](int q, unsigned long long s, int from) {
        return reinterpret_cast<char *>(a.peers[q]) + a.pipe_off + ((K + s) * n + from) * a.stage;
    };
    for (unsigned long long r = 0; r < rounds; r++) {
        const unsigned long long g = first + r, s = g % K, at = r * round;
        const unsigned long long rlen = a.bytes - at < round ? a.bytes - at : round;
        // Slice q of this round: [at + q * slice, at + q * slice + slen(q)).
        auto slen = [&](int q) {
            const unsigned long long o = two ? q * a.slice : 0;
            return o >= rlen ? 0ull : (rlen - o < a.slice ? rlen - o : a.slice);
        };
        unsigned long long off, len;
        if (role == 0) {
            sar_room(a, SAR_PF_C, part, g, r, pipe_end);
            __syncthreads();
            if (!two) {
                sar_part(a.per, rlen, part, &off, &len);
                sar_push_same(n, me, src + at + off, len, [&](int q) { return stage(q, s, me) + off; });
            } else {
                for (int q = 0; q < n; q++) {
                    if (q == me) continue;
                    sar_part(a.per, slen(q), part, &off, &len);
                    sar_copy(stage(q, s, me) + off, src + at + q * a.slice + off, len);
                }
            }
            sar_tell(a, SAR_PF_D, part, g, true);
        } else if (role == 1) {
            sar_await(a, SAR_PF_D, part, g, true);
            if (two) sar_room(a, SAR_PF_E, part, g, r, pipe_end);
            __syncthreads();
            const unsigned long long mo = two ? me * a.slice : 0;
            sar_part(a.per, slen(me), part, &off, &len);
            mid_reduce_any(
                a.op, a.type, n, [&](int q) { return q == me ? src + at + mo + off : stage(me, s, q) + off; },
                two ? n : 1, [&](int k) { return k == me || !two ? dst + at + mo + off : gstage(k, s, me) + off; },
                len);
            sar_tell(a, SAR_PF_C, part, g, false);
            if (two) {
                const int q = threadIdx.x;
                if (q < n && q != me) sar_release(sar_pflag(a.peers[q], SAR_PF_G, part, me), g + 1);
            }
        } else {
            sar_await(a, SAR_PF_G, part, g, false);
            __syncthreads();
            for (int q = 0; q < n; q++) {
                if (q == me) continue;
                sar_part(a.per, slen(q), part, &off, &len);
                sar_copy(dst + at + q * a.slice + off, gstage(me, s, q) + off, len);
            }
            sar_tell(a, SAR_PF_E, part, g, false);
        }
    }
}

// Every kernel's start: the round counter and the end of the last pipelined call, as the
// previous kernel on the stream left them.
__device__ __forceinline__ void sar_begin(const StreamAr &a, unsigned long long *first, unsigned long long *pipe_end) {
    const unsigned long long mine = a.peers[a.rank];
    if (threadIdx.x == 0) {
        *first = *reinterpret_cast<volatile unsigned long long *>(mine);
        *pipe_end = *reinterpret_cast<volatile unsigned long long *>(mine + SAR_PIPE_END_OFF);
    }
    __syncthreads();
}

// Every kernel's end: the last block to finish advances the counter for the next kernel on the
// stream (every block has read it by then); after a pipelined call it also records the call's
// end and tells every peer (its done word there) that this rank's call read its last stage.
__device__ __forceinline__ void sar_end(const StreamAr &a, unsigned long long first, unsigned long long rounds,
                                        bool pipe) {
    const unsigned long long mine = a.peers[a.rank];
    unsigned long long *counter = reinterpret_cast<unsigned long long *>(mine);
    unsigned long long *finished = reinterpret_cast<unsigned long long *>(mine + 8);
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        if (atomicAdd(finished, 1ull) == gridDim.x - 1) {
            __threadfence();
            *finished = 0;
            if (pipe) {
                *reinterpret_cast<unsigned long long *>(mine + SAR_PIPE_END_OFF) = first + rounds;
                for (int q = 0; q < (int)a.nranks; q++)
                    if (q != (int)a.rank)
                        sar_release(reinterpret_cast<unsigned long long *>(a.peers[q] + SAR_DONE_OFF) + a.rank,
                                    first + rounds);
            }
            *counter = first + rounds;
            __threadfence();
        }
    }
}

// One kernel per algorithm family (the host launches the one plan() chose), so that each
// gets its registers to itself.

// LL: one round.
extern "C" __global__ void __launch_bounds__(SAR_THREADS) gpumpi_stream_allreduce_ll(StreamAr a) {
    __shared__ unsigned long long first, pipe_end;
    sar_begin(a, &first, &pipe_end);
    unsigned long long off, len;
    sar_part(a.per, a.bytes, blockIdx.x, &off, &len);
    if (len > 0) sar_ll_any(a, first & 1, (unsigned int)(first + 1) | 0x80000000u, off, len);
    sar_end(a, first, 1, false);
}

// Pipelined one-shot and two-shot.
extern "C" __global__ void __launch_bounds__(SAR_THREADS) gpumpi_stream_allreduce_pipe(StreamAr a) {
    __shared__ unsigned long long first, pipe_end;
    sar_begin(a, &first, &pipe_end);
    const unsigned long long round = a.algo == SAR_PIPE_TWO ? a.slice * a.nranks : a.slice;
    const unsigned long long rounds = (a.bytes + round - 1) / round;
    sar_pipe(a, first, rounds, pipe_end);
    sar_end(a, first, rounds, true);
}

// Flagged rounds (one kernel for one-shot, one for two-shot: each reduce call inlined).
template <bool TWO> __device__ __forceinline__ void sar_flagged(const StreamAr &a) {
    __shared__ unsigned long long first, pipe_end;
    sar_begin(a, &first, &pipe_end);
    const int n = (int)a.nranks, me = (int)a.rank;
    constexpr bool two = TWO;
    const unsigned long long round = two ? a.slice * n : a.slice;
    const unsigned long long rounds = (a.bytes + round - 1) / round;
    const char *src = reinterpret_cast<const char *>(a.src);
    char *dst = reinterpret_cast<char *>(a.dst);
    // Slot (parity, sender) of rank q's push area; rank q's gather area of a parity.
    auto push = [&](int q, unsigned long long par, int from) {
        return reinterpret_cast<char *>(a.peers[q]) + SAR_DATA_OFF + (par * n + from) * a.slot;
    };
    auto gather = [&](int q, unsigned long long par) {
        return reinterpret_cast<char *>(a.peers[q]) + SAR_DATA_OFF + (2ull + par) * n * a.slot;
    };
    for (unsigned long long r = 0; r < rounds; r++) {
        const unsigned long long g = first + r, par = g & 1, v = g + 1;
        const unsigned long long at = r * round;
        const unsigned long long rlen = a.bytes - at < round ? a.bytes - at : round;
        if constexpr (!two) {
            unsigned long long off, len;
            sar_part(a.per, rlen, blockIdx.x, &off, &len);
            sar_push_same(n, me, src + at + off, len, [&](int q) { return push(q, par, me) + off; });
            sar_signal(a, 0, par, v);
            sar_wait(a, 0, par, v);
            mid_reduce_any(
                a.op, a.type, n, [&](int q) { return q == me ? src + at + off : push(me, par, q) + off; }, 1,
                [&](int) { return dst + at + off; }, len);
        } else {
            // Slice q of this round: [at + q * slice, at + min((q + 1) * slice, rlen)).
            auto slen = [&](int q) {
                const unsigned long long s = q * a.slice;
                return s >= rlen ? 0ull : (rlen - s < a.slice ? rlen - s : a.slice);
            };
            unsigned long long off, len;
            for (int q = 0; q < n; q++) {
                if (q == me) continue;
                sar_part(a.per, slen(q), blockIdx.x, &off, &len);
                sar_copy(push(q, par, me) + off, src + at + q * a.slice + off, len);
            }
            sar_signal(a, 0, par, v);
            sar_wait(a, 0, par, v);
            // My slice reduced into my output and every peer's gather area.
            sar_part(a.per, slen(me), blockIdx.x, &off, &len);
            const unsigned long long mo = me * a.slice + off;
            mid_reduce_any(
                a.op, a.type, n, [&](int q) { return q == me ? src + at + mo : push(me, par, q) + off; }, n,
                [&](int k) { return k == me ? dst + at + mo : gather(k, par) + mo; }, len);
            sar_signal(a, 1, par, v);
            sar_wait(a, 1, par, v);
            for (int q = 0; q < n; q++) {
                if (q == me) continue;
                sar_part(a.per, slen(q), blockIdx.x, &off, &len);
                sar_copy(dst + at + q * a.slice + off, gather(me, par) + q * a.slice + off, len);
            }
        }
    }
    sar_end(a, first, rounds, false);
}

extern "C" __global__ void __launch_bounds__(SAR_THREADS) gpumpi_stream_allreduce(StreamAr a) {
    sar_flagged<false>(a);
}

extern "C" __global__ void __launch_bounds__(SAR_THREADS) gpumpi_stream_allreduce_two(StreamAr a) {
    sar_flagged<true>(a);
}
