/* Two processes, one message of N bytes moved with single copies (CMA) 64 times: the receiver
 * alone (process_vm_readv of every chunk, share=0) or both (share=1: chunks of C bytes claimed
 * with a shared fetch-add; the receiver reads its chunks, the sender writes its own into the
 * receiver's buffer with process_vm_writev), as engine/coop.rs does. Ranks on CPUs 0 and 1.
 * On a loaded machine run it under `chrt -f 10` (real time) to see an idle machine's rates.
 * Build and run: cc -O2 -o cma_share benches/micro/cma_share.c && ./cma_share N C share
 * (results: benches/NOTES.md, "Shared reads"). */
#define _GNU_SOURCE
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

struct shared { _Atomic long go, next, done; };

int main(int argc, char **argv)
{
    if (argc < 4) { fprintf(stderr, "usage: %s bytes chunk share(0|1)\n", argv[0]); return 2; }
    size_t n = strtoul(argv[1], 0, 0), chunk = strtoul(argv[2], 0, 0);
    int share = atoi(argv[3]), reps = 64;
    long nch = (long)((n + chunk - 1) / chunk);
    char *src = malloc(n), *dst = malloc(n);
    memset(dst, 0, n);
    struct shared *s = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    pid_t parent = getpid(), pid = fork();
    cpu_set_t cs;
    CPU_ZERO(&cs);
    CPU_SET(pid ? 1 : 0, &cs);
    sched_setaffinity(0, sizeof cs, &cs);
    if (!pid) { /* sender: owns src */
        memset(src, 2, n);
        for (long it = 0;; it++) {
            long g;
            while ((g = atomic_load(&s->go)) <= it) if (g < 0) _exit(0);
            for (long c; share && (c = atomic_fetch_add(&s->next, 1)) < nch;) {
                size_t off = (size_t)c * chunk, len = n - off < chunk ? n - off : chunk;
                struct iovec l = {src + off, len}, r = {dst + off, len};
                if (process_vm_writev(parent, &l, 1, &r, 1, 0) != (ssize_t)len) { perror("writev"); _exit(1); }
                atomic_fetch_add(&s->done, 1);
            }
        }
    }
    usleep(10000);
    for (int round = 0; round < 3; round++) {
        double t0 = now();
        for (int i = 0; i < reps; i++) {
            atomic_store(&s->next, 0);
            atomic_store(&s->done, 0);
            atomic_fetch_add(&s->go, 1);
            for (long c; (c = atomic_fetch_add(&s->next, 1)) < nch;) {
                size_t off = (size_t)c * chunk, len = n - off < chunk ? n - off : chunk;
                struct iovec l = {dst + off, len}, r = {src + off, len};
                if (process_vm_readv(pid, &l, 1, &r, 1, 0) != (ssize_t)len) { perror("readv"); return 1; }
                atomic_fetch_add(&s->done, 1);
            }
            while (atomic_load(&s->done) < nch) ;
        }
        double t = now() - t0;
        printf("bytes=%zu chunk=%zu share=%d: %.1f us/message, %.2f GB/s\n", n, chunk, share,
               t / reps * 1e6, n * reps / t / 1e9);
    }
    atomic_store(&s->go, -1);
    wait(0);
    return 0;
}
