/* MPI_THREAD_MULTIPLE: 4 threads per rank run point-to-point on a shared communicator
 * (Sendrecv, and blocking Send and Recv; tags per thread), and Sendrecv and collectives on
 * per-thread duplicates (each replaced by a new one every ten rounds, by all threads at once) at the same time. gpumpi provides
 * MULTIPLE (README): a lower provided level fails the test.
 * Uses POSIX threads (part of glibc's libc). */
#include "ctest.h"
#include <pthread.h>

#define NT 4
#define ITERS 50

static MPI_Comm tcomm[NT];
static int failed[NT];

static void *worker(void *arg)
{
    int t = (int)(long)arg, it, rank = ct_world_rank, size = ct_world_size;
    int next = (rank + 1) % size, prev = (rank + size - 1) % size, is_main = -1;
    if (MPI_Is_thread_main(&is_main) != MPI_SUCCESS || is_main != 0) {
        fprintf(stderr, "FAIL thread %d rank %d: Is_thread_main = %d in a worker thread\n", t, rank, is_main);
        failed[t] = 1;
    }
    for (it = 0; it < ITERS && !failed[t]; it++) {
        int s[8], r[8], i, pass, sum = -1, v = rank * NT + t;
        MPI_Status st;
        for (i = 0; i < 8; i++) {
            s[i] = ct_val(rank, i + it, t);
            r[i] = -1;
        }
        /* shared communicator, tag per thread: messages must not cross threads */
        if (MPI_Sendrecv(s, 8, MPI_INT, next, t, r, 8, MPI_INT, prev, t, MPI_COMM_WORLD, &st) != MPI_SUCCESS)
            failed[t] = 1;
        for (i = 0; i < 8; i++)
            if (r[i] != ct_val(prev, i + it, t)) {
                fprintf(stderr, "FAIL thread %d rank %d iter %d: r[%d] = %d want %d\n", t, rank, it, i, r[i],
                        ct_val(prev, i + it, t));
                failed[t] = 1;
                break;
            }
        /* blocking sends and receives on the shared communicator, tag NT + thread: even ranks
         * send first, odd ranks receive first (eager messages complete without their receive,
         * so odd rings cannot deadlock); three messages a round, received in their order,
         * every other round from MPI_ANY_SOURCE (only prev sends this thread's tag here) */
        for (pass = 0; pass < 2 && !failed[t]; pass++) {
            int k, m[2], src = it % 2 ? MPI_ANY_SOURCE : prev, count = -1;
            if ((pass == 0) == (rank % 2 == 0)) {
                for (k = 0; k < 3; k++) {
                    m[0] = ct_val(rank, it, t * 3 + k);
                    m[1] = k;
                    if (MPI_Send(m, 2, MPI_INT, next, NT + t, MPI_COMM_WORLD) != MPI_SUCCESS)
                        failed[t] = 1;
                }
                continue;
            }
            for (k = 0; k < 3 && !failed[t]; k++) {
                m[0] = m[1] = -1;
                if (MPI_Recv(m, 2, MPI_INT, src, NT + t, MPI_COMM_WORLD, &st) != MPI_SUCCESS ||
                    MPI_Get_count(&st, MPI_INT, &count) != MPI_SUCCESS)
                    failed[t] = 1;
                else if (m[0] != ct_val(prev, it, t * 3 + k) || m[1] != k || st.MPI_SOURCE != prev ||
                         st.MPI_TAG != NT + t || count != 2) {
                    fprintf(stderr,
                            "FAIL thread %d rank %d iter %d: blocking receive %d got {%d, %d} from %d tag %d "
                            "count %d, want {%d, %d} from %d tag %d count 2\n",
                            t, rank, it, k, m[0], m[1], st.MPI_SOURCE, st.MPI_TAG, count,
                            ct_val(prev, it, t * 3 + k), k, prev, NT + t);
                    failed[t] = 1;
                }
            }
        }
        /* point-to-point on this thread's own communicator, the same tag in every thread (only
         * the communicators keep the threads' messages apart); every tenth round every thread
         * replaces its communicator (communicators created and freed by several threads at
         * once: each must get a context id of its own) */
        if (!failed[t]) {
            int a[2] = {ct_val(rank, it, 40 + t), t}, b[2] = {-1, -1};
            if (MPI_Sendrecv(a, 2, MPI_INT, next, 0, b, 2, MPI_INT, prev, 0, tcomm[t], &st) != MPI_SUCCESS ||
                b[0] != ct_val(prev, it, 40 + t) || b[1] != t || st.MPI_SOURCE != prev) {
                fprintf(stderr, "FAIL thread %d rank %d iter %d: sendrecv on its communicator got {%d, %d} from %d\n",
                        t, rank, it, b[0], b[1], st.MPI_SOURCE);
                failed[t] = 1;
            }
            if (it % 10 == 9) {
                MPI_Comm old = tcomm[t];
                if (MPI_Comm_dup(old, &tcomm[t]) != MPI_SUCCESS || MPI_Comm_free(&old) != MPI_SUCCESS)
                    failed[t] = 1;
            }
        }
        /* collective on this thread's own communicator */
        if (MPI_Allreduce(&v, &sum, 1, MPI_INT, MPI_SUM, tcomm[t]) != MPI_SUCCESS)
            failed[t] = 1;
        if (sum != NT * size * (size - 1) / 2 + t * size) {
            fprintf(stderr, "FAIL thread %d rank %d iter %d: allreduce %d want %d\n", t, rank, it, sum,
                    NT * size * (size - 1) / 2 + t * size);
            failed[t] = 1;
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int provided, t, main_flag;
    pthread_t th[NT];

    CHECK_MPI(MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided));
    ct_setup();
    CHECK(provided == MPI_THREAD_MULTIPLE, "MPI_Init_thread(MULTIPLE) provided %d, want MPI_THREAD_MULTIPLE (%d)",
          provided, MPI_THREAD_MULTIPLE);
    for (t = 0; t < NT; t++)
        CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &tcomm[t]));
    for (t = 0; t < NT; t++)
        CHECK(pthread_create(&th[t], NULL, worker, (void *)(long)t) == 0, "pthread_create");
    for (t = 0; t < NT; t++)
        pthread_join(th[t], NULL);
    for (t = 0; t < NT; t++)
        CHECK(!failed[t], "thread %d failed", t);
    CHECK_MPI(MPI_Is_thread_main(&main_flag));
    CHECK(main_flag == 1, "Is_thread_main in the main thread = %d", main_flag);
    for (t = 0; t < NT; t++)
        CHECK_MPI(MPI_Comm_free(&tcomm[t]));
    return ct_finish("thread_multiple");
}
