#!/bin/bash
# s26g: this session's tree (build/s26, sources build/s26src, unit binary build/s26unit) on
# 2x H200: unit gpu::, the GPU suite (through s24b.sh), then the blocking allreduce / alltoall at
# 256 KiB-2 MiB with 32 and 64 wide blocks beside NCCL -z 1, and the stream-ordered allreduce
# (gpu_stream bench) beside NCCL -z 0.
set -u
R=$(cd "$(dirname "$0")/../../.." && pwd); cd $R
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
BUILD=s26 BENCH=0 SUITE_LIMIT=${SUITE_LIMIT:-330} GPUMPI_ALLOW_GPU_SKIP=${GPUMPI_ALLOW_GPU_SKIP:-} timeout 420 bash benches/results/2026-11-28-h100x4-s24/s24b.sh
exec > >(tee $OUT/s26g.log) 2>&1
N=$R/build/s26
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
NCCL_LIB=$(python3 -c "import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=${NCCL_LIB}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
P() { awk '!/^#/ && NF >= 10 {printf "%s:%s%s ", $1, $10, ($9>0?"!WRONG":"")} END {print ""}'; }
date -u
$N/bin/mpicc -std=c99 -O2 -o /tmp/gbN benches/gpumpi-bench.c -ldl -lm
for r in 1 2; do for op in allreduce alltoall; do
  echo "r$r $op 32: $(timeout 40 $N/bin/mpirun -n 2 /tmp/gbN -d cuda -z 1 -o $op -b 256K -e 2M -f 2 -w 50 -n 400 2>&1 | P)"
  echo "r$r $op 64: $(GPUMPI_GPU_RESIDENT_BLOCKS=64 timeout 40 $N/bin/mpirun -n 2 -x GPUMPI_GPU_RESIDENT_BLOCKS /tmp/gbN -d cuda -z 1 -o $op -b 256K -e 2M -f 2 -w 50 -n 400 2>&1 | P)"
  echo "r$r $op nccl: $(timeout 40 $N/bin/mpirun -n 2 /tmp/gbN -B nccl -d cuda -z 1 -o $op -b 256K -e 2M -f 2 -w 50 -n 400 2>&1 | P)"
done; done
echo "== stream allreduce 2 ranks beside NCCL -z 0"
timeout 90 $N/bin/mpirun -n 2 /tmp/gt/gpu_stream bench 1073741824 8 8 2>&1 | grep -v "^#" | tail -10
echo "nccl -z0: $(timeout 60 $N/bin/mpirun -n 2 /tmp/gbN -B nccl -d cuda -z 0 -o allreduce -b 8 -e 1G -f 8 -w 20 -n 100 2>&1 | P)"
date -u
