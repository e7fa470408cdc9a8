/* A call after MPI_Finalize is an error: the library must abort with a message naming the
 * function. The harness expects a non-zero exit and "MPI_Send" on stderr. If the call returns,
 * this program exits 0, which the harness reports as a failure. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    int flag = -1, buf = 0, rc;
    MPI_Init(&argc, &argv);
    MPI_Finalize();
    MPI_Finalized(&flag); /* allowed after finalize */
    if (flag != 1) {
        fprintf(stderr, "FAIL Finalized after finalize = %d\n", flag);
        return 0;
    }
    rc = MPI_Send(&buf, 1, MPI_INT, 0, 0, MPI_COMM_SELF);
    fprintf(stderr, "err_postfinalize: MPI_Send after MPI_Finalize returned %d instead of aborting\n", rc);
    return 0;
}
