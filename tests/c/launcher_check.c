/* Start-up check for tests/launchers.sh: run under any launcher with the expected job size as
 * argument. Checks rank/size, that all ranks share the node (MPI_Comm_split_type SHARED),
 * a ring exchange and an allreduce, then rank 0 prints
 *   OK launcher_check size=N init_max_ms=T
 * where T is the slowest rank's MPI_Init time. Exits non-zero (after printing FAIL) otherwise. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

#define CHECK(cond, ...)                                                          \
    do {                                                                          \
        if (!(cond)) {                                                            \
            fprintf(stderr, "FAIL launcher_check rank %d: ", rank);               \
            fprintf(stderr, __VA_ARGS__);                                         \
            fprintf(stderr, "\n");                                                \
            MPI_Abort(MPI_COMM_WORLD, 2);                                         \
        }                                                                         \
    } while (0)

int main(int argc, char **argv)
{
    int rank = -1, size = -1, lsize = -1, lrank = -1, want = argc > 1 ? atoi(argv[1]) : -1;
    double t0 = now_ms();
    if (MPI_Init(&argc, &argv) != MPI_SUCCESS) {
        fprintf(stderr, "FAIL launcher_check: MPI_Init\n");
        return 1;
    }
    double t_init = now_ms() - t0, t_max = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(want < 0 || size == want, "size %d, expected %d", size, want);
    CHECK(rank >= 0 && rank < size, "rank %d of %d", rank, size);

    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_size(node, &lsize);
    MPI_Comm_rank(node, &lrank);
    CHECK(lsize == size && lrank == rank, "node comm %d/%d, expected %d/%d", lrank, lsize,
          rank, size);
    MPI_Comm_free(&node);

    /* Ring: everyone sends rank*10+1 to the right and checks what came from the left. */
    int right = (rank + 1) % size, left = (rank + size - 1) % size, out = rank * 10 + 1, in = -1;
    MPI_Sendrecv(&out, 1, MPI_INT, right, 7, &in, 1, MPI_INT, left, 7, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    CHECK(in == left * 10 + 1, "ring got %d from %d", in, left);

    long long v[3] = {rank, 1, (long long)rank * rank}, s[3] = {0, 0, 0};
    MPI_Allreduce(v, s, 3, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    long long n = size;
    CHECK(s[0] == n * (n - 1) / 2 && s[1] == n && s[2] == (n - 1) * n * (2 * n - 1) / 6,
          "allreduce %lld %lld %lld", s[0], s[1], s[2]);

    MPI_Reduce(&t_init, &t_max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("OK launcher_check size=%d init_max_ms=%.1f\n", size, t_max);
    MPI_Finalize();
    return 0;
}
