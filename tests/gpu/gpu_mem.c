/* Every kind of CUDA memory as MPI buffers, mixed between ranks:
 *   host (malloc), cudaMalloc, cuMemAlloc (driver), cuMemCreate (VMM: cuMemCreate +
 *   cuMemAddressReserve + cuMemMap + cuMemSetAccess, with the POSIX file descriptor handle type
 *   where the driver allows it: gpumpi maps such memory in peers through descriptors),
 *   cuMemCreate-x2 (a buffer straddling two physical allocations mapped back to back, as
 *   PyTorch's expandable segments do: staged), cuMemCreate-nohandle (no shareable handle type:
 *   staged),
 *   cudaMallocHost, cudaHostRegister'd malloc memory, managed memory.
 * Tests: Sendrecv and Send/Recv rings for every (sender kind, receiver kind) pair; Allreduce (and
 * in place), Alltoall, Allgather and Bcast with per-rank kind schemes (e.g. even ranks cudaMalloc,
 * odd ranks cuMemCreate); a VMM range unmapped and remapped with new physical memory between
 * calls. Counts 0, 1, 65537 and 4 Mi ints.
 * `gpu_mem fd`: only a cuMemCreate sendrecv ring and allreduce (run.sh checks the log for the
 * descriptor path).
 * `gpu_mem big`: only the 1 GiB part (Allreduce and in place at 2^28+1 ints, a Sendrecv ring at
 * 2^28-1, Alltoall with a 1 GiB send buffer, Bcast at 2^28+1), "SKIP: gpu_mem big: ..." with a printed reason
 * when free device memory is short.
 * Outputs are poisoned first and compared with closed-form expected values (integers, exact).
 * Without a CUDA device it prints "SKIP: no CUDA device (<reason>)" and exits 0. */
#include <mpi.h>
#include <mpi-ext.h>
#include "cudart.h"
#include <stdint.h>

/* ---- The CUDA driver calls this test needs (libcuda.so.1, CUDA 13.0 cuda.h layouts). ---- */
typedef unsigned long long CUdeviceptr_;
typedef struct { int type; int id; } CUmemLocation_;      /* CUmemLocation */
typedef struct {                                           /* CUmemAllocationProp */
    int type;                  /* CUmemAllocationType: CU_MEM_ALLOCATION_TYPE_PINNED = 1 */
    int requestedHandleTypes;  /* CUmemAllocationHandleType: NONE 0, POSIX_FILE_DESCRIPTOR 1 */
    CUmemLocation_ location;   /* CU_MEM_LOCATION_TYPE_DEVICE = 1, id = device ordinal */
    void *win32HandleMetaData;
    struct {
        unsigned char compressionType;
        unsigned char gpuDirectRDMACapable;
        unsigned short usage;
        unsigned char reserved[4];
    } allocFlags;
} CUmemAllocationProp_;
typedef struct {                                           /* CUmemAccessDesc */
    CUmemLocation_ location;
    int flags;                 /* CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3 */
} CUmemAccessDesc_;
_Static_assert(sizeof(CUmemAllocationProp_) == 32, "CUmemAllocationProp layout");
_Static_assert(sizeof(CUmemAccessDesc_) == 12, "CUmemAccessDesc layout");
enum {
    CU_MEM_ALLOCATION_TYPE_PINNED_ = 1,
    CU_MEM_HANDLE_TYPE_NONE_ = 0,
    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_ = 1,
    CU_MEM_LOCATION_TYPE_DEVICE_ = 1,
    CU_MEM_ACCESS_FLAGS_PROT_READWRITE_ = 3,
    CU_MEM_ALLOC_GRANULARITY_RECOMMENDED_ = 1,
    CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED_ = 102,
    CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE_ = 10,
};
static int (*cuGetErrorString_)(int, const char **);
static int (*cuDeviceGet_)(int *, int);
static int (*cuDeviceGetAttribute_)(int *, int, int);
static int (*cuMemGetAllocationGranularity_)(size_t *, const CUmemAllocationProp_ *, int);
static int (*cuMemCreate_)(unsigned long long *, size_t, const CUmemAllocationProp_ *, unsigned long long);
static int (*cuMemRelease_)(unsigned long long);
static int (*cuMemAddressReserve_)(CUdeviceptr_ *, size_t, size_t, CUdeviceptr_, unsigned long long);
static int (*cuMemAddressFree_)(CUdeviceptr_, size_t);
static int (*cuMemMap_)(CUdeviceptr_, size_t, size_t, unsigned long long, unsigned long long);
static int (*cuMemUnmap_)(CUdeviceptr_, size_t);
static int (*cuMemSetAccess_)(CUdeviceptr_, size_t, const CUmemAccessDesc_ *, size_t);
static int (*cuMemAlloc_v2_)(CUdeviceptr_ *, size_t);
static int (*cuMemFree_v2_)(CUdeviceptr_);
static int (*cuPointerGetAttribute_)(void *, int, CUdeviceptr_);

/* NULL when the driver's symbols are loaded (libcuda.so.1, or GPUMPI_TEST_CUDA_DRIVER), else the
 * reason. */
static const char *drv_load(void) {
    static char why[256];
    const char *name = getenv("GPUMPI_TEST_CUDA_DRIVER");
    if (!name || !*name) name = "libcuda.so.1";
    void *h = dlopen(name, RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        snprintf(why, sizeof why, "dlopen %s: %s", name, dlerror());
        return why;
    }
#define LOAD(f) if (!(*(void **)&f##_ = dlsym(h, #f))) { snprintf(why, sizeof why, "libcuda lacks %s", #f); return why; }
    LOAD(cuGetErrorString) LOAD(cuDeviceGet) LOAD(cuDeviceGetAttribute)
    LOAD(cuMemGetAllocationGranularity) LOAD(cuMemCreate) LOAD(cuMemRelease) LOAD(cuMemAddressReserve)
    LOAD(cuMemAddressFree) LOAD(cuMemMap) LOAD(cuMemUnmap) LOAD(cuMemSetAccess) LOAD(cuMemAlloc_v2)
    LOAD(cuMemFree_v2) LOAD(cuPointerGetAttribute)
#undef LOAD
    return NULL;
}
#define DRV(call) do { int rc_ = (call); if (rc_) { const char *s_ = "?"; cuGetErrorString_(rc_, &s_); fprintf(stderr, "%s:%d: %s: %d (%s)\n", __FILE__, __LINE__, #call, rc_, s_); MPI_Abort(MPI_COMM_WORLD, 3); } } while (0)

/* ---- Memory kinds ---- */
enum { HOST, DEV, CUMEM, VMM, VMM2, PINNED, REG, MANAGED, VMMN, NKINDS };
static const char *kname[] = {"host", "cudaMalloc", "cuMemAlloc", "cuMemCreate", "cuMemCreate-x2",
                              "cudaMallocHost", "cudaHostRegister", "managed", "cuMemCreate-nohandle"};
static int on_host(int k) { return k == HOST || k == PINNED || k == REG; }

static int rank, size, dev, errors;
static size_t gran;                 /* recommended VMM granularity of this rank's device */
static CUmemAllocationProp_ vprop;  /* device memory of this rank's device (POSIX fd if allowed) */
static CUmemAllocationProp_ vprop_none; /* the same without shareable handle types */

/* One buffer of `bytes` bytes at p; for VMM the reserved range, its chunks and handles. */
struct buf {
    int k;
    int *p;
    size_t bytes;
    CUdeviceptr_ base;
    size_t vlen, clen[2];
    unsigned long long h[2];
    int nh;
};

static size_t round_up(size_t x, size_t g) { return (x + g - 1) / g * g; }

/* Map `nh` new physical allocations of clen[i] bytes back to back at b->base, readable and
 * writable from this rank's device. */
static void vmm_map(struct buf *b) {
    size_t off = 0;
    for (int i = 0; i < b->nh; i++) {
        DRV(cuMemCreate_(&b->h[i], b->clen[i], b->k == VMMN ? &vprop_none : &vprop, 0));
        DRV(cuMemMap_(b->base + off, b->clen[i], 0, b->h[i], 0));
        off += b->clen[i];
    }
    CUmemAccessDesc_ a = {{CU_MEM_LOCATION_TYPE_DEVICE_, dev}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE_};
    DRV(cuMemSetAccess_(b->base, off, &a, 1));
}
static void vmm_unmap(struct buf *b) {
    size_t off = 0;
    for (int i = 0; i < b->nh; i++) {
        DRV(cuMemUnmap_(b->base + off, b->clen[i]));
        DRV(cuMemRelease_(b->h[i]));
        off += b->clen[i];
    }
}

static struct buf alloc_k(int k, size_t bytes) {
    struct buf b;
    memset(&b, 0, sizeof b);
    b.k = k;
    b.bytes = bytes;
    size_t n = bytes ? bytes : 1;
    void *p = NULL;
    switch (k) {
    case HOST: p = malloc(n); break;
    case DEV: CU(cudaMalloc_(&p, n)); break;
    case CUMEM: DRV(cuMemAlloc_v2_(&b.base, n)); p = (void *)(uintptr_t)b.base; break;
    case PINNED: CU(cudaMallocHost_(&p, n)); break;
    case REG: /* page-aligned and page-rounded: two registrations never share a page */
        if (posix_memalign(&p, 4096, round_up(n, 4096))) p = NULL;
        if (!p) { fprintf(stderr, "rank %d: out of host memory\n", rank); MPI_Abort(MPI_COMM_WORLD, 3); }
        CU(cudaHostRegister_(p, n, 0));
        break;
    case MANAGED: CU(cudaMallocManaged_(&p, n, 1)); break;
    case VMM:
    case VMMN:
    case VMM2: {
        size_t need = round_up(n, gran);
        /* VMM2: a first chunk of one granule, then the rest; the buffer starts half its length
         * before the boundary (4-byte aligned), so it lies in both allocations. */
        b.nh = k != VMM2 ? 1 : 2;
        b.clen[0] = k != VMM2 ? need : gran;
        b.clen[1] = k != VMM2 ? 0 : need;
        b.vlen = b.clen[0] + b.clen[1];
        DRV(cuMemAddressReserve_(&b.base, b.vlen, 0, 0, 0));
        vmm_map(&b);
        size_t before = (bytes / 2) & ~(size_t)3;
        if (before > gran) before = gran;
        p = (void *)(uintptr_t)(k != VMM2 ? b.base : b.base + gran - before);
        break;
    }
    }
    b.p = p;
    return b;
}

static void free_k(struct buf *b) {
    switch (b->k) {
    case HOST: free(b->p); break;
    case DEV: case MANAGED: CU(cudaFree_(b->p)); break;
    case CUMEM: DRV(cuMemFree_v2_(b->base)); break;
    case PINNED: CU(cudaFreeHost_(b->p)); break;
    case REG: CU(cudaHostUnregister_(b->p)); free(b->p); break;
    case VMM: case VMM2: case VMMN: vmm_unmap(b); DRV(cuMemAddressFree_(b->base, b->vlen)); break;
    }
    b->p = NULL;
}

/* ---- Data: closed-form values, filled and checked through one pinned chunk ---- */
/* Rank r's element j: distinct per (r, j) up to 2^16 ranks, positive, small enough that sums
 * over a few hundred ranks stay exact in int. */
static int v(int r, size_t j) { return (int)((((uint32_t)j * 2654435761u) >> 16) + ((uint32_t)r << 16) + 1); }
static int vsum(size_t j) {
    long long h = (long long)v(0, j);
    return (int)(size * h + 65536LL * size * (size - 1) / 2);
}
enum { E_VAL, E_SUM, E_A2A, E_GATHER };
struct want { int e; int r; size_t blk; };
/* Element j of the expected result. E_VAL: rank r's data; E_SUM: the sum over ranks; E_A2A:
 * alltoall of blocks of blk from buffers filled with v(q, j); E_GATHER: allgather of blk. */
static int want_at(struct want w, size_t j) {
    switch (w.e) {
    case E_VAL: return v(w.r, j);
    case E_SUM: return vsum(j);
    case E_A2A: return v((int)(j / w.blk), (size_t)rank * w.blk + j % w.blk);
    default: return v((int)(j / w.blk), j % w.blk);
    }
}

enum { CHUNK = 16 << 20 }; /* ints: 64 MiB */
static int *chunk;         /* pinned */

static void fill(const struct buf *b, size_t n, int r) {
    for (size_t at = 0; at < n; at += CHUNK) {
        size_t m = n - at < CHUNK ? n - at : CHUNK;
        int *d = on_host(b->k) ? b->p + at : chunk;
        for (size_t i = 0; i < m; i++) d[i] = v(r, at + i);
        if (!on_host(b->k)) CU(cudaMemcpy_(b->p + at, chunk, m * sizeof(int), cudaMemcpyDefault_));
    }
    CU(cudaDeviceSynchronize_());
}
static void poison(const struct buf *b, size_t bytes) {
    if (!bytes) return;
    if (on_host(b->k)) memset(b->p, 0xA5, bytes);
    else { CU(cudaMemset_(b->p, 0xA5, bytes)); CU(cudaDeviceSynchronize_()); }
}
/* Compare n ints of b with the expected values; report the first difference. */
static void check(const char *what, size_t count, const struct buf *b, size_t n, struct want w) {
    for (size_t at = 0; at < n; at += CHUNK) {
        size_t m = n - at < CHUNK ? n - at : CHUNK;
        const int *g = b->p + at;
        if (!on_host(b->k)) { CU(cudaMemcpy_(chunk, b->p + at, m * sizeof(int), cudaMemcpyDefault_)); g = chunk; }
        for (size_t i = 0; i < m; i++) {
            int x = want_at(w, at + i);
            if (g[i] != x) {
                if (errors < 20)
                    fprintf(stderr, "rank %d: %s count %zu: [%zu] = %d, want %d\n", rank, what, count, at + i, g[i], x);
                errors++;
                return;
            }
        }
    }
}

static const size_t counts[] = {0, 1, 65537, 4u << 20};
#define NCOUNTS (sizeof counts / sizeof counts[0])

/* Every (sender kind, receiver kind) pair through a Sendrecv ring and a Send/Recv ring. */
static void test_p2p(void) {
    int to = (rank + 1) % size, from = (rank - 1 + size) % size;
    for (int sk = 0; sk < NKINDS; sk++) for (int rk = 0; rk < NKINDS; rk++) for (size_t c = 0; c < NCOUNTS; c++) {
        size_t n = counts[c], b = n * sizeof(int);
        struct buf s = alloc_k(sk, b), r = alloc_k(rk, b);
        char what[96];
        fill(&s, n, rank);
        poison(&r, b);
        MPI_Status st;
        MPI_Sendrecv(s.p, (int)n, MPI_INT, to, 1, r.p, (int)n, MPI_INT, from, 1, MPI_COMM_WORLD, &st);
        int got = -1;
        MPI_Get_count(&st, MPI_INT, &got);
        if ((size_t)got != n) { fprintf(stderr, "rank %d: sendrecv count %d want %zu\n", rank, got, n); errors++; }
        snprintf(what, sizeof what, "sendrecv %s -> %s", kname[sk], kname[rk]);
        check(what, n, &r, n, (struct want){E_VAL, from, 0});
        if (size > 1) {
            poison(&r, b);
            if (rank == 0) {
                MPI_Send(s.p, (int)n, MPI_INT, to, 2, MPI_COMM_WORLD);
                MPI_Recv(r.p, (int)n, MPI_INT, from, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else {
                MPI_Recv(r.p, (int)n, MPI_INT, from, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(s.p, (int)n, MPI_INT, to, 2, MPI_COMM_WORLD);
            }
            snprintf(what, sizeof what, "send/recv %s -> %s", kname[sk], kname[rk]);
            check(what, n, &r, n, (struct want){E_VAL, from, 0});
        }
        if (n == 65537) {
            snprintf(what, sizeof what, "send buffer %s unchanged", kname[sk]);
            check(what, n, &s, n, (struct want){E_VAL, rank, 0});
        }
        free_k(&s); free_k(&r);
    }
    if (rank == 0) printf("p2p: %d x %d kind pairs x %zu counts done\n", NKINDS, NKINDS, NCOUNTS);
}

/* Collectives with a send and a receive kind per rank (index rank % 4). */
struct scheme { const char *name; int send[4], recv[4]; };
static const struct scheme schemes[] = {
    {"cuMemCreate everywhere", {VMM, VMM, VMM, VMM}, {VMM, VMM, VMM, VMM}},
    {"even cudaMalloc, odd cuMemCreate", {DEV, VMM, DEV, VMM}, {DEV, VMM, DEV, VMM}},
    {"even cuMemAlloc, odd cuMemCreate-x2", {CUMEM, VMM2, CUMEM, VMM2}, {CUMEM, VMM2, CUMEM, VMM2}},
    {"send cuMemCreate, recv cudaMalloc", {VMM, VMM, VMM, VMM}, {DEV, DEV, DEV, DEV}},
    {"even cudaMallocHost, odd cudaMalloc", {PINNED, DEV, PINNED, DEV}, {PINNED, DEV, PINNED, DEV}},
    {"even cudaHostRegister, odd cuMemCreate", {REG, VMM, REG, VMM}, {REG, VMM, REG, VMM}},
    {"all kinds", {DEV, VMM, PINNED, MANAGED}, {CUMEM, HOST, VMM2, REG}},
    {"cuMemCreate with and without handle types", {VMM, VMMN, VMM, VMMN}, {VMMN, VMM, VMMN, VMM}},
};

static void test_coll(void) {
    int nsch = (int)(sizeof schemes / sizeof schemes[0]);
    for (int sc = 0; sc < nsch; sc++) for (size_t c = 0; c < NCOUNTS; c++) {
        const struct scheme *S = &schemes[sc];
        int sk = S->send[rank % 4], rk = S->recv[rank % 4];
        size_t n = counts[c], b = n * sizeof(int), nb = b * size;
        struct buf s = alloc_k(sk, nb), r = alloc_k(rk, nb);
        char what[160];
#define CHECK(op, bf, len, w) do { snprintf(what, sizeof what, "%s [%s: send %s, recv %s]", op, S->name, kname[sk], kname[rk]); check(what, n, &bf, len, w); } while (0)
        fill(&s, n * size, rank);
        poison(&r, nb);
        MPI_Allreduce(s.p, r.p, (int)n, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        CHECK("allreduce", r, n, ((struct want){E_SUM, 0, 0}));
        poison(&r, nb);
        MPI_Alltoall(s.p, (int)n, MPI_INT, r.p, (int)n, MPI_INT, MPI_COMM_WORLD);
        CHECK("alltoall", r, n * size, ((struct want){E_A2A, 0, n}));
        poison(&r, nb);
        MPI_Allgather(s.p, (int)n, MPI_INT, r.p, (int)n, MPI_INT, MPI_COMM_WORLD);
        CHECK("allgather", r, n * size, ((struct want){E_GATHER, 0, n}));
        fill(&r, n, rank);
        MPI_Allreduce(MPI_IN_PLACE, r.p, (int)n, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        CHECK("allreduce in place", r, n, ((struct want){E_SUM, 0, 0}));
        /* Bcast from the last rank in the receive kinds, then from rank 0 in the send kinds. */
        if (rank == size - 1) fill(&r, n, rank); else poison(&r, b);
        MPI_Bcast(r.p, (int)n, MPI_INT, size - 1, MPI_COMM_WORLD);
        CHECK("bcast root last", r, n, ((struct want){E_VAL, size - 1, 0}));
        if (rank != 0) poison(&s, b);
        MPI_Bcast(s.p, (int)n, MPI_INT, 0, MPI_COMM_WORLD);
        CHECK("bcast root 0", s, n, ((struct want){E_VAL, 0, 0}));
#undef CHECK
        MPI_Barrier(MPI_COMM_WORLD);
        free_k(&s); free_k(&r);
    }
    if (rank == 0) printf("collectives: %d kind schemes x %zu counts done\n", nsch, NCOUNTS);
}

/* One reserved VMM range, unmapped and mapped again with new physical memory each round (one
 * chunk of two granules, then two chunks of one), used against cudaMalloc peers: classification
 * must follow the mapping, not the address. */
static void test_remap(void) {
    int to = (rank + 1) % size, from = (rank - 1 + size) % size;
    struct buf m;
    memset(&m, 0, sizeof m);
    m.k = VMM;
    m.vlen = 2 * gran;
    DRV(cuMemAddressReserve_(&m.base, m.vlen, 0, 0, 0));
    m.p = (int *)(uintptr_t)m.base;
    size_t n = m.vlen / sizeof(int) - 3, b = n * sizeof(int);
    m.bytes = b;
    struct buf d = alloc_k(DEV, b);
    for (int round = 0; round < 4; round++) {
        m.nh = round % 2 ? 2 : 1;
        m.clen[0] = round % 2 ? gran : 2 * gran;
        m.clen[1] = round % 2 ? gran : 0;
        vmm_map(&m);
        char what[64];
        /* even rounds receive into the remapped range, odd rounds send from it */
        struct buf *s = round % 2 ? &m : &d, *r = round % 2 ? &d : &m;
        fill(s, n, rank + round);
        poison(r, b);
        MPI_Sendrecv(s->p, (int)n, MPI_INT, to, 3, r->p, (int)n, MPI_INT, from, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        snprintf(what, sizeof what, "remap round %d sendrecv", round);
        check(what, n, r, n, (struct want){E_VAL, from + round, 0});
        fill(&m, n, rank);
        MPI_Allreduce(MPI_IN_PLACE, m.p, (int)n, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        snprintf(what, sizeof what, "remap round %d allreduce in place", round);
        check(what, n, &m, n, (struct want){E_SUM, 0, 0});
        MPI_Barrier(MPI_COMM_WORLD);
        vmm_unmap(&m);
    }
    DRV(cuMemAddressFree_(m.base, m.vlen));
    free_k(&d);
    if (rank == 0) printf("remap: 4 rounds of new physical memory at one VMM address done\n");
}

/* 1 GiB per buffer, cudaMalloc memory. Needs two buffers of a little over 1 GiB per rank.
 * Returns 0, or 1 when it did not run (free device memory short; the reason is printed). */
static int test_big(void) {
    const size_t G = (size_t)1 << 28;     /* ints in 1 GiB */
    size_t nar = G + 1, nsr = G - 1;      /* odd counts around 2^28 */
    size_t blk = G / size + 1;            /* alltoall block: the send buffer is >= 1 GiB */
    size_t cap = nar > blk * size ? nar : blk * size, bytes = cap * sizeof(int);
    /* Ranks of this node on this rank's device share its memory. */
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    int nn = 0, sharers = 0;
    MPI_Comm_size(node, &nn);
    int *devs = malloc(nn * sizeof(int));
    MPI_Allgather(&dev, 1, MPI_INT, devs, 1, MPI_INT, node);
    for (int i = 0; i < nn; i++) sharers += devs[i] == dev;
    free(devs);
    MPI_Comm_free(&node);
    size_t fr = 0, tot = 0;
    CU(cudaMemGetInfo_(&fr, &tot));
    size_t need = (size_t)sharers * (2 * bytes + (256u << 20)) + (512u << 20);
    int ok = fr >= need, all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all) {
        if (!ok) printf("big: skipped: rank %d: device %d has %zu MiB free, %zu MiB needed (%d ranks on it)\n",
                        rank, dev, fr >> 20, need >> 20, sharers);
        MPI_Barrier(MPI_COMM_WORLD);
        return 1;
    }
    int to = (rank + 1) % size, from = (rank - 1 + size) % size;
    struct buf s = alloc_k(DEV, bytes), r = alloc_k(DEV, bytes);
    double t;
#define TIMED(name, call) do { MPI_Barrier(MPI_COMM_WORLD); t = MPI_Wtime(); call; t = MPI_Wtime() - t; \
        if (rank == 0) printf("big: %s: %.1f ms\n", name, t * 1e3); } while (0)
    fill(&s, cap, rank);
    poison(&r, nar * sizeof(int));
    TIMED("allreduce sum 2^28+1 ints", MPI_Allreduce(s.p, r.p, (int)nar, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    check("big allreduce", nar, &r, nar, (struct want){E_SUM, 0, 0});
    CU(cudaMemcpy_(r.p, s.p, nar * sizeof(int), cudaMemcpyDefault_));
    CU(cudaDeviceSynchronize_());
    TIMED("allreduce sum in place 2^28+1 ints",
          MPI_Allreduce(MPI_IN_PLACE, r.p, (int)nar, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    check("big allreduce in place", nar, &r, nar, (struct want){E_SUM, 0, 0});
    poison(&r, nsr * sizeof(int));
    TIMED("sendrecv ring 2^28-1 ints",
          MPI_Sendrecv(s.p, (int)nsr, MPI_INT, to, 4, r.p, (int)nsr, MPI_INT, from, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    check("big sendrecv", nsr, &r, nsr, (struct want){E_VAL, from, 0});
    poison(&r, blk * size * sizeof(int));
    TIMED("alltoall, 1 GiB send buffer",
          MPI_Alltoall(s.p, (int)blk, MPI_INT, r.p, (int)blk, MPI_INT, MPI_COMM_WORLD));
    check("big alltoall", blk, &r, blk * size, (struct want){E_A2A, 0, blk});
    /* Bcast from the last rank: its send buffer holds v(size-1, j). */
    struct buf *bb = rank == size - 1 ? &s : &r;
    if (rank != size - 1) poison(&r, nar * sizeof(int));
    TIMED("bcast 2^28+1 ints", MPI_Bcast(bb->p, (int)nar, MPI_INT, size - 1, MPI_COMM_WORLD));
    check("big bcast", nar, bb, nar, (struct want){E_VAL, size - 1, 0});
#undef TIMED
    free_k(&s); free_k(&r);
    if (rank == 0) printf("big: 1 GiB allreduce (and in place), sendrecv ring, alltoall, bcast done\n");
    return 0;
}

/* `gpu_mem fd`: a Sendrecv ring and an Allreduce of 4 Mi ints in cuMemCreate memory (POSIX fd
 * handle type), checked; tests/gpu/run.sh runs it with GPUMPI_DEBUG=2 and asserts from the log
 * that the peers' buffers were mapped through descriptors (zero-copy), not staged. */
static void test_fd(void) {
    int to = (rank + 1) % size, from = (rank - 1 + size) % size;
    size_t n = 4u << 20, b = n * sizeof(int);
    struct buf s = alloc_k(VMM, b), r = alloc_k(VMM, b);
    fill(&s, n, rank);
    for (int it = 0; it < 3; it++) {
        poison(&r, b);
        MPI_Sendrecv(s.p, (int)n, MPI_INT, to, 5, r.p, (int)n, MPI_INT, from, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        check("fd sendrecv", n, &r, n, (struct want){E_VAL, from, 0});
        poison(&r, b);
        MPI_Allreduce(s.p, r.p, (int)n, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        check("fd allreduce", n, &r, n, (struct want){E_SUM, 0, 0});
    }
    MPI_Barrier(MPI_COMM_WORLD);
    free_k(&s); free_k(&r);
    if (rank == 0) printf("fd: cuMemCreate (POSIX fd) sendrecv ring and allreduce x3 done\n");
}

/* VMM set-up for this rank's device: allocation properties and granularity. Prefers memory
 * exportable as a POSIX file descriptor (what NCCL and PyTorch ask for); falls back to none. */
static void vmm_setup(void) {
    int cudev = 0, vmm = 0;
    DRV(cuDeviceGet_(&cudev, dev));
    DRV(cuDeviceGetAttribute_(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED_, cudev));
    if (!vmm) {
        fprintf(stderr, "rank %d: device %d does not support virtual memory management\n", rank, dev);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    memset(&vprop, 0, sizeof vprop);
    vprop.type = CU_MEM_ALLOCATION_TYPE_PINNED_;
    vprop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_;
    vprop.location.type = CU_MEM_LOCATION_TYPE_DEVICE_;
    vprop.location.id = cudev;
    DRV(cuMemGetAllocationGranularity_(&gran, &vprop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED_));
    vprop_none = vprop;
    vprop_none.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE_;
    unsigned long long h = 0;
    if (cuMemCreate_(&h, gran, &vprop, 0) == 0) {
        DRV(cuMemRelease_(h));
    } else {
        vprop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE_;
        DRV(cuMemGetAllocationGranularity_(&gran, &vprop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED_));
        if (rank == 0) printf("vmm: POSIX fd handles refused; cuMemCreate without handle types\n");
    }
    /* What the driver says about legacy IPC of VMM memory (gpumpi stages what it cannot export). */
    struct buf b = alloc_k(VMM, 4096);
    int legacy = -1;
    DRV(cuPointerGetAttribute_(&legacy, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE_, b.base));
    if (rank == 0)
        printf("vmm: granularity %zu KiB, handle type %s, legacy IPC capable %d\n", gran >> 10,
               vprop.requestedHandleTypes ? "POSIX fd" : "none", legacy);
    free_k(&b);
}

int main(int argc, char **argv) {
    if (cudart_mpi_init(&argc, &argv, -1, &rank, &size) < 0) return 0;
    int big = argc > 1 && strcmp(argv[1], "big") == 0;
    int fd = argc > 1 && strcmp(argv[1], "fd") == 0;
    dev = cudart_pick_device();
    CU(cudaFree_(NULL)); /* the primary context, current on this thread (cuMemAlloc needs one) */
    const char *dwhy = drv_load();
    if (dwhy) {
        fprintf(stderr, "rank %d: CUDA runtime present but %s\n", rank, dwhy);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    if (MPIX_Query_cuda_support() != 1) {
        fprintf(stderr, "rank %d: MPIX_Query_cuda_support() != 1 with a device present\n", rank);
        errors++;
    }
    CU(cudaMallocHost_((void **)&chunk, CHUNK * sizeof(int)));
    vmm_setup();
    if (rank == 0) printf("gpu_mem%s: %d ranks, rank 0 on device %d\n", big ? " big" : "", size, dev);
    int skipped = 0;
    if (big) {
        skipped = test_big();
    } else if (fd) {
        test_fd();
    } else {
        test_p2p();
        test_coll();
        test_remap();
    }
    CU(cudaFreeHost_(chunk));
    int total = 0;
    MPI_Allreduce(&errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0 && skipped && !total)
        printf("SKIP: gpu_mem big: not enough free device memory on some rank (reason above)\n");
    else if (rank == 0)
        printf("%s: gpu_mem%s %d ranks, %d errors\n", total ? "FAIL" : "PASS", big ? " big" : "", size, total);
    MPI_Finalize();
    return total != 0;
}
