#!/bin/bash
# s26f: flat CPU profile (perf from build/pack/perfkit.txz) of the 2-rank device 8 B ping-pong
# with this session's tree (build/s26), as s26b did for main at the session's start.
set -u
R=$(cd "$(dirname "$0")/../../.." && pwd); cd $R
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee $OUT/s26f.log) 2>&1
N=$R/build/s26; [ -x $N/bin/mpicc ] || tar xJf build/pack/s26.txz -C build
[ -x /tmp/perfkit/perf ] || tar xJf build/pack/perfkit.txz -C /tmp
PERF="env LD_LIBRARY_PATH=/tmp/perfkit/lib /tmp/perfkit/perf"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
[ -x /tmp/gbN ] || $N/bin/mpicc -std=c99 -O2 -o /tmp/gbN benches/gpumpi-bench.c -ldl -lm
$PERF record -F 20000 -o /tmp/pn.data -- $N/bin/mpirun -n 2 /tmp/gbN -d cuda -o pingpong -b 8 -e 8 -w 1000 -n 300000 2>&1 | grep -v "^#" | tail -3
$PERF report -i /tmp/pn.data --no-children --sort comm,dso,sym --percent-limit 0.25 --stdio 2>/dev/null | grep -v "^#" | grep -v "^$" | head -50
$PERF record -e raw_syscalls:sys_enter -o /tmp/sc.data -- $N/bin/mpirun -n 2 /tmp/gbN -d cuda -o pingpong -b 8 -e 8 -w 1000 -n 100000 > /dev/null 2>&1
$PERF script -i /tmp/sc.data -F trace 2>/dev/null | sed -E 's/.*NR ([0-9]+).*/\1/' | sort | uniq -c | sort -rn | head -6
