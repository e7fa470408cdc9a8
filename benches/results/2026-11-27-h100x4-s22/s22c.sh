#!/bin/bash
# s22c: main (75727ed, build/main) asked for 2x H200, ran on 2x H100 NV18 (another host): device ping-pong one way, the stream-ordered
# and blocking allreduce beside NCCL -z0 / -z1 in the same call.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee $OUT/s22c.log) 2>&1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
F=$PWD/build/main
nvidia-smi -L; nvidia-smi topo -m | head -4; date -u; uptime
NCCL_LIB=$(python3 -c "import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=${NCCL_LIB}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
$F/bin/mpicc -std=c99 -O2 -o /tmp/gbf benches/gpumpi-bench.c -ldl -lm
mkdir -p /tmp/gt && $F/bin/mpicc -O2 -Itests/gpu -o /tmp/gt/gpu_stream tests/gpu/gpu_stream.c -ldl -lm -lpthread 2>&1 | tail -3
P() { awk '!/^#/ {printf "%s:%s%s ", $1, $10, ($9>0?"!WRONG":"")} END {print ""}'; }
for r in 1 2; do echo "pingpong r$r: $(timeout 60 $F/bin/mpirun -n 2 /tmp/gbf -d cuda -o pingpong -b 1 -e 1M -f 2 -w 200 -n 2000 2>&1 | P)"; done
echo "pingpong nccl: $(timeout 60 $F/bin/mpirun -n 2 /tmp/gbf -B nccl -d cuda -o pingpong -b 1 -e 1M -f 8 -w 200 -n 2000 2>&1 | P)"
echo "== gpu_stream bench -n 2"; timeout 120 $F/bin/mpirun -n 2 /tmp/gt/gpu_stream bench 1073741824 8 8 2>&1 | grep -v "^#"
echo "n=2 nccl -z0: $(timeout 60 $F/bin/mpirun -n 2 /tmp/gbf -B nccl -d cuda -z 0 -o allreduce -b 8 -e 1G -f 8 -w 20 -n 100 2>&1 | P)"
for op in allreduce alltoall; do
  echo "n=2 $op -z1: $(timeout 40 $F/bin/mpirun -n 2 /tmp/gbf -d cuda -z 1 -o $op -b 4K -e 2M -f 2 -w 50 -n 400 2>&1 | P)"
  echo "n=2 $op nccl -z1: $(timeout 40 $F/bin/mpirun -n 2 /tmp/gbf -B nccl -d cuda -z 1 -o $op -b 4K -e 2M -f 2 -w 50 -n 400 2>&1 | P)"
done
date -u
