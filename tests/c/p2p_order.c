/* Non-overtaking order: many same-tag messages from each sender arrive in send order, for
 * blocking, nonblocking, mixed sizes (eager and larger) and ANY_SOURCE receives. Matching by
 * source and tag: with every message already there, receives naming a source or tag take only
 * that sender's or tag's message, whatever arrived first. */
#include "ctest.h"

#define NMSG 200
#define BIG 20000 /* ints: likely above any eager threshold */

int main(int argc, char **argv)
{
    int rank, size, next, prev, i, k;
    MPI_Status st;

    ct_init(&argc, &argv);
    rank = ct_world_rank;
    size = ct_world_size;
    next = (rank + 1) % size;
    prev = (rank + size - 1) % size;

    /* many small same-tag messages, nonblocking sends, blocking receives */
    {
        int sb[NMSG], rb = -1;
        MPI_Request rq[NMSG];
        for (k = 0; k < NMSG; k++) {
            sb[k] = rank * 100000 + k;
            CHECK_MPI(MPI_Isend(&sb[k], 1, MPI_INT, next, 3, MPI_COMM_WORLD, &rq[k]));
        }
        for (k = 0; k < NMSG; k++) {
            CHECK_MPI(MPI_Recv(&rb, 1, MPI_INT, prev, 3, MPI_COMM_WORLD, &st));
            CHECK(rb == prev * 100000 + k, "message %d: got %d (overtaken)", k, rb);
        }
        CHECK_MPI(MPI_Waitall(NMSG, rq, MPI_STATUSES_IGNORE));
    }

    /* pre-posted receives are matched in posting order */
    {
        int sb[NMSG], rb[NMSG];
        MPI_Request rq[NMSG];
        for (k = 0; k < NMSG; k++) {
            rb[k] = -1;
            CHECK_MPI(MPI_Irecv(&rb[k], 1, MPI_INT, prev, 4, MPI_COMM_WORLD, &rq[k]));
        }
        for (k = 0; k < NMSG; k++) {
            sb[k] = rank * 100000 + k;
            CHECK_MPI(MPI_Send(&sb[k], 1, MPI_INT, next, 4, MPI_COMM_WORLD));
            /* size 1 self-ring: the receives are pre-posted, so blocking sends complete */
        }
        CHECK_MPI(MPI_Waitall(NMSG, rq, MPI_STATUSES_IGNORE));
        for (k = 0; k < NMSG; k++)
            CHECK(rb[k] == prev * 100000 + k, "preposted %d: got %d", k, rb[k]);
    }

    /* mixed sizes: a large message followed by small ones must not be overtaken */
    {
        int *big = malloc(sizeof(int) * BIG), *rbig = malloc(sizeof(int) * BIG);
        int small[4], rsmall[4];
        MPI_Request rq[5];
        CHECK(big && rbig, "malloc");
        for (i = 0; i < BIG; i++)
            big[i] = ct_val(rank, i, 9);
        CHECK_MPI(MPI_Isend(big, BIG, MPI_INT, next, 5, MPI_COMM_WORLD, &rq[0]));
        for (k = 0; k < 4; k++) {
            small[k] = rank * 10 + k;
            CHECK_MPI(MPI_Isend(&small[k], 1, MPI_INT, next, 5, MPI_COMM_WORLD, &rq[1 + k]));
        }
        /* first receive takes up to BIG ints: must be the big one */
        CHECK_MPI(MPI_Recv(rbig, BIG, MPI_INT, prev, 5, MPI_COMM_WORLD, &st));
        CHECK_MPI(MPI_Get_count(&st, MPI_INT, &k));
        CHECK(k == BIG, "first message has %d ints, want %d (small one overtook)", k, BIG);
        for (i = 0; i < BIG; i++)
            CHECK(rbig[i] == ct_val(prev, i, 9), "big[%d] = %d", i, rbig[i]);
        for (k = 0; k < 4; k++) {
            CHECK_MPI(MPI_Recv(&rsmall[k], 1, MPI_INT, prev, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            CHECK(rsmall[k] == prev * 10 + k, "small %d = %d", k, rsmall[k]);
        }
        CHECK_MPI(MPI_Waitall(5, rq, MPI_STATUSES_IGNORE));
        free(big);
        free(rbig);
    }

    /* ANY_SOURCE: messages from each individual sender still arrive in order */
    if (rank == 0) {
        int *last = malloc(sizeof(int) * size), v;
        CHECK(last, "malloc");
        for (i = 0; i < size; i++)
            last[i] = -1;
        for (k = 0; k < (size - 1) * 50; k++) {
            CHECK_MPI(MPI_Recv(&v, 1, MPI_INT, MPI_ANY_SOURCE, 6, MPI_COMM_WORLD, &st));
            CHECK(v == last[st.MPI_SOURCE] + 1, "from %d got %d after %d", st.MPI_SOURCE, v, last[st.MPI_SOURCE]);
            last[st.MPI_SOURCE] = v;
        }
        for (i = 1; i < size; i++)
            CHECK(last[i] == 49, "sender %d last %d", i, last[i]);
        free(last);
    } else {
        for (k = 0; k < 50; k++)
            CHECK_MPI(MPI_Send(&k, 1, MPI_INT, 0, 6, MPI_COMM_WORLD));
    }

    /* Selective matching: every other rank sends one message with tag 7 and one with tag 8 to
     * rank 0 before a barrier; then rank 0 receives them naming the source (last rank first)
     * and the tag (8 before 7), so a receive that matched any waiting message would get another
     * sender's or tag's payload. */
    if (rank == 0) {
        int v = -1, t, src;
        CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
        for (t = 8; t >= 7; t--)
            for (src = size - 1; src >= 1; src--) {
                CHECK_MPI(MPI_Recv(&v, 1, MPI_INT, src, t, MPI_COMM_WORLD, &st));
                CHECK(v == src * 10 + t && st.MPI_SOURCE == src && st.MPI_TAG == t,
                      "Recv(source %d, tag %d) got %d from %d tag %d", src, t, v, st.MPI_SOURCE, st.MPI_TAG);
            }
    } else {
        int v7 = rank * 10 + 7, v8 = rank * 10 + 8;
        CHECK_MPI(MPI_Send(&v7, 1, MPI_INT, 0, 7, MPI_COMM_WORLD));
        CHECK_MPI(MPI_Send(&v8, 1, MPI_INT, 0, 8, MPI_COMM_WORLD));
        CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    }

    return ct_finish("p2p_order");
}
