#!/bin/bash
# The 3-rank in-place alltoall defect with the debug log: does a failing run give a command up
# or fall back? Config A (RESIDENT_MAX=4m, 3 blocks), up to 5 runs, stop at the first failure.
W=$(mktemp -d); P=build/s32/even
printf 'allreduce two_shot\nalltoall push\nallgather push\n' > $W/two.txt
$P/bin/mpicc -O2 -Itests/gpu -o $W/rm tests/gpu/gpu_resident_mid.c -ldl -lm -lpthread || exit 1
for k in 1 2 3 4 5; do
  GPUMPI_DEBUG=2 GPUMPI_GPU_RESIDENT_TUNING=$W/two.txt GPUMPI_GPU_RESIDENT_MAX=4m GPUMPI_GPU_RESIDENT_BLOCKS=3 timeout 60 $P/bin/mpirun -n 3 --timeout 50 -x GPUMPI_DEBUG -x GPUMPI_GPU_RESIDENT_TUNING -x GPUMPI_GPU_RESIDENT_MAX -x GPUMPI_GPU_RESIDENT_BLOCKS $W/rm > $W/log 2>&1
  echo "run $k: $(grep -E 'PASS|FAIL' $W/log | head -2 | tr '\n' ' ')"
  grep -ciE "given up|release|fall ?back|declin|not ok|staged|nvlink plan" $W/log
  if grep -q FAIL $W/log; then
    grep -iE "given up|releas|fall ?back|declin|not ok|give up|gave up" $W/log | sort | uniq -c | sort -rn | head -20
    grep -n "4194300" $W/log | head -20
    cp $W/log $OUT/fail.log
    break
  fi
done
