#!/bin/bash
# s22a: main at session start (75727ed; build/main, unit tests build/mainunit) on 4x H100: unit gpu::, the GPU suite.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
F=$PWD/build/main
{ nvidia-smi -L | head -1; date -u; uptime; } | tee $OUT/s22a.log
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export GPUMPI_TEST_CUDART=/usr/local/cuda/lib64/libcudart.so
mkdir -p /work target/tmp && ln -sfn $PWD /work/main
echo "== unit gpu::" | tee -a $OUT/s22a.log
timeout 120 build/mainunit/lib-tests gpu:: --test-threads=1 2>&1 | grep -E "test result|FAILED|panicked" | head | tee -a $OUT/s22a.log
echo "== gpu suite" | tee -a $OUT/s22a.log
GPU_TEST_TIMEOUT=60 GPU_TEST_BUILD=/tmp/gt timeout 420 bash tests/gpu/run.sh $F > $OUT/runsh-s22a.log 2>&1; echo "rc=$?" | tee -a $OUT/s22a.log
grep -E "^FAILED|^gpu:|passed|failed" $OUT/runsh-s22a.log | tail -8 | tee -a $OUT/s22a.log
date -u | tee -a $OUT/s22a.log
