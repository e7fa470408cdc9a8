/* Nonblocking point-to-point: Isend/Irecv all-to-all with Waitall; Waitany, Waitsome, Testany,
 * Testsome, Testall with MPI_REQUEST_NULL entries and status arrays; Test/Request_get_status. */
#include "ctest.h"

#define M 5

int main(int argc, char **argv)
{
    int rank, size, i, j, k, idx, flag, outcount;
    MPI_Status st;

    ct_init(&argc, &argv);
    rank = ct_world_rank;
    size = ct_world_size;

    /* all-to-all exchange of M ints with every rank (including self) */
    {
        int *sbuf = malloc(sizeof(int) * M * size);
        int *rbuf = malloc(sizeof(int) * M * size);
        MPI_Request *rq = malloc(sizeof(MPI_Request) * 2 * size);
        MPI_Status *sts = malloc(sizeof(MPI_Status) * 2 * size);
        CHECK(sbuf && rbuf && rq && sts, "malloc");
        for (j = 0; j < size; j++)
            for (i = 0; i < M; i++) {
                sbuf[j * M + i] = ct_val(rank, j * M + i, 1);
                rbuf[j * M + i] = -1;
            }
        for (j = 0; j < size; j++)
            CHECK_MPI(MPI_Irecv(rbuf + j * M, M, MPI_INT, j, 7, MPI_COMM_WORLD, &rq[j]));
        for (j = 0; j < size; j++)
            CHECK_MPI(MPI_Isend(sbuf + ((j + rank) % size) * M, M, MPI_INT, (j + rank) % size, 7,
                                MPI_COMM_WORLD, &rq[size + j]));
        CHECK_MPI(MPI_Waitall(2 * size, rq, sts));
        for (j = 0; j < 2 * size; j++)
            CHECK(rq[j] == MPI_REQUEST_NULL, "request %d not null after Waitall", j);
        for (j = 0; j < size; j++) {
            CHECK(sts[j].MPI_SOURCE == j && sts[j].MPI_TAG == 7, "status[%d] src %d tag %d", j,
                  sts[j].MPI_SOURCE, sts[j].MPI_TAG);
            CHECK_MPI(MPI_Get_count(&sts[j], MPI_INT, &k));
            CHECK(k == M, "count from %d = %d", j, k);
            for (i = 0; i < M; i++)
                CHECK(rbuf[j * M + i] == ct_val(j, rank * M + i, 1), "from %d [%d] = %d want %d", j, i,
                      rbuf[j * M + i], ct_val(j, rank * M + i, 1));
        }
        /* Waitall with only null requests and STATUSES_IGNORE */
        CHECK_MPI(MPI_Waitall(2 * size, rq, MPI_STATUSES_IGNORE));
        free(sbuf);
        free(rbuf);
        free(rq);
        free(sts);
    }

    /* Waitany / Testany over an array with MPI_REQUEST_NULL holes: rank receives one message
     * from each rank (self included) into slots 1,3,5,... while even slots stay null. */
    {
        int n = 2 * size + 1;
        MPI_Request *rq = malloc(sizeof(MPI_Request) * n);
        MPI_Request *sq = malloc(sizeof(MPI_Request) * size);
        int *rb = malloc(sizeof(int) * n);
        int *sb = malloc(sizeof(int) * size);
        int *done = calloc((size_t)n, sizeof(int));
        CHECK(rq && sq && rb && sb && done, "malloc");
        for (i = 0; i < n; i++) {
            rq[i] = MPI_REQUEST_NULL;
            rb[i] = -1;
        }
        for (j = 0; j < size; j++)
            CHECK_MPI(MPI_Irecv(&rb[2 * j + 1], 1, MPI_INT, j, 8, MPI_COMM_WORLD, &rq[2 * j + 1]));
        for (j = 0; j < size; j++) {
            sb[j] = rank * 1000 + j;
            CHECK_MPI(MPI_Isend(&sb[j], 1, MPI_INT, j, 8, MPI_COMM_WORLD, &sq[j]));
        }
        for (k = 0; k < size; k++) {
            CHECK_MPI(MPI_Waitany(n, rq, &idx, &st));
            CHECK(idx >= 0 && idx < n && idx % 2 == 1, "Waitany index %d", idx);
            CHECK(!done[idx], "index %d completed twice", idx);
            done[idx] = 1;
            CHECK(rq[idx] == MPI_REQUEST_NULL, "Waitany did not null request %d", idx);
            j = (idx - 1) / 2;
            CHECK(st.MPI_SOURCE == j && st.MPI_TAG == 8, "Waitany status src %d tag %d", st.MPI_SOURCE, st.MPI_TAG);
            CHECK(rb[idx] == j * 1000 + rank, "Waitany value %d from %d", rb[idx], j);
        }
        /* all null now: Waitany returns MPI_UNDEFINED and an empty status */
        CHECK_MPI(MPI_Waitany(n, rq, &idx, &st));
        CHECK(idx == MPI_UNDEFINED, "Waitany on all-null returned index %d", idx);
        CHECK_MPI(MPI_Testany(n, rq, &idx, &flag, &st));
        CHECK(flag == 1 && idx == MPI_UNDEFINED, "Testany on all-null flag %d index %d", flag, idx);
        CHECK_MPI(MPI_Testall(n, rq, &flag, MPI_STATUSES_IGNORE));
        CHECK(flag == 1, "Testall on all-null flag %d", flag);
        CHECK_MPI(MPI_Testsome(n, rq, &outcount, done, MPI_STATUSES_IGNORE));
        CHECK(outcount == MPI_UNDEFINED, "Testsome on all-null outcount %d", outcount);
        CHECK_MPI(MPI_Waitall(size, sq, MPI_STATUSES_IGNORE));
        CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));

        /* Testany loop */
        for (i = 0; i < n; i++) {
            done[i] = 0;
            rb[i] = -1;
        }
        for (j = 0; j < size; j++)
            CHECK_MPI(MPI_Irecv(&rb[2 * j + 1], 1, MPI_INT, j, 9, MPI_COMM_WORLD, &rq[2 * j + 1]));
        for (j = 0; j < size; j++)
            CHECK_MPI(MPI_Isend(&sb[j], 1, MPI_INT, j, 9, MPI_COMM_WORLD, &sq[j]));
        k = 0;
        while (k < size) {
            CHECK_MPI(MPI_Testany(n, rq, &idx, &flag, &st));
            if (flag) {
                CHECK(idx != MPI_UNDEFINED && idx % 2 == 1 && !done[idx], "Testany index %d", idx);
                done[idx] = 1;
                j = (idx - 1) / 2;
                CHECK(st.MPI_SOURCE == j && rb[idx] == j * 1000 + rank, "Testany src %d value %d",
                      st.MPI_SOURCE, rb[idx]);
                k++;
            }
        }
        CHECK_MPI(MPI_Waitall(size, sq, MPI_STATUSES_IGNORE));
        CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));

        /* Waitsome / Testsome */
        {
            int *indices = malloc(sizeof(int) * n);
            MPI_Status *sts = malloc(sizeof(MPI_Status) * n);
            CHECK(indices && sts, "malloc");
            for (int pass = 0; pass < 2; pass++) {
                for (i = 0; i < n; i++) {
                    done[i] = 0;
                    rb[i] = -1;
                }
                for (j = 0; j < size; j++)
                    CHECK_MPI(MPI_Irecv(&rb[2 * j + 1], 1, MPI_INT, j, 10 + pass, MPI_COMM_WORLD, &rq[2 * j + 1]));
                for (j = 0; j < size; j++)
                    CHECK_MPI(MPI_Isend(&sb[j], 1, MPI_INT, j, 10 + pass, MPI_COMM_WORLD, &sq[j]));
                k = 0;
                while (k < size) {
                    if (pass == 0)
                        CHECK_MPI(MPI_Waitsome(n, rq, &outcount, indices, sts));
                    else
                        CHECK_MPI(MPI_Testsome(n, rq, &outcount, indices, sts));
                    CHECK(outcount != MPI_UNDEFINED && outcount >= 0 && outcount <= size - k,
                          "outcount %d (done %d of %d)", outcount, k, size);
                    if (pass == 0)
                        CHECK(outcount >= 1, "Waitsome returned 0 completions");
                    for (i = 0; i < outcount; i++) {
                        idx = indices[i];
                        CHECK(idx >= 0 && idx < n && idx % 2 == 1 && !done[idx], "some index %d", idx);
                        done[idx] = 1;
                        CHECK(rq[idx] == MPI_REQUEST_NULL, "request %d not nulled", idx);
                        j = (idx - 1) / 2;
                        CHECK(sts[i].MPI_SOURCE == j && sts[i].MPI_TAG == 10 + pass,
                              "some status[%d] src %d tag %d", i, sts[i].MPI_SOURCE, sts[i].MPI_TAG);
                        CHECK(rb[idx] == j * 1000 + rank, "some value %d", rb[idx]);
                    }
                    k += outcount;
                }
                CHECK_MPI(MPI_Waitsome(n, rq, &outcount, indices, sts));
                CHECK(outcount == MPI_UNDEFINED, "Waitsome on all-null outcount %d", outcount);
                CHECK_MPI(MPI_Waitall(size, sq, MPI_STATUSES_IGNORE));
                CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
            }
            free(indices);
            free(sts);
        }

        /* Testall: false until everything is complete; statuses filled at the end */
        {
            MPI_Status *sts = malloc(sizeof(MPI_Status) * n);
            CHECK(sts, "malloc");
            for (i = 0; i < n; i++)
                rb[i] = -1;
            for (j = 0; j < size; j++)
                CHECK_MPI(MPI_Irecv(&rb[2 * j + 1], 1, MPI_INT, j, 12, MPI_COMM_WORLD, &rq[2 * j + 1]));
            /* nothing sent yet (barrier below orders it): Testall must say not done */
            CHECK_MPI(MPI_Testall(n, rq, &flag, sts));
            CHECK(flag == 0, "Testall true before anything was sent");
            CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
            for (j = 0; j < size; j++)
                CHECK_MPI(MPI_Isend(&sb[j], 1, MPI_INT, j, 12, MPI_COMM_WORLD, &sq[j]));
            flag = 0;
            while (!flag)
                CHECK_MPI(MPI_Testall(n, rq, &flag, sts));
            for (j = 0; j < size; j++) {
                CHECK(rq[2 * j + 1] == MPI_REQUEST_NULL, "Testall did not null %d", 2 * j + 1);
                CHECK(sts[2 * j + 1].MPI_SOURCE == j && sts[2 * j + 1].MPI_TAG == 12, "Testall status %d: %d %d",
                      2 * j + 1, sts[2 * j + 1].MPI_SOURCE, sts[2 * j + 1].MPI_TAG);
                CHECK(rb[2 * j + 1] == j * 1000 + rank, "Testall value %d", rb[2 * j + 1]);
            }
            CHECK_MPI(MPI_Waitall(size, sq, MPI_STATUSES_IGNORE));
            free(sts);
        }
        free(rq);
        free(sq);
        free(rb);
        free(sb);
        free(done);
    }

    /* MPI_Test and MPI_Request_get_status (does not free), MPI_Request_free on a send */
    {
        int a = rank, b = -1;
        MPI_Request r1, r2;
        int next = (rank + 1) % size, prev = (rank + size - 1) % size;
        CHECK_MPI(MPI_Irecv(&b, 1, MPI_INT, prev, 13, MPI_COMM_WORLD, &r1));
        CHECK_MPI(MPI_Isend(&a, 1, MPI_INT, next, 13, MPI_COMM_WORLD, &r2));
        flag = 0;
        while (!flag)
            CHECK_MPI(MPI_Request_get_status(r1, &flag, &st));
        CHECK(r1 != MPI_REQUEST_NULL, "Request_get_status freed the request");
        CHECK(st.MPI_SOURCE == prev && b == prev, "get_status src %d value %d", st.MPI_SOURCE, b);
        CHECK_MPI(MPI_Test(&r1, &flag, &st));
        CHECK(flag && r1 == MPI_REQUEST_NULL, "Test after completion flag %d", flag);
        CHECK_MPI(MPI_Test(&r1, &flag, &st));
        CHECK(flag == 1, "Test on null request flag %d", flag);
        CHECK_MPI(MPI_Wait(&r2, MPI_STATUS_IGNORE));
        /* Request_free of an active send: the message is still delivered */
        CHECK_MPI(MPI_Isend(&a, 1, MPI_INT, next, 14, MPI_COMM_WORLD, &r2));
        CHECK_MPI(MPI_Request_free(&r2));
        CHECK(r2 == MPI_REQUEST_NULL, "Request_free did not null");
        CHECK_MPI(MPI_Recv(&b, 1, MPI_INT, prev, 14, MPI_COMM_WORLD, &st));
        CHECK(b == prev, "freed-send value %d", b);
    }

    return ct_finish("p2p_nonblocking");
}
