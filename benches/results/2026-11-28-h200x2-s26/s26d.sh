#!/bin/bash
# s26d: DWARF call graphs of the 2-rank device 8 B ping-pong (main's install with the unstripped
# library of build/pack/prof.txz): who calls clock_gettime, and the inclusive time of the
# library's functions per message.
set -u
R=$(cd "$(dirname "$0")/../../.." && pwd); cd $R
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee $OUT/s26d.log) 2>&1
N=${BUILD:-fin}; F=$R/build/$N
[ -x $F/bin/mpicc ] || tar xJf build/pack/$N.txz -C build
tar xJf build/pack/prof.txz -C build
[ -x /tmp/perfkit/perf ] || tar xJf build/pack/perfkit.txz -C /tmp
PERF="env LD_LIBRARY_PATH=/tmp/perfkit/lib /tmp/perfkit/perf"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
date -u
[ -x /tmp/gbf ] || $F/bin/mpicc -std=c99 -O2 -o /tmp/gbf benches/gpumpi-bench.c -ldl -lm
$PERF record --call-graph dwarf,16384 -F 4000 -o /tmp/pd.data -- $F/bin/mpirun -n 2 /tmp/gbf -d cuda -o pingpong -b 8 -e 8 -w 1000 -n 60000 2>&1 | grep -v "^#" | tail -2
echo "== callers of clock_gettime"
$PERF report -i /tmp/pd.data --no-children --comm gbf --sort sym --symbols __vdso_clock_gettime -G --stdio 2>/dev/null | grep -v "^$" | grep -v "^#" | head -60
echo "== inclusive (children), library symbols"
$PERF report -i /tmp/pd.data --children --comm gbf --sort sym --stdio -g none --percent-limit 0.7 2>/dev/null | grep -v "^$" | grep -v "^#" | head -90
date -u
