/* MPI_Abort from one rank takes the whole job down while the other ranks are blocked in a
 * receive. The harness (testlist) expects exit code 3 (the errorcode) and mpirun's
 * "rank N called MPI_Abort(MPI_COMM_WORLD, 3)" on stderr. */
#include "ctest.h"

int main(int argc, char **argv)
{
    int buf = 0;
    ct_init(&argc, &argv);
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    if (ct_world_rank == ct_world_size - 1) {
        MPI_Abort(MPI_COMM_WORLD, 3);
        fprintf(stderr, "abort_job: MPI_Abort returned\n");
    } else {
        MPI_Recv(&buf, 1, MPI_INT, ct_world_size - 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        fprintf(stderr, "abort_job: rank %d received a message that was never sent\n", ct_world_rank);
    }
    MPI_Finalize();
    return 0;
}
