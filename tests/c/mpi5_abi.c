/* MPI-4.1/5.0 additions: MPI_Abi_get_version/get_info, status accessors (Status_get/set_source,
 * tag, error, set_elements, set_cancelled), Request_get_status_all/any, Type_get_value_index,
 * Comm_dup_with_info, Info_create_env, standard-ABI facts (sizeof MPI_Status = 32, handle
 * constants are distinct). */
#include "ctest.h"

int main(int argc, char **argv)
{
    int rank, size, v, flag, i, major = -1, minor = -1;
    MPI_Status st;

    ct_init(&argc, &argv);
    rank = ct_world_rank;
    size = ct_world_size;

    CHECK((int)sizeof(MPI_Status) == 32, "sizeof(MPI_Status) = %d, the standard ABI says 32", (int)sizeof(MPI_Status));
    CHECK_MPI(MPI_Abi_get_version(&major, &minor));
    CHECK(major == MPI_ABI_VERSION && minor == MPI_ABI_SUBVERSION, "Abi_get_version %d.%d, header says %d.%d", major,
          minor, MPI_ABI_VERSION, MPI_ABI_SUBVERSION);
    {
        MPI_Info info = MPI_INFO_NULL;
        int n;
        CHECK_MPI(MPI_Abi_get_info(&info));
        CHECK(info != MPI_INFO_NULL, "Abi_get_info gave MPI_INFO_NULL");
        CHECK_MPI(MPI_Info_get_nkeys(info, &n));
        CHECK(n >= 0, "Abi_get_info nkeys %d", n);
        CHECK_MPI(MPI_Info_free(&info));
    }

    /* status accessors */
    {
        int x;
        MPI_Count c;
        memset(&st, 0, sizeof st);
        CHECK_MPI(MPI_Status_set_source(&st, 3));
        CHECK_MPI(MPI_Status_set_tag(&st, 44));
        CHECK_MPI(MPI_Status_set_error(&st, MPI_ERR_TAG));
        CHECK_MPI(MPI_Status_set_elements(&st, MPI_INT, 5));
        CHECK_MPI(MPI_Status_set_cancelled(&st, 1));
        CHECK(st.MPI_SOURCE == 3 && st.MPI_TAG == 44 && st.MPI_ERROR == MPI_ERR_TAG, "status public fields");
        CHECK_MPI(MPI_Status_get_source(&st, &x));
        CHECK(x == 3, "Status_get_source %d", x);
        CHECK_MPI(MPI_Status_get_tag(&st, &x));
        CHECK(x == 44, "Status_get_tag %d", x);
        CHECK_MPI(MPI_Status_get_error(&st, &x));
        CHECK(x == MPI_ERR_TAG, "Status_get_error %d", x);
        CHECK_MPI(MPI_Get_count(&st, MPI_INT, &x));
        CHECK(x == 5, "count after set_elements %d", x);
        CHECK_MPI(MPI_Get_elements_c(&st, MPI_SHORT, &c));
        CHECK(c == 5 * (MPI_Count)(sizeof(int) / sizeof(short)), "elements as shorts %lld", (long long)c);
        CHECK_MPI(MPI_Test_cancelled(&st, &flag));
        CHECK(flag == 1, "set_cancelled not seen");
    }

    /* Request_get_status_all / _any: do not free the requests */
    {
        int a = rank, b[2] = {-1, -1}, idx = -1;
        MPI_Request rq[3];
        MPI_Status sts[3];
        CHECK_MPI(MPI_Irecv(&b[0], 1, MPI_INT, (rank + size - 1) % size, 1, MPI_COMM_WORLD, &rq[0]));
        CHECK_MPI(MPI_Isend(&a, 1, MPI_INT, (rank + 1) % size, 1, MPI_COMM_WORLD, &rq[1]));
        rq[2] = MPI_REQUEST_NULL;
        flag = 0;
        while (!flag)
            CHECK_MPI(MPI_Request_get_status_all(3, rq, &flag, sts));
        CHECK(rq[0] != MPI_REQUEST_NULL && rq[1] != MPI_REQUEST_NULL, "get_status_all freed requests");
        CHECK(sts[0].MPI_SOURCE == (rank + size - 1) % size && b[0] == (rank + size - 1) % size,
              "get_status_all status/value");
        flag = 0;
        while (!flag)
            CHECK_MPI(MPI_Request_get_status_any(3, rq, &idx, &flag, &st));
        CHECK(idx == 0 || idx == 1, "get_status_any index %d", idx);
        CHECK_MPI(MPI_Waitall(3, rq, MPI_STATUSES_IGNORE));
    }

    /* Type_get_value_index returns the predefined pair types */
    {
        MPI_Datatype t;
        CHECK_MPI(MPI_Type_get_value_index(MPI_DOUBLE, MPI_INT, &t));
        CHECK(t == MPI_DOUBLE_INT, "value_index(double,int) is not MPI_DOUBLE_INT");
        CHECK_MPI(MPI_Type_get_value_index(MPI_INT, MPI_INT, &t));
        CHECK(t == MPI_2INT, "value_index(int,int) is not MPI_2INT");
        CHECK_MPI(MPI_Type_get_value_index(MPI_FLOAT, MPI_INT, &t));
        CHECK(t == MPI_FLOAT_INT, "value_index(float,int) is not MPI_FLOAT_INT");
    }

    /* Comm_dup_with_info and Info_create_env */
    {
        MPI_Comm c;
        MPI_Info info, env;
        int sum = -1;
        CHECK_MPI(MPI_Info_create(&info));
        CHECK_MPI(MPI_Info_set(info, "mpi_assert_no_any_tag", "false"));
        CHECK_MPI(MPI_Comm_dup_with_info(MPI_COMM_WORLD, info, &c));
        v = 1;
        CHECK_MPI(MPI_Allreduce(&v, &sum, 1, MPI_INT, MPI_SUM, c));
        CHECK(sum == size, "allreduce on dup_with_info %d", sum);
        CHECK_MPI(MPI_Comm_free(&c));
        CHECK_MPI(MPI_Info_free(&info));
        CHECK_MPI(MPI_Info_create_env(argc, argv, &env));
        CHECK(env != MPI_INFO_NULL, "Info_create_env gave NULL");
        CHECK_MPI(MPI_Info_free(&env));
    }

    /* handle constants of the standard ABI are distinct and not NULL */
    {
        MPI_Datatype types[] = {MPI_INT, MPI_DOUBLE, MPI_CHAR, MPI_BYTE, MPI_INT64_T, MPI_C_BOOL, MPI_2INT};
        for (i = 0; i < (int)(sizeof types / sizeof types[0]); i++) {
            int j;
            CHECK(types[i] != MPI_DATATYPE_NULL, "datatype %d is NULL", i);
            for (j = 0; j < i; j++)
                CHECK(types[i] != types[j], "datatypes %d and %d share a handle", i, j);
        }
        CHECK(MPI_COMM_WORLD != MPI_COMM_SELF && MPI_COMM_WORLD != MPI_COMM_NULL, "comm handles");
        CHECK(MPI_ANY_SOURCE == -1 && MPI_ANY_TAG == -2 && MPI_PROC_NULL == -3 && MPI_ROOT == -4, "wildcard values");
        CHECK(MPI_UNDEFINED == -32766, "MPI_UNDEFINED %d", MPI_UNDEFINED);
    }
    return ct_finish("mpi5_abi");
}
