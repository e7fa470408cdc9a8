/* Intercommunicators between the even and the odd ranks: Intercomm_create, Comm_test_inter,
 * Comm_remote_size/remote_group, point-to-point across, Bcast with MPI_ROOT/MPI_PROC_NULL,
 * Allreduce (gets the remote group's result), Barrier, Intercomm_merge (low group first), dup.
 * With one rank there is no remote group: the program checks nothing and passes. */
#include "ctest.h"

int main(int argc, char **argv)
{
    int rank, size, color, lrank, lsize, rsize, flag, i;
    MPI_Comm local, inter, merged, idup;
    MPI_Status st;

    ct_init(&argc, &argv);
    rank = ct_world_rank;
    size = ct_world_size;
    if (size < 2)
        return ct_finish("comm_inter");

    color = rank % 2;
    CHECK_MPI(MPI_Comm_split(MPI_COMM_WORLD, color, rank, &local));
    CHECK_MPI(MPI_Comm_rank(local, &lrank));
    CHECK_MPI(MPI_Comm_size(local, &lsize));
    /* local leader 0; remote leader in world: rank 1 for the evens, rank 0 for the odds */
    CHECK_MPI(MPI_Intercomm_create(local, 0, MPI_COMM_WORLD, color == 0 ? 1 : 0, 99, &inter));
    CHECK_MPI(MPI_Comm_test_inter(inter, &flag));
    CHECK(flag == 1, "test_inter(intercomm) = %d", flag);
    CHECK_MPI(MPI_Comm_remote_size(inter, &rsize));
    CHECK(rsize == (color == 0 ? size / 2 : (size + 1) / 2), "remote size %d", rsize);
    {
        int r, s;
        CHECK_MPI(MPI_Comm_rank(inter, &r));
        CHECK_MPI(MPI_Comm_size(inter, &s));
        CHECK(r == lrank && s == lsize, "intercomm rank %d size %d (local %d %d)", r, s, lrank, lsize);
    }
    {
        MPI_Group rg;
        int n, zero = 0, w0;
        MPI_Group wg;
        CHECK_MPI(MPI_Comm_remote_group(inter, &rg));
        CHECK_MPI(MPI_Group_size(rg, &n));
        CHECK(n == rsize, "remote group size %d", n);
        CHECK_MPI(MPI_Comm_group(MPI_COMM_WORLD, &wg));
        CHECK_MPI(MPI_Group_translate_ranks(rg, 1, &zero, wg, &w0));
        CHECK(w0 == 1 - color, "remote rank 0 is world %d", w0);
        CHECK_MPI(MPI_Group_free(&rg));
        CHECK_MPI(MPI_Group_free(&wg));
    }

    /* point-to-point across: local rank i talks to remote rank i (where both exist) */
    if (lrank < rsize) {
        int v = rank, w = -1;
        CHECK_MPI(MPI_Sendrecv(&v, 1, MPI_INT, lrank, 5, &w, 1, MPI_INT, lrank, 5, inter, &st));
        CHECK(w == 2 * lrank + (1 - color), "intercomm message from %d, want world %d", w, 2 * lrank + (1 - color));
        CHECK(st.MPI_SOURCE == lrank, "intercomm status source %d (remote rank)", st.MPI_SOURCE);
    }

    /* Bcast from even local rank 0 to all odds */
    {
        int v[3] = {-1, -1, -1};
        if (color == 0) {
            if (lrank == 0) {
                v[0] = 7;
                v[1] = 8;
                v[2] = 9;
            }
            CHECK_MPI(MPI_Bcast(v, 3, MPI_INT, lrank == 0 ? MPI_ROOT : MPI_PROC_NULL, inter));
            if (lrank != 0)
                CHECK(v[0] == -1, "non-root in the root group received data");
        } else {
            CHECK_MPI(MPI_Bcast(v, 3, MPI_INT, 0, inter));
            CHECK(v[0] == 7 && v[1] == 8 && v[2] == 9, "intercomm bcast got %d %d %d", v[0], v[1], v[2]);
        }
    }

    /* Allreduce: each group receives the reduction over the other group */
    {
        int v = rank, sum = -1, want = 0;
        CHECK_MPI(MPI_Allreduce(&v, &sum, 1, MPI_INT, MPI_SUM, inter));
        for (i = 0; i < size; i++)
            if (i % 2 != color)
                want += i;
        CHECK(sum == want, "intercomm allreduce %d want %d", sum, want);
    }
    CHECK_MPI(MPI_Barrier(inter));

    /* dup keeps it an intercommunicator */
    CHECK_MPI(MPI_Comm_dup(inter, &idup));
    CHECK_MPI(MPI_Comm_test_inter(idup, &flag));
    CHECK(flag == 1, "dup of intercomm is not inter");
    CHECK_MPI(MPI_Comm_free(&idup));

    /* merge: the odds pass high=1, so the evens come first */
    CHECK_MPI(MPI_Intercomm_merge(inter, color, &merged));
    {
        int r, s, v = rank, *all;
        CHECK_MPI(MPI_Comm_size(merged, &s));
        CHECK_MPI(MPI_Comm_rank(merged, &r));
        CHECK(s == size, "merged size %d", s);
        CHECK(r == (color == 0 ? lrank : (size + 1) / 2 + lrank), "merged rank %d", r);
        CHECK_MPI(MPI_Comm_test_inter(merged, &flag));
        CHECK(flag == 0, "merged comm is inter");
        all = malloc(sizeof(int) * (size_t)size);
        CHECK(all, "malloc");
        CHECK_MPI(MPI_Allgather(&v, 1, MPI_INT, all, 1, MPI_INT, merged));
        for (i = 0; i < size; i++) {
            int want = (i < (size + 1) / 2) ? 2 * i : 2 * (i - (size + 1) / 2) + 1;
            CHECK(all[i] == want, "merged order [%d] = world %d want %d", i, all[i], want);
        }
        free(all);
    }
    CHECK_MPI(MPI_Comm_free(&merged));
    CHECK_MPI(MPI_Comm_free(&inter));
    CHECK_MPI(MPI_Comm_free(&local));
    return ct_finish("comm_inter");
}
