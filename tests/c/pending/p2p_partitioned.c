/* MPI-4 partitioned communication around the ring: Psend_init/Precv_init with 8 partitions of
 * 16 ints, Start, Pready (in reverse order, and Pready_range/Pready_list), Parrived polling,
 * reuse over several iterations, Request_free. */
#include "ctest.h"

#define NP 8
#define PC 16

int main(int argc, char **argv)
{
    int rank, size, next, prev, it, p, i, flag;
    int sb[NP * PC], rb[NP * PC];
    MPI_Request sreq, rreq;

    ct_init(&argc, &argv);
    rank = ct_world_rank;
    size = ct_world_size;
    next = (rank + 1) % size;
    prev = (rank + size - 1) % size;

    CHECK_MPI(MPI_Precv_init(rb, NP, PC, MPI_INT, prev, 3, MPI_COMM_WORLD, MPI_INFO_NULL, &rreq));
    CHECK_MPI(MPI_Psend_init(sb, NP, PC, MPI_INT, next, 3, MPI_COMM_WORLD, MPI_INFO_NULL, &sreq));
    for (it = 0; it < 3; it++) {
        for (i = 0; i < NP * PC; i++) {
            sb[i] = ct_val(rank, i, it);
            rb[i] = -1;
        }
        CHECK_MPI(MPI_Start(&rreq));
        CHECK_MPI(MPI_Start(&sreq));
        if (it == 0) {
            for (p = NP - 1; p >= 0; p--)
                CHECK_MPI(MPI_Pready(p, sreq));
        } else if (it == 1) {
            CHECK_MPI(MPI_Pready_range(0, NP / 2 - 1, sreq));
            CHECK_MPI(MPI_Pready_range(NP / 2, NP - 1, sreq));
        } else {
            int list[NP];
            for (p = 0; p < NP; p++)
                list[p] = (p * 3) % NP; /* 3 is coprime to 8: a permutation */
            CHECK_MPI(MPI_Pready_list(NP, list, sreq));
        }
        /* poll partitions as they arrive, check each one once it has */
        {
            int seen[NP] = {0}, left = NP;
            while (left > 0) {
                for (p = 0; p < NP; p++) {
                    if (seen[p])
                        continue;
                    CHECK_MPI(MPI_Parrived(rreq, p, &flag));
                    if (flag) {
                        for (i = 0; i < PC; i++)
                            CHECK(rb[p * PC + i] == ct_val(prev, p * PC + i, it), "it %d partition %d [%d] = %d", it,
                                  p, i, rb[p * PC + i]);
                        seen[p] = 1;
                        left--;
                    }
                }
            }
        }
        CHECK_MPI(MPI_Wait(&sreq, MPI_STATUS_IGNORE));
        CHECK_MPI(MPI_Wait(&rreq, MPI_STATUS_IGNORE));
        for (i = 0; i < NP * PC; i++)
            CHECK(rb[i] == ct_val(prev, i, it), "it %d after wait [%d] = %d", it, i, rb[i]);
    }
    CHECK_MPI(MPI_Request_free(&sreq));
    CHECK_MPI(MPI_Request_free(&rreq));
    return ct_finish("p2p_partitioned");
}
