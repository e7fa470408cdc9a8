/* Cartesian topology: Dims_create, Cart_create (periodic and not, reorder=0), Topo_test,
 * Cartdim_get, Cart_get, Cart_coords, Cart_rank (with periodic wrap), Cart_shift (PROC_NULL at
 * non-periodic edges), Cart_sub, a halo exchange with the shifted neighbours; Topo_test on
 * COMM_WORLD is MPI_UNDEFINED. */
#include "ctest.h"

int main(int argc, char **argv)
{
    int rank, size, dims[2], periods[2], coords[2], r, t, nd, i, src, dst;
    MPI_Comm cart, row, col;

    ct_init(&argc, &argv);
    rank = ct_world_rank;
    size = ct_world_size;

    CHECK_MPI(MPI_Topo_test(MPI_COMM_WORLD, &t));
    CHECK(t == MPI_UNDEFINED, "Topo_test(world) = %d", t);

    /* Dims_create */
    {
        int d3[3] = {0, 0, 0}, d2[2] = {0, 0}, fixed[2] = {0, 0};
        CHECK_MPI(MPI_Dims_create(12, 2, d2));
        CHECK(d2[0] == 4 && d2[1] == 3, "Dims_create(12,2) = %d x %d", d2[0], d2[1]);
        CHECK_MPI(MPI_Dims_create(8, 3, d3));
        CHECK(d3[0] == 2 && d3[1] == 2 && d3[2] == 2, "Dims_create(8,3) = %d %d %d", d3[0], d3[1], d3[2]);
        d3[0] = 0;
        d3[1] = 3;
        d3[2] = 0;
        CHECK_MPI(MPI_Dims_create(30, 3, d3));
        CHECK(d3[1] == 3 && d3[0] * d3[2] == 10 && d3[0] >= d3[2], "Dims_create(30, [0,3,0]) = %d %d %d", d3[0], d3[1],
              d3[2]);
        CHECK_MPI(MPI_Dims_create(7, 2, fixed));
        CHECK(fixed[0] == 7 && fixed[1] == 1, "Dims_create(7,2) = %d %d", fixed[0], fixed[1]);
    }

    dims[0] = dims[1] = 0;
    CHECK_MPI(MPI_Dims_create(size, 2, dims));
    CHECK(dims[0] * dims[1] == size && dims[0] >= dims[1], "dims %d x %d for %d", dims[0], dims[1], size);
    periods[0] = 1; /* rows wrap */
    periods[1] = 0;
    CHECK_MPI(MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &cart));
    CHECK(cart != MPI_COMM_NULL, "Cart_create gave NULL");
    CHECK_MPI(MPI_Topo_test(cart, &t));
    CHECK(t == MPI_CART, "Topo_test(cart) = %d", t);
    CHECK_MPI(MPI_Cartdim_get(cart, &nd));
    CHECK(nd == 2, "Cartdim_get %d", nd);
    CHECK_MPI(MPI_Comm_rank(cart, &r));
    CHECK(r == rank, "reorder=0 changed rank %d -> %d", rank, r);
    {
        int gd[2], gp[2], gc[2];
        CHECK_MPI(MPI_Cart_get(cart, 2, gd, gp, gc));
        CHECK(gd[0] == dims[0] && gd[1] == dims[1] && gp[0] == 1 && gp[1] == 0, "Cart_get dims/periods");
        CHECK(gc[0] == rank / dims[1] && gc[1] == rank % dims[1], "Cart_get coords %d %d", gc[0], gc[1]);
    }
    CHECK_MPI(MPI_Cart_coords(cart, rank, 2, coords));
    CHECK(coords[0] == rank / dims[1] && coords[1] == rank % dims[1], "row-major coords %d %d", coords[0], coords[1]);
    for (i = 0; i < size; i++) {
        int c[2], back;
        CHECK_MPI(MPI_Cart_coords(cart, i, 2, c));
        CHECK_MPI(MPI_Cart_rank(cart, c, &back));
        CHECK(back == i, "Cart_rank(Cart_coords(%d)) = %d", i, back);
    }
    {
        int c[2], w;
        c[0] = coords[0] + dims[0]; /* periodic dimension wraps */
        c[1] = coords[1];
        CHECK_MPI(MPI_Cart_rank(cart, c, &w));
        CHECK(w == rank, "periodic wrap rank %d", w);
        c[0] = coords[0] - 1;
        CHECK_MPI(MPI_Cart_rank(cart, c, &w));
        CHECK(w == ((coords[0] - 1 + dims[0]) % dims[0]) * dims[1] + coords[1], "periodic -1 rank %d", w);
    }

    /* shifts */
    CHECK_MPI(MPI_Cart_shift(cart, 0, 1, &src, &dst));
    CHECK(dst == ((coords[0] + 1) % dims[0]) * dims[1] + coords[1], "shift dim0 dst %d", dst);
    CHECK(src == ((coords[0] - 1 + dims[0]) % dims[0]) * dims[1] + coords[1], "shift dim0 src %d", src);
    CHECK_MPI(MPI_Cart_shift(cart, 1, 1, &src, &dst));
    CHECK(dst == (coords[1] + 1 < dims[1] ? rank + 1 : MPI_PROC_NULL), "shift dim1 dst %d", dst);
    CHECK(src == (coords[1] > 0 ? rank - 1 : MPI_PROC_NULL), "shift dim1 src %d", src);

    /* halo exchange along dim 1 (non-periodic): PROC_NULL at the edges leaves the halo alone */
    {
        int mine = rank, left = -1, right = -1, s1, d1;
        CHECK_MPI(MPI_Cart_shift(cart, 1, 1, &s1, &d1));
        CHECK_MPI(MPI_Sendrecv(&mine, 1, MPI_INT, d1, 0, &left, 1, MPI_INT, s1, 0, cart, MPI_STATUS_IGNORE));
        CHECK_MPI(MPI_Sendrecv(&mine, 1, MPI_INT, s1, 1, &right, 1, MPI_INT, d1, 1, cart, MPI_STATUS_IGNORE));
        CHECK(left == (s1 == MPI_PROC_NULL ? -1 : rank - 1), "halo left %d", left);
        CHECK(right == (d1 == MPI_PROC_NULL ? -1 : rank + 1), "halo right %d", right);
    }

    /* Cart_sub: rows (keep dim 1) and columns (keep dim 0) */
    {
        int keep_row[2] = {0, 1}, keep_col[2] = {1, 0}, s, sum = 0;
        CHECK_MPI(MPI_Cart_sub(cart, keep_row, &row));
        CHECK_MPI(MPI_Cart_sub(cart, keep_col, &col));
        CHECK_MPI(MPI_Comm_size(row, &s));
        CHECK(s == dims[1], "row size %d", s);
        CHECK_MPI(MPI_Comm_rank(row, &r));
        CHECK(r == coords[1], "row rank %d", r);
        CHECK_MPI(MPI_Comm_size(col, &s));
        CHECK(s == dims[0], "col size %d", s);
        CHECK_MPI(MPI_Comm_rank(col, &r));
        CHECK(r == coords[0], "col rank %d", r);
        CHECK_MPI(MPI_Topo_test(row, &t));
        CHECK(t == MPI_CART, "Topo_test(sub) = %d", t);
        CHECK_MPI(MPI_Cartdim_get(row, &nd));
        CHECK(nd == 1, "sub cartdim %d", nd);
        CHECK_MPI(MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, row));
        CHECK(sum == coords[0] * dims[1] * dims[1] + dims[1] * (dims[1] - 1) / 2, "row sum %d", sum);
        CHECK_MPI(MPI_Comm_free(&row));
        CHECK_MPI(MPI_Comm_free(&col));
    }
    CHECK_MPI(MPI_Comm_free(&cart));

    /* a 1-D periodic ring larger than nothing: extra ranks get MPI_COMM_NULL */
    {
        int d1 = (size + 1) / 2, p1 = 1;
        CHECK_MPI(MPI_Cart_create(MPI_COMM_WORLD, 1, &d1, &p1, 0, &cart));
        if (rank < d1) {
            CHECK(cart != MPI_COMM_NULL, "rank %d < %d got MPI_COMM_NULL", rank, d1);
            CHECK_MPI(MPI_Cart_shift(cart, 0, -1, &src, &dst));
            CHECK(dst == (rank - 1 + d1) % d1 && src == (rank + 1) % d1, "ring shift -1: src %d dst %d", src, dst);
            CHECK_MPI(MPI_Comm_free(&cart));
        } else {
            CHECK(cart == MPI_COMM_NULL, "rank %d >= %d got a cart communicator", rank, d1);
        }
    }
    return ct_finish("topo_cart");
}
