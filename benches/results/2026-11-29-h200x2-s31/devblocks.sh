#!/bin/bash
# Issue 24: wide resident kernel blocks (GPUMPI_GPU_RESIDENT_BLOCKS) 32 / 40 / 48 / 64, blocking
# allreduce and alltoall 128 KiB-2 MiB on 2 GPUs (one per rank), beside NCCL, 3 rounds interleaved.
P=$PWD/build/s31/base; W=$(mktemp -d)
$P/bin/mpicc -std=c99 -O2 -o $W/gb benches/gpumpi-bench.c -ldl -lm || exit 1
export NCCL_NVLS_ENABLE=0
NCCL_LIB=$(python3 -c "import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=${NCCL_LIB}:${LD_LIBRARY_PATH:-}
nvidia-smi -L
for r in 1 2 3; do
  for op in allreduce alltoall; do
    for b in 32 40 48 64; do
      echo "== round $r $op blocks=$b"
      GPUMPI_GPU_RESIDENT_BLOCKS=$b timeout 60 $P/bin/mpirun -n 2 $W/gb -o $op -d cuda -z 1 -b 128K -e 2M -f 2 -w 50 -n 500 2>&1 | grep -v "^#" | awk '{print $1, $10}'
    done
    echo "== round $r $op nccl"
    timeout 60 $P/bin/mpirun -n 2 $W/gb -B nccl -o $op -d cuda -z 1 -b 128K -e 2M -f 2 -w 50 -n 500 2>&1 | grep -v "^#" | awk '{print $1, $10}'
  done
done
