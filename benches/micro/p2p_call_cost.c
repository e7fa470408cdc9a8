/* Per-call cost of a blocking 8-byte MPI_Send (eager, into free ring space) and of an MPI_Recv
 * of a message that is already there, 2 ranks: rank 0 sends a batch of 64 while rank 1 sleeps
 * (so nothing polls the ring meanwhile), then rank 1 receives them. Each call is timed alone
 * (CLOCK_MONOTONIC around it); prints the distribution over all calls.
 * Any MPI:  mpicc -O2 p2p_call_cost.c -o p2p_call_cost && mpirun -n 2 ./p2p_call_cost [reps]
 */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include "timing.h"
#include <time.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const int batch = 64;
    int reps = argc > 1 ? atoi(argv[1]) : 1000;
    double *t = malloc(sizeof(double) * (size_t)reps * batch);
    char buf[8] = {0};
    for (int r = 0; r < reps; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 1) {
            struct timespec d = {0, 300000};
            nanosleep(&d, NULL);
        }
        if (rank == 0)
            for (int i = 0; i < batch; i++) {
                double a = now_ns();
                MPI_Send(buf, 8, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
                t[r * batch + i] = now_ns() - a;
            }
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 1)
            for (int i = 0; i < batch; i++) {
                double a = now_ns();
                MPI_Recv(buf, 8, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                t[r * batch + i] = now_ns() - a;
            }
    }
    if (rank < 2) {
        int n = reps * batch;
        qsort(t, (size_t)n, sizeof(double), cmp_double);
        printf("%s ns per call: p10 %.0f p50 %.0f p90 %.0f p99 %.0f\n", rank ? "recv" : "send",
               t[n / 10], t[n / 2], t[n * 9 / 10], t[n * 99 / 100]);
    }
    free(t);
    MPI_Finalize();
    return 0;
}
