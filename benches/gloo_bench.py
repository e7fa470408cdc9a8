#!/usr/bin/env python3
"""gloo_bench.py -- the gpumpi-bench sweep over torch.distributed (backend
gloo), host or CUDA tensors, with the same options, columns and CSV.

    python3 benches/gloo_bench.py -o allreduce --np 2 -b 8 -e 1M      # spawns 2 ranks
    torchrun --nproc-per-node 2 benches/gloo_bench.py -o allreduce    # or under torchrun

Without torch it prints `# gloo: skip (...)` and exits 0.  The value
functions mirror benches/bench_util.h so validation is identical.
"""
import argparse
import math
import os
import re
import socket
import subprocess
import sys
import time

OPS = ["pingpong", "bw", "bibw", "sendrecv", "allreduce", "reduce", "alltoall", "alltoallv",
       "bcast", "allgather", "reduce_scatter"]
REDUCES = {"allreduce", "reduce", "reduce_scatter"}
BLOCKED = {"alltoall", "alltoallv", "allgather", "reduce_scatter"}
P2P_OPS = {"pingpong", "bw", "bibw", "sendrecv"}
TYPE_SIZES = {"int8": 1, "uint8": 1, "int32": 4, "int64": 8, "float": 4, "double": 8}
CSV_HEADER = ("backend,op,nranks,mem,mode,size,count,type,redop,root,time_us,algbw_gbps,busbw_gbps,wrong,"
              "med_us,min_us,algbw_med_gbps,busbw_med_gbps")


# --------------------------------------------------------- pure helpers

def parse_size(s):
    """'8', '64K', '128M', '1G' (binary multiples, optional B/iB) -> int."""
    m = re.fullmatch(r"(\d+)([KMGTkmgt]?)(i?[Bb])?", s.strip())
    if not m or (m.group(3) and m.group(3).startswith("i") and not m.group(2)):
        raise ValueError(f"bad size {s!r}")
    return int(m.group(1)) << (10 * ("KMGT".index(m.group(2).upper()) + 1) if m.group(2) else 0)


def sweep(lo, hi, factor):
    if factor < 2 or hi < lo:
        raise ValueError("bad sweep")
    out = []
    s = lo
    if s == 0:
        out.append(0)
        s = 1
    while s <= hi:
        out.append(s)
        s *= factor
    return out


def busbw_factor(op, n):
    if n <= 0:
        return 0.0
    if op == "allreduce":
        return 2.0 * (n - 1) / n
    if op in ("reduce_scatter", "allgather", "alltoall", "alltoallv"):
        return (n - 1) / n
    return 1.0


def counts(op, nbytes, tsize, n):
    """(total elements, elements per rank block)."""
    count = nbytes // tsize
    if op in BLOCKED:
        blk = count // n
        return blk * n, blk
    return count, count


class P2P:
    """Point-to-point for the sweep.  Gloo's send/recv on CUDA tensors aborts inside Gloo
    (`gloo::IoException ... writev: Bad address`: it hands device pointers to the socket), so
    with `staged` every message goes through host tensors, as Gloo users do: the sender copies
    the device tensor to a host tensor and sends that, the receiver receives into a host tensor
    and copies it to the device tensor when the receive completes.  The time includes both copies
    (rows are labelled mem=cuda-staged).  Host tensors are sent as they are.

    `dist` is torch.distributed (or a stand-in with send/recv/isend/irecv); `host_like(t)` makes a
    host tensor shaped like t.  Host buffers are kept per device tensor, so a window of
    irecvs into one tensor shares one host buffer, as the window shares the device tensor."""

    def __init__(self, dist, staged, host_like):
        self.dist, self.staged, self.host_like = dist, staged, host_like
        self.bufs = {}

    def _host(self, t, role):
        key = (id(t), role)
        h = self.bufs.get(key)
        if h is None:
            h = self.bufs[key] = self.host_like(t)
        return h

    def send(self, t, peer):
        self.isend(t, peer).wait()

    def recv(self, t, peer):
        self.irecv(t, peer).wait()

    def isend(self, t, peer):
        if not self.staged:
            return self.dist.isend(t, peer)
        h = self._host(t, "send")
        h.copy_(t)
        return self.dist.isend(h, peer)

    def irecv(self, t, peer):
        if not self.staged:
            return self.dist.irecv(t, peer)
        h = self._host(t, "recv")
        return _CopyBack(self.dist.irecv(h, peer), h, t)


class _CopyBack:
    """A staged receive: wait for the host receive, then copy it into the device tensor."""

    def __init__(self, work, host, dev):
        self.work, self.host, self.dev = work, host, dev

    def wait(self):
        self.work.wait()
        self.dev.copy_(self.host)
        return True


def mem_label(mem, op):
    """The mem column: point-to-point on CUDA tensors is staged through host tensors."""
    return "cuda-staged" if mem == "cuda" and op in P2P_OPS else mem


def median(v):
    s = sorted(v)
    k = len(s)
    if k == 0:
        return 0.0
    return s[k // 2] if k % 2 else 0.5 * (s[k // 2 - 1] + s[k // 2])


# ------------------------------------------------------------- worker

def worker(a, rank, world):
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", rank=rank, world_size=world)
    dev = "cpu"
    if a.mem == "cuda":
        ok = torch.cuda.is_available()
        oks = torch.tensor([1 if ok else 0])
        dist.all_reduce(oks, op=dist.ReduceOp.MIN)
        if not oks.item():
            if rank == 0:
                print("# gloo: skip (-d cuda requested but torch sees no CUDA device)")
            dist.destroy_process_group()
            return 0
        dev = f"cuda:{rank % torch.cuda.device_count()}"
        torch.cuda.set_device(dev)
    dtypes = {"int8": torch.int8, "uint8": torch.uint8, "int32": torch.int32, "int64": torch.int64,
              "float": torch.float32, "double": torch.float64}
    dt = dtypes[a.type]
    tsize = TYPE_SIZES[a.type]
    redops = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "max": dist.ReduceOp.MAX,
              "min": dist.ReduceOp.MIN}
    rop = redops[a.redop]

    def sync():
        if dev != "cpu":
            torch.cuda.synchronize()

    def inputs(r, idx):  # bench_util.h bu_input, vectorised, int64
        if a.redop == "sum":
            return (r * 3 + idx) % 5 + (idx // 3) % 4
        if a.redop == "prod":
            return torch.where((r + idx) % 16 == 0, 2, 1)
        return (r * 7 + idx * 13) % 97

    def pattern(r, idx):
        return (r * 37 + idx) % 127

    def cast(x):  # int64 -> element type, wrapping like the C reference
        if dt.is_floating_point:
            return x.to(torch.float64).to(dt)
        return x.to(dt)

    def expected(idx):
        acc = cast(inputs(0, idx))
        for r in range(1, world):
            v = cast(inputs(r, idx))
            if a.redop == "sum":
                acc = cast(acc.to(torch.int64) + v.to(torch.int64)) if not dt.is_floating_point else acc + v
            elif a.redop == "prod":
                acc = cast(acc.to(torch.int64) * v.to(torch.int64)) if not dt.is_floating_point else acc * v
            elif a.redop == "max":
                acc = torch.maximum(acc, v)
            else:
                acc = torch.minimum(acc, v)
        return acc

    sizes = sweep(parse_size(a.b), parse_size(a.e), int(parse_size(a.f)))
    maxc = max(sizes) // tsize + 1
    csv = open(a.csv, "a") if (rank == 0 and a.csv) else None
    if csv and csv.tell() == 0:
        csv.write(CSV_HEADER + "\n")
    if rank == 0:
        print(f"# gloo_bench op={a.op} backend=gloo label={a.label} nranks={world} mem={mem_label(a.mem, a.op)} type={a.type} "
              f"redop={a.redop}\n# mode={'blocking' if a.z else 'back-to-back'} (-z {a.z}) warmup={a.warmup} "
              f"iters={a.iters} check={a.check}\n# torch {torch.__version__}\n"
              f"#{'size':>11} {'count':>12} {'type':>7} {'redop':>6} {'root':>5} {'time(us)':>11} "
              f"{'algbw(GB/s)':>10} {'busbw(GB/s)':>10} {'#wrong':>8} {'med(us)':>11} {'min(us)':>11}")
    peer = 1 if rank == 0 else 0 if rank == 1 else -1
    nxt, prv = (rank + 1) % world, (rank - 1 + world) % world
    status = 0
    for nbytes in sizes:
        count, blk = counts(a.op, nbytes, tsize, world)
        if count == 0 and nbytes > 0:
            if rank == 0:
                print(f"# size {nbytes} skipped: fewer than one {a.type} per rank block")
            continue
        idx = torch.arange(count, dtype=torch.int64)
        p2p = P2P(dist, dev != "cpu", lambda t: torch.empty(t.shape, dtype=t.dtype))
        sb = torch.zeros(count, dtype=dt, device=dev)
        rb = torch.zeros(count, dtype=dt, device=dev)
        splits = [blk] * world

        def op_once(async_op=False):
            works = []
            if a.op == "pingpong":
                if rank == 0:
                    p2p.send(sb, 1)
                    p2p.recv(rb, 1)
                elif rank == 1:
                    p2p.recv(rb, 0)
                    p2p.send(sb, 0)
            elif a.op in ("bw", "bibw"):
                if peer >= 0:
                    ws = []
                    for _ in range(a.window):
                        if rank == 1 or a.op == "bibw":
                            ws.append(p2p.irecv(rb, peer))
                        if rank == 0 or a.op == "bibw":
                            ws.append(p2p.isend(sb, peer))
                    for w in ws:
                        w.wait()
                    if a.op == "bw":
                        ack = torch.zeros(1)  # a host tensor: never staged
                        (dist.send if rank == 1 else dist.recv)(ack, peer)
            elif a.op == "sendrecv":
                ws = [p2p.isend(sb, nxt), p2p.irecv(rb, prv)]
                for w in ws:
                    w.wait()
            elif a.op == "allreduce":
                rb.copy_(sb)
                works.append(dist.all_reduce(rb, op=rop, async_op=async_op))
            elif a.op == "reduce":
                rb.copy_(sb)
                works.append(dist.reduce(rb, a.root, op=rop, async_op=async_op))
            elif a.op == "bcast":
                works.append(dist.broadcast(sb, a.root, async_op=async_op))
            elif a.op == "allgather":
                works.append(dist.all_gather_into_tensor(rb, sb[:blk], async_op=async_op))
            elif a.op == "reduce_scatter":
                works.append(dist.reduce_scatter_tensor(rb[:blk], sb, op=rop, async_op=async_op))
            elif a.op == "alltoall":
                works.append(dist.all_to_all_single(rb, sb, async_op=async_op))
            elif a.op == "alltoallv":
                works.append(dist.all_to_all_single(rb, sb, splits, splits, async_op=async_op))
            return [w for w in works if w is not None]

        # fill and validate
        wrong = 0
        if a.op in REDUCES:
            sb.copy_(cast(inputs(rank, idx)))
        elif a.op == "allgather":
            sb[:blk].copy_(cast(pattern(rank, torch.arange(blk, dtype=torch.int64))))
        elif a.op == "bcast":
            sb.copy_(cast(pattern(a.root, idx)) if rank == a.root else torch.full((count,), 99, dtype=dt))
        else:
            sb.copy_(cast(pattern(rank, idx)))
        try:
            for w in op_once():
                w.wait()
        except (RuntimeError, NotImplementedError, AttributeError) as e:
            if rank == 0:
                # an operation gloo lacks is not a backend skip: compare.py goes on with the others
                print(f"# gloo: {a.op} unsupported here ({a.mem}): {str(e).splitlines()[0][:200]}")
            status = 0
            break
        sync()
        if a.inject:  # corrupt one element where the checking rank looks (tests validation)
            who = 1 if a.op in ("pingpong", "bw", "bibw") else a.root if a.op in ("bcast", "reduce") else 0
            if rank == who and count > 0:
                (sb if a.op == "bcast" else rb)[0] = cast(torch.tensor(-1))
        if a.check:
            out = rb.cpu()
            if a.op == "allreduce" or (a.op == "reduce" and rank == a.root):
                wrong = int((out != expected(idx)).sum())
            elif a.op == "reduce_scatter":
                wrong = int((out[:blk] != expected(torch.arange(rank * blk, (rank + 1) * blk))).sum())
            elif a.op == "bcast":
                wrong = int((sb.cpu() != cast(pattern(a.root, idx))).sum())
            elif a.op == "allgather":
                exp = torch.cat([cast(pattern(p, torch.arange(blk))) for p in range(world)])
                wrong = int((out != exp).sum())
            elif a.op in ("alltoall", "alltoallv"):
                exp = torch.cat([cast(pattern(p, torch.arange(rank * blk, (rank + 1) * blk)))
                                 for p in range(world)])
                wrong = int((out != exp).sum())
            elif a.op in ("pingpong", "bibw") and peer >= 0 or (a.op == "bw" and rank == 1):
                wrong = int((out != cast(pattern(peer, idx))).sum())
            elif a.op == "sendrecv":
                wrong = int((out != cast(pattern(prv, idx))).sum())
        wt = torch.tensor([wrong], dtype=torch.int64)
        dist.all_reduce(wt)
        nwrong = int(wt.item()) if a.check else -1  # -1: not checked
        for _ in range(a.warmup):
            for w in op_once():
                w.wait()
        sync()
        dist.barrier()
        times = []
        if a.z:
            for _ in range(a.iters):
                t0 = time.perf_counter()
                for w in op_once():
                    w.wait()
                sync()
                times.append(time.perf_counter() - t0)
        else:
            nb = min(a.iters, 10)
            for bi in range(nb):
                ops = a.iters // nb + (1 if bi < a.iters % nb else 0)
                t0 = time.perf_counter()
                pend = []
                for _ in range(ops):
                    pend += op_once(async_op=True)
                for w in pend:
                    w.wait()
                sync()
                dist.barrier()
                times.append((time.perf_counter() - t0) / ops)
        div = {"pingpong": 2.0, "bw": float(a.window), "bibw": float(a.window)}.get(a.op, 1.0)
        moved = nbytes_moved = count * tsize
        if a.op == "bibw":
            moved = 2 * nbytes_moved
        st = torch.tensor([sum(times) / len(times) / div, median(times) / div, min(times) / div],
                          dtype=torch.float64)
        dist.all_reduce(st, op=dist.ReduceOp.MAX)
        if rank == 0:
            mean, med, mn = st.tolist()
            f = busbw_factor(a.op, world)
            alg = moved / mean / 1e9 if mean > 0 else 0.0
            algm = moved / med / 1e9 if med > 0 else 0.0
            red = a.redop if a.op in REDUCES else "none"
            root = a.root if a.op in ("bcast", "reduce") else -1
            print(f"{nbytes_moved:12d} {count:12d} {a.type:>7} {red:>6} {root:>5} {mean * 1e6:11.2f} "
                  f"{alg:10.3f} {alg * f:10.3f} {nwrong if nwrong >= 0 else 'n/a':>8} {med * 1e6:11.2f} {mn * 1e6:11.2f}",
                  flush=True)
            if csv:
                csv.write(f"{a.label},{a.op},{world},{mem_label(a.mem, a.op)},{'blocking' if a.z else 'back-to-back'},"
                          f"{nbytes_moved},{count},{a.type},{red},{root},{mean * 1e6:.3f},{alg:.6f},{alg * f:.6f},"
                          f"{nwrong},{med * 1e6:.3f},{mn * 1e6:.3f},{algm:.6f},{algm * f:.6f}\n")
                csv.flush()
    if csv:
        csv.close()
    dist.destroy_process_group()
    return status


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--op", default="allreduce", choices=OPS)
    ap.add_argument("-b", default="8")
    ap.add_argument("-e", default="1M")
    ap.add_argument("-f", default="2")
    ap.add_argument("-d", "--mem", default="host", choices=["host", "cuda"])
    ap.add_argument("-t", "--type", default="float", choices=sorted(TYPE_SIZES))
    ap.add_argument("-p", "--redop", default="sum", choices=["sum", "prod", "max", "min"])
    ap.add_argument("-r", "--root", type=int, default=0)
    ap.add_argument("-w", "--warmup", type=int, default=5)
    ap.add_argument("-n", "--iters", type=int, default=20)
    ap.add_argument("-z", type=int, default=1, choices=[0, 1])
    ap.add_argument("-c", "--check", type=int, default=1)
    ap.add_argument("-W", "--window", type=int, default=64)
    ap.add_argument("-L", "--label", default="gloo")
    ap.add_argument("--csv")
    ap.add_argument("--inject-error", dest="inject", action="store_true",
                    help="corrupt one output element per size (tests the validation)")
    ap.add_argument("--np", type=int, default=2, help="ranks to spawn when not under torchrun")
    a = ap.parse_args(argv)
    try:
        import torch  # noqa: F401
        import torch.distributed as dist
        if not dist.is_available() or not dist.is_gloo_available():
            raise ImportError("torch.distributed without gloo")
    except ImportError as e:
        print(f"# gloo: skip (torch not available: {e})")
        return 0
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return worker(a, int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
    # spawn --np copies of this script as ranks
    port = str(free_port())
    procs = []
    for r in range(a.np):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(a.np), LOCAL_RANK=str(r),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=port, NCCL_NVLS_ENABLE="0")
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__)] + (argv or sys.argv[1:]), env=env))
    rc = 0
    for p in procs:
        rc = p.wait() or rc
    return rc


if __name__ == "__main__":
    sys.exit(main())
