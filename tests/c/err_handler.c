/* User error handlers: Comm_create_errhandler, set/get, the handler is called with the comm and
 * the error code, the failing call returns that code; Comm_call_errhandler; handlers are
 * inherited by Comm_dup; Errhandler_free; user error classes/codes/strings. */
#include "ctest.h"

static int calls = 0;
static int last_code = MPI_SUCCESS;
static MPI_Comm last_comm = MPI_COMM_NULL;

static void handler(MPI_Comm *comm, int *code, ...)
{
    calls++;
    last_code = *code;
    last_comm = *comm;
}

int main(int argc, char **argv)
{
    int rank, size, buf[4] = {0}, rc, cls, n;
    MPI_Errhandler eh, got;
    MPI_Comm dup, dup2;

    ct_init(&argc, &argv);
    rank = ct_world_rank;
    size = ct_world_size;

    /* the default handler on COMM_WORLD is ERRORS_ARE_FATAL */
    CHECK_MPI(MPI_Comm_get_errhandler(MPI_COMM_WORLD, &got));
    CHECK(got == MPI_ERRORS_ARE_FATAL, "default errhandler is not ERRORS_ARE_FATAL");
    CHECK_MPI(MPI_Errhandler_free(&got));

    CHECK_MPI(MPI_Comm_create_errhandler(handler, &eh));
    CHECK(eh != MPI_ERRHANDLER_NULL, "create_errhandler gave NULL");
    CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    CHECK_MPI(MPI_Comm_set_errhandler(dup, eh));
    CHECK_MPI(MPI_Comm_get_errhandler(dup, &got));
    CHECK(got == eh, "get_errhandler returned a different handle");
    CHECK_MPI(MPI_Errhandler_free(&got));

    /* a bad rank on dup calls the handler once, with dup and an MPI_ERR_RANK code */
    rc = MPI_Send(buf, 1, MPI_INT, size, 0, dup);
    CHECK(calls == 1, "handler called %d times", calls);
    CHECK(last_comm == dup, "handler got a different communicator");
    MPI_Error_class(last_code, &cls);
    CHECK(cls == MPI_ERR_RANK, "handler code class %d", cls);
    /* after a user handler returns, the call returns (the standard leaves the value to the
     * implementation; MPICH returns MPI_SUCCESS): accept the handler's code or success */
    CHECK(rc == last_code || rc == MPI_SUCCESS, "call returned %d, handler saw %d", rc, last_code);

    /* COMM_WORLD is unaffected: still works; errors on it are not sent to our handler */
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    CHECK(calls == 1, "handler called for a successful call");

    /* a dup of dup inherits the handler */
    CHECK_MPI(MPI_Comm_dup(dup, &dup2));
    rc = MPI_Bcast(buf, 1, MPI_INT, -9, dup2);
    CHECK(calls == 2 && last_comm == dup2, "inherited handler: calls %d", calls);
    MPI_Error_class(last_code, &cls);
    CHECK(cls == MPI_ERR_ROOT, "inherited handler code class %d", cls);

    /* Comm_call_errhandler invokes it with the given code */
    CHECK_MPI(MPI_Comm_call_errhandler(dup, MPI_ERR_OTHER));
    CHECK(calls == 3 && last_code == MPI_ERR_OTHER && last_comm == dup, "call_errhandler: calls %d code %d",
          calls, last_code);

    /* user error class / code / string */
    {
        int myclass, mycode;
        char msg[MPI_MAX_ERROR_STRING];
        int *lastused, flag;
        CHECK_MPI(MPI_Add_error_class(&myclass));
        CHECK_MPI(MPI_Add_error_code(myclass, &mycode));
        CHECK_MPI(MPI_Add_error_string(mycode, "gpumpi test user error"));
        CHECK_MPI(MPI_Error_class(mycode, &cls));
        CHECK(cls == myclass, "user code class %d want %d", cls, myclass);
        CHECK_MPI(MPI_Error_string(mycode, msg, &n));
        CHECK(strcmp(msg, "gpumpi test user error") == 0, "user error string '%s'", msg);
        CHECK_MPI(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_LASTUSEDCODE, &lastused, &flag));
        CHECK(flag && *lastused >= myclass, "MPI_LASTUSEDCODE flag %d", flag);
        CHECK_MPI(MPI_Comm_call_errhandler(dup, mycode));
        CHECK(calls == 4 && last_code == mycode, "call_errhandler with user code");
    }

    /* the errhandler object outlives its free while attached */
    CHECK_MPI(MPI_Errhandler_free(&eh));
    CHECK(eh == MPI_ERRHANDLER_NULL, "Errhandler_free did not null");
    rc = MPI_Send(buf, -1, MPI_INT, 0, 0, dup);
    CHECK(calls == 5, "handler not called after Errhandler_free while attached (calls %d)", calls);
    MPI_Error_class(last_code, &cls);
    CHECK(cls == MPI_ERR_COUNT, "count error class %d", cls);
    (void)rc;

    /* switch dup to ERRORS_RETURN: no more calls */
    CHECK_MPI(MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN));
    CHECK_CLASS(MPI_Send(buf, 1, MPI_INT, size, 0, dup), MPI_ERR_RANK);
    CHECK(calls == 5, "handler called after replacing it");

    CHECK_MPI(MPI_Comm_free(&dup2));
    CHECK_MPI(MPI_Comm_free(&dup));
    (void)rank;
    return ct_finish("err_handler");
}
