#!/bin/bash
# LL128: sizes with whole lines in every block (multiples of 120 B x lines) against powers of two.
W=$(mktemp -d)
P=build/s34/x
export NCCL_NVLS_ENABLE=0
$P/bin/mpicc -std=c99 -O2 -o $W/gb benches/gpumpi-bench.c -ldl -lm || exit 1
printf 'allreduce resident\nallreduce one_shot_ll128\nalltoall resident\nalltoall push_ll128\nallgather resident\nallgather push_ll128\n' > $W/ll128.txt
for b in 16 64; do
for s in 61440 65536 122880 131072 245760 262144 983040 1048576; do
 for x in builtin 0 4; do
   tt=$W/ll128.txt; [ $x = builtin ] && tt=
   echo -n "allreduce b$b x$x: "
   GPUMPI_X_LL128=$x GPUMPI_GPU_RESIDENT_TUNING=$tt GPUMPI_GPU_RESIDENT_BLOCKS=$b timeout 60 $P/bin/mpirun -n 2 -x GPUMPI_X_LL128 $W/gb -o allreduce -d cuda -z 1 -b $s -e $s -w 50 -n 300 2>&1 | grep -v "^#\|XDBG" | awk '{printf "%s=%s%s ", $1, $10, ($9!=0?"!WRONG"$9:"")}'; echo
 done
done
done
