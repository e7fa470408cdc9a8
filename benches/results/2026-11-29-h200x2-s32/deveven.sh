#!/bin/bash
# Issue 24: rounds of one size in the stream kernel's plans (even) against base: stream-ordered
# allreduce 2 MiB-1 GiB (factor 2) on 2x H200 beside NCCL -z 0, 2 rounds interleaved; the
# enqueued bcast/alltoall at 16 MiB and 1 GiB as well (their plans changed the same way).
W=$(mktemp -d)
for v in base even; do build/s32/$v/bin/mpicc -O2 -Itests/gpu -o $W/gs-$v tests/gpu/gpu_stream.c -ldl -lm -lpthread || exit 1; done
build/s32/base/bin/mpicc -std=c99 -O2 -o $W/gb benches/gpumpi-bench.c -ldl -lm || exit 1
export NCCL_NVLS_ENABLE=0
NCCL_LIB=$(python3 -c "import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=${NCCL_LIB}:${LD_LIBRARY_PATH:-}
nvidia-smi -L; uptime
for r in 1 2; do
  for v in base even; do
    echo -n "r$r $v allreduce b2b/graph: "; timeout 200 build/s32/$v/bin/mpirun -n 2 $W/gs-$v bench 1073741824 2097152 2 | grep -v "^#" | awk '{printf "%s=%s/%s ", $1, $3, $4}'; echo
  done
  echo -n "r$r nccl -z 0: "; timeout 200 build/s32/base/bin/mpirun -n 2 $W/gb -B nccl -o allreduce -d cuda -t int -z 0 -b 2M -e 1G -f 2 -w 5 -n 40 2>&1 | grep -v "^#" | awk '{printf "%s=%s ", $1, $10}'; echo
done
for op in bcast alltoall; do
  for v in base even; do
    echo -n "$op $v b2b/graph: "; timeout 200 build/s32/$v/bin/mpirun -n 2 $W/gs-$v bench 1073741824 16777216 4 $op | grep -v "^#" | awk '{printf "%s=%s/%s ", $1, $3, $4}'; echo
  done
done
