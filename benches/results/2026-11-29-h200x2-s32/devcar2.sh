#!/bin/bash
# Issue 24: customar's check fixed (expected y/z/w lanes e + n, e + 2n, e + 3n): the checked
# calls again, 1 round; and gpumpi's stream-ordered allreduce 16 MiB-1 GiB beside NCCL -z 0.
W=$(mktemp -d); P=build/s32/base
nvcc -O3 -arch=sm_90 -Ibenches/micro benches/micro/customar.cu -o $W/customar || exit 1
$P/bin/mpicc -O2 -Itests/gpu -o $W/gpu_stream tests/gpu/gpu_stream.c -ldl -lm -lpthread || exit 1
$P/bin/mpicc -std=c99 -O2 -o $W/gb benches/gpumpi-bench.c -ldl -lm || exit 1
export NCCL_NVLS_ENABLE=0
NCCL_LIB=$(python3 -c "import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=${NCCL_LIB}:${LD_LIBRARY_PATH:-}
nvidia-smi -L; uptime
timeout 120 $W/customar 2 36 512 1000
timeout 120 $W/customar 2 64 512 1000
for r in 1 2; do
  echo "== round $r gpumpi gpu_stream bench 16M-1G"; timeout 200 $P/bin/mpirun -n 2 $W/gpu_stream bench 1073741824 16777216 4
  echo "== round $r nccl -z 0"; timeout 200 $P/bin/mpirun -n 2 $W/gb -B nccl -o allreduce -d cuda -t int -z 0 -b 16M -e 1G -f 4 -w 5 -n 40 2>&1 | grep -v "^#" | awk '{printf "%s=%s ", $1, $10}'; echo
done
