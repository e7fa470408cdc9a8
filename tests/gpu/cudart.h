/* The few CUDA runtime calls the GPU tests use, loaded with dlopen so the tests build without
 * CUDA headers and print "SKIP: no CUDA device (<reason>)" where there is no CUDA runtime or device
 * (tests/gpu/run.sh counts that run as a skip, a failure on a machine with a GPU). */
#ifndef GPUMPI_TEST_CUDART_H
#define GPUMPI_TEST_CUDART_H
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { cudaMemcpyDefault_ = 4 };
static int (*cudaGetDeviceCount_)(int *);
static int (*cudaSetDevice_)(int);
static int (*cudaMalloc_)(void **, size_t);
static int (*cudaMallocManaged_)(void **, size_t, unsigned);
static int (*cudaMallocHost_)(void **, size_t);
static int (*cudaFree_)(void *);
static int (*cudaFreeHost_)(void *);
static int (*cudaMemcpy_)(void *, const void *, size_t, int);
static int (*cudaMemset_)(void *, int, size_t);
static int (*cudaDeviceSynchronize_)(void);
static const char *(*cudaGetErrorString_)(int);
static int (*cudaMemGetInfo_)(size_t *, size_t *);
static int (*cudaHostRegister_)(void *, size_t, unsigned);
static int (*cudaHostUnregister_)(void *);

/* Returns NULL when CUDA is usable, else the reason it is not. */
static const char *cudart_load(void) {
    static char why[512];
    const char *names[] = {getenv("GPUMPI_TEST_CUDART"), "libcudart.so", "libcudart.so.13",
                           "libcudart.so.12", "/usr/local/cuda/lib64/libcudart.so", NULL};
    void *h = NULL;
    for (int i = 0; i < 6 && !h; i++)
        if (names[i] && *names[i]) h = dlopen(names[i], RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        snprintf(why, sizeof why, "no CUDA runtime library (libcudart.so): %s", dlerror());
        return why;
    }
#define LOAD(f) if (!(*(void **)&f##_ = dlsym(h, #f))) { snprintf(why, sizeof why, "libcudart lacks %s", #f); return why; }
    LOAD(cudaGetDeviceCount) LOAD(cudaSetDevice) LOAD(cudaMalloc) LOAD(cudaMallocManaged)
    LOAD(cudaMallocHost) LOAD(cudaFree) LOAD(cudaFreeHost) LOAD(cudaMemcpy) LOAD(cudaMemset)
    LOAD(cudaDeviceSynchronize) LOAD(cudaGetErrorString) LOAD(cudaMemGetInfo) LOAD(cudaHostRegister)
    LOAD(cudaHostUnregister)
#undef LOAD
    int n = 0, rc = cudaGetDeviceCount_(&n);
    if (rc != 0 || n == 0) {
        snprintf(why, sizeof why, "cudaGetDeviceCount: %s (%d devices)",
                 rc ? cudaGetErrorString_(rc) : "no error", n);
        return why;
    }
    return NULL;
}

#define CU(call) do { int rc_ = (call); if (rc_) { fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString_(rc_)); MPI_Abort(MPI_COMM_WORLD, 3); } } while (0)

/* Pick this rank's device: local rank / GPUMPI_TEST_RANKS_PER_GPU (default 1), modulo count. */
/* After MPI_Init (mpi.h included before this header): whether any rank lacks CUDA (`why` is
 * this rank's cudart_load() result); rank 0 then prints the SKIP line the scripts look for. */
static int cudart_skip_all(const char *why, int rank) {
    int skip = why != NULL, any_skip = 0;
    MPI_Allreduce(&skip, &any_skip, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any_skip && rank == 0) printf("SKIP: no CUDA device (%s)\n", why ? why : "on another rank");
    return any_skip;
}

/* The start of every GPU test: load the CUDA runtime, MPI_Init (or MPI_Init_thread with
 * `required` when it is not -1), this rank's number and the world size, then the SKIP check.
 * Returns the provided thread level, or -1 after MPI_Finalize when the test is skipped. */
static inline int cudart_mpi_init(int *argc, char ***argv, int required, int *rank, int *size) {
    const char *why = cudart_load();
    int provided = -1;
    if (required == -1)
        MPI_Init(argc, argv);
    else
        MPI_Init_thread(argc, argv, required, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, size);
    if (cudart_skip_all(why, *rank)) {
        MPI_Finalize();
        return -1;
    }
    return provided == -1 ? MPI_THREAD_SINGLE : provided;
}

static int cudart_pick_device(void) {
    int n = 0;
    cudaGetDeviceCount_(&n);
    const char *lr = getenv("GPUMPI_LOCAL_RANK"), *per = getenv("GPUMPI_TEST_RANKS_PER_GPU");
    int r = lr ? atoi(lr) : 0, p = per ? atoi(per) : 1;
    if (p < 1) p = 1;
    int d = (r / p) % n;
    cudaSetDevice_(d);
    return d;
}
#endif
