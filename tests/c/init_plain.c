/* MPI_Init with NULL arguments, rank/size sanity, MPI_COMM_SELF, singleton. */
#include "ctest.h"

int main(int argc, char **argv)
{
    int rank = -1, size = -1, srank = -1, ssize = -1, sum = 0, lvl = -1;
    (void)argc;
    (void)argv;
    CHECK_MPI(MPI_Init(NULL, NULL));
    ct_setup();
    CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &size));
    CHECK(size >= 1 && rank >= 0 && rank < size, "rank %d size %d", rank, size);
    CHECK_MPI(MPI_Comm_rank(MPI_COMM_SELF, &srank));
    CHECK_MPI(MPI_Comm_size(MPI_COMM_SELF, &ssize));
    CHECK(srank == 0 && ssize == 1, "COMM_SELF rank %d size %d", srank, ssize);
    CHECK_MPI(MPI_Query_thread(&lvl));
    CHECK(lvl >= MPI_THREAD_SINGLE && lvl <= MPI_THREAD_MULTIPLE, "Query_thread %d", lvl);
    CHECK_MPI(MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    CHECK(sum == size * (size - 1) / 2, "sum of ranks %d", sum);
    return ct_finish("init_plain");
}
