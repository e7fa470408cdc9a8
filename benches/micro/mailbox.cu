// How fast can an 8-byte device-to-device message go when each host talks only to its own
// GPU's running kernel (pinned mapped command/completion words) and the kernels exchange the
// data through LL-tagged words in the receiver's device memory (peer access over NVLink)?
// Ring of N GPUs, one host thread per GPU: GPU g sends to g+1 and receives from g-1.
// Build: nvcc -O2 -arch=sm_90 -o mailbox mailbox.cu -lpthread; run: ./mailbox [iters] [gpus]
#include <atomic>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <unistd.h>
#include <vector>
#include <cuda_runtime.h>
#include "micro.h"
typedef unsigned long long u64;
static void (*on_stuck)() = nullptr;
static void wait_eq(volatile u64 *p, u64 v, const char *what, int g) {
    for (long k = 0; *p != v; k++)
        if ((k & 0xfffff) == 0 && k > (1l << 28)) {
            printf("stuck: %s gpu %d want %llx have %llx\n", what, g, v, *p);
            if (on_stuck) on_stuck();
            exit(3);
        }
}

enum { OP_SEND = 1, OP_RECV = 2, OP_RECV_FIRST = 4, OP_FENCE_GPU = 8, OP_FENCE_SYS = 16 };

__global__ void resident(volatile u64 *cmd, volatile u64 *done, const unsigned *src, unsigned *dst,
                         volatile u64 *peer_mbox, volatile u64 *my_mbox) {
    if (threadIdx.x != 0) return;
    u64 last = 0;
    for (;;) {
        u64 c;
        do { c = *cmd; } while (c == last);
        if (c == ~0ull) break;
        last = c;
        unsigned op = (unsigned)(c >> 56), seq = (unsigned)c;
        for (int pass = 0; pass < 2; pass++) {
            bool do_send = (op & OP_SEND) && pass == ((op & OP_RECV_FIRST) ? 1 : 0);
            bool do_recv = (op & OP_RECV) && pass == ((op & OP_RECV_FIRST) ? 0 : 1);
            if (do_send) {
                unsigned d0 = ((volatile const unsigned *)src)[0], d1 = ((volatile const unsigned *)src)[1];
                // Two slots: a sender may be one message ahead of its receiver.
                volatile u64 *slot = peer_mbox + 2 * (seq & 1);
                slot[0] = ((u64)seq << 32) | d0;
                slot[1] = ((u64)seq << 32) | d1;
            }
            if (do_recv) {
                u64 a, b;
                volatile u64 *slot = my_mbox + 2 * (seq & 1);
                do { a = slot[0]; } while ((unsigned)(a >> 32) != seq);
                do { b = slot[1]; } while ((unsigned)(b >> 32) != seq);
                ((volatile unsigned *)dst)[0] = (unsigned)a;
                ((volatile unsigned *)dst)[1] = (unsigned)b;
            }
        }
        if (op & OP_FENCE_GPU) __threadfence();
        if (op & OP_FENCE_SYS) __threadfence_system();
        *done = c;
    }
}

struct alignas(64) Flag { std::atomic<u64> v; char pad[56]; };

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    int iters = argc > 1 ? atoi(argv[1]) : 20000;
    int ng; CK(cudaGetDeviceCount(&ng));
    if (argc > 2) ng = std::min(ng, atoi(argv[2]));
    if (ng < 2) { printf("need 2 GPUs\n"); return 0; }
    u64 *cmdline, *doneline;
    CK(cudaHostAlloc((void **)&cmdline, 64 * 8 * ng, cudaHostAllocPortable | cudaHostAllocMapped));
    CK(cudaHostAlloc((void **)&doneline, 64 * 8 * ng, cudaHostAllocPortable | cudaHostAllocMapped));
    std::vector<unsigned *> src(ng), dst(ng);
    std::vector<u64 *> mbox(ng);
    std::vector<cudaStream_t> st(ng);
    for (int g = 0; g < ng; g++) {
        CK(cudaSetDevice(g));
        for (int p = 0; p < ng; p++) if (p != g) { cudaError_t pe = cudaDeviceEnablePeerAccess(p, 0); if (pe != cudaErrorPeerAccessAlreadyEnabled) CK(pe); }
        CK(cudaMalloc(&src[g], 4096)); CK(cudaMalloc(&dst[g], 4096)); CK(cudaMalloc(&mbox[g], 4096));
        CK(cudaMemset(mbox[g], 0, 4096));
        unsigned v[2] = {0x1000u + g, 0x2000u + g};
        CK(cudaMemcpy(src[g], v, 8, cudaMemcpyHostToDevice));
        st[g] = stream_nonblocking();
        cmdline[8 * g] = 0; doneline[8 * g] = 0;
        CK(cudaDeviceSynchronize());
    }
    for (int g = 0; g < ng; g++) {
        CK(cudaSetDevice(g));
        resident<<<1, 32, 0, st[g]>>>(cmdline + 8 * g, doneline + 8 * g, src[g], dst[g], mbox[(g + 1) % ng], mbox[g]);
        CK(cudaGetLastError());
    }
    static std::vector<cudaStream_t> *stp; stp = &st;
    static std::vector<u64 *> *mbp; mbp = &mbox;
    static u64 *cl, *dl; static int n; cl = cmdline; dl = doneline; n = ng;
    on_stuck = []() {
        for (int g = 0; g < n; g++) {
            cudaSetDevice(g);
            printf("  gpu %d cmd %llx done %llx stream %s\n", g, ((volatile u64 *)cl)[8 * g], ((volatile u64 *)dl)[8 * g],
                   cudaGetErrorString(cudaStreamQuery((*stp)[g])));
            cudaStream_t s2; cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);
            u64 *h; cudaHostAlloc((void **)&h, 64, 0); h[0] = h[1] = 7;
            cudaMemcpyAsync(h, (*mbp)[g], 16, cudaMemcpyDeviceToHost, s2);
            for (int k = 0; k < 1000 && cudaStreamQuery(s2) == cudaErrorNotReady; k++) usleep(1000);
            printf("  gpu %d mailbox %llx %llx (%s)\n", g, h[0], h[1], cudaGetErrorString(cudaStreamQuery(s2)));
        }
    };
    std::vector<Flag> env(ng);
    unsigned seq = 0;
    auto run = [&](const char *name, int gpus, int mode, unsigned op) {
        // mode 0: each host commands op at once; 1: the host first waits for its sender's
        // envelope (a host flag, as MPI matching would); 2: pingpong 0<->1 (send, then recv).
        for (auto &e : env) e.v.store(0);
        unsigned base = seq;
        std::vector<std::vector<double>> lat(gpus);
        std::vector<std::thread> th;
        for (int g = 0; g < gpus; g++) th.emplace_back([&, g]() {
            volatile u64 *cmd = cmdline + 8 * g, *done = doneline + 8 * g;
            int from = (g + gpus - 1) % gpus;
            lat[g].reserve(iters);
            for (int i = 1; i <= iters; i++) {
                unsigned s = base + i;
                double t0 = now();
                if (mode == 2) {
                    unsigned o1 = g == 0 ? OP_SEND : OP_RECV, o2 = g == 0 ? OP_RECV : OP_SEND;
                    u64 c = ((u64)(o1 | op) << 56) | s; *cmd = c; wait_eq(done, c, "done", g);
                    c = ((u64)(o2 | op) << 56) | s | (1ull << 40); *cmd = c; wait_eq(done, c, "done", g);
                } else {
                    if (mode == 1) { env[g].v.store(i, std::memory_order_release); while (env[from].v.load(std::memory_order_acquire) < (u64)i) {} }
                    u64 c = ((u64)op << 56) | s; *cmd = c; wait_eq(done, c, "done", g);
                }
                lat[g].push_back(now() - t0);
            }
        });
        for (auto &t : th) t.join();
        seq = base + iters;
        std::vector<double> all;
        for (auto &l : lat) all.insert(all.end(), l.begin() + iters / 10, l.end());
        std::sort(all.begin(), all.end());
        double med = all[all.size() / 2] * 1e6;
        if (mode == 2) med /= 2;
        printf("%-52s gpus=%d  median %6.2f us  p10 %6.2f  p90 %6.2f%s\n", name, gpus, med, all[all.size() / 10] * 1e6 / (mode == 2 ? 2 : 1),
               all[all.size() * 9 / 10] * 1e6 / (mode == 2 ? 2 : 1), mode == 2 ? " (one way)" : "");
        // Check the data of the last exchange.
        for (int g = 0; g < gpus && mode != 2 && (op & OP_RECV); g++) {
            unsigned v[2]; CK(cudaMemcpy(v, dst[g], 8, cudaMemcpyDeviceToHost));
            int from = (g + gpus - 1) % gpus;
            if (v[0] != 0x1000u + from || v[1] != 0x2000u + from) printf("  WRONG data at GPU %d: %x %x\n", g, v[0], v[1]);
        }
    };
    for (int rep = 0; rep < 2; rep++) {
        run("echo (host -> kernel -> host)", ng, 0, 0);
        run("echo + system fence", ng, 0, OP_FENCE_SYS);
        run("sendrecv, command at once", ng, 0, OP_SEND | OP_RECV);
        run("sendrecv, command at once, gpu fence", ng, 0, OP_SEND | OP_RECV | OP_FENCE_GPU);
        run("sendrecv, after the sender's envelope", ng, 1, OP_SEND | OP_RECV);
        run("sendrecv, after envelope, gpu fence", ng, 1, OP_SEND | OP_RECV | OP_FENCE_GPU);
        if (ng == 2) run("pingpong: send, then recv, as two commands", 2, 2, OP_FENCE_GPU);
    }
    for (int g = 0; g < ng; g++) cmdline[8 * g] = ~0ull;
    for (int g = 0; g < ng; g++) { CK(cudaSetDevice(g)); CK(cudaDeviceSynchronize()); }
    return 0;
}
