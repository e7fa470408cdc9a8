/* Communicator churn with device buffers:  gpu_churn [CYCLES [LIVE]]  (default 300 and 20).
 * CYCLES rounds of MPI_Comm_dup + device Allreduce (8 ints: the resident kernel; 256 Ki ints:
 * the launched GPU-native path, or the host-memory pipeline with GPUMPI_CUDA_IPC=0) + Alltoall
 * (1 int per rank) + MPI_Comm_free; every 100 cycles LIVE dups are alive at once, each with its
 * own small and large Allreduce, and while they are all alive gpumpi's counters
 * (MPIX_Query_gpu_resources) must show at least LIVE communicators with GPU state and, with
 * more than one rank, their memory (device scratch mapped by the peers, or pinned host
 * regions; the resident kernel's peer mappings only where every rank has a GPU of its own, since
 * ranks sharing a GPU do not take it): the GPU-native paths are still set up after that many
 * communicators. After the run the counters must be back where they started (every freed
 * communicator released its device scratch, peer mappings and pinned regions), and the device's
 * free memory (cudaMemGetInfo) may be at most 16 MiB below its value after the first phase of
 * LIVE communicators (the warm-up: caches reach their high-water mark there). Every result is
 * checked. Run with GPUMPI_DEBUG=2, the log says which path each collective took
 * (tests/gpu/run.sh counts them). Without a CUDA device it prints "SKIP: ..." and exits 0. */
#include <mpi.h>
#include <mpi-ext.h>
#include "cudart.h"

static int rank, size;

#define CHECKC(cond, ...) do { if (!(cond)) { fprintf(stderr, "rank %d: ", rank); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)

static void counters(MPI_Count c[4])
{
    CHECKC(MPIX_Query_gpu_resources(&c[0], &c[1], &c[2], &c[3]) == MPI_SUCCESS,
           "MPIX_Query_gpu_resources failed");
}

/* Allreduce of n ints on device buffers of comm, checked against the closed form. */
static void allreduce(MPI_Comm comm, int *dsend, int *drecv, int *h, size_t n, int salt)
{
    for (size_t i = 0; i < n; i++) h[i] = (int)(i % 977) + rank * 3 + salt;
    CU(cudaMemcpy_(dsend, h, n * sizeof(int), cudaMemcpyDefault_));
    CU(cudaMemset_(drecv, 0xff, n * sizeof(int)));
    CU(cudaDeviceSynchronize_());
    MPI_Allreduce(dsend, drecv, (int)n, MPI_INT, MPI_SUM, comm);
    CU(cudaMemcpy_(h, drecv, n * sizeof(int), cudaMemcpyDefault_));
    for (size_t i = 0; i < n; i++) {
        int want = size * ((int)(i % 977) + salt) + 3 * size * (size - 1) / 2;
        CHECKC(h[i] == want, "allreduce n=%zu salt %d: [%zu] = %d want %d", n, salt, i, h[i], want);
    }
}

static void alltoall(MPI_Comm comm, int *dsend, int *drecv, int *h, int salt)
{
    for (int p = 0; p < size; p++) h[p] = rank * 1000 + p + salt;
    CU(cudaMemcpy_(dsend, h, size * sizeof(int), cudaMemcpyDefault_));
    CU(cudaDeviceSynchronize_());
    MPI_Alltoall(dsend, 1, MPI_INT, drecv, 1, MPI_INT, comm);
    CU(cudaMemcpy_(h, drecv, size * sizeof(int), cudaMemcpyDefault_));
    for (int p = 0; p < size; p++)
        CHECKC(h[p] == p * 1000 + rank + salt, "alltoall salt %d: from %d got %d", salt, p, h[p]);
}

int main(int argc, char **argv)
{
    if (cudart_mpi_init(&argc, &argv, -1, &rank, &size) < 0) return 0;
    int cycles = argc > 1 ? atoi(argv[1]) : 300, live = argc > 2 ? atoi(argv[2]) : 20;
    cudart_pick_device();
    int ndev = 0;
    CU(cudaGetDeviceCount_(&ndev));
    int own_gpu = 0, local = 0;
    {
        MPI_Comm node;
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
        MPI_Comm_size(node, &local);
        MPI_Comm_free(&node);
        const char *per = getenv("GPUMPI_TEST_RANKS_PER_GPU");
        own_gpu = local <= ndev && (!per || atoi(per) <= 1);
    }
    const size_t big = 256 << 10;
    int *s = NULL, *r = NULL, *h = malloc(big * sizeof(int));
    CU(cudaMalloc_((void **)&s, big * sizeof(int)));
    CU(cudaMalloc_((void **)&r, big * sizeof(int)));
    MPI_Comm *cs = malloc(sizeof(MPI_Comm) * live);
    MPI_Count before[4], during[4], after[4];
    counters(before);
    size_t free_warm = 0, free_end = 0, total = 0;
    for (int i = 0; i < cycles; i++) {
        if (i == 51) CU(cudaMemGetInfo_(&free_warm, &total));
        if (i % 100 == 50) {
            for (int k = 0; k < live; k++) {
                CHECKC(MPI_Comm_dup(MPI_COMM_WORLD, &cs[k]) == MPI_SUCCESS, "dup");
                allreduce(cs[k], s, r, h, 8, k + i);
                allreduce(cs[k], s, r, h, big, k - i);
            }
            counters(during);
            CHECKC(size == 1 || during[0] >= before[0] + live,
                   "%d live communicators but %lld with GPU state (%lld before)", live,
                   (long long)during[0], (long long)before[0]);
            if (size > 1 && own_gpu)
                CHECKC(during[3] >= before[3] + (MPI_Count)live * (size - 1) ||
                           during[1] > before[1],
                       "%d live communicators: %lld peer mappings, %lld pinned bytes", live,
                       (long long)during[3], (long long)during[1]);
            if (rank == 0 && i == 50)
                printf("gpu_churn: %d live: comms %lld, pinned %lld B, device %lld B, "
                       "peer mappings %lld\n", live, (long long)during[0], (long long)during[1],
                       (long long)during[2], (long long)during[3]);
            for (int k = live - 1; k >= 0; k--) MPI_Comm_free(&cs[k]);
        }
        MPI_Comm c;
        CHECKC(MPI_Comm_dup(MPI_COMM_WORLD, &c) == MPI_SUCCESS, "dup");
        allreduce(c, s, r, h, 8, i);
        if (i % 10 == 0) allreduce(c, s, r, h, big, -i);
        alltoall(c, s, r, h, i);
        MPI_Comm_free(&c);
    }
    counters(after);
    CU(cudaMemGetInfo_(&free_end, &total));
    for (int k = 0; k < 4; k++)
        CHECKC(after[k] == before[k], "counter %d: %lld before, %lld after %d cycles", k,
               (long long)before[k], (long long)after[k], cycles);
    if (free_warm)
        CHECKC(free_end + (16u << 20) >= free_warm,
               "device free memory fell from %zu to %zu bytes over the cycles", free_warm,
               free_end);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        printf("PASS: gpu_churn: %d ranks, %d cycles, %d live; device free %zu -> %zu MiB\n", size,
               cycles, live, free_warm >> 20, free_end >> 20);
    CU(cudaFree_(s));
    CU(cudaFree_(r));
    free(h);
    free(cs);
    MPI_Finalize();
    return 0;
}
