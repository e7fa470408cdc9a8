// The stream-ordered bcast, allgather, alltoall and reduce_scatter_block kernels
// (src/gpu/enqueue_kernel.rs, coll_plan): MPIX_Bcast_enqueue, MPIX_Allgather_enqueue,
// MPIX_Alltoall_enqueue and MPIX_Reduce_scatter_block_enqueue as ONE kernel each on the
// application's stream, like the allreduce of stream_ar.cuh and on the same scratch: they are
// flagged rounds of that kernel's protocol (round counter, flags of phase 0, parities, the push
// area [2 parities][nranks senders][slot] at SAR_DATA_OFF), so they interleave with the
// allreduce kernels on one communicator and the argument of stream_ar.cuh for why a rank may
// store into a peer's slot holds unchanged: each round stores into the peers' slots (parity,
// me), sets my flag of the round at every peer (release), waits for every peer's flag
// (acquire), and only then reads its own slots, and every block of every rank signals and
// waits in every round, data or not.
//
// The parameter is StreamAr with these meanings: `bytes` is one rank's block (the count of one
// rank's part: bcast's whole buffer, allgather's send block, alltoall's block for one peer,
// reduce_scatter_block's result); block q of a vector lies at q * bytes. A round carries
// bytes [r * slice, r * slice + slice) of every block; CUDA block b takes [b * per, (b + 1) *
// per) of that, for every block it moves. `algo` is one of SCO_*; `op` is the root for bcast
// (no reduction there). The input `src` is where the standard puts it in place (allgather:
// dst + rank * bytes; alltoall, bcast and reduce_scatter_block: dst), in which case the own
// block is not copied. Per round:
// - bcast: the root stores its part into slot (parity, root) of every peer; every other rank
//   copies that slot into its buffer.
// - allgather: my block into slot (parity, me) of every peer (and into block me of my output);
//   block q of my output from my slot (parity, q).
// - alltoall: my block q into slot (parity, me) of rank q (block me into my output); block q
//   of my output from my slot (parity, q). In place, block q of my buffer is read (pushed)
//   before the same bytes are overwritten, by the same CUDA block in the same round.
// - reduce_scatter_block: my block q into slot (parity, me) of rank q; my output is the
//   reduction in rank order of my block me and my slots (parity, q). In place, the output
//   (block 0 of the buffer) overwrites bytes of block 0 that the same CUDA block already
//   pushed (or, at rank 0, reduces elementwise).

#define SCO_BCAST 16u
#define SCO_ALLGATHER 17u
#define SCO_ALLTOALL 18u
#define SCO_REDUCE_SCATTER 19u

template <bool RED> __device__ __forceinline__ void sco_run(const StreamAr &a) {
    __shared__ unsigned long long first, pipe_end;
    sar_begin(a, &first, &pipe_end);
    const int n = (int)a.nranks, me = (int)a.rank;
    const unsigned long long B = a.bytes, rounds = (B + a.slice - 1) / a.slice;
    const char *src = reinterpret_cast<const char *>(a.src);
    char *dst = reinterpret_cast<char *>(a.dst);
    auto push = [&](int q, unsigned long long par, int from) {
        return reinterpret_cast<char *>(a.peers[q]) + SAR_DATA_OFF + (par * n + from) * a.slot;
    };
    for (unsigned long long r = 0; r < rounds; r++) {
        const unsigned long long g = first + r, par = g & 1, v = g + 1;
        const unsigned long long at = r * a.slice;
        unsigned long long off, len;
        sar_part(a.per, B - at < a.slice ? B - at : a.slice, blockIdx.x, &off, &len);
        const unsigned long long o = at + off;
        if constexpr (RED) {
            for (int q = 0; q < n; q++)
                if (q != me) sar_copy(push(q, par, me) + off, src + q * B + o, len);
            sar_signal(a, 0, par, v);
            sar_wait(a, 0, par, v);
            mid_reduce_any(
                a.op, a.type, n, [&](int q) { return q == me ? src + me * B + o : push(me, par, q) + off; }, 1,
                [&](int) { return dst + o; }, len);
        } else {
            if (a.algo == SCO_BCAST) {
                const int root = (int)a.op;
                if (me == root) sar_push_same(n, me, src + o, len, [&](int q) { return push(q, par, me) + off; });
                sar_signal(a, 0, par, v);
                sar_wait(a, 0, par, v);
                if (me != root) sar_copy(dst + o, push(me, par, root) + off, len);
            } else {
                const bool all = a.algo == SCO_ALLGATHER;
                // My input for rank q, and block me of my output (unless in place).
                const char *mine = src + (all ? 0 : me * B) + o;
                if (all) {
                    sar_push_same(n, me, src + o, len, [&](int q) { return push(q, par, me) + off; });
                } else {
                    for (int q = 0; q < n; q++)
                        if (q != me) sar_copy(push(q, par, me) + off, src + q * B + o, len);
                }
                if (mine != dst + me * B + o) sar_copy(dst + me * B + o, mine, len);
                sar_signal(a, 0, par, v);
                sar_wait(a, 0, par, v);
                for (int q = 0; q < n; q++)
                    if (q != me) sar_copy(dst + q * B + o, push(me, par, q) + off, len);
            }
        }
    }
    sar_end(a, first, rounds, false);
}

// Bcast, allgather and alltoall (data movement only).
extern "C" __global__ void __launch_bounds__(SAR_THREADS) gpumpi_stream_coll(StreamAr a) { sco_run<false>(a); }

// Reduce_scatter_block (each rank reduces its block).
extern "C" __global__ void __launch_bounds__(SAR_THREADS) gpumpi_stream_reduce_scatter(StreamAr a) {
    sco_run<true>(a);
}
