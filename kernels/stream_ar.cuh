// The stream-ordered allreduce kernel (src/gpu/enqueue_kernel.rs): MPIX_Allreduce_enqueue as ONE
// kernel launched on the application's stream, so that it orders with the application's own
// work and a CUDA graph can capture it. No host thread, host function or stream callback: the
// ranks' kernels exchange the data through each other's scratch (device memory of every rank,
// mapped by its peers with CUDA IPC) with NVLink stores and flags.
//
// The scratch of one rank for one stream communicator (zeroed once at allocation):
// - word 0: the rounds this rank's kernels have run on the communicator so far (the kernel's
//   own counter: every block reads it at its start, the last block to finish advances it, and
//   the next kernel on the stream reads the new value; a replayed graph, whose launch parameters
//   are frozen, so still uses fresh flag values and parities each replay);
// - word 8: blocks finished in the running kernel (reset by the last one);
// - flags at SAR_FLAG_OFF: u64 [2 phases][2 parities][SAR_BLOCKS_MAX blocks][GPUMPI_MAXP senders];
// - data at SAR_DATA_OFF: the push area [2 parities][nranks senders][slot], then (two-shot)
//   the gather area [2 parities][nranks x slot].
//
// A call runs in rounds of `slice` bytes per rank (one-shot: the round is one slice; two-shot:
// nranks slices); round g of the communicator (counted across calls) has parity g & 1 and flag
// value g + 1. Within a call, block b always takes bytes [b * per, (b + 1) * per) of a slice, so
// its part of the scratch is the same in every round, and it exchanges flags only with block b
// of every peer.
// - One-shot: each block stores its part of my slice into slot (parity, me) of every peer,
//   fences, sets its flag at every peer, waits for every peer's flag, and reduces the n
//   operands (mine from my input, the others from my slots) into my output.
// - Two-shot (more than 2 ranks, large vectors): slice q of the round goes to rank q's slot
//   (parity, me) (phase 0); rank q reduces it and stores the result into its own output and
//   into the gather area of every peer (phase 1 flags), from which each rank copies the slices
//   of the others.
//
// Why a rank may store into parity p of a peer's scratch in round g (the peer is no longer
// reading what round g - 2 left there) and may overwrite a flag word there:
// - Kernels of one stream run one after the other, and every kernel exchanges at least one flag
//   with every peer (block 0 always runs). So when a peer's kernel k has set any flag, its kernel
//   k - 1 has finished entirely.
// - Within a call, my block b reaches round g only after it saw block b of every peer set its
//   flag of round g - 1 (both phases for two-shot), which that block sets after it finished
//   reading round g - 2 (its reduce, and its gather copy, use the same part of the scratch that
//   my block b writes in round g).
// - Across calls: when my kernel k - 1 finished, each of its blocks had seen the last-round
//   flags of the same block of every peer, so every peer block had finished the rounds before
//   its last one (a block sets round r's flags only after it finished round r - 1). My kernel k
//   starts with the other parity than that last round. Its second round (the last one's
//   parity) starts only after a flag of round one from every peer, set by the peer's kernel k,
//   so the peer's kernel k - 1 has finished entirely. A block running in kernel k but not in
//   k - 1 (another block count) is covered by the same two facts: they speak of whole kernels.
// The same argument covers flag words: a sender writes a slot's value for round g + 2 only
// after I set my flag of round g + 1, which I do after I read its value for round g.
//
// Assumption (as NCCL's): kernels of stream communicators used at the same time on different
// streams fit on the GPU together (at most SAR_BLOCKS_MAX blocks each); a kernel waits for its
// peers' kernels, never for another kernel of its own GPU.

#define SAR_BLOCKS_MAX 128
#define SAR_THREADS 512
#define SAR_FLAG_OFF 4096ull
#define SAR_DATA_OFF 36864ull
#define SAR_ONE_SHOT 0u
#define SAR_TWO_SHOT 1u

// The launch parameter (by value: fixed for a captured graph, which is what it needs).
struct StreamAr {
    unsigned long long peers[GPUMPI_MAXP]; // every rank's scratch as mapped here (mine at [rank])
    unsigned long long src;   // my input (device-accessible; == dst in place)
    unsigned long long dst;   // my output
    unsigned long long bytes; // the vector
    unsigned long long slice; // bytes of one rank's slice of a round (16-byte multiple)
    unsigned long long per;   // bytes of a slice each block takes (16-byte multiple)
    unsigned long long slot;  // bytes of one sender's slot in the scratch (>= slice)
    unsigned int nranks, rank, op, type, algo, pad;
};

__device__ __forceinline__ volatile unsigned long long *sar_flag(unsigned long long scratch, int phase,
                                                                 unsigned long long par, int blk,
                                                                 int sender) {
    return reinterpret_cast<volatile unsigned long long *>(scratch + SAR_FLAG_OFF) +
           ((phase * 2 + par) * SAR_BLOCKS_MAX + blk) * GPUMPI_MAXP + sender;
}

// Set my flag of (phase, parity, block) to `v` at every peer: after this block's stores (every
// thread that stored fenced at system scope before the barrier before this).
__device__ __forceinline__ void sar_signal(const StreamAr &a, int phase, unsigned long long par,
                                           unsigned long long v) {
    const int q = threadIdx.x;
    if (q < (int)a.nranks && q != (int)a.rank) *sar_flag(a.peers[q], phase, par, blockIdx.x, a.rank) = v;
}

// Wait until every peer's flag of (phase, parity, block) in my scratch is `v`.
__device__ __forceinline__ void sar_wait(const StreamAr &a, int phase, unsigned long long par,
                                         unsigned long long v) {
    const int q = threadIdx.x;
    if (q < (int)a.nranks && q != (int)a.rank) {
        volatile unsigned long long *f = sar_flag(a.peers[a.rank], phase, par, blockIdx.x, q);
        while (*f != v) {
        }
    }
    // The peers' stores are in my own memory, ordered before their flags by their system-scope
    // fences: a device-scope fence after the barrier orders this block's reads after the flags.
    __syncthreads();
    __threadfence();
}

// Copy `n` bytes (16-byte aligned ends: four 16-byte vectors in flight per thread, so that the
// stores into a peer's memory keep NVLink busy; else res_copy). Reads bypass L1 (ld.cg).
// Returns whether this thread stored anything.
__device__ __forceinline__ bool sar_copy(char *dst, const char *src, unsigned long long n) {
    if ((((unsigned long long)dst | (unsigned long long)src) & 15) != 0) return res_copy(dst, src, n);
    const unsigned long long nv = n / 16, step = blockDim.x;
    const uint4 *s = reinterpret_cast<const uint4 *>(src);
    uint4 *d = reinterpret_cast<uint4 *>(dst);
    bool wrote = false;
    unsigned long long i = threadIdx.x;
    for (; i + 3 * step < nv; i += 4 * step) {
        const uint4 a0 = __ldcg(s + i), a1 = __ldcg(s + i + step), a2 = __ldcg(s + i + 2 * step),
                    a3 = __ldcg(s + i + 3 * step);
        d[i] = a0;
        d[i + step] = a1;
        d[i + 2 * step] = a2;
        d[i + 3 * step] = a3;
        wrote = true;
    }
    for (; i < nv; i += step) {
        d[i] = __ldcg(s + i);
        wrote = true;
    }
    for (unsigned long long j = nv * 16 + threadIdx.x; j < n; j += step) {
        dst[j] = __ldcg(src + j);
        wrote = true;
    }
    return wrote;
}

// [off, off + len) of this block's part of a slice of `slen` bytes (len 0 when it has none).
__device__ __forceinline__ void sar_part(unsigned long long per, unsigned long long slen,
                                         unsigned long long *off, unsigned long long *len) {
    unsigned long long s = (unsigned long long)blockIdx.x * per, e = s + per;
    if (s > slen) s = slen;
    if (e > slen) e = slen;
    *off = s;
    *len = e - s;
}

extern "C" __global__ void __launch_bounds__(SAR_THREADS) gpumpi_stream_allreduce(StreamAr a) {
    __shared__ unsigned long long first;
    const unsigned long long mine = a.peers[a.rank];
    unsigned long long *counter = reinterpret_cast<unsigned long long *>(mine);
    unsigned long long *finished = reinterpret_cast<unsigned long long *>(mine + 8);
    if (threadIdx.x == 0) first = *reinterpret_cast<volatile unsigned long long *>(counter);
    __syncthreads();
    const int n = (int)a.nranks, me = (int)a.rank;
    const bool two = a.algo == SAR_TWO_SHOT;
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
        if (!two) {
            unsigned long long off, len;
            sar_part(a.per, rlen, &off, &len);
            bool wrote = false;
            for (int q = 0; q < n; q++)
                if (q != me) wrote |= sar_copy(push(q, par, me) + off, src + at + off, len);
            if (wrote) __threadfence_system();
            __syncthreads();
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
            bool wrote = false;
            for (int q = 0; q < n; q++) {
                if (q == me) continue;
                sar_part(a.per, slen(q), &off, &len);
                wrote |= sar_copy(push(q, par, me) + off, src + at + q * a.slice + off, len);
            }
            if (wrote) __threadfence_system();
            __syncthreads();
            sar_signal(a, 0, par, v);
            sar_wait(a, 0, par, v);
            // My slice reduced into my output and every peer's gather area.
            sar_part(a.per, slen(me), &off, &len);
            const unsigned long long mo = me * a.slice + off;
            mid_reduce_any(
                a.op, a.type, n, [&](int q) { return q == me ? src + at + mo : push(me, par, q) + off; }, n,
                [&](int k) { return k == me ? dst + at + mo : gather(k, par) + mo; }, len);
            __threadfence_system();
            __syncthreads();
            sar_signal(a, 1, par, v);
            sar_wait(a, 1, par, v);
            for (int q = 0; q < n; q++) {
                if (q == me) continue;
                sar_part(a.per, slen(q), &off, &len);
                sar_copy(dst + at + q * a.slice + off, gather(me, par) + q * a.slice + off, len);
            }
        }
    }
    // The last block to finish advances the counter for the next kernel on the stream (every
    // block has read it by then).
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        if (atomicAdd(finished, 1ull) == gridDim.x - 1) {
            *finished = 0;
            *counter = first + rounds;
            __threadfence();
        }
    }
}
