#!/bin/bash
# s26e: main at the session's start (build/fin) against this session's tree (build/s26) on
# 2x H200, interleaved: device ping-pong 1 B-1 MiB (3 rounds), dev_call_cost 8 B, gpu_test -n 2
# on the new tree, blocking allreduce / alltoall 4 KiB-2 MiB beside NCCL -z 1 (the new tree
# also with GPUMPI_GPU_RESIDENT_BLOCKS=64).
set -u
R=$(cd "$(dirname "$0")/../../.." && pwd); cd $R
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee $OUT/s26e.log) 2>&1
for n in fin s26; do [ -x build/$n/bin/mpicc ] || tar xJf build/pack/$n.txz -C build; done
B=$R/build/fin; N=$R/build/s26
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
NCCL_LIB=$(python3 -c "import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=${NCCL_LIB}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export GPUMPI_TEST_CUDART=/usr/local/cuda/lib64/libcudart.so
T0=$(date +%s); el() { echo "[+$(( $(date +%s) - T0 ))s]"; }
nvidia-smi -L; date -u; uptime
P() { awk '!/^#/ && NF >= 10 {printf "%s:%s%s ", $1, $10, ($9>0?"!WRONG":"")} END {print ""}'; }
for p in B N; do eval "pre=\$$p"; $pre/bin/mpicc -std=c99 -O2 -o /tmp/gb$p benches/gpumpi-bench.c -ldl -lm
  $pre/bin/mpicc -O2 -Itests/gpu -Ibenches/micro benches/micro/dev_call_cost.c -o /tmp/dcc$p -ldl; done
echo "== gpu_test -n 2, new $(el)"
mkdir -p /tmp/gt; $N/bin/mpicc -O2 -Itests/gpu -o /tmp/gt/gpu_test tests/gpu/gpu_test.c -ldl -lm -lpthread
timeout 120 $N/bin/mpirun -n 2 /tmp/gt/gpu_test 65537 2>&1 | grep -E "^(PASS|FAIL|SKIP)|rror" | head -5
echo "== device pingpong 1 B-1 MiB, one-way us $(el)"
for r in 1 2 3; do
  echo "r$r base: $(timeout 40 $B/bin/mpirun -n 2 /tmp/gbB -d cuda -o pingpong -b 1 -e 1M -f 2 -w 100 -n 1000 2>&1 | P)"
  echo "r$r new : $(timeout 40 $N/bin/mpirun -n 2 /tmp/gbN -d cuda -o pingpong -b 1 -e 1M -f 2 -w 100 -n 1000 2>&1 | P)"
done
echo "== dev_call_cost 8 B $(el)"
for p in B N; do eval "pre=\$$p"; echo "-- $p"; timeout 60 $pre/bin/mpirun -n 2 /tmp/dcc$p 2000 8 2>&1 | tail -2; done
echo "== blocking mid-size 2 ranks beside NCCL -z 1 $(el)"
for op in allreduce alltoall; do
  echo "$op base: $(timeout 40 $B/bin/mpirun -n 2 /tmp/gbB -d cuda -z 1 -o $op -b 8 -e 2M -f 4 -w 50 -n 400 2>&1 | P)"
  echo "$op new : $(timeout 40 $N/bin/mpirun -n 2 /tmp/gbN -d cuda -z 1 -o $op -b 8 -e 2M -f 4 -w 50 -n 400 2>&1 | P)"
  echo "$op new64: $(GPUMPI_GPU_RESIDENT_BLOCKS=64 timeout 40 $N/bin/mpirun -n 2 -x GPUMPI_GPU_RESIDENT_BLOCKS /tmp/gbN -d cuda -z 1 -o $op -b 8 -e 2M -f 4 -w 50 -n 400 2>&1 | P)"
  echo "$op nccl: $(timeout 40 $N/bin/mpirun -n 2 /tmp/gbN -B nccl -d cuda -z 1 -o $op -b 8 -e 2M -f 4 -w 50 -n 400 2>&1 | P)"
done
echo "== done $(el)"; date -u
