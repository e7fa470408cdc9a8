/* Receives from a rank that called MPI_Finalize without sending a match fail instead of waiting
 * forever (engine/bye.rs): MPI_ERR_OTHER through the communicator's error handler, with a
 * message naming the call, the peer's rank in the communicator and MPI_Finalize. Messages the
 * rank sent before its MPI_Finalize are still received, and receives from ranks that have not
 * finalized are unaffected. (Under MPI_ERRORS_RETURN only the class comes back; the `fatal` run
 * checks the message on stderr.)
 *
 * The last rank ("the leaver") is the one that finalizes early. Argument:
 *   return  MPI_ERRORS_RETURN. The leaver sends rank 0 an eager message (tag 1), a rendezvous
 *           one (tag 4) and one more (tag 3), then calls MPI_Finalize. Rank 0, which posted an
 *           MPI_Irecv from it and an MPI_ANY_SOURCE MPI_Irecv on a communicator of the two of
 *           them beforehand (tag 99, never sent), receives tags 1 and 4, then sees each fail:
 *           the two early receives (MPI_Wait), MPI_Recv, MPI_Probe (after probing tag 3
 *           successfully), MPI_Iprobe, MPI_Improbe, MPI_Irecv + MPI_Wait, MPI_Recv with
 *           MPI_ANY_SOURCE on the pair; then receives tag 3. The other ranks send rank 0 one
 *           message each once rank 0 asks, which rank 0 receives (one from rank 1 by rank,
 *           the rest with MPI_ANY_SOURCE on MPI_COMM_WORLD) after the leaver finalized.
 *   silent  MPI_ERRORS_RETURN, 2 ranks, no communication before the leaver's MPI_Finalize (no
 *           connection from it between nodes): rank 0's MPI_Recv from it fails.
 *   fatal   the default handler: rank 0's MPI_Recv from the leaver ends the job; the harness
 *           expects a non-zero exit and the message on stderr. fatal_any: MPI_Recv from
 *           MPI_ANY_SOURCE; fatal_probe: MPI_Probe; fatal_wait: MPI_Irecv + MPI_Wait. */
#include "ctest.h"

#define BIG 100000 /* ints: a rendezvous message */

/* Under MPI_ERRORS_RETURN the call returns the class (the message, naming the peer, is what the
 * default handler prints: the `fatal` run checks it). */
static void expect_finalized(int rc, const char *call)
{
    int cls = -1;
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_OTHER, "%s returned %d (class %d), want MPI_ERR_OTHER", call, rc, cls);
}

static int run_return(void)
{
    int size = ct_world_size, me = ct_world_rank, leaver = size - 1;
    int v = 0, flag = 7, rc;
    MPI_Comm pair;
    MPI_Status st;
    MPI_Message m;
    MPI_Request early, early_any, rq;
    static int big[BIG];

    CHECK(size >= 2, "needs 2 or more ranks");
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    /* Rank 0 and the leaver: ranks 0 and 1 of `pair`. */
    CHECK_MPI(MPI_Comm_split(MPI_COMM_WORLD, me == 0 || me == leaver ? 0 : MPI_UNDEFINED, me,
                             &pair));
    if (pair != MPI_COMM_NULL)
        CHECK_MPI(MPI_Comm_set_errhandler(pair, MPI_ERRORS_RETURN));
    if (me == 0) {
        CHECK_MPI(MPI_Irecv(&v, 1, MPI_INT, leaver, 99, MPI_COMM_WORLD, &early));
        CHECK_MPI(MPI_Irecv(&v, 1, MPI_INT, MPI_ANY_SOURCE, 99, pair, &early_any));
    }
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    if (me == leaver) {
        int one = 11, three = 33;
        for (int i = 0; i < BIG; i++)
            big[i] = ct_val(me, i, 4);
        CHECK_MPI(MPI_Send(&one, 1, MPI_INT, 0, 1, MPI_COMM_WORLD));
        CHECK_MPI(MPI_Send(big, BIG, MPI_INT, 0, 4, MPI_COMM_WORLD));
        CHECK_MPI(MPI_Send(&three, 1, MPI_INT, 0, 3, MPI_COMM_WORLD));
        CHECK_MPI(MPI_Comm_free(&pair));
        CHECK_MPI(MPI_Finalize());
        return 0;
    }
    if (me != 0) {
        /* Sends to rank 0 only when asked, after the leaver finalized. */
        CHECK_MPI(MPI_Recv(&v, 1, MPI_INT, 0, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        v = 1000 + me;
        CHECK_MPI(MPI_Send(&v, 1, MPI_INT, 0, 7, MPI_COMM_WORLD));
        CHECK_MPI(MPI_Finalize());
        return 0;
    }
    /* Rank 0: what the leaver sent before its MPI_Finalize arrives. */
    CHECK_MPI(MPI_Recv(&v, 1, MPI_INT, leaver, 1, MPI_COMM_WORLD, &st));
    CHECK(v == 11 && st.MPI_SOURCE == leaver && st.MPI_TAG == 1, "tag 1: got %d", v);
    CHECK_MPI(MPI_Recv(big, BIG, MPI_INT, leaver, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    for (int i = 0; i < BIG; i++)
        CHECK(big[i] == ct_val(leaver, i, 4), "tag 4: element %d is %d", i, big[i]);
    /* The receives posted before its goodbye fail (the pair's only other rank is the leaver). */
    expect_finalized(MPI_Wait(&early, &st), "MPI_Wait");
    CHECK(early == MPI_REQUEST_NULL, "the failed request was not freed");
    expect_finalized(MPI_Wait(&early_any, &st), "MPI_Wait (MPI_ANY_SOURCE)");
    /* And receives made later. */
    rc = MPI_Recv(&v, 1, MPI_INT, leaver, 98, MPI_COMM_WORLD, &st);
    expect_finalized(rc, "MPI_Recv");
    CHECK_MPI(MPI_Probe(leaver, 3, MPI_COMM_WORLD, &st));
    CHECK(st.MPI_SOURCE == leaver && st.MPI_TAG == 3, "probe of tag 3: source %d tag %d",
          st.MPI_SOURCE, st.MPI_TAG);
    expect_finalized(MPI_Probe(leaver, 97, MPI_COMM_WORLD, &st), "MPI_Probe");
    rc = MPI_Iprobe(leaver, 97, MPI_COMM_WORLD, &flag, &st);
    expect_finalized(rc, "MPI_Iprobe");
    rc = MPI_Improbe(leaver, 97, MPI_COMM_WORLD, &flag, &m, &st);
    expect_finalized(rc, "MPI_Improbe");
    CHECK_MPI(MPI_Irecv(&v, 1, MPI_INT, leaver, 96, MPI_COMM_WORLD, &rq));
    expect_finalized(MPI_Wait(&rq, MPI_STATUS_IGNORE), "MPI_Irecv + MPI_Wait");
    expect_finalized(MPI_Recv(&v, 1, MPI_INT, MPI_ANY_SOURCE, 5, pair, &st),
                     "MPI_Recv (MPI_ANY_SOURCE)");
    expect_finalized(MPI_Recv(&v, 1, MPI_INT, 1, 5, pair, &st), "MPI_Recv on the pair");
    /* The message probed before is still there. */
    CHECK_MPI(MPI_Recv(&v, 1, MPI_INT, leaver, 3, MPI_COMM_WORLD, &st));
    CHECK(v == 33, "tag 3: got %d", v);
    /* Ranks that have not finalized are unaffected, MPI_ANY_SOURCE included. */
    for (int r = 1; r < leaver; r++)
        CHECK_MPI(MPI_Send(&r, 1, MPI_INT, r, 8, MPI_COMM_WORLD));
    int got = 0;
    if (leaver > 1) {
        CHECK_MPI(MPI_Recv(&v, 1, MPI_INT, 1, 7, MPI_COMM_WORLD, &st));
        CHECK(v == 1001, "from rank 1: got %d", v);
        got |= 1 << 1;
    }
    for (int k = 2; k < leaver; k++) {
        CHECK_MPI(MPI_Recv(&v, 1, MPI_INT, MPI_ANY_SOURCE, 7, MPI_COMM_WORLD, &st));
        CHECK(v == 1000 + st.MPI_SOURCE && st.MPI_SOURCE > 1 && st.MPI_SOURCE < leaver,
              "MPI_ANY_SOURCE: got %d from %d", v, st.MPI_SOURCE);
        got |= 1 << st.MPI_SOURCE;
    }
    for (int r = 1; r < leaver; r++)
        CHECK(got & (1 << r), "nothing from rank %d", r);
    CHECK_MPI(MPI_Comm_free(&pair));
    printf("OK p2p_finalized\n");
    fflush(stdout);
    CHECK_MPI(MPI_Finalize());
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "return";
    int v = 0, rc;
    ct_init(&argc, &argv);
    if (strcmp(mode, "return") == 0)
        return run_return();
    CHECK(ct_world_size == 2, "%s needs 2 ranks", mode);
    if (strcmp(mode, "silent") == 0) {
        CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
        if (ct_world_rank == 0) {
            rc = MPI_Recv(&v, 1, MPI_INT, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            expect_finalized(rc, "MPI_Recv");
            printf("OK p2p_finalized\n");
            fflush(stdout);
        }
        CHECK_MPI(MPI_Finalize());
        return 0;
    }
    /* fatal*: the default handler ends the job at rank 0's receive or probe. */
    if (ct_world_rank == 0) {
        MPI_Request rq;
        MPI_Status st;
        if (strcmp(mode, "fatal_any") == 0) {
            rc = MPI_Recv(&v, 1, MPI_INT, MPI_ANY_SOURCE, 0, MPI_COMM_WORLD, &st);
        } else if (strcmp(mode, "fatal_probe") == 0) {
            rc = MPI_Probe(1, 0, MPI_COMM_WORLD, &st);
        } else if (strcmp(mode, "fatal_wait") == 0) {
            CHECK_MPI(MPI_Irecv(&v, 1, MPI_INT, 1, 0, MPI_COMM_WORLD, &rq));
            rc = MPI_Wait(&rq, &st);
        } else {
            rc = MPI_Recv(&v, 1, MPI_INT, 1, 0, MPI_COMM_WORLD, &st);
        }
        fprintf(stderr, "p2p_finalized: %s returned %d instead of ending the job\n", mode, rc);
    }
    MPI_Finalize();
    return 0; /* exit 0 makes the expected failure fail */
}
