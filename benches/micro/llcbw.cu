// Does host-memory traffic of four GPUs at once go faster when the pinned region each GPU
// writes (and its neighbour reads) is small enough to stay in the CPU's last-level cache?
// Every GPU g writes its device data into host region W[g] (cycled: a region of R bytes is
// rewritten until `total` bytes went out) while reading region W[g+1] into device memory.
// Build: nvcc -O2 -arch=sm_90 -o llcbw llcbw.cu; run: ./llcbw [total MiB]
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <chrono>
#include <vector>
#include <cuda_runtime.h>
#include "micro.h"

// Copy `total` 16-byte words from a cycled region of `region` words (src or dst cycles).
__global__ void kcopy(const uint4 *src, uint4 *dst, size_t region, size_t total, int src_cycles) {
    size_t s = (size_t)gridDim.x * blockDim.x;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += s) {
        size_t r = i % region;
        if (src_cycles) dst[i] = src[r]; else dst[r] = src[i];
    }
}
int main(int argc, char **argv) {
    int ng; CK(cudaGetDeviceCount(&ng));
    size_t total = (argc > 1 ? atol(argv[1]) : 512) << 20;
    printf("GPUs %d, %zu MiB per GPU per direction\n", ng, total >> 20);
    std::vector<void *> w(ng), d(ng), d2(ng);
    std::vector<cudaStream_t> s1(ng), s2(ng);
    size_t maxr = 256 << 20;
    for (int g = 0; g < ng; g++) {
        CK(cudaSetDevice(g));
        w[g] = host_mapped(maxr);
        CK(cudaMalloc(&d[g], total)); CK(cudaMalloc(&d2[g], total));
        s1[g] = stream_nonblocking();
        s2[g] = stream_nonblocking();
    }
    int sms; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    auto sync = [&]() { sync_all(ng); };
    auto bench = [&](const char *name, size_t region, int dirs, auto fn) {
        double best = 1e9;
        for (int rep = 0; rep < 3; rep++) {
            sync();
            double t0 = now();
            for (int g = 0; g < ng; g++) { CK(cudaSetDevice(g)); fn(g); }
            sync();
            double t = now() - t0;
            if (rep && t < best) best = t;
        }
        // Each GPU moved `total` bytes per direction it runs.
        printf("%-30s region %4zu KiB  %7.2f ms  per GPU per dir %6.1f GB/s  host traffic %6.1f GB/s\n", name,
               region >> 10, best * 1e3, total / best / 1e9, (double)dirs * total * ng / best / 1e9);
    };
    for (size_t region : {(size_t)512 << 10, (size_t)1 << 20, (size_t)2 << 20, (size_t)4 << 20, (size_t)8 << 20,
                          (size_t)32 << 20, (size_t)256 << 20}) {
        size_t rw = region / 16, tw = total / 16;
        bench("kernel out+in", region, 2, [&](int g) {
            kcopy<<<sms / 2, 512, 0, s1[g]>>>((const uint4 *)d[g], (uint4 *)w[g], rw, tw, 0);
            kcopy<<<sms / 2, 512, 0, s2[g]>>>((const uint4 *)w[(g + 1) % ng], (uint4 *)d2[g], rw, tw, 1);
        });
        bench("CE out+in", region, 2, [&](int g) {
            for (size_t off = 0; off < total; off += region) {
                CK(cudaMemcpyAsync(w[g], (char *)d[g] + off, region, cudaMemcpyDeviceToHost, s1[g]));
                CK(cudaMemcpyAsync((char *)d2[g] + off, w[(g + 1) % ng], region, cudaMemcpyHostToDevice, s2[g]));
            }
        });
        bench("kernel in only", region, 1, [&](int g) {
            kcopy<<<sms, 512, 0, s2[g]>>>((const uint4 *)w[(g + 1) % ng], (uint4 *)d2[g], rw, tw, 1);
        });
        bench("kernel out only", region, 1, [&](int g) {
            kcopy<<<sms, 512, 0, s1[g]>>>((const uint4 *)d[g], (uint4 *)w[g], rw, tw, 0);
        });
    }
    return 0;
}
