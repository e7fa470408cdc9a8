#!/bin/bash
# The 3-rank in-place alltoall defect (gpu_resident_mid -n 3, two_shot table): 4 runs each of
# A: as in the suite (RESIDENT_MAX=4m, 3 blocks), B: 1 block, C: the default blocks (32),
# D: 3 blocks with RESIDENT_MAX=2m (4 MiB blocks to the NVLink plans instead). Session's build.
W=$(mktemp -d); P=build/s32/even
printf 'allreduce two_shot\nalltoall push\nallgather push\n' > $W/two.txt
$P/bin/mpicc -O2 -Itests/gpu -o $W/rm tests/gpu/gpu_resident_mid.c -ldl -lm -lpthread || exit 1
for cfg in "A GPUMPI_GPU_RESIDENT_MAX=4m GPUMPI_GPU_RESIDENT_BLOCKS=3" "B GPUMPI_GPU_RESIDENT_MAX=4m GPUMPI_GPU_RESIDENT_BLOCKS=1" "C GPUMPI_GPU_RESIDENT_MAX=4m GPUMPI_GPU_RESIDENT_BLOCKS=32" "D GPUMPI_GPU_RESIDENT_MAX=2m GPUMPI_GPU_RESIDENT_BLOCKS=3"; do
  set -- $cfg; name=$1; shift
  for k in 1 2 3 4; do
    echo -n "$name run $k: "; env GPUMPI_GPU_RESIDENT_TUNING=$W/two.txt "$@" timeout 60 $P/bin/mpirun -n 3 --timeout 50 -x GPUMPI_GPU_RESIDENT_TUNING -x GPUMPI_GPU_RESIDENT_MAX -x GPUMPI_GPU_RESIDENT_BLOCKS $W/rm 2>&1 | grep -E "PASS|FAIL|expected" | head -3 | tr '\n' ' '; echo
  done
done
