#!/bin/bash
# s26a: where the small device message's time goes on 2x H200, and the mid-size / stream-ordered
# collectives beside NCCL, with main's install (build/$BUILD from build/pack/$BUILD.txz).
# 1. driver call costs (drv_call_cost.c); 2. the pull ping-pong floor without MPI (p2plat.cu);
# 3. gpumpi-bench device ping-pong 1 B-1 MiB, 3 rounds; 4. dev_call_cost 8 B (MPI_Send / MPI_Recv
# each timed alone); 5. blocking allreduce / alltoall 4 KiB-2 MiB beside NCCL -z 1; 6. the
# stream-ordered allreduce (gpu_stream bench) beside NCCL -z 0.
set -u
R=$(cd "$(dirname "$0")/../../.." && pwd); cd $R
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee $OUT/s26a.log) 2>&1
N=${BUILD:-fin}; F=$R/build/$N
[ -x $F/bin/mpicc ] || tar xJf build/pack/$N.txz -C build
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
NCCL_LIB=$(python3 -c "import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=${NCCL_LIB}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export GPUMPI_TEST_CUDART=/usr/local/cuda/lib64/libcudart.so
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
T0=$(date +%s); el() { echo "[+$(( $(date +%s) - T0 ))s]"; }
nvidia-smi -L; nvidia-smi topo -m | head -4; date -u; uptime; nproc
P() { awk '!/^#/ && NF >= 10 {printf "%s:%s%s ", $1, $10, ($9>0?"!WRONG":"")} END {print ""}'; }
echo "== 1. driver call costs $(el)"
gcc -O2 -I/usr/local/cuda/include -Ibenches/micro benches/micro/drv_call_cost.c -o /tmp/dcc -ldl && timeout 60 /tmp/dcc
echo "== 2. p2plat micro $(el)"
$NVCC -O3 -arch=sm_90 -Ibenches/micro -o /tmp/p2plat benches/micro/p2plat.cu -lpthread && CUDA_VISIBLE_DEVICES=0,1 timeout 60 /tmp/p2plat 20000 | grep -E "echo, 1|pull|push pingpong|^#" | head -12
$F/bin/mpicc -std=c99 -O2 -o /tmp/gbf benches/gpumpi-bench.c -ldl -lm
echo "== 3. device pingpong 1 B-1 MiB, one-way us $(el)"
for r in 1 2 3; do echo "r$r: $(timeout 40 $F/bin/mpirun -n 2 /tmp/gbf -d cuda -o pingpong -b 1 -e 1M -f 2 -w 100 -n 1000 2>&1 | P)"; done
echo "== 4. dev_call_cost 8 B $(el)"
$F/bin/mpicc -O2 -Itests/gpu -Ibenches/micro benches/micro/dev_call_cost.c -o /tmp/devcc -ldl && timeout 60 $F/bin/mpirun -n 2 /tmp/devcc 2000 8 2>&1 | tail -12
echo "== 5. blocking mid-size 2 ranks beside NCCL -z 1 $(el)"
for op in allreduce alltoall; do
  echo "$op: $(timeout 40 $F/bin/mpirun -n 2 /tmp/gbf -d cuda -z 1 -o $op -b 4K -e 2M -f 2 -w 50 -n 400 2>&1 | P)"
  echo "$op nccl: $(timeout 40 $F/bin/mpirun -n 2 /tmp/gbf -B nccl -d cuda -z 1 -o $op -b 4K -e 2M -f 2 -w 50 -n 400 2>&1 | P)"
done
echo "== 6. stream allreduce 2 ranks beside NCCL -z 0 $(el)"
mkdir -p /tmp/gt; $F/bin/mpicc -O2 -Itests/gpu -o /tmp/gt/gpu_stream tests/gpu/gpu_stream.c -ldl -lm -lpthread 2>&1 | tail -3
timeout 90 $F/bin/mpirun -n 2 /tmp/gt/gpu_stream bench 1073741824 8 8 2>&1 | grep -v "^#" | tail -10
echo "nccl -z0: $(timeout 60 $F/bin/mpirun -n 2 /tmp/gbf -B nccl -d cuda -z 0 -o allreduce -b 8 -e 1G -f 8 -w 20 -n 100 2>&1 | P)"
echo "== done $(el)"; date -u
