/* MPI_Alltoallv between nodes whose pairs of nodes exchange blocks of very different sizes: for
 * each pattern, the blocks between some pairs of nodes are large (about 160 KiB) and those
 * between the others small (0-3 ints, some empty), so that with PXN on and
 * GPUMPI_PXN_ALLTOALL=auto the large pairs take the forwarders and the small ones the rail
 * aggregators, and a node with pairs of both kinds runs both at once
 * (src/coll/alltoall/pairs.rs). Patterns: the pair of the first two nodes large; every pair
 * with the last node large; pairs (i, j) with i + j odd large. Each in place and not; every
 * element and the gaps between blocks checked. Nodes are told apart by
 * MPI_Comm_split_type(MPI_COMM_TYPE_SHARED), numbered by their lowest rank. */
#include "ctest.h"

#define BIG 40000

static int rank, size, nnodes;
static int *node_of;

static int big_pair(int pattern, int a, int b)
{
    if (a == b)
        return 0;
    switch (pattern) {
    case 0:
        return (a == 0 && b == 1) || (a == 1 && b == 0);
    case 1:
        return a == nnodes - 1 || b == nnodes - 1;
    default:
        return (a + b) % 2 == 1;
    }
}

/* Ints from s to d; symmetric (the same both ways) where in place needs it. */
static int len(int pattern, int sym, int s, int d)
{
    int big = big_pair(pattern, node_of[s], node_of[d]);
    if (sym)
        return big ? BIG + (s + d) % 3 : (s + d) % 4;
    return big ? BIG + (2 * s + d) % 3 : (3 * s + d) % 4;
}

int main(int argc, char **argv)
{
    int i, r, pattern, inplace, mylow;
    MPI_Comm node;
    int *sc, *sd, *rc, *rd, *sb, *rb, *low;
    ct_init(&argc, &argv);
    rank = ct_world_rank;
    size = ct_world_size;
    CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    low = malloc(sizeof(int) * (size_t)size);
    node_of = malloc(sizeof(int) * (size_t)size);
    CHECK(low && node_of, "malloc");
    CHECK_MPI(MPI_Allreduce(&rank, &mylow, 1, MPI_INT, MPI_MIN, node));
    low[rank] = mylow;
    CHECK_MPI(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, low, 1, MPI_INT, MPI_COMM_WORLD));
    /* Node number: how many distinct lowest ranks are below this rank's. */
    nnodes = 0;
    for (r = 0; r < size; r++) {
        int k = 0, j;
        for (j = 0; j < size; j++)
            if (low[j] == j && j < low[r])
                k++;
        node_of[r] = k;
        if (low[r] == r)
            nnodes++;
    }
    sc = malloc(sizeof(int) * (size_t)size);
    sd = malloc(sizeof(int) * (size_t)size);
    rc = malloc(sizeof(int) * (size_t)size);
    rd = malloc(sizeof(int) * (size_t)size);
    sb = malloc(sizeof(int) * ((size_t)size * (BIG + 4)));
    rb = malloc(sizeof(int) * ((size_t)size * (BIG + 4)));
    CHECK(sc && sd && rc && rd && sb && rb, "malloc");
    for (pattern = 0; pattern < 3; pattern++) {
        for (inplace = 0; inplace < 2; inplace++) {
            int stot = 0, rtot = 0;
            for (r = 0; r < size; r++) {
                sc[r] = len(pattern, inplace, rank, r);
                sd[r] = stot;
                stot += sc[r] + 1;
                rc[r] = len(pattern, inplace, r, rank);
                rd[r] = rtot;
                rtot += rc[r] + 1;
            }
            for (i = 0; i < rtot; i++)
                rb[i] = -1;
            if (inplace) {
                for (r = 0; r < size; r++)
                    for (i = 0; i < rc[r]; i++)
                        rb[rd[r] + i] = ct_val(rank, r * 100000 + i, 20 + pattern);
                CHECK_MPI(MPI_Alltoallv(MPI_IN_PLACE, NULL, NULL, MPI_DATATYPE_NULL, rb, rc, rd, MPI_INT,
                                        MPI_COMM_WORLD));
            } else {
                for (r = 0; r < size; r++)
                    for (i = 0; i < sc[r]; i++)
                        sb[sd[r] + i] = ct_val(rank, r * 100000 + i, 20 + pattern);
                CHECK_MPI(MPI_Alltoallv(sb, sc, sd, MPI_INT, rb, rc, rd, MPI_INT, MPI_COMM_WORLD));
            }
            for (r = 0; r < size; r++) {
                for (i = 0; i < rc[r]; i++)
                    CHECK(rb[rd[r] + i] == ct_val(r, rank * 100000 + i, 20 + pattern),
                          "pattern %d in place %d: from %d [%d] = %d", pattern, inplace, r, i, rb[rd[r] + i]);
                CHECK(rb[rd[r] + rc[r]] == -1, "pattern %d in place %d: wrote into the gap after %d", pattern,
                      inplace, r);
            }
        }
    }
    free(sc);
    free(sd);
    free(rc);
    free(rd);
    free(sb);
    free(rb);
    free(low);
    free(node_of);
    CHECK_MPI(MPI_Comm_free(&node));
    return ct_finish("coll_a2av_pairs");
}
