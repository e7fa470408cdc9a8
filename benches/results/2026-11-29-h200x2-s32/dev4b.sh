#!/bin/bash
# The x4 suite's one failure (gpu_resident_mid -n 3, two_shot table, RESIDENT_MAX=4m, 3 blocks:
# alltoall in place at 4194300 B) with base and even, twice each; then dev4.sh.
W=$(mktemp -d)
printf 'allreduce two_shot\nalltoall push\nallgather push\n' > $W/two.txt
for v in base even; do build/s32/$v/bin/mpicc -O2 -Itests/gpu -o $W/rm-$v tests/gpu/gpu_resident_mid.c -ldl -lm -lpthread || exit 1; done
for k in 1 2; do for v in base even; do
  echo "== $k $v"; GPUMPI_GPU_RESIDENT_TUNING=$W/two.txt GPUMPI_GPU_RESIDENT_MAX=4m GPUMPI_GPU_RESIDENT_BLOCKS=3 timeout 120 build/s32/$v/bin/mpirun -n 3 --timeout 100 -x GPUMPI_GPU_RESIDENT_TUNING -x GPUMPI_GPU_RESIDENT_MAX -x GPUMPI_GPU_RESIDENT_BLOCKS $W/rm-$v 2>&1 | grep -E "PASS|FAIL|expected" | head -5
done; done
bash build/s32/dev4.sh
