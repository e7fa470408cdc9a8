/* A small or mid-size collective on MPI_COMM_WORLD (the flag slots, the scratch areas) that meets
 * a different collective on other ranks (erroneous) is reported, and the world's later
 * collectives keep working: every rank numbers them the same way (engine/collcheck.rs CallNo),
 * whatever each rank ran in the mismatched call. Under MPI_ERRORS_RETURN, each case is followed
 * (three times) by correct barriers, bcasts, reduces and allreduces of flag-slot and scratch-area
 * sizes, whose data is checked:
 * 1. MPI_Bcast of 4 ints from rank 0 (flag slots; the root returns at once) against MPI_Gather
 *    to rank 1 elsewhere: rank 1 (which waits for rank 0) gets MPI_ERR_OTHER;
 * 2. MPI_Allreduce of 2 ints at rank 0 against MPI_Ibarrier + MPI_Wait elsewhere: every rank
 *    gets MPI_ERR_OTHER;
 * 3. MPI_Barrier at rank 0 against MPI_Allgather of 1 int elsewhere: every rank MPI_ERR_OTHER;
 * 4. MPI_Bcast of 20000 ints from rank 0 (scratch areas) against MPI_Allgather elsewhere: every
 *    rank but the root gets MPI_ERR_OTHER;
 * 5. MPI_Bcast from rank 0 of 100 ints (flag slots) at the root and 1000 (scratch areas)
 *    elsewhere: every rank but the root gets MPI_ERR_TRUNCATE;
 * 6. MPI_Allreduce of 4 ints (flag slots) at rank 0 and 2000 (scratch areas) elsewhere: every
 *    rank but rank 0 gets MPI_ERR_TRUNCATE, rank 0 too or MPI_ERR_OTHER;
 * 7. MPI_Reduce of 8 ints to root 0 at rank 0 and to root 1 elsewhere (flag slots): a rank that
 *    reports gets MPI_ERR_ROOT, rank 1 at least. */
#include "ctest.h"
#include <string.h>

static int me, np;
static MPI_Comm w = MPI_COMM_WORLD;

static int class_of(int rc) {
    int cls = MPI_SUCCESS;
    if (rc != MPI_SUCCESS) MPI_Error_class(rc, &cls);
    return cls;
}

/* Correct collectives of every world path size after a mismatch: each returns MPI_SUCCESS with
 * the right data. */
static void later_ok(const char *after) {
    static int buf[60000], out[60000];
    for (int round = 0; round < 3; round++) {
        CHECK_MPI(MPI_Barrier(w));
        /* Flag slots: allreduce, bcast, reduce. */
        int one = me + round, sum = -1;
        CHECK_MPI(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, w));
        CHECK(sum == np * (np - 1) / 2 + np * round, "after %s: allreduce of 1 int gave %d", after, sum);
        for (int i = 0; i < 8; i++) buf[i] = me == np - 1 ? 7 * i + round : -1;
        CHECK_MPI(MPI_Bcast(buf, 8, MPI_INT, np - 1, w));
        for (int i = 0; i < 8; i++)
            CHECK(buf[i] == 7 * i + round, "after %s: bcast of 8 ints [%d] = %d", after, i, buf[i]);
        for (int i = 0; i < 16; i++) buf[i] = me * 16 + i;
        CHECK_MPI(MPI_Reduce(buf, out, 16, MPI_INT, MPI_SUM, 0, w));
        if (me == 0)
            for (int i = 0; i < 16; i++)
                CHECK(out[i] == 16 * np * (np - 1) / 2 + np * i, "after %s: reduce [%d] = %d", after, i, out[i]);
        /* Scratch areas: allreduce, bcast, reduce. */
        for (int i = 0; i < 2000; i++) buf[i] = i + me;
        CHECK_MPI(MPI_Allreduce(buf, out, 2000, MPI_INT, MPI_SUM, w));
        for (int i = 0; i < 2000; i++)
            CHECK(out[i] == np * i + np * (np - 1) / 2, "after %s: allreduce of 2000 ints [%d] = %d", after, i, out[i]);
        for (int i = 0; i < 50000; i++) buf[i] = me == 0 ? i ^ round : -1;
        CHECK_MPI(MPI_Bcast(buf, 50000, MPI_INT, 0, w));
        for (int i = 0; i < 50000; i++)
            CHECK(buf[i] == (i ^ round), "after %s: bcast of 50000 ints [%d] = %d", after, i, buf[i]);
        for (int i = 0; i < 10000; i++) buf[i] = 1;
        CHECK_MPI(MPI_Reduce(buf, out, 10000, MPI_INT, MPI_SUM, np - 1, w));
        if (me == np - 1)
            for (int i = 0; i < 10000; i++)
                CHECK(out[i] == np, "after %s: reduce of 10000 ints [%d] = %d", after, i, out[i]);
    }
}

int main(int argc, char **argv) {
    CHECK_MPI(MPI_Init(&argc, &argv));
    MPI_Comm_rank(w, &me);
    MPI_Comm_size(w, &np);
    MPI_Comm_set_errhandler(w, MPI_ERRORS_RETURN);
    if (np < 2) {
        later_ok("nothing");
        printf("OK coll_drift\n");
        MPI_Finalize();
        return 0;
    }
    static int a[20000], b[20000];
    int cls;

    /* 1. */
    if (me == 0) {
        cls = class_of(MPI_Bcast(a, 4, MPI_INT, 0, w));
    } else {
        cls = class_of(MPI_Gather(a, 1, MPI_INT, b, 1, MPI_INT, 1, w));
    }
    if (me == 1) CHECK(cls == MPI_ERR_OTHER, "case 1: gather root got class %d", cls);
    else CHECK(cls == MPI_SUCCESS || cls == MPI_ERR_OTHER, "case 1: rank %d got class %d", me, cls);
    later_ok("case 1");

    /* 2. */
    if (me == 0) {
        cls = class_of(MPI_Allreduce(a, b, 2, MPI_INT, MPI_SUM, w));
    } else {
        MPI_Request r;
        CHECK_MPI(MPI_Ibarrier(w, &r));
        cls = class_of(MPI_Wait(&r, MPI_STATUS_IGNORE));
    }
    CHECK(cls == MPI_ERR_OTHER, "case 2: rank %d got class %d", me, cls);
    later_ok("case 2");

    /* 3. */
    cls = class_of(me == 0 ? MPI_Barrier(w) : MPI_Allgather(a, 1, MPI_INT, b, 1, MPI_INT, w));
    CHECK(cls == MPI_ERR_OTHER, "case 3: rank %d got class %d", me, cls);
    later_ok("case 3");

    /* 4. */
    cls = class_of(me == 0 ? MPI_Bcast(a, 20000, MPI_INT, 0, w)
                           : MPI_Allgather(a, 1, MPI_INT, b, 1, MPI_INT, w));
    if (me != 0) CHECK(cls == MPI_ERR_OTHER, "case 4: rank %d got class %d", me, cls);
    else CHECK(cls == MPI_SUCCESS || cls == MPI_ERR_OTHER, "case 4: root got class %d", cls);
    later_ok("case 4");

    /* 5. */
    cls = class_of(MPI_Bcast(a, me == 0 ? 100 : 1000, MPI_INT, 0, w));
    if (me != 0) CHECK(cls == MPI_ERR_TRUNCATE, "case 5: rank %d got class %d", me, cls);
    else CHECK(cls == MPI_SUCCESS || cls == MPI_ERR_TRUNCATE, "case 5: root got class %d", cls);
    later_ok("case 5");

    /* 6. */
    cls = class_of(MPI_Allreduce(a, b, me == 0 ? 4 : 2000, MPI_INT, MPI_SUM, w));
    if (me != 0) CHECK(cls == MPI_ERR_TRUNCATE, "case 6: rank %d got class %d", me, cls);
    else CHECK(cls == MPI_ERR_TRUNCATE || cls == MPI_ERR_OTHER, "case 6: rank 0 got class %d", cls);
    later_ok("case 6");

    /* 7. */
    cls = class_of(MPI_Reduce(a, b, 8, MPI_INT, MPI_SUM, me == 0 ? 0 : 1, w));
    CHECK(cls == MPI_SUCCESS || cls == MPI_ERR_ROOT, "case 7: rank %d got class %d", me, cls);
    int root_err = cls == MPI_ERR_ROOT, any = 0;
    later_ok("case 7");
    CHECK_MPI(MPI_Allreduce(&root_err, &any, 1, MPI_INT, MPI_MAX, w));
    CHECK(any, "case 7: no rank reported MPI_ERR_ROOT");

    MPI_Barrier(w);
    if (me == 0) printf("OK coll_drift\n");
    MPI_Finalize();
    return 0;
}
