/* Large messages between nodes (run with nodes=2: ranks 0..size/2-1 on one node, the rest on
 * the other; an even number of ranks). Every rank talks to its partner on the other node
 * (rank + size/2 mod size). Every received byte is checked.
 * 1. A window: W nonblocking sends of one reused buffer (odd size) and W receives into
 *    buffers of their own, both directions at once.
 * 2. MPI_ANY_SOURCE: rank 0 receives K numbered messages of several sizes from every rank of
 *    the other node; each sender's messages must arrive in order.
 * 3. Truncation: a message larger than its receive: MPI_ERR_TRUNCATE and the bytes that fit.
 * 4. A probed message (MPI_Probe, then MPI_Recv of the size it reported), and a synchronous
 *    send.
 * 5. A posted large receive cancelled before anything matched it: the next message goes to
 *    the receive posted after it.
 * With GPUMPI_NET_BULK_MIN at or below these sizes the data moves as bulk transfers (the
 * testlist checks the GPUMPI_DEBUG=1 log line); with it off, as frames. */
#include "ctest.h"

#define W 16
#define K 6

static unsigned char pat(int r, size_t i, int seq)
{
    return (unsigned char)((i * 29u + (size_t)r * 101u + (size_t)seq * 7u + (i >> 13)) & 0xff);
}

static void fill(unsigned char *b, size_t n, int r, int seq)
{
    size_t i;
    for (i = 0; i < n; i++)
        b[i] = pat(r, i, seq);
}

static void check(const unsigned char *b, size_t n, int r, int seq, const char *what)
{
    size_t i;
    for (i = 0; i < n; i++)
        if (b[i] != pat(r, i, seq))
            CHECK(0, "%s: byte %zu of %zu from rank %d (seq %d) = %d, want %d", what, i, n, r,
                  seq, b[i], pat(r, i, seq));
}

static size_t any_size(int seq)
{
    return ((size_t)1 << 20) + (size_t)seq * 700001u;
}

int main(int argc, char **argv)
{
    int rank, size, partner, i, count;
    size_t n = ((size_t)3 << 20) + 5;
    unsigned char *sb, *rb[W];
    MPI_Request rq[2 * W];
    MPI_Status st;

    ct_init(&argc, &argv);
    rank = ct_world_rank;
    size = ct_world_size;
    CHECK(size % 2 == 0, "an even number of ranks (%d)", size);
    partner = (rank + size / 2) % size;

    /* 1. The window. */
    sb = malloc(n);
    CHECK(sb != NULL, "malloc");
    fill(sb, n, rank, 0);
    for (i = 0; i < W; i++) {
        rb[i] = malloc(n);
        CHECK(rb[i] != NULL, "malloc");
        memset(rb[i], 0xEE, n);
        CHECK_MPI(MPI_Irecv(rb[i], (int)n, MPI_BYTE, partner, 1, MPI_COMM_WORLD, &rq[i]));
    }
    for (i = 0; i < W; i++)
        CHECK_MPI(MPI_Isend(sb, (int)n, MPI_BYTE, partner, 1, MPI_COMM_WORLD, &rq[W + i]));
    CHECK_MPI(MPI_Waitall(2 * W, rq, MPI_STATUSES_IGNORE));
    for (i = 0; i < W; i++)
        check(rb[i], n, partner, 0, "window");

    /* 2. MPI_ANY_SOURCE at rank 0 from every rank of the other node. */
    if (rank == 0) {
        int nsend = size / 2, got = 0, next[8] = {0};
        size_t cap = any_size(K - 1);
        unsigned char *b = malloc(cap);
        CHECK(b != NULL && nsend <= 8, "malloc / at most 16 ranks");
        while (got < nsend * K) {
            int seq;
            CHECK_MPI(MPI_Recv(b, (int)cap, MPI_BYTE, MPI_ANY_SOURCE, 2, MPI_COMM_WORLD, &st));
            CHECK(st.MPI_SOURCE >= size / 2, "a message from rank %d", st.MPI_SOURCE);
            seq = next[st.MPI_SOURCE - size / 2]++;
            CHECK_MPI(MPI_Get_count(&st, MPI_BYTE, &count));
            CHECK((size_t)count == any_size(seq), "rank %d's message %d: %d bytes",
                  st.MPI_SOURCE, seq, count);
            check(b, (size_t)count, st.MPI_SOURCE, seq, "any source");
            got++;
        }
        free(b);
    } else if (rank >= size / 2) {
        int seq;
        unsigned char *m[K];
        MPI_Request q[K];
        for (seq = 0; seq < K; seq++) {
            m[seq] = malloc(any_size(seq));
            CHECK(m[seq] != NULL, "malloc");
            fill(m[seq], any_size(seq), rank, seq);
            CHECK_MPI(MPI_Isend(m[seq], (int)any_size(seq), MPI_BYTE, 0, 2, MPI_COMM_WORLD,
                                &q[seq]));
        }
        CHECK_MPI(MPI_Waitall(K, q, MPI_STATUSES_IGNORE));
        for (seq = 0; seq < K; seq++)
            free(m[seq]);
    }

    /* 3. Truncation: n bytes into a receive of 2 MiB. */
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    {
        size_t cap = (size_t)2 << 20;
        MPI_Request q;
        int rc, cls;
        memset(rb[0], 0xEE, n);
        CHECK_MPI(MPI_Isend(sb, (int)n, MPI_BYTE, partner, 3, MPI_COMM_WORLD, &q));
        rc = MPI_Recv(rb[0], (int)cap, MPI_BYTE, partner, 3, MPI_COMM_WORLD, &st);
        MPI_Error_class(rc, &cls);
        CHECK(cls == MPI_ERR_TRUNCATE, "truncated receive: error class %d", cls);
        check(rb[0], cap, partner, 0, "truncated");
        CHECK(rb[0][cap] == 0xEE, "wrote past the receive");
        CHECK_MPI(MPI_Wait(&q, MPI_STATUS_IGNORE));
    }
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));

    /* 4. Probe, then receive what it reported; a synchronous send. */
    if (rank < size / 2) {
        CHECK_MPI(MPI_Ssend(sb, (int)n, MPI_BYTE, partner, 4, MPI_COMM_WORLD));
    } else {
        CHECK_MPI(MPI_Probe(MPI_ANY_SOURCE, 4, MPI_COMM_WORLD, &st));
        CHECK(st.MPI_SOURCE == partner, "probed rank %d", st.MPI_SOURCE);
        CHECK_MPI(MPI_Get_count(&st, MPI_BYTE, &count));
        CHECK((size_t)count == n, "probed %d bytes", count);
        CHECK_MPI(MPI_Recv(rb[1], count, MPI_BYTE, st.MPI_SOURCE, 4, MPI_COMM_WORLD, &st));
        check(rb[1], n, partner, 0, "probed");
    }

    /* 5. A cancelled receive takes nothing. */
    {
        MPI_Request c, r;
        int cancelled = 0;
        memset(rb[2], 0xEE, n);
        memset(rb[3], 0xEE, n);
        CHECK_MPI(MPI_Irecv(rb[2], (int)n, MPI_BYTE, partner, 5, MPI_COMM_WORLD, &c));
        CHECK_MPI(MPI_Cancel(&c));
        CHECK_MPI(MPI_Wait(&c, &st));
        CHECK_MPI(MPI_Test_cancelled(&st, &cancelled));
        CHECK(cancelled, "the receive was not cancelled");
        /* Nobody sends with tag 5 before every rank cancelled. */
        CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
        CHECK_MPI(MPI_Irecv(rb[3], (int)n, MPI_BYTE, partner, 5, MPI_COMM_WORLD, &r));
        CHECK_MPI(MPI_Send(sb, (int)n, MPI_BYTE, partner, 5, MPI_COMM_WORLD));
        CHECK_MPI(MPI_Wait(&r, MPI_STATUS_IGNORE));
        check(rb[3], n, partner, 0, "after a cancel");
        CHECK(rb[2][0] == 0xEE && rb[2][n - 1] == 0xEE, "the cancelled receive was written");
    }

    for (i = 0; i < W; i++)
        free(rb[i]);
    free(sb);
    return ct_finish("net_bulk");
}
