/* A test double of libibverbs: the subset gpumpi's ibverbs backend uses (src/sys/ibverbs.rs),
 * with rdma-core's ABI (LP64 struct layouts, the ibv_context ops table through which verbs.h's
 * inline ibv_post_send/ibv_post_recv/ibv_poll_cq call), between processes of one host.
 *
 * Built by the tests: cc -shared -fPIC -O1 -o libfakeibverbs.so fake_ibverbs.c
 *
 * The "fabric" is one shared-memory file (FAKEIBV_FABRIC, default /dev/shm/fakeibv-<uid>):
 * tables of queue pairs (state, owner pid, receive queue), completion queues (rings of
 * ibv_wc) and memory regions (owner pid, range, access), under one lock. The "NIC" is
 * synchronous: ibv_post_send performs the operation before it returns. RDMA writes and reads
 * move bytes between processes with process_vm_writev/readv (memcpy within a process; each
 * process allows this with PR_SET_PTRACER), checked against the target region's range and
 * access (else IBV_WC_REM_ACCESS_ERR); a write with immediate or a send consumes a receive
 * posted on the destination queue pair and completes there; a dead peer or a peer queue pair
 * that is not ready is IBV_WC_RETRY_EXC_ERR; a full completion queue is an overrun (the queue
 * pair goes to error, ibv_poll_cq fails from then on).
 *
 * Devices: FAKEIBV_DEVICES, comma-separated `name[:link=ib|eth][:mtu=N][:state=down]`
 * (default "fake0"), one port each. GIDs of port 1: index 0 fe80::<dev>:<pid-less id>
 * (RoCE v1 on Ethernet, IB otherwise); on Ethernet index 1 the same as RoCE v2 and index 2
 * ::ffff:127.0.<d>.1 (RoCE v2, IPv4-mapped); table length 4 (index 3 empty).
 *
 * Faults (FAKEIBV_FAULT, one of):
 *   qp_error=N       the N-th RDMA write of this process fails with IBV_WC_RETRY_EXC_ERR and
 *                    its queue pair goes to the error state (later work is flushed);
 *   remote_access=N  the N-th RDMA write of this process fails with IBV_WC_REM_ACCESS_ERR;
 *   cq_overrun       completion queues hold 2 entries, whatever was asked;
 *   port_down        every port reports IBV_PORT_DOWN;
 *   memlock          ibv_reg_mr fails with ENOMEM once the bytes registered by this process
 *                    exceed RLIMIT_MEMLOCK (as the kernel does for pinned pages);
 *   dmabuf_refuse=N  ibv_reg_dmabuf_mr of N bytes or more fails with ENOTSUP (as for device
 *                    memory the NIC cannot register: VMM memory without the GPUDirect RDMA
 *                    flag), so host memory registered as device memory is refused by size.
 *
 * Memory registered with ibv_reg_dmabuf_mr is recorded with its IOVA (the descriptor must be
 * open). Device memory: where the registering process has loaded libcuda (the double dlopens
 * it, never on its own in a process without it) and CUDA says a registered address (the IOVA
 * of a dma-buf region, the address of ibv_reg_mr / ibv_reg_mr_iova2: peer memory) is device
 * memory, the region records a CUDA IPC handle of its allocation (cuMemGetAddressRange,
 * cuIpcGetMemHandle; memory CUDA IPC cannot share, VMM or pool memory, fails the registration
 * with ENOTSUP). The process that executes an RDMA write or read into or out of such a region
 * of another process opens the handle (cuIpcOpenMemHandle, cached per process; a new handle
 * for the same allocation address closes the stale mapping) and moves the bytes with cuMemcpy
 * (unified addressing: host to device, device to host, device to device) followed by
 * cuCtxSynchronize; a device region of its own is copied in place the same way; device memory
 * against host memory of another process goes through a host bounce buffer and
 * process_vm_writev/readv. Everything else (host memory, and host memory registered through
 * the dma-buf entry point, as gpumpi's `host_memory_as_device_for_tests` does) moves as host
 * memory at the IOVA.
 *
 * fakeibv_peer_qps() (not a verb) counts this process's connected queue pairs whose peer is
 * another process's, for tests that count connections.
 *
 * FAKEIBV_TRACE=PATH appends one line per executed RDMA read and per RDMA write with
 * immediate (`read <remote addr> <len>`, `write_imm <remote addr> <len>`), in execution order,
 * so tests can check when a read (the GPUDirect flush) was issued. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

/* ---- ABI (rdma-core verbs.h, LP64) ---- */
union ibv_gid { uint8_t raw[16]; };
struct ibv_device { void *ops[2]; int node_type, transport_type; char name[64], dev_name[64], dev_path[256], ibdev_path[256]; };
struct ibv_context_ops { void *f[11]; void *poll_cq; void *g[13]; void *post_send; void *post_recv; void *h[5]; };
struct ibv_context { struct ibv_device *device; struct ibv_context_ops ops; int cmd_fd, async_fd, num_comp_vectors; pthread_mutex_t mutex; void *abi_compat; };
struct ibv_pd { struct ibv_context *context; uint32_t handle; };
struct ibv_mr { struct ibv_context *context; struct ibv_pd *pd; void *addr; size_t length; uint32_t handle, lkey, rkey; };
struct ibv_cq { struct ibv_context *context; void *channel; void *cq_context; uint32_t handle; int cqe; pthread_mutex_t mutex; pthread_cond_t cond; uint32_t comp_events_completed, async_events_completed; };
struct ibv_qp { struct ibv_context *context; void *qp_context; struct ibv_pd *pd; struct ibv_cq *send_cq, *recv_cq; void *srq; uint32_t handle, qp_num, state, qp_type; pthread_mutex_t mutex; pthread_cond_t cond; uint32_t events_completed; };
struct ibv_qp_cap { uint32_t max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data; };
struct ibv_qp_init_attr { void *qp_context; struct ibv_cq *send_cq, *recv_cq; void *srq; struct ibv_qp_cap cap; uint32_t qp_type; int sq_sig_all; };
struct ibv_ah_attr { union ibv_gid dgid; uint32_t flow_label; uint8_t sgid_index, hop_limit, traffic_class; uint16_t dlid; uint8_t sl, src_path_bits, static_rate, is_global, port_num; };
struct ibv_qp_attr { uint32_t qp_state, cur_qp_state, path_mtu, path_mig_state, qkey, rq_psn, sq_psn, dest_qp_num, qp_access_flags; struct ibv_qp_cap cap; struct ibv_ah_attr ah_attr, alt_ah_attr; uint16_t pkey_index, alt_pkey_index; uint8_t en_sqd_async_notify, sq_draining, max_rd_atomic, max_dest_rd_atomic, min_rnr_timer, port_num, timeout, retry_cnt, rnr_retry, alt_port_num, alt_timeout; uint32_t rate_limit; };
struct ibv_port_attr { uint32_t state, max_mtu, active_mtu; int gid_tbl_len; uint32_t port_cap_flags, max_msg_sz, bad_pkey_cntr, qkey_viol_cntr; uint16_t pkey_tbl_len, lid, sm_lid; uint8_t lmc, max_vl_num, sm_sl, subnet_timeout, init_type_reply, active_width, active_speed, phys_state, link_layer, flags; uint16_t port_cap_flags2; uint32_t active_speed_ex; };
struct ibv_gid_entry { union ibv_gid gid; uint32_t gid_index, port_num, gid_type, ndev_ifindex; };
struct ibv_sge { uint64_t addr; uint32_t length, lkey; };
struct ibv_send_wr { uint64_t wr_id; struct ibv_send_wr *next; struct ibv_sge *sg_list; int num_sge; uint32_t opcode, send_flags, imm_data; uint64_t remote_addr; uint32_t rkey; uint32_t rest[5]; uint32_t qp_type; uint64_t bind[6]; };
struct ibv_recv_wr { uint64_t wr_id; struct ibv_recv_wr *next; struct ibv_sge *sg_list; int num_sge; };
struct ibv_wc { uint64_t wr_id; uint32_t status, opcode, vendor_err, byte_len, imm_data, qp_num, src_qp, wc_flags; uint16_t pkey_index, slid; uint8_t sl, dlid_path_bits; };

_Static_assert(sizeof(struct ibv_send_wr) == 128, "ibv_send_wr");
_Static_assert(sizeof(struct ibv_wc) == 48, "ibv_wc");
_Static_assert(sizeof(struct ibv_qp_attr) == 140, "ibv_qp_attr");
_Static_assert(sizeof(struct ibv_port_attr) == 56, "ibv_port_attr");
_Static_assert(sizeof(struct ibv_context_ops) == 256, "ibv_context_ops");

enum { QPS_RESET, QPS_INIT, QPS_RTR, QPS_RTS, QPS_SQD, QPS_SQE, QPS_ERR };
enum { WR_RDMA_WRITE = 0, WR_RDMA_WRITE_WITH_IMM = 1, WR_SEND = 2, WR_RDMA_READ = 4 };
enum { WC_SUCCESS = 0, WC_LOC_LEN_ERR = 1, WC_LOC_PROT_ERR = 4, WC_WR_FLUSH_ERR = 5, WC_REM_ACCESS_ERR = 10, WC_RETRY_EXC_ERR = 12, WC_RNR_RETRY_EXC_ERR = 13 };
enum { WCO_SEND = 0, WCO_RDMA_WRITE = 1, WCO_RDMA_READ = 2, WCO_RECV = 128, WCO_RECV_IMM = 129 };
#define ACC_LOCAL_WRITE 1
#define ACC_REMOTE_WRITE 2
#define ACC_REMOTE_READ 4
#define SEND_SIGNALED 2
#define QP_STATE 1
#define QP_ACCESS_FLAGS (1 << 3)
#define QP_PKEY_INDEX (1 << 4)
#define QP_PORT (1 << 5)
#define QP_AV (1 << 7)
#define QP_PATH_MTU (1 << 8)
#define QP_TIMEOUT (1 << 9)
#define QP_RETRY_CNT (1 << 10)
#define QP_RNR_RETRY (1 << 11)
#define QP_RQ_PSN (1 << 12)
#define QP_MAX_QP_RD_ATOMIC (1 << 13)
#define QP_MIN_RNR_TIMER (1 << 15)
#define QP_SQ_PSN (1 << 16)
#define QP_MAX_DEST_RD_ATOMIC (1 << 17)
#define QP_DEST_QPN (1 << 20)

/* ---- the fabric ---- */
#define MAXQP 1024
#define MAXCQ 512
#define MAXMR 4096
#define RQ_DEPTH 1024
#define CQ_DEPTH 4096
#define MAXDEV 8

struct frq { uint64_t wr_id, addr; uint32_t len, lkey; };
struct fqp { int32_t used, pid; uint32_t state, port_mtu_dev, dest_qpn, path_mtu, recv_cq, send_cq, dev_mtu, _pad; uint32_t rq_head, rq_tail; struct frq rq[RQ_DEPTH]; };
struct fcq { int32_t used, pid; uint32_t cap, head, tail, overrun; struct ibv_wc ring[CQ_DEPTH]; };
/* A memory region; `dev`: device memory, with the device ordinal, the base of its allocation
 * and the allocation's CUDA IPC handle. */
struct fmr { int32_t used, pid; uint64_t addr, len; int32_t access, dev, ordinal, _pad; uint64_t base; uint8_t ipc[64]; };
struct fabric { volatile int32_t lock; uint32_t magic; struct fqp qp[MAXQP]; struct fcq cq[MAXCQ]; struct fmr mr[MAXMR]; };

static struct fabric *F;
static pthread_mutex_t init_mu = PTHREAD_MUTEX_INITIALIZER;
static int fault_kind; /* 1 qp_error, 2 remote_access, 3 cq_overrun, 4 port_down, 5 memlock, 6 dmabuf_refuse */
static long fault_at, writes_done;
static size_t registered;

struct fdev { struct ibv_device dev; int link_eth, mtu, down, index; };
static struct fdev devs[MAXDEV];
static int ndevs = -1;

static void lock(void) {
    int32_t me = getpid();
    long spins = 0;
    for (;;) {
        int32_t z = 0;
        if (__atomic_compare_exchange_n(&F->lock, &z, me, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) return;
        if (++spins % 100000 == 0) {
            int32_t h = __atomic_load_n(&F->lock, __ATOMIC_RELAXED);
            if (h && h != me && kill(h, 0) != 0 && errno == ESRCH) /* holder died: take over */
                __atomic_compare_exchange_n(&F->lock, &h, 0, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED);
        }
        if (spins % 64 == 0) sched_yield();
    }
}
static void unlock(void) { __atomic_store_n(&F->lock, 0, __ATOMIC_RELEASE); }
static int alive(int32_t pid) { return pid == getpid() || kill(pid, 0) == 0 || errno != ESRCH; }

static int setup(void) {
    pthread_mutex_lock(&init_mu);
    if (F) { pthread_mutex_unlock(&init_mu); return 0; }
    char path[512];
    const char *p = getenv("FAKEIBV_FABRIC");
    if (p && *p) snprintf(path, sizeof path, "%s", p);
    else snprintf(path, sizeof path, "/dev/shm/fakeibv-%u", (unsigned)getuid());
    int fd = open(path, O_RDWR | O_CREAT, 0600);
    if (fd < 0) { pthread_mutex_unlock(&init_mu); return -1; }
    if (ftruncate(fd, sizeof(struct fabric)) != 0) { close(fd); pthread_mutex_unlock(&init_mu); return -1; }
    void *m = mmap(0, sizeof(struct fabric), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) { pthread_mutex_unlock(&init_mu); return -1; }
    prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
    const char *f = getenv("FAKEIBV_FAULT");
    if (f) {
        if (!strncmp(f, "qp_error=", 9)) { fault_kind = 1; fault_at = atol(f + 9); }
        else if (!strncmp(f, "remote_access=", 14)) { fault_kind = 2; fault_at = atol(f + 14); }
        else if (!strcmp(f, "cq_overrun")) fault_kind = 3;
        else if (!strcmp(f, "port_down")) fault_kind = 4;
        else if (!strcmp(f, "memlock")) fault_kind = 5;
        else if (!strncmp(f, "dmabuf_refuse=", 14)) { fault_kind = 6; fault_at = atol(f + 14); }
    }
    __atomic_store_n(&F, (struct fabric *)m, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&init_mu);
    return 0;
}

static void parse_devices(void) {
    if (ndevs >= 0) return;
    const char *s = getenv("FAKEIBV_DEVICES");
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", s ? s : "fake0");
    int n = 0;
    char *save = 0;
    for (char *tok = strtok_r(buf, ",", &save); tok && n < MAXDEV; tok = strtok_r(0, ",", &save)) {
        struct fdev *d = &devs[n];
        memset(d, 0, sizeof *d);
        d->mtu = 4096;
        d->index = n;
        char *save2 = 0;
        char *name = strtok_r(tok, ":", &save2);
        if (!name || !*name) continue;
        snprintf(d->dev.name, sizeof d->dev.name, "%s", name);
        for (char *kv = strtok_r(0, ":", &save2); kv; kv = strtok_r(0, ":", &save2)) {
            if (!strcmp(kv, "link=eth")) d->link_eth = 1;
            else if (!strncmp(kv, "mtu=", 4)) d->mtu = atoi(kv + 4);
            else if (!strcmp(kv, "state=down")) d->down = 1;
        }
        n++;
    }
    ndevs = n;
}

static int mtu_enum(int bytes) { int e = 1; for (int b = 256; b < bytes && e < 5; b <<= 1) e++; return e; }

/* ---- device list, context, port, GID ---- */
static int fake_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
static int fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
static int fake_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);

struct ibv_device **ibv_get_device_list(int *num) {
    parse_devices();
    struct ibv_device **l = calloc(ndevs + 1, sizeof *l);
    if (!l) { errno = ENOMEM; return 0; }
    for (int i = 0; i < ndevs; i++) l[i] = &devs[i].dev;
    if (num) *num = ndevs;
    return l;
}
void ibv_free_device_list(struct ibv_device **l) { free(l); }
const char *ibv_get_device_name(struct ibv_device *d) { return d->name; }

struct ibv_context *ibv_open_device(struct ibv_device *d) {
    if (setup() != 0) { errno = ENODEV; return 0; }
    struct ibv_context *c = calloc(1, sizeof *c);
    if (!c) return 0;
    c->device = d;
    c->ops.poll_cq = (void *)fake_poll_cq;
    c->ops.post_send = (void *)fake_post_send;
    c->ops.post_recv = (void *)fake_post_recv;
    c->cmd_fd = c->async_fd = -1;
    c->num_comp_vectors = 1;
    return c;
}
int ibv_close_device(struct ibv_context *c) { free(c); return 0; }
static struct fdev *fdev_of(struct ibv_context *c) { return (struct fdev *)c->device; }

int ibv_query_port(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a) {
    if (port != 1) return EINVAL;
    struct fdev *d = fdev_of(c);
    /* The exported call fills the compat struct: the fields up to `flags`. */
    memset(a, 0, offsetof(struct ibv_port_attr, port_cap_flags2));
    a->state = (d->down || fault_kind == 4) ? 1 : 4;
    a->max_mtu = 5;
    a->active_mtu = mtu_enum(d->mtu);
    a->gid_tbl_len = 4;
    a->lid = d->link_eth ? 0 : (uint16_t)(d->index + 1);
    a->link_layer = d->link_eth ? 2 : 1;
    a->active_width = 2;
    a->active_speed = 32;
    a->phys_state = a->state == 4 ? 5 : 3;
    return 0;
}

static int gid_of(struct fdev *d, int index, union ibv_gid *g, uint32_t *type) {
    memset(g, 0, sizeof *g);
    if (index < 0 || index >= 4) return EINVAL;
    if (index == 3 || (!d->link_eth && index > 0)) return 0; /* empty entry */
    if (index == 2) { /* ::ffff:127.0.<d>.1 */
        g->raw[10] = g->raw[11] = 0xff; g->raw[12] = 127; g->raw[14] = d->index; g->raw[15] = 1;
        *type = 2;
        return 0;
    }
    g->raw[0] = 0xfe; g->raw[1] = 0x80; g->raw[8] = 0x02; g->raw[15] = (uint8_t)(d->index + 1);
    *type = d->link_eth ? (index == 1 ? 2 : 1) : 0;
    return 0;
}
int ibv_query_gid(struct ibv_context *c, uint8_t port, int index, union ibv_gid *g) {
    uint32_t t;
    if (port != 1) return -1;
    return gid_of(fdev_of(c), index, g, &t) ? -1 : 0;
}
int _ibv_query_gid_ex(struct ibv_context *c, uint32_t port, uint32_t index, struct ibv_gid_entry *e, uint32_t flags, size_t sz) {
    (void)flags;
    if (port != 1 || sz < sizeof *e) return EINVAL;
    memset(e, 0, sizeof *e);
    uint32_t t = 0;
    if (gid_of(fdev_of(c), (int)index, &e->gid, &t)) return EINVAL;
    static const uint8_t zero[16];
    if (!memcmp(e->gid.raw, zero, 16)) return ENODATA;
    e->gid_index = index; e->port_num = port; e->gid_type = t;
    return 0;
}

/* ---- CUDA (device memory regions), through dlopen ---- */
typedef unsigned long long cuptr;
struct cuipc { char reserved[64]; };
static struct {
    int (*Init)(unsigned);
    int (*PointerGetAttribute)(void *, int, cuptr);
    int (*MemGetAddressRange)(cuptr *, size_t *, cuptr);
    int (*IpcGetMemHandle)(struct cuipc *, cuptr);
    int (*IpcOpenMemHandle)(cuptr *, struct cuipc, unsigned);
    int (*IpcCloseMemHandle)(cuptr);
    int (*Memcpy)(cuptr, cuptr, size_t);
    int (*CtxSynchronize)(void);
    int (*CtxGetCurrent)(void **);
    int (*CtxSetCurrent)(void *);
    int (*DeviceGet)(int *, int);
    int (*PrimaryCtxRetain)(void **, int);
} cu;
static int cu_state; /* 1 loaded, -1 unusable, 0 not loaded (yet) */
static pthread_mutex_t cu_mu = PTHREAD_MUTEX_INITIALIZER;
#define CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9
#define CU_MEMORYTYPE_DEVICE 2
#define CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS 1
#define CUDA_ERROR_ALREADY_MAPPED 208

/* Whether the CUDA driver API is usable; `may_load`: dlopen libcuda if this process has not
 * (else only where it is already loaded: a process that never loaded it has no device memory). */
static int cu_load(int may_load) {
    pthread_mutex_lock(&cu_mu);
    if (cu_state) { pthread_mutex_unlock(&cu_mu); return cu_state > 0; }
    void *h = dlopen("libcuda.so.1", RTLD_NOW | (may_load ? 0 : RTLD_NOLOAD));
    if (!h) {
        if (may_load) cu_state = -1;
        pthread_mutex_unlock(&cu_mu);
        return 0;
    }
#define SYM(f, name) (*(void **)&cu.f = dlsym(h, name))
    int ok = SYM(Init, "cuInit") && SYM(PointerGetAttribute, "cuPointerGetAttribute") &&
             SYM(MemGetAddressRange, "cuMemGetAddressRange_v2") && SYM(IpcGetMemHandle, "cuIpcGetMemHandle") &&
             SYM(IpcOpenMemHandle, "cuIpcOpenMemHandle_v2") && SYM(IpcCloseMemHandle, "cuIpcCloseMemHandle") &&
             SYM(Memcpy, "cuMemcpy") && SYM(CtxSynchronize, "cuCtxSynchronize") &&
             SYM(CtxGetCurrent, "cuCtxGetCurrent") && SYM(CtxSetCurrent, "cuCtxSetCurrent") &&
             SYM(DeviceGet, "cuDeviceGet") && SYM(PrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
#undef SYM
    cu_state = ok && cu.Init(0) == 0 ? 1 : -1;
    pthread_mutex_unlock(&cu_mu);
    return cu_state > 0;
}

/* A current context on this thread (the primary context of device `ordinal`, else of device 0,
 * where none is current). */
static int cu_ctx(int ordinal) {
    void *c = 0;
    if (cu.CtxGetCurrent(&c) == 0 && c) return 0;
    int d;
    if (cu.DeviceGet(&d, ordinal) != 0 && cu.DeviceGet(&d, 0) != 0) return -1;
    if (cu.PrimaryCtxRetain(&c, d) != 0 || cu.CtxSetCurrent(c) != 0) return -1;
    return 0;
}

/* Fills the device fields of region `m` when `a` is device memory: 0 host memory (or no
 * CUDA in this process), 1 device memory, -1 device memory CUDA IPC cannot share. */
static int dev_probe(uint64_t a, struct fmr *m) {
    m->dev = 0;
    if (!cu_load(0)) return 0;
    unsigned type = 0;
    if (cu.PointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, a) != 0 || type != CU_MEMORYTYPE_DEVICE) return 0;
    int ord = 0;
    cu.PointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, a);
    cuptr base = 0;
    size_t size = 0;
    struct cuipc h;
    int r = cu.MemGetAddressRange(&base, &size, a);
    if (r == 0) r = cu.IpcGetMemHandle(&h, base);
    if (r != 0) {
        fprintf(stderr, "fakeibv: device memory at %#llx cannot be shared between processes by the test double (CUDA error %d)\n",
                (unsigned long long)a, r);
        return -1;
    }
    m->dev = 1; m->ordinal = ord; m->base = base;
    memcpy(m->ipc, h.reserved, sizeof m->ipc);
    return 1;
}

/* Mappings of other processes' device regions (their allocations' IPC handles), least
 * recently used replaced first; used under the fabric lock. */
#define NMAP 64
static struct ipcmap { int32_t pid; uint64_t base; uint8_t ipc[64]; cuptr mapped; unsigned long used; } maps[NMAP];
static unsigned long map_clock;

/* The address in this process of the allocation of region `m` of process `pid`, or 0. */
static cuptr ipc_map(int32_t pid, const struct fmr *m) {
    int slot = -1;
    for (int i = 0; i < NMAP; i++) {
        struct ipcmap *x = &maps[i];
        if (x->mapped && x->pid == pid && !memcmp(x->ipc, m->ipc, sizeof x->ipc)) {
            x->used = ++map_clock;
            return x->mapped;
        }
        /* The same address with another handle: freed and reallocated, the mapping is stale. */
        if (x->mapped && x->pid == pid && x->base == m->base) slot = i;
    }
    if (slot < 0) {
        slot = 0;
        for (int i = 0; i < NMAP; i++) {
            if (!maps[i].mapped) { slot = i; break; }
            if (maps[i].used < maps[slot].used) slot = i;
        }
    }
    struct ipcmap *x = &maps[slot];
    if (x->mapped) cu.IpcCloseMemHandle(x->mapped);
    x->mapped = 0;
    struct cuipc h;
    memcpy(h.reserved, m->ipc, sizeof h.reserved);
    cuptr p = 0;
    int rc = cu.IpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    if (rc == CUDA_ERROR_ALREADY_MAPPED) {
        /* A mapping of a freed allocation of `pid` still holds memory the new allocation
         * came from (CUDA maps a sub-allocated range's whole block): close that process's
         * other mappings (none is in use between transfers) and open again. */
        for (int i = 0; i < NMAP; i++)
            if (maps[i].mapped && maps[i].pid == pid) {
                cu.IpcCloseMemHandle(maps[i].mapped);
                maps[i].mapped = 0;
            }
        rc = cu.IpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    }
    if (rc != 0) {
        fprintf(stderr, "fakeibv: cuIpcOpenMemHandle of pid %d's allocation at %#llx: CUresult %d\n", (int)pid, (unsigned long long)m->base, rc);
        return 0;
    }
    x->pid = pid; x->base = m->base; x->mapped = p; x->used = ++map_clock;
    memcpy(x->ipc, m->ipc, sizeof x->ipc);
    return p;
}

/* ---- PD, MR ---- */
struct ibv_pd *ibv_alloc_pd(struct ibv_context *c) {
    struct ibv_pd *p = calloc(1, sizeof *p);
    if (p) p->context = c;
    return p;
}
int ibv_dealloc_pd(struct ibv_pd *p) { free(p); return 0; }

static struct ibv_mr *reg(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova, int access) {
    if (fault_kind == 5) {
        struct rlimit r;
        getrlimit(RLIMIT_MEMLOCK, &r);
        if (r.rlim_cur != RLIM_INFINITY && registered + len > r.rlim_cur) { errno = ENOMEM; return 0; }
    }
    (void)addr;
    struct fmr d;
    memset(&d, 0, sizeof d);
    if (dev_probe(iova, &d) < 0) { errno = ENOTSUP; return 0; }
    lock();
    int i;
    for (i = 0; i < MAXMR; i++)
        if (!F->mr[i].used || !alive(F->mr[i].pid)) break;
    if (i == MAXMR) { unlock(); errno = ENOMEM; return 0; }
    struct fmr *m = &F->mr[i];
    *m = d;
    m->used = 1; m->pid = getpid(); m->addr = iova; m->len = len; m->access = access;
    unlock();
    struct ibv_mr *mr = calloc(1, sizeof *mr);
    mr->context = pd->context; mr->pd = pd; mr->addr = (void *)iova; mr->length = len;
    mr->handle = i; mr->lkey = mr->rkey = (uint32_t)(i + 1) * 256 + 7;
    registered += len;
    return mr;
}
struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access) {
    return reg(pd, addr, len, (uint64_t)addr, access);
}
struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova, unsigned access) {
    return reg(pd, addr, len, iova, (int)access);
}
/* A dma-buf region is recorded at its IOVA (its descriptor must be valid): device memory where
 * CUDA says so (moved with CUDA copies), else host memory at that address. */
struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t len, uint64_t iova, int fd, int access) {
    (void)offset;
    if (fcntl(fd, F_GETFD) < 0) { errno = EBADF; return 0; }
    if (fault_kind == 6 && (long)len >= fault_at) { errno = ENOTSUP; return 0; }
    return reg(pd, 0, len, iova, access);
}
int ibv_dereg_mr(struct ibv_mr *mr) {
    lock();
    F->mr[mr->handle].used = 0;
    unlock();
    registered -= mr->length;
    free(mr);
    return 0;
}

/* ---- CQ ---- */
struct ibv_cq *ibv_create_cq(struct ibv_context *c, int cqe, void *ctx, void *ch, int vec) {
    (void)ctx; (void)ch; (void)vec;
    if (cqe < 1 || cqe > CQ_DEPTH) { errno = EINVAL; return 0; }
    lock();
    int i;
    for (i = 0; i < MAXCQ; i++)
        if (!F->cq[i].used || !alive(F->cq[i].pid)) break;
    if (i == MAXCQ) { unlock(); errno = ENOMEM; return 0; }
    struct fcq *q = &F->cq[i];
    q->used = 1; q->pid = getpid(); q->cap = fault_kind == 3 ? 2 : (uint32_t)cqe; q->head = q->tail = 0; q->overrun = 0;
    unlock();
    struct ibv_cq *cq = calloc(1, sizeof *cq);
    cq->context = c; cq->handle = i; cq->cqe = cqe;
    return cq;
}
int ibv_destroy_cq(struct ibv_cq *cq) {
    lock();
    F->cq[cq->handle].used = 0;
    unlock();
    free(cq);
    return 0;
}

/* Adds a completion to CQ `i` (lock held); an overrun marks the queue broken. */
static void push_wc(uint32_t i, const struct ibv_wc *wc) {
    struct fcq *q = &F->cq[i];
    if (!q->used) return;
    if (q->tail - q->head >= q->cap) { q->overrun = 1; return; }
    q->ring[q->tail % CQ_DEPTH] = *wc;
    q->tail++;
}

static int fake_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc) {
    lock();
    struct fcq *q = &F->cq[cq->handle];
    if (q->overrun) { unlock(); return -EOVERFLOW; }
    int k = 0;
    while (k < n && q->head != q->tail) wc[k++] = q->ring[q->head++ % CQ_DEPTH];
    unlock();
    return k;
}

/* ---- QP ---- */
struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *ia) {
    if (ia->qp_type != 2 || !ia->send_cq || !ia->recv_cq || ia->cap.max_recv_wr > RQ_DEPTH) { errno = EINVAL; return 0; }
    lock();
    int i;
    for (i = 0; i < MAXQP; i++)
        if (!F->qp[i].used || !alive(F->qp[i].pid)) break;
    if (i == MAXQP) { unlock(); errno = ENOMEM; return 0; }
    struct fqp *q = &F->qp[i];
    memset(q, 0, offsetof(struct fqp, rq));
    q->used = 1; q->pid = getpid(); q->state = QPS_RESET;
    q->send_cq = ia->send_cq->handle; q->recv_cq = ia->recv_cq->handle;
    q->dev_mtu = mtu_enum(fdev_of(pd->context)->mtu);
    unlock();
    struct ibv_qp *qp = calloc(1, sizeof *qp);
    qp->context = pd->context; qp->pd = pd; qp->send_cq = ia->send_cq; qp->recv_cq = ia->recv_cq;
    qp->handle = i; qp->qp_num = 0x100 + i; qp->qp_type = 2;
    return qp;
}
int ibv_destroy_qp(struct ibv_qp *qp) {
    lock();
    F->qp[qp->handle].used = 0;
    unlock();
    free(qp);
    return 0;
}

/* Not a verb: for tests. The queue pairs of this process connected (RTR or RTS) to a queue
 * pair of another process, so a test can count the connections it opened (0 before the fabric
 * is set up). */
int fakeibv_peer_qps(void) {
    if (!F) return 0;
    int32_t me = getpid();
    int n = 0;
    lock();
    for (int i = 0; i < MAXQP; i++) {
        struct fqp *q = &F->qp[i];
        if (!q->used || q->pid != me || (q->state != QPS_RTR && q->state != QPS_RTS)) continue;
        uint32_t d = q->dest_qpn - 0x100;
        n += d < MAXQP && F->qp[d].used && F->qp[d].pid != me;
    }
    unlock();
    return n;
}

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask) {
    if (!(mask & QP_STATE)) return EINVAL;
    struct fdev *d = fdev_of(qp->context);
    lock();
    struct fqp *q = &F->qp[qp->handle];
    int r = 0;
    switch (a->qp_state) {
    case QPS_INIT: {
        int need = QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS;
        if (q->state != QPS_RESET || (mask & need) != need || a->port_num != 1) r = EINVAL;
        break;
    }
    case QPS_RTR: {
        int need = QP_STATE | QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN | QP_MAX_DEST_RD_ATOMIC | QP_MIN_RNR_TIMER;
        if (q->state != QPS_INIT || (mask & need) != need) { r = EINVAL; break; }
        if (a->path_mtu < 1 || a->path_mtu > 5 || (int)a->path_mtu > mtu_enum(d->mtu)) { r = EINVAL; break; }
        if (d->link_eth && (!a->ah_attr.is_global || a->ah_attr.sgid_index >= 3)) { r = EINVAL; break; }
        if (!d->link_eth && !a->ah_attr.dlid) { r = EINVAL; break; }
        q->dest_qpn = a->dest_qp_num; q->path_mtu = a->path_mtu;
        break;
    }
    case QPS_RTS: {
        int need = QP_STATE | QP_TIMEOUT | QP_RETRY_CNT | QP_RNR_RETRY | QP_SQ_PSN | QP_MAX_QP_RD_ATOMIC;
        if (q->state != QPS_RTR || (mask & need) != need) r = EINVAL;
        break;
    }
    case QPS_ERR: case QPS_RESET: break;
    default: r = EINVAL;
    }
    if (!r) { q->state = a->qp_state; qp->state = a->qp_state; if (a->qp_state == QPS_RESET) q->rq_head = q->rq_tail = 0; }
    unlock();
    return r;
}

static int fake_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad) {
    lock();
    struct fqp *q = &F->qp[qp->handle];
    for (; wr; wr = wr->next) {
        if (q->state == QPS_RESET || q->rq_tail - q->rq_head >= RQ_DEPTH) { unlock(); *bad = wr; return ENOMEM; }
        struct frq *e = &q->rq[q->rq_tail % RQ_DEPTH];
        e->wr_id = wr->wr_id;
        e->addr = wr->num_sge ? wr->sg_list[0].addr : 0;
        e->len = wr->num_sge ? wr->sg_list[0].length : 0;
        e->lkey = wr->num_sge ? wr->sg_list[0].lkey : 0;
        q->rq_tail++;
        if (q->state == QPS_ERR) { /* flushed at once */
            struct ibv_wc wc = {.wr_id = wr->wr_id, .status = WC_WR_FLUSH_ERR, .opcode = WCO_RECV, .qp_num = qp->qp_num};
            push_wc(q->recv_cq, &wc);
            q->rq_head++;
        }
    }
    unlock();
    return 0;
}

/* The region of `key` owned by `pid` covering [addr, addr+len) with `access`, or NULL. */
static struct fmr *mr_check(uint32_t key, int32_t pid, uint64_t addr, uint64_t len, int access) {
    if (key % 256 != 7) return 0;
    uint32_t i = key / 256 - 1;
    if (i >= MAXMR) return 0;
    struct fmr *m = &F->mr[i];
    if (!m->used || m->pid != pid || addr < m->addr || addr + len > m->addr + m->len) return 0;
    if ((m->access & access) != access) return 0;
    return m;
}

/* Copies between device memory and host memory where one end (or both) is a device region:
 * see the header comment. */
static int dev_fail(const char *step, int rc, int32_t pid, uint64_t local, uint64_t remote, size_t len, int to_remote) {
    fprintf(stderr, "fakeibv: device %s of %zu bytes %s pid %d failed (CUresult %d; local %#llx remote %#llx)\n",
            to_remote ? "write" : "read", len, step, (int)pid, rc, (unsigned long long)local, (unsigned long long)remote);
    return -1;
}

static int dev_xfer(int32_t pid, const struct fmr *lm, uint64_t local, const struct fmr *rm, uint64_t remote, size_t len, int to_remote) {
    int ldev = lm && lm->dev, rdev = rm && rm->dev, rc;
    if (!cu_load(1)) return dev_fail("loading libcuda for", 0, pid, local, remote, len, to_remote);
    if (cu_ctx(ldev ? lm->ordinal : rm->ordinal) != 0) return dev_fail("making a context for", 0, pid, local, remote, len, to_remote);
    uint64_t r = remote;
    if (rdev && pid != getpid()) {
        cuptr base = ipc_map(pid, rm);
        if (!base) return dev_fail("opening the IPC handle of the target of", -1, pid, local, remote, len, to_remote);
        r = base + (remote - rm->base);
    }
    if (pid == getpid() || rdev) { /* both ends addressable here: one copy */
        cuptr dst = to_remote ? r : local, src = to_remote ? local : r;
        if ((rc = cu.Memcpy(dst, src, len)) != 0) return dev_fail("cuMemcpy in", rc, pid, local, remote, len, to_remote);
        if ((rc = cu.CtxSynchronize()) != 0) return dev_fail("cuCtxSynchronize after", rc, pid, local, remote, len, to_remote);
        return 0;
    }
    /* Local device memory, host memory of another process: through a bounce buffer. */
    size_t chunk = len < (4u << 20) ? len : (4u << 20);
    char *b = malloc(chunk);
    if (!b) return -1;
    const char *step = 0;
    rc = 0;
    for (size_t off = 0; off < len && !step; off += chunk) {
        size_t n = len - off < chunk ? len - off : chunk;
        struct iovec l = {b, n}, rv = {(void *)(remote + off), n};
        if (to_remote) {
            if ((rc = cu.Memcpy((cuptr)(uintptr_t)b, local + off, n)) != 0) step = "cuMemcpy to the bounce buffer in";
            else if ((rc = cu.CtxSynchronize()) != 0) step = "cuCtxSynchronize in";
            else if (process_vm_writev(pid, &l, 1, &rv, 1, 0) != (ssize_t)n) { rc = errno; step = "process_vm_writev in"; }
        } else {
            if (process_vm_readv(pid, &l, 1, &rv, 1, 0) != (ssize_t)n) { rc = errno; step = "process_vm_readv in"; }
            else if ((rc = cu.Memcpy(local + off, (cuptr)(uintptr_t)b, n)) != 0) step = "cuMemcpy from the bounce buffer in";
            else if ((rc = cu.CtxSynchronize()) != 0) step = "cuCtxSynchronize in";
        }
    }
    free(b);
    return step ? dev_fail(step, rc, pid, local, remote, len, to_remote) : 0;
}

/* Copies between this process (local, in region `lm`) and `pid` (remote, in region `rm`);
 * a null region is host memory. */
static int xfer(int32_t pid, const struct fmr *lm, uint64_t local, const struct fmr *rm, uint64_t remote, size_t len, int to_remote) {
    if (!len) return 0;
    if ((lm && lm->dev) || (rm && rm->dev)) return dev_xfer(pid, lm, local, rm, remote, len, to_remote);
    if (pid == getpid()) {
        if (to_remote) memmove((void *)remote, (void *)local, len);
        else memmove((void *)local, (void *)remote, len);
        return 0;
    }
    struct iovec l = {(void *)local, len}, r = {(void *)remote, len};
    ssize_t n = to_remote ? process_vm_writev(pid, &l, 1, &r, 1, 0) : process_vm_readv(pid, &l, 1, &r, 1, 0);
    return n == (ssize_t)len ? 0 : -1;
}

/* FAKEIBV_TRACE: one line per traced operation (`what` null: not traced). */
static void trace(const char *what, uint64_t addr, uint32_t len) {
    const char *path = getenv("FAKEIBV_TRACE");
    if (!what || !path || !*path) return;
    FILE *t = fopen(path, "a");
    if (!t) return;
    fprintf(t, "%s %#llx %u\n", what, (unsigned long long)addr, len);
    fclose(t);
}

/* Executes one work request on QP slot `qi` (lock held); returns the completion status. */
static uint32_t exec(struct ibv_qp *qp, struct fqp *q, struct ibv_send_wr *wr, uint32_t *opcode) {
    *opcode = wr->opcode == WR_RDMA_READ ? WCO_RDMA_READ : wr->opcode == WR_SEND ? WCO_SEND : WCO_RDMA_WRITE;
    if (q->state == QPS_ERR) return WC_WR_FLUSH_ERR;
    uint64_t la = wr->num_sge ? wr->sg_list[0].addr : 0;
    uint32_t len = wr->num_sge ? wr->sg_list[0].length : 0;
    int32_t me = getpid();
    struct fmr *lm = len ? mr_check(wr->sg_list[0].lkey, me, la, len, wr->opcode == WR_RDMA_READ ? ACC_LOCAL_WRITE : 0) : 0;
    if (len && !lm) return WC_LOC_PROT_ERR;
    uint32_t di = q->dest_qpn - 0x100;
    struct fqp *d = di < MAXQP ? &F->qp[di] : 0;
    if (!d || !d->used || !alive(d->pid) || (d->state != QPS_RTR && d->state != QPS_RTS) || d->dest_qpn != qp->qp_num)
        return WC_RETRY_EXC_ERR;
    if (q->path_mtu > d->dev_mtu) return WC_RETRY_EXC_ERR; /* packets the peer's port drops */
    if (wr->opcode == WR_RDMA_WRITE || wr->opcode == WR_RDMA_WRITE_WITH_IMM) {
        writes_done++;
        if (fault_kind == 1 && writes_done == fault_at) return WC_RETRY_EXC_ERR;
        if (fault_kind == 2 && writes_done == fault_at) return WC_REM_ACCESS_ERR;
        struct fmr *rm = len ? mr_check(wr->rkey, d->pid, wr->remote_addr, len, ACC_REMOTE_WRITE) : 0;
        if (len && !rm) return WC_REM_ACCESS_ERR;
        if (xfer(d->pid, lm, la, rm, wr->remote_addr, len, 1)) return WC_RETRY_EXC_ERR;
    } else if (wr->opcode == WR_RDMA_READ) {
        struct fmr *rm = len ? mr_check(wr->rkey, d->pid, wr->remote_addr, len, ACC_REMOTE_READ) : 0;
        if (len && !rm) return WC_REM_ACCESS_ERR;
        if (xfer(d->pid, lm, la, rm, wr->remote_addr, len, 0)) return WC_RETRY_EXC_ERR;
    }
    trace(wr->opcode == WR_RDMA_READ ? "read" : wr->opcode == WR_RDMA_WRITE_WITH_IMM ? "write_imm" : 0,
          wr->remote_addr, len);
    if (wr->opcode == WR_RDMA_WRITE_WITH_IMM || wr->opcode == WR_SEND) {
        if (d->rq_head == d->rq_tail) return WC_RNR_RETRY_EXC_ERR;
        struct frq *e = &d->rq[d->rq_head % RQ_DEPTH];
        struct ibv_wc wc = {.wr_id = e->wr_id, .status = WC_SUCCESS, .byte_len = len, .qp_num = q->dest_qpn, .src_qp = qp->qp_num};
        if (wr->opcode == WR_SEND) {
            wc.opcode = WCO_RECV;
            if (len > e->len) wc.status = WC_LOC_LEN_ERR;
            else if (len && xfer(d->pid, lm, la, mr_check(e->lkey, d->pid, e->addr, len, 0), e->addr, len, 1))
                return WC_RETRY_EXC_ERR;
        } else {
            wc.opcode = WCO_RECV_IMM;
            wc.imm_data = wr->imm_data;
            wc.wc_flags = 2;
        }
        d->rq_head++;
        push_wc(d->recv_cq, &wc);
    }
    return WC_SUCCESS;
}

static int fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad) {
    lock();
    struct fqp *q = &F->qp[qp->handle];
    for (; wr; wr = wr->next) {
        if (q->state != QPS_RTS && q->state != QPS_ERR) { unlock(); *bad = wr; return EINVAL; }
        if (wr->num_sge > 1) { unlock(); *bad = wr; return EINVAL; }
        uint32_t op;
        uint32_t st = exec(qp, q, wr, &op);
        if (st != WC_SUCCESS && st != WC_WR_FLUSH_ERR) q->state = QPS_ERR;
        if (st != WC_SUCCESS || (wr->send_flags & SEND_SIGNALED)) {
            struct ibv_wc wc = {.wr_id = wr->wr_id, .status = st, .opcode = op, .qp_num = qp->qp_num,
                                .byte_len = wr->num_sge ? wr->sg_list[0].length : 0};
            push_wc(q->send_cq, &wc);
        }
        if (st != WC_SUCCESS && st != WC_WR_FLUSH_ERR) { /* the peer's side breaks too */
            uint32_t di = q->dest_qpn - 0x100;
            if (di < MAXQP && F->qp[di].used && F->qp[di].dest_qpn == qp->qp_num && st != WC_RETRY_EXC_ERR) {
                struct fqp *d = &F->qp[di];
                d->state = QPS_ERR;
                while (d->rq_head != d->rq_tail) {
                    struct ibv_wc wc = {.wr_id = d->rq[d->rq_head % RQ_DEPTH].wr_id, .status = WC_WR_FLUSH_ERR, .opcode = WCO_RECV, .qp_num = q->dest_qpn};
                    push_wc(d->recv_cq, &wc);
                    d->rq_head++;
                }
            }
        }
        if (q->state == QPS_ERR && st == WC_SUCCESS) q->state = QPS_ERR;
    }
    unlock();
    return 0;
}
