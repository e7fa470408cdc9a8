/* Mid-size blocking collectives of MPI_COMM_WORLD (gpumpi: the scratch-area path above the flag
 * slots, up to GPUMPI_SHM_MID_MAX bytes, in segments of GPUMPI_SHM_SCRATCH_BYTES; larger ones and
 * other communicators take the schedule path):
 * - Allreduce and Reduce with counts around the thresholds and counts that do not divide by the
 *   rank count, on int (SUM, PROD, LAND, BXOR), double (SUM of exact values, MAX), float MIN,
 *   unsigned char BOR, short MAX, long long SUM, and MINLOC/MAXLOC on MPI_DOUBLE_INT; in place
 *   and not; every root;
 * - Bcast from every root, with ranks describing the data differently (MPI_INT on even ranks, a
 *   strided vector type on odd ranks: packed and unpacked around the path);
 * - the calls interleaved with small (flag path) collectives and point-to-point messages.
 * Every result is compared with values computed locally. */
#include "ctest.h"

static int me, np;

static double dval(int r, int i, int s) { return (double)(ct_val(r, i, s) % 1000) - 500.0; }

static void allreduce_int(int count, int it, MPI_Op op, int inplace)
{
    int *in = malloc(sizeof(int) * (count + 1)), *out = malloc(sizeof(int) * (count + 1));
    CHECK(in && out, "malloc");
    for (int i = 0; i < count; i++)
        in[i] = op == MPI_LAND ? (ct_val(me, i, it) % 7 != 0) : ct_val(me, i, it);
    out[count] = -77;
    if (inplace) {
        memcpy(out, in, sizeof(int) * count);
        CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, out, count, MPI_INT, op, MPI_COMM_WORLD));
    } else {
        CHECK_MPI(MPI_Allreduce(in, out, count, MPI_INT, op, MPI_COMM_WORLD));
    }
    for (int i = 0; i < count; i++) {
        unsigned w = op == MPI_PROD ? 1u : 0u;
        for (int r = 0; r < np; r++) {
            unsigned v = op == MPI_LAND ? (ct_val(r, i, it) % 7 != 0) : (unsigned)ct_val(r, i, it);
            if (op == MPI_SUM) w += v;
            else if (op == MPI_PROD) w *= v;
            else if (op == MPI_BXOR) w ^= v;
            else if (op == MPI_LAND) w = r == 0 ? v : (w && v);
        }
        CHECK(out[i] == (int)w, "allreduce int count %d it %d i %d: %d want %d", count, it, i, out[i], (int)w);
    }
    CHECK(out[count] == -77, "allreduce of %d wrote past the end", count);
    free(in);
    free(out);
}

static void allreduce_mixed(int count, int it)
{
    double *d = malloc(sizeof(double) * count), *dout = malloc(sizeof(double) * count);
    float *f = malloc(sizeof(float) * count), *fout = malloc(sizeof(float) * count);
    unsigned char *u = malloc(count), *uout = malloc(count);
    short *h = malloc(sizeof(short) * count), *hout = malloc(sizeof(short) * count);
    long long *l = malloc(sizeof(long long) * count), *lout = malloc(sizeof(long long) * count);
    struct { double v; int i; } *p = malloc(sizeof(*p) * count), *pmin = malloc(sizeof(*p) * count),
                                 *pmax = malloc(sizeof(*p) * count);
    CHECK(d && dout && f && fout && u && uout && h && hout && l && lout && p && pmin && pmax, "malloc");
    for (int i = 0; i < count; i++) {
        d[i] = dval(me, i, it);
        f[i] = (float)dval(me, i, it + 1);
        u[i] = (unsigned char)(1u << ((me + i) % 8));
        h[i] = (short)(ct_val(me, i, it) % 30000 - 15000);
        l[i] = (long long)ct_val(me, i, it) * 1000003LL;
        p[i].v = (double)(ct_val(me, i, it) % 5); /* ties: the lowest index wins */
        p[i].i = me;
    }
    CHECK_MPI(MPI_Allreduce(d, dout, count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
    for (int i = 0; i < count; i++) {
        double w = 0;
        for (int r = 0; r < np; r++) w += dval(r, i, it);
        CHECK(dout[i] == w, "double sum count %d i %d: %g want %g", count, i, dout[i], w);
    }
    CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, d, count, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    CHECK_MPI(MPI_Allreduce(f, fout, count, MPI_FLOAT, MPI_MIN, MPI_COMM_WORLD));
    CHECK_MPI(MPI_Allreduce(u, uout, count, MPI_UNSIGNED_CHAR, MPI_BOR, MPI_COMM_WORLD));
    CHECK_MPI(MPI_Allreduce(h, hout, count, MPI_SHORT, MPI_MAX, MPI_COMM_WORLD));
    CHECK_MPI(MPI_Allreduce(l, lout, count, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD));
    CHECK_MPI(MPI_Allreduce(p, pmin, count, MPI_DOUBLE_INT, MPI_MINLOC, MPI_COMM_WORLD));
    CHECK_MPI(MPI_Allreduce(p, pmax, count, MPI_DOUBLE_INT, MPI_MAXLOC, MPI_COMM_WORLD));
    for (int i = 0; i < count; i++) {
        double dmax = -1e300;
        float fmin = 1e30f;
        unsigned ubor = 0;
        short hmax = -32768;
        long long lsum = 0;
        double vmin = 1e300, vmax = -1e300;
        int imin = -1, imax = -1;
        for (int r = 0; r < np; r++) {
            if (dval(r, i, it) > dmax) dmax = dval(r, i, it);
            if ((float)dval(r, i, it + 1) < fmin) fmin = (float)dval(r, i, it + 1);
            ubor |= 1u << ((r + i) % 8);
            short hv = (short)(ct_val(r, i, it) % 30000 - 15000);
            if (hv > hmax) hmax = hv;
            lsum += (long long)ct_val(r, i, it) * 1000003LL;
            double v = (double)(ct_val(r, i, it) % 5);
            if (v < vmin) { vmin = v; imin = r; }
            if (v > vmax) { vmax = v; imax = r; }
        }
        CHECK(d[i] == dmax, "double max in place count %d i %d: %g want %g", count, i, d[i], dmax);
        CHECK(fout[i] == fmin, "float min count %d i %d: %g want %g", count, i, fout[i], fmin);
        CHECK(uout[i] == ubor, "uchar bor count %d i %d: %u want %u", count, i, uout[i], ubor);
        CHECK(hout[i] == hmax, "short max count %d i %d: %d want %d", count, i, hout[i], hmax);
        CHECK(lout[i] == lsum, "long long sum count %d i %d: %lld want %lld", count, i, lout[i], lsum);
        CHECK(pmin[i].v == vmin && pmin[i].i == imin, "minloc count %d i %d: (%g,%d) want (%g,%d)", count,
              i, pmin[i].v, pmin[i].i, vmin, imin);
        CHECK(pmax[i].v == vmax && pmax[i].i == imax, "maxloc count %d i %d: (%g,%d) want (%g,%d)", count,
              i, pmax[i].v, pmax[i].i, vmax, imax);
    }
    free(d); free(dout); free(f); free(fout); free(u); free(uout);
    free(h); free(hout); free(l); free(lout); free(p); free(pmin); free(pmax);
}

static void reduce_int(int count, int it, int root)
{
    int *in = malloc(sizeof(int) * count), *out = malloc(sizeof(int) * (count + 1));
    CHECK(in && out, "malloc");
    for (int i = 0; i < count; i++)
        in[i] = ct_val(me, i, it);
    out[count] = -77;
    if (me == root && it % 2) {
        memcpy(out, in, sizeof(int) * count);
        CHECK_MPI(MPI_Reduce(MPI_IN_PLACE, out, count, MPI_INT, MPI_SUM, root, MPI_COMM_WORLD));
    } else {
        CHECK_MPI(MPI_Reduce(in, me == root ? out : NULL, count, MPI_INT, MPI_SUM, root, MPI_COMM_WORLD));
    }
    if (me == root) {
        for (int i = 0; i < count; i++) {
            unsigned w = 0;
            for (int r = 0; r < np; r++) w += (unsigned)ct_val(r, i, it);
            CHECK(out[i] == (int)w, "reduce count %d root %d i %d: %d want %d", count, root, i, out[i], (int)w);
        }
        CHECK(out[count] == -77, "reduce of %d wrote past the end", count);
    }
    free(in);
    free(out);
}

static void bcast_int(int count, int it, int root)
{
    /* Odd ranks receive into every other int of a twice as long buffer (a vector type). */
    int strided = me % 2 == 1;
    int *buf = malloc(sizeof(int) * (2 * count + 1));
    CHECK(buf, "malloc");
    for (int i = 0; i < 2 * count + 1; i++)
        buf[i] = -1;
    for (int i = 0; i < count; i++)
        if (me == root) buf[strided ? 2 * i : i] = ct_val(root, i, it);
    if (strided) {
        MPI_Datatype v;
        CHECK_MPI(MPI_Type_vector(count, 1, 2, MPI_INT, &v));
        CHECK_MPI(MPI_Type_commit(&v));
        CHECK_MPI(MPI_Bcast(buf, 1, v, root, MPI_COMM_WORLD));
        CHECK_MPI(MPI_Type_free(&v));
    } else {
        CHECK_MPI(MPI_Bcast(buf, count, MPI_INT, root, MPI_COMM_WORLD));
    }
    for (int i = 0; i < count; i++) {
        int got = buf[strided ? 2 * i : i];
        CHECK(got == ct_val(root, i, it), "bcast count %d root %d i %d: %d", count, root, i, got);
        if (strided)
            CHECK(buf[2 * i + 1] == -1, "strided bcast of %d wrote a gap at %d", count, 2 * i + 1);
    }
    CHECK(buf[strided ? 2 * count : count] == -1, "bcast of %d wrote past the end", count);
    free(buf);
}

int main(int argc, char **argv)
{
    ct_init(&argc, &argv);
    me = ct_world_rank;
    np = ct_world_size;
    /* ints: just above the flag slots, 4 KiB, odd, 64 KiB, above a 256 KiB scratch area, 1 MiB,
     * just above 1 MiB (the schedule path). */
    int counts[] = {257, 1024, 1025, 4093, 16384, 65537, 262144, 262145};
    int nc = sizeof(counts) / sizeof(counts[0]);
    for (int c = 0; c < nc; c++) {
        int count = counts[c];
        for (int it = 0; it < 3; it++) {
            int root = (c + it) % np;
            allreduce_int(count, it, MPI_SUM, it == 1);
            allreduce_int(count, it, it == 0 ? MPI_PROD : it == 1 ? MPI_BXOR : MPI_LAND, it == 2);
            reduce_int(count, it, root);
            bcast_int(count, it, root);
            /* A small collective and a message between the mid-size ones. */
            int one = 1, sum = 0;
            CHECK_MPI(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
            CHECK(sum == np, "small allreduce: %d", sum);
            int token = me, got = -1;
            CHECK_MPI(MPI_Sendrecv(&token, 1, MPI_INT, (me + 1) % np, 5, &got, 1, MPI_INT, (me + np - 1) % np,
                                   5, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            CHECK(got == (me + np - 1) % np, "sendrecv: %d", got);
        }
        if (count <= 65537)
            allreduce_mixed(count, c);
    }
    /* Every root once more at one size (roots beyond the loop's). */
    for (int root = 0; root < np; root++) {
        reduce_int(3001, 10 + root, root);
        bcast_int(3001, 20 + root, root);
    }
    return ct_finish("coll_mid");
}
