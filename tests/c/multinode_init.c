/* A job across hosts, as far as the launcher takes it: MPI_Init, rank and size, the processor
 * name and the launch variables of each rank's host, MPI_Abort from a chosen rank, MPI_Finalize.
 * No data moves between ranks here (that needs the network engine).
 *
 * Arguments: the host of each rank in rank order, `localhost` standing for this machine
 * (its processor name is then the host name), optionally followed by `abort=R`: rank R calls
 * MPI_Abort(MPI_COMM_WORLD, 7) after its checks while the others wait in MPI_Finalize.
 * Each rank checks: size = number of hosts given; processor name = its host; local rank and
 * local size (OMPI_COMM_WORLD_LOCAL_RANK/SIZE, MPI_LOCALRANKID, LOCAL_RANK) = its index among
 * the ranks of that host and their number. Rank 0 prints "OK multinode_init". */
#include "ctest.h"
#include <unistd.h>

static int env_int(const char *name)
{
    const char *v = getenv(name);
    return v ? atoi(v) : -1;
}

int main(int argc, char **argv)
{
    CHECK_MPI(MPI_Init(&argc, &argv));
    MPI_Comm_rank(MPI_COMM_WORLD, &ct_world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ct_world_size);
    int rank = ct_world_rank, nhosts = argc - 1, abort_rank = -1;
    if (nhosts > 0 && strncmp(argv[argc - 1], "abort=", 6) == 0) {
        abort_rank = atoi(argv[argc - 1] + 6);
        nhosts--;
    }
    CHECK(ct_world_size == nhosts, "size %d, but %d hosts were given", ct_world_size, nhosts);

    char self[256] = {0};
    gethostname(self, sizeof self - 1);
    const char *want = strcmp(argv[1 + rank], "localhost") == 0 ? self : argv[1 + rank];
    char name[MPI_MAX_PROCESSOR_NAME];
    int len = -1;
    CHECK_MPI(MPI_Get_processor_name(name, &len));
    CHECK(len == (int)strlen(name) && strcmp(name, want) == 0, "processor name %s, expected %s",
          name, want);

    int local = 0, local_n = 0;
    for (int r = 0; r < nhosts; r++) {
        if (strcmp(argv[1 + r], argv[1 + rank]) == 0) {
            if (r < rank)
                local++;
            local_n++;
        }
    }
    CHECK(env_int("OMPI_COMM_WORLD_LOCAL_RANK") == local, "OMPI_COMM_WORLD_LOCAL_RANK %d, want %d",
          env_int("OMPI_COMM_WORLD_LOCAL_RANK"), local);
    CHECK(env_int("OMPI_COMM_WORLD_LOCAL_SIZE") == local_n, "OMPI_COMM_WORLD_LOCAL_SIZE %d, want %d",
          env_int("OMPI_COMM_WORLD_LOCAL_SIZE"), local_n);
    CHECK(env_int("MPI_LOCALRANKID") == local && env_int("LOCAL_RANK") == local,
          "MPI_LOCALRANKID %d LOCAL_RANK %d, want %d", env_int("MPI_LOCALRANKID"),
          env_int("LOCAL_RANK"), local);
    CHECK(env_int("OMPI_COMM_WORLD_RANK") == rank, "OMPI_COMM_WORLD_RANK %d",
          env_int("OMPI_COMM_WORLD_RANK"));

    if (rank == abort_rank)
        MPI_Abort(MPI_COMM_WORLD, 7);
    if (rank == 0)
        printf("OK multinode_init\n");
    MPI_Finalize();
    return 0;
}
