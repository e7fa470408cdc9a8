/* More error classes under MPI_ERRORS_RETURN (on COMM_WORLD and COMM_SELF): freeing predefined
 * objects (COMM_WORLD, MPI_INT, MPI_SUM), out-of-range ranks in group calls,
 * Cart_create larger than the communicator, bad Dims_create, bad Info keys, bad counts and types
 * in constructors. The library stays usable. */
#include "ctest.h"

static void usable(void)
{
    int v = 1, s = 0;
    CHECK_MPI(MPI_Allreduce(&v, &s, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    CHECK(s == ct_world_size, "allreduce after error %d", s);
}

int main(int argc, char **argv)
{
    int size, rc, cls;

    ct_init(&argc, &argv);
    size = ct_world_size;
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));

    /* freeing predefined objects is an error and leaves them intact */
    {
        MPI_Comm w = MPI_COMM_WORLD;
        MPI_Datatype t = MPI_INT;
        MPI_Op o = MPI_SUM;
        CHECK_CLASS(MPI_Comm_free(&w), MPI_ERR_COMM);
        CHECK_CLASS(MPI_Type_free(&t), MPI_ERR_TYPE);
        CHECK_CLASS(MPI_Op_free(&o), MPI_ERR_OP);
        usable();
    }

    /* groups: ranks out of range */
    {
        MPI_Group wg, g;
        int bad = size;
        CHECK_MPI(MPI_Comm_group(MPI_COMM_WORLD, &wg));
        CHECK_CLASS(MPI_Group_incl(wg, 1, &bad, &g), MPI_ERR_RANK);
        CHECK_CLASS(MPI_Group_excl(wg, 1, &bad, &g), MPI_ERR_RANK);
        CHECK_MPI(MPI_Group_free(&wg));
        usable();
    }

    /* topology larger than the communicator */
    {
        int dims[2] = {size + 1, 1}, periods[2] = {0, 0};
        MPI_Comm c = MPI_COMM_NULL;
        rc = MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &c);
        MPI_Error_class(rc, &cls);
        CHECK(rc != MPI_SUCCESS && (cls == MPI_ERR_ARG || cls == MPI_ERR_TOPOLOGY || cls == MPI_ERR_DIMS),
              "Cart_create too large: class %d", cls);
        rc = MPI_Dims_create(size, -1, dims);
        MPI_Error_class(rc, &cls);
        CHECK(rc != MPI_SUCCESS && (cls == MPI_ERR_DIMS || cls == MPI_ERR_ARG), "Dims_create(ndims -1): class %d", cls);
        usable();
    }

    /* Info: key longer than MPI_MAX_INFO_KEY, empty key */
    {
        MPI_Info info;
        char key[MPI_MAX_INFO_KEY + 16];
        memset(key, 'k', sizeof key - 1);
        key[sizeof key - 1] = 0;
        CHECK_MPI(MPI_Info_create(&info));
        CHECK_CLASS(MPI_Info_set(info, key, "v"), MPI_ERR_INFO_KEY);
        CHECK_CLASS(MPI_Info_set(info, "", "v"), MPI_ERR_INFO_KEY);
        CHECK_CLASS(MPI_Info_delete(info, "absent"), MPI_ERR_INFO_NOKEY);
        CHECK_MPI(MPI_Info_free(&info));
        usable();
    }

    /* constructors with negative counts */
    {
        MPI_Datatype t;
        CHECK_CLASS(MPI_Type_vector(-1, 1, 1, MPI_INT, &t), MPI_ERR_COUNT);
        rc = MPI_Type_contiguous(2, MPI_DATATYPE_NULL, &t);
        MPI_Error_class(rc, &cls);
        CHECK(rc != MPI_SUCCESS && cls == MPI_ERR_TYPE, "Type_contiguous(NULL type): class %d", cls);
        usable();
    }

    /* point-to-point still works: Ssend to self with the receive posted */
    {
        int v = 5, w = 0;
        MPI_Request rq;
        CHECK_MPI(MPI_Irecv(&w, 1, MPI_INT, ct_world_rank, 3, MPI_COMM_WORLD, &rq));
        CHECK_MPI(MPI_Ssend(&v, 1, MPI_INT, ct_world_rank, 3, MPI_COMM_WORLD));
        CHECK_MPI(MPI_Wait(&rq, MPI_STATUS_IGNORE));
        CHECK(w == 5, "self Ssend after errors %d", w);
    }
    return ct_finish("err_objects");
}
