/* Connections between nodes are opened on first use: a job whose ranks talk only to their ring
 * neighbours opens only those connections, a receive from MPI_ANY_SOURCE hears ranks that never
 * heard from the receiver, and MPI_Finalize does not wait for ranks that never connected.
 *
 * Run across nodes with the TCP backend and GPUMPI_NET_TCP_THREADS / GPUMPI_NET_TCP_SOCKS set:
 * a connection is 1 + THREADS x SOCKS sockets at each end, counted in /proc/self/fd. With
 * GPUMPI_NET=ib over the libibverbs test double (GPUMPI_IBVERBS_LIB) and GPUMPI_IB_QPS_PER_CONN
 * set: a connection is one socket at each end (the set-up socket the backend keeps as the
 * peer's liveness signal) and QPS queue pairs connected to the peer's, which the double counts
 * (fakeibv_peer_qps: this process's queue pairs whose destination belongs to another process);
 * every check below holds for both counts.
 * Argument: `lazy` (GPUMPI_NET_CONNECT unset or lazy) or `eager` (GPUMPI_NET_CONNECT=eager:
 * every connection exists when MPI_Init returns, so no socket appears later).
 *
 * 1. Each rank exchanges its node name (GPUMPI_NODE_ID) with both ring neighbours, four times.
 *    Lazy: the sockets it gained are exactly one connection per distinct neighbour on another
 *    node, and the later exchanges add none. Over TCP that connection carries both directions
 *    (a rank first sends to its right neighbour, which has received from it before it answers
 *    on the same connection), its other direction a duplicated descriptor at each end (one
 *    socket more); over ib it is one connection each way.
 * 2. A token goes round the ring from rank 0 (neighbours only), so that rank 0 has counted
 *    before anyone else sends to it; then every other rank sends its rank and node name to
 *    rank 0, which receives them with MPI_ANY_SOURCE. Rank 0 gained one connection (accepted)
 *    per off-node sender that is not its neighbour, and no other.
 * 3. The token goes round again before the final barrier (which opens more connections). */
#include "ctest.h"
#include <dirent.h>
#include <dlfcn.h>
#include <unistd.h>

#define NAME 64

static int sockets(void)
{
    DIR *d = opendir("/proc/self/fd");
    CHECK(d != NULL, "cannot open /proc/self/fd");
    int n = 0;
    struct dirent *e;
    char path[300], target[256];
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        ssize_t len = readlink(path, target, sizeof target - 1);
        if (len > 0) {
            target[len] = 0;
            n += strncmp(target, "socket:", 7) == 0;
        }
    }
    closedir(d);
    return n;
}

static int env_int(const char *name)
{
    const char *v = getenv(name);
    CHECK(v != NULL && atoi(v) > 0, "%s must be set (the sockets per connection follow from it)",
          name);
    return atoi(v);
}

/* Over ib: the double's count of this process's queue pairs connected to another process's. */
static int (*peer_qps_fn)(void);

static int peer_qps(void)
{
    return peer_qps_fn ? peer_qps_fn() : 0;
}

/* The token round of steps 2 and 3: rank 0 starts it, every rank passes it right. */
static void token_round(int rank, int size)
{
    int left = (rank + size - 1) % size, right = (rank + 1) % size, t = 7;
    if (rank == 0) {
        CHECK_MPI(MPI_Send(&t, 1, MPI_INT, right, 3, MPI_COMM_WORLD));
        CHECK_MPI(MPI_Recv(&t, 1, MPI_INT, left, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    } else {
        CHECK_MPI(MPI_Recv(&t, 1, MPI_INT, left, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK_MPI(MPI_Send(&t, 1, MPI_INT, right, 3, MPI_COMM_WORLD));
    }
    CHECK(t == 7, "token %d", t);
}

int main(int argc, char **argv)
{
    ct_init(&argc, &argv);
    int rank = ct_world_rank, size = ct_world_size;
    CHECK(argc == 2 && (strcmp(argv[1], "lazy") == 0 || strcmp(argv[1], "eager") == 0),
          "usage: net_lazy lazy|eager");
    int lazy = strcmp(argv[1], "lazy") == 0;
    const char *net = getenv("GPUMPI_NET");
    int ib = net != NULL && strcmp(net, "ib") == 0;
    int per_conn, qps_per_conn = 0;
    if (ib) {
        const char *lib = getenv("GPUMPI_IBVERBS_LIB");
        CHECK(lib != NULL, "GPUMPI_NET=ib: GPUMPI_IBVERBS_LIB must name the libibverbs test double");
        void *h = dlopen(lib, RTLD_NOW | RTLD_NOLOAD);
        CHECK(h != NULL, "the ibverbs backend did not load %s: %s", lib, dlerror());
        *(void **)&peer_qps_fn = dlsym(h, "fakeibv_peer_qps");
        CHECK(peer_qps_fn != NULL, "%s has no fakeibv_peer_qps", lib);
        per_conn = 1;
        qps_per_conn = env_int("GPUMPI_IB_QPS_PER_CONN");
    } else {
        per_conn = 1 + env_int("GPUMPI_NET_TCP_THREADS") * env_int("GPUMPI_NET_TCP_SOCKS");
    }
    const char *node = getenv("GPUMPI_NODE_ID");
    CHECK(node != NULL && strlen(node) < NAME, "GPUMPI_NODE_ID unset or too long");
    char mine[NAME] = {0}, from_left[NAME], from_right[NAME];
    strcpy(mine, node);

    int s0 = sockets(), q0 = peer_qps();
    int left = (rank + size - 1) % size, right = (rank + 1) % size;
    int s1 = -1, q1 = -1;
    for (int round = 0; round < 4; round++) {
        memset(from_left, 0, NAME);
        memset(from_right, 0, NAME);
        CHECK_MPI(MPI_Sendrecv(mine, NAME, MPI_CHAR, right, round, from_left, NAME, MPI_CHAR, left,
                               round, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK_MPI(MPI_Sendrecv(mine, NAME, MPI_CHAR, left, 100 + round, from_right, NAME,
                               MPI_CHAR, right, 100 + round, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        int now = sockets(), qnow = peer_qps();
        if (round == 0) {
            s1 = now;
            q1 = qnow;
        }
        CHECK(now == s1 && qnow == q1, "round %d: %d sockets and %d queue pairs, %d and %d after "
              "the first exchange: repeated traffic to the same neighbours opened connections",
              round, now, qnow, s1, q1);
    }
    int off_left = strcmp(from_left, mine) != 0, off_right = strcmp(from_right, mine) != 0;
    int off = left == right ? off_left : off_left + off_right;
    int per_pair = ib ? 2 * per_conn : per_conn + 1;
    int want = lazy ? per_pair * off : 0;
    CHECK(s1 - s0 == want,
          "%d sockets after MPI_Init, %d after talking to neighbours %d (%s) and %d (%s) from "
          "node %s: want %d more (%d off-node neighbours, %d sockets per pair, %s)",
          s0, s1, left, from_left, right, from_right, mine, want, off, per_pair, argv[1]);
    CHECK(q1 - q0 == (lazy ? 2 * qps_per_conn * off : 0),
          "%d queue pairs connected to other processes after MPI_Init, %d after talking to "
          "neighbours: want %d more (%d off-node neighbours, %d per connection, %s)",
          q0, q1, lazy ? 2 * qps_per_conn * off : 0, off, qps_per_conn, argv[1]);

    token_round(rank, size);
    if (rank == 0) {
        char got[NAME + 8];
        int seen[8] = {0}, extra = 0;
        CHECK(size <= 8, "at most 8 ranks");
        for (int i = 1; i < size; i++) {
            MPI_Status st;
            CHECK_MPI(MPI_Recv(got, NAME + 8, MPI_CHAR, MPI_ANY_SOURCE, 9, MPI_COMM_WORLD, &st));
            int from = -1;
            memcpy(&from, got, sizeof from);
            CHECK(from == st.MPI_SOURCE && from > 0 && from < size && !seen[from],
                  "message says rank %d, source %d", from, st.MPI_SOURCE);
            seen[from] = 1;
            int neighbour = from == left || from == right;
            extra += !neighbour && strcmp(got + 8, mine) != 0;
        }
        int s2 = sockets(), q2 = peer_qps();
        CHECK(s2 - s1 == (lazy ? per_conn * extra : 0),
              "%d sockets after hearing every rank (%d off-node non-neighbours), %d before: want "
              "%d more (%s)", s2, extra, s1, lazy ? per_conn * extra : 0, argv[1]);
        CHECK(q2 - q1 == (lazy ? qps_per_conn * extra : 0),
              "%d queue pairs after hearing every rank (%d off-node non-neighbours), %d before: "
              "want %d more (%s)", q2, extra, q1, lazy ? qps_per_conn * extra : 0, argv[1]);
    } else {
        char msg[NAME + 8] = {0};
        memcpy(msg, &rank, sizeof rank);
        strcpy(msg + 8, mine);
        CHECK_MPI(MPI_Send(msg, NAME + 8, MPI_CHAR, 0, 9, MPI_COMM_WORLD));
    }
    token_round(rank, size);
    if (ib && !lazy) {
        /* Eager: every connection to a rank of another node was up when MPI_Init returned. */
        char all[8][NAME];
        CHECK(size <= 8, "at most 8 ranks");
        CHECK_MPI(MPI_Allgather(mine, NAME, MPI_CHAR, all, NAME, MPI_CHAR, MPI_COMM_WORLD));
        int others = 0;
        for (int i = 0; i < size; i++)
            others += strcmp(all[i], mine) != 0;
        CHECK(q0 == 2 * qps_per_conn * others, "eager: %d queue pairs connected to other processes "
              "after MPI_Init, want %d (%d ranks on other nodes)", q0, 2 * qps_per_conn * others,
              others);
    }
    return ct_finish("net_lazy");
}
