#!/bin/bash
# s26j: the final tree (build/s26) on 4x H200 (NVSwitch): blocking allreduce / alltoall
# 4 KiB-2 MiB at 4 ranks beside NCCL -z 1, the stream-ordered allreduce (gpu_stream bench) at
# 4 ranks beside NCCL -z 0, and the 2-rank device ping-pong.
set -u
R=$(cd "$(dirname "$0")/../../.." && pwd); cd $R
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee $OUT/s26j.log) 2>&1
tar xJf build/pack/s26.txz -C build; N=$R/build/s26
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
NCCL_LIB=$(python3 -c "import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=${NCCL_LIB}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi -L; nvidia-smi topo -m | head -6; date -u; uptime
P() { awk '!/^#/ && NF >= 10 {printf "%s:%s%s ", $1, $10, ($9>0?"!WRONG":"")} END {print ""}'; }
$N/bin/mpicc -std=c99 -O2 -o /tmp/gbN benches/gpumpi-bench.c -ldl -lm
mkdir -p /tmp/gt; $N/bin/mpicc -O2 -Itests/gpu -o /tmp/gt/gpu_stream tests/gpu/gpu_stream.c -ldl -lm -lpthread
for op in allreduce alltoall; do
  echo "n=4 $op: $(timeout 40 $N/bin/mpirun -n 4 /tmp/gbN -d cuda -z 1 -o $op -b 4K -e 2M -f 2 -w 50 -n 300 2>&1 | P)"
  echo "n=4 $op nccl: $(timeout 40 $N/bin/mpirun -n 4 /tmp/gbN -B nccl -d cuda -z 1 -o $op -b 4K -e 2M -f 2 -w 50 -n 300 2>&1 | P)"
done
echo "== stream allreduce 4 ranks"
timeout 90 $N/bin/mpirun -n 4 /tmp/gt/gpu_stream bench 1073741824 8 8 2>&1 | grep -v "^#" | tail -10
echo "nccl -z0: $(timeout 60 $N/bin/mpirun -n 4 /tmp/gbN -B nccl -d cuda -z 0 -o allreduce -b 8 -e 1G -f 8 -w 20 -n 100 2>&1 | P)"
echo "pingpong 2 ranks: $(timeout 40 $N/bin/mpirun -n 2 /tmp/gbN -d cuda -o pingpong -b 1 -e 1M -f 2 -w 100 -n 1000 2>&1 | P)"
date -u
