/* Blocking point-to-point: ring with several datatypes, ANY_SOURCE/ANY_TAG, PROC_NULL,
 * zero-length messages, Sendrecv, Sendrecv_replace, Get_count/Get_elements; blocking and
 * nonblocking calls on dup'd and split communicators, through free/re-create cycles. */
#include "ctest.h"

#define N 37

int main(int argc, char **argv)
{
    int rank, size, next, prev, i, count;
    MPI_Status st;

    ct_init(&argc, &argv);
    rank = ct_world_rank;
    size = ct_world_size;
    next = (rank + 1) % size;
    prev = (rank + size - 1) % size;

    /* ring: even ranks send first, odd ranks receive first (works for size 1 via self-send
     * only if buffered; use Sendrecv for the general case, plain Send/Recv for size >= 2) */
    {
        int si[N], ri[N];
        double sd[N], rd[N];
        char sc[N], rc[N];
        long long sl[N], rl[N];
        float sf[N], rf[N];
        short ss[N], rs[N];
        for (i = 0; i < N; i++) {
            si[i] = ct_val(rank, i, 1);
            sd[i] = ct_val(rank, i, 2) + 0.25;
            sc[i] = (char)('a' + (rank + i) % 26);
            sl[i] = (long long)ct_val(rank, i, 3) * 1000000007LL;
            sf[i] = (float)ct_val(rank, i, 4) * 0.5f;
            ss[i] = (short)(ct_val(rank, i, 5) % 30000);
            ri[i] = -1;
            rd[i] = -1;
            rc[i] = 0;
            rl[i] = -1;
            rf[i] = -1;
            rs[i] = -1;
        }
        if (size >= 2) {
            if (rank % 2 == 0) {
                CHECK_MPI(MPI_Send(si, N, MPI_INT, next, 1, MPI_COMM_WORLD));
                CHECK_MPI(MPI_Send(sd, N, MPI_DOUBLE, next, 2, MPI_COMM_WORLD));
                CHECK_MPI(MPI_Send(sc, N, MPI_CHAR, next, 3, MPI_COMM_WORLD));
                CHECK_MPI(MPI_Send(sl, N, MPI_LONG_LONG, next, 4, MPI_COMM_WORLD));
                CHECK_MPI(MPI_Send(sf, N, MPI_FLOAT, next, 5, MPI_COMM_WORLD));
                CHECK_MPI(MPI_Send(ss, N, MPI_SHORT, next, 6, MPI_COMM_WORLD));
            }
            CHECK_MPI(MPI_Recv(ri, N, MPI_INT, prev, 1, MPI_COMM_WORLD, &st));
            CHECK(st.MPI_SOURCE == prev && st.MPI_TAG == 1, "status src %d tag %d", st.MPI_SOURCE, st.MPI_TAG);
            CHECK_MPI(MPI_Get_count(&st, MPI_INT, &count));
            CHECK(count == N, "count %d", count);
            CHECK_MPI(MPI_Recv(rd, N, MPI_DOUBLE, prev, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            CHECK_MPI(MPI_Recv(rc, N, MPI_CHAR, prev, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            CHECK_MPI(MPI_Recv(rl, N, MPI_LONG_LONG, prev, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            CHECK_MPI(MPI_Recv(rf, N, MPI_FLOAT, prev, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            CHECK_MPI(MPI_Recv(rs, N, MPI_SHORT, prev, 6, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            if (rank % 2 == 1) {
                CHECK_MPI(MPI_Send(si, N, MPI_INT, next, 1, MPI_COMM_WORLD));
                CHECK_MPI(MPI_Send(sd, N, MPI_DOUBLE, next, 2, MPI_COMM_WORLD));
                CHECK_MPI(MPI_Send(sc, N, MPI_CHAR, next, 3, MPI_COMM_WORLD));
                CHECK_MPI(MPI_Send(sl, N, MPI_LONG_LONG, next, 4, MPI_COMM_WORLD));
                CHECK_MPI(MPI_Send(sf, N, MPI_FLOAT, next, 5, MPI_COMM_WORLD));
                CHECK_MPI(MPI_Send(ss, N, MPI_SHORT, next, 6, MPI_COMM_WORLD));
            }
        } else {
            CHECK_MPI(MPI_Sendrecv(si, N, MPI_INT, 0, 1, ri, N, MPI_INT, 0, 1, MPI_COMM_WORLD, &st));
            CHECK_MPI(MPI_Sendrecv(sd, N, MPI_DOUBLE, 0, 2, rd, N, MPI_DOUBLE, 0, 2, MPI_COMM_WORLD, &st));
            CHECK_MPI(MPI_Sendrecv(sc, N, MPI_CHAR, 0, 3, rc, N, MPI_CHAR, 0, 3, MPI_COMM_WORLD, &st));
            CHECK_MPI(MPI_Sendrecv(sl, N, MPI_LONG_LONG, 0, 4, rl, N, MPI_LONG_LONG, 0, 4, MPI_COMM_WORLD, &st));
            CHECK_MPI(MPI_Sendrecv(sf, N, MPI_FLOAT, 0, 5, rf, N, MPI_FLOAT, 0, 5, MPI_COMM_WORLD, &st));
            CHECK_MPI(MPI_Sendrecv(ss, N, MPI_SHORT, 0, 6, rs, N, MPI_SHORT, 0, 6, MPI_COMM_WORLD, &st));
        }
        for (i = 0; i < N; i++) {
            CHECK(ri[i] == ct_val(prev, i, 1), "int[%d] = %d want %d", i, ri[i], ct_val(prev, i, 1));
            CHECK(rd[i] == ct_val(prev, i, 2) + 0.25, "double[%d] = %g", i, rd[i]);
            CHECK(rc[i] == (char)('a' + (prev + i) % 26), "char[%d] = %d", i, rc[i]);
            CHECK(rl[i] == (long long)ct_val(prev, i, 3) * 1000000007LL, "ll[%d] = %lld", i, rl[i]);
            CHECK(rf[i] == (float)ct_val(prev, i, 4) * 0.5f, "float[%d] = %g", i, (double)rf[i]);
            CHECK(rs[i] == (short)(ct_val(prev, i, 5) % 30000), "short[%d] = %d", i, rs[i]);
        }
    }

    /* Sendrecv around the ring (and a ring in the other direction). */
    {
        int s[N], r[N];
        for (i = 0; i < N; i++) {
            s[i] = ct_val(rank, i, 10);
            r[i] = -7;
        }
        CHECK_MPI(MPI_Sendrecv(s, N, MPI_INT, next, 10, r, N, MPI_INT, prev, 10, MPI_COMM_WORLD, &st));
        CHECK(st.MPI_SOURCE == prev && st.MPI_TAG == 10, "sendrecv status %d %d", st.MPI_SOURCE, st.MPI_TAG);
        for (i = 0; i < N; i++)
            CHECK(r[i] == ct_val(prev, i, 10), "sendrecv[%d] = %d", i, r[i]);
        /* Sendrecv_replace: send to prev, receive from next */
        CHECK_MPI(MPI_Sendrecv_replace(s, N, MPI_INT, prev, 11, next, 11, MPI_COMM_WORLD, &st));
        CHECK(st.MPI_SOURCE == next && st.MPI_TAG == 11, "replace status %d %d", st.MPI_SOURCE, st.MPI_TAG);
        CHECK_MPI(MPI_Get_count(&st, MPI_INT, &count));
        CHECK(count == N, "replace count %d", count);
        for (i = 0; i < N; i++)
            CHECK(s[i] == ct_val(next, i, 10), "replace[%d] = %d want %d", i, s[i], ct_val(next, i, 10));
    }

    /* ANY_SOURCE / ANY_TAG: everyone sends one int to rank 0 with tag = rank+100 */
    {
        int v = rank * 3 + 1;
        if (rank == 0) {
            int seen[64];
            int got, k;
            memset(seen, 0, sizeof seen);
            for (k = 0; k < size; k++) {
                if (k == 0) {
                    /* self message via Sendrecv with wildcards on the receive side */
                    CHECK_MPI(MPI_Sendrecv(&v, 1, MPI_INT, 0, 100, &got, 1, MPI_INT, 0, MPI_ANY_TAG,
                                           MPI_COMM_WORLD, &st));
                } else {
                    CHECK_MPI(MPI_Recv(&got, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
                }
                CHECK(st.MPI_SOURCE >= 0 && st.MPI_SOURCE < size && st.MPI_SOURCE < 64, "src %d", st.MPI_SOURCE);
                CHECK(st.MPI_TAG == st.MPI_SOURCE + 100, "tag %d from %d", st.MPI_TAG, st.MPI_SOURCE);
                CHECK(got == st.MPI_SOURCE * 3 + 1, "value %d from %d", got, st.MPI_SOURCE);
                CHECK(!seen[st.MPI_SOURCE], "duplicate message from %d", st.MPI_SOURCE);
                seen[st.MPI_SOURCE] = 1;
            }
        } else {
            CHECK_MPI(MPI_Send(&v, 1, MPI_INT, 0, rank + 100, MPI_COMM_WORLD));
        }
        /* later messages to rank 0 must not be picked up by the wildcard receives */
        CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    }

    /* MPI_PROC_NULL: completes at once, status source PROC_NULL, tag ANY_TAG, count 0 */
    {
        int buf[4] = {5, 6, 7, 8};
        CHECK_MPI(MPI_Send(buf, 4, MPI_INT, MPI_PROC_NULL, 5, MPI_COMM_WORLD));
        CHECK_MPI(MPI_Recv(buf, 4, MPI_INT, MPI_PROC_NULL, 5, MPI_COMM_WORLD, &st));
        CHECK(st.MPI_SOURCE == MPI_PROC_NULL && st.MPI_TAG == MPI_ANY_TAG, "proc_null status %d %d",
              st.MPI_SOURCE, st.MPI_TAG);
        CHECK_MPI(MPI_Get_count(&st, MPI_INT, &count));
        CHECK(count == 0, "proc_null count %d", count);
        CHECK(buf[0] == 5 && buf[3] == 8, "proc_null recv modified buffer");
        CHECK_MPI(MPI_Sendrecv(buf, 4, MPI_INT, MPI_PROC_NULL, 1, buf, 4, MPI_INT, MPI_PROC_NULL, 1,
                               MPI_COMM_WORLD, &st));
        CHECK(st.MPI_SOURCE == MPI_PROC_NULL, "sendrecv proc_null src %d", st.MPI_SOURCE);
    }

    /* zero-length messages (NULL buffer allowed for count 0) */
    {
        int dummy = 42;
        CHECK_MPI(MPI_Sendrecv(NULL, 0, MPI_INT, next, 20, &dummy, 0, MPI_INT, prev, 20, MPI_COMM_WORLD, &st));
        CHECK(st.MPI_SOURCE == prev && st.MPI_TAG == 20, "zero-len status %d %d", st.MPI_SOURCE, st.MPI_TAG);
        CHECK_MPI(MPI_Get_count(&st, MPI_INT, &count));
        CHECK(count == 0 && dummy == 42, "zero-len count %d dummy %d", count, dummy);
        /* zero-length message received into a larger buffer */
        CHECK_MPI(MPI_Sendrecv(&dummy, 0, MPI_INT, next, 21, &dummy, 1, MPI_INT, prev, 21, MPI_COMM_WORLD, &st));
        CHECK_MPI(MPI_Get_count(&st, MPI_INT, &count));
        CHECK(count == 0 && dummy == 42, "zero-len into 1: count %d dummy %d", count, dummy);
    }

    /* shorter message into larger buffer; Get_count/Get_elements with a partial derived type */
    {
        int s[10], r[20];
        MPI_Datatype pair;
        for (i = 0; i < 10; i++)
            s[i] = rank * 100 + i;
        for (i = 0; i < 20; i++)
            r[i] = -1;
        CHECK_MPI(MPI_Sendrecv(s, 7, MPI_INT, next, 30, r, 20, MPI_INT, prev, 30, MPI_COMM_WORLD, &st));
        CHECK_MPI(MPI_Get_count(&st, MPI_INT, &count));
        CHECK(count == 7, "partial count %d", count);
        for (i = 0; i < 7; i++)
            CHECK(r[i] == prev * 100 + i, "partial[%d] = %d", i, r[i]);
        CHECK(r[7] == -1, "wrote past message: r[7] = %d", r[7]);
        CHECK_MPI(MPI_Type_contiguous(2, MPI_INT, &pair));
        CHECK_MPI(MPI_Type_commit(&pair));
        CHECK_MPI(MPI_Get_count(&st, pair, &count));
        CHECK(count == MPI_UNDEFINED, "count of 7 ints in pairs = %d, want MPI_UNDEFINED", count);
        CHECK_MPI(MPI_Get_elements(&st, pair, &count));
        CHECK(count == 7, "elements = %d", count);
        CHECK_MPI(MPI_Type_free(&pair));
        CHECK(pair == MPI_DATATYPE_NULL, "Type_free did not null the handle");
    }

    /* self send/recv with a nonblocking receive posted first */
    {
        int a = rank + 5, b = -1;
        MPI_Request rq;
        CHECK_MPI(MPI_Irecv(&b, 1, MPI_INT, rank, 40, MPI_COMM_WORLD, &rq));
        CHECK_MPI(MPI_Send(&a, 1, MPI_INT, rank, 40, MPI_COMM_WORLD));
        CHECK_MPI(MPI_Wait(&rq, &st));
        CHECK(b == rank + 5 && st.MPI_SOURCE == rank, "self message %d from %d", b, st.MPI_SOURCE);
        CHECK(rq == MPI_REQUEST_NULL, "request not freed by Wait");
    }

    /* User communicators (dup'd and split), several in turn and through free/re-create cycles:
     * blocking Send/Recv and Sendrecv on each, messages matched only within their communicator,
     * statuses in the communicator's ranks, and a freed handle refused with MPI_ERR_COMM. */
    {
        enum { NC = 6, CYCLES = 4 };
        MPI_Comm cs[NC], stale;
        int cyc, k, j;
        CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
        CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));
        for (cyc = 0; cyc < CYCLES; cyc++) {
            int crank[NC], csize[NC];
            for (k = 0; k < NC; k++) {
                if (k % 2 == 0)
                    CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &cs[k]));
                else /* halves by parity, ranks in reverse order */
                    CHECK_MPI(MPI_Comm_split(MPI_COMM_WORLD, rank % 2, size - rank, &cs[k]));
                CHECK_MPI(MPI_Comm_rank(cs[k], &crank[k]));
                CHECK_MPI(MPI_Comm_size(cs[k], &csize[k]));
            }
            /* The same tag on every communicator: each receive takes its own communicator's
             * message, though all were sent before any is received (in reverse order). */
            for (j = 0; j < 3; j++) {
                for (k = NC - 1; k >= 0; k--) {
                    int v = ct_val(rank, cyc * 10 + j, k), cn = (crank[k] + 1) % csize[k];
                    CHECK_MPI(MPI_Send(&v, 1, MPI_INT, cn, 50, cs[k]));
                }
                for (k = 0; k < NC; k++) {
                    int got = -1, cp = (crank[k] + csize[k] - 1) % csize[k], wp;
                    MPI_Group cg, wg;
                    CHECK_MPI(MPI_Recv(&got, 1, MPI_INT, j == 2 ? MPI_ANY_SOURCE : cp, 50, cs[k], &st));
                    CHECK(st.MPI_SOURCE == cp && st.MPI_TAG == 50, "comm %d cycle %d: status %d %d want %d",
                          k, cyc, st.MPI_SOURCE, st.MPI_TAG, cp);
                    CHECK_MPI(MPI_Comm_group(cs[k], &cg));
                    CHECK_MPI(MPI_Comm_group(MPI_COMM_WORLD, &wg));
                    CHECK_MPI(MPI_Group_translate_ranks(cg, 1, &cp, wg, &wp));
                    CHECK_MPI(MPI_Group_free(&cg));
                    CHECK_MPI(MPI_Group_free(&wg));
                    CHECK(got == ct_val(wp, cyc * 10 + j, k), "comm %d cycle %d round %d: got %d from %d",
                          k, cyc, j, got, wp);
                }
            }
            for (k = 0; k < NC; k++) {
                int s2[3] = {rank, k, cyc}, r2[3] = {-1, -1, -1};
                int cn = (crank[k] + 1) % csize[k], cp = (crank[k] + csize[k] - 1) % csize[k];
                CHECK_MPI(MPI_Sendrecv(s2, 3, MPI_INT, cn, 51, r2, 3, MPI_INT, cp, 51, cs[k], &st));
                CHECK(st.MPI_SOURCE == cp && r2[1] == k && r2[2] == cyc, "comm %d sendrecv: %d %d %d from %d",
                      k, r2[0], r2[1], r2[2], st.MPI_SOURCE);
            }
            /* Nonblocking: the receive posted first, then the send, each waited for; then a
             * message too long for its receive, sent before the receive is posted: the wait
             * reports MPI_ERR_TRUNCATE (on the communicator's handler, which returns). */
            for (k = 0; k < NC; k++) {
                int a = rank * 1000 + k, b = -1, big[2] = {rank, k}, small = -1;
                int cn = (crank[k] + 1) % csize[k], cp = (crank[k] + csize[k] - 1) % csize[k];
                MPI_Request rq[2];
                CHECK_MPI(MPI_Irecv(&b, 1, MPI_INT, cp, 54, cs[k], &rq[0]));
                CHECK_MPI(MPI_Isend(&a, 1, MPI_INT, cn, 54, cs[k], &rq[1]));
                CHECK_MPI(MPI_Wait(&rq[1], MPI_STATUS_IGNORE));
                CHECK_MPI(MPI_Wait(&rq[0], &st));
                CHECK(rq[0] == MPI_REQUEST_NULL && rq[1] == MPI_REQUEST_NULL, "comm %d: Wait did not free", k);
                CHECK(st.MPI_SOURCE == cp && b % 1000 == k, "comm %d nonblocking: %d from %d", k, b, st.MPI_SOURCE);
                CHECK_MPI(MPI_Send(big, 2, MPI_INT, cn, 55, cs[k]));
                CHECK_MPI(MPI_Barrier(cs[k]));
                CHECK_MPI(MPI_Irecv(&small, 1, MPI_INT, cp, 55, cs[k], &rq[0]));
                CHECK_CLASS(MPI_Wait(&rq[0], &st), MPI_ERR_TRUNCATE);
            }
            /* Free one, then use its stale handle: refused, before and after a new one exists. */
            stale = cs[cyc % NC];
            CHECK_MPI(MPI_Comm_free(&cs[cyc % NC]));
            {
                int v = 1;
                CHECK_CLASS(MPI_Send(&v, 1, MPI_INT, 0, 52, stale), MPI_ERR_COMM);
                CHECK_CLASS(MPI_Recv(&v, 1, MPI_INT, 0, 52, stale, MPI_STATUS_IGNORE), MPI_ERR_COMM);
                CHECK_CLASS(MPI_Sendrecv(&v, 1, MPI_INT, 0, 52, &v, 1, MPI_INT, 0, 52, stale, MPI_STATUS_IGNORE),
                            MPI_ERR_COMM);
                {
                    MPI_Request rq = MPI_REQUEST_NULL;
                    CHECK_CLASS(MPI_Irecv(&v, 1, MPI_INT, 0, 52, stale, &rq), MPI_ERR_COMM);
                    CHECK_CLASS(MPI_Isend(&v, 1, MPI_INT, 0, 52, stale, &rq), MPI_ERR_COMM);
                    CHECK(rq == MPI_REQUEST_NULL, "a refused call made a request");
                }
                CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &cs[cyc % NC]));
                CHECK(cs[cyc % NC] != stale, "a new communicator got the freed handle");
                CHECK_CLASS(MPI_Send(&v, 1, MPI_INT, 0, 52, stale), MPI_ERR_COMM);
                CHECK_CLASS(MPI_Recv(&v, 1, MPI_INT, 0, 52, stale, MPI_STATUS_IGNORE), MPI_ERR_COMM);
                v = rank;
                CHECK_MPI(MPI_Sendrecv(&v, 1, MPI_INT, next, 53, &v, 1, MPI_INT, prev, 53, cs[cyc % NC], &st));
                CHECK(v == prev && st.MPI_SOURCE == prev, "new comm after free: %d from %d", v, st.MPI_SOURCE);
            }
            for (k = 0; k < NC; k++)
                CHECK_MPI(MPI_Comm_free(&cs[k]));
        }
        CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
        CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_ARE_FATAL));
    }

    return ct_finish("p2p_basic");
}
