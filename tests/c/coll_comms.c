/* Collectives on communicators other than COMM_WORLD, and overlapping nonblocking collectives:
 * a split with reversed keys (rank mapping), halves with different roots, COMM_SELF, several
 * outstanding I-collectives on one communicator completed in reverse order, and interleaved
 * I-collectives on two overlapping communicators. */
#include "ctest.h"

int main(int argc, char **argv)
{
    int rank, size, i, r, s, *all;
    MPI_Comm rev, half, dup;

    ct_init(&argc, &argv);
    rank = ct_world_rank;
    size = ct_world_size;
    all = malloc(sizeof(int) * (size_t)size * 4);
    CHECK(all, "malloc");

    /* reversed communicator: new rank = size-1-rank */
    CHECK_MPI(MPI_Comm_split(MPI_COMM_WORLD, 0, size - rank, &rev));
    CHECK_MPI(MPI_Comm_rank(rev, &r));
    CHECK(r == size - 1 - rank, "reversed rank %d", r);
    {
        int v = rank, root, x;
        for (root = 0; root < size; root++) {
            x = (r == root) ? 1000 + rank : -1;
            CHECK_MPI(MPI_Bcast(&x, 1, MPI_INT, root, rev));
            CHECK(x == 1000 + (size - 1 - root), "rev bcast root %d got %d", root, x);
        }
        CHECK_MPI(MPI_Allgather(&v, 1, MPI_INT, all, 1, MPI_INT, rev));
        for (i = 0; i < size; i++)
            CHECK(all[i] == size - 1 - i, "rev allgather [%d] = world %d", i, all[i]);
        /* Scan in the reversed order: sum of world ranks >= mine */
        CHECK_MPI(MPI_Scan(&v, &x, 1, MPI_INT, MPI_SUM, rev));
        {
            int want = 0;
            for (i = rank; i < size; i++)
                want += i;
            CHECK(x == want, "rev scan %d want %d", x, want);
        }
        /* Alltoall: send my world rank * 100 + destination comm rank */
        for (i = 0; i < size; i++)
            all[i] = rank * 100 + i;
        CHECK_MPI(MPI_Alltoall(all, 1, MPI_INT, all + size, 1, MPI_INT, rev));
        for (i = 0; i < size; i++)
            CHECK(all[size + i] == (size - 1 - i) * 100 + r, "rev alltoall from %d = %d", i, all[size + i]);
        /* Gather at comm rank 0 (= world size-1) */
        CHECK_MPI(MPI_Gather(&v, 1, MPI_INT, all, 1, MPI_INT, 0, rev));
        if (r == 0)
            for (i = 0; i < size; i++)
                CHECK(all[i] == size - 1 - i, "rev gather [%d] = %d", i, all[i]);
    }

    /* halves: lower and upper half run different collectives at the same time */
    CHECK_MPI(MPI_Comm_split(MPI_COMM_WORLD, rank < size / 2, rank, &half));
    CHECK_MPI(MPI_Comm_size(half, &s));
    CHECK_MPI(MPI_Comm_rank(half, &r));
    if (rank < size / 2) {
        int sum = -1, v = rank;
        CHECK_MPI(MPI_Allreduce(&v, &sum, 1, MPI_INT, MPI_SUM, half));
        CHECK(sum == s * (s - 1) / 2, "lower half allreduce %d", sum);
    } else {
        int x = (r == s - 1) ? 4242 : 0;
        CHECK_MPI(MPI_Bcast(&x, 1, MPI_INT, s - 1, half));
        CHECK(x == 4242, "upper half bcast %d", x);
    }

    /* COMM_SELF collectives */
    {
        int v = rank + 1, w = 0, g[2];
        CHECK_MPI(MPI_Allreduce(&v, &w, 1, MPI_INT, MPI_PROD, MPI_COMM_SELF));
        CHECK(w == rank + 1, "self allreduce %d", w);
        CHECK_MPI(MPI_Allgather(&v, 1, MPI_INT, g, 1, MPI_INT, MPI_COMM_SELF));
        CHECK(g[0] == rank + 1, "self allgather %d", g[0]);
        CHECK_MPI(MPI_Barrier(MPI_COMM_SELF));
    }

    /* several outstanding nonblocking collectives on one communicator, waited in reverse */
    {
        MPI_Request rq[4];
        int v = rank, sum = -1, mx = -1, bc = (rank == 0) ? 77 : -1;
        int *ag = all;
        CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
        CHECK_MPI(MPI_Iallreduce(&v, &sum, 1, MPI_INT, MPI_SUM, dup, &rq[0]));
        CHECK_MPI(MPI_Iallreduce(&v, &mx, 1, MPI_INT, MPI_MAX, dup, &rq[1]));
        CHECK_MPI(MPI_Ibcast(&bc, 1, MPI_INT, 0, dup, &rq[2]));
        CHECK_MPI(MPI_Iallgather(&v, 1, MPI_INT, ag, 1, MPI_INT, dup, &rq[3]));
        for (i = 3; i >= 0; i--)
            CHECK_MPI(MPI_Wait(&rq[i], MPI_STATUS_IGNORE));
        CHECK(sum == size * (size - 1) / 2 && mx == size - 1 && bc == 77, "outstanding: sum %d max %d bcast %d", sum,
              mx, bc);
        for (i = 0; i < size; i++)
            CHECK(ag[i] == i, "outstanding allgather [%d] = %d", i, ag[i]);
    }

    /* interleaved nonblocking collectives on two overlapping communicators (dup and rev), with
     * the two started in opposite orders on even and odd ranks */
    {
        MPI_Request rq[2];
        int v = rank, a = -1, b = -1;
        if (rank % 2 == 0) {
            CHECK_MPI(MPI_Iallreduce(&v, &a, 1, MPI_INT, MPI_SUM, dup, &rq[0]));
            CHECK_MPI(MPI_Iallreduce(&v, &b, 1, MPI_INT, MPI_MIN, rev, &rq[1]));
        } else {
            CHECK_MPI(MPI_Iallreduce(&v, &b, 1, MPI_INT, MPI_MIN, rev, &rq[1]));
            CHECK_MPI(MPI_Iallreduce(&v, &a, 1, MPI_INT, MPI_SUM, dup, &rq[0]));
        }
        CHECK_MPI(MPI_Waitall(2, rq, MPI_STATUSES_IGNORE));
        CHECK(a == size * (size - 1) / 2 && b == 0, "interleaved: sum %d min %d", a, b);
    }
    /* blocking collective on one comm while a nonblocking one is pending on another */
    {
        MPI_Request rq;
        int v = 1, a = -1, x = (rank == 0) ? 5 : 0;
        CHECK_MPI(MPI_Iallreduce(&v, &a, 1, MPI_INT, MPI_SUM, rev, &rq));
        CHECK_MPI(MPI_Bcast(&x, 1, MPI_INT, 0, dup));
        CHECK_MPI(MPI_Wait(&rq, MPI_STATUS_IGNORE));
        CHECK(a == size && x == 5, "pending + blocking: %d %d", a, x);
    }

    CHECK_MPI(MPI_Comm_free(&dup));
    CHECK_MPI(MPI_Comm_free(&half));
    CHECK_MPI(MPI_Comm_free(&rev));
    free(all);
    return ct_finish("coll_comms");
}
