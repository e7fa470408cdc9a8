/* Raw TCP throughput between two endpoints: the limit the MPI benchmarks are held against.
 *
 *   raw_tcp recv HOST PORT STREAMS [BLOCK [spin]]          accept STREAMS connections, drain
 *                                                          each with BLOCK-byte reads (1 MiB)
 *   raw_tcp send HOST PORT STREAMS SECONDS [BLOCK [spin]]  write BLOCK-byte writes on each
 *                                                          connection for SECONDS
 *
 * One thread per connection at each end. `spin`: that end's calls do not block (MSG_DONTWAIT)
 * and are retried at once, as an MPI library's progress loop polls its sockets, instead of
 * sleeping in the kernel until the socket is ready. RAW_TCP_NODELAY=1: the sender's sockets
 * set TCP_NODELAY, as the MPIs' do.
 *
 * The sender prints "raw TCP N stream(s) of K KiB writes: X GB/s" (bytes written over the wall
 * time, from the first write to the last connection's close). Plain blocking sockets, one
 * reused buffer per thread at each end, IPv4 only: the benchmarks run it between namespace
 * nodes or on loopback. Build: cc -O2 -pthread -o raw_tcp raw_tcp.c
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_STREAMS 64

static size_t block = 1 << 20;
static int flags; /* MSG_DONTWAIT with `spin` */
static int nodelay; /* TCP_NODELAY on the sender's sockets (RAW_TCP_NODELAY=1) */
static double secs;
static int fds[MAX_STREAMS];
static unsigned long long sent[MAX_STREAMS];

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void die(const char *what) {
    perror(what);
    exit(1);
}

static void *drain(void *arg) {
    int fd = *(int *)arg;
    char *buf = malloc(block);
    if (!buf) die("malloc");
    ssize_t n;
    while ((n = recv(fd, buf, block, flags)) != 0) {
        if (n < 0 && errno != EAGAIN) die("recv");
    }
    close(fd);
    free(buf);
    return NULL;
}

static double t_end;

static void *pump(void *arg) {
    int i = (int)(long)arg;
    char *buf = calloc(1, block);
    if (!buf) die("calloc");
    while (now() < t_end) {
        size_t off = 0;
        while (off < block) {
            ssize_t n = send(fds[i], buf + off, block - off, flags);
            if (n < 0 && errno != EAGAIN) die("send");
            if (n > 0) off += (size_t)n;
        }
        sent[i] += block;
    }
    close(fds[i]);
    free(buf);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s recv HOST PORT STREAMS [BLOCK [spin]] | send HOST PORT STREAMS SECONDS [BLOCK [spin]]\n", argv[0]);
        return 2;
    }
    int is_send = strcmp(argv[1], "send") == 0;
    int streams = atoi(argv[4]);
    if (streams < 1 || streams > MAX_STREAMS) {
        fprintf(stderr, "raw_tcp: STREAMS must be 1-%d\n", MAX_STREAMS);
        return 2;
    }
    if (is_send) {
        if (argc < 6) {
            fprintf(stderr, "raw_tcp send: SECONDS missing\n");
            return 2;
        }
        secs = atof(argv[5]);
        if (argc > 6) block = strtoull(argv[6], NULL, 10);
        if (argc > 7 && strcmp(argv[7], "spin") == 0) flags = MSG_DONTWAIT;
    } else {
        if (argc > 5) block = strtoull(argv[5], NULL, 10);
        if (argc > 6 && strcmp(argv[6], "spin") == 0) flags = MSG_DONTWAIT;
    }
    if (block == 0) {
        fprintf(stderr, "raw_tcp: BLOCK must be positive\n");
        return 2;
    }
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(argv[3]))};
    if (inet_pton(AF_INET, argv[2], &a.sin_addr) != 1) {
        fprintf(stderr, "raw_tcp: %s is not an IPv4 address\n", argv[2]);
        return 2;
    }
    const char *nd = getenv("RAW_TCP_NODELAY");
    nodelay = nd && *nd == '1';
    pthread_t th[MAX_STREAMS];
    if (!is_send) {
        int srv = socket(AF_INET, SOCK_STREAM, 0), one = 1;
        if (srv < 0) die("socket");
        setsockopt(srv, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(srv, (struct sockaddr *)&a, sizeof a) < 0) die("bind");
        if (listen(srv, MAX_STREAMS) < 0) die("listen");
        for (int i = 0; i < streams; i++) {
            fds[i] = accept(srv, NULL, NULL);
            if (fds[i] < 0) die("accept");
            pthread_create(&th[i], NULL, drain, &fds[i]);
        }
        for (int i = 0; i < streams; i++) pthread_join(th[i], NULL);
        close(srv);
        return 0;
    }
    for (int i = 0; i < streams; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM, 0);
        if (fds[i] < 0) die("socket");
        if (connect(fds[i], (struct sockaddr *)&a, sizeof a) < 0) die("connect");
        if (nodelay) setsockopt(fds[i], IPPROTO_TCP, TCP_NODELAY, &nodelay, sizeof nodelay);
    }
    double t0 = now();
    t_end = t0 + secs;
    for (int i = 0; i < streams; i++) pthread_create(&th[i], NULL, pump, (void *)(long)i);
    unsigned long long total = 0;
    for (int i = 0; i < streams; i++) {
        pthread_join(th[i], NULL);
        total += sent[i];
    }
    printf("raw TCP %d stream(s) of %zu KiB writes%s: %.2f GB/s\n", streams, block >> 10,
           flags ? ", spinning" : "", total / (now() - t0) / 1e9);
    return 0;
}
