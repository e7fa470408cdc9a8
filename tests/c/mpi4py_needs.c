/* Behaviour mpi4py's test modules rely on: handle <-> int conversions round-trip (also for
 * persistent requests), names of MPI_COMM_NULL / MPI_DATATYPE_NULL and of predefined types,
 * communicator-attached Bsend buffers (incl. MPI_BUFFER_AUTOMATIC) and the flushes,
 * Comm_create_from_group, Comm_split_type with the guided / unguided types, Request_get_status_some,
 * Alltoallw on MPI_BOTTOM, Pack_external, Type_create_f90_*, Type_match_size, Type_get_value_index, darray contents, and the
 * MPI_Abi_*_fortran_* calls, MPI_Remove_error_class/code, MPI_Get_hw_resource_info. */
#include "ctest.h"

int main(int argc, char **argv)
{
    int rank, size, len, flag, i;
    char name[MPI_MAX_OBJECT_NAME];

    ct_init(&argc, &argv);
    rank = ct_world_rank;
    size = ct_world_size;

    /* handle conversions */
    {
        MPI_Request r;
        MPI_Comm c;
        MPI_Datatype t;
        CHECK_MPI(MPI_Send_init(NULL, 0, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &r));
        CHECK(MPI_Request_fromint(MPI_Request_toint(r)) == r, "request toint/fromint round trip");
        CHECK(MPI_Request_f2c(MPI_Request_c2f(r)) == r, "request c2f/f2c round trip");
        CHECK(MPI_Request_toint(r) != MPI_Request_toint(MPI_REQUEST_NULL), "request toint is the null's");
        CHECK_MPI(MPI_Request_free(&r));
        CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &c));
        CHECK(MPI_Comm_fromint(MPI_Comm_toint(c)) == c, "comm toint/fromint round trip");
        CHECK(MPI_Comm_fromint(MPI_Comm_toint(MPI_COMM_WORLD)) == MPI_COMM_WORLD, "world round trip");
        CHECK_MPI(MPI_Comm_free(&c));
        CHECK_MPI(MPI_Type_contiguous(2, MPI_INT, &t));
        CHECK(MPI_Type_fromint(MPI_Type_toint(t)) == t, "type toint/fromint round trip");
        CHECK_MPI(MPI_Type_free(&t));
    }

    /* names of null handles and predefined types */
    {
        CHECK_MPI(MPI_Comm_get_name(MPI_COMM_NULL, name, &len));
        CHECK(strcmp(name, "MPI_COMM_NULL") == 0, "comm null name '%s'", name);
        CHECK_MPI(MPI_Type_get_name(MPI_DATATYPE_NULL, name, &len));
        CHECK(strcmp(name, "MPI_DATATYPE_NULL") == 0, "datatype null name '%s'", name);
        CHECK_MPI(MPI_Type_get_name(MPI_INT, name, &len));
        CHECK(strcmp(name, "MPI_INT") == 0, "MPI_INT name '%s'", name);
        CHECK_MPI(MPI_Type_set_name(MPI_INT, "MPI_INT"));
    }

    /* communicator-attached buffers */
    {
        MPI_Comm c;
        MPI_Request rq;
        int sz = 4096 + MPI_BSEND_OVERHEAD, got, v = rank, w = -1;
        char *buf = malloc(sz);
        void *old = NULL;
        CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &c));
        CHECK_MPI(MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN));
        CHECK_MPI(MPI_Comm_attach_buffer(c, buf, sz));
        CHECK_CLASS(MPI_Comm_attach_buffer(c, buf, sz), MPI_ERR_BUFFER);
        CHECK_MPI(MPI_Bsend(&v, 1, MPI_INT, (rank + 1) % size, 5, c));
        CHECK_MPI(MPI_Recv(&w, 1, MPI_INT, (rank + size - 1) % size, 5, c, MPI_STATUS_IGNORE));
        CHECK(w == (rank + size - 1) % size, "bsend on comm buffer got %d", w);
        CHECK_MPI(MPI_Comm_flush_buffer(c));
        CHECK_MPI(MPI_Comm_iflush_buffer(c, &rq));
        CHECK_MPI(MPI_Wait(&rq, MPI_STATUS_IGNORE));
        CHECK_MPI(MPI_Comm_detach_buffer(c, &old, &got));
        CHECK(old == buf && got == sz, "comm detach gave %p/%d", old, got);
        CHECK_MPI(MPI_Comm_attach_buffer(c, MPI_BUFFER_AUTOMATIC, 0));
        for (i = 0; i < 100; i++) /* automatic: no bound */
            CHECK_MPI(MPI_Bsend(buf, 4096, MPI_BYTE, (rank + 1) % size, 6, c));
        for (i = 0; i < 100; i++)
            CHECK_MPI(MPI_Recv(buf, 4096, MPI_BYTE, (rank + size - 1) % size, 6, c, MPI_STATUS_IGNORE));
        CHECK_MPI(MPI_Comm_detach_buffer(c, &old, &got));
        CHECK(old == MPI_BUFFER_AUTOMATIC, "automatic detach gave %p", old);
        /* without any buffer a Bsend does not fit */
        CHECK_CLASS(MPI_Bsend(&v, 1, MPI_INT, (rank + 1) % size, 7, c), MPI_ERR_BUFFER);
        CHECK_MPI(MPI_Buffer_flush());
        CHECK_MPI(MPI_Comm_free(&c));
        free(buf);
    }

    /* Comm_create_from_group: collective over the group only */
    {
        MPI_Group wg, eg;
        MPI_Comm c;
        int res, evens[64], ne = 0;
        CHECK_MPI(MPI_Comm_group(MPI_COMM_WORLD, &wg));
        CHECK_MPI(MPI_Comm_create_from_group(wg, "org.gpumpi.test", MPI_INFO_NULL, MPI_ERRORS_RETURN, &c));
        CHECK_MPI(MPI_Comm_compare(MPI_COMM_WORLD, c, &res));
        CHECK(res == MPI_CONGRUENT, "create_from_group(world group) compare %d", res);
        CHECK_MPI(MPI_Comm_free(&c));
        for (i = 0; i < size && ne < 64; i += 2)
            evens[ne++] = i;
        CHECK_MPI(MPI_Group_incl(wg, ne, evens, &eg));
        if (rank % 2 == 0) {
            int v = 1, sum = 0;
            CHECK_MPI(MPI_Comm_create_from_group(eg, "evens", MPI_INFO_NULL, MPI_ERRORS_RETURN, &c));
            CHECK_MPI(MPI_Allreduce(&v, &sum, 1, MPI_INT, MPI_SUM, c));
            CHECK(sum == ne, "allreduce over the evens %d of %d", sum, ne);
            CHECK_MPI(MPI_Comm_free(&c));
        }
        CHECK_MPI(MPI_Group_free(&eg));
        CHECK_MPI(MPI_Group_free(&wg));
    }

    /* split types */
    {
        MPI_Comm c;
        MPI_Info info;
        CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_HW_GUIDED, 0, MPI_INFO_NULL, &c));
        CHECK(c == MPI_COMM_NULL, "hw_guided without info");
        CHECK_MPI(MPI_Info_create(&info));
        CHECK_MPI(MPI_Info_set(info, "mpi_hw_resource_type", "no-such-thing"));
        CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_RESOURCE_GUIDED, 0, info, &c));
        CHECK(c == MPI_COMM_NULL, "resource_guided with an unknown type");
        CHECK_MPI(MPI_Info_set(info, "mpi_hw_resource_type", "mpi_shared_memory"));
        CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_HW_GUIDED, 0, info, &c));
        CHECK(c != MPI_COMM_NULL, "hw_guided mpi_shared_memory gave MPI_COMM_NULL");
        CHECK_MPI(MPI_Comm_size(c, &len));
        CHECK(len == size, "one node: shared-memory comm has %d of %d", len, size);
        CHECK_MPI(MPI_Comm_free(&c));
        /* one node: no strict subset below the whole job */
        CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_HW_UNGUIDED, 0, info, &c));
        CHECK(c == MPI_COMM_NULL, "hw_unguided on one node");
        CHECK_MPI(MPI_Info_free(&info));
    }

    /* Request_get_status_some does not free */
    {
        int a = rank, b = -1, idx[2], n = -1;
        MPI_Request rq[2];
        MPI_Status sts[2];
        CHECK_MPI(MPI_Irecv(&b, 1, MPI_INT, (rank + size - 1) % size, 9, MPI_COMM_WORLD, &rq[0]));
        CHECK_MPI(MPI_Isend(&a, 1, MPI_INT, (rank + 1) % size, 9, MPI_COMM_WORLD, &rq[1]));
        do
            CHECK_MPI(MPI_Request_get_status_some(2, rq, &n, idx, sts));
        while (n == 0);
        CHECK(n >= 1 && n <= 2, "get_status_some outcount %d", n);
        CHECK(rq[0] != MPI_REQUEST_NULL && rq[1] != MPI_REQUEST_NULL, "get_status_some freed requests");
        CHECK_MPI(MPI_Waitall(2, rq, MPI_STATUSES_IGNORE));
        CHECK(b == (rank + size - 1) % size, "value %d", b);
        CHECK_MPI(MPI_Request_get_status_some(2, rq, &n, idx, sts));
        CHECK(n == MPI_UNDEFINED, "no active requests: outcount %d", n);
        CHECK_MPI(MPI_Request_get_status_any(2, rq, &idx[0], &flag, MPI_STATUS_IGNORE));
        CHECK(flag && idx[0] == MPI_UNDEFINED, "no active requests: any gave %d/%d", flag, idx[0]);
    }

    /* Alltoallw with MPI_BOTTOM and absolute-address struct types */
    {
        int *sb = malloc(size * sizeof(int)), *rb = malloc(size * sizeof(int));
        int *cnt = malloc(size * sizeof(int)), *dsp = malloc(size * sizeof(int));
        MPI_Datatype *st = malloc(size * sizeof(MPI_Datatype)), *rt = malloc(size * sizeof(MPI_Datatype));
        for (i = 0; i < size; i++) {
            MPI_Aint a;
            int one = 1;
            sb[i] = rank * 100 + i;
            rb[i] = -1;
            cnt[i] = 1;
            dsp[i] = 0;
            CHECK_MPI(MPI_Get_address(&sb[i], &a));
            CHECK_MPI(MPI_Type_create_struct(1, &one, &a, (MPI_Datatype[]){MPI_INT}, &st[i]));
            CHECK_MPI(MPI_Type_commit(&st[i]));
            CHECK_MPI(MPI_Get_address(&rb[i], &a));
            CHECK_MPI(MPI_Type_create_struct(1, &one, &a, (MPI_Datatype[]){MPI_INT}, &rt[i]));
            CHECK_MPI(MPI_Type_commit(&rt[i]));
        }
        CHECK_MPI(MPI_Alltoallw(MPI_BOTTOM, cnt, dsp, st, MPI_BOTTOM, cnt, dsp, rt, MPI_COMM_WORLD));
        for (i = 0; i < size; i++) {
            CHECK(rb[i] == i * 100 + rank, "alltoallw bottom: from %d got %d", i, rb[i]);
            CHECK_MPI(MPI_Type_free(&st[i]));
            CHECK_MPI(MPI_Type_free(&rt[i]));
        }
        free(sb), free(rb), free(cnt), free(dsp), free(st), free(rt);
    }

    /* MPI_Pack_external: big-endian external32 (long double as IEEE binary128) */
    {
        int iv = 0x01020304, iv2 = 0;
        double dv = 1.0, dv2 = 0;
        long double lv = -2.5L, lv2 = 0;
        unsigned char ext[64];
        MPI_Aint pos = 0, sz = -1;
        CHECK_MPI(MPI_Pack_external_size("external32", 1, MPI_INT, &sz));
        CHECK(sz == 4, "external32 size of MPI_INT %ld", (long)sz);
        CHECK_MPI(MPI_Pack_external("external32", &iv, 1, MPI_INT, ext, sizeof ext, &pos));
        CHECK_MPI(MPI_Pack_external("external32", &dv, 1, MPI_DOUBLE, ext, sizeof ext, &pos));
        CHECK_MPI(MPI_Pack_external("external32", &lv, 1, MPI_LONG_DOUBLE, ext, sizeof ext, &pos));
        CHECK(pos == 4 + 8 + 16, "external32 position %ld", (long)pos);
        CHECK(ext[0] == 1 && ext[1] == 2 && ext[2] == 3 && ext[3] == 4, "int not big-endian");
        CHECK(ext[4] == 0x3f && ext[5] == 0xf0 && ext[11] == 0, "double not big-endian");
        /* -2.5 = -1.25 * 2^1: binary128 sign 1, exponent 0x4000, fraction .01 */
        CHECK(ext[12] == 0xc0 && ext[13] == 0x00 && ext[14] == 0x40 && ext[15] == 0, "long double %02x %02x %02x",
              ext[12], ext[13], ext[14]);
        pos = 0;
        CHECK_MPI(MPI_Unpack_external("external32", ext, sizeof ext, &pos, &iv2, 1, MPI_INT));
        CHECK_MPI(MPI_Unpack_external("external32", ext, sizeof ext, &pos, &dv2, 1, MPI_DOUBLE));
        CHECK_MPI(MPI_Unpack_external("external32", ext, sizeof ext, &pos, &lv2, 1, MPI_LONG_DOUBLE));
        CHECK(iv2 == iv && dv2 == dv && lv2 == lv, "external32 round trip");
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
        CHECK(MPI_Pack_external_size("native", 1, MPI_INT, &sz) != MPI_SUCCESS, "datarep native accepted");
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
        MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_ARE_FATAL);
    }

    /* Fortran-kind types */
    {
        MPI_Datatype t, t2;
        int ni, na, nd, comb, ints[2], sz;
        CHECK_MPI(MPI_Type_create_f90_integer(4, &t));
        CHECK_MPI(MPI_Type_size(t, &sz));
        CHECK(sz == 2, "f90_integer(4) size %d", sz);
        CHECK_MPI(MPI_Type_get_envelope(t, &ni, &na, &nd, &comb));
        CHECK(comb == MPI_COMBINER_F90_INTEGER && ni == 1 && na == 0 && nd == 0, "f90 integer envelope");
        CHECK_MPI(MPI_Type_get_contents(t, 1, 0, 0, ints, NULL, NULL));
        CHECK(ints[0] == 4, "f90 integer contents %d", ints[0]);
        CHECK_MPI(MPI_Type_create_f90_integer(4, &t2));
        CHECK(t == t2, "the same (r) gives the same predefined type");
        CHECK_MPI(MPI_Type_create_f90_real(15, 300, &t));
        CHECK_MPI(MPI_Type_size(t, &sz));
        CHECK(sz == 8, "f90_real(15,300) size %d", sz);
        CHECK_MPI(MPI_Type_get_contents(t, 2, 0, 0, ints, NULL, NULL));
        CHECK(ints[0] == 15 && ints[1] == 300, "f90 real contents");
        CHECK_MPI(MPI_Type_create_f90_complex(6, MPI_UNDEFINED, &t));
        CHECK_MPI(MPI_Type_size(t, &sz));
        CHECK(sz == 8, "f90_complex(6) size %d", sz);
        CHECK_MPI(MPI_Type_match_size(MPI_TYPECLASS_INTEGER, 8, &t));
        CHECK(t == MPI_INTEGER8, "match_size integer 8");
        CHECK_MPI(MPI_Type_match_size(MPI_TYPECLASS_REAL, 4, &t));
        CHECK(t == MPI_REAL4, "match_size real 4");
        CHECK_MPI(MPI_Type_match_size(MPI_TYPECLASS_COMPLEX, 16, &t));
        CHECK(t == MPI_COMPLEX16, "match_size complex 16");
        CHECK_MPI(MPI_Type_get_value_index(MPI_FLOAT, MPI_FLOAT, &t));
        CHECK(t == MPI_DATATYPE_NULL, "value_index(float,float) is not a predefined pair");
        CHECK_MPI(MPI_Type_get_value_index(MPI_LONG_DOUBLE, MPI_INT, &t));
        CHECK(t == MPI_LONG_DOUBLE_INT, "value_index(long double,int)");
    }

    /* darray contents use the MPI_DISTRIBUTE_* values */
    {
        MPI_Datatype t;
        int gs[2] = {4, 6}, ds[2] = {MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_CYCLIC};
        int da[2] = {MPI_DISTRIBUTE_DFLT_DARG, 2}, ps[2] = {1, 1}, ints[16], ni, na, nd, comb;
        CHECK_MPI(MPI_Type_create_darray(1, 0, 2, gs, ds, da, ps, MPI_ORDER_C, MPI_INT, &t));
        CHECK_MPI(MPI_Type_get_envelope(t, &ni, &na, &nd, &comb));
        CHECK(comb == MPI_COMBINER_DARRAY && ni == 4 * 2 + 4, "darray envelope %d %d", comb, ni);
        {
            MPI_Datatype old;
            CHECK_MPI(MPI_Type_get_contents(t, 16, 0, 1, ints, NULL, &old));
        }
        CHECK(ints[5] == MPI_DISTRIBUTE_BLOCK && ints[6] == MPI_DISTRIBUTE_CYCLIC, "darray distribs %d %d", ints[5],
              ints[6]);
        CHECK(ints[7] == MPI_DISTRIBUTE_DFLT_DARG && ints[8] == 2, "darray dargs %d %d", ints[7], ints[8]);
        CHECK(ints[11] == MPI_ORDER_C, "darray order %d", ints[11]);
        CHECK_MPI(MPI_Type_size(t, &ni));
        CHECK(ni == 24 * (int)sizeof(int), "darray size %d", ni);
        CHECK_MPI(MPI_Type_free(&t));
    }

    /* MPI-4.1 error class/code removal, hardware resource info */
    {
        int cls, code, rc;
        MPI_Info hw;
        CHECK_MPI(MPI_Add_error_class(&cls));
        CHECK_MPI(MPI_Add_error_code(cls, &code));
        CHECK_MPI(MPI_Add_error_string(code, "a user code"));
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN); /* errors without an object */
        rc = MPI_Remove_error_class(cls);
        CHECK(rc != MPI_SUCCESS, "removed a class that still has a code");
        rc = MPI_Remove_error_code(code);
        CHECK(rc != MPI_SUCCESS, "removed a code that still has a string");
        CHECK_MPI(MPI_Remove_error_string(code));
        CHECK_MPI(MPI_Remove_error_code(code));
        CHECK_MPI(MPI_Remove_error_class(cls));
        rc = MPI_Remove_error_string(MPI_ERR_ARG);
        CHECK(rc != MPI_SUCCESS, "removed the string of a predefined code");
        rc = MPI_Remove_error_class(MPI_ERR_ARG);
        CHECK(rc != MPI_SUCCESS, "removed a predefined class");
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
        MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_ARE_FATAL);
        CHECK_MPI(MPI_Get_hw_resource_info(&hw));
        CHECK(hw != MPI_INFO_NULL, "hw resource info is MPI_INFO_NULL");
        CHECK_MPI(MPI_Info_free(&hw));
    }

    /* Fortran ABI facts are kept */
    {
        MPI_Info info;
        int t = 1, f = 0, t2 = -1, f2 = -1, set = -1, n = -1;
        CHECK_MPI(MPI_Abi_get_fortran_booleans(4, &t2, &f2, &set));
        CHECK(set == 0, "fortran booleans set before being set");
        CHECK_MPI(MPI_Abi_set_fortran_booleans(4, &t, &f));
        CHECK_MPI(MPI_Abi_get_fortran_booleans(4, &t2, &f2, &set));
        CHECK(set == 1 && t2 == 1 && f2 == 0, "fortran booleans %d %d %d", set, t2, f2);
        CHECK_MPI(MPI_Info_create(&info));
        CHECK_MPI(MPI_Info_set(info, "mpi_logical_size", "4"));
        CHECK_MPI(MPI_Abi_set_fortran_info(info));
        CHECK_MPI(MPI_Info_free(&info));
        CHECK_MPI(MPI_Abi_get_fortran_info(&info));
        {
            char val[MPI_MAX_INFO_VAL];
            int vl = MPI_MAX_INFO_VAL, fl = 0;
            CHECK_MPI(MPI_Info_get_string(info, "mpi_logical_size", &vl, val, &fl));
            CHECK(fl && strcmp(val, "4") == 0, "fortran info mpi_logical_size");
            vl = MPI_MAX_INFO_VAL;
            CHECK_MPI(MPI_Info_get_string(info, "mpi_integer8_supported", &vl, val, &fl));
            CHECK(fl && strcmp(val, "true") == 0, "fortran info mpi_integer8_supported");
            vl = MPI_MAX_INFO_VAL;
            CHECK_MPI(MPI_Info_get_string(info, "mpi_real16_supported", &vl, val, &fl));
            CHECK(fl && strcmp(val, "false") == 0, "fortran info mpi_real16_supported");
        }
        CHECK_MPI(MPI_Info_get_nkeys(info, &n));
        CHECK(n > 1, "fortran info has %d keys", n);
        CHECK_MPI(MPI_Info_free(&info));
    }
    return ct_finish("mpi4py_needs");
}
