/* Groups: Comm_group, Group_size/rank, incl, excl, range_incl, range_excl, union, intersection,
 * difference, translate_ranks (incl. MPI_PROC_NULL and MPI_UNDEFINED results), compare,
 * MPI_GROUP_EMPTY, Group_free. */
#include "ctest.h"

int main(int argc, char **argv)
{
    int rank, size, i, n, r, res;
    MPI_Group world, evens, odds, rev, u, x, d, e, g;
    int *ranks, *out;

    ct_init(&argc, &argv);
    rank = ct_world_rank;
    size = ct_world_size;
    ranks = malloc(sizeof(int) * (size_t)(size + 2));
    out = malloc(sizeof(int) * (size_t)(size + 2));
    CHECK(ranks && out, "malloc");

    CHECK_MPI(MPI_Comm_group(MPI_COMM_WORLD, &world));
    CHECK_MPI(MPI_Group_size(world, &n));
    CHECK_MPI(MPI_Group_rank(world, &r));
    CHECK(n == size && r == rank, "world group size %d rank %d", n, r);

    /* evens via incl, odds via excl of the evens */
    n = 0;
    for (i = 0; i < size; i += 2)
        ranks[n++] = i;
    CHECK_MPI(MPI_Group_incl(world, n, ranks, &evens));
    CHECK_MPI(MPI_Group_excl(world, n, ranks, &odds));
    CHECK_MPI(MPI_Group_size(evens, &i));
    CHECK(i == (size + 1) / 2, "evens size %d", i);
    CHECK_MPI(MPI_Group_size(odds, &i));
    CHECK(i == size / 2, "odds size %d", i);
    CHECK_MPI(MPI_Group_rank(evens, &r));
    CHECK(r == ((rank % 2 == 0) ? rank / 2 : MPI_UNDEFINED), "rank in evens %d", r);
    CHECK_MPI(MPI_Group_rank(odds, &r));
    CHECK(r == ((rank % 2 == 1) ? rank / 2 : MPI_UNDEFINED), "rank in odds %d", r);

    /* reversed world via range_incl with stride -1 */
    {
        int range[1][3];
        range[0][0] = size - 1;
        range[0][1] = 0;
        range[0][2] = -1;
        CHECK_MPI(MPI_Group_range_incl(world, 1, range, &rev));
        CHECK_MPI(MPI_Group_rank(rev, &r));
        CHECK(r == size - 1 - rank, "rank in reversed %d", r);
        CHECK_MPI(MPI_Group_compare(world, rev, &res));
        CHECK(res == (size == 1 ? MPI_IDENT : MPI_SIMILAR), "compare(world, reversed) = %d", res);
        /* range_excl of all ranks with stride 2 from 0 gives the odds */
        range[0][0] = 0;
        range[0][1] = size - 1;
        range[0][2] = 2;
        CHECK_MPI(MPI_Group_range_excl(world, 1, range, &g));
        CHECK_MPI(MPI_Group_compare(g, odds, &res));
        CHECK(res == MPI_IDENT, "range_excl evens vs odds compare %d", res);
        CHECK_MPI(MPI_Group_free(&g));
    }

    /* set operations */
    CHECK_MPI(MPI_Group_union(odds, evens, &u));
    CHECK_MPI(MPI_Group_size(u, &n));
    CHECK(n == size, "union size %d", n);
    CHECK_MPI(MPI_Group_compare(u, world, &res));
    CHECK(res == (size == 1 ? MPI_IDENT : MPI_SIMILAR), "compare(union(odds, evens), world) = %d", res);
    /* union order: odds first, then evens */
    CHECK_MPI(MPI_Group_rank(u, &r));
    CHECK(r == ((rank % 2) ? rank / 2 : size / 2 + rank / 2), "rank in union(odds, evens) %d", r);
    CHECK_MPI(MPI_Group_intersection(world, evens, &x));
    CHECK_MPI(MPI_Group_compare(x, evens, &res));
    CHECK(res == MPI_IDENT, "intersection(world, evens) vs evens: %d", res);
    CHECK_MPI(MPI_Group_intersection(odds, evens, &e));
    CHECK(e == MPI_GROUP_EMPTY || (MPI_Group_size(e, &n) == MPI_SUCCESS && n == 0), "odds & evens not empty");
    CHECK_MPI(MPI_Group_difference(world, odds, &d));
    CHECK_MPI(MPI_Group_compare(d, evens, &res));
    CHECK(res == MPI_IDENT, "world - odds vs evens: %d", res);
    CHECK_MPI(MPI_Group_size(MPI_GROUP_EMPTY, &n));
    CHECK(n == 0, "GROUP_EMPTY size %d", n);
    CHECK_MPI(MPI_Group_rank(MPI_GROUP_EMPTY, &r));
    CHECK(r == MPI_UNDEFINED, "rank in GROUP_EMPTY %d", r);
    CHECK_MPI(MPI_Group_compare(odds, evens, &res));
    CHECK(res == MPI_UNEQUAL, "compare(odds, evens) = %d", res);

    /* translate_ranks: world -> reversed, world -> evens (odd ranks are UNDEFINED), PROC_NULL */
    for (i = 0; i < size; i++)
        ranks[i] = i;
    ranks[size] = MPI_PROC_NULL;
    CHECK_MPI(MPI_Group_translate_ranks(world, size + 1, ranks, rev, out));
    for (i = 0; i < size; i++)
        CHECK(out[i] == size - 1 - i, "translate to reversed [%d] = %d", i, out[i]);
    CHECK(out[size] == MPI_PROC_NULL, "translate PROC_NULL = %d", out[size]);
    CHECK_MPI(MPI_Group_translate_ranks(world, size, ranks, evens, out));
    for (i = 0; i < size; i++)
        CHECK(out[i] == ((i % 2 == 0) ? i / 2 : MPI_UNDEFINED), "translate to evens [%d] = %d", i, out[i]);

    /* a communicator's group matches */
    {
        MPI_Comm c;
        MPI_Group cg;
        CHECK_MPI(MPI_Comm_create(MPI_COMM_WORLD, rev, &c));
        CHECK_MPI(MPI_Comm_group(c, &cg));
        CHECK_MPI(MPI_Group_compare(cg, rev, &res));
        CHECK(res == MPI_IDENT, "group of created comm vs reversed group: %d", res);
        CHECK_MPI(MPI_Group_free(&cg));
        CHECK_MPI(MPI_Comm_free(&c));
    }

    CHECK_MPI(MPI_Group_free(&world));
    CHECK(world == MPI_GROUP_NULL, "Group_free did not null");
    CHECK_MPI(MPI_Group_free(&evens));
    CHECK_MPI(MPI_Group_free(&odds));
    CHECK_MPI(MPI_Group_free(&rev));
    CHECK_MPI(MPI_Group_free(&u));
    CHECK_MPI(MPI_Group_free(&x));
    if (e != MPI_GROUP_EMPTY)
        CHECK_MPI(MPI_Group_free(&e));
    CHECK_MPI(MPI_Group_free(&d));
    free(ranks);
    free(out);
    return ct_finish("group_ops");
}
