#!/bin/bash
# Issue 16/24: timeline of the device point-to-point path (8 B ping-pong) and of a wide-kernel
# allreduce (1 MiB), GPUMPI_TL build (temporary marks), 2 GPUs.
W=$(mktemp -d); P=build/s32/tl
$P/bin/mpicc -std=c99 -O2 -o $W/gb benches/gpumpi-bench.c -ldl -lm || exit 1
export NCCL_NVLS_ENABLE=0
nvidia-smi -L; uptime
for r in 1 2; do
  echo -n "plain pingpong: "; timeout 60 $P/bin/mpirun -n 2 $W/gb -o pingpong -d cuda -b 8 -e 16K -f 4 -w 1000 -n 20000 | grep -v "^#" | awk '{printf "%s=%s ", $1, $10}'; echo
done
for sz in 8 16K; do
  rm -f $W/tl.*
  echo "== TL pingpong $sz"; GPUMPI_TL=$W/tl timeout 60 $P/bin/mpirun -n 2 $W/gb -o pingpong -d cuda -b $sz -e $sz -w 1000 -n 20000 | grep -v "^#" | awk '{printf "%s=%s\n", $1, $10}'
  python3 build/s32/tl.py $W/tl
done
for op in allreduce alltoall; do
  rm -f $W/tl.*
  echo "== TL $op 1M"; GPUMPI_TL=$W/tl timeout 60 $P/bin/mpirun -n 2 $W/gb -o $op -d cuda -z 1 -b 1M -e 1M -w 500 -n 5000 | grep -v "^#" | awk '{printf "%s=%s\n", $1, $10}'
  python3 build/s32/tl.py $W/tl
done
