/* Probe/Iprobe/Mprobe/Mrecv/Improbe/Imrecv with Get_count; MPI_MESSAGE_NO_PROC for PROC_NULL;
 * cancel of a posted receive (Test_cancelled). */
#include "ctest.h"

int main(int argc, char **argv)
{
    int rank, size, next, prev, i, count, flag;
    MPI_Status st;

    ct_init(&argc, &argv);
    rank = ct_world_rank;
    size = ct_world_size;
    next = (rank + 1) % size;
    prev = (rank + size - 1) % size;

    /* Probe then receive a message of unknown length (length depends on sender rank) */
    {
        int n = 3 + rank * 5, pn = 3 + prev * 5;
        int *s = malloc(sizeof(int) * (size_t)n), *r;
        MPI_Request sq;
        CHECK(s, "malloc");
        for (i = 0; i < n; i++)
            s[i] = ct_val(rank, i, 1);
        CHECK_MPI(MPI_Isend(s, n, MPI_INT, next, 5, MPI_COMM_WORLD, &sq));
        CHECK_MPI(MPI_Probe(MPI_ANY_SOURCE, 5, MPI_COMM_WORLD, &st));
        CHECK(st.MPI_SOURCE == prev && st.MPI_TAG == 5, "probe status %d %d", st.MPI_SOURCE, st.MPI_TAG);
        CHECK_MPI(MPI_Get_count(&st, MPI_INT, &count));
        CHECK(count == pn, "probe count %d want %d", count, pn);
        /* probing again finds the same message */
        flag = 0;
        while (!flag)
            CHECK_MPI(MPI_Iprobe(prev, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st));
        CHECK(st.MPI_TAG == 5, "iprobe tag %d", st.MPI_TAG);
        CHECK_MPI(MPI_Get_count(&st, MPI_CHAR, &count));
        CHECK(count == pn * (int)sizeof(int), "iprobe byte count %d", count);
        r = malloc(sizeof(int) * (size_t)pn);
        CHECK(r, "malloc");
        CHECK_MPI(MPI_Recv(r, pn, MPI_INT, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, &st));
        for (i = 0; i < pn; i++)
            CHECK(r[i] == ct_val(prev, i, 1), "probed recv[%d] = %d", i, r[i]);
        CHECK_MPI(MPI_Wait(&sq, MPI_STATUS_IGNORE));
        free(r);
        free(s);
    }
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));

    /* Iprobe for a message that is never sent */
    CHECK_MPI(MPI_Iprobe(MPI_ANY_SOURCE, 999, MPI_COMM_WORLD, &flag, &st));
    CHECK(flag == 0, "Iprobe found a message that was never sent");

    /* Mprobe/Mrecv: the matched message is removed from the queue; a second message with the
     * same envelope is then received by a plain Recv. */
    {
        int a[2] = {rank, 111}, b[2] = {rank, 222}, r[2];
        MPI_Request sq[2];
        MPI_Message msg;
        CHECK_MPI(MPI_Isend(a, 2, MPI_INT, next, 6, MPI_COMM_WORLD, &sq[0]));
        CHECK_MPI(MPI_Isend(b, 2, MPI_INT, next, 6, MPI_COMM_WORLD, &sq[1]));
        CHECK_MPI(MPI_Mprobe(prev, 6, MPI_COMM_WORLD, &msg, &st));
        CHECK(msg != MPI_MESSAGE_NULL && msg != MPI_MESSAGE_NO_PROC, "Mprobe message handle");
        CHECK_MPI(MPI_Get_count(&st, MPI_INT, &count));
        CHECK(count == 2 && st.MPI_SOURCE == prev, "mprobe count %d src %d", count, st.MPI_SOURCE);
        /* the matched message is no longer visible to probe; the second one is */
        CHECK_MPI(MPI_Recv(r, 2, MPI_INT, prev, 6, MPI_COMM_WORLD, &st));
        CHECK(r[0] == prev && r[1] == 222, "second message overtaken: %d %d", r[0], r[1]);
        CHECK_MPI(MPI_Mrecv(r, 2, MPI_INT, &msg, &st));
        CHECK(msg == MPI_MESSAGE_NULL, "Mrecv did not null the message");
        CHECK(r[0] == prev && r[1] == 111, "mrecv got %d %d", r[0], r[1]);
        CHECK(st.MPI_SOURCE == prev && st.MPI_TAG == 6, "mrecv status %d %d", st.MPI_SOURCE, st.MPI_TAG);
        CHECK_MPI(MPI_Waitall(2, sq, MPI_STATUSES_IGNORE));
    }

    /* Improbe/Imrecv */
    {
        double s[7], r[7];
        MPI_Request sq, rq;
        MPI_Message msg = MPI_MESSAGE_NULL;
        for (i = 0; i < 7; i++)
            s[i] = rank + i * 0.5;
        CHECK_MPI(MPI_Isend(s, 7, MPI_DOUBLE, next, 7, MPI_COMM_WORLD, &sq));
        flag = 0;
        while (!flag)
            CHECK_MPI(MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &msg, &st));
        CHECK(st.MPI_SOURCE == prev && st.MPI_TAG == 7, "improbe status %d %d", st.MPI_SOURCE, st.MPI_TAG);
        CHECK_MPI(MPI_Get_count(&st, MPI_DOUBLE, &count));
        CHECK(count == 7, "improbe count %d", count);
        CHECK_MPI(MPI_Imrecv(r, 7, MPI_DOUBLE, &msg, &rq));
        CHECK(msg == MPI_MESSAGE_NULL, "Imrecv did not null the message");
        CHECK_MPI(MPI_Wait(&rq, &st));
        CHECK_MPI(MPI_Get_count(&st, MPI_DOUBLE, &count));
        CHECK(count == 7 && st.MPI_SOURCE == prev, "imrecv count %d src %d", count, st.MPI_SOURCE);
        for (i = 0; i < 7; i++)
            CHECK(r[i] == prev + i * 0.5, "imrecv[%d] = %g", i, r[i]);
        CHECK_MPI(MPI_Wait(&sq, MPI_STATUS_IGNORE));
    }

    /* Mprobe on PROC_NULL gives MPI_MESSAGE_NO_PROC, Mrecv of it completes empty */
    {
        MPI_Message msg;
        int x = 3;
        CHECK_MPI(MPI_Mprobe(MPI_PROC_NULL, 0, MPI_COMM_WORLD, &msg, &st));
        CHECK(msg == MPI_MESSAGE_NO_PROC, "Mprobe(PROC_NULL) message not NO_PROC");
        CHECK(st.MPI_SOURCE == MPI_PROC_NULL, "Mprobe(PROC_NULL) src %d", st.MPI_SOURCE);
        CHECK_MPI(MPI_Mrecv(&x, 1, MPI_INT, &msg, &st));
        CHECK(msg == MPI_MESSAGE_NULL && x == 3, "Mrecv(NO_PROC) msg/value");
        CHECK_MPI(MPI_Probe(MPI_PROC_NULL, 0, MPI_COMM_WORLD, &st));
        CHECK(st.MPI_SOURCE == MPI_PROC_NULL && st.MPI_TAG == MPI_ANY_TAG, "Probe(PROC_NULL) status");
        CHECK_MPI(MPI_Iprobe(MPI_PROC_NULL, 0, MPI_COMM_WORLD, &flag, &st));
        CHECK(flag == 1 && st.MPI_SOURCE == MPI_PROC_NULL, "Iprobe(PROC_NULL) flag %d", flag);
    }

    /* cancel a posted receive that can never match */
    {
        int x = 17;
        MPI_Request rq;
        CHECK_MPI(MPI_Irecv(&x, 1, MPI_INT, MPI_ANY_SOURCE, 4242, MPI_COMM_WORLD, &rq));
        CHECK_MPI(MPI_Cancel(&rq));
        CHECK_MPI(MPI_Wait(&rq, &st));
        CHECK_MPI(MPI_Test_cancelled(&st, &flag));
        CHECK(flag == 1, "receive not cancelled");
        CHECK(x == 17, "cancelled receive wrote the buffer");
        /* a receive that matched is not cancelled */
        CHECK_MPI(MPI_Irecv(&x, 1, MPI_INT, rank, 4243, MPI_COMM_WORLD, &rq));
        CHECK_MPI(MPI_Send(&rank, 1, MPI_INT, rank, 4243, MPI_COMM_WORLD));
        CHECK_MPI(MPI_Wait(&rq, &st));
        CHECK_MPI(MPI_Test_cancelled(&st, &flag));
        CHECK(flag == 0 && x == rank, "completed receive reports cancelled=%d x=%d", flag, x);
    }

    return ct_finish("p2p_probe");
}
