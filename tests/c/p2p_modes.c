/* Send modes and persistent requests: Ssend/Issend, Bsend/Ibsend with Buffer_attach/detach,
 * Rsend/Irsend (receive posted first, ordered by a barrier), Send_init/Recv_init/Start/Startall. */
#include "ctest.h"

#define N 16

int main(int argc, char **argv)
{
    int rank, size, next, prev, i, it, count;
    MPI_Status st;

    ct_init(&argc, &argv);
    rank = ct_world_rank;
    size = ct_world_size;
    next = (rank + 1) % size;
    prev = (rank + size - 1) % size;

    /* Ssend: receive posted nonblocking first so a self-ring (size 1) cannot deadlock */
    {
        int s[N], r[N];
        MPI_Request rq;
        for (i = 0; i < N; i++) {
            s[i] = ct_val(rank, i, 1);
            r[i] = -1;
        }
        CHECK_MPI(MPI_Irecv(r, N, MPI_INT, prev, 1, MPI_COMM_WORLD, &rq));
        CHECK_MPI(MPI_Ssend(s, N, MPI_INT, next, 1, MPI_COMM_WORLD));
        CHECK_MPI(MPI_Wait(&rq, &st));
        for (i = 0; i < N; i++)
            CHECK(r[i] == ct_val(prev, i, 1), "ssend[%d] = %d", i, r[i]);
        /* Issend completes only after the matching receive started: receiver posts after a
         * barrier, so the Issend must not be complete before the barrier. */
        if (size >= 2) {
            int flag = 0;
            MPI_Request sq;
            CHECK_MPI(MPI_Issend(s, N, MPI_INT, next, 2, MPI_COMM_WORLD, &sq));
            CHECK_MPI(MPI_Test(&sq, &flag, MPI_STATUS_IGNORE));
            CHECK(flag == 0, "Issend complete before the receive was posted");
            CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
            CHECK_MPI(MPI_Recv(r, N, MPI_INT, prev, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            CHECK_MPI(MPI_Wait(&sq, MPI_STATUS_IGNORE));
            for (i = 0; i < N; i++)
                CHECK(r[i] == ct_val(prev, i, 1), "issend[%d] = %d", i, r[i]);
        }
    }

    /* Bsend with an attached buffer: blocking sends return without a matching receive */
    {
        int size_one, bufsize;
        void *buf, *dbuf;
        int s[N], r[N];
        MPI_Request bq;
        CHECK_MPI(MPI_Pack_size(N, MPI_INT, MPI_COMM_WORLD, &size_one));
        bufsize = 4 * (size_one + MPI_BSEND_OVERHEAD);
        buf = malloc((size_t)bufsize);
        CHECK(buf, "malloc");
        CHECK_MPI(MPI_Buffer_attach(buf, bufsize));
        for (it = 0; it < 3; it++) {
            for (i = 0; i < N; i++)
                s[i] = ct_val(rank, i, 10 + it);
            CHECK_MPI(MPI_Bsend(s, N, MPI_INT, next, 10 + it, MPI_COMM_WORLD));
            /* the user buffer may be reused at once */
            for (i = 0; i < N; i++)
                s[i] = -99;
        }
        for (i = 0; i < N; i++)
            s[i] = ct_val(rank, i, 20);
        CHECK_MPI(MPI_Ibsend(s, N, MPI_INT, next, 20, MPI_COMM_WORLD, &bq));
        CHECK_MPI(MPI_Wait(&bq, MPI_STATUS_IGNORE));
        /* receive in reverse tag order: matching is by tag */
        CHECK_MPI(MPI_Recv(r, N, MPI_INT, prev, 20, MPI_COMM_WORLD, &st));
        for (i = 0; i < N; i++)
            CHECK(r[i] == ct_val(prev, i, 20), "ibsend[%d] = %d", i, r[i]);
        for (it = 2; it >= 0; it--) {
            CHECK_MPI(MPI_Recv(r, N, MPI_INT, prev, 10 + it, MPI_COMM_WORLD, &st));
            CHECK_MPI(MPI_Get_count(&st, MPI_INT, &count));
            CHECK(count == N, "bsend count %d", count);
            for (i = 0; i < N; i++)
                CHECK(r[i] == ct_val(prev, i, 10 + it), "bsend it %d [%d] = %d", it, i, r[i]);
        }
        CHECK_MPI(MPI_Buffer_detach(&dbuf, &bufsize));
        CHECK(dbuf == buf && bufsize == 4 * (size_one + MPI_BSEND_OVERHEAD), "detach returned %p/%d", dbuf,
              bufsize);
        free(buf);
    }

    /* Rsend: receive is posted before the barrier, send after it */
    {
        int s[N], r[N];
        MPI_Request rq, sq;
        for (i = 0; i < N; i++) {
            s[i] = ct_val(rank, i, 30);
            r[i] = -1;
        }
        CHECK_MPI(MPI_Irecv(r, N, MPI_INT, prev, 30, MPI_COMM_WORLD, &rq));
        CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
        CHECK_MPI(MPI_Rsend(s, N, MPI_INT, next, 30, MPI_COMM_WORLD));
        CHECK_MPI(MPI_Wait(&rq, &st));
        for (i = 0; i < N; i++)
            CHECK(r[i] == ct_val(prev, i, 30), "rsend[%d] = %d", i, r[i]);
        CHECK_MPI(MPI_Irecv(r, N, MPI_INT, prev, 31, MPI_COMM_WORLD, &rq));
        CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
        CHECK_MPI(MPI_Irsend(s, N, MPI_INT, next, 31, MPI_COMM_WORLD, &sq));
        CHECK_MPI(MPI_Wait(&sq, MPI_STATUS_IGNORE));
        CHECK_MPI(MPI_Wait(&rq, &st));
        for (i = 0; i < N; i++)
            CHECK(r[i] == ct_val(prev, i, 30), "irsend[%d] = %d", i, r[i]);
    }

    /* Persistent requests: Send_init/Recv_init reused for several iterations with Start and
     * Startall; also Ssend_init and Bsend_init-less variants via Start. */
    {
        int s[N], r[N], s2[N], r2[N];
        MPI_Request reqs[4];
        CHECK_MPI(MPI_Recv_init(r, N, MPI_INT, prev, 40, MPI_COMM_WORLD, &reqs[0]));
        CHECK_MPI(MPI_Send_init(s, N, MPI_INT, next, 40, MPI_COMM_WORLD, &reqs[1]));
        CHECK_MPI(MPI_Recv_init(r2, N, MPI_INT, next, 41, MPI_COMM_WORLD, &reqs[2]));
        CHECK_MPI(MPI_Ssend_init(s2, N, MPI_INT, prev, 41, MPI_COMM_WORLD, &reqs[3]));
        for (it = 0; it < 5; it++) {
            for (i = 0; i < N; i++) {
                s[i] = ct_val(rank, i, 40 + it);
                s2[i] = ct_val(rank, i, 60 + it);
                r[i] = r2[i] = -1;
            }
            if (it % 2 == 0) {
                CHECK_MPI(MPI_Startall(4, reqs));
            } else {
                CHECK_MPI(MPI_Start(&reqs[0]));
                CHECK_MPI(MPI_Start(&reqs[2]));
                CHECK_MPI(MPI_Start(&reqs[1]));
                CHECK_MPI(MPI_Start(&reqs[3]));
            }
            {
                MPI_Status sts[4];
                CHECK_MPI(MPI_Waitall(4, reqs, sts));
                CHECK(sts[0].MPI_SOURCE == prev && sts[0].MPI_TAG == 40, "persistent status %d %d",
                      sts[0].MPI_SOURCE, sts[0].MPI_TAG);
                CHECK(sts[2].MPI_SOURCE == next && sts[2].MPI_TAG == 41, "persistent status2 %d %d",
                      sts[2].MPI_SOURCE, sts[2].MPI_TAG);
            }
            for (i = 0; i < 4; i++)
                CHECK(reqs[i] != MPI_REQUEST_NULL, "persistent request %d freed by Waitall", i);
            for (i = 0; i < N; i++) {
                CHECK(r[i] == ct_val(prev, i, 40 + it), "persistent it %d r[%d] = %d", it, i, r[i]);
                CHECK(r2[i] == ct_val(next, i, 60 + it), "persistent it %d r2[%d] = %d", it, i, r2[i]);
            }
        }
        /* inactive persistent request: Test returns flag true with empty status */
        {
            int flag = 0;
            CHECK_MPI(MPI_Test(&reqs[0], &flag, &st));
            CHECK(flag == 1 && reqs[0] != MPI_REQUEST_NULL, "Test on inactive persistent flag %d", flag);
        }
        for (i = 0; i < 4; i++) {
            CHECK_MPI(MPI_Request_free(&reqs[i]));
            CHECK(reqs[i] == MPI_REQUEST_NULL, "Request_free did not null %d", i);
        }
    }

    return ct_finish("p2p_modes");
}
