/* Collective count mismatches (erroneous programs) never hang and report MPI_ERR_TRUNCATE
 * where the receiver can see it, under MPI_ERRORS_RETURN:
 * - MPI_Bcast with count C at the root and C/2 elsewhere: every non-root rank gets
 *   MPI_ERR_TRUNCATE and the first C/2 elements, the root succeeds (or reports
 *   MPI_ERR_TRUNCATE too, when it waited long enough to read the records). C = 10 ints (the
 *   shared-memory flag path on MPI_COMM_WORLD), 2000 ints (a binomial schedule), 100000 ints
 *   (scatter + allgather at 4 ranks, rendezvous messages), on MPI_COMM_WORLD and on a dup (no
 *   flag path), blocking and nonblocking;
 * - MPI_Allreduce of 4 ints where one rank passes 8 (the flag path: every rank sees it).
 * After each, a correct collective proves the library and the job are still usable. */
#include "ctest.h"

static int me, np;

static void check_usable(MPI_Comm c, const char *after) {
    int one = 1, sum = 0;
    CHECK_MPI(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, c));
    CHECK(sum == np, "after %s: allreduce gave %d", after, sum);
}

static void bcast_mismatch(MPI_Comm c, int count, int nonblocking) {
    int mine = me == 0 ? count : count / 2;
    int *buf = malloc((size_t)count * sizeof(int));
    CHECK(buf != NULL, "malloc");
    for (int i = 0; i < count; i++) buf[i] = me == 0 ? i + 1 : -1;
    int rc, cls = -1;
    if (nonblocking) {
        MPI_Request r;
        CHECK_MPI(MPI_Ibcast(buf, mine, MPI_INT, 0, c, &r));
        rc = MPI_Wait(&r, MPI_STATUS_IGNORE);
    } else {
        rc = MPI_Bcast(buf, mine, MPI_INT, 0, c);
    }
    MPI_Error_class(rc, &cls);
    /* Only a rank that receives more than its count sees the mismatch (in a tree a rank below
     * a truncated one gets exactly its count); the flag path tells every rank. */
    int flagpath = c == MPI_COMM_WORLD && count <= 256 && !nonblocking;
    if (me == 0) {
        /* A root that waits (for a rendezvous, or a schedule's later step) finds the
         * disagreement in the records too (engine/collcheck.rs). */
        CHECK(rc == MPI_SUCCESS || cls == MPI_ERR_TRUNCATE, "root of a %d-int %sbcast: class %d",
              count, nonblocking ? "i" : "", cls);
    } else {
        CHECK(rc == MPI_SUCCESS || cls == MPI_ERR_TRUNCATE, "rank %d of a %d-int %sbcast: rc %d class %d",
              me, count, nonblocking ? "i" : "", rc, cls);
        if (flagpath) {
            CHECK(cls == MPI_ERR_TRUNCATE, "rank %d of a %d-int flag bcast: rc %d class %d", me, count, rc, cls);
            for (int i = 0; i < mine; i++)
                CHECK(buf[i] == i + 1, "truncated bcast of %d: [%d] = %d", count, i, buf[i]);
        }
        for (int i = mine; i < count; i++)
            CHECK(buf[i] == -1, "truncated bcast of %d wrote past the count: [%d] = %d", count, i, buf[i]);
    }
    int saw = rc != MPI_SUCCESS, any = 0;
    CHECK_MPI(MPI_Allreduce(&saw, &any, 1, MPI_INT, MPI_MAX, c));
    CHECK(np == 1 || any, "no rank reported the mismatched %d-int %sbcast", count, nonblocking ? "i" : "");
    free(buf);
    check_usable(c, "a mismatched bcast");
}

int main(int argc, char **argv) {
    CHECK_MPI(MPI_Init(&argc, &argv));
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    ct_world_rank = me;
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    MPI_Comm dup;
    CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    CHECK_MPI(MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN));
    int sizes[] = {10, 2000, 100000};
    for (int s = 0; s < 3; s++) {
        bcast_mismatch(MPI_COMM_WORLD, sizes[s], 0);
        bcast_mismatch(dup, sizes[s], 0);
        bcast_mismatch(dup, sizes[s], 1);
    }
    if (np > 1) {
        /* Allreduce of 4 ints where the last rank passes 8: the flag slots tell every rank. */
        int in[8] = {1, 1, 1, 1, 1, 1, 1, 1}, out[8];
        int count = me == np - 1 ? 8 : 4, cls = -1;
        int rc = MPI_Allreduce(in, out, count, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Error_class(rc, &cls);
        CHECK(cls == MPI_ERR_TRUNCATE, "mismatched allreduce: rc %d class %d", rc, cls);
        check_usable(MPI_COMM_WORLD, "a mismatched allreduce");
    }
    CHECK_MPI(MPI_Comm_free(&dup));
    MPI_Barrier(MPI_COMM_WORLD);
    if (me == 0) printf("OK coll_mismatch\n");
    MPI_Finalize();
    return 0;
}
