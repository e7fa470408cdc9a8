/* Attributes: keyval create/free, set/get/delete, copy callbacks on Comm_dup (NULL_COPY_FN,
 * DUP_FN, a user copy fn that changes the value, one that declines), delete callbacks on
 * delete/free/overwrite, predefined attributes on COMM_WORLD (MPI_TAG_UB, MPI_HOST absent or
 * valid, MPI_IO, MPI_WTIME_IS_GLOBAL, MPI_APPNUM, MPI_UNIVERSE_SIZE), type attributes. */
#include "ctest.h"
#include <stdint.h>

static int deletes = 0, copies = 0;

static int copy_plus_one(MPI_Comm old, int kv, void *extra, void *in, void *out, int *flag)
{
    (void)old;
    (void)kv;
    CHECK(*(int *)extra == 42, "copy fn extra_state %d", *(int *)extra);
    copies++;
    *(void **)out = (void *)((intptr_t)in + 1);
    *flag = 1;
    return MPI_SUCCESS;
}
static int copy_decline(MPI_Comm old, int kv, void *extra, void *in, void *out, int *flag)
{
    (void)old;
    (void)kv;
    (void)extra;
    (void)in;
    (void)out;
    copies++;
    *flag = 0;
    return MPI_SUCCESS;
}
static int delete_count(MPI_Comm c, int kv, void *val, void *extra)
{
    (void)c;
    (void)kv;
    (void)val;
    CHECK(*(int *)extra == 42, "delete fn extra_state %d", *(int *)extra);
    deletes++;
    return MPI_SUCCESS;
}
static int type_deletes = 0;
static int type_delete(MPI_Datatype t, int kv, void *val, void *extra)
{
    (void)t;
    (void)kv;
    (void)extra;
    CHECK((intptr_t)val == 77, "type attribute value at delete %ld", (long)(intptr_t)val);
    type_deletes++;
    return MPI_SUCCESS;
}

int main(int argc, char **argv)
{
    int flag, extra = 42, k_plus, k_decline, k_null, k_dup, k_ty;
    void *val;
    int *ip;
    MPI_Comm dup;

    ct_init(&argc, &argv);

    /* predefined attributes */
    CHECK_MPI(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ip, &flag));
    CHECK(flag && *ip >= 32767, "MPI_TAG_UB flag %d value %d", flag, flag ? *ip : 0);
    {
        int ub = *ip, v = 3, w = 0;
        CHECK_MPI(MPI_Sendrecv(&v, 1, MPI_INT, ct_world_rank, ub, &w, 1, MPI_INT, ct_world_rank, ub, MPI_COMM_WORLD,
                               MPI_STATUS_IGNORE));
        CHECK(w == 3, "message with tag TAG_UB");
    }
    CHECK_MPI(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_HOST, &ip, &flag));
    if (flag)
        CHECK(*ip == MPI_PROC_NULL || (*ip >= 0 && *ip < ct_world_size), "MPI_HOST %d", *ip);
    CHECK_MPI(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_IO, &ip, &flag));
    if (flag)
        CHECK(*ip == MPI_ANY_SOURCE || *ip == MPI_PROC_NULL || (*ip >= 0 && *ip < ct_world_size), "MPI_IO %d", *ip);
    CHECK_MPI(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_APPNUM, &ip, &flag));
    if (flag)
        CHECK(*ip == 0, "MPI_APPNUM %d", *ip);
    CHECK_MPI(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_UNIVERSE_SIZE, &ip, &flag));
    if (flag)
        CHECK(*ip >= ct_world_size, "MPI_UNIVERSE_SIZE %d < world size", *ip);
    /* TAG_UB is on every communicator */
    CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    CHECK_MPI(MPI_Comm_get_attr(dup, MPI_TAG_UB, &ip, &flag));
    CHECK(flag && *ip >= 32767, "TAG_UB on a dup: flag %d", flag);
    CHECK_MPI(MPI_Comm_free(&dup));

    /* keyvals */
    CHECK_MPI(MPI_Comm_create_keyval(copy_plus_one, delete_count, &k_plus, &extra));
    CHECK_MPI(MPI_Comm_create_keyval(copy_decline, delete_count, &k_decline, &extra));
    CHECK_MPI(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_count, &k_null, &extra));
    CHECK_MPI(MPI_Comm_create_keyval(MPI_COMM_DUP_FN, MPI_COMM_NULL_DELETE_FN, &k_dup, &extra));
    CHECK(k_plus != k_decline && k_plus != k_null && k_null != k_dup, "keyvals not distinct");

    /* not set yet */
    CHECK_MPI(MPI_Comm_get_attr(MPI_COMM_WORLD, k_plus, &val, &flag));
    CHECK(flag == 0, "unset attribute found");

    CHECK_MPI(MPI_Comm_set_attr(MPI_COMM_WORLD, k_plus, (void *)(intptr_t)100));
    CHECK_MPI(MPI_Comm_set_attr(MPI_COMM_WORLD, k_decline, (void *)(intptr_t)200));
    CHECK_MPI(MPI_Comm_set_attr(MPI_COMM_WORLD, k_null, (void *)(intptr_t)300));
    CHECK_MPI(MPI_Comm_set_attr(MPI_COMM_WORLD, k_dup, (void *)(intptr_t)400));
    CHECK_MPI(MPI_Comm_get_attr(MPI_COMM_WORLD, k_plus, &val, &flag));
    CHECK(flag && (intptr_t)val == 100, "get attr flag %d value %ld", flag, (long)(intptr_t)val);

    /* overwrite calls the delete callback for the old value */
    CHECK_MPI(MPI_Comm_set_attr(MPI_COMM_WORLD, k_plus, (void *)(intptr_t)101));
    CHECK(deletes == 1, "overwrite: delete callback called %d times", deletes);
    CHECK_MPI(MPI_Comm_get_attr(MPI_COMM_WORLD, k_plus, &val, &flag));
    CHECK(flag && (intptr_t)val == 101, "overwritten value %ld", (long)(intptr_t)val);

    /* dup runs the copy callbacks */
    CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    CHECK(copies == 2, "copy callbacks called %d times, want 2", copies);
    CHECK_MPI(MPI_Comm_get_attr(dup, k_plus, &val, &flag));
    CHECK(flag && (intptr_t)val == 102, "copied value flag %d value %ld", flag, (long)(intptr_t)val);
    CHECK_MPI(MPI_Comm_get_attr(dup, k_decline, &val, &flag));
    CHECK(flag == 0, "declined attribute was copied");
    CHECK_MPI(MPI_Comm_get_attr(dup, k_null, &val, &flag));
    CHECK(flag == 0, "NULL_COPY_FN attribute was copied");
    CHECK_MPI(MPI_Comm_get_attr(dup, k_dup, &val, &flag));
    CHECK(flag && (intptr_t)val == 400, "DUP_FN attribute flag %d value %ld", flag, (long)(intptr_t)val);
    /* the original is unchanged */
    CHECK_MPI(MPI_Comm_get_attr(MPI_COMM_WORLD, k_plus, &val, &flag));
    CHECK(flag && (intptr_t)val == 101, "original changed by dup: %ld", (long)(intptr_t)val);

    /* freeing the dup deletes its attributes (k_plus only has a counting delete fn there) */
    deletes = 0;
    CHECK_MPI(MPI_Comm_free(&dup));
    CHECK(deletes == 1, "Comm_free: delete callbacks called %d times, want 1", deletes);

    /* explicit delete */
    deletes = 0;
    CHECK_MPI(MPI_Comm_delete_attr(MPI_COMM_WORLD, k_decline));
    CHECK(deletes == 1, "delete_attr: callback called %d times", deletes);
    CHECK_MPI(MPI_Comm_get_attr(MPI_COMM_WORLD, k_decline, &val, &flag));
    CHECK(flag == 0, "deleted attribute still found");

    /* freeing a keyval nulls the handle; attributes already set stay readable until deleted */
    {
        int k = k_null;
        CHECK_MPI(MPI_Comm_free_keyval(&k_null));
        CHECK(k_null == MPI_KEYVAL_INVALID, "free_keyval did not set MPI_KEYVAL_INVALID");
        CHECK_MPI(MPI_Comm_get_attr(MPI_COMM_WORLD, k, &val, &flag));
        CHECK(flag && (intptr_t)val == 300, "attribute of a freed keyval: flag %d", flag);
        deletes = 0;
        CHECK_MPI(MPI_Comm_delete_attr(MPI_COMM_WORLD, k));
        CHECK(deletes == 1, "delete of a freed keyval's attribute: %d", deletes);
    }
    CHECK_MPI(MPI_Comm_delete_attr(MPI_COMM_WORLD, k_plus));
    CHECK_MPI(MPI_Comm_delete_attr(MPI_COMM_WORLD, k_dup));
    CHECK_MPI(MPI_Comm_free_keyval(&k_plus));
    CHECK_MPI(MPI_Comm_free_keyval(&k_decline));
    CHECK_MPI(MPI_Comm_free_keyval(&k_dup));

    /* datatype attributes */
    {
        MPI_Datatype t;
        CHECK_MPI(MPI_Type_create_keyval(MPI_TYPE_NULL_COPY_FN, type_delete, &k_ty, NULL));
        CHECK_MPI(MPI_Type_contiguous(3, MPI_INT, &t));
        CHECK_MPI(MPI_Type_set_attr(t, k_ty, (void *)(intptr_t)77));
        CHECK_MPI(MPI_Type_get_attr(t, k_ty, &val, &flag));
        CHECK(flag && (intptr_t)val == 77, "type attribute flag %d", flag);
        {
            /* MPI_TYPE_NULL_COPY_FN: a dup does not get the attribute; MPI_TYPE_DUP_FN: it does */
            MPI_Datatype t2;
            int k_tdup;
            CHECK_MPI(MPI_Type_dup(t, &t2));
            CHECK_MPI(MPI_Type_get_attr(t2, k_ty, &val, &flag));
            CHECK(!flag, "Type_dup copied an attribute whose keyval has MPI_TYPE_NULL_COPY_FN");
            CHECK_MPI(MPI_Type_free(&t2));
            CHECK_MPI(MPI_Type_create_keyval(MPI_TYPE_DUP_FN, MPI_TYPE_NULL_DELETE_FN, &k_tdup, NULL));
            CHECK_MPI(MPI_Type_set_attr(t, k_tdup, (void *)(intptr_t)88));
            CHECK_MPI(MPI_Type_dup(t, &t2));
            CHECK_MPI(MPI_Type_get_attr(t2, k_tdup, &val, &flag));
            CHECK(flag && (intptr_t)val == 88, "Type_dup with MPI_TYPE_DUP_FN: flag %d", flag);
            CHECK_MPI(MPI_Type_free(&t2));
            CHECK_MPI(MPI_Type_delete_attr(t, k_tdup));
            CHECK_MPI(MPI_Type_free_keyval(&k_tdup));
        }
        CHECK_MPI(MPI_Type_free(&t));
        CHECK(type_deletes == 1, "Type_free: type attribute delete called %d times", type_deletes);
        CHECK_MPI(MPI_Type_free_keyval(&k_ty));
    }
    return ct_finish("comm_attr");
}
