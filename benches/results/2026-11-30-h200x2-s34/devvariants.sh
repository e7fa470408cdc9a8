#!/bin/bash
# LL128 variants (GPUMPI_X_LL128 bits: 1 = block barrier between put and receive, 2 = 100 ns sleep per missed poll)
W=$(mktemp -d)
P=build/s34/x
export NCCL_NVLS_ENABLE=0
$P/bin/mpicc -std=c99 -O2 -o $W/gb benches/gpumpi-bench.c -ldl -lm || exit 1
printf 'allreduce resident\nallreduce one_shot_ll128\nalltoall resident\nalltoall push_ll128\nallgather resident\nallgather push_ll128\n' > $W/ll128.txt
for op in allreduce alltoall; do
 for b in ${BS:-8 64}; do
  for x in ${XS:-builtin 0 4 8 12}; do
   tt=$W/ll128.txt; [ $x = builtin ] && tt=
   echo -n "$op b$b x$x: "
   GPUMPI_X_LL128=$x GPUMPI_GPU_RESIDENT_TUNING=$tt GPUMPI_GPU_RESIDENT_BLOCKS=$b timeout 60 $P/bin/mpirun -n 2 -x GPUMPI_X_LL128 $W/gb -o $op -d cuda -z 1 -b 16K -e 1M -f 4 -w 50 -n 300 2>&1 | grep -v "^#" | awk '{printf "%s=%s%s ", $1, $10, ($9!=0?"!WRONG"$9:"")}'; echo
  done
 done
done
