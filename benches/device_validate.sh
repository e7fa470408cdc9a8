#!/bin/bash
# GPU validation of the harness on a machine with 2+ GPUs, NCCL and torch
# (e.g. the device machine: python3 there holds torch and nvidia-nccl):
#     OUT=/some/dir benches/device_validate.sh MPI_PREFIX
# MPI_PREFIX: an MPI install (bin/mpicc, bin/mpiexec): gpumpi, or a copy of the
# PyPI mpich prefix carried along.  Runs every op with -B nccl, an injected
# error, firstcall, -d cuda through the MPI, gloo_bench on host and CUDA
# tensors, and compare.py (mpich,nccl,gloo).  At most 8 files land in $OUT.
# NVLink multicast stays off.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
P=$(cd "${1:?usage: device_validate.sh MPI_PREFIX}" && pwd)
B=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUT=${OUT:-$(mktemp -d)}
exec > >(tee $OUT/device.log) 2>&1
date -u; nvidia-smi -L; uptime
echo "== MPI on the image"; which mpicc mpirun mpiexec ompi_info 2>&1; ls /opt 2>&1
python3 -c "import mpi4py; print(mpi4py.get_config())" 2>&1 | tail -2
NCCL_LIB=$(python3 -c "import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],'lib'))" 2>/dev/null)
echo "NCCL_LIB=$NCCL_LIB"; ls $NCCL_LIB
CUDART=$(python3 - <<'P'
import glob,os,site
c=[p for d in site.getsitepackages() for p in glob.glob(d+'/nvidia/**/libcudart.so*', recursive=True)]
c+=glob.glob('/usr/local/cuda/lib64/libcudart.so*')
print(os.path.dirname(c[0]) if c else '')
P
)
echo "CUDART=$CUDART"; ls $CUDART | head
export LD_LIBRARY_PATH=$NCCL_LIB:$CUDART:$LD_LIBRARY_PATH
$P/bin/mpicc -std=c99 -O2 -Wall -I $B -o /tmp/gb $B/gpumpi-bench.c -ldl -lm || exit 1
M="$P/bin/mpiexec -n 2"
echo "== nccl ops"
for op in pingpong bw bibw sendrecv allreduce reduce alltoall alltoallv bcast allgather reduce_scatter; do
  timeout 60 $M /tmp/gb -B nccl -o $op -b 8 -e 64M -f 8 -w 5 -n 20 -t float --csv $OUT/nccl.csv | grep -v '^# [tma]'
done
timeout 60 $M /tmp/gb -B nccl -o allreduce -b 1M -e 1M -n 5 -t int8 -p max --inject-error | tail -1
timeout 60 $M /tmp/gb -B nccl -o allreduce -b 8 -e 256M -f 4 -z 0 -n 50 -t double -p prod | grep -v '^# [tma]'
timeout 60 $M /tmp/gb -B nccl -o firstcall
echo "== nccl 1 rank"; timeout 60 $P/bin/mpiexec -n 1 /tmp/gb -B nccl -o alltoall -b 1K -e 1M -f 32
echo "== MPI -d cuda (fails unless the MPI is CUDA-aware; PyPI mpich is not)"
timeout 60 $M /tmp/gb -d cuda -o allreduce -b 8 -e 64K -f 64 2>&1 | tail -5
timeout 60 $M /tmp/gb -d cuda -o firstcall 2>&1 | tail -8
echo "== gloo"
for mem in host cuda; do for op in pingpong allreduce alltoall bcast allgather reduce_scatter sendrecv; do
  timeout 120 python3 $B/gloo_bench.py --np 2 -d $mem -o $op -b 8 -e 4M -f 16 -n 10 -w 2 --csv $OUT/gloo.csv 2>&1 | grep -v '^# [mt]' | grep -v Warning
done; done
echo "== compare"
MPICH_PREFIX=$P timeout 300 python3 $B/compare.py --backends mpich,nccl,gloo --ops pingpong,allreduce,alltoall -e 16M -f 4 -o /tmp/cmp > /dev/null 2>&1; echo "compare rc=$?"
cat /tmp/cmp/tables.txt; cp /tmp/cmp/*.png /tmp/cmp/tables.txt /tmp/cmp/results.csv $OUT/; ls $OUT; tail -5 /tmp/cmp/runs.log
date -u
