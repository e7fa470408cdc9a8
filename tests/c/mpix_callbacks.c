/* User operations and error handlers with state (MPICH's MPIX_Op_create_x and
 * MPIX_Comm_create_errhandler_x, mpi-ext.h) and without (MPI_Op_create(_c),
 * MPI_Comm_create_errhandler), many of each alive at once: every op is used in MPI_Allreduce
 * and its result checked, every handler is invoked through MPI_Comm_call_errhandler and its
 * arguments checked. An op's destructor runs once, after MPI_Op_free and the last pending call
 * that uses the op (nonblocking and persistent calls included); an error handler's destructor
 * runs at MPI_Finalize. Bad arguments (NULL function, NULL output) are MPI_ERR_ARG and create
 * nothing.
 *
 *   mpix_callbacks              the checks above
 *   mpix_callbacks fatal_op     MPIX_Op_create_x(NULL, ...) under MPI_ERRORS_ARE_FATAL
 *   mpix_callbacks fatal_errh   MPIX_Comm_create_errhandler_x(f, NULL, NULL, NULL) likewise */
#include "ctest.h"
#include <mpi-ext.h>

#define N 200

struct op_state {
    int index;      /* this op's number: the reduction adds it once per combination */
    int calls;      /* calls of the user function */
    int destroyed;  /* calls of the destructor */
};
static struct op_state ops_st[N];

/* (a, b) -> a + b + index: associative and commutative. */
static void add_index(void *in, void *inout, MPI_Count len, MPI_Datatype dt, void *extra)
{
    struct op_state *s = extra;
    CHECK(dt == MPI_INT, "op %d: datatype is not MPI_INT", s->index);
    CHECK(len >= 1 && len <= 4, "op %d: len %lld", s->index, (long long)len);
    for (MPI_Count i = 0; i < len; i++) ((int *)inout)[i] += ((int *)in)[i] + s->index;
    s->calls++;
}

static void op_destroy(void *extra)
{
    ((struct op_state *)extra)->destroyed++;
}

static int std_calls;
static void add_one(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    CHECK(*dt == MPI_INT, "MPI_User_function: datatype is not MPI_INT");
    for (int i = 0; i < *len; i++) ((int *)inout)[i] += ((int *)in)[i] + 1;
    std_calls++;
}
static void add_two_c(void *in, void *inout, MPI_Count *len, MPI_Datatype *dt)
{
    CHECK(*dt == MPI_INT, "MPI_User_function_c: datatype is not MPI_INT");
    for (MPI_Count i = 0; i < *len; i++) ((int *)inout)[i] += ((int *)in)[i] + 2;
    std_calls++;
}

/* The allreduce of `rank + j` (j = 0..3) with an op that adds `extra` per combination. */
static void check_sum(const int *got, int extra, const char *what, int i)
{
    int size = ct_world_size, base = size * (size - 1) / 2;
    for (int j = 0; j < 4; j++) {
        int want = base + j * size + (size - 1) * extra;
        CHECK(got[j] == want, "%s %d: element %d is %d, want %d", what, i, j, got[j], want);
    }
}

static void fill(int *v)
{
    for (int j = 0; j < 4; j++) v[j] = ct_world_rank + j;
}

struct errh_state {
    int index;
    int calls;
    int destroyed;
};
static struct errh_state errh_st[N];
static MPI_Comm errh_comm;
static int errh_code;

static void errh_x(MPI_Comm comm, int code, void *extra)
{
    struct errh_state *s = extra;
    CHECK(comm == errh_comm, "handler %d: wrong communicator", s->index);
    CHECK(code == errh_code, "handler %d: code %d, want %d", s->index, code, errh_code);
    s->calls++;
}
static void errh_destroy(void *extra)
{
    ((struct errh_state *)extra)->destroyed++;
}

static int std_errh_calls;
static void errh_std(MPI_Comm *comm, int *code, ...)
{
    CHECK(*comm == errh_comm, "MPI_Comm_errhandler_function: wrong communicator");
    CHECK(*code == errh_code, "MPI_Comm_errhandler_function: code %d, want %d", *code, errh_code);
    std_errh_calls++;
}

static void ops_x(void)
{
    MPI_Op op[N];
    int in[4], out[4];
    for (int i = 0; i < N; i++) {
        ops_st[i].index = i;
        CHECK_MPI(MPIX_Op_create_x(add_index, op_destroy, 1, &ops_st[i], &op[i]));
    }
    for (int i = 0; i < N; i++) {
        int commute = 0;
        CHECK_MPI(MPI_Op_commutative(op[i], &commute));
        CHECK(commute, "op %d not commutative", i);
        fill(in);
        CHECK_MPI(MPI_Allreduce(in, out, 4, MPI_INT, op[i], MPI_COMM_WORLD));
        check_sum(out, i, "MPIX_Op_create_x op", i);
        CHECK(ct_world_size == 1 || ops_st[i].calls > 0, "op %d never called", i);
    }
    for (int i = 0; i < N; i++) {
        CHECK(ops_st[i].destroyed == 0, "op %d destroyed before MPI_Op_free", i);
        CHECK_MPI(MPI_Op_free(&op[i]));
        CHECK(op[i] == MPI_OP_NULL, "op %d not MPI_OP_NULL after free", i);
        CHECK(ops_st[i].destroyed == 1, "op %d: destructor ran %d times at free", i, ops_st[i].destroyed);
    }

    /* Freed while a nonblocking call uses it: the destructor waits for the call. */
    struct op_state nb = {7, 0, 0};
    MPI_Op nbop;
    MPI_Request rq;
    CHECK_MPI(MPIX_Op_create_x(add_index, op_destroy, 1, &nb, &nbop));
    fill(in);
    CHECK_MPI(MPI_Iallreduce(in, out, 4, MPI_INT, nbop, MPI_COMM_WORLD, &rq));
    CHECK_MPI(MPI_Op_free(&nbop));
    CHECK(nb.destroyed == 0, "destructor ran while an MPI_Iallreduce uses the op");
    CHECK_MPI(MPI_Wait(&rq, MPI_STATUS_IGNORE));
    check_sum(out, 7, "MPI_Iallreduce with a freed op", 0);
    CHECK(nb.destroyed == 1, "destructor ran %d times after the MPI_Iallreduce completed", nb.destroyed);

    /* A persistent call keeps it until MPI_Request_free. */
    struct op_state ps = {11, 0, 0};
    MPI_Op pop;
    CHECK_MPI(MPIX_Op_create_x(add_index, op_destroy, 1, &ps, &pop));
    fill(in);
    CHECK_MPI(MPI_Allreduce_init(in, out, 4, MPI_INT, pop, MPI_COMM_WORLD, MPI_INFO_NULL, &rq));
    CHECK_MPI(MPI_Op_free(&pop));
    for (int round = 0; round < 3; round++) {
        memset(out, 0, sizeof out);
        CHECK_MPI(MPI_Start(&rq));
        CHECK_MPI(MPI_Wait(&rq, MPI_STATUS_IGNORE));
        check_sum(out, 11, "persistent allreduce round", round);
        CHECK(ps.destroyed == 0, "destructor ran while a persistent request uses the op");
    }
    CHECK_MPI(MPI_Request_free(&rq));
    CHECK(ps.destroyed == 1, "destructor ran %d times after MPI_Request_free", ps.destroyed);

    /* No destructor: allowed (NULL). */
    struct op_state nd = {3, 0, 0};
    MPI_Op ndop;
    CHECK_MPI(MPIX_Op_create_x(add_index, NULL, 1, &nd, &ndop));
    fill(in);
    CHECK_MPI(MPI_Allreduce(in, out, 4, MPI_INT, ndop, MPI_COMM_WORLD));
    check_sum(out, 3, "op without destructor", 0);
    CHECK_MPI(MPI_Op_free(&ndop));
    CHECK(nd.destroyed == 0, "a NULL destructor was called");
}

static void ops_std(void)
{
    MPI_Op op[N];
    int in[4], out[4];
    for (int i = 0; i < N; i++) {
        if (i % 2)
            CHECK_MPI(MPI_Op_create_c(add_two_c, 1, &op[i]));
        else
            CHECK_MPI(MPI_Op_create(add_one, 1, &op[i]));
    }
    for (int i = 0; i < N; i++) {
        fill(in);
        CHECK_MPI(MPI_Allreduce(in, out, 4, MPI_INT, op[i], MPI_COMM_WORLD));
        check_sum(out, i % 2 ? 2 : 1, "standard op", i);
    }
    CHECK(ct_world_size == 1 || std_calls >= N, "standard ops called %d times", std_calls);
    for (int i = 0; i < N; i++) CHECK_MPI(MPI_Op_free(&op[i]));
}

static void errhandlers(void)
{
    MPI_Errhandler eh[N];
    CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &errh_comm));
    for (int i = 0; i < N; i++) {
        errh_st[i].index = i;
        CHECK_MPI(MPIX_Comm_create_errhandler_x(errh_x, errh_destroy, &errh_st[i], &eh[i]));
    }
    for (int i = 0; i < N; i++) {
        CHECK_MPI(MPI_Comm_set_errhandler(errh_comm, eh[i]));
        errh_code = i % 2 ? MPI_ERR_OTHER : MPI_ERR_ARG;
        CHECK_MPI(MPI_Comm_call_errhandler(errh_comm, errh_code));
        CHECK(errh_st[i].calls == 1, "handler %d called %d times", i, errh_st[i].calls);
        if (i > 0) CHECK(errh_st[i - 1].calls == 1, "handler %d called again", i - 1);
    }
    for (int i = 0; i < N; i++) CHECK_MPI(MPI_Errhandler_free(&eh[i]));
    /* The last one stays attached to the communicator after MPI_Errhandler_free. */
    errh_code = MPI_ERR_COUNT;
    CHECK_MPI(MPI_Comm_call_errhandler(errh_comm, errh_code));
    CHECK(errh_st[N - 1].calls == 2, "freed attached handler called %d times", errh_st[N - 1].calls);

    for (int i = 0; i < N; i++) CHECK_MPI(MPI_Comm_create_errhandler(errh_std, &eh[i]));
    for (int i = 0; i < N; i++) {
        CHECK_MPI(MPI_Comm_set_errhandler(errh_comm, eh[i]));
        errh_code = MPI_ERR_TAG;
        CHECK_MPI(MPI_Comm_call_errhandler(errh_comm, errh_code));
        CHECK(std_errh_calls == i + 1, "standard handler %d: %d calls", i, std_errh_calls);
        CHECK_MPI(MPI_Errhandler_free(&eh[i]));
    }
    CHECK_MPI(MPI_Comm_set_errhandler(errh_comm, MPI_ERRORS_RETURN));
    CHECK_MPI(MPI_Comm_free(&errh_comm));
    for (int i = 0; i < N; i++)
        CHECK(errh_st[i].destroyed == 0, "handler %d destroyed before MPI_Finalize", i);
}

static void bad_arguments(void)
{
    struct op_state s = {1, 0, 0};
    MPI_Op op = MPI_OP_NULL;
    MPI_Errhandler eh = MPI_ERRHANDLER_NULL;
    /* Errors tied to no object are raised on MPI_COMM_SELF. */
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));
    CHECK_CLASS(MPIX_Op_create_x(NULL, op_destroy, 1, &s, &op), MPI_ERR_ARG);
    CHECK_CLASS(MPIX_Op_create_x(add_index, op_destroy, 1, &s, NULL), MPI_ERR_ARG);
    CHECK(op == MPI_OP_NULL && s.destroyed == 0, "a failed MPIX_Op_create_x created an op or ran the destructor");
    CHECK_CLASS(MPI_Op_create(NULL, 1, &op), MPI_ERR_ARG);
    CHECK_CLASS(MPI_Op_create(add_one, 1, NULL), MPI_ERR_ARG);
    CHECK_CLASS(MPIX_Comm_create_errhandler_x(NULL, errh_destroy, &s, &eh), MPI_ERR_ARG);
    CHECK_CLASS(MPIX_Comm_create_errhandler_x(errh_x, errh_destroy, &s, NULL), MPI_ERR_ARG);
    CHECK_CLASS(MPI_Comm_create_errhandler(NULL, &eh), MPI_ERR_ARG);
    CHECK_CLASS(MPI_Comm_create_errhandler(errh_std, NULL), MPI_ERR_ARG);
    CHECK(eh == MPI_ERRHANDLER_NULL && s.destroyed == 0, "a failed create made a handler or ran the destructor");
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_ARE_FATAL));
}

int main(int argc, char **argv)
{
    ct_init(&argc, &argv);
    if (argc > 1 && strcmp(argv[1], "fatal_op") == 0) {
        MPI_Op op;
        MPIX_Op_create_x(NULL, NULL, 1, NULL, &op);
        return 3; /* not reached: the error is fatal */
    }
    if (argc > 1 && strcmp(argv[1], "fatal_errh") == 0) {
        MPIX_Comm_create_errhandler_x(errh_x, NULL, NULL, NULL);
        return 3;
    }
    ops_x();
    ops_std();
    errhandlers();
    bad_arguments();
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    CHECK_MPI(MPI_Finalize());
    /* The handlers' destructors ran at MPI_Finalize, once each. */
    for (int i = 0; i < N; i++) {
        if (errh_st[i].destroyed != 1) {
            fprintf(stderr, "FAIL rank %d: handler %d: destructor ran %d times by MPI_Finalize\n",
                    ct_world_rank, i, errh_st[i].destroyed);
            return 1;
        }
    }
    if (ct_world_rank == 0) printf("OK mpix_callbacks\n");
    return 0;
}
