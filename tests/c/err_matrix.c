/* The bad-input matrix: every misuse of every implemented function family that takes a buffer
 * (and the other misuses of the issue: freed request copies, stale handles, invalid error
 * codes, errors without an object), each detected at the call on every rank.
 *
 *   err_matrix return [device]   every case under MPI_ERRORS_RETURN: the class must be the
 *                                standard's, the library usable after each; `device` makes the
 *                                valid buffers of each case device memory (GPU suite; skips
 *                                with a printed reason where there is no CUDA device)
 *   err_matrix list              print the case names (no MPI)
 *   err_matrix fatal NAME        run one case under the default handler (MPI_ERRORS_ARE_FATAL):
 *                                the job must die with a message naming the call
 *                                (tests/c_programs.rs runs every case this way)
 *
 * A case's misuse is significant on every rank: collectives whose bad buffer matters only at
 * the root run on MPI_COMM_SELF, so no rank is left waiting for one that returned an error.
 * Legal uses that look alike (MPI_BOTTOM with absolute addresses, NULL with a zero-size type,
 * MPI_PROC_NULL) must keep working. */
#include "ctest.h"
#ifdef ERR_MATRIX_DEVICE
#include "cudart.h"
#endif

#define N 4
static int me, np, peer;
static int *hbuf;  /* N ints of valid memory (device memory in device mode) */
static int *hbuf2; /* another N * np ints */
static int counts[64], displs[64];
static MPI_Datatype types[64];

typedef int (*case_fn)(void);
struct mcase {
    const char *name; /* the function's name: "c_" + the case's name */
    const char *call;
    int cls;
    case_fn fn;
};

#define IP MPI_IN_PLACE
static MPI_Request rq;
static MPI_Status st;
static int pos;
static char pbuf[256];

/* ---- point-to-point ---- */
static int c_send_inplace(void) { return MPI_Send(IP, N, MPI_INT, peer, 1, MPI_COMM_WORLD); }
static int c_send_null(void) { return MPI_Send(NULL, N, MPI_INT, peer, 1, MPI_COMM_WORLD); }
static int c_send_auto(void) { return MPI_Send(MPI_BUFFER_AUTOMATIC, N, MPI_INT, peer, 1, MPI_COMM_WORLD); }
static int c_ssend_inplace(void) { return MPI_Ssend(IP, N, MPI_INT, peer, 1, MPI_COMM_WORLD); }
static int c_bsend_inplace(void) { return MPI_Bsend(IP, N, MPI_INT, peer, 1, MPI_COMM_WORLD); }
static int c_rsend_null(void) { return MPI_Rsend(NULL, N, MPI_INT, peer, 1, MPI_COMM_WORLD); }
static int c_isend_inplace(void) { return MPI_Isend(IP, N, MPI_INT, peer, 1, MPI_COMM_WORLD, &rq); }
static int c_issend_null(void) { return MPI_Issend(NULL, N, MPI_INT, peer, 1, MPI_COMM_WORLD, &rq); }
static int c_ibsend_inplace(void) { return MPI_Ibsend(IP, N, MPI_INT, peer, 1, MPI_COMM_WORLD, &rq); }
static int c_irsend_inplace(void) { return MPI_Irsend(IP, N, MPI_INT, peer, 1, MPI_COMM_WORLD, &rq); }
static int c_send_c_inplace(void) { return MPI_Send_c(IP, N, MPI_INT, peer, 1, MPI_COMM_WORLD); }
static int c_recv_inplace(void) { return MPI_Recv(IP, N, MPI_INT, peer, 1, MPI_COMM_WORLD, &st); }
static int c_recv_null(void) { return MPI_Recv(NULL, N, MPI_INT, peer, 1, MPI_COMM_WORLD, &st); }
static int c_recv_c_null(void) { return MPI_Recv_c(NULL, N, MPI_INT, peer, 1, MPI_COMM_WORLD, &st); }
static int c_irecv_null(void) { return MPI_Irecv(NULL, N, MPI_INT, peer, 1, MPI_COMM_WORLD, &rq); }
static int c_irecv_inplace(void) { return MPI_Irecv(IP, N, MPI_INT, MPI_ANY_SOURCE, 1, MPI_COMM_WORLD, &rq); }
static int c_sendrecv_sinplace(void) {
    return MPI_Sendrecv(IP, N, MPI_INT, peer, 1, hbuf, N, MPI_INT, peer, 1, MPI_COMM_WORLD, &st);
}
static int c_sendrecv_rinplace(void) {
    return MPI_Sendrecv(hbuf, N, MPI_INT, peer, 1, IP, N, MPI_INT, peer, 1, MPI_COMM_WORLD, &st);
}
static int c_sendrecv_rnull(void) {
    return MPI_Sendrecv(hbuf, N, MPI_INT, peer, 1, NULL, N, MPI_INT, peer, 1, MPI_COMM_WORLD, &st);
}
static int c_isendrecv_inplace(void) {
    return MPI_Isendrecv(IP, N, MPI_INT, peer, 1, hbuf, N, MPI_INT, peer, 1, MPI_COMM_WORLD, &rq);
}
static int c_sendrecv_replace_inplace(void) {
    return MPI_Sendrecv_replace(IP, N, MPI_INT, peer, 1, peer, 1, MPI_COMM_WORLD, &st);
}
static int c_send_init_inplace(void) { return MPI_Send_init(IP, N, MPI_INT, peer, 1, MPI_COMM_WORLD, &rq); }
static int c_recv_init_null(void) { return MPI_Recv_init(NULL, N, MPI_INT, peer, 1, MPI_COMM_WORLD, &rq); }
static int c_mrecv_inplace(void) {
    MPI_Message m = MPI_MESSAGE_NO_PROC;
    return MPI_Mrecv(IP, N, MPI_INT, &m, &st);
}
static int c_send_count(void) { return MPI_Send(hbuf, -1, MPI_INT, peer, 1, MPI_COMM_WORLD); }
static int c_send_tag(void) { return MPI_Send(hbuf, N, MPI_INT, peer, -5, MPI_COMM_WORLD); }
static int c_send_rank(void) { return MPI_Send(hbuf, N, MPI_INT, np, 1, MPI_COMM_WORLD); }
static int c_send_type(void) { return MPI_Send(hbuf, N, MPI_DATATYPE_NULL, peer, 1, MPI_COMM_WORLD); }
static int c_send_comm(void) { return MPI_Send(hbuf, N, MPI_INT, peer, 1, MPI_COMM_NULL); }

/* ---- collectives (WORLD: the bad buffer is significant on every rank) ---- */
static int c_bcast_inplace(void) { return MPI_Bcast(IP, N, MPI_INT, 0, MPI_COMM_WORLD); }
static int c_bcast_null(void) { return MPI_Bcast(NULL, N, MPI_INT, 0, MPI_COMM_WORLD); }
static int c_bcast_big_inplace(void) { return MPI_Bcast(IP, 100000, MPI_INT, 0, MPI_COMM_WORLD); }
static int c_ibcast_inplace(void) { return MPI_Ibcast(IP, N, MPI_INT, 0, MPI_COMM_WORLD, &rq); }
static int c_bcast_init_inplace(void) {
    return MPI_Bcast_init(IP, N, MPI_INT, 0, MPI_COMM_WORLD, MPI_INFO_NULL, &rq);
}
static int c_bcast_c_inplace(void) { return MPI_Bcast_c(IP, N, MPI_INT, 0, MPI_COMM_WORLD); }
static int c_allreduce_rinplace(void) { return MPI_Allreduce(hbuf, IP, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD); }
static int c_allreduce_both(void) { return MPI_Allreduce(IP, IP, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD); }
static int c_allreduce_rnull(void) { return MPI_Allreduce(hbuf, NULL, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD); }
static int c_allreduce_snull(void) { return MPI_Allreduce(NULL, hbuf, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD); }
static int c_iallreduce_rinplace(void) {
    return MPI_Iallreduce(hbuf, IP, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &rq);
}
static int c_allreduce_init_rinplace(void) {
    return MPI_Allreduce_init(hbuf, IP, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &rq);
}
static int c_allreduce_c_both(void) { return MPI_Allreduce_c(IP, IP, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD); }
static int c_scan_rinplace(void) { return MPI_Scan(hbuf, IP, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD); }
static int c_exscan_rinplace(void) { return MPI_Exscan(hbuf, IP, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD); }
static int c_allgather_rinplace(void) {
    return MPI_Allgather(hbuf, 1, MPI_INT, IP, 1, MPI_INT, MPI_COMM_WORLD);
}
static int c_allgatherv_rinplace(void) {
    return MPI_Allgatherv(hbuf, 1, MPI_INT, IP, counts, displs, MPI_INT, MPI_COMM_WORLD);
}
static int c_alltoall_rinplace(void) {
    return MPI_Alltoall(hbuf2, 1, MPI_INT, IP, 1, MPI_INT, MPI_COMM_WORLD);
}
static int c_alltoall_snull(void) {
    return MPI_Alltoall(NULL, 1, MPI_INT, hbuf2, 1, MPI_INT, MPI_COMM_WORLD);
}
static int c_alltoallv_rinplace(void) {
    return MPI_Alltoallv(hbuf2, counts, displs, MPI_INT, IP, counts, displs, MPI_INT, MPI_COMM_WORLD);
}
static int c_alltoallw_rinplace(void) {
    return MPI_Alltoallw(hbuf2, counts, displs, types, IP, counts, displs, types, MPI_COMM_WORLD);
}
static int c_reduce_scatter_block_rinplace(void) {
    return MPI_Reduce_scatter_block(hbuf2, IP, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
}
static int c_reduce_scatter_rinplace(void) {
    return MPI_Reduce_scatter(hbuf2, IP, counts, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
}
/* ---- rooted collectives whose bad buffer matters at the root: on MPI_COMM_SELF ---- */
static int c_reduce_root_rinplace(void) { return MPI_Reduce(hbuf, IP, N, MPI_INT, MPI_SUM, 0, MPI_COMM_SELF); }
static int c_reduce_root_rnull(void) { return MPI_Reduce(hbuf, NULL, N, MPI_INT, MPI_SUM, 0, MPI_COMM_SELF); }
static int c_ireduce_root_both(void) { return MPI_Ireduce(IP, IP, N, MPI_INT, MPI_SUM, 0, MPI_COMM_SELF, &rq); }
static int c_gather_root_rinplace(void) {
    return MPI_Gather(hbuf, N, MPI_INT, IP, N, MPI_INT, 0, MPI_COMM_SELF);
}
static int c_igather_root_rnull(void) {
    return MPI_Igather(hbuf, N, MPI_INT, NULL, N, MPI_INT, 0, MPI_COMM_SELF, &rq);
}
static int c_gatherv_root_rinplace(void) {
    return MPI_Gatherv(hbuf, 1, MPI_INT, IP, counts, displs, MPI_INT, 0, MPI_COMM_SELF);
}
static int c_scatter_root_sinplace(void) {
    return MPI_Scatter(IP, N, MPI_INT, hbuf, N, MPI_INT, 0, MPI_COMM_SELF);
}
static int c_scatterv_root_snull(void) {
    return MPI_Scatterv(NULL, counts, displs, MPI_INT, hbuf, 1, MPI_INT, 0, MPI_COMM_SELF);
}
/* ---- local calls ---- */
static int c_reduce_local_in_inplace(void) { return MPI_Reduce_local(IP, hbuf, N, MPI_INT, MPI_SUM); }
static int c_reduce_local_io_null(void) { return MPI_Reduce_local(hbuf, NULL, N, MPI_INT, MPI_SUM); }
static int c_reduce_local_c_inplace(void) { return MPI_Reduce_local_c(IP, hbuf, N, MPI_INT, MPI_SUM); }
static int c_pack_in_inplace(void) {
    pos = 0;
    return MPI_Pack(IP, N, MPI_INT, pbuf, sizeof pbuf, &pos, MPI_COMM_WORLD);
}
static int c_pack_out_null(void) {
    pos = 0;
    return MPI_Pack(hbuf, N, MPI_INT, NULL, sizeof pbuf, &pos, MPI_COMM_WORLD);
}
static int c_unpack_out_inplace(void) {
    pos = 0;
    return MPI_Unpack(pbuf, sizeof pbuf, &pos, IP, N, MPI_INT, MPI_COMM_WORLD);
}
static int c_pack_external_in_null(void) {
    MPI_Aint p = 0;
    return MPI_Pack_external("external32", NULL, N, MPI_INT, pbuf, sizeof pbuf, &p);
}
static int c_buffer_attach_inplace(void) { return MPI_Buffer_attach(IP, 1024); }
/* ---- error codes, requests, handles ---- */
static int c_error_class_bad(void) {
    int cls;
    return MPI_Error_class(99999, &cls);
}
static int c_error_string_bad(void) {
    char s[MPI_MAX_ERROR_STRING];
    int len;
    return MPI_Error_string(-7, s, &len);
}
/* Wait on a copy of a request handle freed while its receive is active. */
static int c_wait_freed_copy(void) {
    MPI_Request r, copy;
    int v = 0, one = 1, rc;
    CHECK_MPI(MPI_Irecv(&v, 1, MPI_INT, me, 77, MPI_COMM_WORLD, &r));
    copy = r;
    CHECK_MPI(MPI_Request_free(&r));
    CHECK(r == MPI_REQUEST_NULL, "Request_free did not set MPI_REQUEST_NULL");
    rc = MPI_Wait(&copy, MPI_STATUS_IGNORE);
    /* The freed receive still completes: give it its message. */
    CHECK_MPI(MPI_Send(&one, 1, MPI_INT, me, 77, MPI_COMM_WORLD));
    return rc;
}
/* A freed communicator handle stays invalid across 300 dup/free cycles of its slot. */
static int c_stale_comm(void) {
    MPI_Comm old, c;
    int n;
    CHECK_MPI(MPI_Comm_dup(MPI_COMM_SELF, &old));
    c = old;
    CHECK_MPI(MPI_Comm_free(&c));
    for (int i = 0; i < 300; i++) {
        CHECK_MPI(MPI_Comm_dup(MPI_COMM_SELF, &c));
        CHECK(c != old, "cycle %d: a new communicator got the freed handle", i);
        CHECK_MPI(MPI_Comm_free(&c));
    }
    return MPI_Comm_size(old, &n);
}
static int c_stale_type(void) {
    MPI_Datatype old, t;
    int n;
    CHECK_MPI(MPI_Type_contiguous(2, MPI_INT, &old));
    t = old;
    CHECK_MPI(MPI_Type_free(&t));
    for (int i = 0; i < 300; i++) {
        CHECK_MPI(MPI_Type_contiguous(3, MPI_INT, &t));
        CHECK(t != old, "cycle %d: a new datatype got the freed handle", i);
        CHECK_MPI(MPI_Type_free(&t));
    }
    return MPI_Type_size(old, &n);
}
/* The integer form of a freed handle stays invalid too, and a live one converts both ways. */
static int c_stale_comm_f2c(void) {
    MPI_Comm a, b;
    MPI_Fint fa;
    int n;
    CHECK_MPI(MPI_Comm_dup(MPI_COMM_SELF, &a));
    fa = MPI_Comm_c2f(a);
    CHECK(MPI_Comm_f2c(fa) == a, "c2f/f2c round trip of a live communicator");
    CHECK_MPI(MPI_Comm_free(&a));
    CHECK_MPI(MPI_Comm_dup(MPI_COMM_SELF, &b));
    CHECK(MPI_Comm_f2c(MPI_Comm_c2f(b)) == b, "round trip of the new communicator");
    int rc = MPI_Comm_size(MPI_Comm_f2c(fa), &n);
    CHECK_MPI(MPI_Comm_free(&b));
    return rc;
}
/* An error without an object goes to MPI_COMM_SELF's handler, not MPI_COMM_WORLD's. */
static int c_no_object_self(void) {
    MPI_Datatype t;
    int rc;
    MPI_Errhandler w;
    CHECK_MPI(MPI_Comm_get_errhandler(MPI_COMM_WORLD, &w));
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
    rc = MPI_Type_vector(-1, 1, 1, MPI_INT, &t);
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, w));
    return rc;
}

#define C(fn, call, cls) {#fn, call, cls, fn}
static const struct mcase cases[] = {
    C(c_send_inplace, "MPI_Send", MPI_ERR_BUFFER),
    C(c_send_null, "MPI_Send", MPI_ERR_BUFFER),
    C(c_send_auto, "MPI_Send", MPI_ERR_BUFFER),
    C(c_ssend_inplace, "MPI_Ssend", MPI_ERR_BUFFER),
    C(c_bsend_inplace, "MPI_Bsend", MPI_ERR_BUFFER),
    C(c_rsend_null, "MPI_Rsend", MPI_ERR_BUFFER),
    C(c_isend_inplace, "MPI_Isend", MPI_ERR_BUFFER),
    C(c_issend_null, "MPI_Issend", MPI_ERR_BUFFER),
    C(c_ibsend_inplace, "MPI_Ibsend", MPI_ERR_BUFFER),
    C(c_irsend_inplace, "MPI_Irsend", MPI_ERR_BUFFER),
    C(c_send_c_inplace, "MPI_Send_c", MPI_ERR_BUFFER),
    C(c_recv_inplace, "MPI_Recv", MPI_ERR_BUFFER),
    C(c_recv_null, "MPI_Recv", MPI_ERR_BUFFER),
    C(c_recv_c_null, "MPI_Recv_c", MPI_ERR_BUFFER),
    C(c_irecv_null, "MPI_Irecv", MPI_ERR_BUFFER),
    C(c_irecv_inplace, "MPI_Irecv", MPI_ERR_BUFFER),
    C(c_sendrecv_sinplace, "MPI_Sendrecv", MPI_ERR_BUFFER),
    C(c_sendrecv_rinplace, "MPI_Sendrecv", MPI_ERR_BUFFER),
    C(c_sendrecv_rnull, "MPI_Sendrecv", MPI_ERR_BUFFER),
    C(c_isendrecv_inplace, "MPI_Isendrecv", MPI_ERR_BUFFER),
    C(c_sendrecv_replace_inplace, "MPI_Sendrecv_replace", MPI_ERR_BUFFER),
    C(c_send_init_inplace, "MPI_Send_init", MPI_ERR_BUFFER),
    C(c_recv_init_null, "MPI_Recv_init", MPI_ERR_BUFFER),
    C(c_mrecv_inplace, "MPI_Mrecv", MPI_ERR_BUFFER),
    C(c_send_count, "MPI_Send", MPI_ERR_COUNT),
    C(c_send_tag, "MPI_Send", MPI_ERR_TAG),
    C(c_send_rank, "MPI_Send", MPI_ERR_RANK),
    C(c_send_type, "MPI_Send", MPI_ERR_TYPE),
    C(c_send_comm, "MPI_Send", MPI_ERR_COMM),
    C(c_bcast_inplace, "MPI_Bcast", MPI_ERR_BUFFER),
    C(c_bcast_null, "MPI_Bcast", MPI_ERR_BUFFER),
    C(c_bcast_big_inplace, "MPI_Bcast", MPI_ERR_BUFFER),
    C(c_ibcast_inplace, "MPI_Ibcast", MPI_ERR_BUFFER),
    C(c_bcast_init_inplace, "MPI_Bcast_init", MPI_ERR_BUFFER),
    C(c_bcast_c_inplace, "MPI_Bcast_c", MPI_ERR_BUFFER),
    C(c_allreduce_rinplace, "MPI_Allreduce", MPI_ERR_BUFFER),
    C(c_allreduce_both, "MPI_Allreduce", MPI_ERR_BUFFER),
    C(c_allreduce_rnull, "MPI_Allreduce", MPI_ERR_BUFFER),
    C(c_allreduce_snull, "MPI_Allreduce", MPI_ERR_BUFFER),
    C(c_iallreduce_rinplace, "MPI_Iallreduce", MPI_ERR_BUFFER),
    C(c_allreduce_init_rinplace, "MPI_Allreduce_init", MPI_ERR_BUFFER),
    C(c_allreduce_c_both, "MPI_Allreduce_c", MPI_ERR_BUFFER),
    C(c_scan_rinplace, "MPI_Scan", MPI_ERR_BUFFER),
    C(c_exscan_rinplace, "MPI_Exscan", MPI_ERR_BUFFER),
    C(c_allgather_rinplace, "MPI_Allgather", MPI_ERR_BUFFER),
    C(c_allgatherv_rinplace, "MPI_Allgatherv", MPI_ERR_BUFFER),
    C(c_alltoall_rinplace, "MPI_Alltoall", MPI_ERR_BUFFER),
    C(c_alltoall_snull, "MPI_Alltoall", MPI_ERR_BUFFER),
    C(c_alltoallv_rinplace, "MPI_Alltoallv", MPI_ERR_BUFFER),
    C(c_alltoallw_rinplace, "MPI_Alltoallw", MPI_ERR_BUFFER),
    C(c_reduce_scatter_block_rinplace, "MPI_Reduce_scatter_block", MPI_ERR_BUFFER),
    C(c_reduce_scatter_rinplace, "MPI_Reduce_scatter", MPI_ERR_BUFFER),
    C(c_reduce_root_rinplace, "MPI_Reduce", MPI_ERR_BUFFER),
    C(c_reduce_root_rnull, "MPI_Reduce", MPI_ERR_BUFFER),
    C(c_ireduce_root_both, "MPI_Ireduce", MPI_ERR_BUFFER),
    C(c_gather_root_rinplace, "MPI_Gather", MPI_ERR_BUFFER),
    C(c_igather_root_rnull, "MPI_Igather", MPI_ERR_BUFFER),
    C(c_gatherv_root_rinplace, "MPI_Gatherv", MPI_ERR_BUFFER),
    C(c_scatter_root_sinplace, "MPI_Scatter", MPI_ERR_BUFFER),
    C(c_scatterv_root_snull, "MPI_Scatterv", MPI_ERR_BUFFER),
    C(c_reduce_local_in_inplace, "MPI_Reduce_local", MPI_ERR_BUFFER),
    C(c_reduce_local_io_null, "MPI_Reduce_local", MPI_ERR_BUFFER),
    C(c_reduce_local_c_inplace, "MPI_Reduce_local_c", MPI_ERR_BUFFER),
    C(c_pack_in_inplace, "MPI_Pack", MPI_ERR_BUFFER),
    C(c_pack_out_null, "MPI_Pack", MPI_ERR_BUFFER),
    C(c_unpack_out_inplace, "MPI_Unpack", MPI_ERR_BUFFER),
    C(c_pack_external_in_null, "MPI_Pack_external", MPI_ERR_BUFFER),
    C(c_buffer_attach_inplace, "MPI_Buffer_attach", MPI_ERR_BUFFER),
    C(c_error_class_bad, "MPI_Error_class", MPI_ERR_ARG),
    C(c_error_string_bad, "MPI_Error_string", MPI_ERR_ARG),
    C(c_wait_freed_copy, "MPI_Wait", MPI_ERR_REQUEST),
    C(c_stale_comm, "MPI_Comm_size", MPI_ERR_COMM),
    C(c_stale_type, "MPI_Type_size", MPI_ERR_TYPE),
    C(c_stale_comm_f2c, "MPI_Comm_size", MPI_ERR_COMM),
    C(c_no_object_self, "MPI_Type_vector", MPI_ERR_COUNT),
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

static void *alloc_buf(size_t bytes, int device) {
    void *p = NULL;
#ifdef ERR_MATRIX_DEVICE
    if (device) {
        CHECK(cudaMalloc_(&p, bytes) == 0, "cudaMalloc of %zu bytes", bytes);
        CHECK(cudaMemset_(p, 0, bytes) == 0, "cudaMemset");
        return p;
    }
#else
    (void)device;
#endif
    p = calloc(1, bytes);
    CHECK(p != NULL, "calloc");
    return p;
}

/* Legal uses next to the misuses: they must succeed. */
static void legal_uses(void) {
    /* MPI_BOTTOM (NULL) with a type map of absolute addresses. */
    int a[N] = {1, 2, 3, 4}, b[N] = {0};
    MPI_Aint addr;
    MPI_Datatype abs_t, zero_t;
    int len = N;
    CHECK_MPI(MPI_Get_address(a, &addr));
    CHECK_MPI(MPI_Type_create_hindexed(1, &len, &addr, MPI_INT, &abs_t));
    CHECK_MPI(MPI_Type_commit(&abs_t));
    CHECK_MPI(MPI_Sendrecv(MPI_BOTTOM, 1, abs_t, me, 5, b, N, MPI_INT, me, 5, MPI_COMM_WORLD, &st));
    CHECK(b[0] == 1 && b[3] == 4, "MPI_BOTTOM send got %d %d", b[0], b[3]);
    CHECK_MPI(MPI_Type_free(&abs_t));
    /* NULL with a positive count of a zero-size type touches nothing. */
    CHECK_MPI(MPI_Type_contiguous(0, MPI_INT, &zero_t));
    CHECK_MPI(MPI_Type_commit(&zero_t));
    CHECK_MPI(MPI_Sendrecv(NULL, 3, zero_t, me, 6, NULL, 3, zero_t, me, 6, MPI_COMM_WORLD, &st));
    CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, b, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    CHECK_MPI(MPI_Type_free(&zero_t));
    /* NULL to and from MPI_PROC_NULL, and count 0. */
    CHECK_MPI(MPI_Send(NULL, N, MPI_INT, MPI_PROC_NULL, 1, MPI_COMM_WORLD));
    CHECK_MPI(MPI_Recv(NULL, N, MPI_INT, MPI_PROC_NULL, 1, MPI_COMM_WORLD, &st));
    CHECK_MPI(MPI_Sendrecv(NULL, 0, MPI_INT, me, 7, NULL, 0, MPI_INT, me, 7, MPI_COMM_WORLD, &st));
    CHECK_MPI(MPI_Bcast(NULL, 0, MPI_INT, 0, MPI_COMM_WORLD));
    /* Error codes that exist. */
    int cls;
    CHECK_MPI(MPI_Error_class(MPI_ERR_BUFFER, &cls));
    CHECK(cls == MPI_ERR_BUFFER, "class of MPI_ERR_BUFFER is %d", cls);
    CHECK_MPI(MPI_Error_class(MPI_ERR_LASTCODE, &cls));
}

static const char *cname(const struct mcase *c) { return c->name + 2; }

static int run_case(const struct mcase *c) {
    rq = MPI_REQUEST_NULL;
    return c->fn();
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "return";
    if (!strcmp(mode, "list")) {
        for (int i = 0; i < NCASES; i++) printf("%s %s\n", cname(&cases[i]), cases[i].call);
        return 0;
    }
    int device = argc > 2 && !strcmp(argv[2], "device");
    CHECK_MPI(MPI_Init(&argc, &argv));
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    ct_world_rank = me;
    peer = (me + 1) % np;
#ifdef ERR_MATRIX_DEVICE
    if (device) {
        const char *why = cudart_load();
        if (why) {
            if (me == 0) printf("SKIP: no CUDA device (%s)\n", why);
            MPI_Finalize();
            return 0;
        }
        int ndev = 0;
        cudaGetDeviceCount_(&ndev);
        cudaSetDevice_(me % ndev);
    }
#else
    if (device) {
        if (me == 0) printf("SKIP: err_matrix built without device support (tests/gpu/run.sh builds it with it)\n");
        MPI_Finalize();
        return 0;
    }
#endif
    hbuf = alloc_buf(N * sizeof(int), device);
    hbuf2 = alloc_buf((size_t)N * np * sizeof(int), device);
    for (int i = 0; i < np && i < 64; i++) {
        counts[i] = 1;
        displs[i] = i;
        types[i] = MPI_INT;
    }
    if (!strcmp(mode, "fatal")) {
        CHECK(argc > 2, "usage: err_matrix fatal NAME");
        for (int i = 0; i < NCASES; i++) {
            if (!strcmp(cname(&cases[i]), argv[2])) {
                run_case(&cases[i]);
                fprintf(stderr, "FAIL: %s returned under MPI_ERRORS_ARE_FATAL\n", argv[2]);
                return 3;
            }
        }
        fprintf(stderr, "FAIL: no case %s\n", argv[2]);
        return 2;
    }
    CHECK(!strcmp(mode, "return"), "unknown mode %s", mode);
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));
    legal_uses();
    for (int i = 0; i < NCASES; i++) {
        const struct mcase *c = &cases[i];
        int rc = run_case(c), cls = -1;
        MPI_Error_class(rc, &cls);
        CHECK(rc != MPI_SUCCESS && cls == c->cls, "%s (%s): returned %d, class %d, want %d", cname(c),
              c->call, rc, cls, c->cls);
        CHECK(rq == MPI_REQUEST_NULL, "%s: a failed call returned a request", cname(c));
        /* The library is usable after each: a collective every rank reaches. */
        int one = 1, sum = 0;
        CHECK_MPI(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
        CHECK(sum == np, "%s: allreduce after the error gave %d", cname(c), sum);
    }
    legal_uses();
    MPI_Barrier(MPI_COMM_WORLD);
    if (me == 0) printf("OK err_matrix (%d cases%s)\n", NCASES, device ? ", device buffers" : "");
    /* tests/gpu/run.sh reads the GPU suite's verdict line. */
    if (me == 0 && device) printf("PASS: gpu_err_matrix %d ranks, 0 errors\n", np);
    MPI_Finalize();
    return 0;
}
