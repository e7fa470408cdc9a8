/* Measurements of the staged device path (not a test): MPI_Init time, first device
 * send/recv after init, ping-pong bandwidth and allreduce time with device vs host buffers.
 * Prints SKIP without a CUDA device. */
#include <mpi.h>
#include "cudart.h"
#include <time.h>

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static int rank, size;

static double pingpong(void *buf, size_t bytes, int iters) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; i++) {
        if (rank == 0) {
            MPI_Send(buf, (int)bytes, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
            MPI_Recv(buf, (int)bytes, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else if (rank == 1) {
            MPI_Recv(buf, (int)bytes, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, (int)bytes, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
        }
    }
    return (MPI_Wtime() - t0) / (2.0 * iters); /* one way */
}

static double allreduce_time(void *s, void *r, size_t n, int iters) {
    MPI_Allreduce(s, r, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; i++) MPI_Allreduce(s, r, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double t = (MPI_Wtime() - t0) / iters, tmax;
    MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return tmax;
}

int main(int argc, char **argv) {
    const char *why = cudart_load();
    if (!why) {
        cudart_pick_device();
        void *warm; /* the application's own CUDA start-up, before MPI_Init, as usual */
        CU(cudaMalloc_(&warm, 1));
        CU(cudaFree_(warm));
    }
    double t0 = now();
    MPI_Init(&argc, &argv);
    double tinit = now() - t0, tmax;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Allreduce(&tinit, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (why) {
        if (rank == 0) printf("SKIP: no CUDA device (%s)\n", why);
        MPI_Finalize();
        return 0;
    }
    if (rank == 0) printf("bench: %d ranks; MPI_Init max over ranks %.1f ms\n", size, tmax * 1e3);
    size_t maxb = 64u << 20;
    void *d, *h;
    CU(cudaMalloc_(&d, maxb));
    CU(cudaMemset_(d, 0, maxb));
    CU(cudaDeviceSynchronize_());
    h = calloc(1, maxb);
    if (size >= 2) {
        /* First device send/recv after init (driver load + context + stream + classification). */
        MPI_Barrier(MPI_COMM_WORLD);
        double first = pingpong(d, 4, 1) * 2;
        double steady = pingpong(d, 4, 200) * 2;
        if (rank == 0) printf("first device 4-byte round trip after init: %.1f us; steady: %.1f us\n", first * 1e6, steady * 1e6);
        double hst = pingpong(h, 4, 200) * 2;
        if (rank == 0) printf("host 4-byte round trip: %.1f us\n", hst * 1e6);
        size_t sizes[] = {1024, 65536, 1u << 20, 16u << 20, 64u << 20};
        for (int i = 0; i < 5; i++) {
            int it = sizes[i] >= (16u << 20) ? 5 : 50;
            double td = pingpong(d, sizes[i], it), th = pingpong(h, sizes[i], it);
            if (rank == 0)
                printf("pingpong %9zu B: device %8.1f us %7.2f GB/s | host %8.1f us %7.2f GB/s\n", sizes[i],
                       td * 1e6, sizes[i] / td / 1e9, th * 1e6, sizes[i] / th / 1e9);
        }
    }
    void *d2, *h2 = calloc(1, maxb);
    CU(cudaMalloc_(&d2, maxb));
    size_t ns[] = {256, 262144, 16u << 20}; /* floats: 1 KiB, 1 MiB, 64 MiB */
    for (int i = 0; i < 3; i++) {
        int it = ns[i] >= (16u << 20) ? 3 : 20;
        double td = allreduce_time(d, d2, ns[i], it), th = allreduce_time(h, h2, ns[i], it);
        double by = ns[i] * 4.0;
        if (rank == 0)
            printf("allreduce %9.0f B x %d ranks: device %9.1f us (busbw %6.2f GB/s) | host %9.1f us (busbw %6.2f GB/s)\n",
                   by, size, td * 1e6, by * 2 * (size - 1) / size / td / 1e9, th * 1e6, by * 2 * (size - 1) / size / th / 1e9);
    }
    MPI_Finalize();
    return 0;
}
