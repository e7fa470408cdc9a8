// gpumpi's CUDA C primitives: copy, and reduce-copy `dst[i] = a[i] op b[i]` for sum, min, max
// and prod on int32, int64, float, double, half and bfloat16 (a reduction in place is the case
// dst == b). Algorithms live on the host side (src/coll); these kernels only move and combine
// bytes. Compiled by build.rs with nvcc into one fatbin (sm_80, sm_90 and compute_90 PTX)
// embedded in libmpi_abi.so and loaded at first GPU use (src/gpu/kernels.rs).
//
// Every kernel is a grid-stride loop, so any grid size is correct; the host picks the grid.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

template <typename T> struct OpSum  { __device__ static T apply(T a, T b) { return a + b; } };
template <typename T> struct OpProd { __device__ static T apply(T a, T b) { return a * b; } };
template <typename T> struct OpMin  { __device__ static T apply(T a, T b) { return b < a ? b : a; } };
template <typename T> struct OpMax  { __device__ static T apply(T a, T b) { return a < b ? b : a; } };

// half and bfloat16 arithmetic in float: exact for sum/prod rounding to the type, as the host does.
#define FLOAT_VIA(T, TO, FROM)                                                                  \
    template <> struct OpSum<T>  { __device__ static T apply(T a, T b) { return FROM(TO(a) + TO(b)); } }; \
    template <> struct OpProd<T> { __device__ static T apply(T a, T b) { return FROM(TO(a) * TO(b)); } }; \
    template <> struct OpMin<T>  { __device__ static T apply(T a, T b) { return TO(b) < TO(a) ? b : a; } }; \
    template <> struct OpMax<T>  { __device__ static T apply(T a, T b) { return TO(a) < TO(b) ? b : a; } };
FLOAT_VIA(__half, __half2float, __float2half_rn)
FLOAT_VIA(__nv_bfloat16, __bfloat162float, __float2bfloat16_rn)

template <typename T, typename Op>
__device__ __forceinline__ void reduce_copy(T *__restrict__ dst, const T *a, const T *b, uint64_t n) {
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dst[i] = Op::apply(a[i], b[i]);
}

#define REDUCE_KERNEL(OPNAME, OP, TNAME, T)                                                     \
    extern "C" __global__ void gpumpi_reduce_##OPNAME##_##TNAME(T *dst, const T *a, const T *b, \
                                                                 uint64_t n) {                  \
        reduce_copy<T, OP<T>>(dst, a, b, n);                                                    \
    }
// Every (op, type) pair, for any kernel-defining macro KERNEL(OPNAME, OP, TNAME, T).
#define FOR_TYPES(KERNEL, OPNAME, OP)                    \
    KERNEL(OPNAME, OP, i32, int32_t)                     \
    KERNEL(OPNAME, OP, i64, long long)                   \
    KERNEL(OPNAME, OP, f32, float)                       \
    KERNEL(OPNAME, OP, f64, double)                      \
    KERNEL(OPNAME, OP, f16, __half)                      \
    KERNEL(OPNAME, OP, bf16, __nv_bfloat16)
#define FOR_OPS(KERNEL)                                  \
    FOR_TYPES(KERNEL, sum, OpSum)                        \
    FOR_TYPES(KERNEL, prod, OpProd)                      \
    FOR_TYPES(KERNEL, min, OpMin)                        \
    FOR_TYPES(KERNEL, max, OpMax)
FOR_OPS(REDUCE_KERNEL)

// Byte copy: 16-byte vectors when both ends are 16-byte aligned, bytes otherwise.
extern "C" __global__ void gpumpi_copy(uint8_t *dst, const uint8_t *src, uint64_t n) {
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    uint64_t tid = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if ((((uintptr_t)dst | (uintptr_t)src) & 15) == 0) {
        uint64_t nv = n / 16;
        const uint4 *s = (const uint4 *)src;
        uint4 *d = (uint4 *)dst;
        for (uint64_t i = tid; i < nv; i += stride) d[i] = s[i];
        for (uint64_t i = nv * 16 + tid; i < n; i += stride) dst[i] = src[i];
    } else {
        for (uint64_t i = tid; i < n; i += stride) dst[i] = src[i];
    }
}

#include "coll.cuh"
#include "pack.cuh"
#include "resident.cuh"
#include "resident_mid.cuh"
#include "hostar.cuh"
#include "stream_ar.cuh"
#include "stream_coll.cuh"
