/* MPI_Init_thread(MULTIPLE), Initialized/Finalized, Query_thread, Is_thread_main, Get_version,
 * Get_library_version, Get_processor_name, Wtime/Wtick. Also run as a singleton (no mpirun). */
#include "ctest.h"

int main(int argc, char **argv)
{
    int flag = -1, provided = -1, q = -1, major = 0, minor = 0, len = -1;

    CHECK_MPI(MPI_Initialized(&flag));
    CHECK(flag == 0, "Initialized before init = %d", flag);
    CHECK_MPI(MPI_Finalized(&flag));
    CHECK(flag == 0, "Finalized before init = %d", flag);
    /* Get_version may be called before MPI_Init. */
    CHECK_MPI(MPI_Get_version(&major, &minor));
    CHECK(major == MPI_VERSION && minor == MPI_SUBVERSION, "version %d.%d before init", major, minor);

    CHECK_MPI(MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided));
    ct_setup();
    /* gpumpi supports every level (README): what was asked is what is provided */
    CHECK(provided == MPI_THREAD_MULTIPLE, "MPI_Init_thread(MULTIPLE) provided %d, want MPI_THREAD_MULTIPLE (%d)",
          provided, MPI_THREAD_MULTIPLE);
    CHECK(MPI_THREAD_SINGLE < MPI_THREAD_FUNNELED && MPI_THREAD_FUNNELED < MPI_THREAD_SERIALIZED &&
              MPI_THREAD_SERIALIZED < MPI_THREAD_MULTIPLE,
          "thread levels not monotonic");
    CHECK_MPI(MPI_Query_thread(&q));
    CHECK(q == provided, "Query_thread %d != provided %d", q, provided);
    CHECK_MPI(MPI_Is_thread_main(&flag));
    CHECK(flag == 1, "Is_thread_main = %d", flag);
    CHECK_MPI(MPI_Initialized(&flag));
    CHECK(flag == 1, "Initialized after init = %d", flag);
    CHECK_MPI(MPI_Finalized(&flag));
    CHECK(flag == 0, "Finalized after init = %d", flag);

    CHECK_MPI(MPI_Get_version(&major, &minor));
    CHECK(major == 5 && minor == 0, "Get_version %d.%d, want 5.0", major, minor);

    {
        char lib[MPI_MAX_LIBRARY_VERSION_STRING];
        memset(lib, 'x', sizeof lib);
        CHECK_MPI(MPI_Get_library_version(lib, &len));
        CHECK(len > 0 && len < MPI_MAX_LIBRARY_VERSION_STRING, "library version len %d", len);
        CHECK(lib[len] == '\0' && (int)strlen(lib) == len, "library version not terminated at %d", len);
    }
    {
        char name[MPI_MAX_PROCESSOR_NAME];
        memset(name, 'x', sizeof name);
        CHECK_MPI(MPI_Get_processor_name(name, &len));
        CHECK(len > 0 && len < MPI_MAX_PROCESSOR_NAME, "processor name len %d", len);
        CHECK(name[len] == '\0' && (int)strlen(name) == len, "processor name not terminated");
        /* every rank on this host gets the same name */
        {
            char root_name[MPI_MAX_PROCESSOR_NAME];
            memcpy(root_name, name, sizeof name);
            CHECK_MPI(MPI_Bcast(root_name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0, MPI_COMM_WORLD));
            CHECK(strcmp(root_name, name) == 0, "processor name %s != rank 0's %s", name, root_name);
        }
    }
    {
        double tick = MPI_Wtick();
        double t0 = MPI_Wtime(), prev = t0, t;
        int i;
        CHECK(tick > 0.0 && tick <= 1.0, "Wtick %g", tick);
        for (i = 0; i < 100000; i++) {
            t = MPI_Wtime();
            CHECK(t >= prev, "Wtime went backwards: %.9f < %.9f", t, prev);
            prev = t;
        }
        /* time advances: spin until at least 1 ms passed, bounded */
        for (i = 0; i < 100000000 && MPI_Wtime() - t0 < 1e-3; i++) {
        }
        CHECK(MPI_Wtime() - t0 >= 1e-3, "Wtime did not advance 1ms");
        CHECK(MPI_Wtime() - t0 < 60.0, "Wtime advanced too much");
    }
    {
        int *val = NULL;
        CHECK_MPI(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_WTIME_IS_GLOBAL, &val, &flag));
        if (flag)
            CHECK(*val == 0 || *val == 1, "WTIME_IS_GLOBAL = %d", *val);
    }

    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    if (ct_world_rank == 0)
        printf("OK init_thread\n");
    fflush(stdout);
    CHECK_MPI(MPI_Finalize());
    MPI_Finalized(&flag);
    if (flag != 1) {
        fprintf(stderr, "FAIL Finalized after finalize = %d\n", flag);
        return 1;
    }
    MPI_Initialized(&flag);
    if (flag != 1) {
        fprintf(stderr, "FAIL Initialized after finalize = %d\n", flag);
        return 1;
    }
    return 0;
}
