/* Data-movement collectives: Barrier, Bcast, Gather(v), Scatter(v), Allgather(v), Alltoall(v,w).
 * argv[1] selects the flavour: "blocking" (default), "nonblocking" (MPI_I*) or "persistent"
 * (MPI_*_init + Start + Wait + Request_free). Counts 0, 1, odd and large, every root, MPI_IN_PLACE. */
#include "ctest.h"

#define NCOUNTS 4
static const int counts[NCOUNTS] = {0, 1, 7, 65537};
#define BIGBCAST (1 << 20)

static int rank, size;

/* per-rank count for the v-variants, derived from a base count */
static int vcnt(int base, int r)
{
    return base ? base + r % 3 : r % 2;
}

static void fill(int *b, int n, int r, int salt)
{
    int i;
    for (i = 0; i < n; i++)
        b[i] = ct_val(r, i, salt);
}

static void check_seg(const int *b, int n, int r, int salt, int off, const char *what, int base, int root)
{
    int i;
    for (i = 0; i < n; i++)
        if (b[i] != ct_val(r, i + off, salt))
            CHECK(0, "%s base %d root %d: block of rank %d [%d] = %d want %d", what, base, root, r, i, b[i],
                  ct_val(r, i + off, salt));
}

int main(int argc, char **argv)
{
    int ci, root, i, r;
    const char *name = "coll_data";

    ct_init(&argc, &argv);
    rank = ct_world_rank;
    size = ct_world_size;
    ct_parse_mode(argc, argv);

    /* Barrier: nobody leaves before everyone entered. Every rank but 0 sends to rank 0 right
     * after the barrier; rank 0 waits a while before entering and must see no such message. */
    for (i = 0; i < 3; i++) {
        int flag = 0, v;
        MPI_Status st;
        if (rank == 0) {
            double t0 = MPI_Wtime();
            while (MPI_Wtime() - t0 < 0.02) {
                CHECK_MPI(MPI_Iprobe(MPI_ANY_SOURCE, 77, MPI_COMM_WORLD, &flag, &st));
                CHECK(!flag, "rank %d left barrier %d before rank 0 entered it", st.MPI_SOURCE, i);
            }
        }
        if (ct_mode == 0) {
            CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
        } else {
            MPI_Request rq;
            if (ct_mode == 1)
                CHECK_MPI(MPI_Ibarrier(MPI_COMM_WORLD, &rq));
            else {
                CHECK_MPI(MPI_Barrier_init(MPI_COMM_WORLD, MPI_INFO_NULL, &rq));
                CHECK_MPI(MPI_Start(&rq));
            }
            CHECK_MPI(MPI_Wait(&rq, MPI_STATUS_IGNORE));
            if (ct_mode == 2)
                CHECK_MPI(MPI_Request_free(&rq));
        }
        if (rank == 0) {
            for (r = 1; r < size; r++)
                CHECK_MPI(MPI_Recv(&v, 1, MPI_INT, MPI_ANY_SOURCE, 77, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        } else {
            CHECK_MPI(MPI_Send(&i, 1, MPI_INT, 0, 77, MPI_COMM_WORLD));
        }
    }

    /* Bcast: every root, every count, ints; plus one 1M-int broadcast and a derived type */
    {
        int *buf = malloc(sizeof(int) * BIGBCAST);
        CHECK(buf, "malloc");
        for (ci = 0; ci < NCOUNTS; ci++) {
            int n = counts[ci];
            for (root = 0; root < size; root++) {
                if (rank == root)
                    fill(buf, n + 1, root, 1);
                else
                    for (i = 0; i <= n; i++)
                        buf[i] = -1;
                COLL(Bcast, bcast, buf, n, MPI_INT, root, MPI_COMM_WORLD);
                check_seg(buf, n, root, 1, 0, "bcast", n, root);
                if (rank != root)
                    CHECK(buf[n] == -1, "bcast wrote past count %d", n);
            }
        }
        root = size - 1;
        if (rank == root)
            fill(buf, BIGBCAST, root, 2);
        else
            memset(buf, 0, sizeof(int) * BIGBCAST);
        COLL(Bcast, bcast, buf, BIGBCAST, MPI_INT, root, MPI_COMM_WORLD);
        check_seg(buf, BIGBCAST, root, 2, 0, "bcast 1M", BIGBCAST, root);
        /* derived type: every other double of 20 */
        {
            double d[20];
            MPI_Datatype v;
            CHECK_MPI(MPI_Type_vector(10, 1, 2, MPI_DOUBLE, &v));
            CHECK_MPI(MPI_Type_commit(&v));
            for (i = 0; i < 20; i++)
                d[i] = (rank == 0) ? i * 1.5 : -1.0;
            COLL(Bcast, bcast, d, 1, v, 0, MPI_COMM_WORLD);
            for (i = 0; i < 20; i++)
                CHECK(d[i] == ((i % 2 == 0 || rank == 0) ? i * 1.5 : -1.0), "bcast vector d[%d] = %g", i, d[i]);
            CHECK_MPI(MPI_Type_free(&v));
        }
        free(buf);
    }

    /* Gather / Gatherv / Scatter / Scatterv, every root, every count, with and without IN_PLACE */
    for (ci = 0; ci < NCOUNTS; ci++) {
        int n = counts[ci];
        int roots = (n > 1000) ? 1 : size;
        int *sb = malloc(sizeof(int) * (size_t)(n + 3) + 4);
        int *rb = malloc(sizeof(int) * (size_t)(n + 3) * (size_t)size + 8 * (size_t)size + 4);
        int *rc = malloc(sizeof(int) * (size_t)size), *dp = malloc(sizeof(int) * (size_t)size);
        int total, inplace;
        CHECK(sb && rb && rc && dp, "malloc");
        for (root = 0; root < roots; root++) {
            for (inplace = 0; inplace < 2; inplace++) {
                /* Gather */
                fill(sb, n, rank, 3);
                for (i = 0; i < n * size; i++)
                    rb[i] = -1;
                if (rank == root && inplace) {
                    fill(rb + root * n, n, root, 3);
                    COLL(Gather, gather, MPI_IN_PLACE, n, MPI_INT, rb, n, MPI_INT, root, MPI_COMM_WORLD);
                } else {
                    COLL(Gather, gather, sb, n, MPI_INT, rb, n, MPI_INT, root, MPI_COMM_WORLD);
                }
                if (rank == root)
                    for (r = 0; r < size; r++)
                        check_seg(rb + r * n, n, r, 3, 0, inplace ? "gather in-place" : "gather", n, root);

                /* Gatherv: blocks in reverse rank order with 2-int gaps */
                total = 0;
                for (r = size - 1; r >= 0; r--) {
                    rc[r] = vcnt(n, r);
                    dp[r] = total;
                    total += rc[r] + 2;
                }
                fill(sb, vcnt(n, rank), rank, 4);
                for (i = 0; i < total; i++)
                    rb[i] = -1;
                if (rank == root && inplace) {
                    fill(rb + dp[root], rc[root], root, 4);
                    COLL(Gatherv, gatherv, MPI_IN_PLACE, 0, MPI_INT, rb, rc, dp, MPI_INT, root, MPI_COMM_WORLD);
                } else {
                    COLL(Gatherv, gatherv, sb, vcnt(n, rank), MPI_INT, rb, rc, dp, MPI_INT, root, MPI_COMM_WORLD);
                }
                if (rank == root)
                    for (r = 0; r < size; r++) {
                        check_seg(rb + dp[r], rc[r], r, 4, 0, "gatherv", n, root);
                        CHECK(rb[dp[r] + rc[r]] == -1 && rb[dp[r] + rc[r] + 1] == -1, "gatherv wrote into gap");
                    }

                /* Scatter */
                if (rank == root)
                    for (r = 0; r < size; r++)
                        fill(rb + r * n, n, r, 5);
                for (i = 0; i <= n; i++)
                    sb[i] = -1;
                if (rank == root && inplace) {
                    COLL(Scatter, scatter, rb, n, MPI_INT, MPI_IN_PLACE, n, MPI_INT, root, MPI_COMM_WORLD);
                    check_seg(rb + root * n, n, root, 5, 0, "scatter in-place", n, root);
                } else {
                    COLL(Scatter, scatter, rb, n, MPI_INT, sb, n, MPI_INT, root, MPI_COMM_WORLD);
                    check_seg(sb, n, rank, 5, 0, "scatter", n, root);
                    CHECK(sb[n] == -1, "scatter wrote past the count");
                }

                /* Scatterv with the reversed, gapped layout */
                if (rank == root)
                    for (r = 0; r < size; r++)
                        fill(rb + dp[r], rc[r], r, 6);
                for (i = 0; i <= vcnt(n, rank); i++)
                    sb[i] = -1;
                if (rank == root && inplace) {
                    COLL(Scatterv, scatterv, rb, rc, dp, MPI_INT, MPI_IN_PLACE, 0, MPI_INT, root, MPI_COMM_WORLD);
                    check_seg(rb + dp[root], rc[root], root, 6, 0, "scatterv in-place", n, root);
                } else {
                    COLL(Scatterv, scatterv, rb, rc, dp, MPI_INT, sb, vcnt(n, rank), MPI_INT, root, MPI_COMM_WORLD);
                    check_seg(sb, vcnt(n, rank), rank, 6, 0, "scatterv", n, root);
                    CHECK(sb[vcnt(n, rank)] == -1, "scatterv wrote past the count");
                }
            }
        }
        free(sb);
        free(rb);
        free(rc);
        free(dp);
    }

    /* Allgather / Allgatherv / Alltoall / Alltoallv / Alltoallw */
    for (ci = 0; ci < NCOUNTS; ci++) {
        int n = counts[ci];
        size_t cap = (size_t)(n + 3) * (size_t)size + 8 * (size_t)size + 4;
        int *sb = malloc(sizeof(int) * cap), *rb = malloc(sizeof(int) * cap);
        int *rc = malloc(sizeof(int) * (size_t)size), *dp = malloc(sizeof(int) * (size_t)size);
        int *sc = malloc(sizeof(int) * (size_t)size), *sd = malloc(sizeof(int) * (size_t)size);
        int total, inplace, stotal;
        CHECK(sb && rb && rc && dp && sc && sd, "malloc");
        for (inplace = 0; inplace < 2; inplace++) {
            /* Allgather */
            for (i = 0; i < n * size; i++)
                rb[i] = -1;
            if (inplace) {
                fill(rb + rank * n, n, rank, 7);
                COLL(Allgather, allgather, MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, rb, n, MPI_INT, MPI_COMM_WORLD);
            } else {
                fill(sb, n, rank, 7);
                COLL(Allgather, allgather, sb, n, MPI_INT, rb, n, MPI_INT, MPI_COMM_WORLD);
            }
            for (r = 0; r < size; r++)
                check_seg(rb + r * n, n, r, 7, 0, "allgather", n, inplace);

            /* Allgatherv, reversed gapped layout */
            total = 0;
            for (r = size - 1; r >= 0; r--) {
                rc[r] = vcnt(n, r);
                dp[r] = total;
                total += rc[r] + 2;
            }
            for (i = 0; i < total; i++)
                rb[i] = -1;
            if (inplace) {
                fill(rb + dp[rank], rc[rank], rank, 8);
                COLL(Allgatherv, allgatherv, MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, rb, rc, dp, MPI_INT, MPI_COMM_WORLD);
            } else {
                fill(sb, rc[rank], rank, 8);
                COLL(Allgatherv, allgatherv, sb, rc[rank], MPI_INT, rb, rc, dp, MPI_INT, MPI_COMM_WORLD);
            }
            for (r = 0; r < size; r++) {
                check_seg(rb + dp[r], rc[r], r, 8, 0, "allgatherv", n, inplace);
                CHECK(rb[dp[r] + rc[r]] == -1, "allgatherv wrote into gap");
            }

            /* Alltoall: block for rank j from rank r holds ct_val(r, j*n + i, 9) */
            for (i = 0; i < n * size; i++)
                rb[i] = -1;
            if (inplace) {
                fill(rb, n * size, rank, 9);
                COLL(Alltoall, alltoall, MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, rb, n, MPI_INT, MPI_COMM_WORLD);
            } else {
                fill(sb, n * size, rank, 9);
                COLL(Alltoall, alltoall, sb, n, MPI_INT, rb, n, MPI_INT, MPI_COMM_WORLD);
            }
            for (r = 0; r < size; r++)
                check_seg(rb + r * n, n, r, 9, rank * n, "alltoall", n, inplace);

            /* Alltoallv: rank r sends vcnt(n, r + j) ints to rank j; i.e. the count depends on
             * both; receive layout reversed with gaps. Sender packs blocks forward with 1 gap. */
            stotal = 0;
            for (r = 0; r < size; r++) {
                sc[r] = vcnt(n, rank + r);
                sd[r] = stotal;
                stotal += sc[r] + 1;
            }
            total = 0;
            for (r = size - 1; r >= 0; r--) {
                rc[r] = vcnt(n, r + rank);
                dp[r] = total;
                total += rc[r] + 2;
            }
            for (i = 0; i < total; i++)
                rb[i] = -1;
            if (inplace) {
                /* in place: send layout is the receive layout; value for rank j at rb+dp[j] */
                for (r = 0; r < size; r++)
                    for (i = 0; i < rc[r]; i++)
                        rb[dp[r] + i] = ct_val(rank, r * 1000 + i, 10);
                COLL(Alltoallv, alltoallv, MPI_IN_PLACE, NULL, NULL, MPI_DATATYPE_NULL, rb, rc, dp, MPI_INT,
                     MPI_COMM_WORLD);
            } else {
                for (r = 0; r < size; r++)
                    for (i = 0; i < sc[r]; i++)
                        sb[sd[r] + i] = ct_val(rank, r * 1000 + i, 10);
                COLL(Alltoallv, alltoallv, sb, sc, sd, MPI_INT, rb, rc, dp, MPI_INT, MPI_COMM_WORLD);
            }
            for (r = 0; r < size; r++) {
                for (i = 0; i < rc[r]; i++)
                    CHECK(rb[dp[r] + i] == ct_val(r, rank * 1000 + i, 10), "alltoallv n %d from %d [%d] = %d", n,
                          r, i, rb[dp[r] + i]);
                CHECK(rb[dp[r] + rc[r]] == -1, "alltoallv wrote into gap");
            }

            /* Alltoallw: byte displacements, ints to even ranks, the same ints as pairs of
             * shorts... keep it type-matched: rank j's block uses MPI_INT for even j and a
             * contiguous(1,MPI_INT) type for odd j. */
            {
                MPI_Datatype c1, *st = malloc(sizeof(MPI_Datatype) * (size_t)size),
                                 *rt = malloc(sizeof(MPI_Datatype) * (size_t)size);
                int *sbd = malloc(sizeof(int) * (size_t)size), *rbd = malloc(sizeof(int) * (size_t)size);
                CHECK(st && rt && sbd && rbd, "malloc");
                CHECK_MPI(MPI_Type_contiguous(1, MPI_INT, &c1));
                CHECK_MPI(MPI_Type_commit(&c1));
                for (r = 0; r < size; r++) {
                    st[r] = (r % 2) ? c1 : MPI_INT;
                    rt[r] = (rank % 2) ? c1 : MPI_INT;
                    sbd[r] = sd[r] * (int)sizeof(int);
                    rbd[r] = dp[r] * (int)sizeof(int);
                }
                for (i = 0; i < total; i++)
                    rb[i] = -1;
                if (inplace) {
                    for (r = 0; r < size; r++)
                        for (i = 0; i < rc[r]; i++)
                            rb[dp[r] + i] = ct_val(rank, r * 1000 + i, 11);
                    COLL(Alltoallw, alltoallw, MPI_IN_PLACE, NULL, NULL, NULL, rb, rc, rbd, rt, MPI_COMM_WORLD);
                } else {
                    for (r = 0; r < size; r++)
                        for (i = 0; i < sc[r]; i++)
                            sb[sd[r] + i] = ct_val(rank, r * 1000 + i, 11);
                    COLL(Alltoallw, alltoallw, sb, sc, sbd, st, rb, rc, rbd, rt, MPI_COMM_WORLD);
                }
                for (r = 0; r < size; r++) {
                    for (i = 0; i < rc[r]; i++)
                        CHECK(rb[dp[r] + i] == ct_val(r, rank * 1000 + i, 11), "alltoallw n %d from %d [%d] = %d",
                              n, r, i, rb[dp[r] + i]);
                    CHECK(rb[dp[r] + rc[r]] == -1, "alltoallw wrote into gap");
                }
                CHECK_MPI(MPI_Type_free(&c1));
                free(st);
                free(rt);
                free(sbd);
                free(rbd);
            }
        }
        free(sb);
        free(rb);
        free(rc);
        free(dp);
        free(sc);
        free(sd);
    }

    if (ct_mode == 1)
        name = "coll_data nonblocking";
    else if (ct_mode == 2)
        name = "coll_data persistent";
    return ct_finish(name);
}
