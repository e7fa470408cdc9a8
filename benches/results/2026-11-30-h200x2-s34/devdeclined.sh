#!/bin/bash
W=$(mktemp -d)
P=build/s34/x
export NCCL_NVLS_ENABLE=0
$P/bin/mpicc -std=c99 -O2 -o $W/gb benches/gpumpi-bench.c -ldl -lm || exit 1
printf 'allreduce resident\nallreduce one_shot_ll128\nalltoall resident\nalltoall push_ll128\nallgather resident\nallgather push_ll128\n' > $W/ll128.txt
for op in allreduce alltoall; do for b in 8 64; do
echo "== $op b$b"
GPUMPI_X_LL128=0 GPUMPI_GPU_RESIDENT_TUNING=$W/ll128.txt GPUMPI_GPU_RESIDENT_BLOCKS=$b timeout 60 $P/bin/mpirun -n 2 -x GPUMPI_X_LL128 $W/gb -o $op -d cuda -z 1 -b 32K -e 1M -f 2 -w 10 -n 50 2>&1 | sort | uniq -c | sort -rn | head -12
done; done
