/* Device buffers through every call of the subset: p2p (device<->device, device<->host),
 * all collectives (blocking, nonblocking, in-place), derived datatypes on the device (vector,
 * indexed, struct with gaps, resized, 1M-block vector; p2p, Bcast, Allgather(v), Allreduce,
 * Pack/Unpack; gaps must keep their poison), point-to-point matching on device buffers (order,
 * any source, truncation, probe, cancel), managed
 * memory, MPI_Reduce_local, Pack/Unpack, and free-then-reallocate at the same address.
 * Outputs are poisoned before each call and compared with a host reference.
 * Without a CUDA device it prints "SKIP: no CUDA device (<reason>)" and exits 0. */
#include <mpi.h>
#include <mpi-ext.h>
#include "cudart.h"
#include <stdint.h>
#include <math.h>

enum { HOST = 0, DEV = 1, MANAGED = 2 };
static const char *kname[] = {"host", "device", "managed"};
static int rank, size, errors;

static void *alloc_k(int k, size_t n) {
    void *p = NULL;
    if (n == 0) n = 1;
    if (k == HOST) p = malloc(n);
    else if (k == DEV) CU(cudaMalloc_(&p, n));
    else CU(cudaMallocManaged_(&p, n, 1));
    return p;
}
static void free_k(int k, void *p) { if (k == HOST) free(p); else CU(cudaFree_(p)); }
/* cudaMemcpy from pageable host memory may return before the DMA to the device completed
 * (it is ordered only on the legacy default stream); gpumpi copies on its own non-blocking
 * stream, so like every CUDA-aware MPI it needs the application to synchronize first. */
static void put(void *dst, const void *src, size_t n) {
    if (n) { CU(cudaMemcpy_(dst, src, n, cudaMemcpyDefault_)); CU(cudaDeviceSynchronize_()); }
}
static void get(void *dst, const void *src, size_t n) { if (n) CU(cudaMemcpy_(dst, src, n, cudaMemcpyDefault_)); }
static void poison(int k, void *p, size_t n) {
    if (!n) return;
    if (k == HOST) memset(p, 0xA5, n); else { CU(cudaMemset_(p, 0xA5, n)); CU(cudaDeviceSynchronize_()); }
}
static int val(int r, size_t i) { return (int)((r + 1) * 1000 + (int)(i % 100003) * 3); }

/* Compare n ints at device/host `got` with `want`. */
static void check(const char *what, size_t count, const void *got, const int *want, size_t n) {
    int *h = malloc(n * sizeof(int) + 1);
    get(h, got, n * sizeof(int));
    for (size_t i = 0; i < n; i++)
        if (h[i] != want[i]) {
            if (errors < 20)
                fprintf(stderr, "rank %d: %s count %zu: [%zu] = %d, want %d\n", rank, what, count, i, h[i], want[i]);
            errors++;
            break;
        }
    free(h);
}

/* Around every point-to-point size threshold: the resident small copy (4 KiB), the resident
   pull (16 KiB), the eager limit (16 KiB). */
static const size_t counts[] = {0, 1, 7, 511, 513, 1023, 1025, 4095, 4097, 65535, 65537, 16u << 20 /* 64 MiB of ints */};
#define NCOUNTS (sizeof counts / sizeof counts[0])

static void test_p2p(int sk, int rk) {
    int to = (rank + 1) % size, from = (rank - 1 + size) % size;
    for (size_t c = 0; c < NCOUNTS; c++) {
        size_t n = counts[c], b = n * sizeof(int);
        int *ref = malloc(b + 4), *src = malloc(b + 4);
        for (size_t i = 0; i < n; i++) { src[i] = val(rank, i); ref[i] = val(from, i); }
        void *s = alloc_k(sk, b), *r = alloc_k(rk, b);
        put(s, src, b);
        poison(rk, r, b);
        MPI_Status st;
        MPI_Sendrecv(s, (int)n, MPI_INT, to, 5, r, (int)n, MPI_INT, from, 5, MPI_COMM_WORLD, &st);
        int got = -1;
        MPI_Get_count(&st, MPI_INT, &got);
        if ((size_t)got != n) { fprintf(stderr, "rank %d: sendrecv count %d want %zu\n", rank, got, n); errors++; }
        char what[64];
        snprintf(what, sizeof what, "sendrecv %s->%s", kname[sk], kname[rk]);
        check(what, n, r, ref, n);
        /* Nonblocking, receive posted first. */
        poison(rk, r, b);
        MPI_Request q[2];
        MPI_Irecv(r, (int)n, MPI_INT, from, 6, MPI_COMM_WORLD, &q[0]);
        MPI_Isend(s, (int)n, MPI_INT, to, 6, MPI_COMM_WORLD, &q[1]);
        MPI_Waitall(2, q, MPI_STATUSES_IGNORE);
        snprintf(what, sizeof what, "isend/irecv %s->%s", kname[sk], kname[rk]);
        check(what, n, r, ref, n);
        /* The application synchronizes its device between posting and waiting: the library
           must leave no device work that waits for another process (or both would hang). */
        poison(rk, r, b);
        MPI_Irecv(r, (int)n, MPI_INT, from, 8, MPI_COMM_WORLD, &q[0]);
        MPI_Isend(s, (int)n, MPI_INT, to, 8, MPI_COMM_WORLD, &q[1]);
        CU(cudaDeviceSynchronize_());
        MPI_Waitall(2, q, MPI_STATUSES_IGNORE);
        snprintf(what, sizeof what, "isend/irecv/device sync %s->%s", kname[sk], kname[rk]);
        check(what, n, r, ref, n);
        /* Sendrecv_replace in the receive buffer's memory kind. */
        if (n <= 65537) {
            put(r, src, b);
            MPI_Sendrecv_replace(r, (int)n, MPI_INT, to, 7, from, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            snprintf(what, sizeof what, "sendrecv_replace %s", kname[rk]);
            check(what, n, r, ref, n);
        }
        free_k(sk, s); free_k(rk, r); free(ref); free(src);
    }
}

/* Matching semantics with device buffers, across every small-message path (sizes below and
 * above the one-block and wide pulls): messages from one sender of mixed sizes and memory kinds
 * with one tag arrive in order, both unexpected (receives posted after a barrier) and expected
 * (posted first); MPI_ANY_SOURCE/MPI_ANY_TAG receives get every rank's message once with the
 * right status; a message longer than its device receive buffer fails with MPI_ERR_TRUNCATE
 * (status count undefined, later messages unaffected); MPI_Probe gives the size of a device
 * message; a device receive that no message matches is cancelled. */
static void test_p2p_semantics(void) {
    enum { NM = 7 };
    static const size_t ord[NM] = {2, 16384, 2, 4097, 262144, 1, 8192}; /* ints */
    const int kinds[NM] = {DEV, DEV, HOST, DEV, DEV, DEV, DEV};
    int to = (rank + 1) % size, from = (rank - 1 + size) % size;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    for (int pass = 0; pass < 2; pass++) {
        void *s[NM], *r[NM];
        int *want[NM];
        MPI_Request q[2 * NM];
        for (int m = 0; m < NM; m++) {
            size_t b = ord[m] * sizeof(int);
            int *h = malloc(b);
            want[m] = malloc(b);
            for (size_t i = 0; i < ord[m]; i++) { h[i] = val(rank, i) + 7 * m; want[m][i] = val(from, i) + 7 * m; }
            s[m] = alloc_k(kinds[m], b);
            r[m] = alloc_k(DEV, 262144 * sizeof(int));
            put(s[m], h, b);
            poison(DEV, r[m], b);
            free(h);
        }
        /* pass 0: expected (receives first); pass 1: unexpected (sends first, then a barrier). */
        if (pass == 0)
            for (int m = 0; m < NM; m++) MPI_Irecv(r[m], 262144, MPI_INT, from, 40, MPI_COMM_WORLD, &q[m]);
        for (int m = 0; m < NM; m++) MPI_Isend(s[m], (int)ord[m], MPI_INT, to, 40, MPI_COMM_WORLD, &q[NM + m]);
        if (pass == 1) {
            MPI_Barrier(MPI_COMM_WORLD);
            for (int m = 0; m < NM; m++) MPI_Irecv(r[m], 262144, MPI_INT, from, 40, MPI_COMM_WORLD, &q[m]);
        }
        MPI_Status st[2 * NM];
        MPI_Waitall(2 * NM, q, st);
        for (int m = 0; m < NM; m++) {
            int got = -1;
            MPI_Get_count(&st[m], MPI_INT, &got);
            char what[64];
            snprintf(what, sizeof what, "order %s message %d", pass ? "unexpected" : "expected", m);
            if ((size_t)got != ord[m]) { fprintf(stderr, "rank %d: %s: count %d want %zu\n", rank, what, got, ord[m]); errors++; }
            check(what, ord[m], r[m], want[m], ord[m]);
        }
        for (int m = 0; m < NM; m++) { free_k(kinds[m], s[m]); free_k(DEV, r[m]); free(want[m]); }
    }
    /* Any source, any tag: every other rank sends its rank (tag = rank) to rank 0. */
    int *d = alloc_k(DEV, 2 * sizeof(int));
    if (rank == 0) {
        int seen = 0;
        for (int k = 1; k < size; k++) {
            MPI_Status st;
            poison(DEV, d, 2 * sizeof(int));
            MPI_Recv(d, 2, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
            int h[2] = {-1, -1};
            get(h, d, sizeof h);
            if (st.MPI_SOURCE < 1 || st.MPI_SOURCE >= size || st.MPI_TAG != 50 + st.MPI_SOURCE || h[0] != st.MPI_SOURCE ||
                h[1] != 3 * st.MPI_SOURCE || (seen >> st.MPI_SOURCE & 1)) {
                fprintf(stderr, "rank 0: any-source receive %d: source %d tag %d data %d %d\n", k, st.MPI_SOURCE, st.MPI_TAG, h[0], h[1]);
                errors++;
            }
            if (st.MPI_SOURCE > 0 && st.MPI_SOURCE < 31) seen |= 1 << st.MPI_SOURCE;
        }
    } else {
        int h[2] = {rank, 3 * rank};
        put(d, h, sizeof h);
        MPI_Send(d, 2, MPI_INT, 0, 50 + rank, MPI_COMM_WORLD);
    }
    /* No later message (tag 60 from rank size-1 to rank 0) may meet rank 0's any-tag receives. */
    MPI_Barrier(MPI_COMM_WORLD);
    /* Truncation into a device buffer, then a message after it on the same pair. */
    if (size > 1) {
        int *big = alloc_k(DEV, 64 * sizeof(int)), *small = alloc_k(DEV, 8 * sizeof(int));
        int h[64];
        for (int i = 0; i < 64; i++) h[i] = val(rank, i);
        put(big, h, sizeof h);
        MPI_Request q[2];
        MPI_Status st[2];
        MPI_Irecv(small, 8, MPI_INT, from, 60, MPI_COMM_WORLD, &q[0]);
        MPI_Isend(big, 64, MPI_INT, to, 60, MPI_COMM_WORLD, &q[1]);
        int rc = MPI_Wait(&q[0], &st[0]), cls = -1;
        MPI_Error_class(rc, &cls);
        if (cls != MPI_ERR_TRUNCATE) { fprintf(stderr, "rank %d: truncated device receive: class %d\n", rank, cls); errors++; }
        MPI_Wait(&q[1], &st[1]);
        MPI_Sendrecv(big, 8, MPI_INT, to, 61, small, 8, MPI_INT, from, 61, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        int w[8];
        for (int i = 0; i < 8; i++) w[i] = val(from, i);
        check("message after a truncated one", 8, small, w, 8);
        free_k(DEV, big); free_k(DEV, small);
    }
    /* Probe, then receive the probed size. */
    if (size > 1) {
        int *sd = alloc_k(DEV, 100 * sizeof(int)), *rd = alloc_k(DEV, 100 * sizeof(int));
        int h[100];
        for (int i = 0; i < 100; i++) h[i] = val(rank, i);
        put(sd, h, sizeof h);
        MPI_Request q;
        MPI_Isend(sd, 37, MPI_INT, to, 70, MPI_COMM_WORLD, &q);
        MPI_Status st;
        MPI_Probe(from, 70, MPI_COMM_WORLD, &st);
        int n = -1;
        MPI_Get_count(&st, MPI_INT, &n);
        if (n != 37) { fprintf(stderr, "rank %d: probe count %d want 37\n", rank, n); errors++; }
        MPI_Recv(rd, n > 0 && n <= 100 ? n : 100, MPI_INT, from, 70, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Wait(&q, MPI_STATUS_IGNORE);
        int w[37];
        for (int i = 0; i < 37; i++) w[i] = val(from, i);
        check("probed device message", 37, rd, w, 37);
        free_k(DEV, sd); free_k(DEV, rd);
    }
    /* A device receive nothing matches is cancelled. */
    {
        MPI_Request q;
        MPI_Status st;
        int flag = 0;
        MPI_Irecv(d, 2, MPI_INT, from, 80, MPI_COMM_WORLD, &q);
        MPI_Cancel(&q);
        MPI_Wait(&q, &st);
        MPI_Test_cancelled(&st, &flag);
        if (!flag) { fprintf(stderr, "rank %d: device receive not cancelled\n", rank); errors++; }
    }
    free_k(DEV, d);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    MPI_Barrier(MPI_COMM_WORLD);
}

/* A vector type on the device: every other int; gaps must keep their poison. */
static void test_vector(void) {
    int to = (rank + 1) % size, from = (rank - 1 + size) % size;
    MPI_Datatype vec;
    int nb = 1001;
    MPI_Type_vector(nb, 1, 2, MPI_INT, &vec);
    MPI_Type_commit(&vec);
    size_t span = (size_t)(2 * nb - 1);
    int *h = malloc(span * sizeof(int)), *want = malloc(span * sizeof(int));
    for (size_t i = 0; i < span; i++) h[i] = val(rank, i);
    int *s = alloc_k(DEV, span * 4), *r = alloc_k(DEV, span * 4), *c = alloc_k(DEV, nb * 4);
    put(s, h, span * 4);
    poison(DEV, r, span * 4);
    MPI_Sendrecv(s, 1, vec, to, 8, r, 1, vec, from, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    memset(want, 0xA5, span * 4);
    for (size_t i = 0; i < span; i += 2) want[i] = val(from, i);
    check("vector device->device (gaps kept)", 1, r, want, span);
    /* vector -> contiguous */
    poison(DEV, c, nb * 4);
    MPI_Sendrecv(s, 1, vec, to, 9, c, nb, MPI_INT, from, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    for (int i = 0; i < nb; i++) want[i] = val(from, 2 * (size_t)i);
    check("vector device->contiguous device", 1, c, want, nb);
    /* Collective with the vector type: bcast from rank 0 into the vector layout. */
    put(r, h, span * 4);
    MPI_Bcast(r, 1, vec, 0, MPI_COMM_WORLD);
    for (size_t i = 0; i < span; i++) want[i] = (i % 2 == 0) ? val(0, i) : val(rank, i);
    check("bcast vector device", 1, r, want, span);
    /* Pack / Unpack with device memory on both sides. */
    int psize = 0;
    MPI_Pack_size(1, vec, MPI_COMM_WORLD, &psize);
    void *pk = alloc_k(DEV, psize);
    int pos = 0;
    MPI_Pack(s, 1, vec, pk, psize, &pos, MPI_COMM_WORLD);
    for (int i = 0; i < nb; i++) want[i] = val(rank, 2 * (size_t)i);
    check("pack device vector to device", 1, pk, want, nb);
    poison(DEV, r, span * 4);
    pos = 0;
    MPI_Unpack(pk, psize, &pos, r, 1, vec, MPI_COMM_WORLD);
    memset(want, 0xA5, span * 4);
    for (size_t i = 0; i < span; i += 2) want[i] = val(rank, i);
    check("unpack device to device vector", 1, r, want, span);
    free_k(DEV, pk);
    free_k(DEV, s); free_k(DEV, r); free_k(DEV, c);
    MPI_Type_free(&vec);
    free(h); free(want);
}

/* Derived layouts on the device, each described twice: as an MPI datatype and as the int
 * blocks (offset, length) of one element with its extent in ints, from which the references
 * are computed here. Every output is poisoned first (0xA5 bytes); the layout's gaps must keep
 * the poison. Small layouts are packed by the GPU pack kernel from a run list or a strided
 * descriptor; "big vector" is a 1M-block strided layout; "big indexed" needs a run list larger
 * than GPUMPI_CUDA_PACK_LISTS (4 MiB) and takes the host fallback. */
typedef struct {
    const char *name;
    MPI_Datatype t;
    int cnt, nb, allint;
    long ext;     /* extent in ints */
    int *off, *len; /* nb blocks of one element, in ints, in packed order */
} Lay;

#define POISON ((int)0xA5A5A5A5)
static size_t lay_span(const Lay *L) {
    long hi = 0;
    for (int j = 0; j < L->nb; j++) if (L->off[j] + L->len[j] > hi) hi = L->off[j] + L->len[j];
    return (size_t)((L->cnt - 1) * L->ext + hi);
}
/* Positions (ints from the buffer) of the packed ints of cnt elements, in packed order. */
static size_t *lay_pos(const Lay *L, size_t *m) {
    size_t n = 0;
    for (int j = 0; j < L->nb; j++) n += L->len[j];
    n *= L->cnt;
    size_t *p = malloc(n * sizeof *p + 8), k = 0;
    for (int e = 0; e < L->cnt; e++)
        for (int j = 0; j < L->nb; j++)
            for (int i = 0; i < L->len[j]; i++) p[k++] = (size_t)(e * L->ext + L->off[j] + i);
    *m = n;
    return p;
}
static Lay lay_new(const char *name, int cnt, long ext, int nb, const int *off, const int *len) {
    Lay L = {name, MPI_DATATYPE_NULL, cnt, nb, 1, ext, malloc(nb * sizeof(int)), malloc(nb * sizeof(int))};
    memcpy(L.off, off, nb * sizeof(int));
    memcpy(L.len, len, nb * sizeof(int));
    return L;
}

static void test_lay(Lay *L) {
    int to = (rank + 1) % size, from = (rank - 1 + size) % size, root = size - 1;
    size_t S = lay_span(L), m = 0, *pos = lay_pos(L, &m), B = S * sizeof(int);
    size_t SA = (size_t)(size - 1) * L->cnt * L->ext + S; /* span of size * cnt elements */
    int *h = malloc(SA * sizeof(int) + 4), *want = malloc(SA * sizeof(int) + 4);
    char what[160];
    for (size_t i = 0; i < S; i++) h[i] = val(rank, i);
#define WANT_LAYOUT(src_rank) do { for (size_t i = 0; i < S; i++) want[i] = POISON; \
        for (size_t q = 0; q < m; q++) want[pos[q]] = val(src_rank, pos[q]); } while (0)
#define LCHECK(fmt, buf, n, ...) do { snprintf(what, sizeof what, "%s: " fmt, L->name, __VA_ARGS__); check(what, L->cnt, buf, want, n); } while (0)
    /* Point to point, layout to layout, every pair of memory kinds (managed: the host path). */
    static const int kinds[][2] = {{DEV, DEV}, {DEV, HOST}, {HOST, DEV}, {MANAGED, MANAGED}, {DEV, MANAGED}};
    for (int c = 0; c < 5; c++) {
        int sk = kinds[c][0], rk = kinds[c][1];
        void *s = alloc_k(sk, B), *r = alloc_k(rk, B);
        put(s, h, B);
        poison(rk, r, B);
        MPI_Status st;
        MPI_Sendrecv(s, L->cnt, L->t, to, 11, r, L->cnt, L->t, from, 11, MPI_COMM_WORLD, &st);
        int got = -1;
        MPI_Get_count(&st, L->t, &got);
        if (got != L->cnt) { fprintf(stderr, "rank %d: %s: count %d want %d\n", rank, L->name, got, L->cnt); errors++; }
        WANT_LAYOUT(from);
        LCHECK("sendrecv %s->%s (gaps kept)", r, S, kname[sk], kname[rk]);
        /* Nonblocking, receive posted first. */
        poison(rk, r, B);
        MPI_Request q[2];
        MPI_Irecv(r, L->cnt, L->t, from, 12, MPI_COMM_WORLD, &q[0]);
        MPI_Isend(s, L->cnt, L->t, to, 12, MPI_COMM_WORLD, &q[1]);
        MPI_Waitall(2, q, MPI_STATUSES_IGNORE);
        LCHECK("isend/irecv %s->%s (gaps kept)", r, S, kname[sk], kname[rk]);
        free_k(sk, s); free_k(rk, r);
    }
    /* Layout -> contiguous ints and contiguous ints -> layout, device to device. */
    {
        int *s = alloc_k(DEV, B), *r = alloc_k(DEV, B), *cb = alloc_k(DEV, m * 4);
        put(s, h, B);
        poison(DEV, cb, m * 4);
        MPI_Sendrecv(s, L->cnt, L->t, to, 13, cb, (int)m, MPI_INT, from, 13, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        for (size_t q = 0; q < m; q++) want[q] = val(from, pos[q]);
        LCHECK("layout -> contiguous %s", cb, m, "device");
        int *ci = malloc(m * 4 + 4);
        for (size_t q = 0; q < m; q++) ci[q] = val(rank, q);
        put(cb, ci, m * 4);
        poison(DEV, r, B);
        MPI_Sendrecv(cb, (int)m, MPI_INT, to, 14, r, L->cnt, L->t, from, 14, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        for (size_t i = 0; i < S; i++) want[i] = POISON;
        for (size_t q = 0; q < m; q++) want[pos[q]] = val(from, q);
        LCHECK("contiguous -> layout %s (gaps kept)", r, S, "device");
        /* A short message: only the first half of the ints arrive; the rest keeps poison. */
        size_t half = m / 2;
        poison(DEV, r, B);
        MPI_Sendrecv(cb, (int)half, MPI_INT, to, 15, r, L->cnt, L->t, from, 15, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        for (size_t i = 0; i < S; i++) want[i] = POISON;
        for (size_t q = 0; q < half; q++) want[pos[q]] = val(from, q);
        LCHECK("contiguous prefix (%zu ints) -> layout device", r, S, half);
        free(ci);
        free_k(DEV, s); free_k(DEV, r); free_k(DEV, cb);
    }
    /* Collectives: Bcast from the last rank, Allgather, Allreduce (int layouts). */
    {
        int *r = alloc_k(DEV, SA * 4), *s = alloc_k(DEV, B);
        poison(DEV, r, B);
        if (rank == root) put(r, h, B);
        MPI_Bcast(r, L->cnt, L->t, root, MPI_COMM_WORLD);
        WANT_LAYOUT(root);
        if (rank == root) for (size_t i = 0; i < S; i++) want[i] = h[i];
        LCHECK("bcast %s (gaps kept)", r, S, "device");
        put(s, h, B);
        poison(DEV, r, SA * 4);
        MPI_Allgather(s, L->cnt, L->t, r, L->cnt, L->t, MPI_COMM_WORLD);
        for (size_t i = 0; i < SA; i++) want[i] = POISON;
        for (int p = 0; p < size; p++)
            for (size_t q = 0; q < m; q++) want[(size_t)p * L->cnt * L->ext + pos[q]] = val(p, pos[q]);
        LCHECK("allgather %s (gaps kept)", r, SA, "device");
        /* Gatherv-like irregular displacements through Allgatherv: block p at p*cnt elements. */
        int *cn = malloc(size * sizeof(int)), *dp = malloc(size * sizeof(int));
        for (int p = 0; p < size; p++) { cn[p] = L->cnt; dp[p] = p * L->cnt; }
        poison(DEV, r, SA * 4);
        MPI_Allgatherv(s, L->cnt, L->t, r, cn, dp, L->t, MPI_COMM_WORLD);
        LCHECK("allgatherv %s (gaps kept)", r, SA, "device");
        free(cn); free(dp);
        if (L->allint) {
            poison(DEV, r, B);
            MPI_Allreduce(s, r, L->cnt, L->t, MPI_SUM, MPI_COMM_WORLD);
            for (size_t i = 0; i < S; i++) want[i] = POISON;
            for (size_t q = 0; q < m; q++) {
                long long sum = 0;
                for (int p = 0; p < size; p++) sum += val(p, pos[q]);
                want[pos[q]] = (int)sum;
            }
            LCHECK("allreduce sum %s (gaps kept)", r, S, "device");
        }
        free_k(DEV, r); free_k(DEV, s);
    }
    /* MPI_Pack / MPI_Unpack: device layout <-> device, host packed buffers. */
    {
        int psize = 0;
        MPI_Pack_size(L->cnt, L->t, MPI_COMM_WORLD, &psize);
        if ((size_t)psize < m * 4) { fprintf(stderr, "rank %d: %s: pack size %d\n", rank, L->name, psize); errors++; }
        int *s = alloc_k(DEV, B), *r = alloc_k(DEV, B);
        put(s, h, B);
        for (int pk = 0; pk < 2; pk++) {
            int k = pk ? HOST : DEV;
            void *pb = alloc_k(k, psize);
            poison(k, pb, psize);
            int p0 = 0;
            MPI_Pack(s, L->cnt, L->t, pb, psize, &p0, MPI_COMM_WORLD);
            if ((size_t)p0 != m * 4) { fprintf(stderr, "rank %d: %s: pack position %d\n", rank, L->name, p0); errors++; }
            for (size_t q = 0; q < m; q++) want[q] = val(rank, pos[q]);
            LCHECK("MPI_Pack device layout -> %s", pb, m, kname[k]);
            poison(DEV, r, B);
            p0 = 0;
            MPI_Unpack(pb, psize, &p0, r, L->cnt, L->t, MPI_COMM_WORLD);
            WANT_LAYOUT(rank);
            LCHECK("MPI_Unpack %s -> device layout (gaps kept)", r, S, kname[k]);
            free_k(k, pb);
        }
        free_k(DEV, s); free_k(DEV, r);
    }
#undef WANT_LAYOUT
#undef LCHECK
    free(pos); free(h); free(want);
}

static void test_derived(void) {
    Lay ls[5];
    int n = 0;
    { /* indexed, irregular blocks (3 elements; extent = last block end) */
        int off[] = {0, 4, 6, 13, 17}, len[] = {3, 1, 5, 2, 1};
        ls[n] = lay_new("indexed", 3, 18, 5, off, len);
        MPI_Type_indexed(5, len, off, MPI_INT, &ls[n].t);
        n++;
    }
    { /* struct {int; double; int[3]} at bytes 0, 8, 20: gaps at ints 1 and 4, extent 32 bytes */
        int off[] = {0, 2, 5}, len[] = {1, 2, 3};
        ls[n] = lay_new("struct with gaps", 4, 8, 3, off, len);
        ls[n].allint = 0;
        int bl[] = {1, 1, 3};
        MPI_Aint d[] = {0, 8, 20};
        MPI_Datatype ty[] = {MPI_INT, MPI_DOUBLE, MPI_INT};
        MPI_Type_create_struct(3, bl, d, ty, &ls[n].t);
        n++;
    }
    { /* vector of 3 x 2 ints, stride 3, resized to an extent of 11 ints; 5 elements */
        int off[] = {0, 3, 6}, len[] = {2, 2, 2};
        ls[n] = lay_new("resized vector", 5, 11, 3, off, len);
        MPI_Datatype v;
        MPI_Type_vector(3, 2, 3, MPI_INT, &v);
        MPI_Type_create_resized(v, 0, 11 * 4, &ls[n].t);
        MPI_Type_free(&v);
        n++;
    }
    { /* big vector: 1M single ints, stride 3 (strided descriptor, no list) */
        int nb = 1 << 20;
        int *off = malloc(nb * sizeof(int)), *len = malloc(nb * sizeof(int));
        for (int i = 0; i < nb; i++) { off[i] = 3 * i; len[i] = 1; }
        ls[n] = lay_new("big vector", 1, 3L * nb - 2, nb, off, len);
        MPI_Type_vector(nb, 1, 3, MPI_INT, &ls[n].t);
        free(off); free(len);
        n++;
    }
    { /* big indexed: 200000 irregular blocks, a 4.8 MB run list: the host fallback */
        int nb = 200000;
        int *off = malloc(nb * sizeof(int)), *len = malloc(nb * sizeof(int));
        for (int i = 0; i < nb; i++) { off[i] = 4 * i + i % 2; len[i] = 1 + (i % 3 == 0); }
        ls[n] = lay_new("big indexed", 1, off[nb - 1] + len[nb - 1], nb, off, len);
        MPI_Type_indexed(nb, len, off, MPI_INT, &ls[n].t);
        free(off); free(len);
        n++;
    }
    for (int i = 0; i < n; i++) {
        MPI_Type_commit(&ls[i].t);
        test_lay(&ls[i]);
        MPI_Type_free(&ls[i].t);
        free(ls[i].off); free(ls[i].len);
    }
    if (rank == 0) printf("derived: indexed, struct with gaps, resized vector, big vector, big indexed done\n");
}

/* Every collective with device buffers (kind k), checked against a host reference. */
static void test_coll(int k, size_t maxn) {
    for (size_t c = 0; c < NCOUNTS; c++) {
        size_t n = counts[c];
        if (n > maxn) break;
        size_t b = n * sizeof(int), nb = b * size;
        int *h = malloc(nb + 4), *want = malloc(nb + 4);
        int *s = alloc_k(k, nb), *r = alloc_k(k, nb);
        char what[96];
#define CHECK(name, buf, len) do { snprintf(what, sizeof what, "%s %s", name, kname[k]); check(what, n, buf, want, len); } while (0)
        /* Bcast from the last rank. */
        for (size_t i = 0; i < n; i++) { h[i] = val(rank, i); want[i] = val(size - 1, i); }
        put(r, h, b);
        MPI_Bcast(r, (int)n, MPI_INT, size - 1, MPI_COMM_WORLD);
        CHECK("bcast", r, n);
        /* Allreduce sum, and in place; Reduce to root 0. */
        for (size_t i = 0; i < n; i++) {
            h[i] = val(rank, i);
            long long sum = 0;
            for (int q = 0; q < size; q++) sum += val(q, i);
            want[i] = (int)sum;
        }
        put(s, h, b); poison(k, r, b);
        MPI_Allreduce(s, r, (int)n, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        CHECK("allreduce", r, n);
        put(r, h, b);
        MPI_Allreduce(MPI_IN_PLACE, r, (int)n, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        CHECK("allreduce in-place", r, n);
        poison(k, r, b);
        MPI_Reduce(s, r, (int)n, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
        if (rank == 0) CHECK("reduce", r, n);
        MPI_Request q;
        poison(k, r, b);
        MPI_Iallreduce(s, r, (int)n, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q);
        MPI_Wait(&q, MPI_STATUS_IGNORE);
        CHECK("iallreduce", r, n);
        if (n <= (1u << 20)) {
            /* Allgather, Gather (root 0), Alltoall, Reduce_scatter_block, Scan, Exscan, Scatter */
            put(s, h, b); poison(k, r, nb);
            for (int p = 0; p < size; p++) for (size_t i = 0; i < n; i++) want[p * n + i] = val(p, i);
            MPI_Allgather(s, (int)n, MPI_INT, r, (int)n, MPI_INT, MPI_COMM_WORLD);
            CHECK("allgather", r, n * size);
            poison(k, r, nb);
            MPI_Gather(s, (int)n, MPI_INT, r, (int)n, MPI_INT, 0, MPI_COMM_WORLD);
            if (rank == 0) CHECK("gather", r, n * size);
            /* Allgather in place. */
            poison(k, r, nb);
            put((char *)r + rank * b, h, b);
            MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, r, (int)n, MPI_INT, MPI_COMM_WORLD);
            CHECK("allgather in-place", r, n * size);
            /* Alltoall: block p of rank q's send = val(q*size+p, i). */
            for (int p = 0; p < size; p++) for (size_t i = 0; i < n; i++) {
                h[p * n + i] = val(rank * size + p, i);
                want[p * n + i] = val(p * size + rank, i);
            }
            put(s, h, nb); poison(k, r, nb);
            MPI_Alltoall(s, (int)n, MPI_INT, r, (int)n, MPI_INT, MPI_COMM_WORLD);
            CHECK("alltoall", r, n * size);
            /* Alltoallv with the same layout. */
            int *cn = malloc(size * sizeof(int)), *dp = malloc(size * sizeof(int));
            for (int p = 0; p < size; p++) { cn[p] = (int)n; dp[p] = (int)(p * n); }
            poison(k, r, nb);
            MPI_Alltoallv(s, cn, dp, MPI_INT, r, cn, dp, MPI_INT, MPI_COMM_WORLD);
            CHECK("alltoallv", r, n * size);
            /* Scatter from root 0: block p = val(p*size + 0, i) as laid out above on rank 0. */
            for (size_t i = 0; i < n; i++) want[i] = val(0 * size + rank, i);
            poison(k, r, b);
            MPI_Scatter(s, (int)n, MPI_INT, r, (int)n, MPI_INT, 0, MPI_COMM_WORLD);
            CHECK("scatter", r, n);
            /* Reduce_scatter_block: block rank of the sum over ranks. */
            for (size_t i = 0; i < n; i++) {
                long long sum = 0;
                for (int p = 0; p < size; p++) sum += val(p * size + rank, i);
                want[i] = (int)sum;
            }
            poison(k, r, b);
            MPI_Reduce_scatter_block(s, r, (int)n, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
            CHECK("reduce_scatter_block", r, n);
            /* Scan / Exscan (sum) */
            for (size_t i = 0; i < n; i++) h[i] = val(rank, i);
            put(s, h, b);
            for (size_t i = 0; i < n; i++) {
                long long sum = 0;
                for (int p = 0; p <= rank; p++) sum += val(p, i);
                want[i] = (int)sum;
            }
            poison(k, r, b);
            MPI_Scan(s, r, (int)n, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
            CHECK("scan", r, n);
            if (rank > 0) {
                for (size_t i = 0; i < n; i++) want[i] -= val(rank, i);
                poison(k, r, b);
                MPI_Exscan(s, r, (int)n, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
                CHECK("exscan", r, n);
            } else {
                MPI_Exscan(s, r, (int)n, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
            }
            /* Allgatherv with rank-dependent counts (rank p contributes n - p if possible). */
            int tot = 0;
            for (int p = 0; p < size; p++) { cn[p] = n > (size_t)p ? (int)(n - p) : 0; dp[p] = tot; tot += cn[p]; }
            for (int p = 0; p < size; p++) for (int i = 0; i < cn[p]; i++) want[dp[p] + i] = val(p, i);
            poison(k, r, nb);
            MPI_Allgatherv(s, cn[rank], MPI_INT, r, cn, dp, MPI_INT, MPI_COMM_WORLD);
            CHECK("allgatherv", r, tot);
            free(cn); free(dp);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        free_k(k, s); free_k(k, r); free(h); free(want);
#undef CHECK
    }
}

/* Mixed memory kinds between ranks: even ranks device, odd ranks host; send and recv kinds differ. */
static void test_mixed(void) {
    size_t n = 100003, b = n * 4;
    int sk = rank % 2 ? HOST : DEV, rk = rank % 2 ? DEV : HOST;
    int *h = malloc(b), *want = malloc(b);
    int *s = alloc_k(sk, b), *r = alloc_k(rk, b);
    for (size_t i = 0; i < n; i++) {
        h[i] = val(rank, i);
        long long sum = 0;
        for (int q = 0; q < size; q++) sum += val(q, i);
        want[i] = (int)sum;
    }
    put(s, h, b); poison(rk, r, b);
    MPI_Allreduce(s, r, (int)n, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    check("allreduce mixed kinds", n, r, want, n);
    /* max of doubles, managed memory */
    double *dm = alloc_k(MANAGED, n * 8), *dh = malloc(n * 8);
    for (size_t i = 0; i < n; i++) dh[i] = (double)((rank * 7919 + i * 13) % 1000) + 0.5;
    put(dm, dh, n * 8);
    MPI_Allreduce(MPI_IN_PLACE, dm, (int)n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    get(dh, dm, n * 8);
    for (size_t i = 0; i < n; i++) {
        double m = 0;
        for (int q = 0; q < size; q++) { double v = (double)((q * 7919 + i * 13) % 1000) + 0.5; if (v > m) m = v; }
        if (dh[i] != m) { fprintf(stderr, "rank %d: managed max [%zu] %g want %g\n", rank, i, dh[i], m); errors++; break; }
    }
    /* Reduce_local on the device: inout = in + inout. */
    int *a = alloc_k(DEV, b), *c = alloc_k(DEV, b);
    put(a, h, b); put(c, h, b);
    MPI_Reduce_local(a, c, (int)n, MPI_INT, MPI_SUM);
    for (size_t i = 0; i < n; i++) want[i] = 2 * h[i];
    check("reduce_local device", n, c, want, n);
    /* Reduce_local on the device with doubles (max) and int64 (prod): kernel path. */
    double *xa = alloc_k(DEV, n * 8), *xb = alloc_k(DEV, n * 8), *xh = malloc(n * 8), *xw = malloc(n * 8);
    for (size_t i = 0; i < n; i++) { xh[i] = (double)(i % 17) - 8.5; xw[i] = (double)(i % 13) - 6.0; }
    put(xa, xh, n * 8); put(xb, xw, n * 8);
    MPI_Reduce_local(xa, xb, (int)n, MPI_DOUBLE, MPI_MAX);
    get(xw, xb, n * 8);
    for (size_t i = 0; i < n; i++) {
        double w = (double)(i % 13) - 6.0, v = xh[i] > w ? xh[i] : w;
        if (xw[i] != v) { fprintf(stderr, "rank %d: reduce_local max double [%zu] %g want %g\n", rank, i, xw[i], v); errors++; break; }
    }
    long long *la = (long long *)xa, *lb = (long long *)xb, *lh = (long long *)xh, *lw = (long long *)xw;
    for (size_t i = 0; i < n; i++) { lh[i] = (long long)(i % 5) + 1; lw[i] = (long long)(i % 7) - 3; }
    put(la, lh, n * 8); put(lb, lw, n * 8);
    MPI_Reduce_local(la, lb, (int)n, MPI_INT64_T, MPI_PROD);
    get(lw, lb, n * 8);
    for (size_t i = 0; i < n; i++) {
        long long v = ((long long)(i % 5) + 1) * ((long long)(i % 7) - 3);
        if (lw[i] != v) { fprintf(stderr, "rank %d: reduce_local prod int64 [%zu] %lld want %lld\n", rank, i, lw[i], v); errors++; break; }
    }
    free_k(DEV, xa); free_k(DEV, xb); free(xh); free(xw);
    free_k(DEV, a); free_k(DEV, c); free_k(MANAGED, dm); free(dh);
    free_k(sk, s); free_k(rk, r); free(h); free(want);
}

/* Free a device buffer and allocate again (the driver usually returns the same address), using
 * it as host-visible managed memory and as plain device memory in turn: classification must
 * follow the allocation, not the address. */
static void test_realloc(void) {
    size_t n = 4099, b = n * 4;
    int from = (rank - 1 + size) % size, to = (rank + 1) % size;
    int *h = malloc(b), *want = malloc(b);
    for (size_t i = 0; i < n; i++) { h[i] = val(rank, i); want[i] = val(from, i); }
    int same = 0;
    void *prev = NULL;
    for (int round = 0; round < 4; round++) {
        int k = round % 2 ? MANAGED : DEV;
        void *s = alloc_k(DEV, b), *r = alloc_k(k, b);
        if (round > 0 && r == prev) same++;
        put(s, h, b); poison(k, r, b);
        MPI_Sendrecv(s, (int)n, MPI_INT, to, 11, r, (int)n, MPI_INT, from, 11, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        check(round % 2 ? "realloc managed" : "realloc device", n, r, want, n);
        prev = r;
        free_k(k, r); free_k(DEV, s);
    }
    /* Device memory freed, then a host buffer received into: must not be taken as device. */
    int *hh = malloc(b);
    memset(hh, 0xA5, b);
    MPI_Sendrecv(h, (int)n, MPI_INT, to, 12, hh, (int)n, MPI_INT, from, 12, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    check("host after free", n, hh, want, n);
    if (rank == 0) printf("realloc: %d of 3 reallocations landed at the freed address\n", same);
    free(hh); free(h); free(want);
}

/* Every kernel op and type through Allreduce/Reduce/Reduce_scatter_block on device buffers, at
 * sizes that take the one-shot and the two-shot paths (odd counts included). Values are small
 * integers, so every type computes them exactly. */
static double opv(int r, size_t i) { return (double)(1 + (int)((i * 7 + (size_t)r * 3) % 3)); }
/* Exact encodings of small positive integers (and 0) in binary16 / bfloat16 (mpi-ext.h types). */
static uint16_t enc_half(double v, int bf)
{
    int k = (int)v, e = 0;
    if (k == 0) return 0;
    while ((k >> (e + 1)) != 0) e++;
    return bf ? (uint16_t)(((e + 127) << 7) | ((k << (7 - e)) & 0x7f))
              : (uint16_t)(((e + 15) << 10) | ((k << (10 - e)) & 0x3ff));
}
static double dec_half(uint16_t b, int bf)
{
    int mbits = bf ? 7 : 10, bias = bf ? 127 : 15;
    int exp = b >> mbits, man = b & ((1 << mbits) - 1);
    if (exp == 0 && man == 0) return 0;
    return ldexp((double)((1 << mbits) + man), exp - bias - mbits);
}
static void test_ops(void) {
    MPI_Datatype ts[] = {MPI_INT, MPI_INT64_T, MPI_FLOAT, MPI_DOUBLE, MPIX_C_FLOAT16, MPIX_BFLOAT16};
    const char *tn[] = {"int", "int64", "float", "double", "float16", "bfloat16"};
    size_t tsz[] = {4, 8, 4, 8, 2, 2};
    MPI_Op os[] = {MPI_SUM, MPI_PROD, MPI_MIN, MPI_MAX};
    const char *on[] = {"sum", "prod", "min", "max"};
    size_t ns[] = {1, 33, 65537, 1000003};
    for (int t = 0; t < 6; t++) for (int o = 0; o < 4; o++) for (int c = 0; c < 4; c++) {
        size_t n = ns[c], b = n * tsz[t];
        char *h = malloc(b * size), *g = malloc(b * size);
        double *want = malloc(n * sizeof(double) * size);
        for (size_t i = 0; i < n * size; i++) {
            double acc = opv(0, i);
            for (int q = 1; q < size; q++) {
                double v = opv(q, i);
                acc = o == 0 ? acc + v : o == 1 ? acc * v : o == 2 ? (v < acc ? v : acc) : (v > acc ? v : acc);
            }
            want[i] = acc;
            double mine = opv(rank, i);
            if (t == 0) ((int *)h)[i] = (int)mine;
            else if (t == 1) ((int64_t *)h)[i] = (int64_t)mine;
            else if (t == 2) ((float *)h)[i] = (float)mine;
            else if (t == 3) ((double *)h)[i] = mine;
            else ((uint16_t *)h)[i] = enc_half(mine, t == 5);
        }
        void *s = alloc_k(DEV, b * size), *r = alloc_k(DEV, b * size);
        put(s, h, b * size);
        for (int which = 0; which < 3; which++) {
            poison(DEV, r, b * size);
            size_t off = 0, cnt = n;
            if (which == 0) MPI_Allreduce(s, r, (int)n, ts[t], os[o], MPI_COMM_WORLD);
            else if (which == 1) MPI_Reduce(s, r, (int)n, ts[t], os[o], size - 1, MPI_COMM_WORLD);
            else { MPI_Reduce_scatter_block(s, r, (int)n, ts[t], os[o], MPI_COMM_WORLD); off = (size_t)rank * n; }
            if (which == 1 && rank != size - 1) continue;
            get(g, r, cnt * tsz[t]);
            for (size_t i = 0; i < cnt; i++) {
                double v = t == 0 ? ((int *)g)[i] : t == 1 ? (double)((int64_t *)g)[i] : t == 2 ? ((float *)g)[i]
                         : t == 3 ? ((double *)g)[i] : dec_half(((uint16_t *)g)[i], t == 5);
                if (v != want[off + i]) {
                    if (errors < 20)
                        fprintf(stderr, "rank %d: %s %s %s count %zu: [%zu] = %g, want %g\n", rank,
                                which == 0 ? "allreduce" : which == 1 ? "reduce" : "reduce_scatter_block",
                                tn[t], on[o], n, i, v, want[off + i]);
                    errors++;
                    break;
                }
            }
        }
        free_k(DEV, s); free_k(DEV, r); free(h); free(g); free(want);
    }
    if (rank == 0) printf("ops: 6 types (incl. MPIX_C_FLOAT16, MPIX_BFLOAT16) x 4 ops x 4 counts x 3 collectives done\n");
}

/* A communicator whose ranks are not the world's (reversed): the registration cache is keyed by
 * process, not by communicator rank. Then more live peer buffers than the cache holds (200 >
 * GPUMPI_CUDA_IPC_CACHE=128) go through the IPC path while small resident allreduces keep
 * running on the communicator scratch, which must never be evicted. */
static void test_split_churn(void)
{
    MPI_Comm rev;
    MPI_Comm_split(MPI_COMM_WORLD, 0, size - rank, &rev);
    int r = 0;
    MPI_Comm_rank(rev, &r);
    for (int round = 0; round < 2; round++) {
        size_t n = round ? 1000003 : 5; /* two-shot, then the resident path */
        size_t b = n * sizeof(int);
        int *h = malloc(b * size), *g = malloc(b * size);
        void *s = alloc_k(DEV, b * size), *d = alloc_k(DEV, b * size);
        for (size_t i = 0; i < n * size; i++) h[i] = (int)(i % 977) + r * 5;
        put(s, h, b * size);
        poison(DEV, d, b * size);
        MPI_Allreduce(s, d, (int)n, MPI_INT, MPI_SUM, rev);
        get(g, d, b);
        for (size_t i = 0; i < n; i++)
            if (g[i] != size * (int)(i % 977) + 5 * size * (size - 1) / 2) {
                if (errors < 20) fprintf(stderr, "rank %d: split allreduce n=%zu [%zu] = %d\n", rank, n, i, g[i]);
                errors++;
                break;
            }
        poison(DEV, d, b * size);
        MPI_Alltoall(s, (int)n, MPI_INT, d, (int)n, MPI_INT, rev);
        get(g, d, b * size);
        for (int p = 0; p < size; p++)
            for (size_t i = 0; i < n; i++) {
                size_t k = (size_t)r * n + i;
                if (g[(size_t)p * n + i] != (int)(k % 977) + p * 5) {
                    if (errors < 20) fprintf(stderr, "rank %d: split alltoall n=%zu from %d [%zu]\n", rank, n, p, i);
                    errors++;
                    p = size;
                    break;
                }
            }
        free_k(DEV, s); free_k(DEV, d); free(h); free(g);
    }
    /* 200 live device buffers of 32 KiB through the IPC path, a resident allreduce after each */
    enum { NB = 200 };
    size_t n = 8192, b = n * sizeof(int);
    void *bufs[NB], *rb = alloc_k(DEV, b);
    int *h = malloc(b), *g = malloc(b), one = 1, sum = 0;
    void *ds = alloc_k(DEV, sizeof(int)), *dr = alloc_k(DEV, sizeof(int));
    put(ds, &one, sizeof(int));
    int to = (r + 1) % size, from = (r - 1 + size) % size;
    for (int k = 0; k < NB; k++) {
        bufs[k] = alloc_k(DEV, b);
        for (size_t i = 0; i < n; i++) h[i] = k * 3 + r;
        put(bufs[k], h, b);
        MPI_Sendrecv(bufs[k], (int)n, MPI_INT, to, 21, rb, (int)n, MPI_INT, from, 21, rev, MPI_STATUS_IGNORE);
        get(g, rb, sizeof(int) * 2);
        if (g[0] != k * 3 + from || g[1] != k * 3 + from) {
            if (errors < 20) fprintf(stderr, "rank %d: churn sendrecv %d got %d\n", rank, k, g[0]);
            errors++;
        }
        MPI_Allreduce(ds, dr, 1, MPI_INT, MPI_SUM, rev);
        get(&sum, dr, sizeof(int));
        if (sum != size) {
            if (errors < 20) fprintf(stderr, "rank %d: churn allreduce %d = %d\n", rank, k, sum);
            errors++;
        }
    }
    for (int k = 0; k < NB; k++) free_k(DEV, bufs[k]);
    free_k(DEV, rb); free_k(DEV, ds); free_k(DEV, dr); free(h); free(g);
    MPI_Comm_free(&rev);
    if (rank == 0) printf("split/churn: reversed communicator and %d live peer buffers done\n", NB);
}

int main(int argc, char **argv) {
    if (cudart_mpi_init(&argc, &argv, -1, &rank, &size) < 0) return 0;
    int dev = cudart_pick_device();
    if (MPIX_Query_cuda_support() != 1) {
        fprintf(stderr, "rank %d: MPIX_Query_cuda_support() != 1 with a device present\n", rank);
        errors++;
    }
    size_t maxn = argc > 1 ? strtoull(argv[1], NULL, 10) : (16u << 20);
    if (rank == 0) printf("gpu_test: %d ranks, rank 0 on device %d, max count %zu\n", size, dev, maxn);
    test_p2p(DEV, DEV);
    test_p2p(DEV, HOST);
    test_p2p(HOST, DEV);
    test_p2p_semantics();
    test_vector();
    test_derived();
    test_coll(DEV, maxn);
    test_coll(MANAGED, 65537);
    test_mixed();
    test_realloc();
    test_ops();
    test_split_churn();
    int total = 0;
    MPI_Allreduce(&errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("%s: gpu_test %d ranks, %d errors\n", total ? "FAIL" : "PASS", size, total);
    MPI_Finalize();
    return total != 0;
}
