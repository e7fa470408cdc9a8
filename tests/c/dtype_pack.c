/* Pack/Unpack/Pack_size: several items into one buffer with a running position, sent as
 * MPI_PACKED around the ring and unpacked; packing a vector equals packing its elements;
 * fixed-width integer and MPI_C_BOOL messages. */
#include "ctest.h"
#include <stdint.h>
#include <stdbool.h>

int main(int argc, char **argv)
{
    int rank, size, next, prev, i, pos, psize, s1, s2, s3, count;
    MPI_Status st;

    ct_init(&argc, &argv);
    rank = ct_world_rank;
    size = ct_world_size;
    next = (rank + 1) % size;
    prev = (rank + size - 1) % size;

    {
        int ia[5];
        double da[3];
        char ca[7];
        double m[4][3];
        MPI_Datatype col;
        char *buf, *rbuf;
        for (i = 0; i < 5; i++)
            ia[i] = rank * 10 + i;
        for (i = 0; i < 3; i++)
            da[i] = rank + i * 0.125;
        memcpy(ca, "gpumpi", 7);
        ca[0] = (char)('a' + rank % 26);
        for (i = 0; i < 12; i++)
            m[i / 3][i % 3] = rank * 100 + i;
        CHECK_MPI(MPI_Type_vector(4, 1, 3, MPI_DOUBLE, &col));
        CHECK_MPI(MPI_Type_commit(&col));

        CHECK_MPI(MPI_Pack_size(5, MPI_INT, MPI_COMM_WORLD, &s1));
        CHECK_MPI(MPI_Pack_size(3, MPI_DOUBLE, MPI_COMM_WORLD, &s2));
        CHECK_MPI(MPI_Pack_size(7, MPI_CHAR, MPI_COMM_WORLD, &s3));
        CHECK(s1 >= 20 && s2 >= 24 && s3 >= 7, "Pack_size %d %d %d", s1, s2, s3);
        CHECK_MPI(MPI_Pack_size(1, col, MPI_COMM_WORLD, &psize));
        CHECK(psize >= 32, "Pack_size(vector) %d", psize);
        psize += s1 + s2 + s3;
        buf = malloc((size_t)psize);
        rbuf = malloc((size_t)psize);
        CHECK(buf && rbuf, "malloc");

        pos = 0;
        CHECK_MPI(MPI_Pack(ia, 5, MPI_INT, buf, psize, &pos, MPI_COMM_WORLD));
        CHECK(pos > 0 && pos <= s1, "position after ints %d", pos);
        CHECK_MPI(MPI_Pack(da, 3, MPI_DOUBLE, buf, psize, &pos, MPI_COMM_WORLD));
        CHECK_MPI(MPI_Pack(ca, 7, MPI_CHAR, buf, psize, &pos, MPI_COMM_WORLD));
        CHECK_MPI(MPI_Pack(&m[0][1], 1, col, buf, psize, &pos, MPI_COMM_WORLD));
        CHECK(pos <= psize, "packed %d bytes > Pack_size total %d", pos, psize);

        CHECK_MPI(MPI_Sendrecv(buf, pos, MPI_PACKED, next, 1, rbuf, psize, MPI_PACKED, prev, 1, MPI_COMM_WORLD, &st));
        CHECK_MPI(MPI_Get_count(&st, MPI_PACKED, &count));
        CHECK(count == pos, "packed message count %d want %d", count, pos);

        {
            int ri[5];
            double rd[3], rcol[4];
            char rc[7];
            int upos = 0;
            CHECK_MPI(MPI_Unpack(rbuf, count, &upos, ri, 5, MPI_INT, MPI_COMM_WORLD));
            CHECK_MPI(MPI_Unpack(rbuf, count, &upos, rd, 3, MPI_DOUBLE, MPI_COMM_WORLD));
            CHECK_MPI(MPI_Unpack(rbuf, count, &upos, rc, 7, MPI_CHAR, MPI_COMM_WORLD));
            /* the vector was packed; unpack it as 4 contiguous doubles (same type signature) */
            CHECK_MPI(MPI_Unpack(rbuf, count, &upos, rcol, 4, MPI_DOUBLE, MPI_COMM_WORLD));
            CHECK(upos == count, "unpacked %d of %d bytes", upos, count);
            for (i = 0; i < 5; i++)
                CHECK(ri[i] == prev * 10 + i, "unpacked int[%d] = %d", i, ri[i]);
            for (i = 0; i < 3; i++)
                CHECK(rd[i] == prev + i * 0.125, "unpacked double[%d] = %g", i, rd[i]);
            CHECK(rc[0] == (char)('a' + prev % 26) && strcmp(rc + 1, "pumpi") == 0, "unpacked chars '%s'", rc);
            for (i = 0; i < 4; i++)
                CHECK(rcol[i] == prev * 100 + i * 3 + 1, "unpacked column[%d] = %g", i, rcol[i]);
        }
        /* a packed buffer received with the matching types directly (MPI_PACKED send -> typed recv) */
        {
            int ri[5];
            pos = 0;
            CHECK_MPI(MPI_Pack(ia, 5, MPI_INT, buf, psize, &pos, MPI_COMM_WORLD));
            CHECK_MPI(MPI_Sendrecv(buf, pos, MPI_PACKED, next, 2, ri, 5, MPI_INT, prev, 2, MPI_COMM_WORLD, &st));
            for (i = 0; i < 5; i++)
                CHECK(ri[i] == prev * 10 + i, "packed->int [%d] = %d", i, ri[i]);
        }
        /* unpack into a strided type */
        {
            double mm[4][3];
            int upos = 0;
            for (i = 0; i < 12; i++)
                mm[i / 3][i % 3] = -1;
            pos = 0;
            CHECK_MPI(MPI_Pack(da, 3, MPI_DOUBLE, buf, psize, &pos, MPI_COMM_WORLD));
            CHECK_MPI(MPI_Pack(da, 1, MPI_DOUBLE, buf, psize, &pos, MPI_COMM_WORLD));
            CHECK_MPI(MPI_Unpack(buf, pos, &upos, &mm[0][2], 1, col, MPI_COMM_WORLD));
            for (i = 0; i < 12; i++) {
                double want = (i % 3 == 2) ? ((i / 3 < 3) ? da[i / 3] : da[0]) : -1;
                CHECK(mm[i / 3][i % 3] == want, "unpack into vector [%d] = %g want %g", i, mm[i / 3][i % 3], want);
            }
        }
        /* Pack into a too-small buffer fails with an error (under ERRORS_RETURN) */
        {
            char small[64]; /* only 4 bytes are offered */
            int rc, cls;
            CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
            pos = 0;
            rc = MPI_Pack(ia, 5, MPI_INT, small, 4, &pos, MPI_COMM_WORLD);
            MPI_Error_class(rc, &cls);
            CHECK(rc != MPI_SUCCESS && (cls == MPI_ERR_TRUNCATE || cls == MPI_ERR_ARG || cls == MPI_ERR_OTHER),
                  "Pack overflow returned %d class %d", rc, cls);
            CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
        }
        CHECK_MPI(MPI_Type_free(&col));
        free(buf);
        free(rbuf);
    }

    /* fixed-width and bool messages */
    {
        int8_t a8[3] = {-128, 0, 127}, r8[3];
        uint16_t a16[2] = {65535, 1}, r16[2];
        int64_t a64[2] = {-((int64_t)1 << 62), 1234567890123LL}, r64[2];
        uint64_t u64 = 0xFEDCBA9876543210ULL + (uint64_t)rank, ru64;
        bool b[4] = {true, false, true, true}, rb[4];
        b[3] = (rank % 2) == 0;
        CHECK_MPI(MPI_Sendrecv(a8, 3, MPI_INT8_T, next, 3, r8, 3, MPI_INT8_T, prev, 3, MPI_COMM_WORLD, &st));
        CHECK_MPI(MPI_Sendrecv(a16, 2, MPI_UINT16_T, next, 4, r16, 2, MPI_UINT16_T, prev, 4, MPI_COMM_WORLD, &st));
        CHECK_MPI(MPI_Sendrecv(a64, 2, MPI_INT64_T, next, 5, r64, 2, MPI_INT64_T, prev, 5, MPI_COMM_WORLD, &st));
        CHECK_MPI(MPI_Sendrecv(&u64, 1, MPI_UINT64_T, next, 6, &ru64, 1, MPI_UINT64_T, prev, 6, MPI_COMM_WORLD, &st));
        CHECK_MPI(MPI_Sendrecv(b, 4, MPI_C_BOOL, next, 7, rb, 4, MPI_C_BOOL, prev, 7, MPI_COMM_WORLD, &st));
        CHECK(r8[0] == -128 && r8[1] == 0 && r8[2] == 127, "int8 %d %d %d", r8[0], r8[1], r8[2]);
        CHECK(r16[0] == 65535 && r16[1] == 1, "uint16 %u %u", r16[0], r16[1]);
        CHECK(r64[0] == a64[0] && r64[1] == a64[1], "int64");
        CHECK(ru64 == 0xFEDCBA9876543210ULL + (uint64_t)prev, "uint64");
        CHECK(rb[0] == true && rb[1] == false && rb[2] == true && rb[3] == ((prev % 2) == 0), "bool %d %d %d %d", rb[0],
              rb[1], rb[2], rb[3]);
        CHECK_MPI(MPI_Get_count(&st, MPI_C_BOOL, &count));
        CHECK(count == 4, "bool count %d", count);
    }
    return ct_finish("dtype_pack");
}
