#!/bin/bash
# Issue 24: the stream kernel's large-size settings on 2x H200 (tuned on 4x H100): flagged rounds
# (default) vs pipelined (GPUMPI_STREAM_PIPE_MIN=8m, 4 and 8 stages), 128 vs 64 blocks, beside
# NCCL -z 0; allreduce 16 MiB-1 GiB, 2 rounds interleaved.
W=$(mktemp -d); P=build/s32/base
$P/bin/mpicc -O2 -Itests/gpu -o $W/gpu_stream tests/gpu/gpu_stream.c -ldl -lm -lpthread || exit 1
$P/bin/mpicc -std=c99 -O2 -o $W/gb benches/gpumpi-bench.c -ldl -lm || exit 1
export NCCL_NVLS_ENABLE=0
NCCL_LIB=$(python3 -c "import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=${NCCL_LIB}:${LD_LIBRARY_PATH:-}
nvidia-smi -L; uptime
for r in 1 2; do
  for cfg in "X=1" "GPUMPI_STREAM_PIPE_MIN=8m" "GPUMPI_STREAM_PIPE_MIN=8m GPUMPI_STREAM_STAGES=8" "GPUMPI_STREAM_BLOCKS=64" "GPUMPI_STREAM_PIPE_MIN=8m GPUMPI_STREAM_PIPE_CHUNK=1m"; do
    echo -n "r$r [$cfg]: "; env $cfg timeout 200 $P/bin/mpirun -n 2 $W/gpu_stream bench 1073741824 16777216 4 | grep -v "^#" | awk '{printf "%s=%s/%s ", $1, $3, $4}'; echo
  done
  echo -n "r$r nccl -z 0: "; timeout 200 $P/bin/mpirun -n 2 $W/gb -B nccl -o allreduce -d cuda -t int -z 0 -b 16M -e 1G -f 4 -w 5 -n 40 2>&1 | grep -v "^#" | awk '{printf "%s=%s ", $1, $10}'; echo
done
