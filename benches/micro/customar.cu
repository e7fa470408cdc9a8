// A reference "custom allreduce" on the same GPUs as gpumpi's stream-ordered allreduce (issue
// 24 compares with the custom kernels of inference frameworks): one-shot, stream-ordered, the
// input in a buffer every peer has mapped (peer access, registered once), one kernel per call.
// Each block: a start barrier with the same block of every GPU (a release store into each
// peer's flag, acquire polls of its own), then its share of the vector: the 16-byte words of
// every GPU's input loaded over NVLink and summed into the output, then an end barrier (so the
// next call may overwrite the inputs). No MPI, one process, one host thread for all GPUs.
//
// Rows per size: back to back (ITERS calls on each GPU's stream, then a synchronize) and from a
// CUDA graph (ITERS calls captured per GPU, replayed). us per call = elapsed / ITERS, median of
// 5 rounds. Before timing, every size runs 3 checked calls (int32 sum; inputs depend on the
// call, the rank and the position): "wrong" counts mismatched words.
//
// Build: nvcc -O3 -arch=sm_90 -Ibenches/micro benches/micro/customar.cu -o customar
// Run:   ./customar [gpus=2] [blocks=36] [threads=512] [iters=1000]
#include <algorithm>
#include <cstdint>
#include <vector>
#include "micro.h"
typedef unsigned long long u64;
#define MAXG 8
#define MAXB 128

struct Args {
    const uint4 *in[MAXG]; // every GPU's input, as mapped here
    u64 *flags[MAXG];      // every GPU's flags [2 barriers][MAXB][MAXG], as mapped here
    uint4 *out;
    u64 words; // 16-byte words of the vector
    u64 call;  // the flag value of this call (1, 2, ...)
    int n, me;
};

__device__ __forceinline__ void barrier(const Args &a, int which) {
    __syncthreads();
    if (threadIdx.x < a.n) {
        u64 *peer = a.flags[threadIdx.x] + (which * MAXB + blockIdx.x) * MAXG + a.me;
        asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(peer), "l"(a.call) : "memory");
        const u64 *mine = a.flags[a.me] + (which * MAXB + blockIdx.x) * MAXG + threadIdx.x;
        u64 v;
        do {
            asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(mine) : "memory");
        } while (v < a.call);
    }
    __syncthreads();
}

__global__ void one_shot(Args a) {
    barrier(a, 0);
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < a.words; i += stride) {
        uint4 v[MAXG];
#pragma unroll
        for (int r = 0; r < MAXG; r++)
            if (r < a.n) v[r] = __ldcg(a.in[r] + i);
        uint4 s = v[0];
#pragma unroll
        for (int r = 1; r < MAXG; r++) {
            if (r < a.n) {
                s.x += v[r].x;
                s.y += v[r].y;
                s.z += v[r].z;
                s.w += v[r].w;
            }
        }
        a.out[i] = s;
    }
    barrier(a, 1);
}

__global__ void fill(uint4 *p, u64 words, u64 call, int rank) {
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < words; i += (u64)gridDim.x * blockDim.x) {
        unsigned b = (unsigned)(call * 1000003ull + rank * 7919ull + i * 4);
        p[i] = make_uint4(b, b + 1, b + 2, b + 3);
    }
}

__global__ void check(const uint4 *out, u64 words, u64 call, int n, unsigned *wrong) {
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < words; i += (u64)gridDim.x * blockDim.x) {
        unsigned e = 0;
        for (int r = 0; r < n; r++) e += (unsigned)(call * 1000003ull + r * 7919ull + i * 4);
        const uint4 v = out[i];
        if (v.x != e || v.y != e + n || v.z != e + 2 * n || v.w != e + 3 * n) atomicAdd(wrong, 1u);
    }
}

int main(int argc, char **argv) {
    const int ng = argc > 1 ? atoi(argv[1]) : 2;
    const int blocks = argc > 2 ? atoi(argv[2]) : 36;
    const int threads = argc > 3 ? atoi(argv[3]) : 512;
    const int iters = argc > 4 ? atoi(argv[4]) : 1000;
    const u64 maxb = 2ull << 20;
    if (ng < 2 || ng > MAXG || blocks > MAXB) return printf("bad arguments\n"), 1;
    std::vector<uint4 *> in(ng), out(ng);
    std::vector<u64 *> flags(ng);
    std::vector<unsigned *> wrong(ng);
    std::vector<cudaStream_t> st(ng);
    for (int g = 0; g < ng; g++) {
        CK(cudaSetDevice(g));
        for (int p = 0; p < ng; p++)
            if (p != g) CK(cudaDeviceEnablePeerAccess(p, 0));
        CK(cudaMalloc(&in[g], maxb));
        CK(cudaMalloc(&out[g], maxb));
        CK(cudaMalloc(&flags[g], 2 * MAXB * MAXG * sizeof(u64)));
        CK(cudaMemset(flags[g], 0, 2 * MAXB * MAXG * sizeof(u64)));
        CK(cudaMalloc(&wrong[g], sizeof(unsigned)));
        CK(cudaMemset(wrong[g], 0, sizeof(unsigned)));
        st[g] = stream_nonblocking();
    }
    sync_all(ng);
    u64 call = 0;
    auto args = [&](int g, u64 words) {
        Args a{};
        for (int p = 0; p < ng; p++) {
            a.in[p] = in[p];
            a.flags[p] = flags[p];
        }
        a.out = out[g];
        a.words = words;
        a.call = call;
        a.n = ng;
        a.me = g;
        return a;
    };
    printf("# customar: %d GPUs, %d blocks x %d threads, %d calls per round, us per call (median of 5)\n", ng,
           blocks, threads, iters);
    printf("%10s %12s %12s %8s\n", "bytes", "back2back", "graph", "wrong");
    for (u64 bytes = 8; bytes <= maxb; bytes *= 2) {
        if (bytes != 8 && bytes != 4096 && bytes < (32u << 10)) continue;
        const u64 words = (bytes + 15) / 16;
        // Checked calls: fill, allreduce, check, on every GPU's stream.
        for (int k = 0; k < 3; k++) {
            call++;
            for (int g = 0; g < ng; g++) {
                CK(cudaSetDevice(g));
                fill<<<64, 256, 0, st[g]>>>(in[g], words, call, g);
                one_shot<<<blocks, threads, 0, st[g]>>>(args(g, words));
                check<<<64, 256, 0, st[g]>>>(out[g], words, call, ng, wrong[g]);
            }
            sync_all(ng);
        }
        unsigned bad = 0;
        for (int g = 0; g < ng; g++) {
            unsigned w;
            CK(cudaSetDevice(g));
            CK(cudaMemcpy(&w, wrong[g], sizeof w, cudaMemcpyDeviceToHost));
            bad += w;
        }
        std::vector<double> b2b, gr;
        for (int round = 0; round < 5; round++) {
            double t0 = now();
            for (int i = 0; i < iters; i++) {
                call++;
                for (int g = 0; g < ng; g++) {
                    CK(cudaSetDevice(g));
                    one_shot<<<blocks, threads, 0, st[g]>>>(args(g, words));
                }
            }
            sync_all(ng);
            b2b.push_back((now() - t0) / iters * 1e6);
        }
        // Graphs: `iters` calls per GPU captured with the flag values they will see; the
        // flags are reset before each replay (the values restart from the captured ones).
        std::vector<cudaGraphExec_t> ex(ng);
        const u64 base = call;
        for (int g = 0; g < ng; g++) {
            CK(cudaSetDevice(g));
            cudaGraph_t graph;
            CK(cudaStreamBeginCapture(st[g], cudaStreamCaptureModeThreadLocal));
            call = base;
            for (int i = 0; i < iters; i++) {
                call++;
                one_shot<<<blocks, threads, 0, st[g]>>>(args(g, words));
            }
            CK(cudaStreamEndCapture(st[g], &graph));
            CK(cudaGraphInstantiate(&ex[g], graph, 0));
            CK(cudaGraphDestroy(graph));
        }
        for (int round = 0; round < 5; round++) {
            for (int g = 0; g < ng; g++) {
                CK(cudaSetDevice(g));
                CK(cudaMemset(flags[g], 0, 2 * MAXB * MAXG * sizeof(u64)));
            }
            sync_all(ng);
            double t0 = now();
            for (int g = 0; g < ng; g++) {
                CK(cudaSetDevice(g));
                CK(cudaGraphLaunch(ex[g], st[g]));
            }
            sync_all(ng);
            gr.push_back((now() - t0) / iters * 1e6);
        }
        for (int g = 0; g < ng; g++) {
            CK(cudaSetDevice(g));
            CK(cudaGraphExecDestroy(ex[g]));
            CK(cudaMemset(flags[g], 0, 2 * MAXB * MAXG * sizeof(u64)));
        }
        sync_all(ng);
        call = 0;
        std::sort(b2b.begin(), b2b.end());
        std::sort(gr.begin(), gr.end());
        printf("%10llu %12.2f %12.2f %8u\n", bytes, b2b[2], gr[2], bad);
        for (int g = 0; g < ng; g++) {
            CK(cudaSetDevice(g));
            CK(cudaMemset(wrong[g], 0, sizeof(unsigned)));
        }
    }
    return 0;
}
