/* Communicator churn keeps memory flat: CYCLES (argument cycles=N, default 10000) rounds of
 * MPI_Comm_dup + Allreduce + Bcast (checked) + MPI_Comm_free, with 20 dups alive at once every
 * 500 cycles. The resident set size (VmRSS) after the last cycle may exceed the one after the
 * warm-up (the first 1000 cycles) by at most 2 MiB (a leak of 200 bytes per cycle would show),
 * and gpumpi's communicator GPU counters (MPIX_Query_gpu_resources, looked up weakly so the
 * program also runs on other MPIs) must be back where they started: host buffers never create
 * GPU state, and freed communicators keep none. */
#include "ctest.h"

/* gpumpi's extension (mpi-ext.h); NULL on an MPI without it. */
extern int MPIX_Query_gpu_resources(MPI_Count *, MPI_Count *, MPI_Count *, MPI_Count *)
    __attribute__((weak));

static long rss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    if (!f) return -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &v) == 1) break;
    fclose(f);
    return v;
}

static void gpu_counters(MPI_Count c[4])
{
    c[0] = c[1] = c[2] = c[3] = 0;
    if (MPIX_Query_gpu_resources) CHECK_MPI(MPIX_Query_gpu_resources(&c[0], &c[1], &c[2], &c[3]));
}

static void one_cycle(int cycle)
{
    MPI_Comm c;
    CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &c));
    int v[4] = {ct_world_rank, cycle, 1, -ct_world_rank}, s[4];
    CHECK_MPI(MPI_Allreduce(v, s, 4, MPI_INT, MPI_SUM, c));
    int n = ct_world_size;
    CHECK(s[0] == n * (n - 1) / 2 && s[1] == n * cycle && s[2] == n && s[3] == -s[0],
          "cycle %d: allreduce %d %d %d %d", cycle, s[0], s[1], s[2], s[3]);
    int b = ct_world_rank == cycle % n ? cycle : -1;
    CHECK_MPI(MPI_Bcast(&b, 1, MPI_INT, cycle % n, c));
    CHECK(b == cycle, "cycle %d: bcast got %d", cycle, b);
    CHECK_MPI(MPI_Comm_free(&c));
    CHECK(c == MPI_COMM_NULL, "cycle %d: freed handle not MPI_COMM_NULL", cycle);
}

/* 20 communicators alive at once (more than any former per-process limit), each used, then
 * freed in reverse order. */
static void many_alive(int cycle)
{
    MPI_Comm cs[20];
    for (int i = 0; i < 20; i++) {
        CHECK_MPI(MPI_Comm_dup(i ? cs[i - 1] : MPI_COMM_WORLD, &cs[i]));
        int x = i + cycle, y = 0;
        CHECK_MPI(MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_MAX, cs[i]));
        CHECK(y == x, "dup %d: allreduce max %d want %d", i, y, x);
    }
    for (int i = 19; i >= 0; i--) CHECK_MPI(MPI_Comm_free(&cs[i]));
}

int main(int argc, char **argv)
{
    ct_init(&argc, &argv);
    int cycles = 10000;
    for (int i = 1; i < argc; i++)
        if (strncmp(argv[i], "cycles=", 7) == 0) cycles = atoi(argv[i] + 7);
    int warm = cycles / 10;
    MPI_Count before[4], after[4];
    gpu_counters(before);
    long rss_warm = -1;
    for (int i = 0; i < cycles; i++) {
        if (i == warm) rss_warm = rss_kib();
        if (i % 500 == 250) many_alive(i);
        one_cycle(i);
    }
    long rss_end = rss_kib();
    gpu_counters(after);
    for (int k = 0; k < 4; k++)
        CHECK(after[k] == before[k], "GPU counter %d: %lld before, %lld after %d cycles", k,
              (long long)before[k], (long long)after[k], cycles);
    if (rss_warm > 0 && rss_end > 0)
        CHECK(rss_end - rss_warm <= 2048, "VmRSS grew from %ld to %ld KiB over %d cycles",
              rss_warm, rss_end, cycles - warm);
    if (ct_world_rank == 0)
        fprintf(stderr, "comm_churn: %d cycles, VmRSS %ld -> %ld KiB\n", cycles, rss_warm, rss_end);
    return ct_finish("comm_churn");
}
