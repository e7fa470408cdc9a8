/* Mismatched collectives whose ranks would run different protocols (erroneous programs) end in
 * an error on the ranks that wait, never in a hang (the collective consistency check,
 * src/engine/collcheck.rs). Argument `return` (under MPI_ERRORS_RETURN, every case, each
 * followed by a correct collective on the same communicator):
 * - MPI_Bcast on MPI_COMM_WORLD, root 100000 ints (a schedule) and 10 ints elsewhere (the flag
 *   slots), and the reverse: every non-root rank gets MPI_ERR_TRUNCATE;
 * - MPI_Allreduce with 8 ints at rank 0 and 1000 elsewhere on MPI_COMM_WORLD (flag slots vs
 *   schedule), and 256 vs 100000 ints on a dup (different algorithm rows): every rank returns,
 *   one at least with MPI_ERR_TRUNCATE;
 * - MPI_Bcast at rank 0 and MPI_Reduce elsewhere at the same point (100000 ints, on the dup and
 *   on MPI_COMM_WORLD; 4 ints on MPI_COMM_WORLD): every rank returns, the large ones report
 *   MPI_ERR_OTHER somewhere;
 * - MPI_Bcast / MPI_Ibcast of 100000 ints where rank 0 names root 0 and the others root 1 (on the
 *   dup): every rank returns, one at least with MPI_ERR_ROOT.
 * Collectives on MPI_COMM_WORLD between the cases on the dup keep the two communicators'
 * sequence numbers apart. Argument `fatal`: the first bcast under the default handler (the job
 * must end with a message naming MPI_Bcast and the mismatch). A second argument `case=N` runs
 * only the N-th case (1-based) of `return`. */
#include "ctest.h"
#include <string.h>
#include <unistd.h>

static int me, np, only;

/* Whether to run the next case (all of them, or the one `case=N` names). */
static int next_case(void) {
    static int n;
    n++;
    return only == 0 || only == n;
}

static void check_usable(MPI_Comm c, const char *after) {
    int one = 1, sum = 0;
    CHECK_MPI(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, c));
    CHECK(sum == np, "after %s: allreduce gave %d", after, sum);
}

static int class_of(int rc) {
    int cls = MPI_SUCCESS;
    if (rc != MPI_SUCCESS) MPI_Error_class(rc, &cls);
    return cls;
}

/* Whether any rank saw an error (and the job still works on `c`). */
static int anyone(MPI_Comm c, int rc, const char *what) {
    int saw = rc != MPI_SUCCESS, any = 0;
    CHECK_MPI(MPI_Allreduce(&saw, &any, 1, MPI_INT, MPI_MAX, c));
    check_usable(c, what);
    return any;
}

static void bcast_split(MPI_Comm c, int root_count, int other_count) {
    int count = me == 0 ? root_count : other_count;
    int big = root_count > other_count ? root_count : other_count;
    int *buf = malloc((size_t)big * sizeof(int));
    CHECK(buf != NULL, "malloc");
    for (int i = 0; i < big; i++) buf[i] = me == 0 ? i + 1 : -1;
    int cls = class_of(MPI_Bcast(buf, count, MPI_INT, 0, c));
    if (me != 0)
        CHECK(cls == MPI_ERR_TRUNCATE, "rank %d of a bcast of %d ints (root %d): class %d", me, count,
              root_count, cls);
    else
        CHECK(cls == MPI_SUCCESS || cls == MPI_ERR_TRUNCATE, "root of a bcast of %d ints: class %d", count, cls);
    free(buf);
    check_usable(c, "a split bcast");
}

static void allreduce_split(MPI_Comm c, int count0, int others) {
    int count = me == 0 ? count0 : others;
    int big = count0 > others ? count0 : others;
    int *in = malloc((size_t)big * sizeof(int)), *out = malloc((size_t)big * sizeof(int));
    CHECK(in && out, "malloc");
    for (int i = 0; i < big; i++) in[i] = 1;
    int cls = class_of(MPI_Allreduce(in, out, count, MPI_INT, MPI_SUM, c));
    CHECK(cls == MPI_SUCCESS || cls == MPI_ERR_TRUNCATE, "rank %d: allreduce of %d ints: class %d", me, count, cls);
    CHECK(anyone(c, cls, "a split allreduce"), "no rank reported the allreduce of %d vs %d ints", count0, others);
    free(in);
    free(out);
}

static void bcast_vs_reduce(MPI_Comm c, int count, int must_report) {
    int *a = calloc((size_t)count, sizeof(int)), *b = calloc((size_t)count, sizeof(int));
    CHECK(a && b, "calloc");
    int rc = me == 0 ? MPI_Bcast(a, count, MPI_INT, 0, c) : MPI_Reduce(a, b, count, MPI_INT, MPI_SUM, 0, c);
    int cls = class_of(rc);
    CHECK(cls == MPI_SUCCESS || cls == MPI_ERR_OTHER || cls == MPI_ERR_TRUNCATE,
          "rank %d: %s of %d ints against the other: class %d", me, me == 0 ? "bcast" : "reduce", count, cls);
    int any = anyone(c, cls, "bcast against reduce");
    CHECK(!must_report || any, "no rank reported bcast against reduce of %d ints", count);
    free(a);
    free(b);
}

static void root_split(MPI_Comm c, int nonblocking) {
    int count = 100000;
    int *buf = calloc((size_t)count, sizeof(int));
    CHECK(buf != NULL, "calloc");
    int root = me == 0 ? 0 : 1, rc;
    if (nonblocking) {
        MPI_Request r;
        CHECK_MPI(MPI_Ibcast(buf, count, MPI_INT, root, c, &r));
        rc = MPI_Wait(&r, MPI_STATUS_IGNORE);
    } else {
        rc = MPI_Bcast(buf, count, MPI_INT, root, c);
    }
    int cls = class_of(rc);
    CHECK(cls == MPI_SUCCESS || cls == MPI_ERR_ROOT || cls == MPI_ERR_TRUNCATE,
          "rank %d: %sbcast with root %d: class %d", me, nonblocking ? "i" : "", root, cls);
    CHECK(anyone(c, cls, "split roots"), "no rank reported the split roots");
    free(buf);
}

int main(int argc, char **argv) {
    CHECK_MPI(MPI_Init(&argc, &argv));
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    ct_world_rank = me;
    int fatal = argc > 1 && strcmp(argv[1], "fatal") == 0;
    if (fatal) {
        if (np > 1) {
            int count = me == 0 ? 100000 : 10;
            int *buf = calloc(100000, sizeof(int));
            MPI_Bcast(buf, count, MPI_INT, 0, MPI_COMM_WORLD);
            /* The root may finish its side (MPI lets a root return once its buffer can be
             * reused); a rank that gets 100000 ints into 10 cannot, and its fatal error must
             * end the job. The root waits for that and fails only if it does not come. */
            if (me == 0) sleep(20);
            CHECK(0, "rank %d: the mismatched bcast returned under MPI_ERRORS_ARE_FATAL", me);
        }
        /* One rank: nothing to mismatch; end as the job above must (non-zero, the message). */
        fprintf(stderr, "MPI_Bcast: collective mismatch needs two ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    MPI_Comm dup;
    CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    CHECK_MPI(MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN));
    if (argc > 2 && strncmp(argv[2], "case=", 5) == 0) only = atoi(argv[2] + 5);
    if (np > 1) {
        if (next_case()) bcast_split(MPI_COMM_WORLD, 100000, 10);
        if (next_case()) bcast_split(MPI_COMM_WORLD, 10, 100000);
        if (next_case()) allreduce_split(MPI_COMM_WORLD, 8, 1000);
        check_usable(MPI_COMM_WORLD, "nothing"); /* the dup's sequence lags the world's */
        if (next_case()) allreduce_split(dup, 256, 100000);
        if (next_case()) bcast_vs_reduce(dup, 100000, 1);
        check_usable(MPI_COMM_WORLD, "nothing");
        if (next_case()) bcast_vs_reduce(MPI_COMM_WORLD, 100000, 1);
        if (next_case()) bcast_vs_reduce(MPI_COMM_WORLD, 4, 0);
        if (next_case()) root_split(dup, 0);
        if (next_case()) root_split(dup, 1);
    }
    CHECK_MPI(MPI_Comm_free(&dup));
    check_usable(MPI_COMM_WORLD, "every case");
    MPI_Barrier(MPI_COMM_WORLD);
    if (me == 0) printf("OK coll_split\n");
    MPI_Finalize();
    return 0;
}
