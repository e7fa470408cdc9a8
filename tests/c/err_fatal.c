/* Under the default handler (MPI_ERRORS_ARE_FATAL) a bad call aborts the whole job. The harness
 * expects a non-zero exit and "MPI_Send" and "MPI_ERR_RANK" on stderr. If the call returns, this
 * program exits 0, which the harness reports as a failure. */
#include "ctest.h"

int main(int argc, char **argv)
{
    int buf = 1, rc;
    ct_init(&argc, &argv);
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    if (ct_world_rank == 0) {
        rc = MPI_Send(&buf, 1, MPI_INT, ct_world_size + 5, 0, MPI_COMM_WORLD);
        fprintf(stderr, "err_fatal: MPI_Send to a bad rank returned %d instead of aborting\n", rc);
        /* fall through: exit 0 makes the expected failure fail */
    } else {
        /* wait for a message that never comes: the abort must take this rank down too */
        MPI_Recv(&buf, 1, MPI_INT, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    MPI_Finalize();
    return 0;
}
