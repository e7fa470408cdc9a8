#!/bin/bash
# s26b: flat CPU profiles (perf, carried from the build machine in build/pack/perfkit.txz) of the
# 2-rank device ping-pong at 8 B and of the blocking device allreduce at 8 B and 1 MiB, with
# main's install (build/$BUILD): where the host time of a small device message goes.
set -u
R=$(cd "$(dirname "$0")/../../.." && pwd); cd $R
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee $OUT/s26b.log) 2>&1
N=${BUILD:-fin}; F=$R/build/$N
[ -x $F/bin/mpicc ] || tar xJf build/pack/$N.txz -C build
tar xJf build/pack/perfkit.txz -C /tmp
PERF="env LD_LIBRARY_PATH=/tmp/perfkit/lib /tmp/perfkit/perf"
export NCCL_NVLS_ENABLE=0
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
date -u; cat /proc/sys/kernel/perf_event_paranoid
$PERF stat -e task-clock true 2>&1 | tail -4
$F/bin/mpicc -std=c99 -O2 -o /tmp/gbf benches/gpumpi-bench.c -ldl -lm
prof() { # label, gpumpi-bench args...
  local l=$1; shift
  echo "== $l"
  $PERF record -F 20000 -o /tmp/$l.data -- $F/bin/mpirun -n 2 /tmp/gbf -d cuda "$@" 2>&1 | grep -v "^#" | tail -3
  $PERF report -i /tmp/$l.data --no-children --sort comm,dso,sym --percent-limit 0.4 --stdio 2>/dev/null | grep -v "^#" | grep -v "^$" | head -70
}
prof pp8 -o pingpong -b 8 -e 8 -w 1000 -n 300000
prof ar8 -z 1 -o allreduce -b 8 -e 8 -w 1000 -n 200000
prof ar1m -z 1 -o allreduce -b 1M -e 1M -w 1000 -n 100000
date -u
