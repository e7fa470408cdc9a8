/* Unit tests for bench_util.h (no MPI):
 *     cc -std=c99 -O1 -Wall -o test_bench_util benches/test_bench_util.c -lm && ./test_bench_util */
#include <stdio.h>
#include "bench_util.h"

static int failures, checks;

#define CHECK(cond) do { checks++; if (!(cond)) { failures++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); } } while (0)
#define CLOSE(a, b) (fabs((a) - (b)) < 1e-12)

static void test_parse_size(void)
{
    size_t v = 0;
    CHECK(bu_parse_size("8", &v) == 0 && v == 8);
    CHECK(bu_parse_size("0", &v) == 0 && v == 0);
    CHECK(bu_parse_size("1K", &v) == 0 && v == 1024);
    CHECK(bu_parse_size("64k", &v) == 0 && v == 65536);
    CHECK(bu_parse_size("128M", &v) == 0 && v == 128u << 20);
    CHECK(bu_parse_size("2G", &v) == 0 && v == (size_t)2 << 30);
    CHECK(bu_parse_size("4MiB", &v) == 0 && v == 4u << 20);
    CHECK(bu_parse_size("16KB", &v) == 0 && v == 16384);
    CHECK(bu_parse_size("", &v) == -1);
    CHECK(bu_parse_size("M", &v) == -1);
    CHECK(bu_parse_size("12X", &v) == -1);
    CHECK(bu_parse_size("1.5M", &v) == -1);
    CHECK(bu_parse_size("-8", &v) == -1);
    CHECK(bu_parse_size("99999999999999999999G", &v) == -1);
}

static void test_sweep(void)
{
    size_t s[64];
    int n = bu_sweep(8, 128u << 20, 2, s, 64);
    CHECK(n == 25);                          /* 2^3 .. 2^27 */
    CHECK(s[0] == 8 && s[1] == 16 && s[24] == 128u << 20);
    n = bu_sweep(8, 100, 4, s, 64);          /* 8 32 (128 > 100) */
    CHECK(n == 2 && s[0] == 8 && s[1] == 32);
    n = bu_sweep(1024, 1024, 2, s, 64);
    CHECK(n == 1 && s[0] == 1024);
    n = bu_sweep(0, 4, 2, s, 64);            /* 0 1 2 4 */
    CHECK(n == 4 && s[0] == 0 && s[1] == 1 && s[3] == 4);
    CHECK(bu_sweep(8, 4, 2, s, 64) == -1);  /* max < min */
    CHECK(bu_sweep(8, 64, 1, s, 64) == -1); /* factor < 2 */
    n = bu_sweep(1, SIZE_MAX, 2, s, 64);     /* capped, no overflow */
    CHECK(n == 64 || (n > 0 && s[n - 1] > SIZE_MAX / 2));
    n = bu_sweep(1, 1u << 20, 2, s, 5);
    CHECK(n == 5 && s[4] == 16);
}

static void test_busbw(void)
{
    CHECK(CLOSE(bu_busbw_factor(BU_OP_ALLREDUCE, 2), 1.0));
    CHECK(CLOSE(bu_busbw_factor(BU_OP_ALLREDUCE, 8), 1.75));
    CHECK(CLOSE(bu_busbw_factor(BU_OP_ALLREDUCE, 1), 0.0));
    CHECK(CLOSE(bu_busbw_factor(BU_OP_REDUCE_SCATTER, 4), 0.75));
    CHECK(CLOSE(bu_busbw_factor(BU_OP_ALLGATHER, 8), 0.875));
    CHECK(CLOSE(bu_busbw_factor(BU_OP_ALLTOALL, 2), 0.5));
    CHECK(CLOSE(bu_busbw_factor(BU_OP_ALLTOALLV, 16), 15.0 / 16));
    CHECK(CLOSE(bu_busbw_factor(BU_OP_BCAST, 8), 1.0));
    CHECK(CLOSE(bu_busbw_factor(BU_OP_REDUCE, 8), 1.0));
    CHECK(CLOSE(bu_busbw_factor(BU_OP_SENDRECV, 8), 1.0));
    CHECK(CLOSE(bu_busbw_factor(BU_OP_PINGPONG, 2), 1.0));
    /* algbw in GB/s: 1 GB in 1 s, 128 MiB in 10 ms */
    CHECK(CLOSE(bu_gbps(1e9, 1.0), 1.0));
    CHECK(CLOSE(bu_gbps(134217728.0, 0.01), 13.4217728));
    CHECK(bu_gbps(8, 0) == 0);
}

static void test_counts(void)
{
    size_t blk;
    CHECK(bu_counts(BU_OP_ALLREDUCE, 1024, BU_FLOAT, 4, &blk) == 256 && blk == 256);
    CHECK(bu_counts(BU_OP_ALLGATHER, 1024, BU_FLOAT, 4, &blk) == 256 && blk == 64);
    CHECK(bu_counts(BU_OP_ALLTOALL, 1000, BU_INT8, 3, &blk) == 999 && blk == 333);
    CHECK(bu_counts(BU_OP_REDUCE_SCATTER, 8, BU_DOUBLE, 2, &blk) == 0 && blk == 0);
    CHECK(bu_counts(BU_OP_PINGPONG, 7, BU_INT32, 2, &blk) == 1);
}

static void test_types(void)
{
    CHECK(bu_type_from_name("float") == BU_FLOAT);
    CHECK(bu_type_from_name("int") == BU_INT32);
    CHECK(bu_type_from_name("fp64") == BU_DOUBLE);
    CHECK(bu_type_from_name("bogus") == -1);
    CHECK(bu_redop_from_name("max") == BU_MAX);
    CHECK(bu_redop_from_name("avg") == -1);
    CHECK(bu_op_from_name("reduce_scatter") == BU_OP_REDUCE_SCATTER);
    CHECK(bu_op_from_name("firstcall") == BU_OP_FIRSTCALL);
    CHECK(bu_op_from_name("gatherv") == BU_OP_GATHERV && bu_op_blocked(BU_OP_GATHERV));
    CHECK(bu_op_from_name("scatterv") == BU_OP_SCATTERV && bu_op_blocked(BU_OP_SCATTERV));
    CHECK(bu_op_from_name("allreduc") == -1);
    for (int t = 0; t < BU_NTYPES; t++) {
        unsigned char b[16] = { 0 };
        bu_store((bu_type)t, b, 1, 100.0);
        CHECK(bu_load((bu_type)t, b, 1) == 100.0);
    }
    CHECK(bu_as_type(BU_INT8, 130.0) == -126.0);   /* two's complement wrap */
    CHECK(bu_as_type(BU_UINT8, 256.0) == 0.0);
    CHECK(bu_as_type(BU_UINT8, -1.0) == 255.0);
}

/* Simulate an allreduce of nranks ranks the way a library would, in the
 * element type, and check the helpers agree with it and detect corruption. */
static void test_reduce_validation(void)
{
    enum { N = 1000 };
    for (int t = 0; t < BU_NTYPES; t++)
        for (int op = 0; op < BU_NREDOPS; op++)
            for (int nr = 1; nr <= 9; nr += 4) {
                unsigned char acc[N * 8], in[N * 8];
                bu_fill_input((bu_type)t, (bu_redop)op, 0, acc, N, 0);
                for (int r = 1; r < nr; r++) {
                    bu_fill_input((bu_type)t, (bu_redop)op, r, in, N, 0);
                    for (size_t i = 0; i < N; i++)
                        bu_store((bu_type)t, acc, i,
                                 bu_apply((bu_redop)op, bu_load((bu_type)t, acc, i), bu_load((bu_type)t, in, i)));
                }
                CHECK(bu_check_reduce((bu_type)t, (bu_redop)op, nr, acc, N, 0) == 0);
                /* wrong rank count or offset is detected (needs varying inputs) */
                if (nr > 1 && op != BU_PROD) CHECK(bu_check_reduce((bu_type)t, (bu_redop)op, nr - 1, acc, N, 0) > 0);
                CHECK(bu_check_reduce((bu_type)t, (bu_redop)op, nr, acc + 3 * bu_type_sizes[t], N - 3, 0) > 0);
                bu_store((bu_type)t, acc, 17, -1.0);
                bu_store((bu_type)t, acc, 500, -1.0);
                CHECK(bu_check_reduce((bu_type)t, (bu_redop)op, nr, acc, N, 0) == 2);
            }
    /* spot values: sum over 4 ranks at index 0 = 0+3+1+4 = 8; at index 3: 3+1+4+2 + 4*1 = 14 */
    CHECK(bu_expected(BU_FLOAT, BU_SUM, 4, 3) == 14.0);
    CHECK(bu_expected(BU_FLOAT, BU_SUM, 4, 0) == 8.0);
    CHECK(bu_expected(BU_INT32, BU_PROD, 17, 0) == 4.0);   /* ranks 0 and 16 give 2 */
    CHECK(bu_expected(BU_INT32, BU_MAX, 2, 1) == 20.0);    /* max(13, 20) */
    CHECK(bu_expected(BU_INT32, BU_MIN, 2, 1) == 13.0);
    /* int8 sum of 80 ranks wraps like the library's int8 arithmetic */
    double e = bu_expected(BU_INT8, BU_SUM, 80, 0);
    double s = 0;
    for (int r = 0; r < 80; r++) s += bu_input(BU_SUM, r, 0);
    CHECK(s > 127 && e == bu_as_type(BU_INT8, s));
}

static void test_pattern_validation(void)
{
    enum { N = 300 };
    /* an alltoall of 3 ranks with blocks of 100 elements */
    int nr = 3;
    size_t blk = N / 3;
    double in[3][N], out[3][N];
    for (int r = 0; r < nr; r++) bu_fill_pattern(BU_DOUBLE, r, in[r], N, 0);
    for (int r = 0; r < nr; r++)
        for (int p = 0; p < nr; p++)
            memcpy(&out[r][p * blk], &in[p][r * blk], blk * sizeof(double));
    for (int r = 0; r < nr; r++) {
        size_t w = 0;
        for (int p = 0; p < nr; p++) w += bu_check_pattern(BU_DOUBLE, p, &out[r][p * blk], blk, r * blk);
        CHECK(w == 0);
    }
    /* swapped blocks are detected */
    size_t w = 0;
    for (int p = 0; p < nr; p++) w += bu_check_pattern(BU_DOUBLE, p, &out[0][p * blk], blk, 1 * blk);
    CHECK(w > 0);
    /* patterns of different ranks differ at every index */
    for (size_t i = 0; i < 200; i++) CHECK(bu_pattern(0, i) != bu_pattern(1, i));
    int8_t b[N];
    bu_fill_pattern(BU_INT8, 5, b, N, 7);
    CHECK(bu_check_pattern(BU_INT8, 5, b, N, 7) == 0);
    CHECK(bu_check_pattern(BU_INT8, 4, b, N, 7) == N);
}

static void test_stats(void)
{
    double v[] = { 5, 1, 4, 2, 3 };
    CHECK(bu_min(v, 5) == 1);
    CHECK(bu_mean(v, 5) == 3);
    CHECK(bu_median(v, 5) == 3);
    double w[] = { 10, 1, 7, 2 };
    CHECK(bu_median(w, 4) == 4.5);
    double one[] = { 42 };
    CHECK(bu_median(one, 1) == 42 && bu_min(one, 1) == 42);
    CHECK(bu_median(NULL, 0) == 0);
}

int main(void)
{
    test_parse_size();
    test_sweep();
    test_busbw();
    test_counts();
    test_types();
    test_reduce_validation();
    test_pattern_validation();
    test_stats();
    printf("test_bench_util: %d passed, %d failed\n", checks - failures, failures);
    return failures != 0;
}
