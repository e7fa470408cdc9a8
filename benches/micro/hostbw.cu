// Host-memory (P2P off) microbenchmarks on a multi-GPU node: copy-engine and kernel bandwidth
// to/from pinned host memory with every GPU at once, and the flag round trip between two GPUs
// through mapped host memory. Build: nvcc -O2 -arch=sm_90 -o hostbw hostbw.cu
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <chrono>
#include <vector>
#include <cuda_runtime.h>
#include "micro.h"

__global__ void kread(const uint4 *h, uint4 *d, size_t n) {  // d = h (host -> device by SMs)
    size_t s = (size_t)gridDim.x * blockDim.x;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += s) d[i] = h[i];
}
__global__ void kred(const uint4 *h, const uint4 *d, uint4 *o, size_t n) {  // o = h + d (float)
    size_t s = (size_t)gridDim.x * blockDim.x;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += s) {
        uint4 a = h[i], b = d[i];
        float *fa = (float *)&a, *fb = (float *)&b;
        for (int j = 0; j < 4; j++) fa[j] += fb[j];
        o[i] = a;
    }
}
__global__ void pingpong(volatile unsigned long long *mine, volatile unsigned long long *other, int iters, int first) {
    for (int i = 1; i <= iters; i++) {
        if (first) { *other = i; __threadfence_system(); while (*mine != (unsigned long long)i) {} }
        else { while (*mine != (unsigned long long)i) {} *other = i; __threadfence_system(); }
    }
}
int main(int argc, char **argv) {
    int ng; CK(cudaGetDeviceCount(&ng));
    size_t bytes = (argc > 1 ? atol(argv[1]) : 256) << 20;
    printf("GPUs %d, %zu MiB per GPU\n", ng, bytes >> 20);
    std::vector<void *> h(ng), h2(ng), d(ng), d2(ng);
    std::vector<cudaStream_t> s1(ng), s2(ng);
    for (int g = 0; g < ng; g++) {
        CK(cudaSetDevice(g));
        h[g] = host_mapped(bytes);
        h2[g] = host_mapped(bytes);
        CK(cudaMalloc(&d[g], bytes)); CK(cudaMalloc(&d2[g], bytes));
        s1[g] = stream_nonblocking();
        s2[g] = stream_nonblocking();
    }
    int sms; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    auto sync = [&]() { sync_all(ng); };
    auto bench = [&](const char *name, int gpus, auto fn, double factor) {
        for (int rep = 0; rep < 2; rep++) {
            sync();
            double t0 = now();
            for (int g = 0; g < gpus; g++) { CK(cudaSetDevice(g)); fn(g); }
            sync();
            double t = now() - t0;
            if (rep) printf("%-44s gpus=%d  %7.2f ms  per GPU %6.1f GB/s  total %6.1f GB/s\n", name, gpus, t * 1e3,
                            bytes * factor / t / 1e9, bytes * factor * gpus / t / 1e9);
        }
    };
    size_t nv = bytes / 16;
    for (int gpus : {1, ng}) {
        bench("CE DtoH", gpus, [&](int g) { CK(cudaMemcpyAsync(h[g], d[g], bytes, cudaMemcpyDeviceToHost, s1[g])); }, 1);
        bench("CE HtoD", gpus, [&](int g) { CK(cudaMemcpyAsync(d[g], h[g], bytes, cudaMemcpyHostToDevice, s1[g])); }, 1);
        bench("CE DtoH + HtoD at once (per direction)", gpus, [&](int g) {
            CK(cudaMemcpyAsync(h[g], d[g], bytes, cudaMemcpyDeviceToHost, s1[g]));
            CK(cudaMemcpyAsync(d2[g], h2[g], bytes, cudaMemcpyHostToDevice, s2[g])); }, 1);
        for (int grid : {sms, 2 * sms, 4 * sms}) {
            char nm[64];
            snprintf(nm, sizeof nm, "kernel read host grid=%d", grid);
            bench(nm, gpus, [&](int g) { kread<<<grid, 512, 0, s1[g]>>>((const uint4 *)h[g], (uint4 *)d[g], nv); }, 1);
            snprintf(nm, sizeof nm, "kernel write host grid=%d", grid);
            bench(nm, gpus, [&](int g) { kread<<<grid, 512, 0, s1[g]>>>((const uint4 *)d[g], (uint4 *)h[g], nv); }, 1);
            snprintf(nm, sizeof nm, "kernel reduce host+dev->dev grid=%d", grid);
            bench(nm, gpus, [&](int g) { kred<<<grid, 512, 0, s1[g]>>>((const uint4 *)h[g], (const uint4 *)d2[g], (uint4 *)d[g], nv); }, 1);
        }
        // Other GPU's host buffer (as in a shared segment written by a peer).
        bench("CE HtoD from next GPU's buffer", gpus, [&](int g) { CK(cudaMemcpyAsync(d[g], h[(g + 1) % ng], bytes, cudaMemcpyHostToDevice, s1[g])); }, 1);
    }
    // Flag round trip GPU0 <-> GPU1 through mapped host memory.
    if (ng >= 2) {
        unsigned long long *f;
        CK(cudaHostAlloc((void **)&f, 4096, cudaHostAllocPortable | cudaHostAllocMapped));
        for (int rep = 0; rep < 2; rep++) {
            f[0] = f[256] = 0;
            int iters = 10000;
            double t0 = now();
            CK(cudaSetDevice(1)); pingpong<<<1, 1, 0, s1[1]>>>(f + 256, f, iters, 0);
            CK(cudaSetDevice(0)); pingpong<<<1, 1, 0, s1[0]>>>(f, f + 256, iters, 1);
            sync();
            double t = now() - t0;
            if (rep) printf("flag round trip GPU0<->GPU1 via host memory: %.2f us\n", t / iters * 1e6);
        }
        // Host <-> kernel round trip: kernel echoes host's value.
    }
    return 0;
}
