/* Shared helpers for the gpumpi C test programs in tests/c.
 *
 * Every program: prints "OK <name>" from rank 0 and exits 0 on success; on failure prints what
 * failed (file, line, rank, values) to stderr and calls MPI_Abort(MPI_COMM_WORLD, 1).
 * Only <mpi.h> and libc are used. */
#ifndef GPUMPI_CTEST_H
#define GPUMPI_CTEST_H

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int ct_world_rank = -1;
static int ct_world_size = 0;

static inline void ct_fail_abort(void)
{
    fflush(stdout);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1); /* not reached */
}

/* CHECK(cond, "fmt", args...): on failure print and abort the job. */
#define CHECK(cond, ...)                                                                  \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "FAIL %s:%d rank %d: (%s) ", __FILE__, __LINE__,              \
                    ct_world_rank, #cond);                                                \
            fprintf(stderr, __VA_ARGS__);                                                 \
            fprintf(stderr, "\n");                                                        \
            ct_fail_abort();                                                              \
        }                                                                                 \
    } while (0)

/* CHECK_MPI(call): the call must return MPI_SUCCESS. */
#define CHECK_MPI(call)                                                                   \
    do {                                                                                  \
        int ct_rc_ = (call);                                                              \
        if (ct_rc_ != MPI_SUCCESS) {                                                      \
            char ct_msg_[MPI_MAX_ERROR_STRING];                                           \
            int ct_len_ = 0;                                                              \
            ct_msg_[0] = 0;                                                               \
            MPI_Error_string(ct_rc_, ct_msg_, &ct_len_);                                  \
            fprintf(stderr, "FAIL %s:%d rank %d: %s returned %d (%s)\n", __FILE__,        \
                    __LINE__, ct_world_rank, #call, ct_rc_, ct_msg_);                     \
            ct_fail_abort();                                                              \
        }                                                                                 \
    } while (0)

/* CHECK_CLASS(call, class): the call must return an error code of the given class. */
#define CHECK_CLASS(call, want)                                                           \
    do {                                                                                  \
        int ct_rc_ = (call);                                                              \
        int ct_cls_ = -1;                                                                 \
        MPI_Error_class(ct_rc_, &ct_cls_);                                                \
        if (ct_rc_ == MPI_SUCCESS || ct_cls_ != (want)) {                                 \
            fprintf(stderr, "FAIL %s:%d rank %d: %s returned %d (class %d), want class "  \
                    "%s (%d)\n", __FILE__, __LINE__, ct_world_rank, #call, ct_rc_,        \
                    ct_cls_, #want, (int)(want));                                         \
            ct_fail_abort();                                                              \
        }                                                                                 \
    } while (0)

/* After MPI_Init / MPI_Init_thread. */
static inline void ct_setup(void)
{
    MPI_Comm_rank(MPI_COMM_WORLD, &ct_world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ct_world_size);
}

static inline void ct_init(int *argc, char ***argv)
{
    CHECK_MPI(MPI_Init(argc, argv));
    ct_setup();
}

/* Barrier, print "OK name" from rank 0, finalize. Returns the exit code for main. */
static inline int ct_finish(const char *name)
{
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    if (ct_world_rank == 0) {
        printf("OK %s\n", name);
        fflush(stdout);
    }
    CHECK_MPI(MPI_Finalize());
    return 0;
}

/* Deterministic fill value for element i of a buffer sent by rank r with salt s. */
static inline int ct_val(int r, int i, int s)
{
    return (int)(((unsigned)r * 1000003u + (unsigned)i * 7919u + (unsigned)s * 104729u) % 2000003u);
}

/* Collective flavour for programs that run each collective three ways (argv[1]):
 * 0 "blocking" (default), 1 "nonblocking" (MPI_I*), 2 "persistent" (MPI_*_init + Start). */
static int ct_mode = 0;

static inline void ct_parse_mode(int argc, char **argv)
{
    ct_mode = 0;
    if (argc > 1 && strcmp(argv[1], "nonblocking") == 0)
        ct_mode = 1;
    else if (argc > 1 && strcmp(argv[1], "persistent") == 0)
        ct_mode = 2;
}

/* COLL(Bcast, bcast, args...) calls MPI_Bcast(args), MPI_Ibcast(args, &req) + Wait, or
 * MPI_Bcast_init(args, MPI_INFO_NULL, &req) + Start + Wait + Request_free, by ct_mode. */
#define COLL(name, lname, ...)                                                            \
    do {                                                                                  \
        if (ct_mode == 0) {                                                               \
            CHECK_MPI(MPI_##name(__VA_ARGS__));                                           \
        } else {                                                                          \
            MPI_Request rq_ = MPI_REQUEST_NULL;                                           \
            if (ct_mode == 1) {                                                           \
                CHECK_MPI(MPI_I##lname(__VA_ARGS__, &rq_));                               \
            } else {                                                                      \
                CHECK_MPI(MPI_##name##_init(__VA_ARGS__, MPI_INFO_NULL, &rq_));           \
                CHECK_MPI(MPI_Start(&rq_));                                               \
            }                                                                             \
            CHECK_MPI(MPI_Wait(&rq_, MPI_STATUS_IGNORE));                                 \
            if (ct_mode == 2)                                                             \
                CHECK_MPI(MPI_Request_free(&rq_));                                        \
            CHECK(rq_ == MPI_REQUEST_NULL, "request not null after completion");          \
        }                                                                                 \
    } while (0)

static inline const char *ct_mode_name(void)
{
    return ct_mode == 0 ? "blocking" : ct_mode == 1 ? "nonblocking" : "persistent";
}

#endif
