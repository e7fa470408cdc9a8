// Where does an 8-byte device-to-device message's time go on one host, and which design of the
// small point-to-point path is fastest? Two GPUs with peer access, one host thread per GPU, one
// resident kernel per GPU polling a command word in mapped pinned host memory (as gpumpi's
// resident kernel does). Rows (medians over the iterations after the first tenth):
// - echo, W warps, stagger st: host writes a command, the kernel stores it back into mapped
//   host memory. W warps poll the command line, warp w starting w * st ns after the block's
//   barrier (the first to see a new command claims it through shared memory): whether more
//   reads in flight shorten the host -> kernel hop (one poller sees a command on average half a
//   PCIe read after it lands, plus one read).
// - pull pingpong (today's library path without the MPI layer): the sender's host writes an
//   envelope into host memory; the receiver's host sees it, commands its kernel to read the 8
//   bytes from the sender's buffer over NVLink into its own buffer (device fence, completion
//   into its host memory); then it answers the same way. One way = round trip / 2.
// - push pingpong (a receive posted before the send, its buffer mapped by the sender): the
//   sender's host commands its kernel to store the 8 bytes into the receiver's buffer over
//   NVLink, fence at system scope, and store a flag into the receiver's host memory, which the
//   receiver's host polls; then the other way. "nofence" leaves out the fence (wrong: timing
//   only, to price it). "early" also stores the sender's own completion before the fence.
//   "relays" leaves the flag to the sender's host, which writes it once its kernel reports (the
//   completion as a frame through shared memory would go).
// - "non-temporal": the host writes the command with streaming stores (no core holds the line
//   modified when the GPU reads it).
// Every push/pull row checks the received payload (the sequence number) on the device after
// the loop and counts mismatches seen by the kernels themselves.
// Build: nvcc -O3 -arch=sm_90 -o p2plat p2plat.cu -lpthread; run: ./p2plat [iters]
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <unistd.h>
#include <vector>
#include <cuda_runtime.h>
#include <immintrin.h>
#include "micro.h"
typedef unsigned long long u64;

enum { OP_ECHO = 1, OP_PULL = 2, OP_PUSH = 3, OP_EXIT = 15 };
enum { F_FENCE_SYS = 1, F_EARLY = 2, F_RELAY = 4 };

// Command line (64 bytes): word 0 = seq (written last), word 1 = op | flags << 8.
struct Args {
    u64 *local;       // this GPU's buffer (8 B)
    u64 *peer;        // the other GPU's buffer, through peer access
    volatile u64 *peer_host_flag; // the other host's flag line (mapped pinned host memory)
    unsigned long long *bad;      // device counter: payload mismatches seen by a pull
};

// One-block resident kernel polling as kernels/resident.cuh does with one warp, extended to
// `pollers` warps that each read the command line once per PCIe round trip, warp w starting
// w * stagger ns after the block's barrier; the first to see a new seq claims it (CAS in
// shared memory) and thread 0 runs it.
__global__ void resident(volatile u64 *cmd, volatile u64 *done, Args a, unsigned pollers, unsigned stagger) {
    __shared__ unsigned long long claimed;
    __shared__ u64 cw[2];
    const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (threadIdx.x == 0) claimed = 0;
    __syncthreads();
    u64 seen = 0;
    for (;;) {
        if (warp < pollers) {
            if (warp > 0 && stagger > 0) __nanosleep(warp * stagger);
            for (;;) {
                if (__shfl_sync(0xffffffffu, *(volatile unsigned long long *)&claimed, 0) != seen) break;
                const u64 v = lane < 2 ? cmd[lane] : 0; // one coalesced read of seq and op
                const u64 s = __shfl_sync(0xffffffffu, v, 0);
                if (s != seen) {
                    int won = 0;
                    if (lane == 0) won = atomicCAS(&claimed, seen, s) == seen;
                    won = __shfl_sync(0xffffffffu, won, 0);
                    if (won && lane < 2) cw[lane] = v;
                    break;
                }
            }
        }
        __syncthreads();
        const u64 s = claimed;
        if (s == ~0ull) return;
        if (threadIdx.x == 0) {
            const u64 w = cw[1];
            const unsigned op = (unsigned)(w & 0xff), fl = (unsigned)(w >> 8);
            if (op == OP_ECHO) {
                *done = s;
            } else if (op == OP_PULL) {
                u64 v = __ldcv(a.peer); // over NVLink
                if (v != s) atomicAdd(a.bad, 1ull);
                // The next message (this GPU's answer) carries s + 1.
                *(volatile u64 *)a.local = v + 1;
                __threadfence();
                *done = s;
            } else if (op == OP_PUSH) {
                *(volatile u64 *)a.peer = s; // the payload: over NVLink into the receiver's buffer
                if (fl & F_EARLY) *done = s;
                if (fl & F_FENCE_SYS) __threadfence_system();
                if (!(fl & F_RELAY)) *a.peer_host_flag = s;
                if (!(fl & F_EARLY)) *done = s;
            }
        }
        seen = s;
        __syncthreads();
    }
}

struct alignas(64) Line { volatile u64 v[8]; };

static void spin_eq(volatile u64 *p, u64 v, const char *what, int g) {
    for (long k = 0; *p != v; k++)
        if (k > (1l << 31)) { printf("stuck: %s gpu %d want %llx have %llx\n", what, g, v, *p); exit(3); }
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    int iters = argc > 1 ? atoi(argv[1]) : 20000;
    int ng; CK(cudaGetDeviceCount(&ng));
    if (ng < 2) { printf("need 2 GPUs\n"); return 0; }
    ng = 2;
    Line *cmd = (Line *)host_mapped(sizeof(Line) * 2), *done = (Line *)host_mapped(sizeof(Line) * 2);
    Line *flag = (Line *)host_mapped(sizeof(Line) * 2), *env = (Line *)host_mapped(sizeof(Line) * 2);
    memset((void *)cmd, 0, sizeof(Line) * 2); memset((void *)done, 0, sizeof(Line) * 2);
    memset((void *)flag, 0, sizeof(Line) * 2); memset((void *)env, 0, sizeof(Line) * 2);
    u64 *buf[2], *bad[2];
    cudaStream_t st[2];
    for (int g = 0; g < 2; g++) {
        CK(cudaSetDevice(g));
        cudaError_t pe = cudaDeviceEnablePeerAccess(1 - g, 0);
        if (pe != cudaErrorPeerAccessAlreadyEnabled) CK(pe);
        CK(cudaMalloc(&buf[g], 4096)); CK(cudaMemset(buf[g], 0, 4096));
        CK(cudaMalloc(&bad[g], 64)); CK(cudaMemset(bad[g], 0, 64));
        st[g] = stream_nonblocking();
        CK(cudaDeviceSynchronize());
    }
    u64 seq = 0;
    auto launch = [&](int warps, unsigned stagger) {
        for (int g = 0; g < 2; g++) {
            cmd[g].v[0] = 0; done[g].v[0] = 0;
        }
        for (int g = 0; g < 2; g++) {
            CK(cudaSetDevice(g));
            Args a{buf[g], buf[1 - g], &flag[1 - g].v[0], bad[g]};
            resident<<<1, 512, 0, st[g]>>>(&cmd[g].v[0], &done[g].v[0], a, warps, stagger);
            CK(cudaGetLastError());
        }
    };
    auto stop = [&]() {
        for (int g = 0; g < 2; g++) cmd[g].v[0] = ~0ull;
        sync_all(2);
    };
    // nt: non-temporal stores (the line goes to memory, so the GPU's read needs no snoop of
    // a core's modified copy).
    bool nt = false;
    auto command = [&](int g, u64 s, unsigned op, unsigned fl) {
        if (nt) {
            _mm_stream_si64((long long *)&cmd[g].v[1], (long long)(op | (u64)fl << 8));
            _mm_sfence();
            _mm_stream_si64((long long *)&cmd[g].v[0], (long long)s);
            _mm_sfence();
            return;
        }
        cmd[g].v[1] = op | (u64)fl << 8;
        std::atomic_thread_fence(std::memory_order_seq_cst);
        cmd[g].v[0] = s;
    };
    auto report = [&](const char *name, int warps, unsigned stagger, std::vector<double> &l, double div) {
        std::vector<double> all(l.begin() + l.size() / 10, l.end());
        std::sort(all.begin(), all.end());
        printf("%-34s W=%d st=%3u  median %6.2f us  p10 %6.2f  p90 %6.2f\n", name, warps, stagger, all[all.size() / 2] * 1e6 / div,
               all[all.size() / 10] * 1e6 / div, all[all.size() * 9 / 10] * 1e6 / div);
    };
    // Both GPUs echo at once, each from its own host thread.
    auto echo = [&](int warps, unsigned stagger) {
        launch(warps, stagger);
        std::vector<double> lat[2];
        u64 base = seq;
        std::vector<std::thread> th;
        for (int g = 0; g < 2; g++) th.emplace_back([&, g]() {
            lat[g].reserve(iters);
            for (int i = 1; i <= iters; i++) {
                u64 s = base + i;
                double t0 = now();
                command(g, s, OP_ECHO, 0);
                spin_eq(&done[g].v[0], s, "echo", g);
                lat[g].push_back(now() - t0);
            }
        });
        for (auto &t : th) t.join();
        seq = base + iters;
        stop();
        lat[0].insert(lat[0].end(), lat[1].begin(), lat[1].end());
        report("echo", warps, stagger, lat[0], 1);
    };
    // Pingpong 0 -> 1 -> 0 by pull or push; lat: round trips seen by GPU 0's host thread.
    auto pingpong = [&](const char *name, int warps, unsigned stagger, unsigned op, unsigned fl) {
        for (int g = 0; g < 2; g++) { flag[g].v[0] = 0; env[g].v[0] = 0; }
        const u64 first = seq + 1;
        CK(cudaSetDevice(0));
        CK(cudaMemcpy(buf[0], &first, 8, cudaMemcpyHostToDevice));
        launch(warps, stagger);
        std::vector<double> lat;
        lat.reserve(iters);
        u64 base = seq;
        std::vector<std::thread> th;
        for (int g = 0; g < 2; g++) th.emplace_back([&, g]() {
            const int o = 1 - g;
            for (int i = 1; i <= iters; i++) {
                // Message k of this round: 2i-1 from 0 to 1, 2i from 1 to 0.
                const u64 out = base + 2 * i - (g == 0 ? 1 : 0), in = base + 2 * i - (g == 0 ? 0 : 1);
                double t0 = now();
                for (int half = 0; half < 2; half++) {
                    const bool sending = (half == 0) == (g == 0);
                    if (sending) {
                        if (op == OP_PUSH) {
                            command(g, out, OP_PUSH, fl);
                            spin_eq(&done[g].v[0], out, "push done", g);
                            // Relay: the sender's host passes the completion on (a host hop).
                            if (fl & F_RELAY) flag[o].v[0] = out;
                        } else {
                            // The payload (out) is already in this GPU's buffer: the previous
                            // pull stored its value + 1 there (the first one is set before the loop).
                            env[o].v[0] = out;
                        }
                    } else {
                        if (op == OP_PUSH) {
                            spin_eq(&flag[g].v[0], in, "push flag", g);
                        } else {
                            spin_eq(&env[g].v[0], in, "envelope", g);
                            command(g, in, OP_PULL, 0);
                            spin_eq(&done[g].v[0], in, "pull done", g);
                        }
                    }
                }
                if (g == 0) lat.push_back(now() - t0);
            }
        });
        for (auto &t : th) t.join();
        seq = base + 2 * iters;
        stop();
        unsigned long long nb[2] = {0, 0};
        u64 v[2];
        for (int g = 0; g < 2; g++) {
            CK(cudaMemcpy(&nb[g], bad[g], 8, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(&v[g], buf[g], 8, cudaMemcpyDeviceToHost));
            CK(cudaMemset(bad[g], 0, 8));
        }
        report(name, warps, stagger, lat, 2);
        const u64 w0 = op == OP_PUSH ? seq : seq + 1, w1 = op == OP_PUSH ? seq - 1 : seq;
        printf("    check: last values %llu %llu (want %llu %llu), pull mismatches %llu %llu%s\n", v[0], v[1], w0, w1, nb[0],
               nb[1], (v[0] == w0 && v[1] == w1 && nb[0] + nb[1] == 0) ? "" : "  WRONG");
    };
    const unsigned stag[] = {150, 300, 600};
    for (int rep = 0; rep < 2; rep++) {
        printf("# repetition %d\n", rep + 1);
        echo(1, 0);
        for (int w : {2, 4, 8})
            for (unsigned sg : stag) echo(w, sg);
        nt = true;
        printf("# commands by non-temporal stores:\n");
        echo(1, 0);
        echo(4, 300);
        nt = false;
        for (int w : {1, 4}) {
            const unsigned sg = 300;
            pingpong("pull pingpong (today's shape)", w, sg, OP_PULL, 0);
            pingpong("push pingpong (fence.sys)", w, sg, OP_PUSH, F_FENCE_SYS);
            pingpong("push pingpong, early done", w, sg, OP_PUSH, F_FENCE_SYS | F_EARLY);
            pingpong("push pingpong, nofence (timing)", w, sg, OP_PUSH, 0);
            pingpong("push pingpong, host relays flag", w, sg, OP_PUSH, F_FENCE_SYS | F_RELAY);
        }
    }
    return 0;
}
