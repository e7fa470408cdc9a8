/* Communicators: Comm_dup (and traffic isolation), Comm_split (several colors, keys reversing
 * order, MPI_UNDEFINED), Comm_split_type(SHARED), Comm_create, Comm_create_group, Comm_compare,
 * Comm_free, set/get name, Comm_get_parent, Comm_test_inter, Comm_disconnect on a dup,
 * Comm_idup. */
#include "ctest.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    int rank, size, r, s, res, flag, i, len;
    MPI_Comm dup, split, sub;
    MPI_Status st;
    char name[MPI_MAX_OBJECT_NAME];

    ct_init(&argc, &argv);
    rank = ct_world_rank;
    size = ct_world_size;

    /* predefined names */
    CHECK_MPI(MPI_Comm_get_name(MPI_COMM_WORLD, name, &len));
    CHECK(strcmp(name, "MPI_COMM_WORLD") == 0 && len == 14, "world name '%s'", name);
    CHECK_MPI(MPI_Comm_get_name(MPI_COMM_SELF, name, &len));
    CHECK(strcmp(name, "MPI_COMM_SELF") == 0, "self name '%s'", name);

    /* dup: same group, different context; messages do not cross communicators */
    CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    CHECK_MPI(MPI_Comm_rank(dup, &r));
    CHECK_MPI(MPI_Comm_size(dup, &s));
    CHECK(r == rank && s == size, "dup rank %d size %d", r, s);
    CHECK_MPI(MPI_Comm_compare(MPI_COMM_WORLD, dup, &res));
    CHECK(res == MPI_CONGRUENT, "compare(world, dup) = %d", res);
    CHECK_MPI(MPI_Comm_compare(dup, dup, &res));
    CHECK(res == MPI_IDENT, "compare(dup, dup) = %d", res);
    CHECK_MPI(MPI_Comm_get_name(dup, name, &len));
    CHECK(len == 0 || strcmp(name, "MPI_COMM_WORLD") != 0, "dup inherited the name '%s'", name);
    CHECK_MPI(MPI_Comm_set_name(dup, "my dup"));
    CHECK_MPI(MPI_Comm_get_name(dup, name, &len));
    CHECK(strcmp(name, "my dup") == 0 && len == 6, "dup name '%s'", name);
    {
        int a = rank, b = rank + 1000, x = -1, y = -1, next = (rank + 1) % size, prev = (rank + size - 1) % size;
        MPI_Request rq[2];
        /* post the receive on dup first, then send on world and dup with the same tag */
        CHECK_MPI(MPI_Irecv(&y, 1, MPI_INT, prev, 5, dup, &rq[0]));
        CHECK_MPI(MPI_Irecv(&x, 1, MPI_INT, prev, 5, MPI_COMM_WORLD, &rq[1]));
        CHECK_MPI(MPI_Send(&a, 1, MPI_INT, next, 5, MPI_COMM_WORLD));
        CHECK_MPI(MPI_Send(&b, 1, MPI_INT, next, 5, dup));
        CHECK_MPI(MPI_Waitall(2, rq, MPI_STATUSES_IGNORE));
        CHECK(x == prev && y == prev + 1000, "cross-communicator matching: world got %d dup got %d", x, y);
    }
    CHECK_MPI(MPI_Comm_test_inter(dup, &flag));
    CHECK(flag == 0, "test_inter(dup) = %d", flag);
    CHECK_MPI(MPI_Comm_test_inter(MPI_COMM_WORLD, &flag));
    CHECK(flag == 0, "test_inter(world) = %d", flag);

    /* idup */
    {
        MPI_Comm d2;
        MPI_Request rq;
        int v = rank, sum = 0;
        CHECK_MPI(MPI_Comm_idup(dup, &d2, &rq));
        CHECK_MPI(MPI_Wait(&rq, MPI_STATUS_IGNORE));
        CHECK_MPI(MPI_Allreduce(&v, &sum, 1, MPI_INT, MPI_SUM, d2));
        CHECK(sum == size * (size - 1) / 2, "allreduce on idup = %d", sum);
        CHECK_MPI(MPI_Comm_free(&d2));
    }

    /* split: color rank % 3, key reverses the order */
    CHECK_MPI(MPI_Comm_split(MPI_COMM_WORLD, rank % 3, size - rank, &split));
    CHECK_MPI(MPI_Comm_rank(split, &r));
    CHECK_MPI(MPI_Comm_size(split, &s));
    {
        int want_size = 0, want_rank = 0;
        for (i = 0; i < size; i++)
            if (i % 3 == rank % 3) {
                want_size++;
                if (i > rank)
                    want_rank++;
            }
        CHECK(s == want_size && r == want_rank, "split rank %d size %d want %d %d", r, s, want_rank, want_size);
        /* translate: gather world ranks in split order */
        {
            int *wr = malloc(sizeof(int) * (size_t)s);
            CHECK(wr, "malloc");
            CHECK_MPI(MPI_Allgather(&rank, 1, MPI_INT, wr, 1, MPI_INT, split));
            for (i = 0; i < s; i++) {
                CHECK(wr[i] % 3 == rank % 3, "split member %d has color %d", wr[i], wr[i] % 3);
                if (i > 0)
                    CHECK(wr[i] < wr[i - 1], "split order not reversed: %d after %d", wr[i], wr[i - 1]);
            }
            free(wr);
        }
    }
    CHECK_MPI(MPI_Comm_compare(split, MPI_COMM_WORLD, &res));
    CHECK(res == (size <= 1 ? MPI_CONGRUENT : MPI_UNEQUAL), "compare(split, world) = %d", res);
    CHECK_MPI(MPI_Comm_free(&split));
    CHECK(split == MPI_COMM_NULL, "Comm_free did not null");

    /* split with MPI_UNDEFINED: odd ranks get MPI_COMM_NULL; equal keys keep world order */
    CHECK_MPI(MPI_Comm_split(MPI_COMM_WORLD, (rank % 2) ? MPI_UNDEFINED : 7, 0, &split));
    if (rank % 2) {
        CHECK(split == MPI_COMM_NULL, "UNDEFINED color gave a communicator");
    } else {
        CHECK(split != MPI_COMM_NULL, "color 7 gave MPI_COMM_NULL");
        CHECK_MPI(MPI_Comm_rank(split, &r));
        CHECK_MPI(MPI_Comm_size(split, &s));
        CHECK(r == rank / 2 && s == (size + 1) / 2, "even split rank %d size %d", r, s);
        CHECK_MPI(MPI_Comm_free(&split));
    }

    /* split_type SHARED: the ranks of this node. A rank's node is GPUMPI_NODE_ID where set
     * (emulated nodes, scripts/emulate-nodes.sh; our mpirun across hosts), else the name the
     * launcher gives the node (hydra's PMI_HOSTNAME, a PMIx server's PMIX_HOSTNAME), else the
     * host name. */
    {
        char mine[64] = {0};
        const char *id = getenv("GPUMPI_NODE_ID");
        if (!id || !*id)
            id = getenv("PMI_HOSTNAME");
        if (!id || !*id)
            id = getenv("PMIX_HOSTNAME");
        if (id && *id)
            snprintf(mine, sizeof mine, "%s", id);
        else
            CHECK(gethostname(mine, sizeof mine - 1) == 0, "gethostname");
        char *all = calloc((size_t)size, sizeof mine);
        CHECK(all != NULL, "calloc");
        CHECK_MPI(MPI_Allgather(mine, (int)sizeof mine, MPI_CHAR, all, (int)sizeof mine, MPI_CHAR,
                                MPI_COMM_WORLD));
        int want_s = 0, want_r = 0;
        for (int i = 0; i < size; i++) {
            if (strcmp(all + (size_t)i * sizeof mine, mine) == 0) {
                want_r += i < rank;
                want_s++;
            }
        }
        free(all);
        CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &split));
        CHECK(split != MPI_COMM_NULL, "split_type SHARED gave NULL");
        CHECK_MPI(MPI_Comm_size(split, &s));
        CHECK_MPI(MPI_Comm_rank(split, &r));
        CHECK(s == want_s && r == want_r, "split_type SHARED rank %d size %d, want %d of %d", r, s,
              want_r, want_s);
        /* a collective inside the node (its intra-node paths), then one over the world */
        long one = 1, sum = 0;
        CHECK_MPI(MPI_Allreduce(&one, &sum, 1, MPI_LONG, MPI_SUM, split));
        CHECK(sum == s, "allreduce on the node communicator: %ld, want %d", sum, s);
        CHECK_MPI(MPI_Allreduce(&one, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD));
        CHECK(sum == size, "allreduce on MPI_COMM_WORLD: %ld, want %d", sum, size);
        CHECK_MPI(MPI_Comm_free(&split));
    }
    CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_UNDEFINED, 0, MPI_INFO_NULL, &split));
    CHECK(split == MPI_COMM_NULL, "split_type UNDEFINED gave a communicator");

    /* Comm_create with the group of the upper half (collective over world) */
    {
        MPI_Group wg, hg;
        int lo = size / 2, n = size - size / 2;
        int range[1][3];
        range[0][0] = lo;
        range[0][1] = size - 1;
        range[0][2] = 1;
        CHECK_MPI(MPI_Comm_group(MPI_COMM_WORLD, &wg));
        CHECK_MPI(MPI_Group_range_incl(wg, 1, range, &hg));
        CHECK_MPI(MPI_Comm_create(MPI_COMM_WORLD, hg, &sub));
        if (rank >= lo) {
            CHECK(sub != MPI_COMM_NULL, "member got MPI_COMM_NULL from Comm_create");
            CHECK_MPI(MPI_Comm_rank(sub, &r));
            CHECK_MPI(MPI_Comm_size(sub, &s));
            CHECK(r == rank - lo && s == n, "create rank %d size %d", r, s);
            {
                int v = rank, sum = 0;
                CHECK_MPI(MPI_Allreduce(&v, &sum, 1, MPI_INT, MPI_SUM, sub));
                CHECK(sum == (lo + size - 1) * n / 2, "allreduce on created comm %d", sum);
            }
            CHECK_MPI(MPI_Comm_free(&sub));
        } else {
            CHECK(sub == MPI_COMM_NULL, "non-member got a communicator from Comm_create");
        }
        /* Comm_create_group: only members call it; group of even ranks in reverse order */
        {
            int ne = (size + 1) / 2, *ranks = malloc(sizeof(int) * (size_t)ne);
            MPI_Group eg;
            CHECK(ranks, "malloc");
            for (i = 0; i < ne; i++)
                ranks[i] = 2 * (ne - 1 - i);
            CHECK_MPI(MPI_Group_incl(wg, ne, ranks, &eg));
            if (rank % 2 == 0) {
                CHECK_MPI(MPI_Comm_create_group(MPI_COMM_WORLD, eg, 33, &sub));
                CHECK_MPI(MPI_Comm_rank(sub, &r));
                CHECK_MPI(MPI_Comm_size(sub, &s));
                CHECK(s == ne && r == ne - 1 - rank / 2, "create_group rank %d size %d", r, s);
                {
                    int root_world = -1;
                    if (r == 0)
                        root_world = rank;
                    CHECK_MPI(MPI_Bcast(&root_world, 1, MPI_INT, 0, sub));
                    CHECK(root_world == 2 * (ne - 1), "create_group rank 0 is world %d", root_world);
                }
                CHECK_MPI(MPI_Comm_free(&sub));
            }
            CHECK_MPI(MPI_Group_free(&eg));
            free(ranks);
        }
        CHECK_MPI(MPI_Group_free(&hg));
        CHECK_MPI(MPI_Group_free(&wg));
    }

    /* compare SIMILAR: same members, different order */
    CHECK_MPI(MPI_Comm_split(MPI_COMM_WORLD, 0, size - rank, &split));
    CHECK_MPI(MPI_Comm_compare(split, MPI_COMM_WORLD, &res));
    CHECK(res == (size == 1 ? MPI_CONGRUENT : MPI_SIMILAR), "compare(reversed, world) = %d", res);
    CHECK_MPI(MPI_Comm_free(&split));

    /* no parent: not spawned */
    {
        MPI_Comm parent = MPI_COMM_WORLD;
        CHECK_MPI(MPI_Comm_get_parent(&parent));
        CHECK(parent == MPI_COMM_NULL, "Comm_get_parent is not MPI_COMM_NULL");
    }

    /* disconnect a dup (collective, waits for pending traffic) */
    {
        int a = rank, b = -1;
        MPI_Request rq;
        CHECK_MPI(MPI_Irecv(&b, 1, MPI_INT, (rank + size - 1) % size, 1, dup, &rq));
        CHECK_MPI(MPI_Send(&a, 1, MPI_INT, (rank + 1) % size, 1, dup));
        CHECK_MPI(MPI_Wait(&rq, MPI_STATUS_IGNORE));
        CHECK(b == (rank + size - 1) % size, "message on dup before disconnect %d", b);
        CHECK_MPI(MPI_Comm_disconnect(&dup));
        CHECK(dup == MPI_COMM_NULL, "Comm_disconnect did not null");
    }

    /* many dup/free cycles do not leak contexts */
    for (i = 0; i < 200; i++) {
        CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
        CHECK_MPI(MPI_Comm_free(&dup));
    }
    /* COMM_SELF dup */
    CHECK_MPI(MPI_Comm_dup(MPI_COMM_SELF, &dup));
    CHECK_MPI(MPI_Comm_size(dup, &s));
    CHECK(s == 1, "dup of self size %d", s);
    {
        int a = 9, b = 0;
        CHECK_MPI(MPI_Sendrecv(&a, 1, MPI_INT, 0, 0, &b, 1, MPI_INT, 0, 0, dup, &st));
        CHECK(b == 9, "self dup message %d", b);
    }
    CHECK_MPI(MPI_Comm_free(&dup));
    return ct_finish("comm_basic");
}
