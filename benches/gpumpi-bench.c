/* gpumpi-bench -- one C99 benchmark driver for MPI libraries (gpumpi, MPICH,
 * Open MPI) and, with -B nccl, for NCCL loaded at run time.
 *
 * Standard MPI only; CUDA (libcudart / libcuda) and NCCL (libnccl.so.2) are
 * loaded with dlopen, never linked.  Build:
 *     mpicc -std=c99 -O2 -o gpumpi-bench benches/gpumpi-bench.c -ldl -lm
 * Run `gpumpi-bench -h` for options; BENCHMARKS.md describes the method. */
#define _GNU_SOURCE
#include <mpi.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "bench_util.h"

#define MAX_SIZES 64

/* ------------------------------------------------------------- options */

static struct {
    int op, type, redop, root, warmup, iters, blocking, check, window, cuda, nccl, inject, vmm, dup;
    size_t minb, maxb, factor;
    const char *csv, *json, *label;
} O = { BU_OP_ALLREDUCE, BU_FLOAT, BU_SUM, 0, 5, 20, 1, 1, 64, 0, 0,
        0, 0, 0, 8, 1 << 20, 2, NULL, NULL, NULL };

static int rank, nranks;
/* The communicator of the MPI operations (-C): MPI_COMM_WORLD or a dup of it. */
static MPI_Comm bench_comm;

static void usage(FILE *f)
{
    fprintf(f,
"usage: gpumpi-bench [options]\n"
"  -o op       pingpong bw bibw sendrecv allreduce reduce alltoall alltoallv bcast\n"
"              allgather reduce_scatter firstcall gather       (allreduce)\n"
"              scatter allgatherv gatherv scatterv (equal blocks\n"
"              through the v interface)\n"
"  -b bytes    smallest size, K/M/G suffixes                  (8)\n"
"  -e bytes    largest size                                   (1M)\n"
"  -f factor   size multiplier                                (2)\n"
"  -d mem      host | cuda | vmm | vmm-nohandle                (host)\n"
"              vmm: cuMemCreate memory (POSIX fd handle type), one\n"
"              allocation per buffer, as PyTorch's expandable segments;\n"
"              vmm-nohandle: the same without a shareable handle type\n"
"  -t type     int8 uint8 int32 uint32 int64 uint64 float double (float)\n"
"  -p redop    sum prod max min                               (sum)\n"
"  -r root     root of bcast/reduce/gather(v)/scatter(v)      (0)\n"
"  -w n        warm-up iterations                             (5)\n"
"  -n n        timed iterations                               (20)\n"
"  -z 0|1      0 back-to-back (n ops, one completion), 1 blocking (1)\n"
"  -c 0|1      validate results                               (1)\n"
"  -W n        window of nonblocking sends for bw/bibw        (64)\n"
"  -B backend  mpi | nccl                                     (mpi)\n"
"  -C comm     world | dup: the MPI operations run on MPI_COMM_WORLD\n"
"              or on a communicator duplicated from it    (world)\n"
"  -L label    backend label for CSV/JSON                     (mpi|nccl)\n"
"  --csv FILE  --json FILE   also write results there (rank 0)\n"
"  --inject-error  corrupt one output element per size (tests the validation)\n"
"Sizes are per rank for allreduce/reduce/bcast/p2p and the total over ranks\n"
"for allgather(v)/reduce_scatter/alltoall(v)/gather(v)/scatter(v), as in nccl-tests.\n");
}

/* Rank as told by the launcher's environment, before MPI_Init (0 if none):
 * only that rank prints usage errors. */
static int launcher_rank(void)
{
    static const char *const vars[] = { "PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK",
                                        "GPUMPI_RANK", "RANK", NULL };
    for (int i = 0; vars[i]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) return atoi(v);
    }
    return 0;
}

static int parse_int(const char *s, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end) return -1;
    *out = (int)v;
    return 0;
}

static int parse_args(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); exit(0); }
        if (!strcmp(a, "--inject-error")) { O.inject = 1; continue; }
        if (!v) { if (launcher_rank() == 0) fprintf(stderr, "gpumpi-bench: %s needs a value\n", a); return -1; }
        if (!strcmp(a, "--csv")) O.csv = v;
        else if (!strcmp(a, "--json")) O.json = v;
        else if (!strcmp(a, "-o")) bad = (O.op = bu_op_from_name(v)) < 0;
        else if (!strcmp(a, "-t")) bad = (O.type = bu_type_from_name(v)) < 0;
        else if (!strcmp(a, "-p")) bad = (O.redop = bu_redop_from_name(v)) < 0;
        else if (!strcmp(a, "-b")) bad = bu_parse_size(v, &O.minb);
        else if (!strcmp(a, "-e")) bad = bu_parse_size(v, &O.maxb);
        else if (!strcmp(a, "-f")) bad = bu_parse_size(v, &O.factor);
        else if (!strcmp(a, "-r")) bad = parse_int(v, &O.root);
        else if (!strcmp(a, "-w")) bad = parse_int(v, &O.warmup) || O.warmup < 0;
        else if (!strcmp(a, "-n")) bad = parse_int(v, &O.iters) || O.iters < 1;
        else if (!strcmp(a, "-z")) bad = parse_int(v, &O.blocking) || (O.blocking != 0 && O.blocking != 1);
        else if (!strcmp(a, "-c")) bad = parse_int(v, &O.check);
        else if (!strcmp(a, "-W")) bad = parse_int(v, &O.window) || O.window < 1;
        else if (!strcmp(a, "-L")) O.label = v;
        else if (!strcmp(a, "-d")) {
            if (!strcmp(v, "host")) O.cuda = 0;
            else if (!strcmp(v, "cuda")) O.cuda = 1;
            else if (!strcmp(v, "vmm")) O.cuda = O.vmm = 1;
            else if (!strcmp(v, "vmm-nohandle")) { O.cuda = 1; O.vmm = 2; }
            else bad = 1;
        } else if (!strcmp(a, "-C")) {
            if (!strcmp(v, "world")) O.dup = 0;
            else if (!strcmp(v, "dup")) O.dup = 1;
            else bad = 1;
        } else if (!strcmp(a, "-B")) {
            if (!strcmp(v, "mpi")) O.nccl = 0;
            else if (!strcmp(v, "nccl")) O.nccl = 1;
            else bad = 1;
        } else {
            if (launcher_rank() == 0) fprintf(stderr, "gpumpi-bench: unknown option %s\n", a);
            return -1;
        }
        if (bad) {
            if (launcher_rank() == 0) fprintf(stderr, "gpumpi-bench: bad value '%s' for %s\n", v, a);
            return -1;
        }
        i++;
    }
    if (O.nccl) O.cuda = 1; /* NCCL works on device buffers only */
    if (!O.label) O.label = O.nccl ? "nccl" : "mpi";
    return 0;
}

/* --------------------------------------------------- CUDA (dlopen'd) */

typedef int cuda_rc; /* cudaError_t and CUresult: 0 is success */
typedef void *stream_t;

static struct {
    int ok, driver_api;
    char why[256];
    /* runtime API */
    cuda_rc (*Malloc)(void **, size_t);
    cuda_rc (*Free)(void *);
    cuda_rc (*Memcpy)(void *, const void *, size_t, int);
    cuda_rc (*SetDevice)(int);
    cuda_rc (*GetDeviceCount)(int *);
    cuda_rc (*DeviceSynchronize)(void);
    cuda_rc (*StreamCreate)(stream_t *);
    cuda_rc (*StreamSynchronize)(stream_t);
    /* driver API fallback */
    cuda_rc (*cuInit)(unsigned);
    cuda_rc (*cuDeviceGetCount)(int *);
    cuda_rc (*cuDeviceGet)(int *, int);
    cuda_rc (*cuDevicePrimaryCtxRetain)(void **, int);
    cuda_rc (*cuCtxSetCurrent)(void *);
    cuda_rc (*cuMemAlloc)(unsigned long long *, size_t);
    cuda_rc (*cuMemFree)(unsigned long long);
    cuda_rc (*cuMemcpyHtoD)(unsigned long long, const void *, size_t);
    cuda_rc (*cuMemcpyDtoH)(void *, unsigned long long, size_t);
    cuda_rc (*cuCtxSynchronize)(void);
    cuda_rc (*cuStreamCreate)(stream_t *, unsigned);
    cuda_rc (*cuStreamSynchronize)(stream_t);
} cu;

static void *open_first(const char *const *names, char *why, size_t whylen)
{
    for (int i = 0; names[i]; i++) {
        void *h = dlopen(names[i], RTLD_NOW | RTLD_GLOBAL);
        if (h) return h;
    }
    snprintf(why, whylen, "%s not found", names[0]);
    return NULL;
}

#define LOAD(h, field, sym) (*(void **)&cu.field = dlsym(h, sym)) != NULL

/* Load CUDA and select device local_rank % ndev.  0 on success. */
static int cuda_load(int local_rank)
{
    static const char *const rt[] = { "libcudart.so", "libcudart.so.13", "libcudart.so.12",
                                      "libcudart.so.11.0", NULL };
    static const char *const drv[] = { "libcuda.so.1", "libcuda.so", NULL };
    int ndev = 0;
    void *h = open_first(rt, cu.why, sizeof cu.why);
    if (h && LOAD(h, Malloc, "cudaMalloc") && LOAD(h, Free, "cudaFree") &&
        LOAD(h, Memcpy, "cudaMemcpy") && LOAD(h, SetDevice, "cudaSetDevice") &&
        LOAD(h, GetDeviceCount, "cudaGetDeviceCount") &&
        LOAD(h, DeviceSynchronize, "cudaDeviceSynchronize") &&
        LOAD(h, StreamCreate, "cudaStreamCreate") &&
        LOAD(h, StreamSynchronize, "cudaStreamSynchronize")) {
        if (cu.GetDeviceCount(&ndev) != 0 || ndev < 1) {
            snprintf(cu.why, sizeof cu.why, "cudaGetDeviceCount: no CUDA device");
            return -1;
        }
        if (cu.SetDevice(local_rank % ndev) != 0) {
            snprintf(cu.why, sizeof cu.why, "cudaSetDevice(%d) failed", local_rank % ndev);
            return -1;
        }
        cu.ok = 1;
        return 0;
    }
    h = open_first(drv, cu.why, sizeof cu.why);
    if (!h) { snprintf(cu.why, sizeof cu.why, "neither libcudart.so nor libcuda.so.1 found"); return -1; }
    cu.driver_api = 1;
    if (!(LOAD(h, cuInit, "cuInit") && LOAD(h, cuDeviceGetCount, "cuDeviceGetCount") &&
          LOAD(h, cuDeviceGet, "cuDeviceGet") &&
          LOAD(h, cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain") &&
          LOAD(h, cuCtxSetCurrent, "cuCtxSetCurrent") && LOAD(h, cuMemAlloc, "cuMemAlloc_v2") &&
          LOAD(h, cuMemFree, "cuMemFree_v2") && LOAD(h, cuMemcpyHtoD, "cuMemcpyHtoD_v2") &&
          LOAD(h, cuMemcpyDtoH, "cuMemcpyDtoH_v2") && LOAD(h, cuCtxSynchronize, "cuCtxSynchronize") &&
          LOAD(h, cuStreamCreate, "cuStreamCreate") &&
          LOAD(h, cuStreamSynchronize, "cuStreamSynchronize"))) {
        snprintf(cu.why, sizeof cu.why, "libcuda.so.1 lacks a needed symbol");
        return -1;
    }
    int dev; void *ctx;
    if (cu.cuInit(0) != 0 || cu.cuDeviceGetCount(&ndev) != 0 || ndev < 1) {
        snprintf(cu.why, sizeof cu.why, "cuInit/cuDeviceGetCount: no CUDA device");
        return -1;
    }
    if (cu.cuDeviceGet(&dev, local_rank % ndev) || cu.cuDevicePrimaryCtxRetain(&ctx, dev) ||
        cu.cuCtxSetCurrent(ctx)) {
        snprintf(cu.why, sizeof cu.why, "cannot make a context on device %d", local_rank % ndev);
        return -1;
    }
    cu.ok = 1;
    return 0;
}

/* cuMemCreate memory (-d vmm): the driver's VMM calls, a CUDA 13.0 CUmemAllocationProp. */
static struct {
    int loaded;
    cuda_rc (*CtxGetDevice)(int *);
    cuda_rc (*Granularity)(size_t *, const void *, int);
    cuda_rc (*Create)(unsigned long long *, size_t, const void *, unsigned long long);
    cuda_rc (*Release)(unsigned long long);
    cuda_rc (*Reserve)(unsigned long long *, size_t, size_t, unsigned long long, unsigned long long);
    cuda_rc (*AddrFree)(unsigned long long, size_t);
    cuda_rc (*Map)(unsigned long long, size_t, size_t, unsigned long long, unsigned long long);
    cuda_rc (*Unmap)(unsigned long long, size_t);
    cuda_rc (*SetAccess)(unsigned long long, size_t, const void *, size_t);
    struct { void *p; size_t n; } live[8];
} V;
struct vmm_prop { int type, handles, loc_type, loc_id; void *win32; unsigned char flags[8]; };
struct vmm_access { int loc_type, loc_id, flags; };
static void *vmm_alloc(size_t n)
{
    if (!V.loaded) {
        void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
        if (!h || !(*(void **)&V.CtxGetDevice = dlsym(h, "cuCtxGetDevice")) ||
            !(*(void **)&V.Granularity = dlsym(h, "cuMemGetAllocationGranularity")) ||
            !(*(void **)&V.Create = dlsym(h, "cuMemCreate")) || !(*(void **)&V.Release = dlsym(h, "cuMemRelease")) ||
            !(*(void **)&V.Reserve = dlsym(h, "cuMemAddressReserve")) ||
            !(*(void **)&V.AddrFree = dlsym(h, "cuMemAddressFree")) || !(*(void **)&V.Map = dlsym(h, "cuMemMap")) ||
            !(*(void **)&V.Unmap = dlsym(h, "cuMemUnmap")) || !(*(void **)&V.SetAccess = dlsym(h, "cuMemSetAccess")))
            return NULL;
        V.loaded = 1;
    }
    int dev = 0;
    if (!cu.driver_api) cu.Free(NULL); /* the runtime's primary context, current */
    if (V.CtxGetDevice(&dev)) return NULL;
    struct vmm_prop pr = { 1 /* pinned */, O.vmm == 1 /* POSIX fd, or none */, 1 /* device */, dev, NULL, {0} };
    size_t g = 0;
    if (V.Granularity(&g, &pr, 1 /* recommended */) || !g) return NULL;
    size_t len = (n + g - 1) / g * g;
    unsigned long long va = 0, hd = 0;
    if (V.Reserve(&va, len, 0, 0, 0)) return NULL;
    if (V.Create(&hd, len, &pr, 0)) { V.AddrFree(va, len); return NULL; }
    struct vmm_access a = { 1, dev, 3 /* read-write */ };
    if (V.Map(va, len, 0, hd, 0) || V.SetAccess(va, len, &a, 1)) { V.Release(hd); V.AddrFree(va, len); return NULL; }
    V.Release(hd); /* the mapping holds the memory */
    for (int i = 0; i < 8; i++)
        if (!V.live[i].p) { V.live[i].p = (void *)(uintptr_t)va; V.live[i].n = len; break; }
    return (void *)(uintptr_t)va;
}
static int vmm_free(void *p)
{
    for (int i = 0; i < 8; i++)
        if (V.live[i].p == p) {
            V.Unmap((unsigned long long)(uintptr_t)p, V.live[i].n);
            V.AddrFree((unsigned long long)(uintptr_t)p, V.live[i].n);
            V.live[i].p = NULL;
            return 1;
        }
    return 0;
}

static void *dev_alloc(size_t n)
{
    if (n == 0) n = 1;
    if (O.vmm) return vmm_alloc(n);
    if (cu.driver_api) {
        unsigned long long p = 0;
        return cu.cuMemAlloc(&p, n) ? NULL : (void *)(uintptr_t)p;
    }
    void *p = NULL;
    return cu.Malloc(&p, n) ? NULL : p;
}
static void dev_free(void *p)
{
    if (O.vmm && vmm_free(p)) return;
    if (cu.driver_api) cu.cuMemFree((unsigned long long)(uintptr_t)p); else cu.Free(p);
}
static void h2d(void *d, const void *h, size_t n)
{
    if (!n) return;
    if (cu.driver_api) cu.cuMemcpyHtoD((unsigned long long)(uintptr_t)d, h, n);
    else cu.Memcpy(d, h, n, 1 /* cudaMemcpyHostToDevice */);
}
static void d2h(void *h, const void *d, size_t n)
{
    if (!n) return;
    if (cu.driver_api) cu.cuMemcpyDtoH(h, (unsigned long long)(uintptr_t)d, n);
    else cu.Memcpy(h, d, n, 2 /* cudaMemcpyDeviceToHost */);
}
static int stream_create(stream_t *s)
{
    return cu.driver_api ? cu.cuStreamCreate(s, 0) : cu.StreamCreate(s);
}
static void stream_sync(stream_t s)
{
    if (cu.driver_api) cu.cuStreamSynchronize(s); else cu.StreamSynchronize(s);
}

/* --------------------------------------------------- NCCL (dlopen'd) */

typedef struct { char internal[128]; } nccl_id_t;   /* ncclUniqueId */
typedef void *nccl_comm_t;
typedef int nccl_rc;
enum { NCCL_INT8 = 0, NCCL_UINT8 = 1, NCCL_INT32 = 2, NCCL_UINT32 = 3, NCCL_INT64 = 4,
       NCCL_UINT64 = 5, NCCL_FLOAT32 = 7, NCCL_FLOAT64 = 8 };
enum { NCCL_SUM = 0, NCCL_PROD = 1, NCCL_MAX = 2, NCCL_MIN = 3 };

static struct {
    nccl_comm_t comm;
    stream_t stream;
    nccl_rc (*GetUniqueId)(nccl_id_t *);
    nccl_rc (*CommInitRank)(nccl_comm_t *, int, nccl_id_t, int);
    nccl_rc (*CommDestroy)(nccl_comm_t);
    const char *(*GetErrorString)(nccl_rc);
    nccl_rc (*AllReduce)(const void *, void *, size_t, int, int, nccl_comm_t, stream_t);
    nccl_rc (*Reduce)(const void *, void *, size_t, int, int, int, nccl_comm_t, stream_t);
    nccl_rc (*Broadcast)(const void *, void *, size_t, int, int, nccl_comm_t, stream_t);
    nccl_rc (*AllGather)(const void *, void *, size_t, int, nccl_comm_t, stream_t);
    nccl_rc (*ReduceScatter)(const void *, void *, size_t, int, int, nccl_comm_t, stream_t);
    nccl_rc (*Send)(const void *, size_t, int, int, nccl_comm_t, stream_t);
    nccl_rc (*Recv)(void *, size_t, int, int, nccl_comm_t, stream_t);
    nccl_rc (*GroupStart)(void);
    nccl_rc (*GroupEnd)(void);
} nc;

static const int nccl_types[BU_NTYPES] = { NCCL_INT8, NCCL_UINT8, NCCL_INT32, NCCL_UINT32,
                                           NCCL_INT64, NCCL_UINT64, NCCL_FLOAT32, NCCL_FLOAT64 };
static const int nccl_ops[BU_NREDOPS] = { NCCL_SUM, NCCL_PROD, NCCL_MAX, NCCL_MIN };

#define NLOAD(h, field, sym) (*(void **)&nc.field = dlsym(h, sym)) != NULL

/* Load libnccl.so.2.  Collective over MPI_COMM_WORLD: every rank learns whether
 * all ranks could.  0 on success, else why[] says what is missing. */
static int nccl_load(char *why, size_t whylen)
{
    static const char *const names[] = { "libnccl.so.2", "libnccl.so", NULL };
    int ok = 1;
    void *h = open_first(names, why, whylen);
    if (!h) ok = 0;
    else if (!(NLOAD(h, GetUniqueId, "ncclGetUniqueId") && NLOAD(h, CommInitRank, "ncclCommInitRank") &&
               NLOAD(h, CommDestroy, "ncclCommDestroy") && NLOAD(h, GetErrorString, "ncclGetErrorString") &&
               NLOAD(h, AllReduce, "ncclAllReduce") && NLOAD(h, Reduce, "ncclReduce") &&
               NLOAD(h, Broadcast, "ncclBroadcast") && NLOAD(h, AllGather, "ncclAllGather") &&
               NLOAD(h, ReduceScatter, "ncclReduceScatter") && NLOAD(h, Send, "ncclSend") &&
               NLOAD(h, Recv, "ncclRecv") && NLOAD(h, GroupStart, "ncclGroupStart") &&
               NLOAD(h, GroupEnd, "ncclGroupEnd"))) {
        snprintf(why, whylen, "libnccl.so.2 lacks a needed symbol (NCCL >= 2.7 required)");
        ok = 0;
    }
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (ok && !all) snprintf(why, whylen, "libnccl.so.2 missing on another rank");
    return all ? 0 : -1;
}

static int nccl_init(char *why, size_t whylen)
{
    nccl_id_t id;
    memset(&id, 0, sizeof id);
    nccl_rc rc = 0;
    if (rank == 0) rc = nc.GetUniqueId(&id);
    MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (rc) { snprintf(why, whylen, "ncclGetUniqueId: %s", nc.GetErrorString(rc)); return -1; }
    MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    if (stream_create(&nc.stream)) { snprintf(why, whylen, "cudaStreamCreate failed"); return -1; }
    rc = nc.CommInitRank(&nc.comm, nranks, id, rank);
    int bad = rc != 0, anybad = 0;
    MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (anybad) {
        snprintf(why, whylen, "ncclCommInitRank: %s", rc ? nc.GetErrorString(rc) : "failed on another rank");
        return -1;
    }
    return 0;
}

#define NCHECK(call) do { nccl_rc r_ = (call); if (r_) { \
    fprintf(stderr, "rank %d: %s failed: %s\n", rank, #call, nc.GetErrorString(r_)); \
    MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)

/* ------------------------------------------------------------ buffers */

static struct {
    void *sbuf, *rbuf;     /* operation buffers (device memory when -d cuda) */
    void *hs, *hr;         /* host staging for fill/check when -d cuda */
    size_t cap;
} B;

static void *xalloc(size_t n)
{
    void *p = O.cuda ? dev_alloc(n) : malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "rank %d: cannot allocate %zu bytes of %s memory\n", rank, n, O.vmm ? (O.vmm == 1 ? "vmm" : "vmm-nohandle") : O.cuda ? "cuda" : "host");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return p;
}

static void buffers_alloc(size_t bytes)
{
    B.cap = bytes;
    B.sbuf = xalloc(bytes);
    B.rbuf = xalloc(bytes);
    B.hs = malloc(bytes ? bytes : 1);
    B.hr = malloc(bytes ? bytes : 1);
    if (!B.hs || !B.hr) MPI_Abort(MPI_COMM_WORLD, 1);
}

static void buffers_free(void)
{
    if (O.cuda) { dev_free(B.sbuf); dev_free(B.rbuf); }
    else { free(B.sbuf); free(B.rbuf); }
    free(B.hs); free(B.hr);
}

/* Host view of a buffer for filling: on host memory the buffer itself. */
static void *fill_begin(void *buf, void *staging) { return O.cuda ? staging : buf; }
/* cudaMemcpy from pageable memory may return before its DMA reached the device: synchronize, as
 * a CUDA-aware MPI requires of its callers (the buffer is complete before the call). Without it a
 * late poison DMA can overwrite data a peer already wrote into the receive buffer. */
static void fill_end(void *buf, void *staging, size_t n)
{
    if (!O.cuda) return;
    h2d(buf, staging, n);
    if (cu.driver_api) cu.cuCtxSynchronize(); else cu.DeviceSynchronize();
}
static const void *check_view(void *buf, void *staging, size_t n)
{
    if (!O.cuda) return buf;
    d2h(staging, buf, n);
    return staging;
}

/* --------------------------------------------------------- operations */

typedef struct {
    bu_opkind k;
    size_t bytes, count, blk;   /* blk: elements per rank block (== count for unblocked ops) */
    MPI_Datatype dt;
    MPI_Op mop;
} opctx;

static MPI_Datatype mpi_type(bu_type t)
{
    switch (t) {
    case BU_INT8: return MPI_INT8_T;
    case BU_UINT8: return MPI_UINT8_T;
    case BU_INT32: return MPI_INT32_T;
    case BU_UINT32: return MPI_UINT32_T;
    case BU_INT64: return MPI_INT64_T;
    case BU_UINT64: return MPI_UINT64_T;
    case BU_FLOAT: return MPI_FLOAT;
    default: return MPI_DOUBLE;
    }
}

static MPI_Op mpi_op(bu_redop r)
{
    switch (r) {
    case BU_SUM: return MPI_SUM;
    case BU_PROD: return MPI_PROD;
    case BU_MAX: return MPI_MAX;
    default: return MPI_MIN;
    }
}

static int *a2av_counts, *a2av_displs;   /* alltoallv: equal blocks through the v interface */

/* Point-to-point ops use ranks 0 and 1; other ranks idle. */
static int p2p_peer(void) { return rank == 0 ? 1 : rank == 1 ? 0 : -1; }

/* Issue one operation.  MPI: a complete (blocking) call.  NCCL: enqueued on
 * the stream; completion is stream_sync(). */
static void issue(const opctx *c)
{
    size_t ts = bu_type_sizes[O.type];
    char *s = B.sbuf, *r = B.rbuf;
    int peer = p2p_peer();
    int nt = nccl_types[O.type], nop = nccl_ops[O.redop];
    int ic = (int)c->count, ib = (int)c->blk;
    if (O.nccl) {
        nccl_comm_t cm = nc.comm;
        stream_t st = nc.stream;
        switch (c->k) {
        case BU_OP_PINGPONG:
            if (peer < 0) break;
            if (rank == 0) { NCHECK(nc.Send(s, c->count, nt, 1, cm, st)); NCHECK(nc.Recv(r, c->count, nt, 1, cm, st)); }
            else { NCHECK(nc.Recv(r, c->count, nt, 0, cm, st)); NCHECK(nc.Send(s, c->count, nt, 0, cm, st)); }
            break;
        case BU_OP_BW:
        case BU_OP_BIBW:
            if (peer < 0) break;
            NCHECK(nc.GroupStart());
            for (int w = 0; w < O.window; w++) {
                if (rank == 0 || c->k == BU_OP_BIBW) NCHECK(nc.Send(s, c->count, nt, peer, cm, st));
                if (rank == 1 || c->k == BU_OP_BIBW) NCHECK(nc.Recv(r, c->count, nt, peer, cm, st));
            }
            NCHECK(nc.GroupEnd());
            break;
        case BU_OP_SENDRECV:
            NCHECK(nc.GroupStart());
            NCHECK(nc.Send(s, c->count, nt, (rank + 1) % nranks, cm, st));
            NCHECK(nc.Recv(r, c->count, nt, (rank - 1 + nranks) % nranks, cm, st));
            NCHECK(nc.GroupEnd());
            break;
        case BU_OP_ALLREDUCE: NCHECK(nc.AllReduce(s, r, c->count, nt, nop, cm, st)); break;
        case BU_OP_REDUCE: NCHECK(nc.Reduce(s, r, c->count, nt, nop, O.root, cm, st)); break;
        case BU_OP_BCAST: NCHECK(nc.Broadcast(s, s, c->count, nt, O.root, cm, st)); break;
        case BU_OP_ALLGATHER: NCHECK(nc.AllGather(s, r, c->blk, nt, cm, st)); break;
        case BU_OP_REDUCE_SCATTER: NCHECK(nc.ReduceScatter(s, r, c->blk, nt, nop, cm, st)); break;
        case BU_OP_ALLTOALL:
        case BU_OP_ALLTOALLV:
            NCHECK(nc.GroupStart());
            for (int p = 0; p < nranks; p++) {
                NCHECK(nc.Send(s + (size_t)p * c->blk * ts, c->blk, nt, p, cm, st));
                NCHECK(nc.Recv(r + (size_t)p * c->blk * ts, c->blk, nt, p, cm, st));
            }
            NCHECK(nc.GroupEnd());
            break;
        default: break;
        }
        return;
    }
    MPI_Comm w = bench_comm;
    switch (c->k) {
    case BU_OP_PINGPONG:
        if (rank == 0) { MPI_Send(s, ic, c->dt, 1, 1, w); MPI_Recv(r, ic, c->dt, 1, 1, w, MPI_STATUS_IGNORE); }
        else if (rank == 1) { MPI_Recv(r, ic, c->dt, 0, 1, w, MPI_STATUS_IGNORE); MPI_Send(s, ic, c->dt, 0, 1, w); }
        break;
    case BU_OP_BW:
    case BU_OP_BIBW: {
        if (peer < 0) break;
        static MPI_Request *rq;
        static int nrq;
        if (nrq < 2 * O.window) { free(rq); nrq = 2 * O.window; rq = malloc(sizeof *rq * (size_t)nrq); }
        int n = 0;
        for (int i = 0; i < O.window; i++) {
            if (rank == 1 || c->k == BU_OP_BIBW) MPI_Irecv(r, ic, c->dt, peer, 2, w, &rq[n++]);
        }
        for (int i = 0; i < O.window; i++) {
            if (rank == 0 || c->k == BU_OP_BIBW) MPI_Isend(s, ic, c->dt, peer, 2, w, &rq[n++]);
        }
        MPI_Waitall(n, rq, MPI_STATUSES_IGNORE);
        if (c->k == BU_OP_BW) { /* the receiver acknowledges the window */
            char ack = 0;
            if (rank == 1) MPI_Send(&ack, 1, MPI_CHAR, 0, 3, w);
            else MPI_Recv(&ack, 1, MPI_CHAR, 1, 3, w, MPI_STATUS_IGNORE);
        }
        break;
    }
    case BU_OP_SENDRECV:
        MPI_Sendrecv(s, ic, c->dt, (rank + 1) % nranks, 4, r, ic, c->dt, (rank - 1 + nranks) % nranks, 4,
                     w, MPI_STATUS_IGNORE);
        break;
    case BU_OP_ALLREDUCE: MPI_Allreduce(s, r, ic, c->dt, c->mop, w); break;
    case BU_OP_REDUCE: MPI_Reduce(s, r, ic, c->dt, c->mop, O.root, w); break;
    case BU_OP_BCAST: MPI_Bcast(s, ic, c->dt, O.root, w); break;
    case BU_OP_ALLGATHER: MPI_Allgather(s, ib, c->dt, r, ib, c->dt, w); break;
    case BU_OP_REDUCE_SCATTER: MPI_Reduce_scatter_block(s, r, ib, c->dt, c->mop, w); break;
    case BU_OP_GATHER: MPI_Gather(s, ib, c->dt, r, ib, c->dt, O.root, w); break;
    case BU_OP_SCATTER: MPI_Scatter(s, ib, c->dt, r, ib, c->dt, O.root, w); break;
    case BU_OP_ALLGATHERV:
        for (int p = 0; p < nranks; p++) { a2av_counts[p] = ib; a2av_displs[p] = p * ib; }
        MPI_Allgatherv(s, ib, c->dt, r, a2av_counts, a2av_displs, c->dt, w);
        break;
    case BU_OP_GATHERV:
        for (int p = 0; p < nranks; p++) { a2av_counts[p] = ib; a2av_displs[p] = p * ib; }
        MPI_Gatherv(s, ib, c->dt, r, a2av_counts, a2av_displs, c->dt, O.root, w);
        break;
    case BU_OP_SCATTERV:
        for (int p = 0; p < nranks; p++) { a2av_counts[p] = ib; a2av_displs[p] = p * ib; }
        MPI_Scatterv(s, a2av_counts, a2av_displs, c->dt, r, ib, c->dt, O.root, w);
        break;
    case BU_OP_ALLTOALL: MPI_Alltoall(s, ib, c->dt, r, ib, c->dt, w); break;
    case BU_OP_ALLTOALLV:
        for (int p = 0; p < nranks; p++) { a2av_counts[p] = ib; a2av_displs[p] = p * ib; }
        MPI_Alltoallv(s, a2av_counts, a2av_displs, c->dt, r, a2av_counts, a2av_displs, c->dt, w);
        break;
    default: break;
    }
}

/* Completion of one op (-z 1) and of a back-to-back batch (-z 0). */
static void complete_one(void) { if (O.nccl) stream_sync(nc.stream); }
static void complete_batch(void)
{
    if (O.nccl) stream_sync(nc.stream);
    else MPI_Barrier(MPI_COMM_WORLD);
}

/* Fill inputs for one validation run; poison the outputs. */
static void fill_inputs(const opctx *c)
{
    size_t ts = bu_type_sizes[O.type];
    size_t sb = 0;  /* bytes of send buffer to fill */
    void *hs = fill_begin(B.sbuf, B.hs);
    bu_type t = (bu_type)O.type;
    switch (c->k) {
    case BU_OP_ALLREDUCE: case BU_OP_REDUCE: case BU_OP_REDUCE_SCATTER:
        sb = c->count * ts;
        bu_fill_input(t, (bu_redop)O.redop, rank, hs, c->count, 0);
        break;
    case BU_OP_ALLGATHER: case BU_OP_ALLGATHERV: case BU_OP_GATHER: case BU_OP_GATHERV:
        sb = c->blk * ts;
        bu_fill_pattern(t, rank, hs, c->blk, 0);
        break;
    case BU_OP_SCATTER: case BU_OP_SCATTERV: /* element i of the root's input is pattern(root, i) */
        sb = c->count * ts;
        if (rank == O.root) bu_fill_pattern(t, rank, hs, c->count, 0);
        else memset(hs, 0xA5, sb);
        break;
    case BU_OP_BCAST:
        sb = c->count * ts;
        if (rank == O.root) bu_fill_pattern(t, rank, hs, c->count, 0);
        else memset(hs, 0xA5, sb);
        break;
    default: /* p2p and alltoall: element i of rank r is pattern(r, i) */
        sb = c->count * ts;
        bu_fill_pattern(t, rank, hs, c->count, 0);
        break;
    }
    fill_end(B.sbuf, B.hs, sb);
    void *hr = fill_begin(B.rbuf, B.hr);
    memset(hr, 0xA5, c->count * ts);
    fill_end(B.rbuf, B.hr, c->count * ts);
}

/* --inject-error: overwrite element 0 of the buffer that the checking rank
 * inspects with a value no validation pattern produces. */
static void inject_error(const opctx *c)
{
    int p2p = c->k == BU_OP_PINGPONG || c->k == BU_OP_BW || c->k == BU_OP_BIBW;
    int rooted = c->k == BU_OP_REDUCE || c->k == BU_OP_BCAST || c->k == BU_OP_GATHER ||
                 c->k == BU_OP_GATHERV;
    int who = p2p ? 1 : rooted ? O.root : 0;
    if (rank != who || c->count == 0) return;
    void *buf = c->k == BU_OP_BCAST ? B.sbuf : B.rbuf;
    unsigned char v[8];
    bu_store((bu_type)O.type, v, 0, -1.0);
    if (O.cuda) h2d(buf, v, bu_type_sizes[O.type]);
    else memcpy(buf, v, bu_type_sizes[O.type]);
}

/* Count wrong elements on this rank after one run of the op. */
static size_t check_outputs(const opctx *c)
{
    size_t ts = bu_type_sizes[O.type];
    bu_type t = (bu_type)O.type;
    bu_redop op = (bu_redop)O.redop;
    const void *out;
    size_t wrong = 0;
    switch (c->k) {
    case BU_OP_PINGPONG: case BU_OP_BW: case BU_OP_BIBW:
        if (p2p_peer() < 0) return 0;
        if (c->k == BU_OP_BW && rank == 0) return 0;   /* rank 0 only sends */
        out = check_view(B.rbuf, B.hr, c->count * ts);
        return bu_check_pattern(t, p2p_peer(), out, c->count, 0);
    case BU_OP_SENDRECV:
        out = check_view(B.rbuf, B.hr, c->count * ts);
        return bu_check_pattern(t, (rank - 1 + nranks) % nranks, out, c->count, 0);
    case BU_OP_ALLREDUCE:
        out = check_view(B.rbuf, B.hr, c->count * ts);
        return bu_check_reduce(t, op, nranks, out, c->count, 0);
    case BU_OP_REDUCE:
        if (rank != O.root) return 0;
        out = check_view(B.rbuf, B.hr, c->count * ts);
        return bu_check_reduce(t, op, nranks, out, c->count, 0);
    case BU_OP_REDUCE_SCATTER:
        out = check_view(B.rbuf, B.hr, c->blk * ts);
        return bu_check_reduce(t, op, nranks, out, c->blk, (size_t)rank * c->blk);
    case BU_OP_BCAST:
        out = check_view(B.sbuf, B.hs, c->count * ts);
        return bu_check_pattern(t, O.root, out, c->count, 0);
    case BU_OP_SCATTER: case BU_OP_SCATTERV:
        out = check_view(B.rbuf, B.hr, c->blk * ts);
        return bu_check_pattern(t, O.root, out, c->blk, (size_t)rank * c->blk);
    case BU_OP_GATHER: case BU_OP_GATHERV: case BU_OP_ALLGATHER: case BU_OP_ALLGATHERV:
        if ((c->k == BU_OP_GATHER || c->k == BU_OP_GATHERV) && rank != O.root) return 0;
        out = check_view(B.rbuf, B.hr, c->count * ts);
        for (int p = 0; p < nranks; p++)
            wrong += bu_check_pattern(t, p, (const char *)out + (size_t)p * c->blk * ts, c->blk, 0);
        return wrong;
    case BU_OP_ALLTOALL: case BU_OP_ALLTOALLV:
        /* block p of the output is block `rank` of rank p's input */
        out = check_view(B.rbuf, B.hr, c->count * ts);
        for (int p = 0; p < nranks; p++)
            wrong += bu_check_pattern(t, p, (const char *)out + (size_t)p * c->blk * ts, c->blk,
                                      (size_t)rank * c->blk);
        return wrong;
    default: return 0;
    }
}

/* ------------------------------------------------------------- output */

static FILE *csv_f, *json_f;
static int json_first = 1;

typedef struct {
    size_t bytes, count;
    double mean_us, med_us, min_us, algbw, busbw, algbw_med, busbw_med;
    long long wrong;
} result;

static const char *mode_name(void) { return O.blocking ? "blocking" : "back-to-back"; }

static void print_header(void)
{
    char ver[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(ver, &len);
    char *nl = strchr(ver, '\n');
    if (nl) *nl = '\0';
    printf("# gpumpi-bench op=%s backend=%s label=%s nranks=%d mem=%s type=%s redop=%s\n",
           bu_op_names[O.op], O.nccl ? "nccl" : "mpi", O.label, nranks, O.vmm ? (O.vmm == 1 ? "vmm" : "vmm-nohandle") : O.cuda ? "cuda" : "host",
           bu_type_names[O.type], bu_redop_names[O.redop]);
    printf("# mode=%s (-z %d: %s)  warmup=%d iters=%d check=%d\n", mode_name(), O.blocking,
           O.blocking ? "each op completes before the next is issued"
                      : "iterations issued back-to-back, one completion per batch",
           O.warmup, O.iters, O.check);
    if (O.op == BU_OP_BW || O.op == BU_OP_BIBW) printf("# window=%d messages per iteration\n", O.window);
    printf("# MPI library: %s\n", ver);
    if (O.cuda) printf("# cuda: %s\n", cu.driver_api ? "driver API (libcuda.so.1)" : "runtime API (libcudart.so)");
    printf("# time = mean per op (us), med/min = median/minimum over iterations; each is the max over ranks.\n");
    printf("# algbw/busbw from the mean time%s.\n",
           O.op == BU_OP_PINGPONG ? "; pingpong time is one-way latency (round trip / 2)" : "");
    printf("#%11s %12s %7s %6s %5s %11s %10s %10s %8s %11s %11s\n", "size", "count", "type", "redop",
           "root", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong", "med(us)", "min(us)");
    if (csv_f) {
        long pos = ftell(csv_f);
        if (pos <= 0)
            fprintf(csv_f, "backend,op,nranks,mem,mode,size,count,type,redop,root,time_us,algbw_gbps,"
                           "busbw_gbps,wrong,med_us,min_us,algbw_med_gbps,busbw_med_gbps\n");
    }
    if (json_f) fprintf(json_f, "{\"backend\": \"%s\", \"op\": \"%s\", \"nranks\": %d, \"mem\": \"%s\", "
                                "\"mode\": \"%s\", \"results\": [\n",
                        O.label, bu_op_names[O.op], nranks, O.vmm ? (O.vmm == 1 ? "vmm" : "vmm-nohandle") : O.cuda ? "cuda" : "host", mode_name());
}

static void print_row(const result *r)
{
    int reduces = bu_op_reduces((bu_opkind)O.op);
    int rooted = O.op == BU_OP_BCAST || O.op == BU_OP_REDUCE || O.op == BU_OP_GATHER ||
                 O.op == BU_OP_SCATTER || O.op == BU_OP_GATHERV || O.op == BU_OP_SCATTERV;
    char root[16];
    snprintf(root, sizeof root, "%d", O.root);
    char wrong[24];
    if (r->wrong < 0) snprintf(wrong, sizeof wrong, "n/a");
    else snprintf(wrong, sizeof wrong, "%lld", r->wrong);
    printf("%12zu %12zu %7s %6s %5s %11.2f %10.3f %10.3f %8s %11.2f %11.2f\n", r->bytes, r->count,
           bu_type_names[O.type], reduces ? bu_redop_names[O.redop] : "none", rooted ? root : "-1",
           r->mean_us, r->algbw, r->busbw, wrong, r->med_us, r->min_us);
    fflush(stdout);
    if (csv_f)
        fprintf(csv_f, "%s,%s,%d,%s,%s,%zu,%zu,%s,%s,%d,%.3f,%.6f,%.6f,%lld,%.3f,%.3f,%.6f,%.6f\n", O.label,
                bu_op_names[O.op], nranks, O.vmm ? (O.vmm == 1 ? "vmm" : "vmm-nohandle") : O.cuda ? "cuda" : "host", mode_name(), r->bytes, r->count,
                bu_type_names[O.type], reduces ? bu_redop_names[O.redop] : "none", rooted ? O.root : -1,
                r->mean_us, r->algbw, r->busbw, r->wrong, r->med_us, r->min_us, r->algbw_med, r->busbw_med);
    if (json_f) {
        fprintf(json_f, "%s  {\"size\": %zu, \"count\": %zu, \"type\": \"%s\", \"redop\": \"%s\", \"root\": %d, "
                        "\"time_us\": %.3f, \"algbw_gbps\": %.6f, \"busbw_gbps\": %.6f, \"wrong\": %lld, "
                        "\"med_us\": %.3f, \"min_us\": %.3f, \"busbw_med_gbps\": %.6f}",
                json_first ? "" : ",\n", r->bytes, r->count, bu_type_names[O.type],
                reduces ? bu_redop_names[O.redop] : "none", rooted ? O.root : -1, r->mean_us, r->algbw,
                r->busbw, r->wrong, r->med_us, r->min_us, r->busbw_med);
        json_first = 0;
    }
}

/* ------------------------------------------------------------ driving */

static double *times;  /* per-iteration (or per-batch) seconds */

static void run_size(size_t bytes)
{
    opctx c;
    memset(&c, 0, sizeof c);
    c.k = (bu_opkind)O.op;
    c.bytes = bytes;
    c.count = bu_counts(c.k, bytes, (bu_type)O.type, nranks, &c.blk);
    c.dt = mpi_type((bu_type)O.type);
    c.mop = mpi_op((bu_redop)O.redop);
    if (c.count == 0 && bytes > 0) {
        if (rank == 0) printf("# size %zu skipped: fewer than one %s per rank block\n", bytes, bu_type_names[O.type]);
        return;
    }
    if (c.count > (size_t)INT_MAX && !O.nccl) {
        if (rank == 0) printf("# size %zu skipped: count exceeds INT_MAX\n", bytes);
        return;
    }
    size_t ts = bu_type_sizes[O.type];
    c.bytes = c.count * ts;  /* report the bytes actually moved */

    result res;
    memset(&res, 0, sizeof res);
    res.wrong = -1;  /* not checked (-c 0) */
    res.bytes = c.bytes;
    res.count = c.count;

    /* validation run: fill, run once, check (also serves as warm-up) */
    if (O.check) {
        fill_inputs(&c);
        MPI_Barrier(MPI_COMM_WORLD);
        issue(&c);
        complete_one();
        if (O.inject) inject_error(&c);
        long long w = (long long)check_outputs(&c);
        MPI_Allreduce(&w, &res.wrong, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    }
    for (int i = 0; i < O.warmup; i++) { issue(&c); complete_one(); }
    MPI_Barrier(MPI_COMM_WORLD);

    int nt = 0;
    if (O.blocking) {
        for (int i = 0; i < O.iters; i++) {
            double t0 = MPI_Wtime();
            issue(&c);
            complete_one();
            times[nt++] = MPI_Wtime() - t0;
        }
    } else {
        /* back-to-back: batches of ops with one completion each (up to 10
         * batches so that a median/min exists); per-op time = batch / ops */
        int nb = O.iters < 10 ? O.iters : 10;
        for (int b = 0; b < nb; b++) {
            int ops = O.iters / nb + (b < O.iters % nb);
            double t0 = MPI_Wtime();
            for (int i = 0; i < ops; i++) issue(&c);
            complete_batch();
            times[nt++] = (MPI_Wtime() - t0) / ops;
            MPI_Barrier(MPI_COMM_WORLD);
        }
    }
    double per_op = 1.0;  /* divisor turning an iteration time into the reported time */
    double moved = (double)c.bytes;
    if (c.k == BU_OP_PINGPONG) per_op = 2.0;                      /* one-way latency */
    if (c.k == BU_OP_BW) per_op = O.window;                       /* time per message */
    if (c.k == BU_OP_BIBW) { per_op = O.window; moved = 2.0 * c.bytes; }
    double loc[3];
    loc[0] = bu_mean(times, nt) / per_op;
    loc[2] = bu_min(times, nt) / per_op;
    loc[1] = bu_median(times, nt) / per_op;
    double glob[3];
    MPI_Reduce(loc, glob, 3, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank != 0) return;
    double f = bu_busbw_factor(c.k, nranks);
    res.mean_us = glob[0] * 1e6;
    res.med_us = glob[1] * 1e6;
    res.min_us = glob[2] * 1e6;
    res.algbw = bu_gbps(moved, glob[0]);
    res.busbw = res.algbw * f;
    res.algbw_med = bu_gbps(moved, glob[1]);
    res.busbw_med = res.algbw_med * f;
    print_row(&res);
}

/* ------------------------------------------------------ first-call mode */

static double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Seconds since this process was exec'd (from /proc/self/stat starttime,
 * clock-tick resolution), or -1 when /proc is unavailable. */
static double since_exec(void)
{
    FILE *f = fopen("/proc/self/stat", "r");
    if (!f) return -1;
    char buf[1024];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    if (!p) return -1;
    unsigned long long start = 0;
    /* fields after ')' start at field 3; starttime is field 22 */
    int field = 2;
    for (char *tok = strtok(p + 1, " "); tok; tok = strtok(NULL, " ")) {
        if (++field == 22) { start = strtoull(tok, NULL, 10); break; }
    }
    struct timespec ts;
    if (clock_gettime(CLOCK_BOOTTIME, &ts)) return -1;
    double now = ts.tv_sec + ts.tv_nsec * 1e-9;
    return now - (double)start / (double)sysconf(_SC_CLK_TCK);
}

static void firstcall(double t_main, double t_init_done, double exec_to_init)
{
    double t_init = t_init_done - t_main;
    double v[6] = { t_init, exec_to_init, 0, 0, 0, 0 };
    size_t n = 8;
    opctx c;
    memset(&c, 0, sizeof c);
    c.count = n / bu_type_sizes[O.type];
    c.blk = c.count;
    c.dt = mpi_type((bu_type)O.type);
    c.mop = mpi_op((bu_redop)O.redop);
    if (!c.count) c.count = c.blk = 1;
    double t0 = mono_now();
    if (O.nccl) {
        char why[256] = "";
        if (nccl_init(why, sizeof why)) {
            if (rank == 0) printf("# nccl: not available (%s)\n", why);
            return;
        }
    }
    v[2] = mono_now() - t0;  /* NCCL communicator init (0 for MPI) */
    MPI_Barrier(MPI_COMM_WORLD);
    c.k = BU_OP_PINGPONG;
    t0 = mono_now();
    if (rank < 2) { issue(&c); complete_one(); }  /* first send+recv round trip */
    v[3] = mono_now() - t0;
    MPI_Barrier(MPI_COMM_WORLD);
    c.k = BU_OP_ALLREDUCE;
    t0 = mono_now();
    issue(&c);
    complete_one();
    v[4] = mono_now() - t0;
    t0 = mono_now();
    issue(&c);
    complete_one();
    v[5] = mono_now() - t0;
    double g[6];
    MPI_Reduce(v, g, 6, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        static const char *const names[6] = { "init_main_to_mpi_init_done", "init_exec_to_mpi_init_done",
                                              "nccl_comm_init", "first_sendrecv_roundtrip",
                                              "first_allreduce_8B", "second_allreduce_8B" };
        printf("# firstcall nranks=%d mem=%s backend=%s (max over ranks; exec time has clock-tick resolution)\n",
               nranks, O.vmm ? (O.vmm == 1 ? "vmm" : "vmm-nohandle") : O.cuda ? "cuda" : "host", O.label);
        printf("#%-33s %12s\n", "event", "time(us)");
        for (int i = 0; i < 6; i++) {
            if (i == 2 && !O.nccl) continue;
            printf("%-34s %12.1f\n", names[i], g[i] * 1e6);
            if (csv_f) {
                if (ftell(csv_f) <= 0) fprintf(csv_f, "backend,op,nranks,mem,event,time_us\n");
                fprintf(csv_f, "%s,firstcall,%d,%s,%s,%.1f\n", O.label, nranks, O.vmm ? (O.vmm == 1 ? "vmm" : "vmm-nohandle") : O.cuda ? "cuda" : "host",
                        names[i], g[i] * 1e6);
            }
            if (json_f)
                fprintf(json_f, "%s  {\"event\": \"%s\", \"time_us\": %.1f}", i ? ",\n" : "", names[i], g[i] * 1e6);
        }
    }
}

static int local_rank(void)
{
    MPI_Comm node;
    int lr = 0;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &lr);
    MPI_Comm_free(&node);
    return lr;
}

int main(int argc, char **argv)
{
    double t_main = mono_now();
    /* NVLink multicast (NVLS) must never be used by the NCCL backend. */
    setenv("NCCL_NVLS_ENABLE", "0", 1);
    if (parse_args(argc, argv)) {
        if (launcher_rank() == 0) usage(stderr);
        return 2;
    }

    MPI_Init(&argc, &argv);
    double t_init_done = mono_now();
    double exec_to_init = since_exec();
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    bench_comm = MPI_COMM_WORLD;
    if (O.dup) MPI_Comm_dup(MPI_COMM_WORLD, &bench_comm);

    int needs_pair = O.op == BU_OP_PINGPONG || O.op == BU_OP_BW || O.op == BU_OP_BIBW;
    if ((needs_pair || O.op == BU_OP_FIRSTCALL) && nranks < 2) {
        if (rank == 0) fprintf(stderr, "gpumpi-bench: %s needs at least 2 ranks\n", bu_op_names[O.op]);
        MPI_Finalize();
        return 2;
    }
    if (O.nccl && (O.op == BU_OP_GATHER || O.op == BU_OP_SCATTER || O.op == BU_OP_ALLGATHERV ||
                   O.op == BU_OP_GATHERV || O.op == BU_OP_SCATTERV)) {
        if (rank == 0) fprintf(stderr, "gpumpi-bench: %s has no NCCL form here\n", bu_op_names[O.op]);
        MPI_Finalize();
        return 2;
    }
    if ((O.op == BU_OP_BCAST || O.op == BU_OP_REDUCE || O.op == BU_OP_GATHER ||
         O.op == BU_OP_SCATTER || O.op == BU_OP_GATHERV || O.op == BU_OP_SCATTERV) &&
        (O.root < 0 || O.root >= nranks)) {
        if (rank == 0) fprintf(stderr, "gpumpi-bench: root %d out of range\n", O.root);
        MPI_Finalize();
        return 2;
    }

    /* CUDA and NCCL availability: skip (exit 0) with a reason when absent. */
    if (O.cuda) {
        int ok = cuda_load(local_rank()) == 0, all = 0;
        MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        if (!all) {
            if (rank == 0) {
                if (O.nccl) printf("# nccl: not available (%s)\n", ok ? "CUDA unavailable on another rank" : cu.why);
                else printf("# skip: -d cuda requested but CUDA is not available (%s)\n",
                            ok ? "CUDA unavailable on another rank" : cu.why);
            }
            MPI_Finalize();
            return 0;
        }
    }
    if (O.nccl) {
        char why[256] = "";
        if (nccl_load(why, sizeof why)) {
            if (rank == 0) printf("# nccl: not available (%s)\n", why);
            MPI_Finalize();
            return 0;
        }
    }

    if (rank == 0) {
        if (O.csv && !(csv_f = fopen(O.csv, "a"))) fprintf(stderr, "cannot open %s: %s\n", O.csv, strerror(errno));
        if (csv_f) fseek(csv_f, 0, SEEK_END);
        if (O.json && !(json_f = fopen(O.json, "w"))) fprintf(stderr, "cannot open %s: %s\n", O.json, strerror(errno));
    }

    if (O.op == BU_OP_FIRSTCALL) {
        buffers_alloc(64);
        if (json_f) fprintf(json_f, "{\"backend\": \"%s\", \"op\": \"firstcall\", \"nranks\": %d, \"events\": [\n",
                            O.label, nranks);
        firstcall(t_main, t_init_done, exec_to_init);
    } else {
        if (O.nccl) {
            char why[256] = "";
            if (nccl_init(why, sizeof why)) {
                if (rank == 0) printf("# nccl: not available (%s)\n", why);
                MPI_Finalize();
                return 0;
            }
        }
        size_t sizes[MAX_SIZES];
        int ns = bu_sweep(O.minb, O.maxb, O.factor, sizes, MAX_SIZES);
        if (ns < 0) {
            if (rank == 0) fprintf(stderr, "gpumpi-bench: bad sweep -b %zu -e %zu -f %zu\n", O.minb, O.maxb, O.factor);
            MPI_Finalize();
            return 2;
        }
        size_t maxbytes = 0;
        for (int i = 0; i < ns; i++) if (sizes[i] > maxbytes) maxbytes = sizes[i];
        buffers_alloc(maxbytes);
        times = malloc(sizeof *times * (size_t)(O.iters + 1));
        a2av_counts = malloc(sizeof(int) * (size_t)nranks);
        a2av_displs = malloc(sizeof(int) * (size_t)nranks);
        if (rank == 0) print_header();
        for (int i = 0; i < ns; i++) run_size(sizes[i]);
        free(times); free(a2av_counts); free(a2av_displs);
    }
    if (json_f) { fprintf(json_f, "\n]}\n"); fclose(json_f); }
    if (csv_f) fclose(csv_f);
    if (O.nccl && nc.comm) nc.CommDestroy(nc.comm);
    buffers_free();
    MPI_Finalize();
    return 0;
}
