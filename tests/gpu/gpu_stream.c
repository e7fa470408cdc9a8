/* Stream-ordered MPI (MPICH's MPIX streams, mpi-ext.h) on device buffers: every enqueue form
 * with its data checked, ordered with the caller's own stream work before and after it (a
 * memset writes the input right before the call and overwrites it right after; a copy reads the
 * result right after), two streams and stream communicators at once (enqueued in opposite
 * orders on neighbouring ranks), enqueued work beside blocking calls, and a CUDA graph that
 * captures copy-in + MPIX_Allreduce_enqueue + copy-out, replayed 1000 times with the result
 * checked every 10th replay.
 * `gpu_stream bench`: instead of the checks, times allreduce (MPI_INT, sum) from 8 B to 64 MiB:
 * blocking MPI_Allreduce on device buffers, MPIX_Allreduce_enqueue back-to-back on one stream,
 * and the enqueue form replayed from a captured graph of 10 calls; median of 5 rounds, us per
 * call (a benchmark for benches/NOTES.md, not a test: it prints numbers and checks nothing).
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
    MORE(rt, cudaGraphDestroy) MORE(drv, cuMemsetD32Async)
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

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median over 5 rounds of the time per call of `iters` calls of `kind` at `n` ints. */
static double time_allreduce(int kind, MPI_Comm c, stream_t s, int *a, int *b, size_t n, int iters) {
    double t[5];
    graph_exec_t ge = NULL;
    graph_t g = NULL;
    if (kind == 2) {
        /* Ten finished calls leave ten staging areas for the ten captured ones (no allocation
         * during the capture). */
        for (int i = 0; i < 10; i++) MPI(MPIX_Allreduce_enqueue(a, b, (int)n, MPI_INT, MPI_SUM, c));
        CU(cudaStreamSynchronize_(s));
        CU(cudaStreamBeginCapture_(s, 0));
        for (int i = 0; i < 10; i++) MPI(MPIX_Allreduce_enqueue(a, b, (int)n, MPI_INT, MPI_SUM, c));
        CU(cudaStreamEndCapture_(s, &g));
        CU(cudaGraphInstantiateWithFlags_(&ge, g, 0));
    }
    for (int r = 0; r < 5; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        if (kind == 0)
            for (int i = 0; i < iters; i++) MPI(MPI_Allreduce(a, b, (int)n, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
        else if (kind == 1)
            for (int i = 0; i < iters; i++) MPI(MPIX_Allreduce_enqueue(a, b, (int)n, MPI_INT, MPI_SUM, c));
        else
            for (int i = 0; i < iters / 10; i++) CU(cudaGraphLaunch_(ge, s));
        CU(cudaStreamSynchronize_(s));
        t[r] = (MPI_Wtime() - t0) * 1e6 / (kind == 2 ? (iters / 10) * 10 : iters);
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

static void bench(MPI_Comm c, stream_t s) {
    size_t maxn = (64u << 20) / sizeof(int);
    int *a, *b;
    CU(cudaMalloc_((void **)&a, maxn * sizeof(int)));
    CU(cudaMalloc_((void **)&b, maxn * sizeof(int)));
    CU(cudaMemset_(a, 1, maxn * sizeof(int)));
    if (rank == 0)
        printf("# gpu_stream bench, %d ranks: allreduce MPI_INT sum, us per call (median of 5, slowest rank)\n"
               "# bytes  blocking  enqueue_back_to_back  enqueue_graph\n", size);
    for (size_t bytes = 8; bytes <= maxn * sizeof(int); bytes *= 8) {
        size_t n = bytes / sizeof(int);
        int iters = bytes <= (1 << 20) ? 200 : 20;
        double t0 = time_allreduce(0, c, s, a, b, n, iters);
        double t1 = time_allreduce(1, c, s, a, b, n, iters);
        double t2 = time_allreduce(2, c, s, a, b, n, iters);
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
    size_t maxn = 1 << 18;
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
        bench(ca, a);
        MPI(MPI_Comm_free(&ca));
        MPI(MPI_Comm_free(&cbm));
        MPI_Finalize();
        return 0;
    }
    MPIX_Stream got;
    MPI(MPIX_Comm_get_stream(ca, 0, &got));
    EXPECT(got == xa, "MPIX_Comm_get_stream");
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i] * (size_t)size;
        if (n > maxn) n = maxn;
        p2p(ca, a, sb, rb, cb, n);
        colls(ca, a, sb, rb, cb, n);
    }
    two_streams(ca, a, cbm, b, cb, 4096);
    graph(ca, a, cb, 4096);
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
