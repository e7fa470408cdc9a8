/* Info objects (create/set/get/get_string/get_valuelen/delete/dup/free/get_nkeys/get_nthkey,
 * MPI_INFO_ENV), Alloc_mem/Free_mem, Error_string/Error_class, Comm_set_info/get_info. */
#include "ctest.h"

int main(int argc, char **argv)
{
    MPI_Info info, dup, env;
    int n, flag, len, i;
    char key[MPI_MAX_INFO_KEY + 1], val[64];

    ct_init(&argc, &argv);

    CHECK_MPI(MPI_Info_create(&info));
    CHECK_MPI(MPI_Info_get_nkeys(info, &n));
    CHECK(n == 0, "new info has %d keys", n);
    CHECK_MPI(MPI_Info_set(info, "alpha", "1"));
    CHECK_MPI(MPI_Info_set(info, "beta", "two"));
    CHECK_MPI(MPI_Info_set(info, "gamma", "three3"));
    CHECK_MPI(MPI_Info_set(info, "beta", "TWO")); /* overwrite keeps one key */
    CHECK_MPI(MPI_Info_get_nkeys(info, &n));
    CHECK(n == 3, "nkeys %d want 3", n);

    len = sizeof val;
    CHECK_MPI(MPI_Info_get_string(info, "beta", &len, val, &flag));
    CHECK(flag && strcmp(val, "TWO") == 0 && len == 4, "get_string beta flag %d '%s' len %d", flag, val, len);
    /* a too-small buffer: truncated, len reports the full size incl. terminator */
    {
        char small[3];
        len = sizeof small;
        CHECK_MPI(MPI_Info_get_string(info, "gamma", &len, small, &flag));
        CHECK(flag && len == 7 && small[2] == 0 && strncmp(small, "th", 2) == 0, "truncated get_string len %d '%s'",
              len, small);
    }
    len = sizeof val;
    CHECK_MPI(MPI_Info_get_string(info, "missing", &len, val, &flag));
    CHECK(flag == 0, "missing key found");

    /* nth key: every key appears once, in some order */
    {
        int seen = 0;
        for (i = 0; i < 3; i++) {
            CHECK_MPI(MPI_Info_get_nthkey(info, i, key));
            if (strcmp(key, "alpha") == 0)
                seen |= 1;
            else if (strcmp(key, "beta") == 0)
                seen |= 2;
            else if (strcmp(key, "gamma") == 0)
                seen |= 4;
            else
                CHECK(0, "unexpected key '%s'", key);
        }
        CHECK(seen == 7, "nthkey did not list every key (%d)", seen);
    }

    /* dup is independent */
    CHECK_MPI(MPI_Info_dup(info, &dup));
    CHECK_MPI(MPI_Info_delete(info, "alpha"));
    CHECK_MPI(MPI_Info_get_nkeys(info, &n));
    CHECK(n == 2, "after delete nkeys %d", n);
    CHECK_MPI(MPI_Info_get_nkeys(dup, &n));
    CHECK(n == 3, "dup nkeys %d after deleting from the original", n);
    len = sizeof val;
    CHECK_MPI(MPI_Info_get_string(dup, "alpha", &len, val, &flag));
    CHECK(flag && strcmp(val, "1") == 0, "dup lost alpha");
    {
        int rc, cls;
        CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
        CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));
        rc = MPI_Info_delete(info, "alpha");
        MPI_Error_class(rc, &cls);
        CHECK(cls == MPI_ERR_INFO_NOKEY, "delete of a missing key: class %d", cls);
        CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
    }
    CHECK_MPI(MPI_Info_free(&dup));
    CHECK(dup == MPI_INFO_NULL, "Info_free did not null");

    /* Comm_set_info / get_info return an info object (contents implementation-defined) */
    {
        MPI_Info got;
        CHECK_MPI(MPI_Comm_set_info(MPI_COMM_WORLD, info));
        CHECK_MPI(MPI_Comm_get_info(MPI_COMM_WORLD, &got));
        CHECK(got != MPI_INFO_NULL, "Comm_get_info gave MPI_INFO_NULL");
        CHECK_MPI(MPI_Info_free(&got));
    }
    CHECK_MPI(MPI_Info_free(&info));

    /* MPI_INFO_ENV is a valid info */
    env = MPI_INFO_ENV;
    CHECK_MPI(MPI_Info_get_nkeys(env, &n));
    CHECK(n >= 0, "INFO_ENV nkeys %d", n);

    /* Alloc_mem / Free_mem */
    {
        char *p = NULL;
        CHECK_MPI(MPI_Alloc_mem(1 << 20, MPI_INFO_NULL, &p));
        CHECK(p != NULL, "Alloc_mem gave NULL");
        memset(p, 0xAB, 1 << 20);
        CHECK((unsigned char)p[(1 << 20) - 1] == 0xAB, "Alloc_mem memory not writable");
        /* usable as a message buffer */
        memset(p + (1 << 19), 0, 1 << 19);
        CHECK_MPI(MPI_Sendrecv(p, 1 << 19, MPI_BYTE, 0, 0, p + (1 << 19), 1 << 19, MPI_BYTE, 0, 0, MPI_COMM_SELF,
                               MPI_STATUS_IGNORE));
        CHECK((unsigned char)p[(1 << 20) - 1] == 0xAB, "Alloc_mem buffer message not received");
        CHECK_MPI(MPI_Free_mem(p));
        p = NULL;
        CHECK_MPI(MPI_Alloc_mem(0, MPI_INFO_NULL, &p));
        CHECK_MPI(MPI_Free_mem(p));
    }

    /* Error_string / Error_class */
    {
        char msg[MPI_MAX_ERROR_STRING], msg2[MPI_MAX_ERROR_STRING];
        int cls;
        CHECK_MPI(MPI_Error_string(MPI_SUCCESS, msg, &len));
        CHECK(len > 0 && (int)strlen(msg) == len, "Error_string(SUCCESS) len %d", len);
        CHECK_MPI(MPI_Error_string(MPI_ERR_RANK, msg, &len));
        CHECK(len > 0 && (int)strlen(msg) == len, "Error_string(ERR_RANK) len %d", len);
        CHECK_MPI(MPI_Error_string(MPI_ERR_TRUNCATE, msg2, &len));
        CHECK(strcmp(msg, msg2) != 0, "ERR_RANK and ERR_TRUNCATE have the same string '%s'", msg);
        CHECK_MPI(MPI_Error_class(MPI_ERR_RANK, &cls));
        CHECK(cls == MPI_ERR_RANK, "Error_class(ERR_RANK) = %d", cls);
        CHECK(MPI_SUCCESS == 0, "MPI_SUCCESS is %d", MPI_SUCCESS);
    }
    return ct_finish("misc_info");
}
