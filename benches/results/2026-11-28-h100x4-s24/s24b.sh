#!/bin/bash
# s24b: an install (build/$BUILD, sources build/${BUILD}src, unit binary build/${BUILD}unit) on
# 4x H100: unit gpu::, the whole GPU suite (tests/gpu/run.sh), then `gpu_net coll` timings over
# the ib double with device steps (auto) and staged (GPUMPI_COLL_DEVICE=0), 4 ranks on 2
# emulated nodes, rounds alternating.
set -u
R=$(cd "$(dirname "$0")/../../.." && pwd); cd $R
for f in build/pack/*.txz; do tar xJf $f -C build; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
N=${BUILD:-dx25}; F=$R/build/$N; SRC=$R/build/${N}src
{ nvidia-smi -L | head -1; date -u; uptime; } | tee $OUT/s24b.log
export GPUMPI_TEST_CUDART=/usr/local/cuda/lib64/libcudart.so
mkdir -p /work target/tmp && ln -sfn $R /work/main 2>/dev/null
if [ -x build/${N}unit/lib-tests ]; then
  echo "== unit gpu::" | tee -a $OUT/s24b.log
  LD_LIBRARY_PATH=/usr/local/cuda/lib64 timeout 100 build/${N}unit/lib-tests gpu:: --test-threads=1 2>&1 | grep -E "test result|FAILED|panicked" | head | tee -a $OUT/s24b.log
fi
echo "== gpu suite $(date -u +%T)" | tee -a $OUT/s24b.log
(cd $SRC && GPU_TEST_TIMEOUT=60 GPU_TEST_BUILD=/tmp/gt timeout ${SUITE_LIMIT:-430} bash tests/gpu/run.sh $F) > $OUT/runsh-$N.log 2>&1; echo "rc=$?" | tee -a $OUT/s24b.log
grep -E "^FAILED|^gpu:" $OUT/runsh-$N.log | tail -12 | tee -a $OUT/s24b.log
grep -E "cross-rail|pxn: rank" $OUT/runsh-$N.log | head -8 | tee -a $OUT/s24b.log
if [ "${BENCH:-1}" = 1 ]; then
  cc -shared -fPIC -O1 -o /tmp/gt/libfib.so $SRC/tests/support/fake_ibverbs.c -ldl
  for round in 1 2; do for dev in auto 0; do
    fab=/dev/shm/s24b-$round-$dev; rm -f $fab
    echo "== coll bench round $round GPUMPI_COLL_DEVICE=$dev $(date -u +%T)" | tee -a $OUT/s24b.log
    GPUMPI_COLL_DEVICE=$dev GPUMPI_NET=ib GPUMPI_IBVERBS_LIB=/tmp/gt/libfib.so FAKEIBV_FABRIC=$fab timeout 60 \
      $F/bin/mpirun -n 4 --oversubscribe --timeout 55 -x GPUMPI_COLL_DEVICE -x GPUMPI_NET -x GPUMPI_IBVERBS_LIB -x FAKEIBV_FABRIC \
      $SRC/scripts/emulate-nodes.sh 2 /tmp/gt/gpu_net coll 4194304 5 2>&1 | grep -E "^coll|PASS|FAIL" | tee -a $OUT/s24b.log
    rm -f $fab
  done; done
fi
date -u | tee -a $OUT/s24b.log
