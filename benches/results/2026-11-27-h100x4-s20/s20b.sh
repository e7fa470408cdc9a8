#!/bin/bash
# s20b: main at session start (b6a6e10) on 4x H100: unit gpu::, the GPU suite (its emulated-node runs
# at 4 ranks are 2 nodes x 2 ranks with a GPU each), mid-size blocking collectives at 2 and 4 ranks
# beside NCCL (-z 1), the stream-ordered fallback beside NCCL back-to-back (-z 0) at 4 ranks.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee $OUT/s20b.log) 2>&1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
N=$PWD/build/new
nvidia-smi -L; nvidia-smi topo -m | head -8; date -u
NCCL_LIB=$(python3 -c "import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=${NCCL_LIB}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export GPUMPI_TEST_CUDART=/usr/local/cuda/lib64/libcudart.so
mkdir -p /work target/tmp && ln -sfn $PWD /work/main
echo "== unit gpu::"; timeout 90 build/unit/lib-tests gpu:: --test-threads=1 2>&1 | grep -E "test result|FAILED|panicked" | head
echo "== gpu suite"; GPU_TEST_TIMEOUT=60 GPU_TEST_BUILD=/tmp/gt timeout 420 bash tests/gpu/run.sh $N > $OUT/runsh.log 2>&1; echo "rc=$?"; grep -E "FAIL|^gpu:" $OUT/runsh.log | tail -20
date -u
$N/bin/mpicc -std=c99 -O2 -o /tmp/gbn benches/gpumpi-bench.c -ldl -lm
P() { awk '!/^#/ {printf "%s:%s%s ", $1, $6, ($9>0?"!WRONG":"")} END {print ""}'; }
for n in 2 4; do
  for op in allreduce alltoall allgather; do
    for r in 1 2; do
      echo "n=$n $op gpumpi: $(timeout 60 $N/bin/mpirun -n $n /tmp/gbn -d cuda -z 1 -o $op -b 8 -e 4M -f 4 -w 50 -n 500 2>&1 | P)"
      echo "n=$n $op nccl  : $(timeout 60 $N/bin/mpirun -n $n /tmp/gbn -B nccl -d cuda -z 1 -o $op -b 8 -e 4M -f 4 -w 50 -n 500 2>&1 | P)"
    done
  done
done
date -u
echo "== NCCL back-to-back (-z 0) allreduce, 4 ranks"; timeout 90 $N/bin/mpirun -n 4 /tmp/gbn -B nccl -d cuda -z 0 -o allreduce -b 8 -e 1G -f 8 -w 20 -n 100 2>&1 | P
[ -x /tmp/gt/gpu_stream ] && { echo "== gpu_stream bench -n 4"; timeout 120 $N/bin/mpirun -n 4 /tmp/gt/gpu_stream bench 2>&1 | tail -25; }
date -u
