/* MPI-4 large-count (_c) interfaces with MPI_Count counts and MPI_Aint displacements: Send_c/
 * Recv_c/Isend_c/Irecv_c, Get_count_c/Get_elements_c, Bcast_c, Allreduce_c, Gatherv_c,
 * Alltoallv_c, Type_contiguous_c, Type_get_extent_c/true_extent_c, Pack_c/Unpack_c. Counts
 * are small (the interfaces, not 2 GiB buffers, are under test). */
#include "ctest.h"

int main(int argc, char **argv)
{
    int rank, size, next, prev, i, r;
    MPI_Status st;
    MPI_Count cnt;

    ct_init(&argc, &argv);
    rank = ct_world_rank;
    size = ct_world_size;
    next = (rank + 1) % size;
    prev = (rank + size - 1) % size;

    {
        double s[33], rbuf[40];
        MPI_Request rq[2];
        for (i = 0; i < 33; i++)
            s[i] = rank + i * 0.25;
        for (i = 0; i < 40; i++)
            rbuf[i] = -1;
        CHECK_MPI(MPI_Irecv_c(rbuf, (MPI_Count)40, MPI_DOUBLE, prev, 1, MPI_COMM_WORLD, &rq[0]));
        CHECK_MPI(MPI_Isend_c(s, (MPI_Count)33, MPI_DOUBLE, next, 1, MPI_COMM_WORLD, &rq[1]));
        CHECK_MPI(MPI_Wait(&rq[0], &st));
        CHECK_MPI(MPI_Wait(&rq[1], MPI_STATUS_IGNORE));
        CHECK_MPI(MPI_Get_count_c(&st, MPI_DOUBLE, &cnt));
        CHECK(cnt == 33, "Get_count_c %lld", (long long)cnt);
        CHECK_MPI(MPI_Get_elements_c(&st, MPI_DOUBLE, &cnt));
        CHECK(cnt == 33, "Get_elements_c %lld", (long long)cnt);
        for (i = 0; i < 33; i++)
            CHECK(rbuf[i] == prev + i * 0.25, "Isend_c/Irecv_c [%d] = %g", i, rbuf[i]);
        CHECK(rbuf[33] == -1, "wrote past count");
        if (size > 1) {
            if (rank % 2 == 0) {
                CHECK_MPI(MPI_Send_c(s, (MPI_Count)5, MPI_DOUBLE, next, 2, MPI_COMM_WORLD));
                CHECK_MPI(MPI_Recv_c(rbuf, (MPI_Count)5, MPI_DOUBLE, prev, 2, MPI_COMM_WORLD, &st));
            } else {
                CHECK_MPI(MPI_Recv_c(rbuf, (MPI_Count)5, MPI_DOUBLE, prev, 2, MPI_COMM_WORLD, &st));
                CHECK_MPI(MPI_Send_c(s, (MPI_Count)5, MPI_DOUBLE, next, 2, MPI_COMM_WORLD));
            }
            for (i = 0; i < 5; i++)
                CHECK(rbuf[i] == prev + i * 0.25, "Send_c/Recv_c [%d] = %g", i, rbuf[i]);
        }
    }

    /* Type_contiguous_c + extent/size _c */
    {
        MPI_Datatype t;
        MPI_Count lb, ext, tlb, text, sz;
        CHECK_MPI(MPI_Type_contiguous_c((MPI_Count)6, MPI_INT, &t));
        CHECK_MPI(MPI_Type_commit(&t));
        CHECK_MPI(MPI_Type_get_extent_c(t, &lb, &ext));
        CHECK_MPI(MPI_Type_get_true_extent_c(t, &tlb, &text));
        CHECK_MPI(MPI_Type_size_c(t, &sz));
        CHECK(lb == 0 && ext == 24 && tlb == 0 && text == 24 && sz == 24, "contiguous_c extents %lld %lld %lld",
              (long long)ext, (long long)text, (long long)sz);
        {
            int v[6];
            for (i = 0; i < 6; i++)
                v[i] = (rank == 0) ? 100 + i : -1;
            CHECK_MPI(MPI_Bcast_c(v, (MPI_Count)1, t, 0, MPI_COMM_WORLD));
            for (i = 0; i < 6; i++)
                CHECK(v[i] == 100 + i, "Bcast_c [%d] = %d", i, v[i]);
        }
        CHECK_MPI(MPI_Type_free(&t));
    }

    /* Allreduce_c */
    {
        long long a[3], b[3];
        for (i = 0; i < 3; i++)
            a[i] = (long long)rank * (i + 1);
        CHECK_MPI(MPI_Allreduce_c(a, b, (MPI_Count)3, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD));
        for (i = 0; i < 3; i++)
            CHECK(b[i] == (long long)(i + 1) * size * (size - 1) / 2, "Allreduce_c [%d] = %lld", i, b[i]);
    }

    /* Gatherv_c and Alltoallv_c with MPI_Count counts and MPI_Aint displacements */
    {
        MPI_Count *rc = malloc(sizeof(MPI_Count) * (size_t)size), *sc = malloc(sizeof(MPI_Count) * (size_t)size);
        MPI_Aint *rd = malloc(sizeof(MPI_Aint) * (size_t)size), *sd = malloc(sizeof(MPI_Aint) * (size_t)size);
        int *sb = malloc(sizeof(int) * (size_t)(3 * size + 3)), *rb = malloc(sizeof(int) * (size_t)(4 * size + 3));
        int root = size - 1, off = 0;
        CHECK(rc && sc && rd && sd && sb && rb, "malloc");
        for (r = 0; r < size; r++) {
            rc[r] = r % 3;
            rd[r] = off;
            off += (int)rc[r] + 1;
        }
        for (i = 0; i < 3; i++)
            sb[i] = rank * 10 + i;
        for (i = 0; i < off; i++)
            rb[i] = -1;
        CHECK_MPI(MPI_Gatherv_c(sb, (MPI_Count)(rank % 3), MPI_INT, rb, rc, rd, MPI_INT, root, MPI_COMM_WORLD));
        if (rank == root)
            for (r = 0; r < size; r++) {
                for (i = 0; i < (int)rc[r]; i++)
                    CHECK(rb[rd[r] + i] == r * 10 + i, "Gatherv_c from %d [%d] = %d", r, i, rb[rd[r] + i]);
                CHECK(rb[rd[r] + rc[r]] == -1, "Gatherv_c wrote into gap");
            }
        /* alltoallv_c: 2 ints to every rank */
        for (r = 0; r < size; r++) {
            sc[r] = rc[r] = 2;
            sd[r] = 2 * r;
            rd[r] = 2 * (size - 1 - r); /* reversed */
            sb[2 * r] = rank * 100 + r;
            sb[2 * r + 1] = -(rank * 100 + r);
        }
        CHECK_MPI(MPI_Alltoallv_c(sb, sc, sd, MPI_INT, rb, rc, rd, MPI_INT, MPI_COMM_WORLD));
        for (r = 0; r < size; r++)
            CHECK(rb[rd[r]] == r * 100 + rank && rb[rd[r] + 1] == -(r * 100 + rank), "Alltoallv_c from %d: %d %d", r,
                  rb[rd[r]], rb[rd[r] + 1]);
        free(rc);
        free(sc);
        free(rd);
        free(sd);
        free(sb);
        free(rb);
    }

    /* Pack_c / Unpack_c / Pack_size_c */
    {
        short v[5] = {1, -2, 3, -4, 5}, w[5];
        char buf[64];
        MPI_Count ps, pos = 0, upos = 0;
        CHECK_MPI(MPI_Pack_size_c((MPI_Count)5, MPI_SHORT, MPI_COMM_WORLD, &ps));
        CHECK(ps >= 10 && ps <= 64, "Pack_size_c %lld", (long long)ps);
        CHECK_MPI(MPI_Pack_c(v, (MPI_Count)5, MPI_SHORT, buf, (MPI_Count)sizeof buf, &pos, MPI_COMM_WORLD));
        CHECK(pos > 0 && pos <= ps, "Pack_c position %lld", (long long)pos);
        CHECK_MPI(MPI_Unpack_c(buf, pos, &upos, w, (MPI_Count)5, MPI_SHORT, MPI_COMM_WORLD));
        CHECK(upos == pos && memcmp(v, w, sizeof v) == 0, "Unpack_c");
    }
    return ct_finish("bigcount_c");
}
