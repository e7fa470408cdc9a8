/* Large MPI_Allreduce and MPI_Alltoall between nodes, cut into pieces (run over emulated nodes with a small
 * GPUMPI_COLL_PIECE so that a few hundred KiB make many pieces): sums of ints at counts around
 * piece boundaries (two pieces exactly, one element more, an odd count, many pieces), in place
 * and not, MPI_MAX on doubles, a commutative user op, a strided layout (packed whole) in place
 * and not, on MPI_COMM_WORLD and on a reversed split. Every element is checked against closed-form values. */
#include "ctest.h"

static void xor_op(void *in, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    unsigned *a = in, *b = inout;
    for (int i = 0; i < *len; i++) b[i] ^= a[i];
}

static void sums(MPI_Comm comm, int count) {
    int r, n;
    MPI_Comm_rank(comm, &r);
    MPI_Comm_size(comm, &n);
    int *s = malloc(sizeof(int) * (size_t)count), *d = malloc(sizeof(int) * (size_t)count);
    for (int i = 0; i < count; i++) s[i] = (r + 1) * (i % 1000) + r;
    long want_a = (long)n * (n + 1) / 2, want_b = (long)n * (n - 1) / 2;
    CHECK_MPI(MPI_Allreduce(s, d, count, MPI_INT, MPI_SUM, comm));
    for (int i = 0; i < count; i++)
        CHECK(d[i] == (int)(want_a * (i % 1000) + want_b), "count %d elem %d: %d", count, i, d[i]);
    CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, s, count, MPI_INT, MPI_SUM, comm));
    for (int i = 0; i < count; i++)
        CHECK(s[i] == (int)(want_a * (i % 1000) + want_b), "in place count %d elem %d: %d", count, i, s[i]);
    free(s);
    free(d);
}

static int a2a_val(int from, int to, int i) { return from * 1000003 + to * 7919 + i; }

static void alltoall(MPI_Comm comm, int count) {
    int r, n;
    MPI_Comm_rank(comm, &r);
    MPI_Comm_size(comm, &n);
    size_t all = (size_t)count * (size_t)n;
    int *s = malloc(sizeof(int) * all), *d = malloc(sizeof(int) * (all + 1));
    for (int q = 0; q < n; q++)
        for (int i = 0; i < count; i++) s[(size_t)q * count + i] = a2a_val(r, q, i);
    d[all] = -3;
    CHECK_MPI(MPI_Alltoall(s, count, MPI_INT, d, count, MPI_INT, comm));
    for (int q = 0; q < n; q++)
        for (int i = 0; i < count; i++)
            CHECK(d[(size_t)q * count + i] == a2a_val(q, r, i), "alltoall count %d from %d elem %d: %d",
                  count, q, i, d[(size_t)q * count + i]);
    CHECK(d[all] == -3, "alltoall wrote past the buffer");
    CHECK_MPI(MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, s, count, MPI_INT, comm));
    for (int q = 0; q < n; q++)
        for (int i = 0; i < count; i++)
            CHECK(s[(size_t)q * count + i] == a2a_val(q, r, i), "alltoall in place count %d from %d elem %d: %d",
                  count, q, i, s[(size_t)q * count + i]);
    free(s);
    free(d);
}

/* Alltoall of a strided layout: blocks of `count` ints taken every other int. */
static void alltoall_strided(int count) {
    int n = ct_world_size, r = ct_world_rank;
    MPI_Datatype every2;
    CHECK_MPI(MPI_Type_vector(count, 1, 2, MPI_INT, &every2));
    MPI_Datatype blk;
    CHECK_MPI(MPI_Type_create_resized(every2, 0, (MPI_Aint)(2 * count * sizeof(int)), &blk));
    CHECK_MPI(MPI_Type_commit(&blk));
    size_t all = 2 * (size_t)count * (size_t)n;
    int *s = malloc(sizeof(int) * all), *d = malloc(sizeof(int) * all);
    for (int q = 0; q < n; q++)
        for (int i = 0; i < count; i++) {
            s[(size_t)q * 2 * count + 2 * i] = a2a_val(r, q, i);
            s[(size_t)q * 2 * count + 2 * i + 1] = -5;
        }
    for (size_t i = 0; i < all; i++) d[i] = -7;
    CHECK_MPI(MPI_Alltoall(s, 1, blk, d, 1, blk, MPI_COMM_WORLD));
    for (int q = 0; q < n; q++)
        for (int i = 0; i < count; i++) {
            CHECK(d[(size_t)q * 2 * count + 2 * i] == a2a_val(q, r, i), "strided alltoall from %d elem %d", q, i);
            CHECK(d[(size_t)q * 2 * count + 2 * i + 1] == -7, "strided alltoall wrote a gap");
        }
    MPI_Type_free(&blk);
    MPI_Type_free(&every2);
    free(s);
    free(d);
}

int main(int argc, char **argv) {
    ct_init(&argc, &argv);
    int counts[] = {32768, 32769, 100003, 262149};
    for (int k = 0; k < 4; k++) sums(MPI_COMM_WORLD, counts[k]);

    /* A reversed split: the same pieces under another rank order. */
    MPI_Comm rev;
    CHECK_MPI(MPI_Comm_split(MPI_COMM_WORLD, 0, ct_world_size - ct_world_rank, &rev));
    sums(rev, 100003);

    /* MPI_MAX on doubles. */
    int n = 70001;
    double *x = malloc(sizeof(double) * (size_t)n), *y = malloc(sizeof(double) * (size_t)n);
    for (int i = 0; i < n; i++) x[i] = (i % (ct_world_size + 3) == ct_world_rank) ? 1e9 + i : -i;
    CHECK_MPI(MPI_Allreduce(x, y, n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    for (int i = 0; i < n; i++) {
        double want = (i % (ct_world_size + 3) < ct_world_size) ? 1e9 + i : -i;
        CHECK(y[i] == want, "max elem %d: %g want %g", i, y[i], want);
    }

    /* A commutative user op. */
    MPI_Op op;
    CHECK_MPI(MPI_Op_create(xor_op, 1, &op));
    unsigned *u = malloc(sizeof(unsigned) * (size_t)n), *v = malloc(sizeof(unsigned) * (size_t)n);
    for (int i = 0; i < n; i++) u[i] = (unsigned)i * 2654435761u ^ (1u << (ct_world_rank % 32));
    CHECK_MPI(MPI_Allreduce(u, v, n, MPI_UNSIGNED, op, MPI_COMM_WORLD));
    for (int i = 0; i < n; i++) {
        unsigned want = 0;
        for (int q = 0; q < ct_world_size; q++) want ^= (unsigned)i * 2654435761u ^ (1u << (q % 32));
        CHECK(v[i] == want, "user op elem %d: %u want %u", i, v[i], want);
    }
    MPI_Op_free(&op);

    /* A strided layout (every other int of buffers twice as long: packed whole), not in
     * place and in place; the ints between stay untouched. */
    MPI_Datatype every2;
    CHECK_MPI(MPI_Type_vector(n, 1, 2, MPI_INT, &every2));
    CHECK_MPI(MPI_Type_commit(&every2));
    int *ws = malloc(sizeof(int) * 2 * (size_t)n), *wr = malloc(sizeof(int) * 2 * (size_t)n);
    for (int i = 0; i < n; i++) {
        ws[2 * i] = ct_world_rank + i;
        ws[2 * i + 1] = -5;
        wr[2 * i] = wr[2 * i + 1] = -7;
    }
    CHECK_MPI(MPI_Allreduce(ws, wr, 1, every2, MPI_SUM, MPI_COMM_WORLD));
    long base = (long)ct_world_size * (ct_world_size - 1) / 2;
    for (int i = 0; i < n; i++) {
        CHECK(wr[2 * i] == (int)(base + (long)ct_world_size * i), "strided elem %d: %d", i, wr[2 * i]);
        CHECK(wr[2 * i + 1] == -7, "strided wrote gap %d: %d", i, wr[2 * i + 1]);
    }
    CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, ws, 1, every2, MPI_SUM, MPI_COMM_WORLD));
    for (int i = 0; i < n; i++) {
        CHECK(ws[2 * i] == (int)(base + (long)ct_world_size * i), "strided in place elem %d: %d", i, ws[2 * i]);
        CHECK(ws[2 * i + 1] == -5, "strided in place wrote gap %d: %d", i, ws[2 * i + 1]);
    }
    MPI_Type_free(&every2);

    int a2a[] = {40000, 40001, 70003};
    for (int k = 0; k < 3; k++) alltoall(MPI_COMM_WORLD, a2a[k]);
    alltoall(rev, 40001);
    alltoall_strided(30001);
    MPI_Comm_free(&rev);
    free(x);
    free(y);
    free(u);
    free(v);
    free(ws);
    free(wr);
    return ct_finish("coll_pieces");
}
