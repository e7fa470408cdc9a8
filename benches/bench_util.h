/* bench_util.h -- pure helpers of gpumpi-bench: size sweep, types, reduction
 * reference values, bus-bandwidth factors, statistics.  No MPI, no CUDA: the
 * unit test (benches/test_bench_util.c) includes this header alone.
 *
 * Validation scheme: every input element is a small integer computed from
 * (rank, global index), so sums, products, minima and maxima are exact in
 * every type (floats included) and the expected result can be computed
 * locally by replaying all ranks' inputs.  Integer types wrap the same way
 * the reduction does (two's complement store of the int64 result). */
#ifndef GPUMPI_BENCH_UTIL_H
#define GPUMPI_BENCH_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <ctype.h>
#include <math.h>

/* ---------------------------------------------------------------- sizes */

/* Parse "8", "64K", "128M", "1G" (binary multiples; an optional trailing
 * 'B' or 'iB' is accepted).  Returns 0 and sets *out, or -1. */
static inline int bu_parse_size(const char *s, size_t *out)
{
    if (!s || !*s) return -1;
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s) return -1;
    unsigned long long mul = 1;
    switch (toupper((unsigned char)*end)) {
    case 'K': mul = 1ULL << 10; end++; break;
    case 'M': mul = 1ULL << 20; end++; break;
    case 'G': mul = 1ULL << 30; end++; break;
    case 'T': mul = 1ULL << 40; end++; break;
    default: break;
    }
    if (mul != 1 && *end == 'i') end++;
    if (*end == 'B' || *end == 'b') end++;
    if (*end != '\0') return -1;
    if (s[0] == '-') return -1;
    if (mul != 1 && v > (unsigned long long)SIZE_MAX / mul) return -1;
    *out = (size_t)(v * mul);
    return 0;
}

/* Sizes min, min*f, min*f^2, ... <= max.  A min of 0 contributes 0 and then
 * continues from 1.  Returns the number of sizes written (at most cap), or
 * -1 for a bad sweep (factor < 2, max < min). */
static inline int bu_sweep(size_t min, size_t max, size_t factor, size_t *out, int cap)
{
    if (factor < 2 || max < min || cap <= 0) return -1;
    int n = 0;
    size_t s = min;
    if (s == 0) {
        out[n++] = 0;
        s = 1;
    }
    while (s <= max && n < cap) {
        out[n++] = s;
        if (s > SIZE_MAX / factor) break;
        s *= factor;
    }
    return n;
}

/* ---------------------------------------------------------------- types */

typedef enum { BU_INT8, BU_UINT8, BU_INT32, BU_UINT32, BU_INT64, BU_UINT64,
               BU_FLOAT, BU_DOUBLE, BU_NTYPES } bu_type;

static const char *const bu_type_names[BU_NTYPES] = {
    "int8", "uint8", "int32", "uint32", "int64", "uint64", "float", "double" };
static const size_t bu_type_sizes[BU_NTYPES] = { 1, 1, 4, 4, 8, 8, 4, 8 };

static inline int bu_type_from_name(const char *s)
{
    static const struct { const char *alias; bu_type t; } aliases[] = {
        { "char", BU_INT8 }, { "int", BU_INT32 }, { "uint", BU_UINT32 },
        { "long", BU_INT64 }, { "float32", BU_FLOAT }, { "float64", BU_DOUBLE },
        { "fp32", BU_FLOAT }, { "fp64", BU_DOUBLE } };
    for (int i = 0; i < BU_NTYPES; i++)
        if (strcmp(s, bu_type_names[i]) == 0) return i;
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (strcmp(s, aliases[i].alias) == 0) return (int)aliases[i].t;
    return -1;
}

static inline void bu_store(bu_type t, void *buf, size_t i, double v)
{
    int64_t w = (int64_t)v;
    switch (t) {
    case BU_INT8:   ((int8_t *)buf)[i] = (int8_t)w; break;
    case BU_UINT8:  ((uint8_t *)buf)[i] = (uint8_t)w; break;
    case BU_INT32:  ((int32_t *)buf)[i] = (int32_t)w; break;
    case BU_UINT32: ((uint32_t *)buf)[i] = (uint32_t)w; break;
    case BU_INT64:  ((int64_t *)buf)[i] = w; break;
    case BU_UINT64: ((uint64_t *)buf)[i] = (uint64_t)w; break;
    case BU_FLOAT:  ((float *)buf)[i] = (float)v; break;
    case BU_DOUBLE: ((double *)buf)[i] = v; break;
    default: break;
    }
}

static inline double bu_load(bu_type t, const void *buf, size_t i)
{
    switch (t) {
    case BU_INT8:   return ((const int8_t *)buf)[i];
    case BU_UINT8:  return ((const uint8_t *)buf)[i];
    case BU_INT32:  return ((const int32_t *)buf)[i];
    case BU_UINT32: return ((const uint32_t *)buf)[i];
    case BU_INT64:  return (double)((const int64_t *)buf)[i];
    case BU_UINT64: return (double)((const uint64_t *)buf)[i];
    case BU_FLOAT:  return ((const float *)buf)[i];
    case BU_DOUBLE: return ((const double *)buf)[i];
    default: return NAN;
    }
}

/* Round-trip a value through the type (applies integer wrap-around). */
static inline double bu_as_type(bu_type t, double v)
{
    unsigned char tmp[8];
    bu_store(t, tmp, 0, v);
    return bu_load(t, tmp, 0);
}

/* ----------------------------------------------------------- reductions */

typedef enum { BU_SUM, BU_PROD, BU_MAX, BU_MIN, BU_NREDOPS } bu_redop;
static const char *const bu_redop_names[BU_NREDOPS] = { "sum", "prod", "max", "min" };

static inline int bu_redop_from_name(const char *s)
{
    for (int i = 0; i < BU_NREDOPS; i++)
        if (strcmp(s, bu_redop_names[i]) == 0) return i;
    return -1;
}

/* Input of `rank` at global element index `idx` for reduction `op`. */
static inline double bu_input(bu_redop op, int rank, size_t idx)
{
    switch (op) {
    /* the second term keeps the sum index-dependent when nranks % 5 == 0 */
    case BU_SUM:  return (double)(((size_t)rank * 3 + idx) % 5 + (idx / 3) % 4);  /* 0..7 */
    case BU_PROD: return (((size_t)rank + idx) % 16 == 0) ? 2.0 : 1.0;      /* 1 or 2 */
    case BU_MAX:
    case BU_MIN:  return (double)(((size_t)rank * 7 + idx * 13) % 97);      /* 0..96 */
    default: return 0;
    }
}

static inline double bu_apply(bu_redop op, double a, double b)
{
    switch (op) {
    case BU_SUM:  return a + b;
    case BU_PROD: return a * b;
    case BU_MAX:  return a > b ? a : b;
    case BU_MIN:  return a < b ? a : b;
    default: return NAN;
    }
}

/* Expected result at global index idx of reducing the inputs of ranks
 * 0..nranks-1, evaluated in the arithmetic of type t. */
static inline double bu_expected(bu_type t, bu_redop op, int nranks, size_t idx)
{
    double acc = bu_as_type(t, bu_input(op, 0, idx));
    for (int r = 1; r < nranks; r++)
        acc = bu_as_type(t, bu_apply(op, acc, bu_as_type(t, bu_input(op, r, idx))));
    return acc;
}

/* Pattern for data-movement operations: identifies (source rank, index)
 * and fits every type exactly (0..126). */
static inline double bu_pattern(int rank, size_t idx)
{
    return (double)(((size_t)rank * 37 + idx) % 127);
}

/* Fill buf[0..count) with reduction inputs of `rank`, global index offset off. */
static inline void bu_fill_input(bu_type t, bu_redop op, int rank, void *buf, size_t count, size_t off)
{
    for (size_t i = 0; i < count; i++) bu_store(t, buf, i, bu_input(op, rank, off + i));
}

static inline void bu_fill_pattern(bu_type t, int rank, void *buf, size_t count, size_t off)
{
    for (size_t i = 0; i < count; i++) bu_store(t, buf, i, bu_pattern(rank, off + i));
}

/* Number of elements of buf[0..count) that differ from the reduction of all
 * ranks' inputs at global indices off..off+count. */
static inline size_t bu_check_reduce(bu_type t, bu_redop op, int nranks, const void *buf, size_t count, size_t off)
{
    size_t wrong = 0;
    for (size_t i = 0; i < count; i++)
        if (bu_load(t, buf, i) != bu_expected(t, op, nranks, off + i)) wrong++;
    return wrong;
}

/* Number of elements of buf[0..count) that differ from rank `src`'s pattern
 * at global indices off..off+count. */
static inline size_t bu_check_pattern(bu_type t, int src, const void *buf, size_t count, size_t off)
{
    size_t wrong = 0;
    for (size_t i = 0; i < count; i++)
        if (bu_load(t, buf, i) != bu_as_type(t, bu_pattern(src, off + i))) wrong++;
    return wrong;
}

/* ---------------------------------------------------------- operations */

typedef enum { BU_OP_PINGPONG, BU_OP_BW, BU_OP_BIBW, BU_OP_SENDRECV, BU_OP_ALLREDUCE,
               BU_OP_REDUCE, BU_OP_ALLTOALL, BU_OP_ALLTOALLV, BU_OP_BCAST, BU_OP_ALLGATHER,
               BU_OP_REDUCE_SCATTER, BU_OP_FIRSTCALL, BU_OP_GATHER, BU_OP_SCATTER,
               BU_OP_ALLGATHERV, BU_OP_GATHERV, BU_OP_SCATTERV, BU_NOPS } bu_opkind;

static const char *const bu_op_names[BU_NOPS] = {
    "pingpong", "bw", "bibw", "sendrecv", "allreduce", "reduce", "alltoall", "alltoallv",
    "bcast", "allgather", "reduce_scatter", "firstcall", "gather", "scatter", "allgatherv",
    "gatherv", "scatterv" };

static inline int bu_op_from_name(const char *s)
{
    for (int i = 0; i < BU_NOPS; i++)
        if (strcmp(s, bu_op_names[i]) == 0) return i;
    if (strcmp(s, "reducescatter") == 0) return BU_OP_REDUCE_SCATTER;
    if (strcmp(s, "broadcast") == 0) return BU_OP_BCAST;
    return -1;
}

/* 1 if the operation reduces (uses -t/-p inputs and a redop column). */
static inline int bu_op_reduces(bu_opkind k)
{
    return k == BU_OP_ALLREDUCE || k == BU_OP_REDUCE || k == BU_OP_REDUCE_SCATTER;
}

/* 1 if `size` is the total over ranks, split into nranks blocks
 * (nccl-tests convention for allgather, reduce_scatter, alltoall; also gather, scatter and
 * allgatherv, gatherv and scatterv). */
static inline int bu_op_blocked(bu_opkind k)
{
    return k == BU_OP_ALLTOALL || k == BU_OP_ALLTOALLV || k == BU_OP_ALLGATHER ||
           k == BU_OP_REDUCE_SCATTER || k == BU_OP_GATHER || k == BU_OP_SCATTER ||
           k == BU_OP_ALLGATHERV || k == BU_OP_GATHERV || k == BU_OP_SCATTERV;
}

/* busbw = algbw * factor (nccl-tests definitions):
 *   allreduce 2(n-1)/n; reduce_scatter, allgather(v), alltoall(v), gather, scatter (n-1)/n;
 *   bcast, reduce, sendrecv, point-to-point 1. */
static inline double bu_busbw_factor(bu_opkind k, int n)
{
    if (n <= 0) return 0;
    switch (k) {
    case BU_OP_ALLREDUCE: return 2.0 * (n - 1) / n;
    case BU_OP_REDUCE_SCATTER:
    case BU_OP_ALLGATHER:
    case BU_OP_ALLGATHERV:
    case BU_OP_GATHER:
    case BU_OP_SCATTER:
    case BU_OP_GATHERV:
    case BU_OP_SCATTERV:
    case BU_OP_ALLTOALL:
    case BU_OP_ALLTOALLV: return (double)(n - 1) / n;
    default: return 1.0;
    }
}

/* Element count per rank-block and total for a byte size.  For blocked
 * operations the count is rounded down to a multiple of nranks.  Returns the
 * total element count (0 = size too small for this type/rank count). */
static inline size_t bu_counts(bu_opkind k, size_t bytes, bu_type t, int nranks, size_t *block)
{
    size_t count = bytes / bu_type_sizes[t];
    size_t blk = count;
    if (bu_op_blocked(k)) {
        blk = nranks > 0 ? count / (size_t)nranks : 0;
        count = blk * (size_t)nranks;
    }
    if (block) *block = blk;
    return count;
}

/* GB/s (1e9 bytes per second) from bytes and seconds. */
static inline double bu_gbps(double bytes, double seconds)
{
    return seconds > 0 ? bytes / seconds / 1e9 : 0.0;
}

/* ---------------------------------------------------------- statistics */

static inline int bu_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of v[0..n) (sorts v in place); mean of the two middle values for
 * even n.  0 for n == 0. */
static inline double bu_median(double *v, int n)
{
    if (n <= 0) return 0;
    qsort(v, (size_t)n, sizeof *v, bu_cmp_double);
    return (n % 2) ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static inline double bu_min(const double *v, int n)
{
    double m = n > 0 ? v[0] : 0;
    for (int i = 1; i < n; i++) if (v[i] < m) m = v[i];
    return m;
}

static inline double bu_mean(const double *v, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++) s += v[i];
    return n > 0 ? s / n : 0;
}

#endif /* GPUMPI_BENCH_UTIL_H */
