#!/bin/bash
# s19f: the final merged tree (lead + g19 + e19 + h19 + s19): unit gpu::, the GPU suite (45
# runs, with gpu_stream), gpu_stream bench beside NCCL back-to-back on one node.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee $OUT/s19f.log) 2>&1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
N=$PWD/build/new
nvidia-smi -L; date -u
NCCL_LIB=$(python3 -c "import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=${NCCL_LIB}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export GPUMPI_TEST_CUDART=/usr/local/cuda/lib64/libcudart.so
mkdir -p /work target/tmp && ln -sfn $PWD /work/main
echo "== unit gpu::"; timeout 90 build/unit/lib-tests gpu:: --test-threads=1 2>&1 | grep -E "test result|FAILED|panicked" | head
echo "== gpu suite"; GPU_TEST_TIMEOUT=60 GPU_TEST_BUILD=/tmp/gt timeout 400 bash tests/gpu/run.sh $N > $OUT/runsh.log 2>&1; echo "rc=$?"; grep -E "FAIL|^gpu:|stream" $OUT/runsh.log | tail -20
date -u
if [ -x /tmp/gt/gpu_stream ]; then
  echo "== gpu_stream bench -n 2"; timeout 120 $N/bin/mpirun -n 2 /tmp/gt/gpu_stream bench 2>&1 | tail -30
fi
$N/bin/mpicc -std=c99 -O2 -o /tmp/gbn benches/gpumpi-bench.c -ldl -lm
echo "== NCCL back-to-back (-z 0) and blocking (-z 1), one node"
for z in 0 1; do timeout 120 $N/bin/mpirun -n 2 /tmp/gbn -B nccl -d cuda -z $z -o allreduce -b 8 -e 64M -f 8 -w 20 -n 200 2>&1 | grep -v '^#' | awk -v z=$z '{printf "%s:%s ", $1, $6} END {print " (nccl z=" z ")"}'; done
echo "== gpumpi blocking, one node"; timeout 120 $N/bin/mpirun -n 2 /tmp/gbn -d cuda -z 1 -o allreduce -b 8 -e 64M -f 8 -w 20 -n 200 2>&1 | grep -v '^#' | awk '{printf "%s:%s ", $1, $6} END {print ""}'
date -u
