#!/bin/bash
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee $OUT/s18d.log) 2>&1
build/b/bin/mpicc -O2 -I tests/gpu benches/micro/dev_call_cost.c -o /tmp/dcc -ldl
EMU=scripts/emulate-nodes.sh
for b in 8 4096; do
echo "== same node $b"; timeout 60 build/b/bin/mpirun -n 2 /tmp/dcc 2000 $b
echo "== emulated nodes $b"; timeout 60 build/b/bin/mpirun -n 2 $EMU 2 /tmp/dcc 1000 $b
echo "== emulated nodes $b, SMALL_COPY=0"; GPUMPI_GPU_SMALL_COPY=0 timeout 60 build/b/bin/mpirun -n 2 $EMU 2 /tmp/dcc 1000 $b
done
echo "== emulated nodes 8, GPUMPI_CUDA_IPC=0"; GPUMPI_CUDA_IPC=0 timeout 60 build/b/bin/mpirun -n 2 $EMU 2 /tmp/dcc 1000 8
