/* MPI_THREAD_MULTIPLE with device buffers: two threads run collectives on two communicators at
 * the same time (thread A: large allreduce, two-shot; thread B: small allreduce and alltoall),
 * 20 rounds each, every result checked. The resident kernel is off under THREAD_MULTIPLE, so
 * this exercises the launched GPU-native path from two threads at once.
 * Without a CUDA device it prints "SKIP: no CUDA device (<reason>)" and exits 0. */
#include <mpi.h>
#include <pthread.h>
#include "cudart.h"

static int rank, size, dev;

struct job {
    MPI_Comm comm;
    size_t n;
    int tag, alltoall, errs;
};

static void *worker(void *arg)
{
    struct job *j = arg;
    cudaSetDevice_(dev); /* the runtime's current device is per thread */
    size_t n = j->n, b = n * sizeof(int), nb = b * size;
    int *h = malloc(nb), *g = malloc(nb);
    void *s = NULL, *r = NULL;
    CU(cudaMalloc_(&s, nb));
    CU(cudaMalloc_(&r, nb));
    for (int it = 0; it < 20 && !j->errs; it++) {
        for (size_t i = 0; i < n * size; i++) h[i] = (int)(i % 1000) + rank * 7 + it + j->tag;
        CU(cudaMemcpy_(s, h, nb, cudaMemcpyDefault_));
        CU(cudaDeviceSynchronize_());
        MPI_Allreduce(s, r, (int)n, MPI_INT, MPI_SUM, j->comm);
        CU(cudaMemcpy_(g, r, b, cudaMemcpyDefault_));
        for (size_t i = 0; i < n; i++) {
            int want = size * ((int)(i % 1000) + it + j->tag) + 7 * size * (size - 1) / 2;
            if (g[i] != want) {
                fprintf(stderr, "rank %d: thread %d allreduce n=%zu round %d: [%zu] = %d want %d\n",
                        rank, j->tag, n, it, i, g[i], want);
                j->errs++;
                break;
            }
        }
        if (!j->alltoall) continue;
        MPI_Alltoall(s, (int)n, MPI_INT, r, (int)n, MPI_INT, j->comm);
        CU(cudaMemcpy_(g, r, nb, cudaMemcpyDefault_));
        for (int p = 0; p < size && !j->errs; p++)
            for (size_t i = 0; i < n; i++) {
                size_t k = (size_t)rank * n + i; /* my block in p's send buffer */
                int want = (int)(k % 1000) + p * 7 + it + j->tag;
                if (g[(size_t)p * n + i] != want) {
                    fprintf(stderr, "rank %d: thread %d alltoall round %d from %d: [%zu] = %d want %d\n",
                            rank, j->tag, it, p, i, g[(size_t)p * n + i], want);
                    j->errs++;
                    break;
                }
            }
    }
    CU(cudaFree_(s));
    CU(cudaFree_(r));
    free(h);
    free(g);
    return NULL;
}

int main(int argc, char **argv)
{
    int provided = cudart_mpi_init(&argc, &argv, MPI_THREAD_MULTIPLE, &rank, &size);
    if (provided < 0) return 0;
    int errors = provided == MPI_THREAD_MULTIPLE ? 0 : 1;
    if (errors) fprintf(stderr, "rank %d: provided thread level %d\n", rank, provided);
    dev = cudart_pick_device();
    struct job a = {MPI_COMM_NULL, 1000003, 1, 0, 0}, b = {MPI_COMM_NULL, 1025, 2, 1, 0};
    MPI_Comm_dup(MPI_COMM_WORLD, &a.comm);
    MPI_Comm_dup(MPI_COMM_WORLD, &b.comm);
    pthread_t ta, tb;
    pthread_create(&ta, NULL, worker, &a);
    pthread_create(&tb, NULL, worker, &b);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    errors += a.errs + b.errs;
    int total = 0;
    MPI_Allreduce(&errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("%s: gpu_mt %d ranks, %d errors\n", total ? "FAIL" : "PASS", size, total);
    MPI_Comm_free(&a.comm);
    MPI_Comm_free(&b.comm);
    MPI_Finalize();
    return total != 0;
}
