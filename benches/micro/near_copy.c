/* How fast memcpy and process_vm_readv copy when the destination lies a given distance past the
 * source modulo the page (4 KiB): one process reading its own memory, best of 300 per distance.
 * On the 2-core build VM (AMD EPYC) distances of 8 and 16 bytes ran 3-5x slower than the rest
 * (benches/NOTES.md, "near-distance copies"); src/transport/near.rs is what the library does
 * about it.
 * cc -O2 near_copy.c -o near_copy && ./near_copy [KiB, default 64]
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv)
{
    size_t len = (size_t)(argc > 1 ? atoi(argv[1]) : 64) << 10;
    char *a = mmap(0, len + 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char *b = mmap(0, len + 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (a == MAP_FAILED || b == MAP_FAILED)
        return 1;
    memset(a, 1, len + 8192);
    memset(b, 2, len + 8192);
    static const int dist[] = {0, 8, 16, 32, 48, 64, 96, 128, 256, 512, 1024, 2048, 4000, 4080, 4088};
    for (unsigned k = 0; k < sizeof dist / sizeof *dist; k++) {
        char *src = a + 16, *dst = b + 16 + dist[k];
        double bm = 1e18, bk = 1e18;
        struct iovec l = {dst, len}, r = {src, len};
        for (int i = 0; i < 300; i++) {
            double t = now_ns();
            memcpy(dst, src, len);
            __asm__ volatile("" ::"r"(dst) : "memory");
            t = now_ns() - t;
            if (t < bm)
                bm = t;
            t = now_ns();
            if (process_vm_readv(getpid(), &l, 1, &r, 1, 0) != (ssize_t)len) {
                perror("process_vm_readv");
                return 1;
            }
            t = now_ns() - t;
            if (t < bk)
                bk = t;
        }
        printf("%zu KiB, (dst - src) mod 4096 = %4d: memcpy %.1f GB/s, process_vm_readv %.1f GB/s\n",
               len >> 10, dist[k], len / bm, len / bk);
    }
    return 0;
}
