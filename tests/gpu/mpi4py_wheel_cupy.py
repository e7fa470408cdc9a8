"""mpi4py's binary wheel on gpumpi's libmpi.so.12 with CuPy device arrays (GPU machine only).

    python -m venv V && V/bin/pip install --only-binary=:all: mpi4py==4.1.2 cupy-cuda12x
    LD_LIBRARY_PATH=PREFIX/lib PREFIX/bin/mpirun -n 2 V/bin/python tests/gpu/mpi4py_wheel_cupy.py

Checks that the wheel took its MPICH variant on gpumpi, that MPIX_Query_cuda_support() answers 1
through libmpi.so.12, and that Allreduce, Bcast, Sendrecv and Alltoall on device arrays (passed
through __cuda_array_interface__, no host copies) give the right values at several sizes; prints
"PASS mpi4py_wheel_cupy" on rank 0, or "SKIP mpi4py_wheel_cupy: <why>" without CuPy or a GPU.
"""
import ctypes
import sys

from mpi4py import MPI
import mpi4py._mpiabi as abi

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()


def say(msg):
    if rank == 0:
        print(msg, flush=True)


try:
    import cupy as cp

    ndev = cp.cuda.runtime.getDeviceCount()
except Exception as e:  # no CuPy, no driver, no device
    say(f"SKIP mpi4py_wheel_cupy: {type(e).__name__}: {e}")
    sys.exit(0)
if ndev == 0:
    say("SKIP mpi4py_wheel_cupy: no CUDA device")
    sys.exit(0)
cp.cuda.Device(rank % ndev).use()

assert abi._get_mpiabi() == "mpich", abi._get_mpiabi()
assert MPI.Get_library_version().startswith("gpumpi"), MPI.Get_library_version()
lib = ctypes.CDLL("libmpi.so.12")
assert lib.MPIX_Query_cuda_support() == 1, "MPIX_Query_cuda_support() != 1 through libmpi.so.12"

for n in (1, 2, 1000, 1 << 20, 16 << 20):
    x = cp.full(n, rank + 1, dtype=cp.float32)
    y = cp.zeros(n, dtype=cp.float32)
    cp.cuda.get_current_stream().synchronize()
    comm.Allreduce(x, y, op=MPI.SUM)
    want = size * (size + 1) / 2
    assert bool((y == want).all()), f"Allreduce n={n}: {y[:4]} != {want}"
    z = cp.arange(n, dtype=cp.float64) if rank == 0 else cp.zeros(n, dtype=cp.float64)
    cp.cuda.get_current_stream().synchronize()
    comm.Bcast(z, root=0)
    assert bool((z == cp.arange(n, dtype=cp.float64)).all()), f"Bcast n={n}"
    s = cp.full(n, rank, dtype=cp.int32)
    r = cp.full(n, -1, dtype=cp.int32)
    cp.cuda.get_current_stream().synchronize()
    comm.Sendrecv(s, dest=(rank + 1) % size, recvbuf=r, source=(rank - 1) % size)
    assert bool((r == (rank - 1) % size).all()), f"Sendrecv n={n}"
    m = max(1, n // size)
    a = cp.repeat(cp.arange(size, dtype=cp.int32) + 100 * rank, m)
    b = cp.zeros(m * size, dtype=cp.int32)
    cp.cuda.get_current_stream().synchronize()
    comm.Alltoall(a, b)
    want_b = cp.repeat(cp.arange(size, dtype=cp.int32) * 100 + rank, m)
    assert bool((b == want_b).all()), f"Alltoall n={n}"
comm.Barrier()
say(f"PASS mpi4py_wheel_cupy ({size} ranks, {ndev} GPUs)")
