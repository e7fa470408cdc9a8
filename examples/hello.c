/* gpumpi example: ring exchange, allreduce, broadcast of 4 MiB and a split communicator.
 * Build and run: scripts/example.sh (or: build/install/bin/mpicc examples/hello.c -o hello &&
 * build/install/bin/mpirun -n 4 ./hello). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    int rank, size, provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int token = rank * 10, got = -1;
    MPI_Status st;
    MPI_Sendrecv(&token, 1, MPI_INT, (rank + 1) % size, 7, &got, 1, MPI_INT, (rank + size - 1) % size, 7, MPI_COMM_WORLD, &st);
    if (got != ((rank + size - 1) % size) * 10) { printf("rank %d bad sendrecv %d\n", rank, got); MPI_Abort(MPI_COMM_WORLD, 2); }
    double x = rank + 1, sum = 0;
    MPI_Allreduce(&x, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    if (sum != size * (size + 1) / 2.0) { printf("rank %d bad allreduce %f\n", rank, sum); MPI_Abort(MPI_COMM_WORLD, 3); }
    int n = 1 << 20; int *big = malloc(n * sizeof(int));
    if (rank == 0) for (int i = 0; i < n; i++) big[i] = i;
    MPI_Bcast(big, n, MPI_INT, 0, MPI_COMM_WORLD);
    for (int i = 0; i < n; i++) if (big[i] != i) { printf("rank %d bad bcast at %d\n", rank, i); MPI_Abort(MPI_COMM_WORLD, 4); }
    MPI_Comm sub; MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &sub);
    int sr, ss; MPI_Comm_rank(sub, &sr); MPI_Comm_size(sub, &ss);
    int one = 1, cnt = 0; MPI_Allreduce(&one, &cnt, 1, MPI_INT, MPI_SUM, sub);
    if (cnt != ss) { printf("bad sub allreduce\n"); MPI_Abort(MPI_COMM_WORLD, 5); }
    MPI_Comm_free(&sub);
    printf("rank %d/%d ok (sub %d/%d) provided=%d\n", rank, size, sr, ss, provided);
    MPI_Finalize();
    return 0;
}
