/* Mismatched collectives on device buffers (erroneous programs) must end with the standard's
 * class on every rank, never hang, and leave the communicator working: under MPI_ERRORS_RETURN
 * every rank gets the expected class from each mismatched call, and after each one correct
 * collectives on the same communicator (small, mid-size and large, device and host buffers)
 * return MPI_SUCCESS with the right data. The host side of this check is tests/c/coll_split.c
 * and tests/c/coll_drift.c; here the ranks' own arguments send them to different GPU paths
 * (the resident kernels for small calls, the launched GPU-native path or the host pipeline for
 * large ones, the flag slots where the ranks do not agree):
 * 1. MPI_Bcast on a dup, 100000 ints at the root and 10 elsewhere: MPI_ERR_TRUNCATE;
 * 2. MPI_Allreduce on a dup, 8 ints at rank 0 and 262144 elsewhere: MPI_ERR_TRUNCATE;
 * 3. MPI_Bcast at rank 0, MPI_Reduce (root 0) elsewhere, 100000 ints on a dup: MPI_ERR_OTHER;
 * 4. case 1 on MPI_COMM_WORLD: MPI_ERR_TRUNCATE;
 * 5. MPI_Bcast of 100000 ints on a dup, root 0 at rank 0 and root 1 elsewhere: MPI_ERR_ROOT;
 * 6. MPI_Allreduce on a dup whose small calls run on the resident kernels (set up by a correct
 *    call first), 8 ints at rank 0 and 16 elsewhere: MPI_ERR_TRUNCATE;
 * 7. case 6 on MPI_COMM_WORLD;
 * 8. MPI_Reduce of 100000 ints on MPI_COMM_WORLD, root 0 at rank 0 and root 1 elsewhere:
 *    MPI_ERR_ROOT.
 * Each rank prints the class and message it got per case; rank 0 prints "PASS: gpu_mismatch"
 * when every rank got every expected class and every later collective was right. Without a
 * CUDA device it prints "SKIP: ..." and exits 0. */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include "cudart.h"

static int rank, size, failures;

#define CHECKC(cond, ...) do { if (!(cond)) { fprintf(stderr, "rank %d: ", rank); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)

static const size_t big = 262144;
static int *d, *e, *h;

static void expect(const char *what, int rc, int want)
{
    int cls = MPI_SUCCESS;
    if (rc != MPI_SUCCESS) MPI_Error_class(rc, &cls);
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    if (rc != MPI_SUCCESS) MPI_Error_string(rc, msg, &len);
    printf("gpu_mismatch: rank %d: %s: class %d %s\n", rank, what, cls, msg);
    if (cls != want) {
        printf("gpu_mismatch: rank %d: %s: expected class %d, got %d\n", rank, what, want, cls);
        failures++;
    }
    fflush(stdout);
}

static void to_dev(int *dst, size_t n) { CU(cudaMemcpy_(dst, h, n * sizeof(int), cudaMemcpyDefault_)); }
static void from_dev(const int *src, size_t n) { CU(cudaMemcpy_(h, src, n * sizeof(int), cudaMemcpyDefault_)); }

/* Correct collectives on `comm` after a mismatched one: each must succeed with the right data. */
static void later_calls_work(MPI_Comm comm, const char *after)
{
    int r, n;
    MPI_Comm_rank(comm, &r);
    MPI_Comm_size(comm, &n);
    /* Small device allreduce (the resident kernels or the flag slots), twice. */
    for (int rep = 0; rep < 2; rep++) {
        for (int i = 0; i < 8; i++) h[i] = r * 100 + i + rep;
        to_dev(d, 8);
        CHECKC(MPI_Allreduce(d, e, 8, MPI_INT, MPI_SUM, comm) == MPI_SUCCESS,
               "small device allreduce after %s", after);
        from_dev(e, 8);
        for (int i = 0; i < 8; i++)
            CHECKC(h[i] == 100 * n * (n - 1) / 2 + n * (i + rep),
                   "small device allreduce after %s: element %d is %d", after, i, h[i]);
    }
    /* Mid-size device bcast from the last rank. */
    const int mid = 100000;
    for (int i = 0; i < mid; i++) h[i] = r == n - 1 ? i * 3 + 1 : -1;
    to_dev(d, mid);
    CHECKC(MPI_Bcast(d, mid, MPI_INT, n - 1, comm) == MPI_SUCCESS, "device bcast after %s", after);
    from_dev(d, mid);
    for (int i = 0; i < mid; i++)
        CHECKC(h[i] == i * 3 + 1, "device bcast after %s: element %d is %d", after, i, h[i]);
    /* Large device allreduce. */
    for (size_t i = 0; i < big; i++) h[i] = (int)(i % 1000) + r;
    to_dev(d, big);
    CHECKC(MPI_Allreduce(d, e, (int)big, MPI_INT, MPI_SUM, comm) == MPI_SUCCESS,
           "large device allreduce after %s", after);
    from_dev(e, big);
    for (size_t i = 0; i < big; i++)
        CHECKC(h[i] == n * (int)(i % 1000) + n * (n - 1) / 2,
               "large device allreduce after %s: element %zu is %d", after, i, h[i]);
    /* Host buffers: a small allreduce and a mid-size bcast. */
    int one = r + 1, sum = 0;
    CHECKC(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, comm) == MPI_SUCCESS,
           "host allreduce after %s", after);
    CHECKC(sum == n * (n + 1) / 2, "host allreduce after %s: %d", after, sum);
    int *hb = malloc(4096 * sizeof(int));
    for (int i = 0; i < 4096; i++) hb[i] = r == 0 ? i ^ 0x55 : 0;
    CHECKC(MPI_Bcast(hb, 4096, MPI_INT, 0, comm) == MPI_SUCCESS, "host bcast after %s", after);
    for (int i = 0; i < 4096; i++)
        CHECKC(hb[i] == (i ^ 0x55), "host bcast after %s: element %d is %d", after, i, hb[i]);
    free(hb);
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
    CU(cudaMalloc_((void **)&d, big * sizeof(int)));
    CU(cudaMalloc_((void **)&e, big * sizeof(int)));
    CU(cudaMemset_(d, 0, big * sizeof(int)));
    CU(cudaDeviceSynchronize_());
    h = malloc(big * sizeof(int));
    MPI_Comm dup, w = MPI_COMM_WORLD;
    MPI_Comm_set_errhandler(w, MPI_ERRORS_RETURN);
    CHECKC(MPI_Comm_dup(w, &dup) == MPI_SUCCESS, "dup");
    MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);

    expect("1 bcast 100000 vs 10 ints (dup)",
           MPI_Bcast(d, rank == 0 ? 100000 : 10, MPI_INT, 0, dup), MPI_ERR_TRUNCATE);
    later_calls_work(dup, "case 1");
    expect("2 allreduce 8 vs 262144 ints (dup)",
           MPI_Allreduce(d, e, rank == 0 ? 8 : (int)big, MPI_INT, MPI_SUM, dup), MPI_ERR_TRUNCATE);
    later_calls_work(dup, "case 2");
    expect("3 bcast vs reduce, 100000 ints (dup)",
           rank == 0 ? MPI_Bcast(d, 100000, MPI_INT, 0, dup)
                     : MPI_Reduce(d, e, 100000, MPI_INT, MPI_SUM, 0, dup), MPI_ERR_OTHER);
    later_calls_work(dup, "case 3");
    expect("4 bcast 100000 vs 10 ints (MPI_COMM_WORLD)",
           MPI_Bcast(d, rank == 0 ? 100000 : 10, MPI_INT, 0, w), MPI_ERR_TRUNCATE);
    later_calls_work(w, "case 4");
    expect("5 bcast root 0 vs root 1, 100000 ints (dup)",
           MPI_Bcast(d, 100000, MPI_INT, rank == 0 ? 0 : 1, dup), MPI_ERR_ROOT);
    later_calls_work(dup, "case 5");
    /* later_calls_work ran small device allreduces on dup: its resident kernels (where they
     * apply) are set up, so this mismatch meets them. */
    expect("6 allreduce 8 vs 16 ints, resident kernels set up (dup)",
           MPI_Allreduce(d, e, rank == 0 ? 8 : 16, MPI_INT, MPI_SUM, dup), MPI_ERR_TRUNCATE);
    later_calls_work(dup, "case 6");
    expect("7 allreduce 8 vs 16 ints (MPI_COMM_WORLD)",
           MPI_Allreduce(d, e, rank == 0 ? 8 : 16, MPI_INT, MPI_SUM, w), MPI_ERR_TRUNCATE);
    later_calls_work(w, "case 7");
    expect("8 reduce root 0 vs root 1, 100000 ints (MPI_COMM_WORLD)",
           MPI_Reduce(d, e, 100000, MPI_INT, MPI_SUM, rank == 0 ? 0 : 1, w), MPI_ERR_ROOT);
    later_calls_work(w, "case 8");

    int bad = 0;
    CHECKC(MPI_Allreduce(&failures, &bad, 1, MPI_INT, MPI_SUM, w) == MPI_SUCCESS, "tally");
    if (rank == 0) {
        if (bad == 0)
            printf("PASS: gpu_mismatch (%d ranks: every mismatch reported with its class, "
                   "every later collective right)\n", size);
        else
            printf("FAIL: gpu_mismatch: %d unexpected classes\n", bad);
    }
    MPI_Comm_free(&dup);
    free(h);
    cudaFree_(d);
    cudaFree_(e);
    MPI_Finalize();
    return bad != 0;
}
