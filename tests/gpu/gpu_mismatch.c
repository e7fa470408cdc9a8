/* Mismatched collectives on device buffers (erroneous programs) must end, never hang: every rank
 * returns from each call (with an error or not) under MPI_ERRORS_RETURN, and the job then ends
 * normally. The host side of this check is tests/c/coll_split.c; here the ranks' own sizes send
 * them to different GPU paths (the resident kernels for small calls, the launched GPU-native
 * path or the host pipeline for large ones, the flag slots where the ranks do not agree):
 * 1. MPI_Bcast on a dup, 100000 ints at the root and 10 elsewhere;
 * 2. MPI_Allreduce on a dup, 8 ints at rank 0 and 262144 elsewhere;
 * 3. MPI_Bcast at rank 0, MPI_Reduce (root 0) elsewhere, 100000 ints on a dup;
 * 4. case 1 on MPI_COMM_WORLD.
 * Each rank prints the class it got per case; rank 0 prints "PASS: gpu_mismatch" when every rank
 * returned from every case. Without a CUDA device it prints "SKIP: ..." and exits 0. */
#include <mpi.h>
#include "cudart.h"

static int rank, size;

#define CHECKC(cond, ...) do { if (!(cond)) { fprintf(stderr, "rank %d: ", rank); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)

static void report(const char *what, int rc)
{
    int cls = MPI_SUCCESS;
    if (rc != MPI_SUCCESS) MPI_Error_class(rc, &cls);
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    if (rc != MPI_SUCCESS) MPI_Error_string(rc, msg, &len);
    printf("gpu_mismatch: rank %d: %s: class %d %s\n", rank, what, cls, msg);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    if (cudart_mpi_init(&argc, &argv, -1, &rank, &size) < 0) return 0;
    cudart_pick_device();
    if (size < 2) {
        if (rank == 0) printf("PASS: gpu_mismatch (one rank: nothing to mismatch)\n");
        MPI_Finalize();
        return 0;
    }
    const size_t big = 262144;
    int *d = NULL, *e = NULL;
    CU(cudaMalloc_((void **)&d, big * sizeof(int)));
    CU(cudaMalloc_((void **)&e, big * sizeof(int)));
    CU(cudaMemset_(d, 0, big * sizeof(int)));
    CU(cudaDeviceSynchronize_());
    MPI_Comm dup;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    CHECKC(MPI_Comm_dup(MPI_COMM_WORLD, &dup) == MPI_SUCCESS, "dup");
    MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);

    report("1 bcast 100000 vs 10 ints (dup)", MPI_Bcast(d, rank == 0 ? 100000 : 10, MPI_INT, 0, dup));
    report("2 allreduce 8 vs 262144 ints (dup)",
           MPI_Allreduce(d, e, rank == 0 ? 8 : (int)big, MPI_INT, MPI_SUM, dup));
    report("3 bcast vs reduce, 100000 ints (dup)",
           rank == 0 ? MPI_Bcast(d, 100000, MPI_INT, 0, dup)
                     : MPI_Reduce(d, e, 100000, MPI_INT, MPI_SUM, 0, dup));
    report("4 bcast 100000 vs 10 ints (MPI_COMM_WORLD)",
           MPI_Bcast(d, rank == 0 ? 100000 : 10, MPI_INT, 0, MPI_COMM_WORLD));
    /* Every rank got here: say so through host memory on a fresh communicator (the mismatched
     * ones may be out of step). */
    MPI_Comm fresh;
    CHECKC(MPI_Comm_split(MPI_COMM_WORLD, 0, rank, &fresh) == MPI_SUCCESS, "split");
    int one = 1, n = 0;
    CHECKC(MPI_Allreduce(&one, &n, 1, MPI_INT, MPI_SUM, fresh) == MPI_SUCCESS, "allreduce on a fresh comm");
    CHECKC(n == size, "%d of %d ranks returned", n, size);
    if (rank == 0) printf("PASS: gpu_mismatch (%d ranks returned from every case)\n", size);
    MPI_Comm_free(&fresh);
    cudaFree_(d);
    cudaFree_(e);
    MPI_Finalize();
    return 0;
}
