/* Mock libnccl.so.2 over MPI, for testing gpumpi-bench -B nccl on machines
 * without a GPU: same prototypes as NCCL 2.x, each operation done with the
 * matching MPI call on a duplicate of MPI_COMM_WORLD; ncclSend/ncclRecv inside
 * ncclGroupStart/End are posted together and completed at ncclGroupEnd.
 * Refuses to initialise unless NCCL_NVLS_ENABLE=0 is set.
 *     mpicc -shared -fPIC -o DIR/libnccl.so.2 benches/mock/mock_nccl.c */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { char internal[128]; } ncclUniqueId;
typedef struct { MPI_Comm comm; int rank, size; } mock_comm;
enum { ncclSuccess = 0, ncclInvalidArgument = 4, ncclInvalidUsage = 5 };

static const char ID[] = "gpumpi-bench mock nccl id";

static MPI_Datatype dt(int t)
{
    switch (t) {
    case 0: return MPI_INT8_T;
    case 1: return MPI_UINT8_T;
    case 2: return MPI_INT32_T;
    case 3: return MPI_UINT32_T;
    case 4: return MPI_INT64_T;
    case 5: return MPI_UINT64_T;
    case 7: return MPI_FLOAT;
    case 8: return MPI_DOUBLE;
    default: return MPI_DATATYPE_NULL;
    }
}
static MPI_Op op(int o)
{
    switch (o) {
    case 0: return MPI_SUM;
    case 1: return MPI_PROD;
    case 2: return MPI_MAX;
    case 3: return MPI_MIN;
    default: return MPI_OP_NULL;
    }
}

const char *ncclGetErrorString(int rc)
{
    return rc == ncclSuccess ? "no error" : rc == ncclInvalidUsage ? "invalid usage (mock)" : "invalid argument (mock)";
}

int ncclGetUniqueId(ncclUniqueId *id)
{
    memset(id, 0, sizeof *id);
    memcpy(id->internal, ID, sizeof ID);
    return ncclSuccess;
}

int ncclCommInitRank(void **comm, int nranks, ncclUniqueId id, int rank)
{
    const char *nvls = getenv("NCCL_NVLS_ENABLE");
    if (!nvls || strcmp(nvls, "0") != 0) {
        fprintf(stderr, "mock nccl: NCCL_NVLS_ENABLE must be 0\n");
        return ncclInvalidUsage;
    }
    if (memcmp(id.internal, ID, sizeof ID) != 0) {
        fprintf(stderr, "mock nccl: unique id was not shared from rank 0\n");
        return ncclInvalidArgument;
    }
    mock_comm *c = malloc(sizeof *c);
    MPI_Comm_dup(MPI_COMM_WORLD, &c->comm);
    MPI_Comm_rank(c->comm, &c->rank);
    MPI_Comm_size(c->comm, &c->size);
    if (c->rank != rank || c->size != nranks) return ncclInvalidArgument;
    *comm = c;
    return ncclSuccess;
}

int ncclCommDestroy(void *comm)
{
    mock_comm *c = comm;
    MPI_Comm_free(&c->comm);
    free(c);
    return ncclSuccess;
}

#define C ((mock_comm *)comm)
#define CHECKDT(t) if (dt(t) == MPI_DATATYPE_NULL) return ncclInvalidArgument

int ncclAllReduce(const void *s, void *r, size_t n, int t, int o, void *comm, void *st)
{
    (void)st; CHECKDT(t);
    MPI_Allreduce(s == r ? MPI_IN_PLACE : s, r, (int)n, dt(t), op(o), C->comm);
    return ncclSuccess;
}
int ncclReduce(const void *s, void *r, size_t n, int t, int o, int root, void *comm, void *st)
{
    (void)st; CHECKDT(t);
    MPI_Reduce(s == r && C->rank == root ? MPI_IN_PLACE : s, r, (int)n, dt(t), op(o), root, C->comm);
    return ncclSuccess;
}
int ncclBroadcast(const void *s, void *r, size_t n, int t, int root, void *comm, void *st)
{
    (void)st; CHECKDT(t);
    int sz; MPI_Type_size(dt(t), &sz);
    if (C->rank == root && s != r) memcpy(r, s, n * (size_t)sz);
    MPI_Bcast(r, (int)n, dt(t), root, C->comm);
    return ncclSuccess;
}
int ncclAllGather(const void *s, void *r, size_t n, int t, void *comm, void *st)
{
    (void)st; CHECKDT(t);
    MPI_Allgather(s, (int)n, dt(t), r, (int)n, dt(t), C->comm);
    return ncclSuccess;
}
int ncclReduceScatter(const void *s, void *r, size_t n, int t, int o, void *comm, void *st)
{
    (void)st; CHECKDT(t);
    MPI_Reduce_scatter_block(s, r, (int)n, dt(t), op(o), C->comm);
    return ncclSuccess;
}

static int group_depth;
static MPI_Request *reqs;
static int nreq, capreq;

static int p2p(int send, void *buf, size_t n, int t, int peer, void *comm)
{
    CHECKDT(t);
    if (nreq == capreq) {
        capreq = capreq ? 2 * capreq : 64;
        reqs = realloc(reqs, sizeof *reqs * (size_t)capreq);
    }
    MPI_Request *rq = &reqs[nreq++];
    if (send) MPI_Isend(buf, (int)n, dt(t), peer, 77, C->comm, rq);
    else MPI_Irecv(buf, (int)n, dt(t), peer, 77, C->comm, rq);
    if (group_depth == 0) { MPI_Waitall(nreq, reqs, MPI_STATUSES_IGNORE); nreq = 0; }
    return ncclSuccess;
}
int ncclSend(const void *s, size_t n, int t, int peer, void *comm, void *st)
{
    (void)st;
    return p2p(1, (void *)s, n, t, peer, comm);
}
int ncclRecv(void *r, size_t n, int t, int peer, void *comm, void *st)
{
    (void)st;
    return p2p(0, r, n, t, peer, comm);
}
int ncclGroupStart(void) { group_depth++; return ncclSuccess; }
int ncclGroupEnd(void)
{
    if (group_depth == 0) return ncclInvalidUsage;
    if (--group_depth == 0 && nreq) { MPI_Waitall(nreq, reqs, MPI_STATUSES_IGNORE); nreq = 0; }
    return ncclSuccess;
}
