#!/bin/bash
# s19e: the merged tree across 2 emulated nodes beside Open MPI (tcp btl) and NCCL's socket
# transport (benches/emunodes_bench.sh, one round), then 2 x 2 ranks host allreduce.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee $OUT/s19e.log) 2>&1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
N=$PWD/build/new
nvidia-smi -L; date -u
ROUNDS=1 timeout 480 bash benches/emunodes_bench.sh $N
date -u
