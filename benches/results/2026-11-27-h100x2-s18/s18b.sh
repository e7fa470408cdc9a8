#!/bin/bash
# s18b: across emulated nodes: host 8 B pingpong old (build/new) vs new (build/b, inline TCP);
# device pingpong variants on the new build; then gpumpi vs NCCL socket (device part).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
R=$(pwd)
exec > >(tee $OUT/s18b.log) 2>&1
echo "== $(date -u) $(hostname) $(nproc) cpus"
export NCCL_NVLS_ENABLE=0
for v in new b; do build/$v/bin/mpicc -std=c99 -O2 -o /tmp/gb-$v benches/gpumpi-bench.c -ldl -lm; done
EMU=scripts/emulate-nodes.sh
for i in 1 2 3; do for v in new b; do
  echo "host pp $v: $(timeout 60 build/$v/bin/mpirun -n 2 $EMU 2 /tmp/gb-$v -o pingpong -b 8 -e 4K -f 8 -w 200 -n 3000 | grep -v '^#' | tr -s ' ' | cut -d' ' -f2,7,11,12 | tr '\n' '|')"
done; done
for i in 1 2; do for v in new b; do
  echo "host allreduce $v: $(timeout 60 build/$v/bin/mpirun -n 2 $EMU 2 /tmp/gb-$v -o allreduce -b 8 -e 32K -f 8 -w 100 -n 1000 | grep -v '^#' | tr -s ' ' | cut -d' ' -f2,7,11,12 | tr '\n' '|')"
done; done
for envs in "X=1" "GPUMPI_GPU_SMALL_COPY=0" "GPUMPI_GPU_RESIDENT_IDLE_US=1000000" "GPUMPI_NET_GPU_PIPELINE=0"; do
  for v in new b; do
  echo "dev pp $v $envs: $(env $envs timeout 60 build/$v/bin/mpirun -n 2 $EMU 2 /tmp/gb-$v -d cuda -o pingpong -b 8 -e 32K -f 8 -w 100 -n 1000 | grep -v '^#' | tr -s ' ' | cut -d' ' -f2,7,11,12 | tr '\n' '|')"
  done
done
echo "== same-node device pingpong for reference (b)"
timeout 60 build/b/bin/mpirun -n 2 /tmp/gb-b -d cuda -o pingpong -b 8 -e 8 -w 300 -n 3000 | grep -v '^#'
echo "== emulated nodes, device part (b)"
SKIP_HOST=1 ROUNDS=1 timeout 300 bash benches/emunodes_bench.sh $R/build/b
echo "== done $(date -u)"
