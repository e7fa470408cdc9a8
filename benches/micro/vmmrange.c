/* What the driver reports for VMM memory (cuMemCreate): pointer attributes, cuMemGetAddressRange
 * and buffer ids for two physical allocations mapped back to back in one reservation, and after
 * one is unmapped and new memory mapped at the same address; a cuMemAlloc buffer for contrast.
 * Build and run on a GPU machine: nvcc -o vmmrange benches/micro/vmmrange.c -lcuda && ./vmmrange
 * (results: benches/results/2026-11-21-h200x4-session6/vmm-diag.txt). */
#include <cuda.h>
#include <stdio.h>
#define C(x) do { CUresult r_ = (x); if (r_) { const char *s; cuGetErrorName(r_, &s); printf("%s: %s\n", #x, s); } } while (0)
static void attrs(const char *what, CUdeviceptr p) {
    CUdeviceptr start = 0; size_t size = 0; unsigned long long id = 0, ht = 0;
    CUpointer_attribute a[4] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE, CU_POINTER_ATTRIBUTE_BUFFER_ID, CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES};
    void *d[4] = {&start, &size, &id, &ht};
    C(cuPointerGetAttributes(4, a, d, p));
    CUdeviceptr b2 = 0; size_t s2 = 0;
    C(cuMemGetAddressRange(&b2, &s2, p));
    CUmemGenericAllocationHandle h = 0;
    C(cuMemRetainAllocationHandle(&h, (void *)p));
    cuMemRelease(h);
    printf("%-18s p=%#llx RANGE_START=%#llx RANGE_SIZE=%#zx BUFFER_ID=%llu ALLOWED_HANDLE_TYPES=%llu"
           " cuMemGetAddressRange=%#llx/%#zx handle=%#llx\n", what, (unsigned long long)p,
           (unsigned long long)start, size, id, ht, (unsigned long long)b2, s2, (unsigned long long)h);
}
int main(void) {
    CUdevice dev; CUcontext ctx;
    C(cuInit(0)); C(cuDeviceGet(&dev, 0)); C(cuDevicePrimaryCtxRetain(&ctx, dev)); C(cuCtxSetCurrent(ctx));
    CUmemAllocationProp pr = {0};
    pr.type = CU_MEM_ALLOCATION_TYPE_PINNED; pr.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    pr.location.type = CU_MEM_LOCATION_TYPE_DEVICE; pr.location.id = 0;
    size_t g = 0, gm = 0;
    C(cuMemGetAllocationGranularity(&g, &pr, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    C(cuMemGetAllocationGranularity(&gm, &pr, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    printf("granularity rec %#zx min %#zx\n", g, gm);
    CUdeviceptr va; C(cuMemAddressReserve(&va, 4 * g, 0, 0, 0));
    CUmemGenericAllocationHandle h1, h2, h3;
    C(cuMemCreate(&h1, g, &pr, 0)); C(cuMemCreate(&h2, 2 * g, &pr, 0));
    C(cuMemMap(va, g, 0, h1, 0)); C(cuMemMap(va + g, 2 * g, 0, h2, 0));
    CUmemAccessDesc ad = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    C(cuMemSetAccess(va, 3 * g, &ad, 1));
    printf("h1=%#llx h2=%#llx va=%#llx\n", (unsigned long long)h1, (unsigned long long)h2, (unsigned long long)va);
    attrs("chunk A start", va);
    attrs("chunk A +100", va + 100);
    attrs("chunk B start", va + g);
    attrs("chunk B +g+100", va + 2 * g + 100);
    /* remap B with new memory */
    C(cuMemUnmap(va + g, 2 * g)); C(cuMemRelease(h2));
    C(cuMemCreate(&h3, 2 * g, &pr, 0)); C(cuMemMap(va + g, 2 * g, 0, h3, 0)); C(cuMemSetAccess(va + g, 2 * g, &ad, 1));
    attrs("chunk B remapped", va + g + 100);
    /* single allocation mapped partially? map h3 half */
    CUdeviceptr one; C(cuMemAlloc(&one, 1 << 20)); attrs("cuMemAlloc", one + 10);
    return 0;
}
