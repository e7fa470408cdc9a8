#!/bin/bash
# s22d: the merged main (build/f, unit tests build/funit) on 4x H100: unit gpu::, the GPU suite, then the helpers'
# final benches against main at session start (build/main): dp16 (device ping-pong, wide pulls), ek24 (the new
# stream kernels beside NCCL -z0), each under its own time limit. The two helper scripts (build/fsrc/*-final.sh) were
# not kept; their outputs (dp16-final.txt, ek24-final.txt) name the commands: gpumpi-bench -d cuda -o pingpong
# -b 1 -e 4M -f 2 -w 100 -n 1000 (and with GPUMPI_GPU_P2P_PUSH=off, GPUMPI_GPU_PULL_WIDE_MAX=16m / 0), and
# gpu_stream bench per op at 4 ranks beside gpumpi-bench -B nccl -d cuda -z 0 -o <op>.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
F=$PWD/build/f
{ nvidia-smi -L | head -1; date -u; uptime; } | tee $OUT/s22d.log
export GPUMPI_TEST_CUDART=/usr/local/cuda/lib64/libcudart.so
mkdir -p /work target/tmp && ln -sfn $PWD /work/main
echo "== unit gpu::" | tee -a $OUT/s22d.log
LD_LIBRARY_PATH=/usr/local/cuda/lib64 timeout 100 build/funit/lib-tests gpu:: --test-threads=1 2>&1 | grep -E "test result|FAILED|panicked" | head | tee -a $OUT/s22d.log
echo "== gpu suite" | tee -a $OUT/s22d.log
GPU_TEST_TIMEOUT=60 GPU_TEST_BUILD=/tmp/gt timeout ${SUITE_LIMIT:-390} bash tests/gpu/run.sh $F > $OUT/runsh-s22d.log 2>&1; echo "rc=$?" | tee -a $OUT/s22d.log
grep -E "^FAILED|^gpu:" $OUT/runsh-s22d.log | tail -12 | tee -a $OUT/s22d.log
date -u | tee -a $OUT/s22d.log
for N in dp16 ek24; do
  [ -f build/fsrc/$N-final.sh ] || continue
  echo "=== $N final $(date -u +%T)" | tee -a $OUT/s22d.log
  SRC=$PWD BASE=$PWD/build/main timeout ${BENCH_LIMIT:-80} bash build/fsrc/$N-final.sh $F > $OUT/$N-final.txt 2>&1
  echo "rc=$?" | tee -a $OUT/s22d.log
done
date -u | tee -a $OUT/s22d.log
echo "== gpu_mismatch -n 4, GPUMPI_CUDA_IPC=0, 10 runs" | tee -a $OUT/s22d.log
ok=0; for i in $(seq 10); do GPUMPI_CUDA_IPC=0 timeout 40 $F/bin/mpirun -n 4 --oversubscribe --timeout 30 -x GPUMPI_CUDA_IPC /tmp/gt/gpu_mismatch > /dev/null 2>&1 && ok=$((ok+1)); done
echo "gpu_mismatch IPC off: $ok of 10 passed" | tee -a $OUT/s22d.log; date -u | tee -a $OUT/s22d.log
