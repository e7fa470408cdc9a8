/* Stream-ordered MPI (MPICH's MPIX streams, mpi-ext.h) on device buffers: every enqueue form
 * with its data checked, ordered with the caller's own stream work before and after it (a
 * memset writes the input right before the call and overwrites it right after; a copy reads the
 * result right after), two streams and stream communicators at once (enqueued in opposite
 * orders on neighbouring ranks), enqueued work beside blocking calls, and a CUDA graph that
 * captures copy-in + MPIX_Allreduce_enqueue + copy-out, replayed 1000 times with the result
 * checked every 10th replay.
 * MPIX_Allreduce_enqueue's stream kernel (one kernel on the stream, src/gpu/enqueue_kernel.rs):
 * where every rank has its own GPU with peer access (and GPUMPI_STREAM_KERNEL, GPUMPI_CUDA_IPC
 * are not 0) the first call must set it up (the peer mappings of MPIX_Query_gpu_resources grow
 * by size - 1); every op and type it reduces, sizes around its block, slot and one-/two-shot
 * boundaries (GPUMPI_STREAM_SCRATCH makes the slots small in tests/gpu/run.sh), odd counts, in
 * place, 8 calls back to back without synchronizing, host buffers on rank 0 (staged there),
 * and a graph of kernel + MPIX_Allreduce_enqueue + kernel captured as the stream
 * communicator's very first call (so its set-up runs during the capture), replayed 1000 times.
 * The stream kernels of MPIX_Bcast_enqueue, MPIX_Allgather_enqueue, MPIX_Alltoall_enqueue and
 * MPIX_Reduce_scatter_block_enqueue (kernels/stream_coll.cuh): blocks from 4 B to 1 MiB around
 * the kernels' block and slot boundaries, odd sizes, in place and not, 15 calls of the five
 * forms (allreduce too) back to back, a non-contiguous bcast (the fallback), and a graph of
 * copy-in + the five forms + copy-out replayed 200 times, checked every 10th replay.
 * `gpu_stream bench [MAX_BYTES [MIN_BYTES [FACTOR [OP]]]]`: instead of the checks, times OP
 * (allreduce, the default, bcast, allgather, alltoall or reduce_scatter_block; MPI_INT, sum)
 * from MIN_BYTES (8 B) to MAX_BYTES (1 GiB), each size FACTOR (8) times the last (per rank for
 * allreduce and bcast, over all ranks for the others, as nccl-tests): the blocking call on
 * device buffers, the enqueue form back-to-back on one stream, and the enqueue form replayed
 * from a captured graph of 10 calls; median of 5 rounds, us per call (a benchmark for
 * benches/NOTES.md, not a test: it prints numbers and checks nothing).
 * Without a CUDA device it prints "SKIP: no CUDA device (<reason>)" and exits 0. */
#include <mpi.h>
#include <mpi-ext.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cudart.h"

typedef void *stream_t;
typedef void *graph_t;
typedef void *graph_exec_t;
enum { H2D = 1, D2H = 2, D2D = 3 };
static int (*cudaStreamCreateWithFlags_)(stream_t *, unsigned);
static int (*cudaStreamDestroy_)(stream_t);
static int (*cudaStreamSynchronize_)(stream_t);
static int (*cudaMemcpyAsync_)(void *, const void *, size_t, int, stream_t);
static int (*cudaStreamBeginCapture_)(stream_t, int);
static int (*cudaStreamEndCapture_)(stream_t, graph_t *);
static int (*cudaGraphInstantiateWithFlags_)(graph_exec_t *, graph_t, unsigned long long);
static int (*cudaGraphLaunch_)(graph_exec_t, stream_t);
static int (*cudaGraphExecDestroy_)(graph_exec_t);
static int (*cudaGraphDestroy_)(graph_t);
/* The driver's 32-bit memset: the "kernel" that writes an input right before an enqueue. */
static int (*cuMemsetD32Async_)(uintptr_t, unsigned, size_t, stream_t);
static int (*cudaDeviceCanAccessPeer_)(int *, int, int);

static const char *load_more(void) {
    static char why[256];
    void *rt = NULL;
    const char *names[] = {getenv("GPUMPI_TEST_CUDART"), "libcudart.so", "libcudart.so.13",
                           "libcudart.so.12", "/usr/local/cuda/lib64/libcudart.so", NULL};
    for (int i = 0; names[i] || i == 0; i++)
        if (names[i] && (rt = dlopen(names[i], RTLD_NOW | RTLD_GLOBAL))) break;
    void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!rt || !drv) {
        snprintf(why, sizeof why, "libcudart or libcuda.so.1 not found");
        return why;
    }
#define MORE(h, f) if (!(*(void **)&f##_ = dlsym(h, #f))) { snprintf(why, sizeof why, "lacks %s", #f); return why; }
    MORE(rt, cudaStreamCreateWithFlags) MORE(rt, cudaStreamDestroy) MORE(rt, cudaStreamSynchronize)
    MORE(rt, cudaMemcpyAsync) MORE(rt, cudaStreamBeginCapture) MORE(rt, cudaStreamEndCapture)
    MORE(rt, cudaGraphInstantiateWithFlags) MORE(rt, cudaGraphLaunch) MORE(rt, cudaGraphExecDestroy)
    MORE(rt, cudaGraphDestroy) MORE(drv, cuMemsetD32Async) MORE(rt, cudaDeviceCanAccessPeer)
    return NULL;
}

static int errs = 0, rank, size;
#define EXPECT(c, ...) do { if (!(c)) { if (errs++ < 10) { fprintf(stderr, "rank %d: ", rank); fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } } while (0)
#define DRV(call) do { int rc_ = (call); if (rc_) { fprintf(stderr, "%s:%d: %s: driver error %d\n", __FILE__, __LINE__, #call, rc_); MPI_Abort(MPI_COMM_WORLD, 3); } } while (0)
#define MPI(call) do { int rc_ = (call); if (rc_) { fprintf(stderr, "%s:%d: %s: MPI error %d\n", __FILE__, __LINE__, #call, rc_); MPI_Abort(MPI_COMM_WORLD, 4); } } while (0)

static void set32(int *d, int v, size_t n, stream_t s) {
    DRV(cuMemsetD32Async_((uintptr_t)d, (unsigned)v, n, s));
}

/* A stream communicator over `s`. */
static MPI_Comm stream_comm(stream_t s, MPIX_Stream *xs) {
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "type", "cudaStream_t");
    MPI(MPIX_Info_set_hex(info, "value", &s, sizeof s));
    MPI(MPIX_Stream_create(info, xs));
    MPI_Info_free(&info);
    MPI_Comm c;
    MPI(MPIX_Stream_comm_create(MPI_COMM_WORLD, *xs, &c));
    return c;
}

static int *host;

/* Copy n ints of device `d` to the host buffer (synchronously) and check each is `want`. */
static void check(const char *what, const int *d, size_t n, int want) {
    CU(cudaMemcpy_(host, d, n * sizeof(int), cudaMemcpyDefault_));
    for (size_t i = 0; i < n; i++)
        if (host[i] != want) {
            EXPECT(0, "%s: element %zu of %zu is %d, want %d", what, i, n, host[i], want);
            return;
        }
}

static void p2p(MPI_Comm c, stream_t s, int *sb, int *rb, int *cb, size_t n) {
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    /* Blocking forms: even ranks send first, odd ranks receive first. */
    set32(sb, 1000 + rank, n, s);
    if (rank % 2 == 0) {
        MPI(MPIX_Send_enqueue(sb, (int)n, MPI_INT, next, 1, c));
        MPI(MPIX_Recv_enqueue(rb, (int)n, MPI_INT, prev, 1, c, MPI_STATUS_IGNORE));
    } else {
        MPI(MPIX_Recv_enqueue(rb, (int)n, MPI_INT, prev, 1, c, MPI_STATUS_IGNORE));
        MPI(MPIX_Send_enqueue(sb, (int)n, MPI_INT, next, 1, c));
    }
    set32(sb, -1, n, s); /* after: the send must have read its input already */
    CU(cudaMemcpyAsync_(cb, rb, n * sizeof(int), D2D, s));
    CU(cudaStreamSynchronize_(s));
    check("send/recv_enqueue", cb, n, 1000 + prev);
    check("input overwritten after send_enqueue", sb, n, -1);

    /* Nonblocking forms with Waitall_enqueue, then Wait_enqueue. */
    MPI_Request r[2];
    set32(sb, 2000 + rank, n, s);
    MPI(MPIX_Irecv_enqueue(rb, (int)n, MPI_INT, prev, 2, c, &r[0]));
    MPI(MPIX_Isend_enqueue(sb, (int)n, MPI_INT, next, 2, c, &r[1]));
    MPI_Status st[2];
    MPI(MPIX_Waitall_enqueue(2, r, st));
    EXPECT(r[0] == MPI_REQUEST_NULL && r[1] == MPI_REQUEST_NULL, "waitall_enqueue left requests");
    CU(cudaMemcpyAsync_(cb, rb, n * sizeof(int), D2D, s));
    set32(rb, -2, n, s);
    CU(cudaStreamSynchronize_(s));
    check("isend/irecv_enqueue + waitall_enqueue", cb, n, 2000 + prev);
    EXPECT(st[0].MPI_SOURCE == prev && st[0].MPI_TAG == 2, "waitall status %d/%d", st[0].MPI_SOURCE, st[0].MPI_TAG);

    set32(sb, 3000 + rank, n, s);
    MPI(MPIX_Irecv_enqueue(rb, (int)n, MPI_INT, prev, 3, c, &r[0]));
    MPI(MPIX_Isend_enqueue(sb, (int)n, MPI_INT, next, 3, c, &r[1]));
    MPI(MPIX_Wait_enqueue(&r[1], MPI_STATUS_IGNORE));
    MPI(MPIX_Wait_enqueue(&r[0], &st[0]));
    CU(cudaMemcpyAsync_(cb, rb, n * sizeof(int), D2D, s));
    CU(cudaStreamSynchronize_(s));
    check("isend/irecv_enqueue + wait_enqueue", cb, n, 3000 + prev);
    EXPECT(st[0].MPI_SOURCE == prev, "wait_enqueue status source %d", st[0].MPI_SOURCE);
}

static void colls(MPI_Comm c, stream_t s, int *sb, int *rb, int *cb, size_t n) {
    int tri = size * (size + 1) / 2;
    set32(sb, rank + 1, n, s);
    MPI(MPIX_Allreduce_enqueue(sb, rb, (int)n, MPI_INT, MPI_SUM, c));
    set32(sb, 0, n, s);
    CU(cudaMemcpyAsync_(cb, rb, n * sizeof(int), D2D, s));
    CU(cudaStreamSynchronize_(s));
    check("allreduce_enqueue", cb, n, tri);

    set32(rb, rank + 1, n, s);
    MPI(MPIX_Allreduce_enqueue(MPI_IN_PLACE, rb, (int)n, MPI_INT, MPI_MAX, c));
    CU(cudaStreamSynchronize_(s));
    check("allreduce_enqueue in place", rb, n, size);

    set32(rb, rank == size - 1 ? 77 : -5, n, s);
    MPI(MPIX_Bcast_enqueue(rb, (int)n, MPI_INT, size - 1, c));
    CU(cudaStreamSynchronize_(s));
    check("bcast_enqueue", rb, n, 77);

    /* Allgather / alltoall / reduce_scatter_block over blocks of m = n / size ints. */
    size_t m = n / (size_t)size;
    if (m == 0) return;
    set32(sb, 10 + rank, m, s);
    MPI(MPIX_Allgather_enqueue(sb, (int)m, MPI_INT, rb, (int)m, MPI_INT, c));
    CU(cudaStreamSynchronize_(s));
    for (int p = 0; p < size; p++) check("allgather_enqueue", rb + p * m, m, 10 + p);

    for (int p = 0; p < size; p++) set32(sb + p * m, 100 * rank + p, m, s);
    MPI(MPIX_Alltoall_enqueue(sb, (int)m, MPI_INT, rb, (int)m, MPI_INT, c));
    CU(cudaStreamSynchronize_(s));
    for (int p = 0; p < size; p++) check("alltoall_enqueue", rb + p * m, m, 100 * p + rank);

    for (int p = 0; p < size; p++) set32(sb + p * m, rank + p, m, s);
    MPI(MPIX_Reduce_scatter_block_enqueue(sb, rb, (int)m, MPI_INT, MPI_SUM, c));
    CU(cudaStreamSynchronize_(s));
    check("reduce_scatter_block_enqueue", rb, m, tri - size + size * rank);
}

/* Two streams and communicators at once, enqueued in opposite orders on neighbouring ranks,
 * with a blocking collective on MPI_COMM_WORLD while both streams run. */
static void two_streams(MPI_Comm ca, stream_t a, MPI_Comm cb, stream_t b, int *d, size_t n) {
    int *a_in = d, *a_out = d + n, *b_in = d + 2 * n, *b_out = d + 3 * n;
    for (int round = 0; round < 20; round++) {
        set32(a_in, rank + round, n, a);
        set32(b_in, 10 * rank + round, n, b);
        if (rank % 2 == 0) {
            MPI(MPIX_Allreduce_enqueue(a_in, a_out, (int)n, MPI_INT, MPI_SUM, ca));
            MPI(MPIX_Allreduce_enqueue(b_in, b_out, (int)n, MPI_INT, MPI_SUM, cb));
        } else {
            MPI(MPIX_Allreduce_enqueue(b_in, b_out, (int)n, MPI_INT, MPI_SUM, cb));
            MPI(MPIX_Allreduce_enqueue(a_in, a_out, (int)n, MPI_INT, MPI_SUM, ca));
        }
        int x = rank, y = 0;
        MPI(MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
        EXPECT(y == size * (size - 1) / 2, "blocking allreduce beside the streams: %d", y);
        CU(cudaStreamSynchronize_(a));
        CU(cudaStreamSynchronize_(b));
        check("two streams: a", a_out, n, size * (size - 1) / 2 + size * round);
        check("two streams: b", b_out, n, 10 * size * (size - 1) / 2 + size * round);
    }
}

/* A graph: copy-in from pinned host + allreduce_enqueue + copy-out to pinned host. */
static void graph(MPI_Comm c, stream_t s, int *d, size_t n) {
    int *in, *out;
    CU(cudaMallocHost_((void **)&in, n * sizeof(int)));
    CU(cudaMallocHost_((void **)&out, n * sizeof(int)));
    int *din = d, *dout = d + n, *dcopy = d + 2 * n;
    /* One run outside capture: leaves a staging area of this size for the capture to reuse. */
    MPI(MPIX_Allreduce_enqueue(din, dout, (int)n, MPI_INT, MPI_SUM, c));
    CU(cudaStreamSynchronize_(s));
    graph_t g;
    graph_exec_t ge;
    CU(cudaStreamBeginCapture_(s, 0 /* cudaStreamCaptureModeGlobal */));
    CU(cudaMemcpyAsync_(din, in, n * sizeof(int), H2D, s));
    set32(dout, -7, n, s); /* the allreduce must overwrite it */
    MPI(MPIX_Allreduce_enqueue(din, dout, (int)n, MPI_INT, MPI_SUM, c));
    CU(cudaMemcpyAsync_(dcopy, dout, n * sizeof(int), D2D, s));
    CU(cudaMemcpyAsync_(out, dcopy, n * sizeof(int), D2H, s));
    CU(cudaStreamEndCapture_(s, &g));
    CU(cudaGraphInstantiateWithFlags_(&ge, g, 0));
    int val = 0;
    for (int i = 0; i < 1000; i++) {
        if (i % 10 == 0) {
            CU(cudaStreamSynchronize_(s));
            val = i;
            for (size_t k = 0; k < n; k++) in[k] = val + rank + (int)k % 7;
        }
        CU(cudaGraphLaunch_(ge, s));
        if (i % 10 == 9) {
            CU(cudaStreamSynchronize_(s));
            for (size_t k = 0; k < n; k++) {
                int want = size * (val + (int)k % 7) + size * (size - 1) / 2;
                if (out[k] != want) {
                    EXPECT(0, "graph replay %d: element %zu is %d, want %d", i, k, out[k], want);
                    break;
                }
            }
        }
    }
    CU(cudaStreamSynchronize_(s));
    CU(cudaGraphExecDestroy_(ge));
    CU(cudaGraphDestroy_(g));
    CU(cudaFreeHost_(in));
    CU(cudaFreeHost_(out));
}

/* ---- MPIX_Allreduce_enqueue's stream kernel ---- */

/* Whether the stream kernel should serve this job: every rank its own GPU, peer access between
 * them all, the kernel and CUDA IPC not switched off. */
static int expect_kernel(void) {
    int ndev = 0;
    cudaGetDeviceCount_(&ndev);
    const char *per = getenv("GPUMPI_TEST_RANKS_PER_GPU"), *k = getenv("GPUMPI_STREAM_KERNEL"),
               *ipc = getenv("GPUMPI_CUDA_IPC"), *gc = getenv("GPUMPI_GPU_COLL");
    if (ndev < size || (per && atoi(per) > 1) || size < 2 || size > 8) return 0;
    if ((k && strcmp(k, "0") == 0) || (ipc && strcmp(ipc, "0") == 0) || (gc && strcmp(gc, "0") == 0)) return 0;
    for (int a = 0; a < size; a++)
        for (int b = 0; b < size; b++) {
            int ok = 0;
            if (a != b && (cudaDeviceCanAccessPeer_(&ok, a, b) || !ok)) return 0;
        }
    return 1;
}

static MPI_Count peer_mappings(void) {
    MPI_Count comms, pinned, dev, maps;
    MPI(MPIX_Query_gpu_resources(&comms, &pinned, &dev, &maps));
    return maps;
}

enum { T_I32, T_I64, T_F32, T_F64, T_F16, T_BF16, NTYPES };
static const char *tname[] = {"int", "int64", "float", "double", "float16", "bfloat16"};
static const size_t tsize[] = {4, 8, 4, 8, 2, 2};
static MPI_Datatype mtype(int t) {
    switch (t) {
    case T_I32: return MPI_INT;
    case T_I64: return MPI_INT64_T;
    case T_F32: return MPI_FLOAT;
    case T_F64: return MPI_DOUBLE;
    case T_F16: return MPIX_C_FLOAT16;
    default: return MPIX_BFLOAT16;
    }
}
static const MPI_Op ops[] = {MPI_SUM, MPI_PROD, MPI_MIN, MPI_MAX};
static const char *oname[] = {"sum", "prod", "min", "max"};

/* float <-> IEEE half and bfloat16 (values here are small integers: exact). */
static uint16_t to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    int e = (int)((x >> 23) & 0xff) - 127 + 15;
    uint32_t m = x & 0x7fffff;
    if (f == 0) return (uint16_t)sign;
    return (uint16_t)(sign | ((uint32_t)e << 10) | (m >> 13));
}
static float from_f16(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    uint32_t x = e == 0 ? sign : sign | ((e - 15 + 127) << 23) | (m << 13);
    float f;
    memcpy(&f, &x, 4);
    return f;
}
static uint16_t to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    return (uint16_t)(x >> 16);
}
static float from_bf16(uint16_t h) {
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

/* Element i of rank r's input for op o: small integers, so that every op and type is exact. */
static double input_of(int o, int r, size_t i) {
    if (o == 1) return (double)((r + i) % 2 + 1); /* prod: 1 or 2 */
    if (o == 0) return (double)(r + (int)(i % 5));
    return (double)((r * 7 + (int)(i % 11)) % 13) - 6.0; /* min/max: -6..6 */
}
static double want_of(int o, size_t i) {
    double acc = input_of(o, 0, i);
    for (int r = 1; r < size; r++) {
        double v = input_of(o, r, i);
        if (o == 0) acc += v;
        else if (o == 1) acc *= v;
        else if (o == 2) acc = v < acc ? v : acc;
        else acc = v > acc ? v : acc;
    }
    return acc;
}
static void put(void *buf, int t, size_t i, double v) {
    switch (t) {
    case T_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case T_I64: ((int64_t *)buf)[i] = (int64_t)v; break;
    case T_F32: ((float *)buf)[i] = (float)v; break;
    case T_F64: ((double *)buf)[i] = v; break;
    case T_F16: ((uint16_t *)buf)[i] = to_f16((float)v); break;
    default: ((uint16_t *)buf)[i] = to_bf16((float)v); break;
    }
}
static double get(const void *buf, int t, size_t i) {
    switch (t) {
    case T_I32: return ((const int32_t *)buf)[i];
    case T_I64: return (double)((const int64_t *)buf)[i];
    case T_F32: return ((const float *)buf)[i];
    case T_F64: return ((const double *)buf)[i];
    case T_F16: return from_f16(((const uint16_t *)buf)[i]);
    default: return from_bf16(((const uint16_t *)buf)[i]);
    }
}

/* One allreduce of n elements of type t with op o through the stream communicator, checked.
 * `hostbuf`: this rank passes host (pageable) buffers instead of device ones. */
static void ar_check(MPI_Comm c, stream_t s, void *dsend, void *drecv, void *hsend, void *hrecv,
                     size_t n, int t, int o, int inplace, int hostbuf) {
    size_t bytes = n * tsize[t];
    for (size_t i = 0; i < n; i++) put(hsend, t, i, input_of(o, rank, i));
    void *sb = hostbuf ? hsend : dsend, *rb = hostbuf ? hrecv : drecv;
    if (hostbuf) {
        if (inplace) memcpy(hrecv, hsend, bytes);
    } else {
        /* On the stream: a synchronous cudaMemcpy from pageable memory may return before its
         * DMA finished, and the legacy stream does not order with a non-blocking stream. */
        CU(cudaMemcpyAsync_(inplace ? drecv : dsend, hsend, bytes, H2D, s));
        if (!inplace) set32(drecv, -3, (bytes + 3) / 4, s); /* overwritten by the call */
    }
    MPI(MPIX_Allreduce_enqueue(inplace ? MPI_IN_PLACE : sb, rb, (int)n, mtype(t), ops[o], c));
    CU(cudaStreamSynchronize_(s));
    if (!hostbuf) CU(cudaMemcpy_(hrecv, drecv, bytes, cudaMemcpyDefault_));
    for (size_t i = 0; i < n; i++) {
        double got = get(hrecv, t, i), want = want_of(o, i);
        if (got != want) {
            EXPECT(0, "stream kernel allreduce %s/%s n=%zu%s%s: element %zu is %g, want %g", oname[o],
                   tname[t], n, inplace ? " in place" : "", hostbuf ? " host buffers" : "", i, got, want);
            return;
        }
    }
}

static void kernel_checks(MPI_Comm c, stream_t s, size_t maxn) {
    /* Sizes in elements around the stream kernel's boundaries: a block's 4 KiB, the LL limits
     * (256 and 512 KiB), the 64 KiB slots and stages that GPUMPI_STREAM_SCRATCH=256k gives, the
     * one-shot limit (512 KiB), several rounds, pipelined from 8 MiB above 2 ranks. */
    const size_t sizes[] = {1, 2, 3, 5, 7, 8, 9, 16, 17, 4095, 4097, 8191, 8192, 8193, 16383,
                            16384, 16385, 32773, 65535, 65536, 65537, 131071, 131073, 262147,
                            (1 << 20) + 3};
    size_t nb = maxn * 8;
    void *dsend, *drecv;
    CU(cudaMalloc_(&dsend, nb));
    CU(cudaMalloc_(&drecv, nb));
    void *hsend = malloc(nb), *hrecv = malloc(nb);
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        if (n > maxn) continue;
        for (int t = 0; t < NTYPES; t++)
            for (int o = 0; o < 4; o++) {
                /* Every pair at the small sizes; a few at the large ones. */
                if (n > 65537 && !((t == T_I32 && o == 0) || (t == T_F32 && o == 3) ||
                                   (t == T_BF16 && o == 2) || (t == T_F64 && o == 0)))
                    continue;
                ar_check(c, s, dsend, drecv, hsend, hrecv, n, t, o, (int)((k + t + o) % 2), 0);
            }
    }
    /* Host (pageable) buffers on rank 0 only: rank 0 stages, the others run the kernel on
     * device memory; in place and not. */
    for (int inplace = 0; inplace < 2; inplace++)
        for (size_t n = 3; n <= maxn && n <= 300000; n = n * 17 + 1)
            ar_check(c, s, dsend, drecv, hsend, hrecv, n, T_I32, 0, inplace, rank == 0);
    /* 8 calls back to back without synchronizing, each its own input and output. */
    size_t n = 4099;
    if (8 * 2 * n * 4 <= nb) {
        int *in = dsend, *out = drecv;
        for (int j = 0; j < 8; j++) set32(in + j * n, rank + 100 * j, n, s);
        for (int j = 0; j < 8; j++) {
            MPI(MPIX_Allreduce_enqueue(in + j * n, out + j * n, (int)n, MPI_INT, MPI_SUM, c));
            set32(in + j * n, -9, n, s); /* after the call: it has read its input */
        }
        CU(cudaStreamSynchronize_(s));
        for (int j = 0; j < 8; j++) check("stream kernel back to back", out + j * n, n, size * (size - 1) / 2 + size * 100 * j);
    }
    CU(cudaFree_(dsend));
    CU(cudaFree_(drecv));
    free(hsend);
    free(hrecv);
}

/* ---- The stream kernels of bcast, allgather, alltoall and reduce_scatter_block ---- */

enum { F_BCAST, F_ALLGATHER, F_ALLTOALL, F_RSB, F_ALLREDUCE, NFORMS };
static const char *fname[] = {"bcast", "allgather", "alltoall", "reduce_scatter_block", "allreduce"};

/* Byte i of the block that rank `from` sends to rank `to` (bcast, allgather: to = 0). */
static unsigned char pat(int from, int to, size_t i, int salt) {
    return (unsigned char)(from * 37 + to * 11 + i * 7 + (i >> 9) + salt * 5 + 1);
}

/* reduce_scatter_block / allreduce: int i of rank `from`'s block for rank `to`, and the sum. */
static int ipat(int from, int to, size_t i, int salt) { return (from + 1) * (to + 3) + (int)(i % 101) + salt; }
static int isum(int to, size_t i, int salt) {
    return (to + 3) * size * (size + 1) / 2 + size * ((int)(i % 101) + salt);
}

/* One enqueued call of `form` whose blocks are `b` bytes (ints for reduce_scatter_block and
 * allreduce: b / 4 of them, at least 1), in `send` / `recv` (device), posted on the stream
 * without synchronizing; `verify` checks it after the stream passed it. */
struct job {
    int form, inplace, salt;
    size_t b;
    unsigned char *send, *recv;
};

static size_t job_in(const struct job *j) {
    return j->form == F_BCAST || j->form == F_ALLGATHER || j->form == F_ALLREDUCE ? j->b : j->b * size;
}
static size_t job_out(const struct job *j) {
    return j->form == F_BCAST || j->form == F_RSB || j->form == F_ALLREDUCE ? j->b : j->b * size;
}

static void job_post(MPI_Comm c, stream_t s, struct job *j, unsigned char *h) {
    size_t b = j->b, m = b / 4, in = job_in(j), out = job_out(j);
    int root = j->salt % size;
    int red = j->form == F_RSB || j->form == F_ALLREDUCE;
    /* The input, laid out where the call reads it (in place: in recv). */
    memset(h, 0xEE, in > out ? in : out);
    for (size_t i = 0; i < (red ? in / 4 : in); i++) {
        size_t blk = i / (red ? m : b), k = i % (red ? m : b);
        switch (j->form) {
        case F_BCAST: h[i] = rank == root ? pat(root, 0, k, j->salt) : 0xEE; break;
        case F_ALLGATHER: h[i] = pat(rank, 0, k, j->salt); break;
        case F_ALLTOALL: h[i] = pat(rank, (int)blk, k, j->salt); break;
        case F_RSB: ((int *)h)[i] = ipat(rank, (int)blk, k, j->salt); break;
        default: ((int *)h)[i] = ipat(rank, 0, i, j->salt); break;
        }
    }
    unsigned char *inbuf = j->inplace || j->form == F_BCAST ? j->recv : j->send;
    if (j->form == F_ALLGATHER && j->inplace) {
        set32((int *)j->recv, (int)0xEEEEEEEE, out / 4, s);
        CU(cudaMemcpyAsync_(j->recv + rank * b, h, b, H2D, s));
    } else {
        if (!j->inplace && j->form != F_BCAST) set32((int *)j->recv, (int)0xEEEEEEEE, out / 4, s);
        CU(cudaMemcpyAsync_(inbuf, h, in, H2D, s));
    }
    void *sb = j->inplace ? MPI_IN_PLACE : j->send;
    switch (j->form) {
    case F_BCAST: MPI(MPIX_Bcast_enqueue(j->recv, (int)b, MPI_BYTE, root, c)); break;
    case F_ALLGATHER: MPI(MPIX_Allgather_enqueue(sb, (int)b, MPI_BYTE, j->recv, (int)b, MPI_BYTE, c)); break;
    case F_ALLTOALL: MPI(MPIX_Alltoall_enqueue(sb, (int)b, MPI_BYTE, j->recv, (int)b, MPI_BYTE, c)); break;
    case F_RSB: MPI(MPIX_Reduce_scatter_block_enqueue(sb, j->recv, (int)m, MPI_INT, MPI_SUM, c)); break;
    default: MPI(MPIX_Allreduce_enqueue(sb, j->recv, (int)m, MPI_INT, MPI_SUM, c)); break;
    }
    /* After the call: it has read its input (not in place). */
    if (!j->inplace && j->form != F_BCAST) set32((int *)j->send, -9, in / 4, s);
}

static void job_verify(const struct job *j, unsigned char *h) {
    size_t b = j->b, m = b / 4, out = job_out(j);
    int root = j->salt % size, red = j->form == F_RSB || j->form == F_ALLREDUCE;
    CU(cudaMemcpy_(h, j->recv, out, cudaMemcpyDefault_));
    for (size_t i = 0; i < (red ? m : out); i++) {
        size_t blk = i / b, k = i % b;
        int got = red ? ((int *)h)[i] : h[i], want;
        switch (j->form) {
        case F_BCAST: want = pat(root, 0, i, j->salt); break;
        case F_ALLGATHER: want = pat((int)blk, 0, k, j->salt); break;
        case F_ALLTOALL: want = pat((int)blk, rank, k, j->salt); break;
        case F_RSB: want = isum(rank, i, j->salt); break;
        default: want = isum(0, i, j->salt); break;
        }
        if (got != want) {
            EXPECT(0, "stream kernel %s%s block %zu B (salt %d): byte/int %zu is %d, want %d", fname[j->form],
                   j->inplace ? " in place" : "", b, j->salt, i, got, want);
            return;
        }
    }
}

static void coll_checks(MPI_Comm c, stream_t s, size_t maxb) {
    /* Block sizes in bytes around the kernels' 4 KiB CUDA blocks and the 64 KiB slots that
     * GPUMPI_STREAM_SCRATCH=256k gives (several rounds above), odd and unaligned ones. */
    const size_t sizes[] = {4, 8, 12, 16, 17, 20, 4092, 4096, 4100, 8192, 12292, 65532, 65536, 65540,
                            131072, 196612, 262147, (1 << 20) + 4};
    size_t nb = (size_t)size * (maxb + 64);
    unsigned char *h = malloc(nb);
    struct job j = {0};
    CU(cudaMalloc_((void **)&j.send, nb));
    CU(cudaMalloc_((void **)&j.recv, nb));
    int salt = 0;
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        if (sizes[k] > maxb) continue;
        for (int f = 0; f < F_ALLREDUCE; f++)
            for (int ip = 0; ip < 2; ip++) {
                if (f == F_BCAST && ip) continue;
                j.form = f, j.inplace = ip, j.salt = ++salt, j.b = sizes[k];
                job_post(c, s, &j, h);
                CU(cudaStreamSynchronize_(s));
                job_verify(&j, h);
            }
    }
    CU(cudaFree_(j.send));
    CU(cudaFree_(j.recv));
    /* Back to back without synchronizing, the forms mixed with the allreduce kernel, each call
     * its own buffers: 3 passes over the five forms at block sizes across a slot. */
    enum { NJ = 15 };
    struct job js[NJ];
    const size_t bb[] = {4100, 65540, 20};
    for (int i = 0; i < NJ; i++) {
        js[i].form = i % NFORMS, js[i].inplace = (i / NFORMS + i) % 2, js[i].salt = 100 + i, js[i].b = bb[i / NFORMS];
        if (js[i].form == F_BCAST) js[i].inplace = 0;
        size_t len = (size_t)size * js[i].b + 64;
        CU(cudaMalloc_((void **)&js[i].send, len));
        CU(cudaMalloc_((void **)&js[i].recv, len));
        job_post(c, s, &js[i], h);
    }
    CU(cudaStreamSynchronize_(s));
    for (int i = 0; i < NJ; i++) {
        job_verify(&js[i], h);
        CU(cudaFree_(js[i].send));
        CU(cudaFree_(js[i].recv));
    }
    /* A datatype that is not contiguous keeps the staged fallback (its debug line says why), on
     * host memory (the fallback stages contiguous device data only). */
    MPI_Datatype vec;
    MPI(MPI_Type_vector(64, 1, 2, MPI_INT, &vec));
    MPI(MPI_Type_commit(&vec));
    int *hv = (int *)h;
    for (int i = 0; i < 128; i++) hv[i] = rank == 0 ? i : -1;
    MPI(MPIX_Bcast_enqueue(hv, 1, vec, 0, c));
    CU(cudaStreamSynchronize_(s));
    for (int i = 0; i < 128; i++)
        if (hv[i] != (i % 2 == 0 || rank == 0 ? i : -1)) {
            EXPECT(0, "bcast_enqueue of a vector type: int %d is %d", i, hv[i]);
            break;
        }
    MPI(MPI_Type_free(&vec));
    free(h);
}

/* A graph capturing copy-in + bcast + allgather + alltoall + reduce_scatter_block (+ an
 * allreduce) + copy-out, replayed 200 times with new inputs every 10 replays, checked then. */
static void graph_colls(MPI_Comm c, stream_t s, size_t b) {
    struct job js[NFORMS];
    size_t len = (size_t)size * b + 64;
    unsigned char *h = malloc(len), *pin[NFORMS], *pout[NFORMS];
    for (int f = 0; f < NFORMS; f++) {
        js[f].form = f, js[f].inplace = f == F_ALLTOALL, js[f].salt = 0, js[f].b = b;
        CU(cudaMalloc_((void **)&js[f].send, len));
        CU(cudaMalloc_((void **)&js[f].recv, len));
        CU(cudaMallocHost_((void **)&pin[f], len));
        CU(cudaMallocHost_((void **)&pout[f], len));
    }
    /* The inputs of salt `salt` into the pinned buffers (job_post's layout, read back from the
     * device after an uncaptured run). */
    graph_t g;
    graph_exec_t ge;
    for (int f = 0; f < NFORMS; f++) job_post(c, s, &js[f], h);
    CU(cudaStreamSynchronize_(s));
    for (int f = 0; f < NFORMS; f++) job_verify(&js[f], h);
    CU(cudaStreamBeginCapture_(s, 0));
    for (int f = 0; f < NFORMS; f++) {
        struct job *j = &js[f];
        unsigned char *in = j->inplace || f == F_BCAST ? j->recv : j->send;
        size_t inlen = job_in(j);
        if (f == F_ALLGATHER) in = j->send;
        CU(cudaMemcpyAsync_(in, pin[f], inlen, H2D, s));
        void *sb = j->inplace ? MPI_IN_PLACE : j->send;
        int m = (int)(b / 4);
        switch (f) {
        case F_BCAST: MPI(MPIX_Bcast_enqueue(j->recv, (int)b, MPI_BYTE, 0, c)); break;
        case F_ALLGATHER: MPI(MPIX_Allgather_enqueue(j->send, (int)b, MPI_BYTE, j->recv, (int)b, MPI_BYTE, c)); break;
        case F_ALLTOALL: MPI(MPIX_Alltoall_enqueue(sb, (int)b, MPI_BYTE, j->recv, (int)b, MPI_BYTE, c)); break;
        case F_RSB: MPI(MPIX_Reduce_scatter_block_enqueue(j->send, j->recv, m, MPI_INT, MPI_SUM, c)); break;
        default: MPI(MPIX_Allreduce_enqueue(j->send, j->recv, m, MPI_INT, MPI_SUM, c)); break;
        }
        CU(cudaMemcpyAsync_(pout[f], j->recv, job_out(j), D2H, s));
    }
    CU(cudaStreamEndCapture_(s, &g));
    CU(cudaGraphInstantiateWithFlags_(&ge, g, 0));
    for (int i = 0; i < 200; i++) {
        if (i % 10 == 0) {
            CU(cudaStreamSynchronize_(s));
            /* Salt i * size (bcast's root, salt % size, stays 0): each form's input as job_post
             * lays it out (allgather not in place). */
            for (int f = 0; f < NFORMS; f++) {
                struct job *j = &js[f];
                j->salt = i * size;
                int red = f == F_RSB || f == F_ALLREDUCE;
                size_t in = job_in(j), m = b / 4;
                for (size_t x = 0; x < (red ? in / 4 : in); x++) {
                    size_t blk = x / (red ? m : b), k = x % (red ? m : b);
                    switch (f) {
                    case F_BCAST: pin[f][x] = rank == 0 ? pat(0, 0, k, j->salt) : 0xEE; break;
                    case F_ALLGATHER: pin[f][x] = pat(rank, 0, k, j->salt); break;
                    case F_ALLTOALL: pin[f][x] = pat(rank, (int)blk, k, j->salt); break;
                    case F_RSB: ((int *)pin[f])[x] = ipat(rank, (int)blk, k, j->salt); break;
                    default: ((int *)pin[f])[x] = ipat(rank, 0, x, j->salt); break;
                    }
                }
            }
        }
        CU(cudaGraphLaunch_(ge, s));
        if (i % 10 == 9) {
            CU(cudaStreamSynchronize_(s));
            for (int f = 0; f < NFORMS; f++) {
                /* The device output, and its copy to pinned memory by the replay. */
                job_verify(&js[f], h);
                EXPECT(memcmp(pout[f], h, job_out(&js[f])) == 0, "graph replay %d: %s copied out differs", i,
                       fname[f]);
            }
        }
    }
    CU(cudaStreamSynchronize_(s));
    CU(cudaGraphExecDestroy_(ge));
    CU(cudaGraphDestroy_(g));
    for (int f = 0; f < NFORMS; f++) {
        CU(cudaFree_(js[f].send));
        CU(cudaFree_(js[f].recv));
        CU(cudaFreeHost_(pin[f]));
        CU(cudaFreeHost_(pout[f]));
    }
    free(h);
}

/* A graph captured as the communicator's very first MPIX_Allreduce_enqueue (the stream
 * kernel's set-up runs during the capture): memset kernel + allreduce + memset kernel on the
 * input, replayed 1000 times; each replay adds the previous result back into the input. */
static void graph_first(stream_t s, int *d, size_t n) {
    MPIX_Stream xs;
    MPI_Comm c = stream_comm(s, &xs);
    int *din = d, *dout = d + n;
    set32(din, 1, n, s);
    CU(cudaStreamSynchronize_(s));
    graph_t g;
    graph_exec_t ge;
    CU(cudaStreamBeginCapture_(s, 0 /* cudaStreamCaptureModeGlobal */));
    set32(dout, -7, n, s);
    MPI(MPIX_Allreduce_enqueue(din, dout, (int)n, MPI_INT, MPI_SUM, c));
    CU(cudaMemcpyAsync_(din, dout, n * sizeof(int), D2D, s));
    CU(cudaStreamEndCapture_(s, &g));
    CU(cudaGraphInstantiateWithFlags_(&ge, g, 0));
    /* x_{k+1} = size * x_k from x_0 = 1: reset to 1 every 8 replays (no overflow). */
    int want = 1;
    for (int i = 0; i < 1000; i++) {
        if (i % 8 == 0) {
            CU(cudaStreamSynchronize_(s));
            set32(din, 1, n, s);
            want = 1;
        }
        CU(cudaGraphLaunch_(ge, s));
        want *= size;
        if (i % 8 == 7 || i == 999) {
            CU(cudaStreamSynchronize_(s));
            check("graph captured as the first call", dout, n, want);
        }
    }
    CU(cudaGraphExecDestroy_(ge));
    CU(cudaGraphDestroy_(g));
    MPI(MPI_Comm_free(&c));
    MPI(MPIX_Stream_free(&xs));
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One call of collective `op` (F_*) on `c` (enqueued) or MPI_COMM_WORLD (blocking) whose
 * ranks' blocks are n ints: a in, b out (allreduce, bcast: n ints; allgather: n in, size * n
 * out; alltoall: size * n each; reduce_scatter_block: size * n in, n out). */
static void one_op(int blocking, int op, MPI_Comm c, int *a, int *b, size_t n) {
    MPI_Comm w = MPI_COMM_WORLD;
    int k = (int)n;
    if (blocking) switch (op) {
        case F_BCAST: MPI(MPI_Bcast(a, k, MPI_INT, 0, w)); break;
        case F_ALLGATHER: MPI(MPI_Allgather(a, k, MPI_INT, b, k, MPI_INT, w)); break;
        case F_ALLTOALL: MPI(MPI_Alltoall(a, k, MPI_INT, b, k, MPI_INT, w)); break;
        case F_RSB: MPI(MPI_Reduce_scatter_block(a, b, k, MPI_INT, MPI_SUM, w)); break;
        default: MPI(MPI_Allreduce(a, b, k, MPI_INT, MPI_SUM, w)); break;
        }
    else switch (op) {
        case F_BCAST: MPI(MPIX_Bcast_enqueue(a, k, MPI_INT, 0, c)); break;
        case F_ALLGATHER: MPI(MPIX_Allgather_enqueue(a, k, MPI_INT, b, k, MPI_INT, c)); break;
        case F_ALLTOALL: MPI(MPIX_Alltoall_enqueue(a, k, MPI_INT, b, k, MPI_INT, c)); break;
        case F_RSB: MPI(MPIX_Reduce_scatter_block_enqueue(a, b, k, MPI_INT, MPI_SUM, c)); break;
        default: MPI(MPIX_Allreduce_enqueue(a, b, k, MPI_INT, MPI_SUM, c)); break;
        }
}

/* Median over 5 rounds of the time per call of `iters` calls of `kind` (0 blocking, 1 enqueued
 * back to back, 2 enqueued from a graph of 10 calls) of `op` at blocks of `n` ints. */
static double time_op(int kind, int op, MPI_Comm c, stream_t s, int *a, int *b, size_t n, int iters) {
    double t[5];
    graph_exec_t ge = NULL;
    graph_t g = NULL;
    if (kind == 2) {
        /* Ten finished calls leave ten staging areas for the ten captured ones (no allocation
         * during the capture). */
        for (int i = 0; i < 10; i++) one_op(0, op, c, a, b, n);
        CU(cudaStreamSynchronize_(s));
        CU(cudaStreamBeginCapture_(s, 0));
        for (int i = 0; i < 10; i++) one_op(0, op, c, a, b, n);
        CU(cudaStreamEndCapture_(s, &g));
        CU(cudaGraphInstantiateWithFlags_(&ge, g, 0));
    }
    for (int r = 0; r < 5; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        if (kind == 2)
            for (int i = 0; i < (iters + 9) / 10; i++) CU(cudaGraphLaunch_(ge, s));
        else
            for (int i = 0; i < iters; i++) one_op(kind == 0, op, c, a, b, n);
        CU(cudaStreamSynchronize_(s));
        t[r] = (MPI_Wtime() - t0) * 1e6 / (kind == 2 ? ((iters + 9) / 10) * 10 : iters);
    }
    if (ge) {
        CU(cudaGraphExecDestroy_(ge));
        CU(cudaGraphDestroy_(g));
    }
    qsort(t, 5, sizeof t[0], cmp_double);
    double med = t[2], worst = 0;
    MPI_Allreduce(&med, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return worst;
}

/* Sizes as nccl-tests and gpumpi-bench count them: per rank for allreduce and bcast, the total
 * over ranks for allgather, alltoall and reduce_scatter_block (a rank's block is 1/size). */
static void bench(MPI_Comm c, stream_t s, int op, size_t max_bytes, size_t min_bytes, size_t factor) {
    size_t maxn = max_bytes / sizeof(int);
    int total = op == F_ALLGATHER || op == F_ALLTOALL || op == F_RSB;
    int *a, *b;
    CU(cudaMalloc_((void **)&a, maxn * sizeof(int) + 64));
    CU(cudaMalloc_((void **)&b, maxn * sizeof(int) + 64));
    CU(cudaMemset_(a, 1, maxn * sizeof(int)));
    if (rank == 0)
        printf("# gpu_stream bench, %d ranks: %s MPI_INT%s, bytes %s, us per call (median of 5, slowest rank)\n"
               "# bytes  blocking  enqueue_back_to_back  enqueue_graph\n",
               size, fname[op], op == F_RSB || op == F_ALLREDUCE ? " sum" : "", total ? "over all ranks" : "per rank");
    if (min_bytes < sizeof(int)) min_bytes = sizeof(int);
    if (factor < 2) factor = 2;
    for (size_t bytes = min_bytes / sizeof(int) * sizeof(int); bytes <= maxn * sizeof(int); bytes *= factor) {
        size_t n = bytes / sizeof(int) / (total ? (size_t)size : 1);
        if (n == 0) continue;
        int iters = bytes <= (1 << 20) ? 200 : bytes <= (64 << 20) ? 20 : 10;
        double t0 = time_op(0, op, c, s, a, b, n, iters);
        double t1 = time_op(1, op, c, s, a, b, n, iters);
        double t2 = time_op(2, op, c, s, a, b, n, iters);
        if (rank == 0) printf("%9zu %9.1f %9.1f %9.1f\n", bytes, t0, t1, t2);
    }
    CU(cudaFree_(a));
    CU(cudaFree_(b));
}

int main(int argc, char **argv) {
    const char *why = load_more();
    if (cudart_mpi_init(&argc, &argv, -1, &rank, &size) < 0) return 0;
    if (cudart_skip_all(why, rank)) {
        MPI_Finalize();
        return 0;
    }
    cudart_pick_device();
    size_t sizes[] = {1, 7, 4096, 1 << 18};
    size_t maxn = (1 << 20) + 3;
    int *sb, *rb, *cb;
    CU(cudaMalloc_((void **)&sb, 4 * maxn * sizeof(int)));
    CU(cudaMalloc_((void **)&rb, 4 * maxn * sizeof(int)));
    CU(cudaMalloc_((void **)&cb, 4 * maxn * sizeof(int)));
    host = malloc(4 * maxn * sizeof(int));
    stream_t a, b;
    CU(cudaStreamCreateWithFlags_(&a, 1 /* cudaStreamNonBlocking */));
    CU(cudaStreamCreateWithFlags_(&b, 1));
    MPIX_Stream xa, xb;
    MPI_Comm ca = stream_comm(a, &xa), cbm = stream_comm(b, &xb);
    if (argc > 1 && strcmp(argv[1], "bench") == 0) {
        int op = F_ALLREDUCE;
        if (argc > 5)
            for (int f = 0; f < NFORMS; f++)
                if (strcmp(argv[5], fname[f]) == 0) op = f;
        bench(ca, a, op, argc > 2 ? (size_t)strtoull(argv[2], NULL, 0) : (size_t)1 << 30,
              argc > 3 ? (size_t)strtoull(argv[3], NULL, 0) : 8, argc > 4 ? (size_t)strtoull(argv[4], NULL, 0) : 8);
        MPI(MPI_Comm_free(&ca));
        MPI(MPI_Comm_free(&cbm));
        MPI_Finalize();
        return 0;
    }
    MPIX_Stream got;
    MPI(MPIX_Comm_get_stream(ca, 0, &got));
    EXPECT(got == xa, "MPIX_Comm_get_stream");
    /* The first MPIX_Allreduce_enqueue on `ca` sets the stream kernel up where it applies: this
     * rank maps every peer's scratch then. */
    int want_kernel = expect_kernel();
    MPI_Count maps0 = peer_mappings();
    set32(sb, rank + 1, 1, a);
    MPI(MPIX_Allreduce_enqueue(sb, rb, 1, MPI_INT, MPI_SUM, ca));
    CU(cudaStreamSynchronize_(a));
    check("first allreduce_enqueue", rb, 1, size * (size + 1) / 2);
    MPI_Count grew = peer_mappings() - maps0;
    if (want_kernel)
        EXPECT(grew == size - 1, "stream kernel expected: the first MPIX_Allreduce_enqueue mapped %lld peer scratch areas, want %d",
               (long long)grew, size - 1);
    if (rank == 0)
        printf("gpu_stream: stream kernel %s (peer mappings +%lld on rank 0)\n",
               want_kernel ? "expected" : "not expected", (long long)grew);
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i] * (size_t)size;
        if (n > (1 << 18)) n = 1 << 18;
        p2p(ca, a, sb, rb, cb, n);
        colls(ca, a, sb, rb, cb, n);
    }
    kernel_checks(ca, a, maxn);
    coll_checks(ca, a, (1 << 20) + 4);
    two_streams(ca, a, cbm, b, cb, 4096);
    graph(ca, a, cb, 4096);
    graph_colls(ca, a, 4100);
    graph_first(b, cb, 4097);
    MPI(MPI_Comm_free(&ca));
    MPI(MPI_Comm_free(&cbm));
    MPI(MPIX_Stream_free(&xa));
    MPI(MPIX_Stream_free(&xb));
    CU(cudaStreamDestroy_(a));
    CU(cudaStreamDestroy_(b));
    int total = 0;
    MPI_Allreduce(&errs, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("%s: gpu_stream %d ranks, %d errors\n", total ? "FAIL" : "PASS", size, total);
    MPI_Finalize();
    return total != 0;
}
