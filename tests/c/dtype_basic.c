/* Datatype constructors and queries: contiguous, vector, hvector, indexed, hindexed,
 * indexed_block, hindexed_block, struct, resized, dup; Type_size, get_extent, get_true_extent,
 * Get_address/Aint_add/diff, get_envelope/contents, fixed-width and C_BOOL sizes, set/get name. */
#include "ctest.h"
#include <stdint.h>
#include <stdbool.h>

static void expect_ext(MPI_Datatype t, const char *what, int size, long lb, long ext, long tlb, long text)
{
    int s = -1;
    MPI_Aint a, b, c, d;
    MPI_Count cs;
    CHECK_MPI(MPI_Type_size(t, &s));
    CHECK_MPI(MPI_Type_get_extent(t, &a, &b));
    CHECK_MPI(MPI_Type_get_true_extent(t, &c, &d));
    CHECK(s == size, "%s: size %d want %d", what, s, size);
    CHECK(a == lb && b == ext, "%s: lb/extent %ld/%ld want %ld/%ld", what, (long)a, (long)b, lb, ext);
    CHECK(c == tlb && d == text, "%s: true lb/extent %ld/%ld want %ld/%ld", what, (long)c, (long)d, tlb, text);
    CHECK_MPI(MPI_Type_size_c(t, &cs));
    CHECK(cs == size, "%s: size_c %ld", what, (long)cs);
}

static void expect_env(MPI_Datatype t, const char *what, int comb, int ni, int na, int nd)
{
    int a, b, c, d;
    CHECK_MPI(MPI_Type_get_envelope(t, &a, &b, &c, &d));
    CHECK(d == comb && a == ni && b == na && c == nd,
          "%s: envelope comb %d ints %d addrs %d types %d, want %d %d %d %d",
          what, d, a, b, c, comb, ni, na, nd);
}

int main(int argc, char **argv)
{
    MPI_Datatype t, t2;
    int i;

    ct_init(&argc, &argv);

    /* predefined sizes */
    {
        struct {
            MPI_Datatype t;
            int size;
            const char *name;
        } pre[] = {
            {MPI_CHAR, 1, "MPI_CHAR"},          {MPI_SHORT, (int)sizeof(short), "MPI_SHORT"},
            {MPI_INT, (int)sizeof(int), "MPI_INT"}, {MPI_LONG, (int)sizeof(long), "MPI_LONG"},
            {MPI_LONG_LONG, (int)sizeof(long long), "MPI_LONG_LONG"},
            {MPI_FLOAT, (int)sizeof(float), "MPI_FLOAT"}, {MPI_DOUBLE, (int)sizeof(double), "MPI_DOUBLE"},
            {MPI_LONG_DOUBLE, (int)sizeof(long double), "MPI_LONG_DOUBLE"},
            {MPI_BYTE, 1, "MPI_BYTE"},          {MPI_C_BOOL, (int)sizeof(bool), "MPI_C_BOOL"},
            {MPI_INT8_T, 1, "MPI_INT8_T"},      {MPI_INT16_T, 2, "MPI_INT16_T"},
            {MPI_INT32_T, 4, "MPI_INT32_T"},    {MPI_INT64_T, 8, "MPI_INT64_T"},
            {MPI_UINT8_T, 1, "MPI_UINT8_T"},    {MPI_UINT16_T, 2, "MPI_UINT16_T"},
            {MPI_UINT32_T, 4, "MPI_UINT32_T"},  {MPI_UINT64_T, 8, "MPI_UINT64_T"},
            {MPI_AINT, (int)sizeof(MPI_Aint), "MPI_AINT"}, {MPI_OFFSET, (int)sizeof(MPI_Offset), "MPI_OFFSET"},
            {MPI_COUNT, (int)sizeof(MPI_Count), "MPI_COUNT"}, {MPI_WCHAR, (int)sizeof(wchar_t), "MPI_WCHAR"},
            {MPI_2INT, 2 * (int)sizeof(int), "MPI_2INT"},
            {MPI_DOUBLE_INT, (int)(sizeof(double) + sizeof(int)), "MPI_DOUBLE_INT"},
        };
        for (i = 0; i < (int)(sizeof pre / sizeof pre[0]); i++) {
            int s = -1;
            char name[MPI_MAX_OBJECT_NAME];
            int len = -1;
            CHECK_MPI(MPI_Type_size(pre[i].t, &s));
            CHECK(s == pre[i].size, "size of %s = %d want %d", pre[i].name, s, pre[i].size);
            CHECK_MPI(MPI_Type_get_name(pre[i].t, name, &len));
            CHECK((strcmp(name, pre[i].name) == 0 ||
                   (pre[i].t == MPI_LONG_LONG && strcmp(name, "MPI_LONG_LONG_INT") == 0)) &&
                      len == (int)strlen(name), "name of %s is '%s'", pre[i].name, name);
            expect_env(pre[i].t, pre[i].name, MPI_COMBINER_NAMED, 0, 0, 0);
        }
        /* MPI_DOUBLE_INT extent is that of struct { double; int; } */
        {
            MPI_Aint lb, ext;
            struct {
                double d;
                int i;
            } di;
            CHECK_MPI(MPI_Type_get_extent(MPI_DOUBLE_INT, &lb, &ext));
            CHECK(lb == 0 && ext == (MPI_Aint)sizeof di, "DOUBLE_INT extent %ld", (long)ext);
        }
    }

    /* contiguous */
    CHECK_MPI(MPI_Type_contiguous(5, MPI_INT, &t));
    expect_ext(t, "contiguous(5,int)", 20, 0, 20, 0, 20);
    expect_env(t, "contiguous", MPI_COMBINER_CONTIGUOUS, 1, 0, 1);
    {
        int ints[1];
        MPI_Aint addrs[1];
        MPI_Datatype types[1];
        CHECK_MPI(MPI_Type_get_contents(t, 1, 0, 1, ints, addrs, types));
        CHECK(ints[0] == 5 && types[0] == MPI_INT, "contiguous contents %d", ints[0]);
    }
    CHECK_MPI(MPI_Type_free(&t));

    /* vector(3 blocks of 2, stride 4) of int: size 24, extent (2*4+2)*4 = 40 */
    CHECK_MPI(MPI_Type_vector(3, 2, 4, MPI_INT, &t));
    expect_ext(t, "vector", 24, 0, 40, 0, 40);
    expect_env(t, "vector", MPI_COMBINER_VECTOR, 3, 0, 1);
    {
        int ints[3];
        MPI_Datatype types[1];
        MPI_Aint dummy[1];
        CHECK_MPI(MPI_Type_get_contents(t, 3, 0, 1, ints, dummy, types));
        CHECK(ints[0] == 3 && ints[1] == 2 && ints[2] == 4 && types[0] == MPI_INT, "vector contents %d %d %d",
              ints[0], ints[1], ints[2]);
    }
    /* negative stride: blocks at 0, -4, -8 ints: lb -32, extent 40 */
    CHECK_MPI(MPI_Type_vector(3, 2, -4, MPI_INT, &t2));
    expect_ext(t2, "vector negative stride", 24, -32, 40, -32, 40);
    CHECK_MPI(MPI_Type_free(&t2));
    CHECK_MPI(MPI_Type_free(&t));

    /* hvector: 3 blocks of 2 doubles, stride 40 bytes */
    CHECK_MPI(MPI_Type_create_hvector(3, 2, 40, MPI_DOUBLE, &t));
    expect_ext(t, "hvector", 48, 0, 96, 0, 96);
    expect_env(t, "hvector", MPI_COMBINER_HVECTOR, 2, 1, 1);
    CHECK_MPI(MPI_Type_free(&t));

    /* indexed: blocks (2 at 1), (3 at 6) of int: size 20, lb 4, ub 36 */
    {
        int bl[2] = {2, 3}, dp[2] = {1, 6};
        CHECK_MPI(MPI_Type_indexed(2, bl, dp, MPI_INT, &t));
        expect_ext(t, "indexed", 20, 4, 32, 4, 32);
        expect_env(t, "indexed", MPI_COMBINER_INDEXED, 5, 0, 1);
        {
            int ints[5];
            MPI_Datatype types[1];
            MPI_Aint dummy[1];
            CHECK_MPI(MPI_Type_get_contents(t, 5, 0, 1, ints, dummy, types));
            CHECK(ints[0] == 2 && ints[1] == 2 && ints[2] == 3 && ints[3] == 1 && ints[4] == 6, "indexed contents");
        }
        CHECK_MPI(MPI_Type_free(&t));
    }
    /* hindexed */
    {
        int bl[2] = {1, 2};
        MPI_Aint dp[2] = {16, 0};
        CHECK_MPI(MPI_Type_create_hindexed(2, bl, dp, MPI_DOUBLE, &t));
        expect_ext(t, "hindexed", 24, 0, 24, 0, 24);
        expect_env(t, "hindexed", MPI_COMBINER_HINDEXED, 3, 2, 1);
        CHECK_MPI(MPI_Type_free(&t));
    }
    /* indexed_block / hindexed_block */
    {
        int dp[3] = {4, 0, 10};
        MPI_Aint hdp[3] = {8, 0, 40};
        CHECK_MPI(MPI_Type_create_indexed_block(3, 2, dp, MPI_SHORT, &t));
        expect_ext(t, "indexed_block", 12, 0, 24, 0, 24);
        expect_env(t, "indexed_block", MPI_COMBINER_INDEXED_BLOCK, 5, 0, 1);
        CHECK_MPI(MPI_Type_free(&t));
        CHECK_MPI(MPI_Type_create_hindexed_block(3, 1, hdp, MPI_INT, &t));
        expect_ext(t, "hindexed_block", 12, 0, 44, 0, 44);
        expect_env(t, "hindexed_block", MPI_COMBINER_HINDEXED_BLOCK, 2, 3, 1);
        CHECK_MPI(MPI_Type_free(&t));
    }
    /* struct { char; (pad) double; int; } with natural alignment: extent rounds up */
    {
        struct s {
            char c;
            double d;
            int i;
        } v;
        int bl[3] = {1, 1, 1};
        MPI_Aint dp[3], base;
        MPI_Datatype ty[3] = {MPI_CHAR, MPI_DOUBLE, MPI_INT};
        CHECK_MPI(MPI_Get_address(&v, &base));
        CHECK_MPI(MPI_Get_address(&v.c, &dp[0]));
        CHECK_MPI(MPI_Get_address(&v.d, &dp[1]));
        CHECK_MPI(MPI_Get_address(&v.i, &dp[2]));
        for (i = 0; i < 3; i++)
            dp[i] = MPI_Aint_diff(dp[i], base);
        CHECK(MPI_Aint_add(base, dp[2]) == (MPI_Aint)(MPI_Aint_add(base, 0) + dp[2]), "Aint_add");
        CHECK_MPI(MPI_Type_create_struct(3, bl, dp, ty, &t));
        expect_ext(t, "struct", 13, 0, (long)sizeof(struct s), 0, (long)(dp[2] + 4));
        expect_env(t, "struct", MPI_COMBINER_STRUCT, 4, 3, 3);
        {
            int ints[4];
            MPI_Aint addrs[3];
            MPI_Datatype types[3];
            CHECK_MPI(MPI_Type_get_contents(t, 4, 3, 3, ints, addrs, types));
            CHECK(ints[0] == 3 && ints[1] == 1 && addrs[1] == dp[1] && types[0] == MPI_CHAR && types[1] == MPI_DOUBLE &&
                      types[2] == MPI_INT,
                  "struct contents");
        }
        /* resized: lb -8, extent 64 */
        CHECK_MPI(MPI_Type_create_resized(t, -8, 64, &t2));
        expect_ext(t2, "resized", 13, -8, 64, 0, (long)(dp[2] + 4));
        expect_env(t2, "resized", MPI_COMBINER_RESIZED, 0, 2, 1);
        {
            int dummy[1];
            MPI_Aint addrs[2];
            MPI_Datatype types[1];
            CHECK_MPI(MPI_Type_get_contents(t2, 0, 2, 1, dummy, addrs, types));
            CHECK(addrs[0] == -8 && addrs[1] == 64, "resized contents %ld %ld", (long)addrs[0], (long)addrs[1]);
            /* returned derived types must be freed by the caller */
            CHECK_MPI(MPI_Type_free(&types[0]));
        }
        /* contiguous of the resized type uses its extent */
        {
            MPI_Datatype c;
            CHECK_MPI(MPI_Type_contiguous(3, t2, &c));
            expect_ext(c, "contiguous(resized)", 39, -8, 192, 0, 128 + (long)(dp[2] + 4));
            CHECK_MPI(MPI_Type_free(&c));
        }
        CHECK_MPI(MPI_Type_free(&t2));
        /* dup: same layout, DUP combiner, freeing the original keeps the dup usable */
        CHECK_MPI(MPI_Type_dup(t, &t2));
        expect_env(t2, "dup", MPI_COMBINER_DUP, 0, 0, 1);
        CHECK_MPI(MPI_Type_free(&t));
        expect_ext(t2, "dup after free of original", 13, 0, (long)sizeof(struct s), 0, (long)(dp[2] + 4));
        CHECK_MPI(MPI_Type_commit(&t2));
        CHECK_MPI(MPI_Type_free(&t2));
    }
    /* subarray: 3x4 block at (1,2) of a 6x8 int array, C order: extent is the whole array */
    {
        int sizes[2] = {6, 8}, subs[2] = {3, 4}, starts[2] = {1, 2};
        CHECK_MPI(MPI_Type_create_subarray(2, sizes, subs, starts, MPI_ORDER_C, MPI_INT, &t));
        expect_ext(t, "subarray C", 48, 0, 192, (1 * 8 + 2) * 4, ((3 - 1) * 8 + 4) * 4);
        expect_env(t, "subarray", MPI_COMBINER_SUBARRAY, 3 * 2 + 2, 0, 1);
        CHECK_MPI(MPI_Type_free(&t));
        /* Fortran order: first index fastest; block (1,2) of 6x8 means element offset 1 + 2*6 */
        CHECK_MPI(MPI_Type_create_subarray(2, sizes, subs, starts, MPI_ORDER_FORTRAN, MPI_INT, &t));
        expect_ext(t, "subarray Fortran", 48, 0, 192, (1 + 2 * 6) * 4, ((4 - 1) * 6 + 3) * 4);
        CHECK_MPI(MPI_Type_free(&t));
    }
    /* names on derived types */
    {
        char name[MPI_MAX_OBJECT_NAME];
        int len;
        CHECK_MPI(MPI_Type_contiguous(2, MPI_INT, &t));
        CHECK_MPI(MPI_Type_get_name(t, name, &len));
        CHECK(len == 0 && name[0] == 0, "unnamed derived type has name '%s'", name);
        CHECK_MPI(MPI_Type_set_name(t, "pair of ints"));
        CHECK_MPI(MPI_Type_get_name(t, name, &len));
        CHECK(strcmp(name, "pair of ints") == 0 && len == 12, "type name '%s'", name);
        CHECK_MPI(MPI_Type_free(&t));
    }
    /* zero-count types */
    CHECK_MPI(MPI_Type_contiguous(0, MPI_INT, &t));
    expect_ext(t, "contiguous(0)", 0, 0, 0, 0, 0);
    CHECK_MPI(MPI_Type_commit(&t));
    CHECK_MPI(MPI_Type_free(&t));

    return ct_finish("dtype_basic");
}
