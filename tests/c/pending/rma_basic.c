/* One-sided communication: Win_create/Win_allocate, Win_get_attr (BASE, SIZE, DISP_UNIT),
 * Put/Get/Accumulate(SUM)/Get_accumulate/Fetch_and_op/Compare_and_swap in fence epochs,
 * passive target Lock/Unlock, Lock_all/Flush/Unlock_all with Rput/Rget, Win_allocate_shared +
 * Win_shared_query, Win_free. */
#include "ctest.h"

#define N 8

int main(int argc, char **argv)
{
    int rank, size, next, prev, i, flag;
    int *base;
    MPI_Win win;

    ct_init(&argc, &argv);
    rank = ct_world_rank;
    size = ct_world_size;
    next = (rank + 1) % size;
    prev = (rank + size - 1) % size;

    /* Win_create over user memory */
    base = malloc(sizeof(int) * 3 * N);
    CHECK(base, "malloc");
    for (i = 0; i < 3 * N; i++)
        base[i] = -1;
    CHECK_MPI(MPI_Win_create(base, (MPI_Aint)(sizeof(int) * 3 * N), (int)sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD,
                             &win));
    {
        void *b;
        MPI_Aint *sz;
        int *du;
        CHECK_MPI(MPI_Win_get_attr(win, MPI_WIN_BASE, &b, &flag));
        CHECK(flag && b == base, "WIN_BASE");
        CHECK_MPI(MPI_Win_get_attr(win, MPI_WIN_SIZE, &sz, &flag));
        CHECK(flag && *sz == (MPI_Aint)(sizeof(int) * 3 * N), "WIN_SIZE %ld", (long)*sz);
        CHECK_MPI(MPI_Win_get_attr(win, MPI_WIN_DISP_UNIT, &du, &flag));
        CHECK(flag && *du == (int)sizeof(int), "WIN_DISP_UNIT %d", *du);
    }
    {
        int src[N], got[N];
        for (i = 0; i < N; i++) {
            src[i] = rank * 100 + i;
            got[i] = -5;
        }
        /* epoch 1: put my row into slot 0 of next; everyone initialises slot 2 to rank */
        for (i = 0; i < N; i++)
            base[2 * N + i] = rank;
        CHECK_MPI(MPI_Win_fence(0, win));
        CHECK_MPI(MPI_Put(src, N, MPI_INT, next, 0, N, MPI_INT, win));
        CHECK_MPI(MPI_Win_fence(0, win));
        for (i = 0; i < N; i++)
            CHECK(base[i] == prev * 100 + i, "Put: slot0[%d] = %d want %d", i, base[i], prev * 100 + i);
        /* epoch 2: get prev's slot 2 (= prev), accumulate SUM of 1s into rank 0's slot 1 */
        for (i = 0; i < N; i++)
            base[N + i] = 0;
        CHECK_MPI(MPI_Win_fence(0, win));
        CHECK_MPI(MPI_Get(got, N, MPI_INT, prev, 2 * N, N, MPI_INT, win));
        {
            int ones[N];
            for (i = 0; i < N; i++)
                ones[i] = i + 1;
            CHECK_MPI(MPI_Accumulate(ones, N, MPI_INT, 0, N, N, MPI_INT, MPI_SUM, win));
        }
        CHECK_MPI(MPI_Win_fence(0, win));
        for (i = 0; i < N; i++)
            CHECK(got[i] == prev, "Get [%d] = %d want %d", i, got[i], prev);
        if (rank == 0)
            for (i = 0; i < N; i++)
                CHECK(base[N + i] == size * (i + 1), "Accumulate [%d] = %d want %d", i, base[N + i], size * (i + 1));
        /* epoch 3: fetch_and_op (counter at rank 0 slot 1[0]), get_accumulate, compare_and_swap */
        if (rank == 0)
            base[N] = 0;
        CHECK_MPI(MPI_Win_fence(0, win));
        {
            int one = 1, old = -1;
            CHECK_MPI(MPI_Fetch_and_op(&one, &old, MPI_INT, 0, N, MPI_SUM, win));
            CHECK_MPI(MPI_Win_fence(0, win));
            CHECK(old >= 0 && old < size, "Fetch_and_op old value %d", old);
            {
                int *olds = malloc(sizeof(int) * (size_t)size), *seen = calloc((size_t)size, sizeof(int));
                CHECK(olds && seen, "malloc");
                CHECK_MPI(MPI_Allgather(&old, 1, MPI_INT, olds, 1, MPI_INT, MPI_COMM_WORLD));
                for (i = 0; i < size; i++) {
                    CHECK(olds[i] >= 0 && olds[i] < size && !seen[olds[i]], "Fetch_and_op values not a permutation");
                    seen[olds[i]] = 1;
                }
                free(olds);
                free(seen);
            }
            if (rank == 0)
                CHECK(base[N] == size, "counter %d want %d", base[N], size);
        }
        {
            /* next's slot 2[0] holds 'next' and only I (next's prev) swap it */
            int cmp = next, newv = rank + 1000, res = -1;
            CHECK_MPI(MPI_Win_fence(0, win));
            CHECK_MPI(MPI_Compare_and_swap(&newv, &cmp, &res, MPI_INT, next, 2 * N, win));
            CHECK_MPI(MPI_Win_fence(0, win));
            CHECK(res == next, "Compare_and_swap result %d want %d", res, next);
            CHECK(base[2 * N] == prev + 1000, "Compare_and_swap stored %d want %d", base[2 * N], prev + 1000);
        }
    }
    /* passive target: lock next exclusively and put into slot 0 */
    {
        int v[2] = {rank, -rank}, r2[2] = {0, 0};
        CHECK_MPI(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, next, 0, win));
        CHECK_MPI(MPI_Put(v, 2, MPI_INT, next, 0, 2, MPI_INT, win));
        CHECK_MPI(MPI_Win_unlock(next, win));
        CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
        CHECK_MPI(MPI_Win_lock(MPI_LOCK_SHARED, rank, 0, win));
        r2[0] = base[0];
        r2[1] = base[1];
        CHECK_MPI(MPI_Win_unlock(rank, win));
        CHECK(r2[0] == prev && r2[1] == -prev, "lock/put got %d %d", r2[0], r2[1]);
    }
    /* lock_all + Rput/Rget + flush */
    {
        int v = rank * 7, g = -1;
        MPI_Request rq;
        CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
        CHECK_MPI(MPI_Win_lock_all(0, win));
        CHECK_MPI(MPI_Rput(&v, 1, MPI_INT, next, 3, 1, MPI_INT, win, &rq));
        CHECK_MPI(MPI_Wait(&rq, MPI_STATUS_IGNORE));
        CHECK_MPI(MPI_Win_flush(next, win));
        CHECK_MPI(MPI_Win_unlock_all(win));
        CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
        CHECK_MPI(MPI_Win_lock_all(0, win));
        CHECK_MPI(MPI_Rget(&g, 1, MPI_INT, prev, 3, 1, MPI_INT, win, &rq));
        CHECK_MPI(MPI_Wait(&rq, MPI_STATUS_IGNORE));
        CHECK_MPI(MPI_Win_unlock_all(win));
        /* prev's slot 3 was written by prev's prev */
        CHECK(g == ((prev + size - 1) % size) * 7, "Rget %d want %d", g, ((prev + size - 1) % size) * 7);
    }
    CHECK_MPI(MPI_Win_free(&win));
    CHECK(win == MPI_WIN_NULL, "Win_free did not null");
    free(base);

    /* Win_allocate */
    {
        double *mem = NULL, d = rank + 0.5, g = -1;
        CHECK_MPI(MPI_Win_allocate((MPI_Aint)(sizeof(double) * 4), (int)sizeof(double), MPI_INFO_NULL, MPI_COMM_WORLD,
                                   &mem, &win));
        CHECK(mem != NULL, "Win_allocate base NULL");
        mem[0] = mem[1] = mem[2] = mem[3] = 0;
        CHECK_MPI(MPI_Win_fence(0, win));
        CHECK_MPI(MPI_Put(&d, 1, MPI_DOUBLE, next, 2, 1, MPI_DOUBLE, win));
        CHECK_MPI(MPI_Win_fence(0, win));
        CHECK_MPI(MPI_Get(&g, 1, MPI_DOUBLE, next, 2, 1, MPI_DOUBLE, win));
        CHECK_MPI(MPI_Win_fence(0, win));
        CHECK(mem[2] == prev + 0.5 && g == d, "Win_allocate put/get %g %g", mem[2], g);
        CHECK_MPI(MPI_Win_free(&win));
    }
    /* Win_allocate_shared + Win_shared_query: direct load of the neighbour's memory */
    {
        MPI_Comm node;
        int *mine = NULL, *theirs = NULL, du, nrank, nsize;
        MPI_Aint sz;
        CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
        CHECK_MPI(MPI_Comm_rank(node, &nrank));
        CHECK_MPI(MPI_Comm_size(node, &nsize));
        CHECK_MPI(
            MPI_Win_allocate_shared((MPI_Aint)sizeof(int) * 2, (int)sizeof(int), MPI_INFO_NULL, node, &mine, &win));
        mine[0] = nrank * 11;
        mine[1] = 0;
        CHECK_MPI(MPI_Win_fence(0, win));
        CHECK_MPI(MPI_Win_shared_query(win, (nrank + 1) % nsize, &sz, &du, &theirs));
        CHECK(sz == (MPI_Aint)sizeof(int) * 2 && du == (int)sizeof(int), "shared_query size %ld unit %d", (long)sz, du);
        CHECK(theirs[0] == ((nrank + 1) % nsize) * 11, "shared load %d", theirs[0]);
        CHECK_MPI(MPI_Win_fence(0, win));
        CHECK_MPI(MPI_Win_free(&win));
        CHECK_MPI(MPI_Comm_free(&node));
    }
    return ct_finish("rma_basic");
}
