/* Variables that must be the same on every rank (docs/ENV.md) are compared at MPI_Init. Each rank
 * sets GPUMPI_SHM_COLL_MAX before MPI_Init from its rank (GPUMPI_RANK, set by mpirun): 512 on rank
 * 1, 256 elsewhere, so MPI_Init must fail on every rank, promptly, with one message naming the
 * variable, the values and the ranks (tests/c/testlist checks the exit and the message). With the
 * argument `same` every rank sets 256: MPI_Init succeeds and a collective works. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    const char *r = getenv("GPUMPI_RANK");
    int rank = r ? atoi(r) : 0, same = argc > 1 && strcmp(argv[1], "same") == 0;
    int one = 1, sum = 0, size;
    setenv("GPUMPI_SHM_COLL_MAX", rank == 1 && !same ? "512" : "256", 1);
    MPI_Init(&argc, &argv);
    if (!same) {
        fprintf(stderr, "init_mismatch: MPI_Init returned on rank %d despite differing values\n", rank);
        MPI_Finalize();
        return 0;
    }
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (sum != size) {
        printf("FAIL init_mismatch: allreduce gave %d, want %d\n", sum, size);
        return 1;
    }
    if (rank == 0)
        printf("OK init_mismatch\n");
    MPI_Finalize();
    return 0;
}
