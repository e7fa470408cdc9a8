/* Reductions: Reduce, Allreduce, Reduce_scatter(_block), Scan, Exscan, Reduce_local.
 * argv[1]: "blocking" (default), "nonblocking" or "persistent" (see ctest.h COLL).
 * Every predefined op on every C type it applies to, counts 0/1/odd/1M, every root, MPI_IN_PLACE,
 * MINLOC/MAXLOC on MPI_2INT and MPI_DOUBLE_INT (ties pick the lowest index), a commutative user
 * op and a non-commutative user op (2x2 matrix product mod 1009, must be in rank order). */
#include "ctest.h"
#include <stdint.h>
#include <stdbool.h>

static int rank, size;

#define NCNT 3
static const int cnts[NCNT] = {0, 1, 7};

enum { O_SUM, O_PROD, O_MAX, O_MIN, O_BAND, O_BOR, O_BXOR, O_LAND, O_LOR, O_LXOR, O_N };
static const char *opnames[O_N] = {"SUM", "PROD", "MAX", "MIN", "BAND", "BOR", "BXOR", "LAND", "LOR", "LXOR"};
static MPI_Op opv(int o)
{
    switch (o) {
    case O_SUM: return MPI_SUM;
    case O_PROD: return MPI_PROD;
    case O_MAX: return MPI_MAX;
    case O_MIN: return MPI_MIN;
    case O_BAND: return MPI_BAND;
    case O_BOR: return MPI_BOR;
    case O_BXOR: return MPI_BXOR;
    case O_LAND: return MPI_LAND;
    case O_LOR: return MPI_LOR;
    default: return MPI_LXOR;
    }
}

/* input value for (rank r, element i, op o) as a long; fits every type tested */
static long inval(int r, int i, int o, int is_signed)
{
    switch (o) {
    case O_PROD: return ((r + i) % 4 == 0) ? 2 : 1;
    case O_LAND: case O_LOR: case O_LXOR:
        if (i % 4 == 0) return 1 + (r % 2) * 4;  /* all true (nonzero, not only 1) */
        if (i % 4 == 1) return 0;                /* all false */
        return ((r + i) % 3 != 0) ? 3 : 0;
    default:
        return (long)((r * 3 + i * 5) % 16) - (is_signed ? 8 : 0);
    }
}

/* Each integer type: run reduce/allreduce (+in-place) for every op and check. */
#define DEF_INT_TEST(T, SUF, SGN, CB)                                                                        \
    static T comb_##SUF(int o, T a, T b)                                                           \
    {                                                                                               \
        switch (o) {                                                                                \
        case O_SUM: return (T)(a + b);                                                              \
        case O_PROD: return (T)(a * b);                                                             \
        case O_MAX: return a > b ? a : b;                                                           \
        case O_MIN: return a < b ? a : b;                                                           \
        case O_BAND: return (T)((CB)a & (CB)b);                                                          \
        case O_BOR: return (T)((CB)a | (CB)b);                                                           \
        case O_BXOR: return (T)((CB)a ^ (CB)b);                                                          \
        case O_LAND: return (T)(a && b);                                                            \
        case O_LOR: return (T)(a || b);                                                             \
        default: return (T)(!a != !b);                                                              \
        }                                                                                           \
    }                                                                                               \
    static void test_##SUF(MPI_Datatype dt, const char *tn, int nops, int all)                     \
    {                                                                                               \
        T sb[8], rb[9], exp[8];                                                                     \
        int o, ci, i, r, root, inplace;                                                             \
        int sgn = SGN;                                                                              \
        for (o = 0; o < nops; o++) {                                                                \
            for (ci = all ? 0 : NCNT - 1; ci < NCNT; ci++) {                                        \
                int n = cnts[ci];                                                                   \
                for (i = 0; i < n; i++) {                                                           \
                    exp[i] = (T)inval(0, i, o, sgn);                                                \
                    for (r = 1; r < size; r++)                                                      \
                        exp[i] = comb_##SUF(o, exp[i], (T)inval(r, i, o, sgn));                     \
                }                                                                                   \
                for (inplace = all ? 0 : o % 2; inplace < (all ? 2 : o % 2 + 1); inplace++) {       \
                    root = (o + ci + inplace) % size;                                               \
                    for (i = 0; i < n; i++)                                                         \
                        sb[i] = (T)inval(rank, i, o, sgn);                                          \
                    for (i = 0; i <= n; i++)                                                        \
                        rb[i] = (T)99;                                                              \
                    if (inplace && rank == root) {                                                  \
                        memcpy(rb, sb, sizeof(T) * (size_t)n);                                      \
                        COLL(Reduce, reduce, MPI_IN_PLACE, rb, n, dt, opv(o), root, MPI_COMM_WORLD); \
                    } else {                                                                        \
                        COLL(Reduce, reduce, sb, rb, n, dt, opv(o), root, MPI_COMM_WORLD);          \
                    }                                                                               \
                    if (rank == root) {                                                             \
                        for (i = 0; i < n; i++)                                                     \
                            CHECK(rb[i] == exp[i], "Reduce %s %s n %d root %d inplace %d [%d] = %ld want %ld", \
                                  tn, opnames[o], n, root, inplace, i, (long)rb[i], (long)exp[i]);  \
                        CHECK(rb[n] == (T)99, "Reduce %s wrote past count", tn);                   \
                    }                                                                               \
                    for (i = 0; i <= n; i++)                                                        \
                        rb[i] = (T)99;                                                              \
                    if (inplace) {                                                                  \
                        memcpy(rb, sb, sizeof(T) * (size_t)n);                                      \
                        COLL(Allreduce, allreduce, MPI_IN_PLACE, rb, n, dt, opv(o), MPI_COMM_WORLD); \
                    } else {                                                                        \
                        COLL(Allreduce, allreduce, sb, rb, n, dt, opv(o), MPI_COMM_WORLD);          \
                    }                                                                               \
                    for (i = 0; i < n; i++)                                                         \
                        CHECK(rb[i] == exp[i], "Allreduce %s %s n %d inplace %d [%d] = %ld want %ld", tn, \
                              opnames[o], n, inplace, i, (long)rb[i], (long)exp[i]);                \
                    CHECK(rb[n] == (T)99, "Allreduce %s wrote past count", tn);                    \
                }                                                                                   \
            }                                                                                       \
        }                                                                                           \
    }

DEF_INT_TEST(int, int, 1, int)
DEF_INT_TEST(unsigned, uint, 0, unsigned)
DEF_INT_TEST(long, long, 1, long)
DEF_INT_TEST(unsigned long, ulong, 0, unsigned long)
DEF_INT_TEST(short, short, 1, short)
DEF_INT_TEST(unsigned short, ushort, 0, unsigned short)
DEF_INT_TEST(signed char, schar, 1, signed char)
DEF_INT_TEST(unsigned char, uchar, 0, unsigned char)
DEF_INT_TEST(long long, llong, 1, long long)
DEF_INT_TEST(unsigned long long, ullong, 0, unsigned long long)
DEF_INT_TEST(int8_t, i8, 1, int8_t)
DEF_INT_TEST(int16_t, i16, 1, int16_t)
DEF_INT_TEST(int32_t, i32, 1, int32_t)
DEF_INT_TEST(int64_t, i64, 1, int64_t)
DEF_INT_TEST(uint8_t, u8, 0, uint8_t)
DEF_INT_TEST(uint16_t, u16, 0, uint16_t)
DEF_INT_TEST(uint32_t, u32, 0, uint32_t)
DEF_INT_TEST(uint64_t, u64, 0, uint64_t)
/* floating types: only SUM, PROD, MAX, MIN (the first four ops); values are exact */
DEF_INT_TEST(float, float, 1, long)
DEF_INT_TEST(double, double, 1, long)
DEF_INT_TEST(long double, ldouble, 1, long)
/* char is a text type in MPI: no reductions. MPI_C_BOOL: logical ops only (below). */

static void test_bool(void)
{
    bool sb[8], rb[8], exp[8];
    int o, i, r, ci;
    for (o = O_LAND; o <= O_LXOR; o++)
        for (ci = 0; ci < NCNT; ci++) {
            int n = cnts[ci];
            for (i = 0; i < n; i++) {
                exp[i] = inval(0, i, o, 0) != 0;
                for (r = 1; r < size; r++) {
                    bool v = inval(r, i, o, 0) != 0;
                    exp[i] = (o == O_LAND) ? (exp[i] && v) : (o == O_LOR) ? (exp[i] || v) : (exp[i] != v);
                }
                sb[i] = inval(rank, i, o, 0) != 0;
                rb[i] = !exp[i];
            }
            COLL(Allreduce, allreduce, sb, rb, n, MPI_C_BOOL, opv(o), MPI_COMM_WORLD);
            for (i = 0; i < n; i++)
                CHECK(rb[i] == exp[i], "Allreduce C_BOOL %s [%d] = %d want %d", opnames[o], i, rb[i], exp[i]);
        }
}

/* ---- MINLOC / MAXLOC ---- */
struct di {
    double v;
    int i;
};
static void test_loc(void)
{
    int n = 9, i, r, root;
    int s2[18], r2[18];
    struct di sd[9], rd[9];
    for (root = 0; root < size; root++) {
        for (i = 0; i < n; i++) {
            s2[2 * i] = (rank * 7 + i * 3) % 5; /* ties across ranks */
            s2[2 * i + 1] = rank;
            sd[i].v = ((rank * 5 + i) % 4) * 0.5 - 1.0;
            sd[i].i = rank * 10;
        }
        COLL(Reduce, reduce, s2, r2, n, MPI_2INT, MPI_MINLOC, root, MPI_COMM_WORLD);
        if (rank == root)
            for (i = 0; i < n; i++) {
                int bv = 1 << 30, bi = -1;
                for (r = 0; r < size; r++) {
                    int v = (r * 7 + i * 3) % 5;
                    if (v < bv) {
                        bv = v;
                        bi = r;
                    }
                }
                CHECK(r2[2 * i] == bv && r2[2 * i + 1] == bi, "MINLOC 2INT [%d] = (%d,%d) want (%d,%d)", i,
                      r2[2 * i], r2[2 * i + 1], bv, bi);
            }
        COLL(Allreduce, allreduce, sd, rd, n, MPI_DOUBLE_INT, MPI_MAXLOC, MPI_COMM_WORLD);
        for (i = 0; i < n; i++) {
            double bv = -1e300;
            int bi = -1;
            for (r = 0; r < size; r++) {
                double v = ((r * 5 + i) % 4) * 0.5 - 1.0;
                if (v > bv) {
                    bv = v;
                    bi = r * 10;
                }
            }
            CHECK(rd[i].v == bv && rd[i].i == bi, "MAXLOC DOUBLE_INT [%d] = (%g,%d) want (%g,%d)", i, rd[i].v,
                  rd[i].i, bv, bi);
        }
        /* MAXLOC on 2INT and MINLOC on DOUBLE_INT in place */
        for (i = 0; i < n; i++) {
            r2[2 * i] = (rank * 7 + i * 3) % 5;
            r2[2 * i + 1] = rank;
            rd[i] = sd[i];
        }
        COLL(Allreduce, allreduce, MPI_IN_PLACE, r2, n, MPI_2INT, MPI_MAXLOC, MPI_COMM_WORLD);
        COLL(Allreduce, allreduce, MPI_IN_PLACE, rd, n, MPI_DOUBLE_INT, MPI_MINLOC, MPI_COMM_WORLD);
        for (i = 0; i < n; i++) {
            int bv = -1, bi = -1;
            double dv = 1e300;
            int di = -1;
            for (r = 0; r < size; r++) {
                int v = (r * 7 + i * 3) % 5;
                double w = ((r * 5 + i) % 4) * 0.5 - 1.0;
                if (v > bv) {
                    bv = v;
                    bi = r;
                }
                if (w < dv) {
                    dv = w;
                    di = r * 10;
                }
            }
            CHECK(r2[2 * i] == bv && r2[2 * i + 1] == bi, "MAXLOC 2INT [%d] = (%d,%d) want (%d,%d)", i,
                  r2[2 * i], r2[2 * i + 1], bv, bi);
            CHECK(rd[i].v == dv && rd[i].i == di, "MINLOC DOUBLE_INT [%d] = (%g,%d) want (%g,%d)", i, rd[i].v,
                  rd[i].i, dv, di);
        }
    }
}

/* ---- user ops ---- */
static int user_bad_type = 0;
static void my_sum(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    int i;
    int *a = (int *)in, *b = (int *)inout;
    if (*dt != MPI_INT)
        user_bad_type = 1;
    for (i = 0; i < *len; i++)
        b[i] = a[i] + b[i];
}

#define MOD 1009
static MPI_Datatype mat_t;
/* inout = in * inout (in holds the lower ranks' product) */
static void mat_mul(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    int k;
    int *a = (int *)in, *b = (int *)inout;
    if (*dt != mat_t)
        user_bad_type = 1;
    for (k = 0; k < *len; k++, a += 4, b += 4) {
        int c0 = (a[0] * b[0] + a[1] * b[2]) % MOD;
        int c1 = (a[0] * b[1] + a[1] * b[3]) % MOD;
        int c2 = (a[2] * b[0] + a[3] * b[2]) % MOD;
        int c3 = (a[2] * b[1] + a[3] * b[3]) % MOD;
        b[0] = c0;
        b[1] = c1;
        b[2] = c2;
        b[3] = c3;
    }
}
static void mat_of(int r, int k, int *m)
{
    m[0] = (r + 1 + k) % MOD;
    m[1] = 1;
    m[2] = 1;
    m[3] = k % MOD;
}
/* product of mats of ranks lo..hi-1 (in order) for element k; identity if empty */
static void mat_prod(int lo, int hi, int k, int *m)
{
    int r, t[4];
    int len = 1;
    m[0] = 1;
    m[1] = 0;
    m[2] = 0;
    m[3] = 1;
    for (r = lo; r < hi; r++) {
        mat_of(r, k, t);
        /* m = m * t: mat_mul computes inout = in * inout, so in = m, inout = t */
        mat_mul(m, t, &len, &mat_t);
        memcpy(m, t, sizeof t);
    }
}

static void test_user_ops(void)
{
    MPI_Op sumop, matop;
    int flag, i, k, root, n = 5;
    int sb[64], rb[64], want[4];

    CHECK_MPI(MPI_Op_create(my_sum, 1, &sumop));
    CHECK_MPI(MPI_Op_create(mat_mul, 0, &matop));
    CHECK_MPI(MPI_Op_commutative(sumop, &flag));
    CHECK(flag == 1, "Op_commutative(user commutative) = %d", flag);
    CHECK_MPI(MPI_Op_commutative(matop, &flag));
    CHECK(flag == 0, "Op_commutative(user non-commutative) = %d", flag);
    CHECK_MPI(MPI_Op_commutative(MPI_SUM, &flag));
    CHECK(flag == 1, "Op_commutative(MPI_SUM) = %d", flag);
    CHECK_MPI(MPI_Type_contiguous(4, MPI_INT, &mat_t));
    CHECK_MPI(MPI_Type_commit(&mat_t));

    /* commutative user op */
    for (i = 0; i < 13; i++)
        sb[i] = rank * 13 + i;
    COLL(Allreduce, allreduce, sb, rb, 13, MPI_INT, sumop, MPI_COMM_WORLD);
    for (i = 0; i < 13; i++)
        CHECK(rb[i] == 13 * size * (size - 1) / 2 + i * size, "user sum [%d] = %d", i, rb[i]);

    /* non-commutative: Reduce at every root, Allreduce, Scan, Exscan, Reduce_scatter_block */
    for (k = 0; k < n; k++)
        mat_of(rank, k, sb + 4 * k);
    for (root = 0; root < size; root++) {
        memset(rb, 0, sizeof rb);
        COLL(Reduce, reduce, sb, rb, n, mat_t, matop, root, MPI_COMM_WORLD);
        if (rank == root)
            for (k = 0; k < n; k++) {
                mat_prod(0, size, k, want);
                CHECK(memcmp(rb + 4 * k, want, sizeof want) == 0,
                      "non-commutative Reduce root %d elem %d = [%d %d %d %d] want [%d %d %d %d]", root, k,
                      rb[4 * k], rb[4 * k + 1], rb[4 * k + 2], rb[4 * k + 3], want[0], want[1], want[2], want[3]);
            }
    }
    memset(rb, 0, sizeof rb);
    COLL(Allreduce, allreduce, sb, rb, n, mat_t, matop, MPI_COMM_WORLD);
    for (k = 0; k < n; k++) {
        mat_prod(0, size, k, want);
        CHECK(memcmp(rb + 4 * k, want, sizeof want) == 0, "non-commutative Allreduce elem %d", k);
    }
    memcpy(rb, sb, sizeof(int) * 4 * (size_t)n);
    COLL(Allreduce, allreduce, MPI_IN_PLACE, rb, n, mat_t, matop, MPI_COMM_WORLD);
    for (k = 0; k < n; k++) {
        mat_prod(0, size, k, want);
        CHECK(memcmp(rb + 4 * k, want, sizeof want) == 0, "non-commutative Allreduce in place elem %d", k);
    }
    memset(rb, 0, sizeof rb);
    COLL(Scan, scan, sb, rb, n, mat_t, matop, MPI_COMM_WORLD);
    for (k = 0; k < n; k++) {
        mat_prod(0, rank + 1, k, want);
        CHECK(memcmp(rb + 4 * k, want, sizeof want) == 0, "non-commutative Scan elem %d = [%d %d %d %d]", k,
              rb[4 * k], rb[4 * k + 1], rb[4 * k + 2], rb[4 * k + 3]);
    }
    for (i = 0; i < 4 * n; i++)
        rb[i] = -5;
    COLL(Exscan, exscan, sb, rb, n, mat_t, matop, MPI_COMM_WORLD);
    if (rank > 0)
        for (k = 0; k < n; k++) {
            mat_prod(0, rank, k, want);
            CHECK(memcmp(rb + 4 * k, want, sizeof want) == 0, "non-commutative Exscan elem %d", k);
        }
    /* Reduce_scatter_block: each rank gets 1 matrix; input has size matrices */
    if (size <= 16) {
        int *in = malloc(sizeof(int) * 4 * (size_t)size);
        CHECK(in, "malloc");
        for (k = 0; k < size; k++)
            mat_of(rank, k, in + 4 * k);
        COLL(Reduce_scatter_block, reduce_scatter_block, in, rb, 1, mat_t, matop, MPI_COMM_WORLD);
        mat_prod(0, size, rank, want);
        CHECK(memcmp(rb, want, sizeof want) == 0, "non-commutative Reduce_scatter_block");
        free(in);
    }
    /* Reduce_local: inout = in op inout */
    {
        int a[4], b[4], c[4];
        mat_of(1, 2, a);
        mat_of(3, 4, b);
        memcpy(c, b, sizeof c);
        CHECK_MPI(MPI_Reduce_local(a, c, 1, mat_t, matop));
        mat_mul(a, b, &(int){1}, &mat_t);
        CHECK(memcmp(b, c, sizeof c) == 0, "Reduce_local non-commutative operand order");
        a[0] = 5;
        c[0] = 7;
        CHECK_MPI(MPI_Reduce_local(a, c, 1, MPI_INT, MPI_MAX));
        CHECK(c[0] == 7, "Reduce_local MAX = %d", c[0]);
        CHECK_MPI(MPI_Reduce_local(a, c, 1, MPI_INT, MPI_SUM));
        CHECK(c[0] == 12, "Reduce_local SUM = %d", c[0]);
    }

    CHECK(!user_bad_type, "user op got the wrong datatype handle");
    CHECK_MPI(MPI_Op_free(&sumop));
    CHECK_MPI(MPI_Op_free(&matop));
    CHECK(sumop == MPI_OP_NULL && matop == MPI_OP_NULL, "Op_free did not null");
    CHECK_MPI(MPI_Type_free(&mat_t));
}

/* ---- Reduce_scatter, Reduce_scatter_block, Scan, Exscan with SUM on int and double ---- */
static void test_scatter_scan(void)
{
    int n, i, r, base, inplace;
    int *rc = malloc(sizeof(int) * (size_t)size);
    int *sb, *rb;
    double ds[3], dr[3];
    CHECK(rc, "malloc");
    for (base = 0; base < 3; base++) {
        int total = 0, off = 0;
        int blk = (base == 2) ? 7 : base;
        for (r = 0; r < size; r++) {
            rc[r] = (base == 0) ? r % 2 : blk + r % 3;
            total += rc[r];
        }
        for (r = 0; r < rank; r++)
            off += rc[r];
        sb = malloc(sizeof(int) * (size_t)(total + size * blk + 1));
        rb = malloc(sizeof(int) * (size_t)(total + size * blk + 1));
        CHECK(sb && rb, "malloc");
        for (inplace = 0; inplace < 2; inplace++) {
            /* Reduce_scatter */
            for (i = 0; i < total; i++)
                sb[i] = ct_val(rank, i, 1) % 1000;
            if (inplace) {
                memcpy(rb, sb, sizeof(int) * (size_t)total);
                COLL(Reduce_scatter, reduce_scatter, MPI_IN_PLACE, rb, rc, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
            } else {
                rb[rc[rank]] = -77;
                COLL(Reduce_scatter, reduce_scatter, sb, rb, rc, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
                CHECK(rb[rc[rank]] == -77, "Reduce_scatter wrote past its block");
            }
            for (i = 0; i < rc[rank]; i++) {
                int want = 0;
                for (r = 0; r < size; r++)
                    want += ct_val(r, off + i, 1) % 1000;
                CHECK(rb[i] == want, "Reduce_scatter base %d inplace %d [%d] = %d want %d", base, inplace, i, rb[i],
                      want);
            }
            /* Reduce_scatter_block */
            for (i = 0; i < blk * size; i++)
                sb[i] = ct_val(rank, i, 2) % 1000;
            if (inplace) {
                memcpy(rb, sb, sizeof(int) * (size_t)(blk * size));
                COLL(Reduce_scatter_block, reduce_scatter_block, MPI_IN_PLACE, rb, blk, MPI_INT, MPI_SUM,
                     MPI_COMM_WORLD);
            } else {
                COLL(Reduce_scatter_block, reduce_scatter_block, sb, rb, blk, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
            }
            for (i = 0; i < blk; i++) {
                int want = 0;
                for (r = 0; r < size; r++)
                    want += ct_val(r, rank * blk + i, 2) % 1000;
                CHECK(rb[i] == want, "Reduce_scatter_block blk %d inplace %d [%d] = %d want %d", blk, inplace, i,
                      rb[i], want);
            }
            /* Scan / Exscan */
            for (i = 0; i < blk; i++)
                sb[i] = ct_val(rank, i, 3) % 1000;
            for (i = 0; i <= blk; i++)
                rb[i] = -1;
            if (inplace) {
                memcpy(rb, sb, sizeof(int) * (size_t)blk);
                COLL(Scan, scan, MPI_IN_PLACE, rb, blk, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
            } else {
                COLL(Scan, scan, sb, rb, blk, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
            }
            for (i = 0; i < blk; i++) {
                int want = 0;
                for (r = 0; r <= rank; r++)
                    want += ct_val(r, i, 3) % 1000;
                CHECK(rb[i] == want, "Scan blk %d inplace %d [%d] = %d want %d", blk, inplace, i, rb[i], want);
            }
            CHECK(rb[blk] == -1, "Scan wrote past count");
            for (i = 0; i <= blk; i++)
                rb[i] = -1;
            if (inplace) {
                memcpy(rb, sb, sizeof(int) * (size_t)blk);
                COLL(Exscan, exscan, MPI_IN_PLACE, rb, blk, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
            } else {
                COLL(Exscan, exscan, sb, rb, blk, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
            }
            if (rank > 0)
                for (i = 0; i < blk; i++) {
                    int want = 0;
                    for (r = 0; r < rank; r++)
                        want += ct_val(r, i, 3) % 1000;
                    CHECK(rb[i] == want, "Exscan blk %d inplace %d [%d] = %d want %d", blk, inplace, i, rb[i], want);
                }
            CHECK(rb[blk] == -1, "Exscan wrote past count");
        }
        free(sb);
        free(rb);
    }
    /* Scan on doubles with MAX */
    for (i = 0; i < 3; i++)
        ds[i] = (rank * 7 + i) % 5 + 0.5;
    COLL(Scan, scan, ds, dr, 3, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    for (i = 0; i < 3; i++) {
        double want = -1;
        for (r = 0; r <= rank; r++)
            if ((r * 7 + i) % 5 + 0.5 > want)
                want = (r * 7 + i) % 5 + 0.5;
        CHECK(dr[i] == want, "Scan MAX double [%d] = %g want %g", i, dr[i], want);
    }
    (void)n;
    free(rc);
}

/* ---- large: 1M ints Allreduce; 256K ints Reduce MAX and 256K doubles Allreduce in place ---- */
static void test_large(void)
{
    int n = 1 << 20, i;
    int *sb = malloc(sizeof(int) * (size_t)n), *rb = malloc(sizeof(int) * (size_t)n);
    double *d = malloc(sizeof(double) * (size_t)n);
    int root = size / 2;
    CHECK(sb && rb && d, "malloc");
    for (i = 0; i < n; i++) {
        sb[i] = (i % 1000) + rank;
        d[i] = (double)(i % 97) * (rank + 1);
    }
    COLL(Allreduce, allreduce, sb, rb, n, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    for (i = 0; i < n; i++)
        if (rb[i] != (i % 1000) * size + size * (size - 1) / 2)
            CHECK(0, "large Allreduce [%d] = %d", i, rb[i]);
    n = 1 << 18;
    memset(rb, 0, sizeof(int) * (size_t)n);
    COLL(Reduce, reduce, sb, rb, n, MPI_INT, MPI_MAX, root, MPI_COMM_WORLD);
    if (rank == root)
        for (i = 0; i < n; i++)
            if (rb[i] != (i % 1000) + size - 1)
                CHECK(0, "large Reduce MAX [%d] = %d", i, rb[i]);
    COLL(Allreduce, allreduce, MPI_IN_PLACE, d, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    for (i = 0; i < n; i++)
        if (d[i] != (double)(i % 97) * size * (size + 1) / 2)
            CHECK(0, "large Allreduce double [%d] = %g", i, d[i]);
    free(sb);
    free(rb);
    free(d);
}

int main(int argc, char **argv)
{
    char name[64];
    ct_init(&argc, &argv);
    ct_parse_mode(argc, argv);
    rank = ct_world_rank;
    size = ct_world_size;

    test_int(MPI_INT, "MPI_INT", O_N, 1);
    test_uint(MPI_UNSIGNED, "MPI_UNSIGNED", O_N, 0);
    test_long(MPI_LONG, "MPI_LONG", O_N, 0);
    test_ulong(MPI_UNSIGNED_LONG, "MPI_UNSIGNED_LONG", O_N, 0);
    test_short(MPI_SHORT, "MPI_SHORT", O_N, 0);
    test_ushort(MPI_UNSIGNED_SHORT, "MPI_UNSIGNED_SHORT", O_N, 0);
    test_schar(MPI_SIGNED_CHAR, "MPI_SIGNED_CHAR", O_N, 0);
    test_uchar(MPI_UNSIGNED_CHAR, "MPI_UNSIGNED_CHAR", O_N, 0);
    test_llong(MPI_LONG_LONG, "MPI_LONG_LONG", O_N, 0);
    test_ullong(MPI_UNSIGNED_LONG_LONG, "MPI_UNSIGNED_LONG_LONG", O_N, 0);
    test_i8(MPI_INT8_T, "MPI_INT8_T", O_N, 0);
    test_i16(MPI_INT16_T, "MPI_INT16_T", O_N, 0);
    test_i32(MPI_INT32_T, "MPI_INT32_T", O_N, 0);
    test_i64(MPI_INT64_T, "MPI_INT64_T", O_N, 0);
    test_u8(MPI_UINT8_T, "MPI_UINT8_T", O_N, 0);
    test_u16(MPI_UINT16_T, "MPI_UINT16_T", O_N, 0);
    test_u32(MPI_UINT32_T, "MPI_UINT32_T", O_N, 0);
    test_u64(MPI_UINT64_T, "MPI_UINT64_T", O_N, 0);
    test_float(MPI_FLOAT, "MPI_FLOAT", O_MIN + 1, 0);
    test_double(MPI_DOUBLE, "MPI_DOUBLE", O_MIN + 1, 1);
    test_ldouble(MPI_LONG_DOUBLE, "MPI_LONG_DOUBLE", O_MIN + 1, 0);
    test_bool();
    test_loc();
    test_user_ops();
    test_scatter_scan();
    test_large();

    snprintf(name, sizeof name, "coll_reduce %s", ct_mode_name());
    return ct_finish(ct_mode == 0 ? "coll_reduce" : name);
}
