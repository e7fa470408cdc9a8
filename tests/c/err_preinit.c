/* A call before MPI_Init (other than the few allowed ones) is an error: the library must abort
 * with a message naming the function. The harness expects a non-zero exit and "MPI_Comm_rank" on
 * stderr. If the call returns, this program exits 0, which the harness reports as a failure. */
#include <mpi.h>
#include <stdio.h>

int main(void)
{
    int flag = -1, rank = -1, rc;
    /* these are allowed before init */
    MPI_Initialized(&flag);
    if (flag != 0) {
        fprintf(stderr, "FAIL Initialized before init = %d\n", flag);
        return 0;
    }
    rc = MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    fprintf(stderr, "err_preinit: MPI_Comm_rank before MPI_Init returned %d (rank %d) instead of aborting\n", rc,
            rank);
    return 0;
}
