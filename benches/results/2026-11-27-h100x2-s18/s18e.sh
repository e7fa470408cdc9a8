#!/bin/bash
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee $OUT/s18e.log) 2>&1
build/b/bin/mpicc -O2 -I tests/gpu benches/micro/dev_call_cost.c -o /tmp/dcc -ldl
build/b/bin/mpicc -std=c99 -O2 -o /tmp/gb benches/gpumpi-bench.c -ldl -lm
EMU=scripts/emulate-nodes.sh
for a in "8 0" "1048576 0" "8 1" "1048576 1"; do
echo "== emulated nodes 8 B, alloc/two $a"; timeout 60 build/b/bin/mpirun -n 2 $EMU 2 /tmp/dcc 1000 8 $a
done
echo "== bench -e 8"; timeout 60 build/b/bin/mpirun -n 2 $EMU 2 /tmp/gb -d cuda -o pingpong -b 8 -e 8 -w 100 -n 1000 | grep -v "^#"
echo "== bench -e 8 -t uint8"; timeout 60 build/b/bin/mpirun -n 2 $EMU 2 /tmp/gb -d cuda -o pingpong -b 8 -e 8 -t uint8 -w 100 -n 1000 -c 0 | grep -v "^#"
