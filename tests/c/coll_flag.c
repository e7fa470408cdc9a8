/* The small blocking collectives of MPI_COMM_WORLD (gpumpi: the flag-slot path, up to
 * GPUMPI_SHM_COLL_MAX bytes; larger ones and other communicators take the schedule path):
 * - many back-to-back barrier/bcast/reduce/allreduce calls with sizes around the 1 KiB
 *   threshold, varying roots, ops and types (incl. MINLOC pairs), in place and not;
 * - ranks describing the same data with different datatypes (a predefined type on even ranks,
 *   contiguous/vector derived types on odd ranks), so some ranks take the quick path and others
 *   the full one: they must agree;
 * - a barrier really waits for the slowest rank;
 * - progress while waiting: a nonblocking allreduce started before the blocking calls, and a
 *   rendezvous send that can only complete while its sender waits inside a blocking allreduce.
 * Every result is compared with values computed locally. */
#include "ctest.h"
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    ct_init(&argc, &argv);
    const int me = ct_world_rank, n = ct_world_size;
    enum { MAXN = 300 };
    int isend[MAXN], irecv[MAXN], spare[2 * MAXN];
    double dsend[MAXN], drecv[MAXN];

    /* 1. Back-to-back calls of every kind around the threshold (1 KiB = 256 ints). */
    for (int it = 0; it < 600; it++) {
        int cnt = (it * 37) % 290; /* 0..289 ints: 0..1156 bytes */
        int root = it % n;
        for (int i = 0; i < cnt; i++)
            isend[i] = ct_val(me, i, it);
        switch (it % 5) {
        case 0:
            CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
            break;
        case 1: /* bcast */
            for (int i = 0; i < cnt; i++)
                irecv[i] = me == root ? ct_val(root, i, it) : -1;
            CHECK_MPI(MPI_Bcast(irecv, cnt, MPI_INT, root, MPI_COMM_WORLD));
            for (int i = 0; i < cnt; i++)
                CHECK(irecv[i] == ct_val(root, i, it), "bcast it %d i %d: %d", it, i, irecv[i]);
            break;
        case 2: /* reduce, sum (in place at the root every other time) */
            if (me == root && it % 10 == 2) {
                memcpy(irecv, isend, sizeof(int) * cnt);
                CHECK_MPI(MPI_Reduce(MPI_IN_PLACE, irecv, cnt, MPI_INT, MPI_SUM, root, MPI_COMM_WORLD));
            } else {
                CHECK_MPI(MPI_Reduce(isend, irecv, cnt, MPI_INT, MPI_SUM, root, MPI_COMM_WORLD));
            }
            if (me == root)
                for (int i = 0; i < cnt; i++) {
                    int want = 0;
                    for (int r = 0; r < n; r++)
                        want += ct_val(r, i, it);
                    CHECK(irecv[i] == want, "reduce it %d i %d: %d want %d", it, i, irecv[i], want);
                }
            break;
        case 3: { /* allreduce max on doubles, in place every other time */
            int dc = cnt / 2;
            for (int i = 0; i < dc; i++)
                dsend[i] = drecv[i] = 0.5 * ct_val(me, i, it);
            if (it % 2)
                CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, drecv, dc, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
            else
                CHECK_MPI(MPI_Allreduce(dsend, drecv, dc, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
            for (int i = 0; i < dc; i++) {
                double want = 0;
                for (int r = 0; r < n; r++)
                    if (0.5 * ct_val(r, i, it) > want)
                        want = 0.5 * ct_val(r, i, it);
                CHECK(drecv[i] == want, "allreduce max it %d i %d: %g want %g", it, i, drecv[i], want);
            }
            break;
        }
        case 4: { /* allreduce MINLOC on (int value, int index) pairs */
            int pc = cnt / 2;
            for (int i = 0; i < pc; i++) {
                isend[2 * i] = ct_val(me, i, it) % 100;
                isend[2 * i + 1] = me;
            }
            CHECK_MPI(MPI_Allreduce(isend, irecv, pc, MPI_2INT, MPI_MINLOC, MPI_COMM_WORLD));
            for (int i = 0; i < pc; i++) {
                int wv = 1 << 30, wr = -1;
                for (int r = 0; r < n; r++)
                    if (ct_val(r, i, it) % 100 < wv) {
                        wv = ct_val(r, i, it) % 100;
                        wr = r;
                    }
                CHECK(irecv[2 * i] == wv && irecv[2 * i + 1] == wr, "minloc it %d i %d: (%d,%d) want (%d,%d)",
                      it, i, irecv[2 * i], irecv[2 * i + 1], wv, wr);
            }
            break;
        }
        }
    }

    /* 2. The same data under different datatypes on different ranks. */
    MPI_Datatype contig, vec;
    CHECK_MPI(MPI_Type_contiguous(8, MPI_INT, &contig));
    CHECK_MPI(MPI_Type_commit(&contig));
    CHECK_MPI(MPI_Type_vector(8, 1, 2, MPI_INT, &vec)); /* every other int of spare[] */
    CHECK_MPI(MPI_Type_commit(&vec));
    for (int it = 0; it < 60; it++) {
        int odd = me % 2;
        for (int i = 0; i < 8; i++)
            isend[i] = ct_val(me, i, it);
        memset(spare, 0, sizeof spare);
        if (it % 2 == 0) { /* allreduce sum: int x 8 / contig x 1 */
            if (odd)
                CHECK_MPI(MPI_Allreduce(isend, irecv, 1, contig, MPI_SUM, MPI_COMM_WORLD));
            else
                CHECK_MPI(MPI_Allreduce(isend, irecv, 8, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
            for (int i = 0; i < 8; i++) {
                int want = 0;
                for (int r = 0; r < n; r++)
                    want += ct_val(r, i, it);
                CHECK(irecv[i] == want, "mixed allreduce it %d i %d: %d want %d", it, i, irecv[i], want);
            }
        } else { /* bcast: int x 8 / vector (strided) x 1 */
            int root = it % n;
            for (int i = 0; i < 8; i++)
                spare[2 * i] = me == root ? ct_val(root, i, it) : -1;
            if (odd) {
                CHECK_MPI(MPI_Bcast(spare, 1, vec, root, MPI_COMM_WORLD));
            } else {
                for (int i = 0; i < 8; i++)
                    irecv[i] = spare[2 * i];
                CHECK_MPI(MPI_Bcast(irecv, 8, MPI_INT, root, MPI_COMM_WORLD));
                for (int i = 0; i < 8; i++)
                    spare[2 * i] = irecv[i];
            }
            for (int i = 0; i < 8; i++) {
                CHECK(spare[2 * i] == ct_val(root, i, it), "mixed bcast it %d i %d: %d", it, i, spare[2 * i]);
                CHECK(spare[2 * i + 1] == 0, "mixed bcast wrote a gap at %d", 2 * i + 1);
            }
        }
    }
    MPI_Type_free(&contig);
    MPI_Type_free(&vec);

    /* 3. A barrier waits for the slowest rank: the others send to rank 0 as soon as they leave
     * it, and rank 0 polls for such a message for 100 ms before it enters: it must see none. No
     * time is judged (a slow machine only makes the check weaker, never fail). */
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    if (me == 0) {
        double t0 = now();
        int early = 0;
        MPI_Status est;
        while (now() - t0 < 0.1) {
            CHECK_MPI(MPI_Iprobe(MPI_ANY_SOURCE, 91, MPI_COMM_WORLD, &early, &est));
            CHECK(!early, "rank %d left the barrier before rank 0 entered it", est.MPI_SOURCE);
            usleep(1000);
        }
    }
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    if (me == 0) {
        for (int r = 1; r < n; r++)
            CHECK_MPI(MPI_Recv(spare, 1, MPI_INT, MPI_ANY_SOURCE, 91, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    } else {
        CHECK_MPI(MPI_Send(&me, 1, MPI_INT, 0, 91, MPI_COMM_WORLD));
    }

    /* 4a. A nonblocking allreduce in flight across blocking ones. */
    int nb_in = me + 1, nb_out = 0, x = me, y = 0;
    MPI_Request req;
    CHECK_MPI(MPI_Iallreduce(&nb_in, &nb_out, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &req));
    for (int i = 0; i < 50; i++) {
        CHECK_MPI(MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
        CHECK(y == n - 1, "allreduce max %d", y);
    }
    CHECK_MPI(MPI_Wait(&req, MPI_STATUS_IGNORE));
    CHECK(nb_out == n * (n + 1) / 2, "iallreduce %d", nb_out);

    /* 4b. Rank 0's large send completes only if rank 0 makes progress inside the allreduce
     * (rank 1 receives first, then joins the allreduce). */
    if (n >= 2) {
        enum { BIG = 1 << 20 };
        char *big = malloc(BIG);
        CHECK(big != NULL, "malloc");
        if (me == 0) {
            for (int i = 0; i < BIG; i++)
                big[i] = (char)(i * 7);
            CHECK_MPI(MPI_Isend(big, BIG, MPI_CHAR, 1, 5, MPI_COMM_WORLD, &req));
        } else if (me == 1) {
            CHECK_MPI(MPI_Recv(big, BIG, MPI_CHAR, 0, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            for (int i = 0; i < BIG; i++)
                CHECK(big[i] == (char)(i * 7), "big message byte %d", i);
        }
        CHECK_MPI(MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
        CHECK(y == n * (n - 1) / 2, "allreduce sum %d", y);
        if (me == 0)
            CHECK_MPI(MPI_Wait(&req, MPI_STATUS_IGNORE));
        free(big);
    }
    return ct_finish("coll_flag");
}
