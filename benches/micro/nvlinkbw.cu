// Can anything move data between two GPUs faster than one copy-engine copy (~386 GB/s)?
// Every GPU g copies `MiB` to GPU g+1 at the same time (a ring: each link direction carries one
// transfer, as the ring phases of gpumpi's allreduce/alltoall do), by:
//   ce        one cudaMemcpyAsync on g's stream (copy engine, push)
//   ce2       two concurrent copy-engine copies of half each (two streams)
//   sm        a kernel on g storing into g+1's memory (push), B blocks x 512 threads
//   smpull    a kernel on g+1 loading from g's memory (pull)
//   mix f/B   the copy engine moves (1-f) of it while a B-block kernel pushes the other f
// Per-GPU GB/s = bytes / median wall time of the whole ring step (all GPUs synchronized).
// Build: nvcc -O3 -arch=sm_90 -o nvlinkbw nvlinkbw.cu; run: ./nvlinkbw [MiB] [gpus] [iters]
#include <algorithm>
#include <cstdint>
#include <vector>
#include "micro.h"

__global__ void copyk(const uint4 *__restrict__ src, uint4 *__restrict__ dst, size_t n) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        uint4 a = src[i], b = src[i + stride], c = src[i + 2 * stride], d = src[i + 3 * stride];
        dst[i] = a;
        dst[i + stride] = b;
        dst[i + 2 * stride] = c;
        dst[i + 3 * stride] = d;
    }
    for (; i < n; i += stride) dst[i] = src[i];
}

static int ng;
static size_t bytes;
static std::vector<void *> buf_a, buf_b;
static std::vector<cudaStream_t> s1, s2;

// kind: 0 ce, 1 ce2, 2 sm, 3 smpull, 4 mix
static void step(int kind, double f, int blocks) {
    for (int g = 0; g < ng; g++) {
        int to = (g + 1) % ng;
        CK(cudaSetDevice(g));
        char *src = (char *)buf_a[g], *dst = (char *)buf_b[to];
        if (kind == 0) {
            CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s1[g]));
        } else if (kind == 1) {
            size_t h = bytes / 2;
            CK(cudaMemcpyAsync(dst, src, h, cudaMemcpyDefault, s1[g]));
            CK(cudaMemcpyAsync(dst + h, src + h, bytes - h, cudaMemcpyDefault, s2[g]));
        } else if (kind == 2) {
            copyk<<<blocks, 512, 0, s1[g]>>>((const uint4 *)src, (uint4 *)dst, bytes / 16);
        } else if (kind == 3) {
            CK(cudaSetDevice(to));
            copyk<<<blocks, 512, 0, s1[to]>>>((const uint4 *)src, (uint4 *)dst, bytes / 16);
        } else {
            size_t k = (size_t)(bytes * f) / 4096 * 4096, c = bytes - k;
            CK(cudaMemcpyAsync(dst, src, c, cudaMemcpyDefault, s1[g]));
            if (k) copyk<<<blocks, 512, 0, s2[g]>>>((const uint4 *)(src + c), (uint4 *)(dst + c), k / 16);
        }
    }
    sync_all(ng);
}

static double run(int kind, double f, int blocks, int iters) {
    for (int w = 0; w < 2; w++) step(kind, f, blocks);
    std::vector<double> t;
    for (int i = 0; i < iters; i++) {
        double t0 = now();
        step(kind, f, blocks);
        t.push_back(now() - t0);
    }
    std::sort(t.begin(), t.end());
    return bytes / t[t.size() / 2] / 1e9;
}

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? atol(argv[1]) : 256;
    ng = argc > 2 ? atoi(argv[2]) : 4;
    int iters = argc > 3 ? atoi(argv[3]) : 15;
    bytes = mib << 20;
    int sms;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    for (int g = 0; g < ng; g++) {
        CK(cudaSetDevice(g));
        for (int p = 0; p < ng; p++)
            if (p != g) {
                int ok;
                CK(cudaDeviceCanAccessPeer(&ok, g, p));
                if (!ok) { printf("no peer access %d->%d\n", g, p); return 1; }
                CK(cudaDeviceEnablePeerAccess(p, 0));
            }
        void *a, *b;
        CK(cudaMalloc(&a, bytes));
        CK(cudaMalloc(&b, bytes));
        CK(cudaMemset(a, g + 1, bytes));
        CK(cudaMemset(b, 0, bytes));
        buf_a.push_back(a);
        buf_b.push_back(b);
        s1.push_back(stream_nonblocking());
        s2.push_back(stream_nonblocking());
    }
    sync_all(ng);
    printf("ring of %d GPUs, %zu MiB per GPU, %d SMs, median of %d; GB/s per GPU\n", ng, mib, sms, iters);
    printf("ce      %.1f\n", run(0, 0, 0, iters));
    printf("ce2     %.1f\n", run(1, 0, 0, iters));
    int bl[] = {16, 32, 66, 132, 264};
    for (int b : bl) printf("sm %-4d %.1f\n", b, run(2, 0, b, iters));
    for (int b : bl) printf("smpull %-4d %.1f\n", b, run(3, 0, b, iters));
    double fs[] = {0.1, 0.15, 0.2, 0.25, 0.3};
    int mb[] = {8, 16, 32, 66};
    for (int b : mb)
        for (double f : fs) printf("mix f=%.2f B=%-3d %.1f\n", f, b, run(4, f, b, iters));
    // Check: the last step was a mix; every byte of b[g+1] must be g+1.
    for (int g = 0; g < ng; g++) {
        std::vector<unsigned char> h(bytes);
        CK(cudaSetDevice((g + 1) % ng));
        CK(cudaMemcpy(h.data(), buf_b[(g + 1) % ng], bytes, cudaMemcpyDefault));
        for (size_t i = 0; i < bytes; i += 4093)
            if (h[i] != (unsigned char)(g + 1)) { printf("WRONG gpu %d byte %zu\n", g, i); return 2; }
    }
    printf("checked\n");
    return 0;
}
