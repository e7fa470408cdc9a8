/* Device buffers between nodes (run over emulated nodes: scripts/emulate-nodes.sh 2, so that
 * rank r and rank (r + size/2) % size are on different "nodes" and talk over the network
 * transport; device messages move pipelined through host memory or, with
 * GPUMPI_NET_GPU_PIPELINE=0, staged whole).
 *
 *   gpu_net [MAX_BYTES]                 the test (PASS/FAIL line)
 *   gpu_net gdr                         point-to-point only, for GPUDirect RDMA over the
 *                                       ibverbs backend (tests/gpu/run.sh runs it over the
 *                                       libibverbs test double): sizes 0, 1, 64 KiB-1, 64 KiB,
 *                                       1 MiB+3 and 64 MiB, device to device, host to device
 *                                       and device to host, both directions at once
 *   gpu_net bench [MAX_BYTES] [REPS]    device-to-device bandwidth between rank 0 and its
 *                                       off-node partner, one line per size
 *   gpu_net coll [MAX_BYTES] [REPS]     device Alltoall, Allgather, Bcast (root 1) and
 *                                       Allreduce (MPI_SUM, ints) over the world, blocks
 *                                       (vectors) of 64 KiB..MAX_BYTES (default 4 MiB): each
 *                                       checked, then timed, rank 0 printing
 *                                       "coll NAME BYTES USEC" (best of 3 rounds of REPS calls)
 *
 * The test, for sizes 8 B..MAX_BYTES (default 64 MiB; 0, around the eager limit and around
 * chunk edges): Sendrecv between off-node partners device to device, Isend/Irecv device to
 * host and host to device, a truncated device receive (MPI_ERR_TRUNCATE, the bytes that fit),
 * Allreduce (MPI_SUM on ints, and in place; MPI_MAX from a device into a host buffer) and
 * Alltoall (blocks of n bytes where they fit) on device buffers over the whole world, then
 * Gather, Scatter, Allgatherv, Alltoallv, Reduce_scatter_block and Reduce on device buffers (blocks 0 B..1 MiB,
 * at most MAX_BYTES in all per buffer). Every
 * result is compared with closed-form values. Without a CUDA device it prints
 * "SKIP: no CUDA device (<reason>)" and exits 0. */
#include <mpi.h>
#include "cudart.h"
#include <stdint.h>

static int rank, size, fails;

static void fail(const char *what, size_t bytes, size_t at, unsigned got, unsigned want) {
    if (fails++ < 10)
        fprintf(stderr, "rank %d: %s at %zu bytes: byte %zu is %u, want %u\n", rank, what, bytes,
                at, got, want);
}

static unsigned char pat(int from, size_t i, int salt) {
    return (unsigned char)(i * 31 + (i >> 12) + from * 7 + salt);
}

static void fill(unsigned char *h, size_t n, int from, int salt) {
    for (size_t i = 0; i < n; i++) h[i] = pat(from, i, salt);
}

static void check(const char *what, const unsigned char *h, size_t n, int from, int salt) {
    for (size_t i = 0; i < n; i++)
        if (h[i] != pat(from, i, salt)) {
            fail(what, n, i, h[i], pat(from, i, salt));
            return;
        }
}

static void test(size_t max) {
    int partner = (rank + size / 2) % size;
    size_t sizes[] = {0, 8, 64, 4096, 16384, 16385, 65536, 1048575, 1048576, 1048577,
                      4 << 20, (4 << 20) + 12, 16 << 20, 64 << 20};
    size_t nsz = sizeof sizes / sizeof *sizes;
    unsigned char *h = malloc(max + 64), *d, *d2;
    CU(cudaMalloc_((void **)&d, max + 64));
    CU(cudaMalloc_((void **)&d2, max + 64));
    for (size_t k = 0; k < nsz; k++) {
        size_t n = sizes[k];
        if (n > max) continue;
        int salt = (int)k;
        /* Device to device, both directions at once. */
        fill(h, n, rank, salt);
        CU(cudaMemcpy_(d, h, n, cudaMemcpyDefault_));
        CU(cudaMemset_(d2, 0xee, n + 64));
        MPI_Status st;
        MPI_Sendrecv(d, (int)n, MPI_BYTE, partner, 1, d2, (int)n + 64, MPI_BYTE, partner, 1,
                     MPI_COMM_WORLD, &st);
        int got;
        MPI_Get_count(&st, MPI_BYTE, &got);
        if ((size_t)got != n) fail("sendrecv count", n, 0, (unsigned)got, (unsigned)n);
        CU(cudaMemcpy_(h, d2, n + 64, cudaMemcpyDefault_));
        check("sendrecv device->device", h, n, partner, salt);
        for (size_t i = n; i < n + 64; i++)
            if (h[i] != 0xee) { fail("sendrecv wrote past the message", n, i, h[i], 0xee); break; }
        /* Device to host on one side, host to device on the other. */
        MPI_Request rq[2];
        unsigned char *hs = malloc(n + 1), *hr = malloc(n + 1);
        int dev_send = rank < partner;
        fill(hs, n, rank, salt + 1);
        CU(cudaMemcpy_(d, hs, n, cudaMemcpyDefault_));
        CU(cudaMemset_(d2, 0, n + 1));
        MPI_Irecv(dev_send ? (void *)d2 : (void *)hr, (int)n, MPI_BYTE, partner, 2, MPI_COMM_WORLD, &rq[0]);
        MPI_Isend(dev_send ? (void *)d : (void *)hs, (int)n, MPI_BYTE, partner, 2, MPI_COMM_WORLD, &rq[1]);
        MPI_Waitall(2, rq, MPI_STATUSES_IGNORE);
        if (dev_send) CU(cudaMemcpy_(hr, d2, n, cudaMemcpyDefault_));
        check(dev_send ? "irecv host->device" : "irecv device->host", hr, n, partner, salt + 1);
        free(hs);
        free(hr);
        /* Truncation into a device buffer half the size. */
        if (n >= 16) {
            fill(h, n, rank, salt + 2);
            CU(cudaMemcpy_(d, h, n, cudaMemcpyDefault_));
            CU(cudaMemset_(d2, 0xee, n));
            MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
            MPI_Irecv(d2, (int)(n / 2), MPI_BYTE, partner, 3, MPI_COMM_WORLD, &rq[0]);
            MPI_Isend(d, (int)n, MPI_BYTE, partner, 3, MPI_COMM_WORLD, &rq[1]);
            MPI_Status sts[2];
            int rc = MPI_Waitall(2, rq, sts), cls = 0;
            if (rc == MPI_ERR_IN_STATUS) MPI_Error_class(sts[0].MPI_ERROR, &cls);
            if (cls != MPI_ERR_TRUNCATE) fail("truncated receive's error class", n, 0, (unsigned)cls, MPI_ERR_TRUNCATE);
            MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
            CU(cudaMemcpy_(h, d2, n, cudaMemcpyDefault_));
            check("truncated receive", h, n / 2, partner, salt + 2);
            for (size_t i = n / 2; i < n; i++)
                if (h[i] != 0xee) { fail("truncated receive wrote past its buffer", n, i, h[i], 0xee); break; }
        }
        /* Allreduce over the world on device ints. */
        size_t cnt = n / sizeof(int);
        int *hi = (int *)h;
        for (size_t i = 0; i < cnt; i++) hi[i] = rank + 1 + (int)(i % 7);
        CU(cudaMemcpy_(d, h, cnt * sizeof(int), cudaMemcpyDefault_));
        MPI_Allreduce(d, d2, (int)cnt, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(MPI_IN_PLACE, d, (int)cnt, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        /* Device input, host result. */
        int *hres = malloc(cnt * sizeof(int) + 1);
        MPI_Allreduce(d2, hres, (int)cnt, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        for (size_t i = 0; i < cnt; i++) {
            int want = size * (size + 1) / 2 + size * (int)(i % 7);
            if (hres[i] != want) {
                fail("allreduce device to host", n, i, (unsigned)hres[i], (unsigned)want);
                break;
            }
        }
        free(hres);
        for (int pass = 0; pass < 2; pass++) {
            CU(cudaMemcpy_(h, pass ? d : d2, cnt * sizeof(int), cudaMemcpyDefault_));
            for (size_t i = 0; i < cnt; i++) {
                int want = size * (size + 1) / 2 + size * (int)(i % 7);
                if (hi[i] != want) {
                    fail(pass ? "allreduce in place" : "allreduce", n, i, (unsigned)hi[i], (unsigned)want);
                    break;
                }
            }
        }
        /* Alltoall of device ints, blocks of cnt ints, where the blocks of every rank fit. */
        if (cnt * sizeof(int) * (size_t)size <= max) {
            size_t all = cnt * (size_t)size;
            int *ha = malloc(all * sizeof(int) + 1);
            for (int q = 0; q < size; q++)
                for (size_t i = 0; i < cnt; i++) ha[q * cnt + i] = rank * 1000003 + q * 7919 + (int)i;
            CU(cudaMemcpy_(d, ha, all * sizeof(int), cudaMemcpyDefault_));
            MPI_Alltoall(d, (int)cnt, MPI_INT, d2, (int)cnt, MPI_INT, MPI_COMM_WORLD);
            CU(cudaMemcpy_(ha, d2, all * sizeof(int), cudaMemcpyDefault_));
            for (int q = 0; q < size; q++)
                for (size_t i = 0; i < cnt; i++)
                    if (ha[q * cnt + i] != q * 1000003 + rank * 7919 + (int)i) {
                        fail("alltoall", n, q * cnt + i, (unsigned)ha[q * cnt + i],
                             (unsigned)(q * 1000003 + rank * 7919 + (int)i));
                        q = size;
                        break;
                    }
            free(ha);
        }
    }
    CU(cudaFree_(d));
    CU(cudaFree_(d2));
    free(h);
}

/* Point-to-point between off-node partners for the GPUDirect RDMA path: for each size and
 * each mix (device to device, host to device, device to host), every rank receives from its
 * partner while it sends to it; every byte is checked, and so is the byte after the message. */
static void gdr(void) {
    int partner = (rank + size / 2) % size;
    size_t sizes[] = {0, 1, 65535, 65536, (1 << 20) + 3, 64 << 20};
    const char *names[] = {"device->device", "host->device", "device->host"};
    size_t max = 64 << 20;
    unsigned char *hs = malloc(max + 64), *hr = malloc(max + 64), *ds, *dr;
    CU(cudaMalloc_((void **)&ds, max + 64));
    CU(cudaMalloc_((void **)&dr, max + 64));
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        size_t n = sizes[k];
        for (int mix = 0; mix < 3; mix++) {
            int sdev = mix != 1, rdev = mix != 2, salt = (int)(k * 3) + mix;
            fill(hs, n, rank, salt);
            if (sdev) CU(cudaMemcpy_(ds, hs, n, cudaMemcpyDefault_));
            memset(hr, 0xee, n + 1);
            if (rdev) CU(cudaMemset_(dr, 0xee, n + 1));
            /* cudaMemset may still run when it returns: the NIC (here the double, from the
             * other process) must not write before it is done. */
            CU(cudaDeviceSynchronize_());
            MPI_Request rq[2];
            MPI_Status st[2];
            MPI_Irecv(rdev ? (void *)dr : (void *)hr, (int)n, MPI_BYTE, partner, 20 + mix, MPI_COMM_WORLD, &rq[0]);
            MPI_Isend(sdev ? (void *)ds : (void *)hs, (int)n, MPI_BYTE, partner, 20 + mix, MPI_COMM_WORLD, &rq[1]);
            MPI_Waitall(2, rq, st);
            int got;
            MPI_Get_count(&st[0], MPI_BYTE, &got);
            if ((size_t)got != n) fail(names[mix], n, 0, (unsigned)got, (unsigned)n);
            if (rdev) CU(cudaMemcpy_(hr, dr, n + 1, cudaMemcpyDefault_));
            check(names[mix], hr, n, partner, salt);
            if (hr[n] != 0xee) fail("wrote past the message", n, n, hr[n], 0xee);
        }
    }
    CU(cudaFree_(ds));
    CU(cudaFree_(dr));
    free(hs);
    free(hr);
}

/* The rooted and v collectives on device buffers over the whole world (at 4 ranks on 2 nodes,
 * the hierarchical schedules: staged through host memory): Gather to the last rank, Scatter
 * from rank 1, Allgatherv into reversed blocks, Reduce_scatter_block (MPI_SUM on ints). */
static void colls(size_t max) {
    size_t blocks[] = {0, 8, 4096, 65537, 1 << 20};
    size_t cap = max / (size_t)size;
    unsigned char *h = malloc(cap * (size_t)size + 64), *d, *d2;
    int *counts = malloc(sizeof(int) * (size_t)size), *displs = malloc(sizeof(int) * (size_t)size);
    CU(cudaMalloc_((void **)&d, cap * (size_t)size + 64));
    CU(cudaMalloc_((void **)&d2, cap * (size_t)size + 64));
    for (size_t k = 0; k < sizeof blocks / sizeof *blocks; k++) {
        size_t b = blocks[k], all = b * (size_t)size;
        if (b > cap) continue;
        int salt = 40 + (int)k, root = size - 1;
        /* Gather: block r of the root's result is rank r's pattern. */
        fill(h, b, rank, salt);
        CU(cudaMemcpy_(d, h, b, cudaMemcpyDefault_));
        CU(cudaMemset_(d2, 0xee, all + 64));
        MPI_Gather(d, (int)b, MPI_BYTE, d2, (int)b, MPI_BYTE, root, MPI_COMM_WORLD);
        if (rank == root) {
            CU(cudaMemcpy_(h, d2, all + 64, cudaMemcpyDefault_));
            for (int r = 0; r < size; r++) check("gather", h + (size_t)r * b, b, r, salt);
            for (size_t i = all; i < all + 64; i++)
                if (h[i] != 0xee) { fail("gather wrote past its buffer", b, i, h[i], 0xee); break; }
        }
        /* Scatter from rank 1: block r of its input is rank r's pattern. */
        if (rank == 1)
            for (int r = 0; r < size; r++) fill(h + (size_t)r * b, b, r, salt + 1);
        CU(cudaMemcpy_(d, h, rank == 1 ? all : 0, cudaMemcpyDefault_));
        CU(cudaMemset_(d2, 0xee, b + 64));
        MPI_Scatter(d, (int)b, MPI_BYTE, d2, (int)b, MPI_BYTE, 1, MPI_COMM_WORLD);
        CU(cudaMemcpy_(h, d2, b + 64, cudaMemcpyDefault_));
        check("scatter", h, b, rank, salt + 1);
        for (size_t i = b; i < b + 64; i++)
            if (h[i] != 0xee) { fail("scatter wrote past its block", b, i, h[i], 0xee); break; }
        /* Allgatherv: rank r's block at (size - 1 - r) * b. */
        for (int r = 0; r < size; r++) {
            counts[r] = (int)b;
            displs[r] = (int)((size_t)(size - 1 - r) * b);
        }
        fill(h, b, rank, salt + 2);
        CU(cudaMemcpy_(d, h, b, cudaMemcpyDefault_));
        CU(cudaMemset_(d2, 0xee, all + 64));
        MPI_Allgatherv(d, (int)b, MPI_BYTE, d2, counts, displs, MPI_BYTE, MPI_COMM_WORLD);
        CU(cudaMemcpy_(h, d2, all, cudaMemcpyDefault_));
        for (int r = 0; r < size; r++) check("allgatherv", h + (size_t)displs[r], b, r, salt + 2);
        /* Alltoallv: rank r sends rank q a block of b - (r + 2q) % 3 bytes (b from 8 on),
         * packed in reverse order of q; each block carries its sender's and receiver's pattern. */
        {
            int *sc = malloc(sizeof(int) * (size_t)size * 4), *sd = sc + size, *rc = sd + size, *rd = rc + size;
            size_t so = 0, ro = 0;
            for (int q = size - 1; q >= 0; q--) {
                sc[q] = (int)(b >= 8 ? b - (size_t)((rank + 2 * q) % 3) : b);
                sd[q] = (int)so;
                so += (size_t)sc[q];
            }
            for (int q = 0; q < size; q++) {
                rc[q] = (int)(b >= 8 ? b - (size_t)((q + 2 * rank) % 3) : b);
                rd[q] = (int)ro;
                ro += (size_t)rc[q];
            }
            for (int q = 0; q < size; q++) fill(h + sd[q], (size_t)sc[q], rank, salt + 3 + q);
            CU(cudaMemcpy_(d, h, so, cudaMemcpyDefault_));
            CU(cudaMemset_(d2, 0xee, ro + 64));
            MPI_Alltoallv(d, sc, sd, MPI_BYTE, d2, rc, rd, MPI_BYTE, MPI_COMM_WORLD);
            CU(cudaMemcpy_(h, d2, ro + 64, cudaMemcpyDefault_));
            for (int q = 0; q < size; q++) check("alltoallv", h + rd[q], (size_t)rc[q], q, salt + 3 + rank);
            for (size_t i = ro; i < ro + 64; i++)
                if (h[i] != 0xee) { fail("alltoallv wrote past its buffer", b, i, h[i], 0xee); break; }
            free(sc);
        }
        /* Reduce_scatter_block: element i of every rank's input is rank + 1 + i % 7. */
        size_t cnt = b / sizeof(int);
        int *hi = (int *)h;
        for (size_t i = 0; i < cnt * (size_t)size; i++) hi[i] = rank + 1 + (int)(i % 7);
        CU(cudaMemcpy_(d, h, cnt * (size_t)size * sizeof(int), cudaMemcpyDefault_));
        MPI_Reduce_scatter_block(d, d2, (int)cnt, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        CU(cudaMemcpy_(h, d2, cnt * sizeof(int), cudaMemcpyDefault_));
        for (size_t i = 0; i < cnt; i++) {
            size_t at = (size_t)rank * cnt + i;
            int want = size * (size + 1) / 2 + size * (int)(at % 7);
            if (hi[i] != want) { fail("reduce_scatter_block", b, i, (unsigned)hi[i], (unsigned)want); break; }
        }
        /* Reduce to rank 1 of the same input's first size * cnt ints: the root's result only. */
        size_t rn = cnt * (size_t)size;
        for (size_t i = 0; i < rn; i++) hi[i] = rank + 1 + (int)(i % 7);
        CU(cudaMemcpy_(d, h, rn * sizeof(int), cudaMemcpyDefault_));
        CU(cudaMemset_(d2, 0xee, rn * sizeof(int) + 64));
        MPI_Reduce(d, d2, (int)rn, MPI_INT, MPI_SUM, 1, MPI_COMM_WORLD);
        CU(cudaMemcpy_(h, d2, rn * sizeof(int) + 64, cudaMemcpyDefault_));
        for (size_t i = 0; i < rn && rank == 1; i++) {
            int want = size * (size + 1) / 2 + size * (int)(i % 7);
            if (hi[i] != want) { fail("reduce", b, i, (unsigned)hi[i], (unsigned)want); break; }
        }
        for (size_t i = rn * sizeof(int); i < rn * sizeof(int) + 64; i++)
            if (h[i] != 0xee) { fail("reduce wrote past its buffer", b, i, h[i], 0xee); break; }
    }
    CU(cudaFree_(d));
    CU(cudaFree_(d2));
    free(h);
    free(counts);
    free(displs);
}

/* Rank 0 sends REPS messages of each size (a window of 4 in flight) to its off-node partner,
 * which acknowledges the last; prints the device-to-device bandwidth. */
static void bench(size_t max, int reps) {
    int partner = size / 2;
    unsigned char *d;
    CU(cudaMalloc_((void **)&d, max * 4));
    CU(cudaMemset_(d, 1, max * 4));
    if (rank == 0)
        printf("# device p2p between emulated nodes, rank 0 -> rank %d, window 4, GPUMPI_NET_GPU_PIPELINE=%s\n",
               partner, getenv("GPUMPI_NET_GPU_PIPELINE") ? getenv("GPUMPI_NET_GPU_PIPELINE") : "1 (default)");
    for (size_t n = 64 << 10; n <= max; n *= 4) {
        MPI_Request rq[4];
        double best = 0;
        for (int trial = 0; trial < 3; trial++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            if (rank == 0 || rank == partner) {
                for (int r = 0; r < reps; r += 4) {
                    int w = reps - r < 4 ? reps - r : 4;
                    for (int i = 0; i < w; i++) {
                        if (rank == 0)
                            MPI_Isend(d + i * n, (int)n, MPI_BYTE, partner, 9, MPI_COMM_WORLD, &rq[i]);
                        else
                            MPI_Irecv(d + i * n, (int)n, MPI_BYTE, 0, 9, MPI_COMM_WORLD, &rq[i]);
                    }
                    MPI_Waitall(w, rq, MPI_STATUSES_IGNORE);
                }
                char ack = 0;
                if (rank == 0)
                    MPI_Recv(&ack, 1, MPI_CHAR, partner, 10, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                else
                    MPI_Send(&ack, 1, MPI_CHAR, 0, 10, MPI_COMM_WORLD);
            }
            double dt = MPI_Wtime() - t0, gbs = (double)n * reps / dt / 1e9;
            if (gbs > best) best = gbs;
        }
        if (rank == 0) printf("%10zu bytes %8.3f GB/s\n", n, best);
        fflush(stdout);
    }
    CU(cudaFree_(d));
}

/* One collective of `collrun` on device buffers d (input) and d2 (output), cnt ints each
 * block; 0 = bcast (in d). */
static void coll_call(int which, int *d, int *d2, size_t cnt) {
    switch (which) {
    case 0: MPI_Alltoall(d, (int)cnt, MPI_INT, d2, (int)cnt, MPI_INT, MPI_COMM_WORLD); break;
    case 1: MPI_Allgather(d, (int)cnt, MPI_INT, d2, (int)cnt, MPI_INT, MPI_COMM_WORLD); break;
    case 2: MPI_Bcast(d, (int)cnt, MPI_INT, 1, MPI_COMM_WORLD); break;
    default: MPI_Allreduce(d, d2, (int)cnt, MPI_INT, MPI_SUM, MPI_COMM_WORLD); break;
    }
}

static void collrun(size_t max, int reps) {
    static const char *names[] = {"alltoall", "allgather", "bcast", "allreduce"};
    size_t sizes[] = {65536, 1 << 20, 4 << 20, 16 << 20};
    size_t cap = max * (size_t)size + 64;
    int *d, *d2, *h = malloc(cap);
    CU(cudaMalloc_((void **)&d, cap));
    CU(cudaMalloc_((void **)&d2, cap));
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes && sizes[k] <= max; k++) {
        size_t n = sizes[k], cnt = n / sizeof(int), all = cnt * (size_t)size;
        for (int which = 0; which < 4; which++) {
            /* Inputs, the call, the check. */
            size_t in = which == 0 ? all : cnt;
            for (size_t i = 0; i < in; i++)
                h[i] = which == 0   ? rank * 1000003 + (int)(i / cnt) * 7919 + (int)(i % cnt)
                       : which == 1 ? rank * 7919 + (int)i
                       : which == 2 ? (rank == 1 ? 5 * (int)i + 3 : -1)
                                    : rank + 1 + (int)(i % 7);
            CU(cudaMemcpy_(d, h, in * sizeof(int), cudaMemcpyDefault_));
            CU(cudaMemset_(d2, 0xee, all * sizeof(int)));
            coll_call(which, d, d2, cnt);
            size_t out = which <= 1 ? all : cnt;
            CU(cudaMemcpy_(h, which == 2 ? d : d2, out * sizeof(int), cudaMemcpyDefault_));
            for (size_t i = 0; i < out; i++) {
                int q = (int)(i / cnt), j = (int)(i % cnt);
                int want = which == 0   ? q * 1000003 + rank * 7919 + j
                           : which == 1 ? q * 7919 + j
                           : which == 2 ? 5 * (int)i + 3
                                        : size * (size + 1) / 2 + size * (int)(i % 7);
                if (h[i] != want) {
                    fail(names[which], n, i, (unsigned)h[i], (unsigned)want);
                    break;
                }
            }
            /* Timed: the best of 3 rounds of `reps` calls. */
            double best = 1e30;
            for (int round = 0; round < 3; round++) {
                MPI_Barrier(MPI_COMM_WORLD);
                double t0 = MPI_Wtime();
                for (int r = 0; r < reps; r++) coll_call(which, d, d2, cnt);
                double t = (MPI_Wtime() - t0) / reps;
                MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
                if (t < best) best = t;
            }
            if (rank == 0) printf("coll %s %zu %.1f\n", names[which], n, best * 1e6);
            fflush(stdout);
        }
    }
    CU(cudaFree_(d));
    CU(cudaFree_(d2));
    free(h);
}

int main(int argc, char **argv) {
    if (cudart_mpi_init(&argc, &argv, -1, &rank, &size) < 0) return 0;
    int n = 0;
    cudaGetDeviceCount_(&n);
    cudaSetDevice_(rank % n);
    int is_bench = argc > 1 && strcmp(argv[1], "bench") == 0;
    int is_gdr = argc > 1 && strcmp(argv[1], "gdr") == 0;
    int is_coll = argc > 1 && strcmp(argv[1], "coll") == 0;
    int a = is_bench || is_coll ? 2 : 1;
    size_t max = argc > a ? strtoull(argv[a], NULL, 0) : (size_t)64 << 20;
    if (size < 2) {
        if (rank == 0) printf("SKIP: gpu_net needs 2 or more ranks\n");
        MPI_Finalize();
        return 0;
    }
    if (is_bench) {
        bench(max, argc > 3 ? atoi(argv[3]) : 20);
        MPI_Finalize();
        return 0;
    }
    if (is_coll) collrun(argc > 2 ? max : (size_t)4 << 20, argc > 3 ? atoi(argv[3]) : 5);
    else if (is_gdr) gdr();
    else {
        test(max);
        colls(max);
    }
    int all = 0;
    MPI_Allreduce(&fails, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        if (all) printf("FAIL: gpu_net: %d mismatches\n", all);
        else if (is_gdr) printf("PASS: gpu_net gdr (%d ranks, 0 B..64 MiB, device and host ends)\n", size);
        else if (is_coll) printf("PASS: gpu_net coll (%d ranks, device alltoall, allgather, bcast, allreduce)\n", size);
        else printf("PASS: gpu_net (%d ranks, up to %zu bytes)\n", size, max);
    }
    MPI_Finalize();
    return all != 0;
}
