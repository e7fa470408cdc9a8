#!/bin/bash
# s21a: main at session start (02743f4) on 4x H100: unit gpu::, the GPU suite (the staged fallback's capture fix
# first runs here), the resident table's small rows (one-block kernel vs the wide one from 4 KiB), and the stream
# kernel's block count at 2 and 4 ranks beside blocking and NCCL -z0.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee $OUT/s21a.log) 2>&1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
T=$PWD/build/t; D=$PWD/benches/results/2026-11-27-h100x4-s21
nvidia-smi -L; date -u; uptime
NCCL_LIB=$(python3 -c "import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=${NCCL_LIB}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export GPUMPI_TEST_CUDART=/usr/local/cuda/lib64/libcudart.so
mkdir -p /work target/tmp && ln -sfn $PWD /work/main
echo "== unit gpu::"; timeout 120 build/unit/lib-tests gpu:: --test-threads=1 2>&1 | grep -E "test result|FAILED|panicked" | head
echo "== gpu suite"; GPU_TEST_TIMEOUT=60 GPU_TEST_BUILD=/tmp/gt timeout 330 bash tests/gpu/run.sh $T > $OUT/runsh-s21a.log 2>&1; echo "rc=$?"; grep -E "^FAILED|^gpu:|PASS.*stream|FAIL" $OUT/runsh-s21a.log | tail -20
date -u
$T/bin/mpicc -std=c99 -O2 -o /tmp/gbt benches/gpumpi-bench.c -ldl -lm
P() { awk '!/^#/ {printf "%s:%s%s ", $1, $10, ($9>0?"!WRONG":"")} END {print ""}'; }   # size:median us
echo "== small rows: default table vs wide kernel from 4 KiB (two interleaved rounds)"
for r in 1 2; do for n in 2 4; do for op in allreduce alltoall allgather; do
  echo "r$r n=$n $op default: $(timeout 40 $T/bin/mpirun -n $n /tmp/gbt -d cuda -z 1 -o $op -b 2K -e 32K -f 2 -w 50 -n 400 2>&1 | P)"
  echo "r$r n=$n $op wide4k : $(GPUMPI_GPU_RESIDENT_TUNING=$D/tuning-wide4k.txt timeout 40 $T/bin/mpirun -n $n -x GPUMPI_GPU_RESIDENT_TUNING /tmp/gbt -d cuda -z 1 -o $op -b 2K -e 32K -f 2 -w 50 -n 400 2>&1 | P)"
done; done; done
date -u
echo "== stream kernel block count"
for n in 2 4; do for b in 32 64 128; do
  echo "-- n=$n GPUMPI_STREAM_BLOCKS=$b"; GPUMPI_STREAM_BLOCKS=$b timeout 60 $T/bin/mpirun -n $n -x GPUMPI_STREAM_BLOCKS /tmp/gt/gpu_stream bench 2>&1 | grep -v "^#" | tail -10
done
echo "n=$n nccl -z0: $(timeout 60 $T/bin/mpirun -n $n /tmp/gbt -B nccl -d cuda -z 0 -o allreduce -b 8 -e 1G -f 8 -w 20 -n 100 2>&1 | P)"
done
date -u
