/* The MPIX half-precision datatypes of mpi-ext.h (MPIX_C_FLOAT16, MPIX_BFLOAT16 = MPIX_C_BF16)
 * on host buffers: sizes and names, Allreduce with SUM/PROD/MIN/MAX (and in place), Reduce,
 * Reduce_local, Bcast; results are small integers, exact in both formats; bitwise ops refused. */
#include "ctest.h"
#include <mpi-ext.h>
#include <stdint.h>

/* bit patterns of 0..8 */
static const uint16_t F16[] = {0x0000, 0x3c00, 0x4000, 0x4200, 0x4400, 0x4500, 0x4600, 0x4700, 0x4800};
static const uint16_t BF16[] = {0x0000, 0x3f80, 0x4000, 0x4040, 0x4080, 0x40a0, 0x40c0, 0x40e0, 0x4100};

#define N 37

static void run(MPI_Datatype t, const uint16_t *tab, const char *name)
{
    int rank = ct_world_rank, size = ct_world_size, s = 0;
    CHECK_MPI(MPI_Type_size(t, &s));
    CHECK(s == 2, "%s: size %d", name, s);
    char got[MPI_MAX_OBJECT_NAME];
    int len = 0;
    CHECK_MPI(MPI_Type_get_name(t, got, &len));
    CHECK(strcmp(got, name) == 0, "name %s want %s", got, name);
    uint16_t in[N], out[N];
    /* SUM of ones = size; MIN/MAX of rank+1; PROD of 1 and one 2 (rank 0) = 2 */
    for (int i = 0; i < N; i++) in[i] = tab[1];
    CHECK_MPI(MPI_Allreduce(in, out, N, t, MPI_SUM, MPI_COMM_WORLD));
    for (int i = 0; i < N; i++) CHECK(out[i] == tab[size], "%s sum [%d] = %#x want %#x", name, i, out[i], tab[size]);
    for (int i = 0; i < N; i++) in[i] = tab[rank + 1];
    CHECK_MPI(MPI_Allreduce(in, out, N, t, MPI_MIN, MPI_COMM_WORLD));
    for (int i = 0; i < N; i++) CHECK(out[i] == tab[1], "%s min [%d] = %#x", name, i, out[i]);
    CHECK_MPI(MPI_Allreduce(in, out, N, t, MPI_MAX, MPI_COMM_WORLD));
    for (int i = 0; i < N; i++) CHECK(out[i] == tab[size], "%s max [%d] = %#x", name, i, out[i]);
    for (int i = 0; i < N; i++) out[i] = rank == 0 ? tab[2] : tab[1];
    CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, out, N, t, MPI_PROD, MPI_COMM_WORLD));
    for (int i = 0; i < N; i++) CHECK(out[i] == tab[2], "%s prod in place [%d] = %#x", name, i, out[i]);
    /* Reduce to the last rank, Bcast from it */
    for (int i = 0; i < N; i++) in[i] = tab[1];
    memset(out, 0xff, sizeof out);
    CHECK_MPI(MPI_Reduce(in, out, N, t, MPI_SUM, size - 1, MPI_COMM_WORLD));
    if (rank == size - 1)
        for (int i = 0; i < N; i++) CHECK(out[i] == tab[size], "%s reduce [%d] = %#x", name, i, out[i]);
    CHECK_MPI(MPI_Bcast(out, N, t, size - 1, MPI_COMM_WORLD));
    for (int i = 0; i < N; i++) CHECK(out[i] == tab[size], "%s bcast [%d] = %#x", name, i, out[i]);
    /* Reduce_local: 3 + 4 = 7 */
    uint16_t a = tab[3], b = tab[4];
    CHECK_MPI(MPI_Reduce_local(&a, &b, 1, t, MPI_SUM));
    CHECK(b == tab[7], "%s reduce_local %#x", name, b);
    /* bitwise ops are not defined on floating types */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    CHECK_CLASS(MPI_Allreduce(in, out, N, t, MPI_BAND, MPI_COMM_WORLD), MPI_ERR_OP);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

int main(int argc, char **argv)
{
    ct_init(&argc, &argv);
    CHECK(ct_world_size <= 8, "at most 8 ranks");
    run(MPIX_C_FLOAT16, F16, "MPIX_C_FLOAT16");
    run(MPIX_BFLOAT16, BF16, "MPIX_BFLOAT16");
    CHECK(MPIX_C_BF16 == MPIX_BFLOAT16, "MPIX_C_BF16 is MPIX_BFLOAT16");
    return ct_finish("type_half");
}
