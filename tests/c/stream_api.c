/* MPIX streams without a GPU: stream objects, stream communicators and the errors of the
 * enqueue forms (MPICH's API, mpi-ext.h). The CUDA-stream runs are tests/gpu/gpu_stream.c. */
#include <mpi.h>
#include <mpi-ext.h>
#include <stdio.h>
#include <string.h>

static int fails = 0;
#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); fails++; } } while (0)

static int err_class(int rc) {
    int cls = -1;
    MPI_Error_class(rc, &cls);
    return cls;
}

/* The error handler prints the message naming the call and argument (`needle` says which);
 * the code returned carries the class. */
static void expect(int rc, int cls, const char *what, const char *needle) {
    CHECK(rc != MPI_SUCCESS && err_class(rc) == cls, "%s: rc %d class %d, want class %d (%s)",
          what, rc, err_class(rc), cls, needle);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    /* Calls without a communicator (MPIX_Stream_create/free, a wait on a foreign request)
     * raise on MPI_COMM_SELF's handler. */
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);

    /* A stream without info: a host stream; a stream communicator over it. */
    MPIX_Stream s = MPIX_STREAM_NULL;
    CHECK(MPIX_Stream_create(MPI_INFO_NULL, &s) == MPI_SUCCESS && s != MPIX_STREAM_NULL,
          "MPIX_Stream_create(MPI_INFO_NULL)");
    MPI_Comm sc = MPI_COMM_NULL;
    CHECK(MPIX_Stream_comm_create(MPI_COMM_WORLD, s, &sc) == MPI_SUCCESS, "MPIX_Stream_comm_create");
    MPI_Comm_set_errhandler(sc, MPI_ERRORS_RETURN);
    int csize = 0;
    MPI_Comm_size(sc, &csize);
    CHECK(csize == size, "stream comm size %d", csize);
    MPIX_Stream got = MPIX_STREAM_NULL;
    CHECK(MPIX_Comm_get_stream(sc, 0, &got) == MPI_SUCCESS && got == s, "MPIX_Comm_get_stream");
    expect(MPIX_Comm_get_stream(sc, 1, &got), MPI_ERR_ARG, "get_stream idx 1", "idx 1");
    got = s;
    CHECK(MPIX_Comm_get_stream(MPI_COMM_WORLD, 0, &got) == MPI_SUCCESS && got == MPIX_STREAM_NULL,
          "MPIX_Comm_get_stream on a plain communicator gives MPIX_STREAM_NULL");
    /* Blocking calls still work on a stream communicator. */
    int v = rank + 1, sum = 0;
    CHECK(MPI_Allreduce(&v, &sum, 1, MPI_INT, MPI_SUM, sc) == MPI_SUCCESS &&
          sum == size * (size + 1) / 2, "allreduce on the stream comm: %d", sum);

    /* Enqueue forms: a host stream's communicator and a plain one are refused. */
    int buf[4] = {0};
    MPI_Request rq = MPI_REQUEST_NULL;
    expect(MPIX_Send_enqueue(buf, 1, MPI_INT, 0, 0, sc), MPI_ERR_COMM, "send_enqueue host stream",
           "not a CUDA stream");
    expect(MPIX_Allreduce_enqueue(buf, buf + 1, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD), MPI_ERR_COMM,
           "allreduce_enqueue plain comm", "MPIX_Allreduce_enqueue");
    expect(MPIX_Recv_enqueue(buf, 1, MPI_INT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE), MPI_ERR_COMM,
           "recv_enqueue plain comm", "not a stream communicator");
    expect(MPIX_Isend_enqueue(buf, 1, MPI_INT, 0, 0, MPI_COMM_WORLD, &rq), MPI_ERR_COMM,
           "isend_enqueue plain comm", "MPIX_Isend_enqueue");
    /* A request not made by an enqueue form. */
    MPI_Request plain;
    MPI_Irecv(buf, 1, MPI_INT, rank, 5, MPI_COMM_WORLD, &plain);
    expect(MPIX_Wait_enqueue(&plain, MPI_STATUS_IGNORE), MPI_ERR_REQUEST, "wait_enqueue plain request",
           "MPIX_Isend_enqueue");
    MPI_Send(buf, 1, MPI_INT, rank, 5, MPI_COMM_WORLD);
    MPI_Wait(&plain, MPI_STATUS_IGNORE);

    /* A stream in use cannot be freed; after the communicator, it can. */
    expect(MPIX_Stream_free(&s), MPI_ERR_ARG, "free attached stream", "attached");
    CHECK(MPI_Comm_free(&sc) == MPI_SUCCESS, "free stream comm");
    CHECK(MPIX_Stream_free(&s) == MPI_SUCCESS && s == MPIX_STREAM_NULL, "MPIX_Stream_free");
    expect(MPIX_Stream_free(&s), MPI_ERR_ARG, "free MPIX_STREAM_NULL", "MPIX_STREAM_NULL");

    /* Bad info: unknown type, missing value, malformed value; cudaStream_t without CUDA. */
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "type", "vulkanQueue");
    expect(MPIX_Stream_create(info, &s), MPI_ERR_INFO_VALUE, "unknown type", "vulkanQueue");
    MPI_Info_set(info, "type", "cudaStream_t");
    expect(MPIX_Stream_create(info, &s), MPI_ERR_INFO_NOKEY, "no value", "\"value\"");
    MPI_Info_set(info, "value", "12zz");
    expect(MPIX_Stream_create(info, &s), MPI_ERR_INFO_VALUE, "bad hex", "hex-encoded");
    void *fake = (void *)0x1234;
    CHECK(MPIX_Info_set_hex(info, "value", &fake, sizeof fake) == MPI_SUCCESS, "MPIX_Info_set_hex");
    char hex[64];
    int flag = 0;
    MPI_Info_get(info, "value", 63, hex, &flag);
    CHECK(flag && strlen(hex) == 2 * sizeof fake, "hex value \"%s\"", hex);
    if (!MPIX_Query_cuda_support())
        expect(MPIX_Stream_create(info, &s), MPI_ERR_UNSUPPORTED_OPERATION, "no CUDA",
               "needs CUDA");
    MPI_Info_free(&info);

    /* Multiplex: two host streams; get_stream gives each back. */
    MPIX_Stream two[2];
    MPIX_Stream_create(MPI_INFO_NULL, &two[0]);
    MPIX_Stream_create(MPI_INFO_NULL, &two[1]);
    CHECK(MPIX_Stream_comm_create_multiplex(MPI_COMM_WORLD, 2, two, &sc) == MPI_SUCCESS, "multiplex");
    CHECK(MPIX_Comm_get_stream(sc, 1, &got) == MPI_SUCCESS && got == two[1], "multiplex stream 1");
    MPI_Comm_free(&sc);
    MPIX_Stream_free(&two[0]);
    MPIX_Stream_free(&two[1]);

    int all = 0;
    MPI_Allreduce(&fails, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0 && all == 0)
        printf("OK stream_api\n");
    MPI_Finalize();
    return all != 0;
}
