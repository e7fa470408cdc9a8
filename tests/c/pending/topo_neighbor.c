/* Neighborhood collectives and other topologies: Neighbor_allgather(v)/alltoall(v) and their
 * MPI_I* forms on a periodic 1-D ring and a 2-D cart (neighbour order -dim0, +dim0, -dim1, +dim1,
 * PROC_NULL neighbours leave their block untouched), Dist_graph_create_adjacent (+neighbors_count
 * and neighbors), Graph_create/Graph_neighbors. */
#include "ctest.h"

int main(int argc, char **argv)
{
    int rank, size, i;
    MPI_Comm ring, cart, dg;

    ct_init(&argc, &argv);
    rank = ct_world_rank;
    size = ct_world_size;

    /* periodic ring: neighbours (left, right); with 1 or 2 ranks they may be the same rank */
    {
        int p = 1, left = (rank + size - 1) % size, right = (rank + 1) % size;
        int sb[2], rb[2] = {-1, -1}, v = rank * 10, ag[2] = {-1, -1};
        MPI_Request rq;
        CHECK_MPI(MPI_Cart_create(MPI_COMM_WORLD, 1, &size, &p, 0, &ring));
        CHECK_MPI(MPI_Neighbor_allgather(&v, 1, MPI_INT, ag, 1, MPI_INT, ring));
        CHECK(ag[0] == left * 10 && ag[1] == right * 10, "ring neighbor_allgather %d %d", ag[0], ag[1]);
        /* alltoall: block 0 goes to the left neighbour, block 1 to the right one */
        sb[0] = rank * 100 + 0;
        sb[1] = rank * 100 + 1;
        CHECK_MPI(MPI_Ineighbor_alltoall(sb, 1, MPI_INT, rb, 1, MPI_INT, ring, &rq));
        CHECK_MPI(MPI_Wait(&rq, MPI_STATUS_IGNORE));
        /* from the left neighbour I get its block 1 (sent right), from the right its block 0 */
        CHECK(rb[0] == left * 100 + 1 && rb[1] == right * 100 + 0, "ring neighbor_alltoall %d %d", rb[0], rb[1]);
        CHECK_MPI(MPI_Comm_free(&ring));
    }

    /* 2-D non-periodic cart: PROC_NULL neighbours at the edges */
    {
        int dims[2] = {0, 0}, per[2] = {0, 0}, c[2], nb[4], sb[4], rb[4], v = rank + 1, ag[4];
        int counts[4] = {1, 1, 1, 1}, displs[4] = {3, 2, 1, 0};
        CHECK_MPI(MPI_Dims_create(size, 2, dims));
        CHECK_MPI(MPI_Cart_create(MPI_COMM_WORLD, 2, dims, per, 0, &cart));
        CHECK_MPI(MPI_Cart_coords(cart, rank, 2, c));
        CHECK_MPI(MPI_Cart_shift(cart, 0, 1, &nb[0], &nb[1]));
        CHECK_MPI(MPI_Cart_shift(cart, 1, 1, &nb[2], &nb[3]));
        for (i = 0; i < 4; i++) {
            ag[i] = -7;
            rb[i] = -7;
            sb[i] = rank * 10 + i;
        }
        CHECK_MPI(MPI_Neighbor_allgather(&v, 1, MPI_INT, ag, 1, MPI_INT, cart));
        for (i = 0; i < 4; i++)
            CHECK(ag[i] == (nb[i] == MPI_PROC_NULL ? -7 : nb[i] + 1), "cart allgather [%d] = %d (neighbour %d)", i,
                  ag[i], nb[i]);
        /* allgatherv into reversed slots */
        for (i = 0; i < 4; i++)
            ag[i] = -7;
        CHECK_MPI(MPI_Neighbor_allgatherv(&v, 1, MPI_INT, ag, counts, displs, MPI_INT, cart));
        for (i = 0; i < 4; i++)
            CHECK(ag[3 - i] == (nb[i] == MPI_PROC_NULL ? -7 : nb[i] + 1), "cart allgatherv [%d] = %d", i, ag[3 - i]);
        CHECK_MPI(MPI_Neighbor_alltoall(sb, 1, MPI_INT, rb, 1, MPI_INT, cart));
        /* block i went to neighbour i; from neighbour i (direction d, side s) I get the block it
         * sent in the opposite direction: index i ^ 1 */
        for (i = 0; i < 4; i++)
            CHECK(rb[i] == (nb[i] == MPI_PROC_NULL ? -7 : nb[i] * 10 + (i ^ 1)), "cart alltoall [%d] = %d", i, rb[i]);
        {
            int sd[4] = {0, 1, 2, 3}, rd[4] = {3, 2, 1, 0};
            for (i = 0; i < 4; i++)
                rb[i] = -7;
            CHECK_MPI(MPI_Neighbor_alltoallv(sb, counts, sd, MPI_INT, rb, counts, rd, MPI_INT, cart));
            for (i = 0; i < 4; i++)
                CHECK(rb[3 - i] == (nb[i] == MPI_PROC_NULL ? -7 : nb[i] * 10 + (i ^ 1)), "cart alltoallv [%d] = %d", i,
                      rb[3 - i]);
        }
        CHECK_MPI(MPI_Comm_free(&cart));
        (void)c;
    }

    /* distributed graph: I receive from rank-1 and rank-2, send to rank+1 and rank+2 (mod size) */
    {
        int src[2], dst[2], ind, outd, wt, s2[2], d2[2], sw[2], dwt[2], v = rank * 3, got[2] = {-1, -1};
        src[0] = (rank + size - 1) % size;
        src[1] = (rank + size - 2) % size;
        dst[0] = (rank + 1) % size;
        dst[1] = (rank + 2) % size;
        CHECK_MPI(MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 2, src, MPI_UNWEIGHTED, 2, dst, MPI_UNWEIGHTED,
                                                 MPI_INFO_NULL, 0, &dg));
        {
            int t;
            CHECK_MPI(MPI_Topo_test(dg, &t));
            CHECK(t == MPI_DIST_GRAPH, "Topo_test(dist graph) = %d", t);
        }
        CHECK_MPI(MPI_Dist_graph_neighbors_count(dg, &ind, &outd, &wt));
        CHECK(ind == 2 && outd == 2 && wt == 0, "dist graph counts %d %d weighted %d", ind, outd, wt);
        CHECK_MPI(MPI_Dist_graph_neighbors(dg, 2, s2, sw, 2, d2, dwt));
        CHECK(s2[0] == src[0] && s2[1] == src[1] && d2[0] == dst[0] && d2[1] == dst[1], "dist graph neighbours");
        CHECK_MPI(MPI_Neighbor_allgather(&v, 1, MPI_INT, got, 1, MPI_INT, dg));
        CHECK(got[0] == src[0] * 3 && got[1] == src[1] * 3, "dist graph allgather %d %d", got[0], got[1]);
        CHECK_MPI(MPI_Comm_free(&dg));
    }

    /* Graph_create: a ring as an undirected graph */
    {
        int *index = malloc(sizeof(int) * (size_t)size), *edges = malloc(sizeof(int) * 2 * (size_t)size);
        int nn, nbrs[2], t;
        MPI_Comm g;
        CHECK(index && edges, "malloc");
        for (i = 0; i < size; i++) {
            edges[2 * i] = (i + size - 1) % size;
            edges[2 * i + 1] = (i + 1) % size;
            index[i] = 2 * (i + 1);
        }
        CHECK_MPI(MPI_Graph_create(MPI_COMM_WORLD, size, index, edges, 0, &g));
        CHECK_MPI(MPI_Topo_test(g, &t));
        CHECK(t == MPI_GRAPH, "Topo_test(graph) = %d", t);
        CHECK_MPI(MPI_Graph_neighbors_count(g, rank, &nn));
        CHECK(nn == 2, "graph neighbours count %d", nn);
        CHECK_MPI(MPI_Graph_neighbors(g, rank, 2, nbrs));
        CHECK(nbrs[0] == (rank + size - 1) % size && nbrs[1] == (rank + 1) % size, "graph neighbours %d %d", nbrs[0],
              nbrs[1]);
        CHECK_MPI(MPI_Comm_free(&g));
        free(index);
        free(edges);
    }
    return ct_finish("topo_neighbor");
}
