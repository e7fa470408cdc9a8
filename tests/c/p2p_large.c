/* Large messages: sizes 1 B .. 16 MiB (powers of two and odd sizes), blocking and nonblocking,
 * both directions, both sides check content. Pairs (0,1), (2,3), ...; an odd last rank talks
 * to itself. */
#include "ctest.h"

static unsigned char pat(int r, size_t i)
{
    return (unsigned char)((i * 131u + (size_t)r * 17u + (i >> 12)) & 0xff);
}

int main(int argc, char **argv)
{
    int rank, size, peer;
    size_t maxn = (size_t)16 << 20, n, i;
    unsigned char *sb, *rb;
    MPI_Status st;
    int count;

    ct_init(&argc, &argv);
    rank = ct_world_rank;
    size = ct_world_size;
    peer = (rank % 2 == 0) ? rank + 1 : rank - 1;
    if (peer >= size)
        peer = rank;
    sb = malloc(maxn);
    rb = malloc(maxn + 64);
    CHECK(sb && rb, "malloc 16 MiB");
    for (i = 0; i < maxn; i++)
        sb[i] = pat(rank, i);

    for (n = 1; n <= maxn; n = (n < 4096) ? n * 4 : n * 2) {
        size_t sizes[2];
        int k;
        sizes[0] = n;
        sizes[1] = n + (n > 1 ? 3 : 0); /* odd sizes too */
        if (sizes[1] > maxn)
            sizes[1] = maxn;
        for (k = 0; k < 2; k++) {
            size_t m = sizes[k];
            MPI_Request rq[2];
            memset(rb, 0xEE, m + 64);
            if (k == 0) {
                CHECK_MPI(MPI_Sendrecv(sb, (int)m, MPI_BYTE, peer, 1, rb, (int)m, MPI_BYTE, peer, 1,
                                       MPI_COMM_WORLD, &st));
            } else {
                CHECK_MPI(MPI_Irecv(rb, (int)m, MPI_UNSIGNED_CHAR, peer, 2, MPI_COMM_WORLD, &rq[0]));
                CHECK_MPI(MPI_Isend(sb, (int)m, MPI_UNSIGNED_CHAR, peer, 2, MPI_COMM_WORLD, &rq[1]));
                CHECK_MPI(MPI_Waitall(2, rq, MPI_STATUSES_IGNORE));
            }
            if (k == 0) {
                CHECK_MPI(MPI_Get_count(&st, MPI_BYTE, &count));
                CHECK((size_t)count == m, "size %zu: count %d", m, count);
            }
            for (i = 0; i < m; i++)
                if (rb[i] != pat(peer, i))
                    CHECK(0, "size %zu: byte %zu = %d want %d", m, i, rb[i], pat(peer, i));
            for (i = m; i < m + 64; i++)
                CHECK(rb[i] == 0xEE, "size %zu: wrote past the end at %zu", m, i);
        }
    }

    /* 16 MiB as ints in a blocking one-way exchange, sender order by rank parity */
    {
        int cnt = (int)(maxn / sizeof(int)), j;
        int *si = (int *)sb, *ri = (int *)rb;
        for (j = 0; j < cnt; j++)
            si[j] = j ^ (rank << 20);
        if (peer == rank) {
            CHECK_MPI(MPI_Sendrecv(si, cnt, MPI_INT, rank, 3, ri, cnt, MPI_INT, rank, 3, MPI_COMM_WORLD, &st));
        } else if (rank < peer) {
            CHECK_MPI(MPI_Send(si, cnt, MPI_INT, peer, 3, MPI_COMM_WORLD));
            CHECK_MPI(MPI_Recv(ri, cnt, MPI_INT, peer, 3, MPI_COMM_WORLD, &st));
        } else {
            CHECK_MPI(MPI_Recv(ri, cnt, MPI_INT, peer, 3, MPI_COMM_WORLD, &st));
            CHECK_MPI(MPI_Send(si, cnt, MPI_INT, peer, 3, MPI_COMM_WORLD));
        }
        CHECK_MPI(MPI_Get_count(&st, MPI_INT, &count));
        CHECK(count == cnt, "int count %d", count);
        for (j = 0; j < cnt; j++)
            if (ri[j] != (j ^ (peer << 20)))
                CHECK(0, "int[%d] = %d want %d", j, ri[j], j ^ (peer << 20));
    }

    free(sb);
    free(rb);
    return ct_finish("p2p_large");
}
