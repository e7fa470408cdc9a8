/* 8-byte ping-pong between 2 ranks through the blocking and the nonblocking calls, on
 * MPI_COMM_WORLD or a duplicate of it: the one-way time (round trip / 2) of each round's
 * iterations, and the median over rounds.
 *   blocking  MPI_Send, MPI_Recv
 *   irecv     the receive posted first (MPI_Irecv), then MPI_Send, MPI_Wait (a halo exchange's
 *             pattern)
 *   isend     MPI_Irecv, MPI_Isend, MPI_Wait on each (the sender waits for its send first)
 * Any MPI:  mpicc -O2 p2p_pingpong_nb.c -o p2p_pingpong_nb
 *           mpirun -n 2 ./p2p_pingpong_nb MODE [world|dup] [iters] [rounds]
 */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include "timing.h"
#include <string.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const char *mode = argc > 1 ? argv[1] : "blocking";
    int dup = argc > 2 && !strcmp(argv[2], "dup");
    int iters = argc > 3 ? atoi(argv[3]) : 20000, rounds = argc > 4 ? atoi(argv[4]) : 5;
    int m = !strcmp(mode, "irecv") ? 1 : !strcmp(mode, "isend") ? 2 : 0;
    MPI_Comm c = MPI_COMM_WORLD;
    if (dup)
        MPI_Comm_dup(MPI_COMM_WORLD, &c);
    char s[8] = {1}, r[8];
    int peer = 1 - rank;
    double *t = malloc(sizeof(double) * (size_t)rounds);
    for (int k = 0; k < rounds; k++) {
        MPI_Barrier(c);
        double a = MPI_Wtime();
        for (int i = 0; i < iters + iters / 10; i++) {
            if (i == iters / 10) { /* the first tenth warms up */
                MPI_Barrier(c);
                a = MPI_Wtime();
            }
            MPI_Request rq, sq;
            if (rank > 1)
                continue;
            if (m == 0) {
                if (rank == 0) {
                    MPI_Send(s, 8, MPI_BYTE, peer, 1, c);
                    MPI_Recv(r, 8, MPI_BYTE, peer, 1, c, MPI_STATUS_IGNORE);
                } else {
                    MPI_Recv(r, 8, MPI_BYTE, peer, 1, c, MPI_STATUS_IGNORE);
                    MPI_Send(s, 8, MPI_BYTE, peer, 1, c);
                }
                continue;
            }
            MPI_Irecv(r, 8, MPI_BYTE, peer, 1, c, &rq);
            if (rank == 0) {
                if (m == 1) {
                    MPI_Send(s, 8, MPI_BYTE, peer, 1, c);
                } else {
                    MPI_Isend(s, 8, MPI_BYTE, peer, 1, c, &sq);
                    MPI_Wait(&sq, MPI_STATUS_IGNORE);
                }
                MPI_Wait(&rq, MPI_STATUS_IGNORE);
            } else {
                MPI_Wait(&rq, MPI_STATUS_IGNORE);
                if (m == 1) {
                    MPI_Send(s, 8, MPI_BYTE, peer, 1, c);
                } else {
                    MPI_Isend(s, 8, MPI_BYTE, peer, 1, c, &sq);
                    MPI_Wait(&sq, MPI_STATUS_IGNORE);
                }
            }
        }
        t[k] = (MPI_Wtime() - a) / iters / 2 * 1e6;
    }
    if (rank == 0) {
        printf("%s %s one-way us: rounds", mode, dup ? "dup" : "world");
        for (int k = 0; k < rounds; k++)
            printf(" %.3f", t[k]);
        qsort(t, (size_t)rounds, sizeof(double), cmp_double);
        printf(" median %.3f\n", t[rounds / 2]);
    }
    if (dup)
        MPI_Comm_free(&c);
    free(t);
    MPI_Finalize();
    return 0;
}
