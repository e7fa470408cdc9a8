/* Reductions: Reduce, Allreduce, Reduce_scatter(_block), Scan, Exscan, Reduce_local.
 * argv[1]: "blocking" (default), "nonblocking" or "persistent" (see ctest.h COLL).
 * Every predefined op on every C type it applies to, counts 0/1/odd/1M, every root, MPI_IN_PLACE,
 * MINLOC/MAXLOC on MPI_2INT and MPI_DOUBLE_INT (ties pick the lowest index), a commutative user
 * op and a non-commutative user op (2x2 matrix product mod 1009, must be in rank order). */
#include "ctest.h"
#include <stdint.h>
#include <stdbool.h>
#include <float.h>
#include <math.h>
#include <limits.h>

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

/* ---- edge values: high bit of unsigned types, negative extremes, wraparound, IEEE specials ---- */
/* Each integer type: the table below (0, 1, the high bit alone, all bits but the high one, all bits,
 * high bit + 1, 0x55.., 0xAA.., 2) read as T: for unsigned types 40000-like values above the signed
 * range, for signed ones MIN, MAX, -1 and MIN+1. Expected results are computed in unsigned long long
 * and truncated (integer ops wrap), MAX/MIN compare as T. */
#define EDGE_K 9
#define DEF_EDGE_INT(T, UT, SUF)                                                                          \
    static T edge_comb_##SUF(int o, T a, T b)                                                             \
    {                                                                                                     \
        unsigned long long x = (unsigned long long)(UT)a, y = (unsigned long long)(UT)b;                 \
        switch (o) {                                                                                      \
        case O_SUM: return (T)(UT)(x + y);                                                                \
        case O_PROD: return (T)(UT)(x * y);                                                               \
        case O_MAX: return a > b ? a : b;                                                                 \
        case O_MIN: return a < b ? a : b;                                                                 \
        case O_BAND: return (T)(UT)(x & y);                                                               \
        case O_BOR: return (T)(UT)(x | y);                                                                \
        case O_BXOR: return (T)(UT)(x ^ y);                                                               \
        case O_LAND: return (T)(a && b);                                                                  \
        case O_LOR: return (T)(a || b);                                                                   \
        default: return (T)(!a != !b);                                                                    \
        }                                                                                                 \
    }                                                                                                     \
    static void edge_##SUF(MPI_Datatype dt, const char *tn)                                              \
    {                                                                                                     \
        const UT hi = (UT)((UT)1 << (sizeof(T) * 8 - 1)), ones = (UT)~(UT)0;                              \
        const UT e[EDGE_K] = {0, 1, hi, (UT)(hi - 1), ones, (UT)(hi + 1), (UT)(ones / 3),                 \
                              (UT)(ones / 3 * 2), 2};                                                     \
        T ev[EDGE_K], in[EDGE_K * EDGE_K], io[EDGE_K * EDGE_K], want[EDGE_K * EDGE_K];                    \
        T sb[300], rb[301];                                                                               \
        unsigned char mis[EDGE_K * EDGE_K * sizeof(T) + 1], mio[EDGE_K * EDGE_K * sizeof(T) + 1];         \
        int o, a, b, i, r, ni;                                                                            \
        const int ns[2] = {2 * EDGE_K, 300};                                                              \
        for (a = 0; a < EDGE_K; a++)                                                                      \
            ev[a] = (T)e[a];                                                                              \
        for (o = 0; o < O_N; o++) {                                                                       \
            /* Reduce_local on every ordered pair, aligned and one byte off alignment */                  \
            for (a = 0; a < EDGE_K; a++)                                                                  \
                for (b = 0; b < EDGE_K; b++) {                                                            \
                    in[a * EDGE_K + b] = ev[a];                                                           \
                    io[a * EDGE_K + b] = ev[b];                                                           \
                    want[a * EDGE_K + b] = edge_comb_##SUF(o, ev[a], ev[b]);                              \
                }                                                                                         \
            memcpy(mis + 1, in, sizeof in);                                                               \
            memcpy(mio + 1, io, sizeof io);                                                               \
            CHECK_MPI(MPI_Reduce_local(in, io, EDGE_K * EDGE_K, dt, opv(o)));                             \
            CHECK_MPI(MPI_Reduce_local(mis + 1, mio + 1, EDGE_K * EDGE_K, dt, opv(o)));                   \
            for (i = 0; i < EDGE_K * EDGE_K; i++) {                                                       \
                T u;                                                                                      \
                memcpy(&u, mio + 1 + i * sizeof(T), sizeof(T));                                           \
                CHECK(io[i] == want[i] && u == want[i],                                                   \
                      "Reduce_local %s %s (%llu op %llu) = %llu (unaligned %llu) want %llu", tn, opnames[o], \
                      (unsigned long long)(UT)in[i], (unsigned long long)(UT)ev[i % EDGE_K],              \
                      (unsigned long long)(UT)io[i], (unsigned long long)(UT)u,                           \
                      (unsigned long long)(UT)want[i]);                                                   \
            }                                                                                             \
            /* across ranks: rank r holds ev[(i + 3r) % K] at element i */                                \
            for (ni = 0; ni < 2; ni++) {                                                                  \
                int n = ns[ni], root = (o + ni) % size;                                                   \
                for (i = 0; i < n; i++) {                                                                 \
                    sb[i] = ev[(i + 3 * rank) % EDGE_K];                                                  \
                    rb[i] = (T)0x5a;                                                                      \
                }                                                                                         \
                rb[n] = (T)0x5a;                                                                          \
                COLL(Allreduce, allreduce, sb, rb, n, dt, opv(o), MPI_COMM_WORLD);                        \
                for (i = 0; i < n; i++) {                                                                 \
                    T w = ev[i % EDGE_K];                                                                 \
                    for (r = 1; r < size; r++)                                                            \
                        w = edge_comb_##SUF(o, w, ev[(i + 3 * r) % EDGE_K]);                              \
                    CHECK(rb[i] == w, "Allreduce edges %s %s n %d [%d] = %llu want %llu", tn, opnames[o], \
                          n, i, (unsigned long long)(UT)rb[i], (unsigned long long)(UT)w);                \
                }                                                                                         \
                CHECK(rb[n] == (T)0x5a, "Allreduce edges %s wrote past count", tn);                       \
                for (i = 0; i < n; i++)                                                                   \
                    rb[i] = (T)0x5a;                                                                      \
                COLL(Reduce, reduce, sb, rb, n, dt, opv(o), root, MPI_COMM_WORLD);                        \
                if (rank == root)                                                                         \
                    for (i = 0; i < n; i++) {                                                             \
                        T w = ev[i % EDGE_K];                                                             \
                        for (r = 1; r < size; r++)                                                        \
                            w = edge_comb_##SUF(o, w, ev[(i + 3 * r) % EDGE_K]);                          \
                        CHECK(rb[i] == w, "Reduce edges %s %s n %d root %d [%d] = %llu want %llu", tn,    \
                              opnames[o], n, root, i, (unsigned long long)(UT)rb[i],                      \
                              (unsigned long long)(UT)w);                                                 \
                    }                                                                                     \
            }                                                                                             \
        }                                                                                                 \
    }

DEF_EDGE_INT(int, unsigned, int)
DEF_EDGE_INT(unsigned, unsigned, uint)
DEF_EDGE_INT(long, unsigned long, long)
DEF_EDGE_INT(unsigned long, unsigned long, ulong)
DEF_EDGE_INT(short, unsigned short, short)
DEF_EDGE_INT(unsigned short, unsigned short, ushort)
DEF_EDGE_INT(signed char, unsigned char, schar)
DEF_EDGE_INT(unsigned char, unsigned char, uchar)
DEF_EDGE_INT(long long, unsigned long long, llong)
DEF_EDGE_INT(unsigned long long, unsigned long long, ullong)
DEF_EDGE_INT(int8_t, uint8_t, i8)
DEF_EDGE_INT(int16_t, uint16_t, i16)
DEF_EDGE_INT(int32_t, uint32_t, i32)
DEF_EDGE_INT(int64_t, uint64_t, i64)
DEF_EDGE_INT(uint8_t, uint8_t, u8)
DEF_EDGE_INT(uint16_t, uint16_t, u16)
DEF_EDGE_INT(uint32_t, uint32_t, u32)
DEF_EDGE_INT(uint64_t, uint64_t, u64)

/* Floating types: IEEE values where the result does not depend on the order of the reduction.
 * Reduce_local (one pair, order fixed): SUM/PROD of every pair incl. infinities, NaN, signed
 * zeros, the extremes and the smallest subnormal (checked to the bit: sign of zero, NaN);
 * MAX/MIN of every pair without NaN (MPI leaves NaN there undefined). Across ranks: MAX/MIN of
 * the same table, SUM of -0.0 everywhere (-0.0), of one NaN (NaN), of +inf and -inf (NaN), of
 * +inf and finite values (+inf), of subnormals (exact). */
#define DEF_EDGE_FLOAT(T, SUF, TMAX, TMIN, TDEN)                                                          \
    static int same_##SUF(T x, T y)                                                                       \
    {                                                                                                     \
        if (x != x || y != y)                                                                             \
            return x != x && y != y;                                                                      \
        return x == y && signbit(x) == signbit(y);                                                        \
    }                                                                                                     \
    static void edge_##SUF(MPI_Datatype dt, const char *tn)                                              \
    {                                                                                                     \
        const T ev[] = {(T)0.0, -(T)0.0, (T)1.0, (T)-1.0, TMAX, -TMAX, TMIN, TDEN, -TDEN,                 \
                        (T)INFINITY, -(T)INFINITY, (T)NAN};                                               \
        enum { K = sizeof ev / sizeof ev[0] };                                                            \
        T in[K * K], io[K * K], want[K * K], sb[12], rb[12];                                              \
        int o, a, b, i, r, any;                                                                           \
        for (o = O_SUM; o <= O_MIN; o++) {                                                                \
            for (a = 0; a < K; a++)                                                                       \
                for (b = 0; b < K; b++) {                                                                 \
                    T x = ev[a], y = ev[b];                                                               \
                    in[a * K + b] = x;                                                                    \
                    io[a * K + b] = y;                                                                    \
                    want[a * K + b] = o == O_SUM ? x + y : o == O_PROD ? x * y : o == O_MAX ? (x > y ? x : y) \
                                                                                   : (x < y ? x : y);     \
                }                                                                                         \
            CHECK_MPI(MPI_Reduce_local(in, io, K * K, dt, opv(o)));                                       \
            for (i = 0; i < K * K; i++) {                                                                 \
                int nan_in = in[i] != in[i] || ev[i % K] != ev[i % K];                                    \
                if (o >= O_MAX && nan_in)                                                                 \
                    continue;                                                                             \
                if (o >= O_MAX ? io[i] != want[i] : !same_##SUF(io[i], want[i]))                          \
                    CHECK(0, "Reduce_local %s %s (%Lg op %Lg) = %Lg want %Lg", tn, opnames[o],            \
                          (long double)in[i], (long double)ev[i % K], (long double)io[i],                 \
                          (long double)want[i]);                                                          \
            }                                                                                             \
            if (o < O_MAX)                                                                                \
                continue;                                                                                 \
            /* MAX/MIN across ranks of the table without NaN: rank r holds ev[(i + r) % (K - 1)] */       \
            for (i = 0; i < K - 1; i++)                                                                   \
                sb[i] = ev[(i + rank) % (K - 1)];                                                         \
            COLL(Allreduce, allreduce, sb, rb, K - 1, dt, opv(o), MPI_COMM_WORLD);                        \
            for (i = 0; i < K - 1; i++) {                                                                 \
                T w = ev[i % (K - 1)];                                                                    \
                for (r = 1; r < size; r++) {                                                              \
                    T v = ev[(i + r) % (K - 1)];                                                          \
                    w = o == O_MAX ? (v > w ? v : w) : (v < w ? v : w);                                   \
                }                                                                                         \
                CHECK(rb[i] == w, "Allreduce edges %s %s [%d] = %Lg want %Lg", tn, opnames[o], i,         \
                      (long double)rb[i], (long double)w);                                                \
            }                                                                                             \
        }                                                                                                 \
        /* SUM across ranks, order-independent cases */                                                   \
        sb[0] = -(T)0.0;                                                                                  \
        sb[1] = rank == size - 1 ? (T)NAN : (T)1.0;                                                       \
        sb[2] = rank == 0 ? (T)INFINITY : rank == 1 ? -(T)INFINITY : (T)2.0;                              \
        sb[3] = rank == size - 1 ? (T)INFINITY : TMAX;                                                    \
        sb[4] = TDEN;                                                                                     \
        sb[5] = rank % 2 ? -TDEN : TDEN;                                                                  \
        COLL(Allreduce, allreduce, sb, rb, 6, dt, MPI_SUM, MPI_COMM_WORLD);                              \
        any = 0;                                                                                          \
        any |= !same_##SUF(rb[0], -(T)0.0) << 0;                                                          \
        any |= !(rb[1] != rb[1]) << 1;                                                                    \
        any |= !(size > 1 ? rb[2] != rb[2] : rb[2] == (T)INFINITY) << 2;                                  \
        any |= !(rb[3] == (T)INFINITY) << 3;                                                              \
        any |= !(rb[4] == TDEN * (T)size) << 4;                                                           \
        any |= !(rb[5] == TDEN * (T)(size % 2)) << 5;                                                     \
        CHECK(any == 0, "Allreduce SUM edges %s: failed elements mask 0x%x: %Lg %Lg %Lg %Lg %Lg %Lg", tn, any, \
              (long double)rb[0], (long double)rb[1], (long double)rb[2], (long double)rb[3],             \
              (long double)rb[4], (long double)rb[5]);                                                    \
    }

DEF_EDGE_FLOAT(float, float, FLT_MAX, FLT_MIN, 0x1p-149f)
DEF_EDGE_FLOAT(double, double, DBL_MAX, DBL_MIN, 0x1p-1074)
DEF_EDGE_FLOAT(long double, ldouble, LDBL_MAX, LDBL_MIN, 0x1p-16445L) /* x86-64 80-bit */

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


/* MINLOC/MAXLOC on every pair type with extreme and negative values; ranks 2j and 2j+1 hold the
 * same value and the index decreases with the rank, so a tie must pick the higher rank's index. */
#define DEF_LOC_EDGE(VT, SUF, VMIN, VMAX)                                                                 \
    static void loc_edge_##SUF(MPI_Datatype dt, const char *tn)                                          \
    {                                                                                                     \
        struct { VT v; int i; } sb[4], rb[4];                                                             \
        const VT vals[4] = {VMIN, VMAX, (VT)-1, (VT)0};                                                   \
        int k, r, o;                                                                                      \
        for (o = 0; o < 2; o++) {                                                                         \
            for (k = 0; k < 4; k++) {                                                                     \
                sb[k].v = vals[(k + rank / 2) % 4];                                                       \
                sb[k].i = (size - rank) * 3 - k;                                                          \
            }                                                                                             \
            COLL(Allreduce, allreduce, sb, rb, 4, dt, o ? MPI_MAXLOC : MPI_MINLOC, MPI_COMM_WORLD);       \
            for (k = 0; k < 4; k++) {                                                                     \
                VT bv = 0;                                                                                \
                int bi = -1;                                                                              \
                for (r = 0; r < size; r++) {                                                              \
                    VT v = vals[(k + r / 2) % 4];                                                         \
                    int idx = (size - r) * 3 - k;                                                         \
                    if (bi < 0 || (o ? v > bv : v < bv) || (v == bv && idx < bi)) {                       \
                        bv = v;                                                                           \
                        bi = idx;                                                                         \
                    }                                                                                     \
                }                                                                                         \
                CHECK(rb[k].v == bv && rb[k].i == bi, "%s %s [%d] = (%Lg, %d) want (%Lg, %d)",            \
                      o ? "MAXLOC" : "MINLOC", tn, k, (long double)rb[k].v, rb[k].i, (long double)bv, bi); \
            }                                                                                             \
        }                                                                                                 \
    }
DEF_LOC_EDGE(short, short, SHRT_MIN, SHRT_MAX)
DEF_LOC_EDGE(int, int, INT_MIN, INT_MAX)
DEF_LOC_EDGE(long, long, LONG_MIN, LONG_MAX)
DEF_LOC_EDGE(float, float, -FLT_MAX, FLT_MAX)
DEF_LOC_EDGE(double, double, -(double)INFINITY, DBL_MAX)
DEF_LOC_EDGE(long double, ldouble, -LDBL_MAX, (long double)INFINITY)
static void test_loc_edges(void)
{
    loc_edge_short(MPI_SHORT_INT, "MPI_SHORT_INT");
    loc_edge_int(MPI_2INT, "MPI_2INT");
    loc_edge_long(MPI_LONG_INT, "MPI_LONG_INT");
    loc_edge_float(MPI_FLOAT_INT, "MPI_FLOAT_INT");
    loc_edge_double(MPI_DOUBLE_INT, "MPI_DOUBLE_INT");
    loc_edge_ldouble(MPI_LONG_DOUBLE_INT, "MPI_LONG_DOUBLE_INT");
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
    edge_int(MPI_INT, "MPI_INT");
    edge_uint(MPI_UNSIGNED, "MPI_UNSIGNED");
    edge_long(MPI_LONG, "MPI_LONG");
    edge_ulong(MPI_UNSIGNED_LONG, "MPI_UNSIGNED_LONG");
    edge_short(MPI_SHORT, "MPI_SHORT");
    edge_ushort(MPI_UNSIGNED_SHORT, "MPI_UNSIGNED_SHORT");
    edge_schar(MPI_SIGNED_CHAR, "MPI_SIGNED_CHAR");
    edge_uchar(MPI_UNSIGNED_CHAR, "MPI_UNSIGNED_CHAR");
    edge_llong(MPI_LONG_LONG, "MPI_LONG_LONG");
    edge_ullong(MPI_UNSIGNED_LONG_LONG, "MPI_UNSIGNED_LONG_LONG");
    edge_i8(MPI_INT8_T, "MPI_INT8_T");
    edge_i16(MPI_INT16_T, "MPI_INT16_T");
    edge_i32(MPI_INT32_T, "MPI_INT32_T");
    edge_i64(MPI_INT64_T, "MPI_INT64_T");
    edge_u8(MPI_UINT8_T, "MPI_UINT8_T");
    edge_u16(MPI_UINT16_T, "MPI_UINT16_T");
    edge_u32(MPI_UINT32_T, "MPI_UINT32_T");
    edge_u64(MPI_UINT64_T, "MPI_UINT64_T");
    edge_float(MPI_FLOAT, "MPI_FLOAT");
    edge_double(MPI_DOUBLE, "MPI_DOUBLE");
    edge_ldouble(MPI_LONG_DOUBLE, "MPI_LONG_DOUBLE");
    test_loc_edges();
    test_user_ops();
    test_scatter_scan();
    test_large();

    snprintf(name, sizeof name, "coll_reduce %s", ct_mode_name());
    return ct_finish(ct_mode == 0 ? "coll_reduce" : name);
}
