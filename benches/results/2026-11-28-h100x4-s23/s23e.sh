#!/bin/bash
# s23e: the merged main (build/f, unit tests build/funit) on 4x H100: unit gpu::, the GPU suite (tests/gpu/run.sh),
# then dx20's script (device collective steps between emulated nodes over the ib double) against build/f, main at
# session start (3defbc3, build/main) as its base.
set -u
R=$(cd "$(dirname "$0")/../../.." && pwd); cd $R
bash benches/results/2026-11-28-h100x4-s23/unpack.sh > /dev/null
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
F=$R/build/f
{ nvidia-smi -L | head -1; date -u; uptime; } | tee $OUT/s23e.log
export GPUMPI_TEST_CUDART=/usr/local/cuda/lib64/libcudart.so
mkdir -p /work target/tmp && ln -sfn $R /work/main
echo "== unit gpu::" | tee -a $OUT/s23e.log
LD_LIBRARY_PATH=/usr/local/cuda/lib64 timeout 100 build/funit/lib-tests gpu:: --test-threads=1 2>&1 | grep -E "test result|FAILED|panicked" | head | tee -a $OUT/s23e.log
echo "== gpu suite" | tee -a $OUT/s23e.log
GPU_TEST_TIMEOUT=60 GPU_TEST_BUILD=/tmp/gt timeout ${SUITE_LIMIT:-400} bash tests/gpu/run.sh $F > $OUT/runsh-s23e.log 2>&1; echo "rc=$?" | tee -a $OUT/s23e.log
grep -E "^FAILED|^gpu:" $OUT/runsh-s23e.log | tail -12 | tee -a $OUT/s23e.log
date -u | tee -a $OUT/s23e.log
if [ -f build/fsrc/dx20-gpu.sh ]; then
  echo "=== dx20 $(date -u +%T)" | tee -a $OUT/s23e.log
  (cd build/fsrc && timeout ${DX_LIMIT:-120} bash ./dx20-gpu.sh $F) > $OUT/dx20-final.txt 2>&1; echo "rc=$?" | tee -a $OUT/s23e.log
  grep -E "^==|PASS|FAIL|^exit" $OUT/dx20-final.txt | tee -a $OUT/s23e.log
fi
date -u | tee -a $OUT/s23e.log
