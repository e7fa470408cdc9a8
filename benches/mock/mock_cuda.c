/* Mock libcuda.so.1 (CUDA driver API) for testing gpumpi-bench's fallback
 * when libcudart.so is absent.  Device memory is guarded host memory, as in
 * mock_cudart.c.  Not CUDA.
 *     cc -shared -fPIC -o DIR/libcuda.so.1 benches/mock/mock_cuda.c */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAGIC 0x6d6f636bcafe5678ULL
static int inited, ctx_current;

static int check_dev(unsigned long long d, const char *what)
{
    if (!ctx_current) { fprintf(stderr, "mock cuda: %s without a current context\n", what); abort(); }
    if (((const uint64_t *)(uintptr_t)d)[-2] != MAGIC) {
        fprintf(stderr, "mock cuda: %s with a non-device pointer\n", what);
        abort();
    }
    return 0;
}

int cuInit(unsigned flags) { (void)flags; inited = 1; return 0; }
int cuDeviceGetCount(int *n) { if (!inited) return 3; /* CUDA_ERROR_NOT_INITIALIZED */ *n = 1; return 0; }
int cuDeviceGet(int *dev, int ordinal) { *dev = ordinal; return ordinal == 0 ? 0 : 101; }
int cuDevicePrimaryCtxRetain(void **ctx, int dev) { static int c; (void)dev; *ctx = &c; return 0; }
int cuCtxSetCurrent(void *ctx) { ctx_current = ctx != NULL; return 0; }
int cuMemAlloc_v2(unsigned long long *p, size_t n)
{
    if (!ctx_current) return 201; /* CUDA_ERROR_INVALID_CONTEXT */
    uint64_t *b = malloc(n + 16);
    if (!b) return 2;
    b[0] = MAGIC;
    b[1] = n;
    *p = (unsigned long long)(uintptr_t)(b + 2);
    return 0;
}
int cuMemFree_v2(unsigned long long p)
{
    check_dev(p, "cuMemFree");
    uint64_t *b = (uint64_t *)(uintptr_t)p - 2;
    b[0] = 0;
    free(b);
    return 0;
}
int cuMemcpyHtoD_v2(unsigned long long d, const void *h, size_t n)
{
    check_dev(d, "cuMemcpyHtoD");
    memcpy((void *)(uintptr_t)d, h, n);
    return 0;
}
int cuMemcpyDtoH_v2(void *h, unsigned long long d, size_t n)
{
    check_dev(d, "cuMemcpyDtoH");
    memcpy(h, (const void *)(uintptr_t)d, n);
    return 0;
}
int cuCtxSynchronize(void) { return 0; }
int cuStreamCreate(void **s, unsigned flags) { static int token; (void)flags; *s = &token; return 0; }
int cuStreamSynchronize(void *s) { (void)s; return 0; }
