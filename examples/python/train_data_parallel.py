#!/usr/bin/env python3
"""Horovod-style data-parallel training on CUDA tensors through MPI (gpumpi), beside PyTorch DDP.

Every rank trains the same model on its own batches; after each backward pass the gradients are
averaged over the ranks, so the replicas stay identical.

Modes (--mode):
  mpi    mpi4py over gpumpi: the initial parameters are broadcast from rank 0 (MPI_Bcast on
         device memory); the gradients live in fused flat device buffers ("buckets", filled in
         the order backward produces them), each averaged with one MPI_Allreduce on device
         memory. Tensors reach MPI through __cuda_array_interface__: no host copies.
         --overlap starts each bucket's allreduce from a communication thread as soon as
         backward has produced all of its gradients (MPI_THREAD_SERIALIZED: only that thread
         calls MPI while backward runs).
  ddp    torch.nn.parallel.DistributedDataParallel over NCCL, the same model, data, buckets and
         optimizer (the reference; ranks from the launcher's OMPI_COMM_WORLD_* variables).

Both modes start from rank 0's initial parameters (mpi: the broadcast; ddp: DDP's own), draw
the same batches (seeded by step and rank) and average gradients the same way, so their losses
agree step by step up to the rounding of the sums. After training every rank compares a
checksum of its parameters with rank 0's (the replicas must be identical), and the step time
without communication is measured on the same model, for the communication's share of a step.

Run (gpumpi's mpirun sets LOCAL_RANK, OMPI_COMM_WORLD_* for picking the GPU):
  mpirun -n 2 python3 examples/python/train_data_parallel.py --mode mpi --out mpi.json
  mpirun -n 2 python3 examples/python/train_data_parallel.py --mode ddp --out ddp.json
  python3 examples/python/train_data_parallel.py --compare mpi.json ddp.json
"""

import argparse
import json
import os
import queue
import statistics
import sys
import threading
import time


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mode", choices=["mpi", "ddp"], default="mpi")
    p.add_argument("--overlap", action="store_true", help="mpi: allreduce buckets during backward")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5, help="steps left out of the timing")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--width", type=int, default=4096, help="hidden layer width")
    p.add_argument("--layers", type=int, default=4, help="hidden layers")
    p.add_argument("--bucket-mb", type=float, default=25.0, help="bucket size (DDP's default: 25)")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--out", help="rank 0 writes losses and timings here (JSON)")
    p.add_argument("--compare", nargs=2, metavar=("A", "B"), help="compare two --out files")
    p.add_argument("--rtol", type=float, default=1e-3, help="--compare: relative loss tolerance")
    return p.parse_args()


def compare(a_path, b_path, rtol):
    """Exit status 0 when the two runs' losses agree step by step within rtol."""
    a, b = (json.load(open(p)) for p in (a_path, b_path))
    if len(a["losses"]) != len(b["losses"]):
        print(f"compare: {len(a['losses'])} vs {len(b['losses'])} steps")
        return 1
    worst = 0.0
    for i, (x, y) in enumerate(zip(a["losses"], b["losses"])):
        rel = abs(x - y) / max(abs(x), abs(y), 1e-12)
        worst = max(worst, rel)
        if rel > rtol:
            print(f"compare: step {i}: loss {x!r} ({a['mode']}) vs {y!r} ({b['mode']}), rel {rel:.2e}")
            return 1
    print(f"compare: {len(a['losses'])} steps agree (largest relative difference {worst:.2e})")
    for r in (a, b):
        print(
            f"  {r['label']:>12}: step {r['step_ms']:.3f} ms, without communication "
            f"{r['compute_ms']:.3f} ms, communication share {r['comm_share']:.1%}"
        )
    return 0


def rank_and_size():
    for r, s in (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE"),
                 ("RANK", "WORLD_SIZE")):
        if r in os.environ and s in os.environ:
            return int(os.environ[r]), int(os.environ[s])
    return 0, 1


def build_model(torch, args, device):
    layers, w = [], args.width
    dims = [1024] + [w] * args.layers + [1024]
    for i in range(len(dims) - 1):
        layers.append(torch.nn.Linear(dims[i], dims[i + 1]))
        if i + 2 < len(dims):
            layers.append(torch.nn.GELU())
    return torch.nn.Sequential(*layers).to(device)


def batch(torch, args, step, rank, device, target):
    g = torch.Generator(device=device)
    g.manual_seed(1000003 * step + rank)
    x = torch.randn(args.batch, 1024, device=device, generator=g)
    return x, torch.tanh(target(x))


class Buckets:
    """Gradients as views of fused flat device buffers, in the order backward produces them
    (the reverse of the parameters' order), each buffer at most `cap` bytes."""

    def __init__(self, torch, params, cap):
        self.groups, cur, size = [], [], 0
        for p in reversed(params):
            n = p.numel() * p.element_size()
            if cur and size + n > cap:
                self.groups.append(cur)
                cur, size = [], 0
            cur.append(p)
            size += n
        if cur:
            self.groups.append(cur)
        self.flat = []
        self.bucket_of = {}
        for b, group in enumerate(self.groups):
            flat = torch.zeros(sum(p.numel() for p in group), device=group[0].device,
                               dtype=group[0].dtype)
            off = 0
            for p in group:
                # Backward accumulates into the existing .grad in place: into the bucket.
                p.grad = flat[off:off + p.numel()].view_as(p)
                off += p.numel()
                self.bucket_of[p] = b
            self.flat.append(flat)

    def zero(self):
        for f in self.flat:
            f.zero_()


def train_mpi(args, torch, rank, size, device):
    import mpi4py

    mpi4py.rc.thread_level = "serialized"
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    assert comm.Get_rank() == rank and comm.Get_size() == size, "launcher and MPI disagree"
    torch.manual_seed(1 + rank)  # different on every rank: the broadcast makes them equal
    model = build_model(torch, args, device)
    params = [p for p in model.parameters()]
    torch.cuda.synchronize()
    for p in params:
        comm.Bcast(p.data, root=0)
    buckets = Buckets(torch, params, int(args.bucket_mb * 2**20))
    opt = torch.optim.SGD(params, lr=args.lr, momentum=0.9)

    def allreduce(flat):
        comm.Allreduce(MPI.IN_PLACE, flat, op=MPI.SUM)

    todo, done = queue.Queue(), queue.Queue()
    left = {}  # per bucket: gradients backward has still to produce in this step
    comm_on = [True]  # off while the step time without communication is measured
    if args.overlap:

        def worker():
            # The current CUDA device is per thread: this thread's must be the rank's.
            torch.cuda.set_device(device)
            while True:
                item = todo.get()
                if item is None:
                    return
                b, ev = item
                try:
                    ev.synchronize()  # the bucket's gradients are complete on the device
                    allreduce(buckets.flat[b])
                    done.put(None)
                except BaseException as e:  # handed to the training thread, which aborts
                    done.put(e)

        threading.Thread(target=worker, daemon=True).start()

        def hook(p):
            if not comm_on[0]:
                return
            b = buckets.bucket_of[p]
            left[b] -= 1
            if left[b] == 0:
                ev = torch.cuda.Event()
                ev.record()
                todo.put((b, ev))

        for p in params:
            p.register_post_accumulate_grad_hook(hook)

    def step_fn(s, communicate=True):
        x, y = batch(torch, args, s, rank, device, target)
        buckets.zero()
        comm_on[0] = communicate
        left.clear()
        left.update({b: len(g) for b, g in enumerate(buckets.groups)})
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        t_comm = 0.0
        if communicate:
            if args.overlap:
                for _ in buckets.groups:
                    err = done.get()
                    if err is not None:
                        print(f"rank {rank}: allreduce of a bucket failed: {err!r}", flush=True)
                        comm.Abort(1)
            else:
                torch.cuda.current_stream().synchronize()
                t0 = time.perf_counter()
                for f in buckets.flat:
                    allreduce(f)
                t_comm = time.perf_counter() - t0
            for f in buckets.flat:
                f.div_(size)
        opt.step()
        return loss, t_comm

    losses, times, comms = run_steps(torch, args, step_fn)
    sums = comm.allgather(checksum(torch, params))
    compute = time_without_comm(torch, args, step_fn)
    if args.overlap:
        todo.put(None)
    return losses, times, comms, compute, sums, f"mpi{'+overlap' if args.overlap else ''}"


def train_ddp(args, torch, rank, size, device):
    import torch.distributed as dist

    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    port = int(os.environ.get("TRAIN_DDP_PORT", "29531"))
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=size)
    torch.manual_seed(1 + rank)  # DDP broadcasts rank 0's parameters at construction
    inner = build_model(torch, args, device)
    model = torch.nn.parallel.DistributedDataParallel(
        inner, device_ids=[device.index], bucket_cap_mb=args.bucket_mb,
        gradient_as_bucket_view=True)
    params = [p for p in inner.parameters()]
    opt = torch.optim.SGD(params, lr=args.lr, momentum=0.9)

    def step_fn(s, communicate=True):
        x, y = batch(torch, args, s, rank, device, target)
        opt.zero_grad(set_to_none=False)
        if communicate:
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
        else:
            with model.no_sync():
                loss = torch.nn.functional.mse_loss(model(x), y)
                loss.backward()
        opt.step()
        return loss, 0.0

    losses, times, comms = run_steps(torch, args, step_fn)
    sums = [None] * size
    dist.all_gather_object(sums, checksum(torch, params))
    compute = time_without_comm(torch, args, step_fn)
    dist.destroy_process_group()
    return losses, times, comms, compute, sums, "ddp-nccl"


def run_steps(torch, args, step_fn):
    losses, times, comms = [], [], []
    for s in range(args.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss, t_comm = step_fn(s)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        losses.append(loss.item())
        if s >= args.warmup:
            times.append(dt)
            comms.append(t_comm)
    return losses, times, comms


def time_without_comm(torch, args, step_fn):
    """The median step time of the same model without communication (after training: the
    replicas drift apart from here on, which nothing reads)."""
    t = []
    for s in range(args.warmup + 10):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step_fn(10_000 + s, communicate=False)
        torch.cuda.synchronize()
        if s >= args.warmup:
            t.append(time.perf_counter() - t0)
    return statistics.median(t)


def checksum(torch, params):
    with torch.no_grad():
        return float(sum(p.double().sum().item() for p in params))


target = None


def main():
    global target
    args = parse()
    if args.compare:
        sys.exit(compare(*args.compare, args.rtol))
    import torch

    rank, size = rank_and_size()
    local = int(os.environ.get("LOCAL_RANK", os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", rank)))
    device = torch.device("cuda", local % torch.cuda.device_count())
    torch.cuda.set_device(device)
    torch.backends.cuda.matmul.allow_tf32 = False  # the two modes' losses compared closely
    # The regression target: a fixed random linear map, the same on every rank and mode.
    g = torch.Generator(device=device)
    g.manual_seed(7)
    w = torch.randn(1024, 1024, device=device, generator=g) / 32
    target = lambda x: x @ w  # noqa: E731
    train = train_mpi if args.mode == "mpi" else train_ddp
    losses, times, comms, compute, sums, label = train(args, torch, rank, size, device)
    if rank != 0:
        return
    same = all(s == sums[0] for s in sums)
    step = statistics.median(times)
    res = {
        "mode": args.mode,
        "label": label,
        "ranks": size,
        "losses": losses,
        "step_ms": step * 1e3,
        "compute_ms": compute * 1e3,
        "comm_share": max(0.0, 1 - compute / step),
        "comm_ms_blocking": statistics.median(comms) * 1e3 if comms else 0.0,
        "replicas_identical": same,
    }
    print(
        f"{label}: ranks={size} steps={args.steps} loss {losses[0]:.6f} -> {losses[-1]:.6f} "
        f"step {res['step_ms']:.3f} ms (median), without communication {res['compute_ms']:.3f} ms, "
        f"communication share {res['comm_share']:.1%}, replicas identical: {same}"
    )
    if args.out:
        json.dump(res, open(args.out, "w"))
    if not same:
        print(f"{label}: parameter checksums differ across ranks: {sums}")
        sys.exit(1)


if __name__ == "__main__":
    main()
