/* Where a device point-to-point message spends its time, call by call: a ping-pong of `bytes`
 * (default 8) from device buffers between 2 ranks, each MPI_Send and MPI_Recv timed alone, plus
 * cudaMemcpy of the same size device->host and host->device (page-locked, then pageable host
 * memory) for reference. Prints per-rank medians. Run across emulated nodes to see the off-node
 * device path:
 *   mpicc -O2 -I tests/gpu dev_call_cost.c -o dcc -ldl
 *   mpirun -n 2 scripts/emulate-nodes.sh 2 ./dcc [iters] [bytes] [alloc bytes] [1: separate
 *   send and receive buffers] */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "cudart.h"
#include "timing.h"

static double now_us(void) { return now_ns() / 1e3; }

/* Median us of n cudaMemcpy calls of `bytes` (kind 1 host to device, 2 device to host); tc
 * holds n samples. */
static double copy_median(void *dst, const void *src, size_t bytes, int kind, double *tc, int n)
{
    for (int i = 0; i < n; i++) {
        double a = now_us();
        cudaMemcpy_(dst, src, bytes, kind);
        tc[i] = now_us() - a;
    }
    return median_sorted(tc, n);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, n = argc > 1 ? atoi(argv[1]) : 2000;
    size_t bytes = argc > 2 ? (size_t)atol(argv[2]) : 8;
    size_t alloc = argc > 3 ? (size_t)atol(argv[3]) : bytes;
    int two = argc > 4 && atoi(argv[4]);
    if (alloc < bytes) alloc = bytes;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const char *why = cudart_load();
    if (why) {
        printf("SKIP: %s\n", why);
        MPI_Finalize();
        return 0;
    }
    int ndev = 1;
    cudaGetDeviceCount_(&ndev);
    cudaSetDevice_(rank % ndev);
    void *d, *d2, *h;
    cudaMalloc_(&d, alloc);
    d2 = d;
    if (two) cudaMalloc_(&d2, alloc);
    cudaMallocHost_(&h, bytes);
    double *ts = malloc(n * sizeof *ts), *tr = malloc(n * sizeof *tr), *tc = malloc(n * sizeof *tc);
    for (int i = -100; i < n; i++) {
        double a = now_us(), b, c;
        if (rank == 0) {
            MPI_Send(d, (int)bytes, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
            b = now_us();
            MPI_Recv(d2, (int)bytes, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            c = now_us();
            if (i >= 0) { ts[i] = b - a; tr[i] = c - b; }
        } else {
            MPI_Recv(d2, (int)bytes, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            b = now_us();
            MPI_Send(d, (int)bytes, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
            c = now_us();
            if (i >= 0) { tr[i] = b - a; ts[i] = c - b; }
        }
    }
    double ms = median_sorted(ts, n), mr = median_sorted(tr, n);
    double dtoh = copy_median(h, d, bytes, 2, tc, n);
    double htod = copy_median(d, h, bytes, 1, tc, n);
    /* The same copies from and to pageable memory (the driver's bounce buffer). */
    void *hp = malloc(bytes ? bytes : 1);
    double pdtoh = copy_median(hp, d, bytes, 2, tc, n);
    double phtod = copy_median(d, hp, bytes, 1, tc, n);
    free(hp);
    for (int r = 0; r < 2; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        if (r == rank)
            printf("rank %d, %zu B (allocations of %zu B, %s), medians of %d: MPI_Send %.2f us, MPI_Recv %.2f us; "
                   "cudaMemcpy D2H %.2f us, H2D %.2f us (pageable host memory: %.2f, %.2f)\n", rank, bytes, alloc,
                   two ? "two" : "one", n, ms, mr, dtoh, htod, pdtoh, phtod);
        fflush(stdout);
    }
    MPI_Finalize();
    return 0;
}
