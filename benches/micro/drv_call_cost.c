/* Cost of the CUDA driver calls a device point-to-point message makes on the host: the pointer
 * cache's hit check (cuPointerGetAttribute BUFFER_ID), a classification miss
 * (cuPointerGetAttributes, 6 attributes), a context push + pop pair (every `with_context`).
 * Median and p90 over N calls each, device memory from cuMemAlloc.
 * Build and run on a GPU machine: gcc -O2 -I$CUDA/include drv_call_cost.c -o dcc -ldl && ./dcc */
#define _POSIX_C_SOURCE 200809L
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "timing.h"

#define N 200000
static double t[N];
static void report(const char *what)
{
    qsort(t, N, sizeof t[0], cmp_double);
    printf("%-44s p50 %7.1f ns  p90 %7.1f ns  p99 %7.1f ns\n", what, t[N / 2], t[N * 9 / 10], t[N * 99 / 100]);
}
#define SYM(name) typeof(&name) p_##name = (typeof(&name))dlsym(h, #name)
int main(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) { printf("no libcuda: %s\n", dlerror()); return 1; }
    SYM(cuInit); SYM(cuDeviceGet); SYM(cuDevicePrimaryCtxRetain); SYM(cuCtxSetCurrent);
    SYM(cuMemAlloc_v2); SYM(cuPointerGetAttribute); SYM(cuPointerGetAttributes);
    SYM(cuCtxPushCurrent_v2); SYM(cuCtxPopCurrent_v2);
    CUdevice dev; CUcontext ctx; CUdeviceptr p;
    if (p_cuInit(0) || p_cuDeviceGet(&dev, 0) || p_cuDevicePrimaryCtxRetain(&ctx, dev) ||
        p_cuCtxSetCurrent(ctx) || p_cuMemAlloc_v2(&p, 1 << 20)) { printf("CUDA setup failed\n"); return 1; }
    unsigned long long id = 0;
    for (int i = 0; i < N; i++) {
        double a = now_ns();
        p_cuPointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, p + 64);
        t[i] = now_ns() - a;
    }
    report("cuPointerGetAttribute(BUFFER_ID)");
    CUpointer_attribute at[6] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED,
        CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_BUFFER_ID,
        CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE};
    unsigned int mt = 0; int man = 0, ord = 0; CUdeviceptr st = 0; size_t sz = 0;
    void *d[6] = {&mt, &man, &ord, &id, &st, &sz};
    for (int i = 0; i < N; i++) {
        double a = now_ns();
        p_cuPointerGetAttributes(6, at, d, p + 64);
        t[i] = now_ns() - a;
    }
    report("cuPointerGetAttributes(6 attributes)");
    for (int i = 0; i < N; i++) {
        CUcontext old;
        double a = now_ns();
        p_cuCtxPushCurrent_v2(ctx);
        p_cuCtxPopCurrent_v2(&old);
        t[i] = now_ns() - a;
    }
    report("cuCtxPushCurrent + cuCtxPopCurrent");
    for (int i = 0; i < N; i++) {
        double a = now_ns();
        t[i] = now_ns() - a;
    }
    report("empty (clock_gettime pair)");
    return 0;
}
