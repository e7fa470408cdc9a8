#!/bin/bash
# Diagnose LL128 slowness: block-count scaling at fixed sizes, and a debug log of LL128 calls.
W=$(mktemp -d)
P=build/s34/new
export NCCL_NVLS_ENABLE=0
$P/bin/mpicc -std=c99 -O2 -o $W/gb benches/gpumpi-bench.c -ldl -lm || exit 1
printf 'allreduce resident\nallreduce one_shot_ll128\nalltoall resident\nalltoall push_ll128\nallgather resident\nallgather push_ll128\n' > $W/ll128.txt
for op in allreduce alltoall; do
 for b in 1 2 4 8 16 32 64; do
  for t in builtin ll128; do
   tt=; [ $t = ll128 ] && tt=$W/ll128.txt
   echo -n "$op b$b $t: "
   GPUMPI_GPU_RESIDENT_TUNING=$tt GPUMPI_GPU_RESIDENT_BLOCKS=$b timeout 60 $P/bin/mpirun -n 2 $W/gb -o $op -d cuda -z 1 -b 16K -e 1M -f 4 -w 50 -n 300 2>&1 | grep -v "^#" | awk '{printf "%s=%s%s ", $1, $10, ($9!=0?"!WRONG"$9:"")}'; echo
  done
 done
done
echo "== debug log, LL128 allreduce 256K"
GPUMPI_DEBUG=2 GPUMPI_GPU_RESIDENT_TUNING=$W/ll128.txt timeout 60 $P/bin/mpirun -n 2 $W/gb -o allreduce -d cuda -z 1 -b 256K -e 256K -w 5 -n 20 > $W/dbg.log 2>&1
grep -v "^#" $W/dbg.log | sort | uniq -c | sort -rn | head -40
