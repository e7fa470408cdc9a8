#!/bin/bash
# s18a: device latency look (driver call costs, perf availability, pingpong), then the
# emulated-nodes comparison (issue 18).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
R=$(pwd); P=$R/build/new
exec > >(tee $OUT/s18a.log) 2>&1
echo "== $(date -u) $(hostname) $(nproc) cpus"; nvidia-smi -L
export NCCL_NVLS_ENABLE=0
which perf gdb ltrace valgrind bpftrace nsys 2>&1 | head
cat /proc/sys/kernel/perf_event_paranoid
CUDA_INC=$(dirname $(dirname $(which nvcc)))/include
gcc -O2 -I$CUDA_INC benches/micro/drv_call_cost.c -o /tmp/dcc -ldl && /tmp/dcc
$P/bin/mpicc -std=c99 -O2 -o /tmp/gb benches/gpumpi-bench.c -ldl -lm
for i in 1 2 3; do
  echo "== pingpong device run $i"
  timeout 120 $P/bin/mpirun -n 2 /tmp/gb -d cuda -o pingpong -b 8 -e 64K -f 8 -w 300 -n 5000 -z 1 | grep -v '^#'
done
if command -v perf >/dev/null; then
  echo "== perf of a long 8 B device pingpong"
  timeout 120 $P/bin/mpirun -n 2 bash -c 'if [ "$GPUMPI_RANK" = 1 ]; then exec perf record -F 20000 -g -o /tmp/perf.data /tmp/gb -d cuda -o pingpong -b 8 -e 8 -w 300 -n 100000 -z 1; else exec /tmp/gb -d cuda -o pingpong -b 8 -e 8 -w 300 -n 100000 -z 1; fi' | grep -v '^#'
  perf report -i /tmp/perf.data --no-children --percent-limit 0.5 --stdio 2>/dev/null | grep -v '^$' | head -120 > $OUT/perf.txt
  perf report -i /tmp/perf.data --no-children --sort sym --percent-limit 0.3 --stdio -g none 2>/dev/null | grep -v '^$' | head -80
fi
echo "== emulated nodes (issue 18)"
ROUNDS=2 timeout 420 bash benches/emunodes_bench.sh $P
echo "== done $(date -u)"
