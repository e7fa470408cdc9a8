/* A C MPI program built with MPICH's own mpicc (PyPI `mpich` wheel, MPICH's mpi.h) and run on
 * gpumpi's libmpi.so.12: every value it sees (handles, constants, statuses, error classes) is
 * MPICH's, so each check below fails if libmpi.so.12 translates something wrong. It creates
 * more user ops and error handlers at once than a fixed table of trampolines would hold.
 * Run by tests/clients/run_mpich_abi.sh at 1, 2 and 4 ranks; prints "abi: ok" on rank 0. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size, failures;
#define CHECK(cond, ...)                                                         \
    do {                                                                         \
        if (!(cond)) {                                                           \
            failures++;                                                          \
            fprintf(stderr, "rank %d: %s:%d: check failed: %s: ", rank, __FILE__, \
                    __LINE__, #cond);                                            \
            fprintf(stderr, __VA_ARGS__);                                        \
            fprintf(stderr, "\n");                                               \
        }                                                                        \
    } while (0)

static MPI_Datatype seen_type = MPI_DATATYPE_NULL;
/* Element-wise (a, b) -> a + b + 1: associative and commutative, unlike any predefined op. */
static void add_one(void *in, void *inout, int *len, MPI_Datatype *dt) {
    seen_type = *dt;
    for (int i = 0; i < *len; i++) ((int *)inout)[i] += ((int *)in)[i] + 1;
}

static int copies, deletes;
static int count_copy(MPI_Comm c, int k, void *extra, void *in, void *out, int *flag) {
    (void)c; (void)k;
    copies++;
    CHECK(extra == &copies, "extra_state %p", extra);
    *(void **)out = in;
    *flag = 1;
    return MPI_SUCCESS;
}
static int count_delete(MPI_Comm c, int k, void *val, void *extra) {
    (void)c; (void)k; (void)val; (void)extra;
    deletes++;
    return MPI_SUCCESS;
}

static int errh_calls, errh_class;
static void my_errh(MPI_Comm *comm, int *code, ...) {
    errh_calls++;
    CHECK(*comm == MPI_COMM_WORLD, "error handler got comm %#x", (unsigned)*comm);
    MPI_Error_class(*code, &errh_class);
}

/* More user ops and error handlers than any fixed table holds, alive at once: MPIX_ ones with
 * state (MPICH's MPIX_Op_create_x, MPIX_Comm_create_errhandler_x) and standard ones. */
#define MANY 100
struct x_state { int index, calls, destroyed; };
static struct x_state op_st[MANY], eh_st[MANY];
static MPI_Comm eh_comm;
static int eh_code;
static void add_index_x(void *in, void *inout, MPI_Count len, MPI_Datatype dt, void *extra) {
    struct x_state *s = extra;
    CHECK(dt == MPI_INT, "MPIX op %d: datatype %#x", s->index, (unsigned)dt);
    for (MPI_Count i = 0; i < len; i++) ((int *)inout)[i] += ((int *)in)[i] + s->index;
    s->calls++;
}
static void destroy_x(void *extra) { ((struct x_state *)extra)->destroyed++; }
static void errh_x(MPI_Comm comm, int code, void *extra) {
    struct x_state *s = extra;
    CHECK(comm == eh_comm, "MPIX handler %d: comm %#x", s->index, (unsigned)comm);
    CHECK(code == eh_code, "MPIX handler %d: code %d, want %d", s->index, code, eh_code);
    s->calls++;
}
static int std_eh_calls;
static void errh_std(MPI_Comm *comm, int *code, ...) {
    CHECK(*comm == eh_comm && *code == eh_code, "handler: comm %#x code %d", (unsigned)*comm, *code);
    std_eh_calls++;
}

static void many_ops_and_handlers(void) {
    MPI_Op xop[MANY], sop[MANY];
    for (int i = 0; i < MANY; i++) {
        op_st[i].index = i;
        MPI_Op_create(add_one, 1, &sop[i]);
        MPIX_Op_create_x(add_index_x, destroy_x, 1, &op_st[i], &xop[i]);
    }
    for (int i = 0; i < MANY; i++) {
        int v = rank, r = -1;
        MPI_Allreduce(&v, &r, 1, MPI_INT, xop[i], MPI_COMM_WORLD);
        CHECK(r == size * (size - 1) / 2 + (size - 1) * i, "MPIX op %d: %d", i, r);
        r = -1;
        MPI_Allreduce(&v, &r, 1, MPI_INT, sop[i], MPI_COMM_WORLD);
        CHECK(r == size * (size - 1) / 2 + size - 1, "op %d: %d", i, r);
    }
    for (int i = 0; i < MANY; i++) {
        MPI_Op_free(&sop[i]);
        MPI_Op_free(&xop[i]);
        CHECK(xop[i] == MPI_OP_NULL && op_st[i].destroyed == 1, "MPIX op %d: destructor ran %d times", i, op_st[i].destroyed);
    }
    MPI_Errhandler xeh[MANY], seh[MANY];
    MPI_Comm_dup(MPI_COMM_WORLD, &eh_comm);
    for (int i = 0; i < MANY; i++) {
        eh_st[i].index = i;
        MPI_Comm_create_errhandler(errh_std, &seh[i]);
        MPIX_Comm_create_errhandler_x(errh_x, destroy_x, &eh_st[i], &xeh[i]);
    }
    for (int i = 0; i < MANY; i++) {
        eh_code = MPI_ERR_TAG;
        MPI_Comm_set_errhandler(eh_comm, xeh[i]);
        MPI_Comm_call_errhandler(eh_comm, eh_code);
        CHECK(eh_st[i].calls == 1, "MPIX handler %d: %d calls", i, eh_st[i].calls);
        MPI_Comm_set_errhandler(eh_comm, seh[i]);
        MPI_Comm_call_errhandler(eh_comm, eh_code);
        CHECK(std_eh_calls == i + 1, "handler %d: %d calls", i, std_eh_calls);
    }
    for (int i = 0; i < MANY; i++) {
        MPI_Errhandler_free(&seh[i]);
        MPI_Errhandler_free(&xeh[i]);
    }
    MPI_Comm_free(&eh_comm);
    /* Bad input: MPI_ERR_ARG, nothing created. */
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    MPI_Op bad = MPI_OP_NULL;
    int rc = MPIX_Op_create_x(NULL, destroy_x, 1, &op_st[0], &bad), cls = -1;
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_ARG && bad == MPI_OP_NULL, "MPIX_Op_create_x(NULL): class %d", cls);
    rc = MPIX_Comm_create_errhandler_x(errh_x, destroy_x, &eh_st[0], NULL);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_ARG, "MPIX_Comm_create_errhandler_x(..., NULL): class %d", cls);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_ARE_FATAL);
}

int main(int argc, char **argv) {
    int provided, major = 0, minor = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(provided >= MPI_THREAD_SINGLE && provided <= MPI_THREAD_MULTIPLE, "provided %d", provided);
    MPI_Abi_get_version(&major, &minor);
    CHECK(major == -1 && minor == -1, "MPI_Abi_get_version %d.%d (not an MPICH-ABI answer)", major, minor);

    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int liblen = 0;
    MPI_Get_library_version(lib, &liblen);
    CHECK(strncmp(lib, "gpumpi", 6) == 0, "not gpumpi's library: %.40s", lib);

    char name[MPI_MAX_PROCESSOR_NAME];
    int len = -1;
    MPI_Get_processor_name(name, &len);
    CHECK(len > 0 && len < MPI_MAX_PROCESSOR_NAME && strlen(name) == (size_t)len, "processor name length %d", len);

    /* Point-to-point: ring with wildcards; the status is MPICH's 5-int layout. */
    int next = (rank + 1) % size, prev = (rank - 1 + size) % size;
    int out[5] = {rank, rank, rank, rank, rank}, in[5] = {-1, -1, -1, -1, -1};
    MPI_Status st;
    MPI_Request rq;
    MPI_Irecv(in, 5, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &rq);
    MPI_Send(out, 3, MPI_INT, next, 100 + rank, MPI_COMM_WORLD);
    MPI_Wait(&rq, &st);
    int count = -1;
    MPI_Get_count(&st, MPI_INT, &count);
    CHECK(rq == MPI_REQUEST_NULL, "request %#x after MPI_Wait", (unsigned)rq);
    CHECK(st.MPI_SOURCE == prev && st.MPI_TAG == 100 + prev, "status source %d tag %d", st.MPI_SOURCE, st.MPI_TAG);
    CHECK(count == 3 && in[0] == prev && in[3] == -1, "count %d in %d %d", count, in[0], in[3]);
    MPI_Get_count(&st, MPI_BYTE, &count);
    CHECK(count == 12, "byte count %d", count);

    MPI_Barrier(MPI_COMM_WORLD); /* the wildcard receive matched before more messages flow */
    MPI_Recv(in, 5, MPI_INT, MPI_PROC_NULL, 7, MPI_COMM_WORLD, &st);
    MPI_Get_count(&st, MPI_INT, &count);
    CHECK(st.MPI_SOURCE == MPI_PROC_NULL && st.MPI_TAG == MPI_ANY_TAG && count == 0,
          "PROC_NULL status source %d tag %d count %d", st.MPI_SOURCE, st.MPI_TAG, count);

    /* Every rank sends to every rank; MPI_Waitall fills an array of MPICH statuses. */
    int *rbuf = malloc(sizeof(int) * size);
    MPI_Request *rqs = malloc(sizeof(MPI_Request) * 2 * size);
    MPI_Status *sts = malloc(sizeof(MPI_Status) * 2 * size);
    for (int p = 0; p < size; p++) {
        MPI_Irecv(&rbuf[p], 1, MPI_INT, p, 5, MPI_COMM_WORLD, &rqs[p]);
        MPI_Isend(&rank, 1, MPI_INT, p, 5, MPI_COMM_WORLD, &rqs[size + p]);
    }
    MPI_Waitall(2 * size, rqs, sts);
    for (int p = 0; p < size; p++) {
        CHECK(rbuf[p] == p && sts[p].MPI_SOURCE == p && sts[p].MPI_TAG == 5, "from %d: %d src %d", p, rbuf[p], sts[p].MPI_SOURCE);
        CHECK(rqs[p] == MPI_REQUEST_NULL, "request %d not freed", p);
    }

    /* Collectives with MPI_IN_PLACE ((void*)-1 in MPICH). */
    int sum = rank;
    MPI_Allreduce(MPI_IN_PLACE, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    CHECK(sum == size * (size - 1) / 2, "allreduce sum %d", sum);
    double mx = rank;
    MPI_Allreduce(MPI_IN_PLACE, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    CHECK(mx == size - 1, "allreduce max %g", mx);
    for (int p = 0; p < size; p++) rbuf[p] = (p == rank) ? rank * 10 : -1;
    MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, rbuf, 1, MPI_INT, MPI_COMM_WORLD);
    for (int p = 0; p < size; p++) CHECK(rbuf[p] == p * 10, "allgather[%d] %d", p, rbuf[p]);
    int root_val = rank == size - 1 ? 42 : 0;
    MPI_Bcast(&root_val, 1, MPI_INT, size - 1, MPI_COMM_WORLD);
    CHECK(root_val == 42, "bcast %d", root_val);

    /* A user op: the callback sees MPICH's MPI_INT handle. */
    MPI_Op op;
    MPI_Op_create(add_one, 1, &op);
    int v = 1, r = 0;
    MPI_Allreduce(&v, &r, 1, MPI_INT, op, MPI_COMM_WORLD);
    CHECK(r == 2 * size - 1, "user op result %d", r); /* size ones, size - 1 combinations */
    CHECK(size == 1 || seen_type == MPI_INT, "user op datatype %#x", (unsigned)seen_type);
    MPI_Op_free(&op);
    CHECK(op == MPI_OP_NULL, "op after free %#x", (unsigned)op);

    /* Communicators, comparisons, attributes. */
    MPI_Comm dup, half;
    int cmp = -1;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Comm_compare(MPI_COMM_WORLD, dup, &cmp);
    CHECK(cmp == MPI_CONGRUENT, "compare with dup %d", cmp);
    MPI_Comm_compare(MPI_COMM_WORLD, MPI_COMM_WORLD, &cmp);
    CHECK(cmp == MPI_IDENT, "compare with itself %d", cmp);
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
    int hsize;
    MPI_Comm_size(half, &hsize);
    CHECK(hsize == (size + 1 - rank % 2) / 2, "split size %d", hsize);
    int topo = -1;
    MPI_Topo_test(half, &topo);
    CHECK(topo == MPI_UNDEFINED, "topo %d", topo);
    MPI_Comm_free(&half);
    CHECK(half == MPI_COMM_NULL, "comm after free %#x", (unsigned)half);

    int *tag_ub, flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &flag);
    CHECK(flag && *tag_ub >= 32767, "MPI_TAG_UB flag %d", flag);
    int key = MPI_KEYVAL_INVALID, key2 = MPI_KEYVAL_INVALID, attr = 99, *got = NULL;
    MPI_Comm_create_keyval(count_copy, count_delete, &key, &copies);
    MPI_Comm_create_keyval(MPI_COMM_DUP_FN, MPI_COMM_NULL_DELETE_FN, &key2, NULL);
    MPI_Comm_set_attr(dup, key, &attr);
    MPI_Comm_set_attr(dup, key2, &attr);
    MPI_Comm dup2;
    MPI_Comm_dup(dup, &dup2);
    MPI_Comm_get_attr(dup2, key, &got, &flag);
    CHECK(flag && got == &attr && copies == 1, "copied attribute flag %d copies %d", flag, copies);
    got = NULL;
    MPI_Comm_get_attr(dup2, key2, &got, &flag);
    CHECK(flag && got == &attr, "MPI_COMM_DUP_FN attribute flag %d", flag);
    MPI_Comm_free(&dup2);
    MPI_Comm_free(&dup);
    CHECK(deletes == 2, "delete callback ran %d times", deletes);
    MPI_Comm_free_keyval(&key);
    CHECK(key == MPI_KEYVAL_INVALID, "keyval after free %#x", (unsigned)key);
    MPI_Comm_free_keyval(&key2);

    /* Derived datatypes and their envelope. */
    MPI_Datatype vec;
    MPI_Type_vector(3, 1, 2, MPI_INT, &vec);
    MPI_Type_commit(&vec);
    int tsize, ni, na, nd, comb;
    MPI_Type_size(vec, &tsize);
    MPI_Type_get_envelope(vec, &ni, &na, &nd, &comb);
    CHECK(tsize == 12 && comb == MPI_COMBINER_VECTOR && ni == 3 && nd == 1, "vector size %d combiner %d", tsize, comb);
    int src[6] = {1, 2, 3, 4, 5, 6}, dst[3] = {0, 0, 0};
    MPI_Sendrecv(src, 1, vec, rank, 1, dst, 3, MPI_INT, rank, 1, MPI_COMM_WORLD, &st);
    CHECK(dst[0] == 1 && dst[1] == 3 && dst[2] == 5, "vector data %d %d %d", dst[0], dst[1], dst[2]);
    MPI_Type_free(&vec);
    CHECK(vec == MPI_DATATYPE_NULL, "type after free %#x", (unsigned)vec);

    /* Errors come back as MPICH's classes. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN); /* errors tied to no communicator */
    int cls = -1, rc = MPI_Send(out, 1, MPI_INT, size, 0, MPI_COMM_WORLD);
    MPI_Error_class(rc, &cls);
    CHECK(rc != MPI_SUCCESS && cls == MPI_ERR_RANK, "send to rank %d: rc %d class %d", size, rc, cls);
    rc = MPI_Send(out, 1, MPI_DATATYPE_NULL, rank, 0, MPI_COMM_WORLD);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_TYPE, "MPI_DATATYPE_NULL: class %d", cls);
    MPI_Request bad = (MPI_Request)0x7654321;
    rc = MPI_Wait(&bad, MPI_STATUS_IGNORE);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_REQUEST, "invalid request: class %d", cls);
    char msg[MPI_MAX_ERROR_STRING];
    MPI_Error_string(rc, msg, &len);
    CHECK(len > 0 && strlen(msg) == (size_t)len, "error string length %d", len);
    MPI_Errhandler eh;
    MPI_Comm_create_errhandler(my_errh, &eh);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, eh);
    MPI_Errhandler_free(&eh);
    MPI_Send(out, 1, MPI_INT, -5, 0, MPI_COMM_WORLD);
    CHECK(errh_calls == 1 && errh_class == MPI_ERR_RANK, "user error handler: %d calls, class %d", errh_calls, errh_class);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);

    many_ops_and_handlers();

    /* The CUDA-aware query answers through the MPICH ABI too. */
    int cuda = MPIX_Query_cuda_support();
    CHECK(cuda == 0 || cuda == 1, "MPIX_Query_cuda_support %d", cuda);

    int all = failures;
    MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf(all ? "abi: %d FAILED checks\n" : "abi: ok (%d ranks, cuda support %d)\n", all ? all : size, cuda);
    free(rbuf);
    free(rqs);
    free(sts);
    MPI_Finalize();
    /* Error handlers live until MPI_Finalize, which runs their destructors. */
    for (int i = 0; i < MANY; i++)
        if (eh_st[i].destroyed != 1) {
            fprintf(stderr, "rank %d: MPIX handler %d: destructor ran %d times by MPI_Finalize\n", rank, i, eh_st[i].destroyed);
            return 1;
        }
    return all ? 1 : 0;
}
