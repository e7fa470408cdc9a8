#!/usr/bin/env python3
"""Where the time of a small device-buffer MPI call from Python goes (mpi4py over gpumpi).

Times, per call (median of rounds, microseconds), on every rank at once:
  host          comm.Allreduce on 2-element NumPy arrays (mpi4py's own cost on host memory)
  cupy          comm.Allreduce(x[:2], y[:2]) on CuPy float32 arrays (the usual way)
  cupy-whole    the same on whole 2-element CuPy arrays (no slicing per call)
  torch         the same on torch CUDA tensors
  fromaddress   [MPI.buffer.fromaddress(ptr, 8), MPI.FLOAT] built once and reused: no array
                protocol per call (the C cost plus mpi4py's call)
  cai-only      reading x.__cuda_array_interface__ alone (CuPy), no MPI call
  dlpack-only   x.__dlpack__() alone (CuPy), no MPI call
  slice-only    x[:2] alone (CuPy), no MPI call
Run: mpirun -n 2 python3 benches/py_overhead.py [calls]
"""

import statistics
import sys
import time

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
calls = int(sys.argv[1]) if len(sys.argv) > 1 else 2000


def timed(label, fn, rounds=5):
    """Median over rounds of the per-call time of `calls` calls of fn (every rank together)."""
    for _ in range(100):
        fn()
    per = []
    for _ in range(rounds):
        comm.Barrier()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        per.append((time.perf_counter() - t0) / calls * 1e6)
    if rank == 0:
        print(f"{label:>12} {statistics.median(per):8.2f} us  (rounds: "
              + " ".join(f"{p:.2f}" for p in per) + ")", flush=True)


def main():
    import numpy as np

    hx, hy = np.ones(2, np.float32), np.zeros(2, np.float32)
    timed("host", lambda: comm.Allreduce(hx, hy, op=MPI.SUM))
    try:
        import cupy as cp
    except ImportError:
        cp = None
    if cp is not None:
        cp.cuda.Device(rank % cp.cuda.runtime.getDeviceCount()).use()
        x, y = cp.ones(1024, cp.float32), cp.zeros(1024, cp.float32)
        cp.cuda.get_current_stream().synchronize()
        timed("cupy", lambda: comm.Allreduce(x[:2], y[:2], op=MPI.SUM))
        x2, y2 = x[:2], y[:2]
        timed("cupy-whole", lambda: comm.Allreduce(x2, y2, op=MPI.SUM))
        sb = [MPI.buffer.fromaddress(x.data.ptr, 8), MPI.FLOAT]
        rb = [MPI.buffer.fromaddress(y.data.ptr, 8), MPI.FLOAT]
        timed("fromaddress", lambda: comm.Allreduce(sb, rb, op=MPI.SUM))
        assert float(y[0]) == comm.Get_size(), "fromaddress allreduce result"
        timed("cai-only", lambda: x2.__cuda_array_interface__)
        timed("dlpack-only", lambda: x2.__dlpack__())
        timed("slice-only", lambda: x[:2])
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available():
        dev = torch.device("cuda", rank % torch.cuda.device_count())
        tx, ty = torch.ones(2, device=dev), torch.zeros(2, device=dev)
        torch.cuda.synchronize()
        timed("torch", lambda: comm.Allreduce(tx, ty, op=MPI.SUM))
        assert float(ty[0]) == comm.Get_size(), "torch allreduce result"


if __name__ == "__main__":
    main()
