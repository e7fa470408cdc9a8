#!/bin/bash
# s21d: final main (build/f; unit tests build/funit) on 4x H100: unit gpu::, the GPU suite, the stream kernel's
# defaults beside NCCL -z0, mid-size blocking collectives beside NCCL -z1, and the resident table idle vs with
# every core busy; d18's device point-to-point between emulated nodes (base: main at session start, build/t).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee $OUT/s21d.log) 2>&1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
F=$PWD/build/f
nvidia-smi -L | head -1; date -u; uptime
NCCL_LIB=$(python3 -c "import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=${NCCL_LIB}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export GPUMPI_TEST_CUDART=/usr/local/cuda/lib64/libcudart.so
mkdir -p /work target/tmp && ln -sfn $PWD /work/main
echo "== unit gpu::"; timeout 120 build/funit/lib-tests gpu:: --test-threads=1 2>&1 | grep -E "test result|FAILED|panicked" | head
echo "== gpu suite"; GPU_TEST_TIMEOUT=60 GPU_TEST_BUILD=/tmp/gt timeout 330 bash tests/gpu/run.sh $F > $OUT/runsh-s21d.log 2>&1; echo "rc=$?"; grep -E "^FAILED|^gpu:" $OUT/runsh-s21d.log | tail -20
date -u
$F/bin/mpicc -std=c99 -O2 -o /tmp/gbf benches/gpumpi-bench.c -ldl -lm
P() { awk '!/^#/ {printf "%s:%s%s ", $1, $10, ($9>0?"!WRONG":"")} END {print ""}'; }
for n in 2 4; do
  echo "== gpu_stream bench -n $n (defaults)"; timeout 90 $F/bin/mpirun -n $n /tmp/gt/gpu_stream bench 1073741824 8 8 2>&1 | grep -v "^#" | tail -10
  echo "n=$n nccl -z0: $(timeout 60 $F/bin/mpirun -n $n /tmp/gbf -B nccl -d cuda -z 0 -o allreduce -b 8 -e 1G -f 8 -w 20 -n 100 2>&1 | P)"
done
date -u
echo "== d18: devnet_bench (base = build/t, new = build/f)"
ROUNDS=1 ITERS=1000 timeout 150 bash benches/devnet_bench.sh $PWD/build/t $F 2>&1 | grep -v "^#"
date -u
echo "== mid-size blocking 4 KiB-2 MiB"
for n in 2 4; do for op in allreduce alltoall; do
  echo "n=$n $op: $(timeout 40 $F/bin/mpirun -n $n /tmp/gbf -d cuda -z 1 -o $op -b 4K -e 2M -f 2 -w 50 -n 400 2>&1 | P)"
  echo "n=$n $op nccl: $(timeout 40 $F/bin/mpirun -n $n /tmp/gbf -B nccl -d cuda -z 1 -o $op -b 4K -e 2M -f 2 -w 50 -n 400 2>&1 | P)"
done; done
date -u
echo "== blocking allreduce 2 ranks, idle vs every core busy (64 spinning processes), unbound"
for r in 1; do
  echo "r$r idle: $(timeout 40 $F/bin/mpirun -n 2 /tmp/gbf -d cuda -z 1 -o allreduce -b 8 -e 1M -f 8 -w 50 -n 400 2>&1 | P)"
  pids=""; for i in $(seq $(nproc)); do sh -c 'while :; do :; done' & pids="$pids $!"; done
  echo "r$r busy: $(timeout 60 $F/bin/mpirun -n 2 /tmp/gbf -d cuda -z 1 -o allreduce -b 8 -e 1M -f 8 -w 50 -n 400 2>&1 | P)"
  echo "r$r busy nccl: $(timeout 60 $F/bin/mpirun -n 2 /tmp/gbf -B nccl -d cuda -z 1 -o allreduce -b 8 -e 1M -f 8 -w 50 -n 400 2>&1 | P)"
  kill $pids; wait 2>/dev/null
done
date -u
