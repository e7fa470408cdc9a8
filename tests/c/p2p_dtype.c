/* Derived-datatype messages between ranks: vector, indexed, struct with gaps (and a resized
 * struct array); sender and receiver use different but type-map-compatible layouts. */
#include "ctest.h"

struct rec {
    char c;      /* gap after */
    double d;
    int i[3];    /* gap after on some ABIs */
    short s;
};

int main(int argc, char **argv)
{
    int rank, size, next, prev, i, j, count;
    MPI_Status st;

    ct_init(&argc, &argv);
    rank = ct_world_rank;
    size = ct_world_size;
    next = (rank + 1) % size;
    prev = (rank + size - 1) % size;

    /* vector: column 2 of a 10x6 matrix, received as 10 contiguous doubles */
    {
        double m[10][6], col[12];
        MPI_Datatype vcol;
        for (i = 0; i < 10; i++)
            for (j = 0; j < 6; j++)
                m[i][j] = rank * 1000 + i * 10 + j;
        for (i = 0; i < 12; i++)
            col[i] = -1;
        CHECK_MPI(MPI_Type_vector(10, 1, 6, MPI_DOUBLE, &vcol));
        CHECK_MPI(MPI_Type_commit(&vcol));
        CHECK_MPI(MPI_Sendrecv(&m[0][2], 1, vcol, next, 1, col, 12, MPI_DOUBLE, prev, 1, MPI_COMM_WORLD, &st));
        CHECK_MPI(MPI_Get_count(&st, MPI_DOUBLE, &count));
        CHECK(count == 10, "vector count %d", count);
        for (i = 0; i < 10; i++)
            CHECK(col[i] == prev * 1000 + i * 10 + 2, "vector col[%d] = %g", i, col[i]);
        CHECK(col[10] == -1, "vector wrote past");
        /* and back: contiguous into a vector on the receiver */
        for (i = 0; i < 10; i++)
            for (j = 0; j < 6; j++)
                m[i][j] = -1;
        for (i = 0; i < 10; i++)
            col[i] = rank + i * 0.5;
        CHECK_MPI(MPI_Sendrecv(col, 10, MPI_DOUBLE, next, 2, &m[0][4], 1, vcol, prev, 2, MPI_COMM_WORLD, &st));
        CHECK_MPI(MPI_Get_count(&st, vcol, &count));
        CHECK(count == 1, "vector recv count %d", count);
        for (i = 0; i < 10; i++)
            for (j = 0; j < 6; j++)
                CHECK(m[i][j] == (j == 4 ? prev + i * 0.5 : -1), "vector recv m[%d][%d] = %g", i, j, m[i][j]);
        /* two vectors in one message: count 2 of a vector uses the extent */
        CHECK_MPI(MPI_Type_free(&vcol));
    }

    /* indexed: irregular blocks both sides, different displacements */
    {
        int sbl[3] = {2, 1, 3}, sdisp[3] = {0, 5, 9};
        int rbl[2] = {4, 2}, rdisp[2] = {1, 10};
        int sb[12], rb[14];
        int want[6];
        MPI_Datatype sidx, ridx;
        for (i = 0; i < 12; i++)
            sb[i] = ct_val(rank, i, 3);
        for (i = 0; i < 14; i++)
            rb[i] = -1;
        CHECK_MPI(MPI_Type_indexed(3, sbl, sdisp, MPI_INT, &sidx));
        CHECK_MPI(MPI_Type_indexed(2, rbl, rdisp, MPI_INT, &ridx));
        CHECK_MPI(MPI_Type_commit(&sidx));
        CHECK_MPI(MPI_Type_commit(&ridx));
        CHECK_MPI(MPI_Sendrecv(sb, 1, sidx, next, 3, rb, 1, ridx, prev, 3, MPI_COMM_WORLD, &st));
        want[0] = ct_val(prev, 0, 3);
        want[1] = ct_val(prev, 1, 3);
        want[2] = ct_val(prev, 5, 3);
        want[3] = ct_val(prev, 9, 3);
        want[4] = ct_val(prev, 10, 3);
        want[5] = ct_val(prev, 11, 3);
        CHECK(rb[0] == -1 && rb[5] == -1 && rb[9] == -1 && rb[12] == -1, "indexed wrote into gaps");
        for (i = 0; i < 4; i++)
            CHECK(rb[1 + i] == want[i], "indexed rb[%d] = %d want %d", 1 + i, rb[1 + i], want[i]);
        for (i = 0; i < 2; i++)
            CHECK(rb[10 + i] == want[4 + i], "indexed rb[%d] = %d", 10 + i, rb[10 + i]);
        CHECK_MPI(MPI_Type_free(&sidx));
        CHECK_MPI(MPI_Type_free(&ridx));
    }

    /* struct with gaps, an array of 5 records, resized to sizeof(struct rec) */
    {
        struct rec s[5], r[5];
        MPI_Datatype tmp, trec;
        int bl[4] = {1, 1, 3, 1};
        MPI_Aint disp[4], base;
        MPI_Datatype types[4] = {MPI_CHAR, MPI_DOUBLE, MPI_INT, MPI_SHORT};
        MPI_Aint lb, ext;
        CHECK_MPI(MPI_Get_address(&s[0], &base));
        CHECK_MPI(MPI_Get_address(&s[0].c, &disp[0]));
        CHECK_MPI(MPI_Get_address(&s[0].d, &disp[1]));
        CHECK_MPI(MPI_Get_address(&s[0].i, &disp[2]));
        CHECK_MPI(MPI_Get_address(&s[0].s, &disp[3]));
        for (i = 0; i < 4; i++)
            disp[i] = MPI_Aint_diff(disp[i], base);
        CHECK_MPI(MPI_Type_create_struct(4, bl, disp, types, &tmp));
        CHECK_MPI(MPI_Type_create_resized(tmp, 0, (MPI_Aint)sizeof(struct rec), &trec));
        CHECK_MPI(MPI_Type_commit(&trec));
        CHECK_MPI(MPI_Type_get_extent(trec, &lb, &ext));
        CHECK(lb == 0 && ext == (MPI_Aint)sizeof(struct rec), "struct extent %ld", (long)ext);
        memset(s, 0x5A, sizeof s);
        memset(r, 0x77, sizeof r);
        for (i = 0; i < 5; i++) {
            s[i].c = (char)('A' + rank % 26);
            s[i].d = rank + i / 4.0;
            s[i].i[0] = rank;
            s[i].i[1] = i;
            s[i].i[2] = rank * i;
            s[i].s = (short)(i - rank);
        }
        CHECK_MPI(MPI_Sendrecv(s, 5, trec, next, 4, r, 5, trec, prev, 4, MPI_COMM_WORLD, &st));
        CHECK_MPI(MPI_Get_count(&st, trec, &count));
        CHECK(count == 5, "struct count %d", count);
        CHECK_MPI(MPI_Get_elements(&st, trec, &count));
        CHECK(count == 5 * 6, "struct elements %d", count);
        for (i = 0; i < 5; i++) {
            CHECK(r[i].c == (char)('A' + prev % 26) && r[i].d == prev + i / 4.0 && r[i].i[0] == prev &&
                      r[i].i[1] == i && r[i].i[2] == prev * i && r[i].s == (short)(i - prev),
                  "struct rec %d: %c %g %d %d %d %d", i, r[i].c, r[i].d, r[i].i[0], r[i].i[1], r[i].i[2], r[i].s);
            /* gap bytes between c and d were not written */
            CHECK(((unsigned char *)&r[i])[1] == 0x77, "struct gap written in rec %d", i);
        }
        /* receive the struct stream as plain elements: type signatures match per element */
        {
            char rc[5];
            double rd[5];
            memset(rc, 0, sizeof rc);
            /* send only the double of each record via a sub-struct: use a resized double */
            MPI_Datatype dd, ddr;
            MPI_Aint dispd = disp[1];
            int one = 1;
            CHECK_MPI(MPI_Type_create_hindexed(1, &one, &dispd, MPI_DOUBLE, &dd));
            CHECK_MPI(MPI_Type_create_resized(dd, 0, (MPI_Aint)sizeof(struct rec), &ddr));
            CHECK_MPI(MPI_Type_commit(&ddr));
            CHECK_MPI(MPI_Sendrecv(s, 5, ddr, next, 5, rd, 5, MPI_DOUBLE, prev, 5, MPI_COMM_WORLD, &st));
            for (i = 0; i < 5; i++)
                CHECK(rd[i] == prev + i / 4.0, "resized double stream [%d] = %g", i, rd[i]);
            (void)rc;
            CHECK_MPI(MPI_Type_free(&dd));
            CHECK_MPI(MPI_Type_free(&ddr));
        }
        CHECK_MPI(MPI_Type_free(&tmp));
        CHECK_MPI(MPI_Type_free(&trec));
    }

    /* subarray: send the 3x4 interior block at (1,2) of a 6x8 array into a 3x4 contiguous array,
     * then back into a different position (2,0) of a zeroed 6x8 array */
    {
        int a[6][8], blk[12], b[6][8];
        int sizes[2] = {6, 8}, subs[2] = {3, 4}, st1[2] = {1, 2}, st2[2] = {2, 0};
        MPI_Datatype sa, sb;
        for (i = 0; i < 48; i++)
            a[i / 8][i % 8] = ct_val(rank, i, 7);
        CHECK_MPI(MPI_Type_create_subarray(2, sizes, subs, st1, MPI_ORDER_C, MPI_INT, &sa));
        CHECK_MPI(MPI_Type_create_subarray(2, sizes, subs, st2, MPI_ORDER_C, MPI_INT, &sb));
        CHECK_MPI(MPI_Type_commit(&sa));
        CHECK_MPI(MPI_Type_commit(&sb));
        CHECK_MPI(MPI_Sendrecv(a, 1, sa, next, 7, blk, 12, MPI_INT, prev, 7, MPI_COMM_WORLD, &st));
        for (i = 0; i < 12; i++)
            CHECK(blk[i] == ct_val(prev, (1 + i / 4) * 8 + 2 + i % 4, 7), "subarray blk[%d] = %d", i, blk[i]);
        memset(b, 0, sizeof b);
        CHECK_MPI(MPI_Sendrecv(a, 1, sa, next, 8, b, 1, sb, prev, 8, MPI_COMM_WORLD, &st));
        for (i = 0; i < 48; i++) {
            int row = i / 8, c = i % 8, want = 0;
            if (row >= 2 && row < 5 && c < 4)
                want = ct_val(prev, (1 + row - 2) * 8 + 2 + c, 7);
            CHECK(b[row][c] == want, "subarray to subarray b[%d][%d] = %d want %d", row, c, b[row][c], want);
        }
        CHECK_MPI(MPI_Type_free(&sa));
        CHECK_MPI(MPI_Type_free(&sb));
    }

    /* large vector (about 4 MiB of payload) nonblocking, strided both sides */
    {
        int nblk = 1 << 18;
        int *sb = malloc(sizeof(int) * (size_t)nblk * 4), *rb = malloc(sizeof(int) * (size_t)nblk * 4);
        MPI_Datatype v;
        MPI_Request rq[2];
        CHECK(sb && rb, "malloc");
        for (i = 0; i < nblk * 4; i++) {
            sb[i] = ct_val(rank, i, 6);
            rb[i] = -1;
        }
        CHECK_MPI(MPI_Type_vector(nblk, 2, 4, MPI_INT, &v));
        CHECK_MPI(MPI_Type_commit(&v));
        CHECK_MPI(MPI_Irecv(rb + 1, 1, v, prev, 6, MPI_COMM_WORLD, &rq[0]));
        CHECK_MPI(MPI_Isend(sb, 1, v, next, 6, MPI_COMM_WORLD, &rq[1]));
        CHECK_MPI(MPI_Waitall(2, rq, MPI_STATUSES_IGNORE));
        for (i = 0; i < nblk * 4; i++) {
            int k = i - 1, want = -1;
            if (k >= 0 && k % 4 < 2)
                want = ct_val(prev, k, 6);
            if (rb[i] != want)
                CHECK(0, "big vector rb[%d] = %d want %d", i, rb[i], want);
        }
        CHECK_MPI(MPI_Type_free(&v));
        free(sb);
        free(rb);
    }
    (void)size;
    return ct_finish("p2p_dtype");
}
