/* The resident kernels' collectives on device buffers from 4 B to 4 MiB: MPI_Allreduce (sum,
 * prod, min, max on int, int64, float, double, MPIX_C_FLOAT16, MPIX_BFLOAT16), MPI_Alltoall and
 * MPI_Allgather, in place and not, at odd element counts around every boundary of the resident
 * paths (the one-block kernel's 16 KiB, one-shot/two-shot, GPUMPI_GPU_RESIDENT_MAX's 1 MiB and
 * beyond, where the NVLink plans take over), each size called twice in a row (both parities of
 * the kernels' slots) and then again after a call of another size; every result is checked
 * element by element on the host. Run it with the built-in table, and with
 * GPUMPI_GPU_RESIDENT_TUNING tables that send every call to one algorithm (one_shot, two_shot,
 * push) and GPUMPI_GPU_RESIDENT_BLOCKS at odd values (tests/gpu/run.sh).
 * Rank 0 prints "PASS: gpu_resident_mid" when every check passed on every rank; without a CUDA
 * device "SKIP: ...". Argument: the largest size in bytes (default 4 MiB). */
#include <mpi.h>
#include <mpi-ext.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "cudart.h"

static int rank, size, failures;
#define CHECKC(cond, ...) do { if (!(cond)) { fprintf(stderr, "rank %d: ", rank); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)
static char *dsend, *drecv, *hsend, *hrecv, *hwant;
static size_t cap;

enum { T_INT, T_I64, T_FLOAT, T_DOUBLE, T_F16, T_BF16, NTYPES };
static const char *tname[NTYPES] = {"int", "int64", "float", "double", "float16", "bfloat16"};
static const size_t tsize[NTYPES] = {4, 8, 4, 8, 2, 2};
static MPI_Datatype tmpi(int t)
{
    switch (t) {
    case T_INT: return MPI_INT;
    case T_I64: return MPI_INT64_T;
    case T_FLOAT: return MPI_FLOAT;
    case T_DOUBLE: return MPI_DOUBLE;
    case T_F16: return MPIX_C_FLOAT16;
    default: return MPIX_BFLOAT16;
    }
}

/* Small integers, exact in every type (bfloat16 holds integers up to 256 exactly, float16 up
 * to 2048): sums over 4 ranks of values below 32 stay exact; products use values 1 and 2 on a
 * few elements so that they stay small. */
static int value(int r, size_t i, int op)
{
    if (op == 1) return ((i + r) % 7 == 0) ? 2 : 1;
    return (int)((i * 7 + (size_t)r * 13) % 31);
}

static uint16_t f16_of(float f)
{ /* exact for small integers */
    if (f == 0) return 0;
    uint32_t b;
    memcpy(&b, &f, 4);
    int e = (int)((b >> 23) & 0xff) - 127 + 15;
    return (uint16_t)(((b >> 16) & 0x8000) | (e << 10) | ((b >> 13) & 0x3ff));
}
static float f16_to(uint16_t h)
{
    if ((h & 0x7fff) == 0) return 0;
    uint32_t b = ((uint32_t)(h & 0x8000) << 16) | ((uint32_t)(((h >> 10) & 0x1f) - 15 + 127) << 23) |
                 ((uint32_t)(h & 0x3ff) << 13);
    float f;
    memcpy(&f, &b, 4);
    return f;
}
static uint16_t bf16_of(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    return (uint16_t)(b >> 16);
}
static float bf16_to(uint16_t h)
{
    uint32_t b = (uint32_t)h << 16;
    float f;
    memcpy(&f, &b, 4);
    return f;
}

static void put(char *p, int t, size_t i, double v)
{
    switch (t) {
    case T_INT: ((int32_t *)p)[i] = (int32_t)v; break;
    case T_I64: ((int64_t *)p)[i] = (int64_t)v; break;
    case T_FLOAT: ((float *)p)[i] = (float)v; break;
    case T_DOUBLE: ((double *)p)[i] = v; break;
    case T_F16: ((uint16_t *)p)[i] = f16_of((float)v); break;
    default: ((uint16_t *)p)[i] = bf16_of((float)v); break;
    }
}
static double get(const char *p, int t, size_t i)
{
    switch (t) {
    case T_INT: return ((const int32_t *)p)[i];
    case T_I64: return (double)((const int64_t *)p)[i];
    case T_FLOAT: return ((const float *)p)[i];
    case T_DOUBLE: return ((const double *)p)[i];
    case T_F16: return f16_to(((const uint16_t *)p)[i]);
    default: return bf16_to(((const uint16_t *)p)[i]);
    }
}

static void fail(const char *what, size_t at, double got, double want)
{
    if (failures++ < 10)
        printf("gpu_resident_mid: rank %d: %s: element %zu is %g, expected %g\n", rank, what, at, got, want);
    fflush(stdout);
}

static void to_dev(char *d, const char *h, size_t n) { CU(cudaMemcpy_(d, h, n, cudaMemcpyDefault_)); }
static void from_dev(char *h, const char *d, size_t n) { CU(cudaMemcpy_(h, d, n, cudaMemcpyDefault_)); }

static const MPI_Op ops[4] = {MPI_SUM, MPI_PROD, MPI_MIN, MPI_MAX};
static const char *opname[4] = {"sum", "prod", "min", "max"};

static void allreduce(size_t count, int t, int op, int in_place)
{
    size_t b = count * tsize[t];
    for (size_t i = 0; i < count; i++) {
        put(hsend, t, i, value(rank, i, op));
        double w = value(0, i, op);
        for (int r = 1; r < size; r++) {
            double v = value(r, i, op);
            w = op == 0 ? w + v : op == 1 ? w * v : op == 2 ? (v < w ? v : w) : (v > w ? v : w);
        }
        put(hwant, t, i, w);
    }
    to_dev(in_place ? drecv : dsend, hsend, b);
    CU(cudaMemset_(in_place ? dsend : drecv, 0x5a, b)); /* stale bytes must not survive */
    CU(cudaDeviceSynchronize_());
    int rc = MPI_Allreduce(in_place ? MPI_IN_PLACE : dsend, drecv, (int)count, tmpi(t), ops[op], MPI_COMM_WORLD);
    char what[160];
    snprintf(what, sizeof what, "allreduce %s %s %zu elements (%zu B)%s", opname[op], tname[t], count, b,
             in_place ? " in place" : "");
    if (rc != MPI_SUCCESS) {
        fail(what, 0, rc, MPI_SUCCESS);
        return;
    }
    from_dev(hrecv, drecv, b);
    for (size_t i = 0; i < count; i++) {
        double g = get(hrecv, t, i), w = get(hwant, t, i);
        if (g != w) {
            fail(what, i, g, w);
            return;
        }
    }
}

/* The wrong bytes of an exchange's result in hrecv: the first is a failure (after a second look,
   `again`, only a line); each wrong block q is described by its range of wrong bytes, their
   count, and how many hold what the receive buffer held before the call. The count. */
static size_t exchange_wrong(int which, size_t blk, int in_place, const char *what, int again)
{
    size_t total = 0;
    for (int q = 0; q < size; q++) {
        size_t bad = 0, old = 0, first = 0, last = 0;
        for (size_t i = 0; i < blk; i++) {
            /* Block q came from rank q: its block for me (alltoall) or its only block. */
            size_t j = which == 0 ? (size_t)rank * blk + i : i;
            char w = (char)(q * 37 + j * 11 + (j >> 8));
            size_t k = q * blk + i;
            if (hrecv[k] == w) continue;
            if (bad == 0) first = k;
            if (bad == 0 && total == 0 && !again) fail(what, k, hrecv[k], w);
            last = k;
            bad++;
            /* Before the call: the send data (alltoall in place), my block (allgather in
               place), 0x5a elsewhere. */
            char before = (char)0x5a;
            if (in_place && which == 0) before = hsend[k];
            if (in_place && which == 1 && q == rank) before = hsend[i];
            if (hrecv[k] == before) old++;
        }
        if (bad)
            printf("gpu_resident_mid: rank %d: %s%s: block from rank %d: %zu wrong bytes in [%zu, %zu], %zu "
                   "as before the call\n",
                   rank, what, again ? " (200 ms later)" : "", q, bad, first, last, old);
        total += bad;
    }
    if (again && total == 0) printf("gpu_resident_mid: rank %d: %s: right 200 ms later\n", rank, what);
    fflush(stdout);
    return total;
}

/* Alltoall (which 0) or allgather (1) of `blk` bytes per block. */
static void exchange(int which, size_t blk, int in_place)
{
    size_t sb = which == 0 ? blk * size : blk, rb = blk * size;
    for (size_t i = 0; i < sb; i++) hsend[i] = (char)(rank * 37 + i * 11 + (i >> 8));
    char what[160];
    snprintf(what, sizeof what, "%s %zu B blocks%s", which == 0 ? "alltoall" : "allgather", blk,
             in_place ? " in place" : "");
    CU(cudaMemset_(drecv, 0x5a, rb));
    if (in_place) {
        /* alltoall: the send data in the receive buffer; allgather: my block at its place. */
        to_dev(which == 0 ? drecv : drecv + (size_t)rank * blk, hsend, sb);
    } else {
        to_dev(dsend, hsend, sb);
    }
    CU(cudaDeviceSynchronize_());
    int rc = which == 0
                 ? MPI_Alltoall(in_place ? MPI_IN_PLACE : dsend, (int)blk, MPI_BYTE, drecv, (int)blk, MPI_BYTE,
                                MPI_COMM_WORLD)
                 : MPI_Allgather(in_place ? MPI_IN_PLACE : dsend, (int)blk, MPI_BYTE, drecv, (int)blk, MPI_BYTE,
                                 MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) {
        fail(what, 0, rc, MPI_SUCCESS);
        return;
    }
    from_dev(hrecv, drecv, rb);
    if (exchange_wrong(which, blk, in_place, what, 0) == 0) return;
    /* Say what the wrong bytes are, then look again later: bytes that are right by then
       landed late (the call returned before its stores were visible); bytes still wrong and
       equal to the buffer's content before the call were never written. */
    for (double t0 = MPI_Wtime(); MPI_Wtime() - t0 < 0.2;) {
    }
    from_dev(hrecv, drecv, rb);
    exchange_wrong(which, blk, in_place, what, 1);
}

int main(int argc, char **argv)
{
    if (cudart_mpi_init(&argc, &argv, -1, &rank, &size) < 0) return 0;
    cudart_pick_device();
    size_t maxb = argc > 1 ? (size_t)strtoull(argv[1], NULL, 0) : (4u << 20);
    /* Byte sizes around every boundary; element counts are made odd below. */
    const size_t sizes[] = {4, 12, 100, 4092, 16384, 16388, 32772, 65540, 131076, 262148, 262160,
                            524292, 1048572, 1048580, 2097156, 4194300};
    cap = (maxb + 64) * (size_t)size;
    CU(cudaMalloc_((void **)&dsend, cap));
    CU(cudaMalloc_((void **)&drecv, cap));
    hsend = malloc(cap);
    hrecv = malloc(cap);
    hwant = malloc(cap);
    CHECKC(hsend && hrecv && hwant, "host buffers");
    int ns = (int)(sizeof sizes / sizeof sizes[0]);
    for (int s = 0; s < ns; s++) {
        if (sizes[s] > maxb) continue;
        for (int t = 0; t < NTYPES; t++) {
            size_t count = sizes[s] / tsize[t];
            if (count == 0) count = 1;
            if (count % 2 == 0) count -= 1;
            if (count == 0) count = 1;
            for (int op = 0; op < 4; op++) {
                /* Every op on the 4-byte types; sum and max on the others (fewer calls at 4 MiB). */
                if (tsize[t] != 4 && op != 0 && op != 3) continue;
                allreduce(count, t, op, 0);
                allreduce(count, t, op, 1);
            }
        }
        /* Blocks of odd byte counts too (alltoall/allgather through MPI_BYTE). */
        size_t blk = sizes[s] | 1;
        if (blk > maxb) blk = sizes[s];
        for (int which = 0; which < 2; which++) {
            exchange(which, blk, 0);
            exchange(which, blk, 0);
            exchange(which, blk, 1);
            exchange(which, sizes[s], 1);
        }
    }
    /* A size's calls again after other sizes (stale slots, parities of the other kernel). */
    allreduce(4097, T_FLOAT, 0, 0);
    allreduce(3, T_INT, 3, 1);
    allreduce(131073, T_DOUBLE, 0, 0);
    allreduce(5, T_I64, 0, 0);
    exchange(0, 65537, 0);
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        if (all == 0)
            printf("PASS: gpu_resident_mid (%d ranks, up to %zu B)\n", size, maxb);
        else
            printf("FAIL: gpu_resident_mid: %d checks failed\n", all);
    }
    CU(cudaFree_(dsend));
    CU(cudaFree_(drecv));
    MPI_Finalize();
    return all != 0;
}
