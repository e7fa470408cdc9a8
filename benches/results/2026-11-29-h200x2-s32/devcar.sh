#!/bin/bash
# Issue 24: a one-shot custom allreduce (benches/micro/customar.cu: peer-mapped inputs
# registered once, one kernel per call) beside gpumpi's stream-ordered MPIX_Allreduce_enqueue
# (tests/gpu/gpu_stream.c bench) and NCCL -z 0, 2 GPUs, 3 rounds interleaved.
W=$(mktemp -d); P=build/s32/base
nvcc -O3 -arch=sm_90 -Ibenches/micro benches/micro/customar.cu -o $W/customar || exit 1
$P/bin/mpicc -O2 -Itests/gpu -o $W/gpu_stream tests/gpu/gpu_stream.c -ldl -lm -lpthread || exit 1
$P/bin/mpicc -std=c99 -O2 -o $W/gb benches/gpumpi-bench.c -ldl -lm || exit 1
export NCCL_NVLS_ENABLE=0
NCCL_LIB=$(python3 -c "import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=${NCCL_LIB}:${LD_LIBRARY_PATH:-}
nvidia-smi -L; uptime
for r in 1 2 3; do
  echo "== round $r customar 36 blocks"; timeout 120 $W/customar 2 36 512 1000
  echo "== round $r gpumpi gpu_stream bench"; timeout 120 $P/bin/mpirun -n 2 $W/gpu_stream bench 2097152 8 2
  echo "== round $r nccl -z 0"; timeout 60 $P/bin/mpirun -n 2 $W/gb -B nccl -o allreduce -d cuda -t int -z 0 -b 8 -e 2M -f 2 -w 50 -n 1000 2>&1 | grep -v "^#" | awk '{printf "%s=%s ", $1, $10}'; echo
done
echo "== customar 64 blocks"; timeout 120 $W/customar 2 64 512 1000
echo "== customar 16 blocks"; timeout 120 $W/customar 2 16 512 1000
