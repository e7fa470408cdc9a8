/* Persistent collectives reused: Barrier_init, Bcast_init, Reduce_init, Allreduce_init,
 * Allgather_init, Alltoall_init, Scan_init are created once and started 6 times (Start and
 * Startall, several active at once) with new input each time; requests stay allocated until
 * Request_free. */
#include "ctest.h"

#define N 5

int main(int argc, char **argv)
{
    int rank, size, it, i, r;
    MPI_Request rq[7];
    int bc[N], rin[N], rout[N], ain[N], aout[N], *gout, *tin, *tout, scin, scout;

    ct_init(&argc, &argv);
    rank = ct_world_rank;
    size = ct_world_size;
    gout = malloc(sizeof(int) * (size_t)(N * size));
    tin = malloc(sizeof(int) * (size_t)size);
    tout = malloc(sizeof(int) * (size_t)size);
    CHECK(gout && tin && tout, "malloc");

    CHECK_MPI(MPI_Barrier_init(MPI_COMM_WORLD, MPI_INFO_NULL, &rq[0]));
    CHECK_MPI(MPI_Bcast_init(bc, N, MPI_INT, size - 1, MPI_COMM_WORLD, MPI_INFO_NULL, &rq[1]));
    CHECK_MPI(MPI_Reduce_init(rin, rout, N, MPI_INT, MPI_MAX, 0, MPI_COMM_WORLD, MPI_INFO_NULL, &rq[2]));
    CHECK_MPI(MPI_Allreduce_init(ain, aout, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &rq[3]));
    CHECK_MPI(MPI_Allgather_init(ain, N, MPI_INT, gout, N, MPI_INT, MPI_COMM_WORLD, MPI_INFO_NULL, &rq[4]));
    CHECK_MPI(MPI_Alltoall_init(tin, 1, MPI_INT, tout, 1, MPI_INT, MPI_COMM_WORLD, MPI_INFO_NULL, &rq[5]));
    CHECK_MPI(MPI_Scan_init(&scin, &scout, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &rq[6]));

    for (it = 0; it < 6; it++) {
        for (i = 0; i < N; i++) {
            bc[i] = (rank == size - 1) ? it * 100 + i : -1;
            rin[i] = rank * it + i;
            rout[i] = -1;
            ain[i] = rank + it * i;
            aout[i] = -1;
        }
        for (i = 0; i < size; i++) {
            tin[i] = rank * 1000 + i * 10 + it;
            tout[i] = -1;
        }
        scin = rank + it;
        if (it % 2 == 0) {
            CHECK_MPI(MPI_Startall(7, rq));
        } else {
            for (i = 6; i >= 0; i--) /* same order on every rank */
                CHECK_MPI(MPI_Start(&rq[i]));
        }
        CHECK_MPI(MPI_Waitall(7, rq, MPI_STATUSES_IGNORE));
        for (i = 0; i < 7; i++)
            CHECK(rq[i] != MPI_REQUEST_NULL, "persistent request %d freed by completion", i);
        for (i = 0; i < N; i++) {
            CHECK(bc[i] == it * 100 + i, "it %d bcast [%d] = %d", it, i, bc[i]);
            if (rank == 0)
                CHECK(rout[i] == (size - 1) * it + i, "it %d reduce max [%d] = %d", it, i, rout[i]);
            CHECK(aout[i] == size * (size - 1) / 2 + size * it * i, "it %d allreduce [%d] = %d", it, i, aout[i]);
        }
        for (r = 0; r < size; r++)
            for (i = 0; i < N; i++)
                CHECK(gout[r * N + i] == r + it * i, "it %d allgather from %d [%d] = %d", it, r, i, gout[r * N + i]);
        for (r = 0; r < size; r++)
            CHECK(tout[r] == r * 1000 + rank * 10 + it, "it %d alltoall from %d = %d", it, r, tout[r]);
        CHECK(scout == rank * (rank + 1) / 2 + (rank + 1) * it, "it %d scan = %d", it, scout);
    }
    for (i = 0; i < 7; i++) {
        CHECK_MPI(MPI_Request_free(&rq[i]));
        CHECK(rq[i] == MPI_REQUEST_NULL, "Request_free did not null %d", i);
    }
    free(gout);
    free(tin);
    free(tout);
    return ct_finish("coll_persist_reuse");
}
