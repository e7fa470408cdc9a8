/* Error classes under MPI_ERRORS_RETURN: bad rank, count, tag, datatype (NULL and uncommitted),
 * communicator (NULL and freed), root, op, truncation (blocking, Wait, Waitall). After every
 * error the library must stay usable. */
#include "ctest.h"

static void check_string(int code)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = -1;
    CHECK_MPI(MPI_Error_string(code, msg, &len));
    CHECK(len > 0 && len < MPI_MAX_ERROR_STRING && (int)strlen(msg) == len, "Error_string(%d) len %d", code, len);
}

/* a collective that must still work */
static void still_usable(int salt)
{
    int v = ct_world_rank + salt, sum = -1;
    CHECK_MPI(MPI_Allreduce(&v, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    CHECK(sum == ct_world_size * (ct_world_size - 1) / 2 + salt * ct_world_size, "allreduce after error = %d", sum);
}

int main(int argc, char **argv)
{
    int rank, size, buf[8] = {0}, rc, cls, *tagub, flag, i;
    MPI_Status st;

    ct_init(&argc, &argv);
    rank = ct_world_rank;
    size = ct_world_size;
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    /* errors with no communicator (e.g. a NULL communicator argument) are raised on COMM_SELF */
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));
    {
        MPI_Errhandler eh;
        CHECK_MPI(MPI_Comm_get_errhandler(MPI_COMM_WORLD, &eh));
        CHECK(eh == MPI_ERRORS_RETURN, "get_errhandler did not return ERRORS_RETURN");
        CHECK_MPI(MPI_Errhandler_free(&eh));
    }

    /* MPI_ERR_RANK */
    CHECK_CLASS(MPI_Send(buf, 1, MPI_INT, size, 0, MPI_COMM_WORLD), MPI_ERR_RANK);
    CHECK_CLASS(MPI_Send(buf, 1, MPI_INT, -7, 0, MPI_COMM_WORLD), MPI_ERR_RANK);
    CHECK_CLASS(MPI_Recv(buf, 1, MPI_INT, size + 3, 0, MPI_COMM_WORLD, &st), MPI_ERR_RANK);
    {
        MPI_Request rq = MPI_REQUEST_NULL;
        CHECK_CLASS(MPI_Isend(buf, 1, MPI_INT, size, 0, MPI_COMM_WORLD, &rq), MPI_ERR_RANK);
    }
    rc = MPI_Send(buf, 1, MPI_INT, size, 0, MPI_COMM_WORLD);
    check_string(rc);
    still_usable(1);

    /* MPI_ERR_COUNT */
    CHECK_CLASS(MPI_Send(buf, -1, MPI_INT, rank, 0, MPI_COMM_WORLD), MPI_ERR_COUNT);
    CHECK_CLASS(MPI_Recv(buf, -3, MPI_INT, rank, 0, MPI_COMM_WORLD, &st), MPI_ERR_COUNT);
    CHECK_CLASS(MPI_Bcast(buf, -1, MPI_INT, 0, MPI_COMM_WORLD), MPI_ERR_COUNT);
    still_usable(2);

    /* MPI_ERR_TAG: negative tags (other than ANY_TAG on receives) and tags above MPI_TAG_UB */
    CHECK_CLASS(MPI_Send(buf, 1, MPI_INT, rank, -1, MPI_COMM_WORLD), MPI_ERR_TAG);
    CHECK_CLASS(MPI_Send(buf, 1, MPI_INT, rank, MPI_ANY_TAG, MPI_COMM_WORLD), MPI_ERR_TAG);
    CHECK_CLASS(MPI_Recv(buf, 1, MPI_INT, rank, -7, MPI_COMM_WORLD, &st), MPI_ERR_TAG);
    CHECK_MPI(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tagub, &flag));
    CHECK(flag && *tagub >= 32767, "MPI_TAG_UB flag %d value %d", flag, flag ? *tagub : 0);
    if (*tagub < 2147483647)
        CHECK_CLASS(MPI_Send(buf, 1, MPI_INT, rank, *tagub + 1, MPI_COMM_WORLD), MPI_ERR_TAG);
    {
        /* the largest valid tag works */
        int v = 5, w = 0;
        CHECK_MPI(MPI_Sendrecv(&v, 1, MPI_INT, rank, *tagub, &w, 1, MPI_INT, rank, *tagub, MPI_COMM_WORLD, &st));
        CHECK(w == 5 && st.MPI_TAG == *tagub, "TAG_UB message %d tag %d", w, st.MPI_TAG);
    }
    still_usable(3);

    /* MPI_ERR_TYPE: NULL datatype, uncommitted derived type, commit of NULL */
    {
        MPI_Datatype t;
        CHECK_CLASS(MPI_Send(buf, 1, MPI_DATATYPE_NULL, rank, 0, MPI_COMM_WORLD), MPI_ERR_TYPE);
        CHECK_CLASS(MPI_Allreduce(buf, buf + 1, 1, MPI_DATATYPE_NULL, MPI_SUM, MPI_COMM_WORLD), MPI_ERR_TYPE);
        CHECK_MPI(MPI_Type_contiguous(2, MPI_INT, &t));
        CHECK_CLASS(MPI_Send(buf, 1, t, rank, 0, MPI_COMM_WORLD), MPI_ERR_TYPE);
        CHECK_MPI(MPI_Type_free(&t));
        t = MPI_DATATYPE_NULL;
        CHECK_CLASS(MPI_Type_commit(&t), MPI_ERR_TYPE);
        CHECK_CLASS(MPI_Type_contiguous(-1, MPI_INT, &t), MPI_ERR_COUNT);
    }
    still_usable(4);

    /* MPI_ERR_COMM: NULL communicator and a freed communicator handle */
    {
        MPI_Comm dup, stale;
        int r = -1;
        CHECK_CLASS(MPI_Send(buf, 1, MPI_INT, 0, 0, MPI_COMM_NULL), MPI_ERR_COMM);
        CHECK_CLASS(MPI_Comm_rank(MPI_COMM_NULL, &r), MPI_ERR_COMM);
        CHECK_CLASS(MPI_Barrier(MPI_COMM_NULL), MPI_ERR_COMM);
        CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
        stale = dup;
        CHECK_MPI(MPI_Comm_free(&dup));
        CHECK(dup == MPI_COMM_NULL, "Comm_free did not null the handle");
        CHECK_CLASS(MPI_Comm_rank(stale, &r), MPI_ERR_COMM);
        CHECK_CLASS(MPI_Barrier(stale), MPI_ERR_COMM);
    }
    still_usable(5);

    /* MPI_ERR_ROOT */
    CHECK_CLASS(MPI_Bcast(buf, 1, MPI_INT, size, MPI_COMM_WORLD), MPI_ERR_ROOT);
    CHECK_CLASS(MPI_Bcast(buf, 1, MPI_INT, -1, MPI_COMM_WORLD), MPI_ERR_ROOT);
    CHECK_CLASS(MPI_Reduce(buf, buf + 1, 1, MPI_INT, MPI_SUM, size + 2, MPI_COMM_WORLD), MPI_ERR_ROOT);
    CHECK_CLASS(MPI_Gather(buf, 1, MPI_INT, buf + 1, 1, MPI_INT, -5, MPI_COMM_WORLD), MPI_ERR_ROOT);
    still_usable(6);

    /* MPI_ERR_OP */
    CHECK_CLASS(MPI_Allreduce(buf, buf + 1, 1, MPI_INT, MPI_OP_NULL, MPI_COMM_WORLD), MPI_ERR_OP);
    CHECK_CLASS(MPI_Reduce_local(buf, buf + 1, 1, MPI_INT, MPI_OP_NULL), MPI_ERR_OP);
    /* predefined op not defined for the type: MPI_BAND on MPI_DOUBLE */
    {
        double d = 1.0, e = 2.0;
        CHECK_CLASS(MPI_Reduce_local(&d, &e, 1, MPI_DOUBLE, MPI_BAND), MPI_ERR_OP);
    }
    still_usable(7);

    /* MPI_ERR_TRUNCATE: 5 ints into a 2-int buffer, blocking, Wait and Waitall */
    {
        int s[5] = {1, 2, 3, 4, 5}, r[4] = {-1, -1, -1, -1};
        MPI_Request rq;
        MPI_Status sts[1];
        CHECK_MPI(MPI_Isend(s, 5, MPI_INT, rank, 50, MPI_COMM_WORLD, &rq));
        rc = MPI_Recv(r, 2, MPI_INT, rank, 50, MPI_COMM_WORLD, &st);
        MPI_Error_class(rc, &cls);
        CHECK(cls == MPI_ERR_TRUNCATE, "Recv truncation returned class %d", cls);
        CHECK(r[0] == 1 && r[1] == 2 && r[2] == -1, "truncated receive data %d %d %d", r[0], r[1], r[2]);
        CHECK_MPI(MPI_Get_count(&st, MPI_INT, &i));
        CHECK(i == 2, "Get_count after a truncated Recv = %d, want the 2 ints that fit", i);
        CHECK_MPI(MPI_Wait(&rq, MPI_STATUS_IGNORE));

        CHECK_MPI(MPI_Irecv(r, 2, MPI_INT, rank, 51, MPI_COMM_WORLD, &rq));
        CHECK_MPI(MPI_Send(s, 5, MPI_INT, rank, 51, MPI_COMM_WORLD));
        CHECK_CLASS(MPI_Wait(&rq, &st), MPI_ERR_TRUNCATE);
        CHECK(r[2] == -1, "truncated Irecv wrote past the buffer");
        CHECK_MPI(MPI_Get_count(&st, MPI_INT, &i));
        CHECK(i == 2, "Get_count after a truncated Irecv = %d, want 2", i);

        CHECK_MPI(MPI_Irecv(r, 2, MPI_INT, rank, 52, MPI_COMM_WORLD, &rq));
        CHECK_MPI(MPI_Send(s, 5, MPI_INT, rank, 52, MPI_COMM_WORLD));
        CHECK_CLASS(MPI_Waitall(1, &rq, sts), MPI_ERR_IN_STATUS);
        MPI_Error_class(sts[0].MPI_ERROR, &cls);
        CHECK(cls == MPI_ERR_TRUNCATE, "Waitall status MPI_ERROR class %d", cls);
        CHECK_MPI(MPI_Get_count(&sts[0], MPI_INT, &i));
        CHECK(i == 2, "Get_count after a truncated Waitall = %d, want 2", i);
        /* truncation between ranks */
        if (size > 1) {
            int peer = rank ^ 1;
            if (peer < size) {
                if (rank % 2 == 0) {
                    CHECK_MPI(MPI_Send(s, 5, MPI_INT, peer, 53, MPI_COMM_WORLD));
                } else {
                    CHECK_CLASS(MPI_Recv(r, 3, MPI_INT, peer, 53, MPI_COMM_WORLD, &st), MPI_ERR_TRUNCATE);
                    CHECK(r[0] == 1 && r[1] == 2 && r[2] == 3 && r[3] == -1, "remote truncation data %d %d %d %d",
                          r[0], r[1], r[2], r[3]);
                    CHECK_MPI(MPI_Get_count(&st, MPI_INT, &i));
                    CHECK(i == 3 && st.MPI_SOURCE == peer && st.MPI_TAG == 53,
                          "remote truncation: count %d source %d tag %d", i, st.MPI_SOURCE, st.MPI_TAG);
                }
                /* eager (12 KB) and rendezvous (280 KB) messages truncated by 777 ints */
                for (int k = 0; k < 2; k++) {
                    int n = k ? 70000 : 3000, cap = n - 777, j;
                    int *big = malloc(sizeof(int) * (size_t)(n + 1));
                    CHECK(big, "malloc");
                    if (rank % 2 == 0) {
                        for (j = 0; j < n; j++)
                            big[j] = j * 3 + 1;
                        CHECK_MPI(MPI_Send(big, n, MPI_INT, peer, 54, MPI_COMM_WORLD));
                    } else {
                        for (j = 0; j <= n; j++)
                            big[j] = -1;
                        CHECK_CLASS(MPI_Recv(big, cap, MPI_INT, peer, 54, MPI_COMM_WORLD, &st), MPI_ERR_TRUNCATE);
                        CHECK_MPI(MPI_Get_count(&st, MPI_INT, &i));
                        CHECK(i == cap, "truncated %d-int message: Get_count %d, want %d", n, i, cap);
                        for (j = 0; j < cap; j++)
                            if (big[j] != j * 3 + 1)
                                CHECK(0, "truncated %d-int message: [%d] = %d", n, j, big[j]);
                        CHECK(big[cap] == -1, "truncated %d-int message written past the buffer", n);
                    }
                    free(big);
                }
            }
        }
    }
    still_usable(8);

    /* Error_class of every class is itself; Error_string of classes non-empty */
    {
        int classes[] = {MPI_SUCCESS, MPI_ERR_BUFFER, MPI_ERR_COUNT, MPI_ERR_TYPE, MPI_ERR_TAG, MPI_ERR_COMM,
                         MPI_ERR_RANK, MPI_ERR_REQUEST, MPI_ERR_ROOT, MPI_ERR_GROUP, MPI_ERR_OP,
                         MPI_ERR_TOPOLOGY, MPI_ERR_DIMS, MPI_ERR_ARG, MPI_ERR_UNKNOWN, MPI_ERR_TRUNCATE,
                         MPI_ERR_OTHER, MPI_ERR_INTERN, MPI_ERR_IN_STATUS, MPI_ERR_PENDING};
        for (i = 0; i < (int)(sizeof classes / sizeof classes[0]); i++) {
            CHECK_MPI(MPI_Error_class(classes[i], &cls));
            CHECK(cls == classes[i], "Error_class(%d) = %d", classes[i], cls);
            check_string(classes[i]);
        }
        CHECK((int)MPI_ERR_LASTCODE >= (int)MPI_ERR_PENDING, "MPI_ERR_LASTCODE %d", (int)MPI_ERR_LASTCODE);
    }

    /* point-to-point still works after all that */
    {
        int next = (rank + 1) % size, prev = (rank + size - 1) % size, v = rank, w = -1;
        CHECK_MPI(MPI_Sendrecv(&v, 1, MPI_INT, next, 9, &w, 1, MPI_INT, prev, 9, MPI_COMM_WORLD, &st));
        CHECK(w == prev, "sendrecv after errors got %d", w);
    }
    return ct_finish("err_args");
}
