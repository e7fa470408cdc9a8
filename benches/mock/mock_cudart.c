/* Mock libcudart.so for testing gpumpi-bench's -d cuda / -B nccl plumbing on
 * machines without a GPU.  "Device" memory is host memory with a guard word
 * in front, so that frees of foreign pointers are caught.  Not CUDA.
 *     cc -shared -fPIC -o DIR/libcudart.so benches/mock/mock_cudart.c */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAGIC 0x6d6f636bcafe1234ULL
static int allocs;

int cudaGetDeviceCount(int *n) { *n = 1; return 0; }
int cudaSetDevice(int d) { return d == 0 ? 0 : 101 /* cudaErrorInvalidDevice */; }
int cudaMalloc(void **p, size_t n)
{
    uint64_t *b = malloc(n + 16);
    if (!b) return 2; /* cudaErrorMemoryAllocation */
    b[0] = MAGIC;
    b[1] = n;
    *p = b + 2;
    allocs++;
    return 0;
}
int cudaFree(void *p)
{
    if (!p) return 0;
    uint64_t *b = (uint64_t *)p - 2;
    if (b[0] != MAGIC) { fprintf(stderr, "mock cudart: cudaFree of a non-device pointer\n"); abort(); }
    b[0] = 0;
    free(b);
    allocs--;
    return 0;
}
/* kind 1 = HostToDevice, 2 = DeviceToHost: the device side must carry the guard */
int cudaMemcpy(void *dst, const void *src, size_t n, int kind)
{
    const void *dev = kind == 1 ? dst : kind == 2 ? src : NULL;
    if (dev && ((const uint64_t *)dev)[-2] != MAGIC) {
        fprintf(stderr, "mock cudart: cudaMemcpy kind %d with a non-device pointer\n", kind);
        abort();
    }
    memmove(dst, src, n);
    return 0;
}
int cudaDeviceSynchronize(void) { return 0; }
int cudaStreamCreate(void **s) { static int token; *s = &token; return 0; }
int cudaStreamSynchronize(void *s) { (void)s; return 0; }
