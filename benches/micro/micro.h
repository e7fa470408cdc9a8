// Shared by the microbenchmarks here: error check, wall clock, per-GPU set-up helpers.
#pragma once
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); exit(1); } } while (0)
static double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
// Pinned host memory every GPU can map, filled with 1s (so no page is touched for the first time in a timed loop).
static void *host_mapped(size_t bytes) {
    void *p;
    CK(cudaHostAlloc(&p, bytes, cudaHostAllocPortable | cudaHostAllocMapped));
    memset(p, 1, bytes);
    return p;
}
static cudaStream_t stream_nonblocking() {
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return s;
}
static void sync_all(int ng) { for (int g = 0; g < ng; g++) { CK(cudaSetDevice(g)); CK(cudaDeviceSynchronize()); } }
