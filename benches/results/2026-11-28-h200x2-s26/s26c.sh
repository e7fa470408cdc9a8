#!/bin/bash
# s26c: call graphs (frame pointers; the kernel's side is exact, the library has none) of the
# kernel symbols in the 2-rank device 8 B ping-pong's profile (s26b): osDevReadReg032 and the
# rwsem spinning, and how often each rank enters the kernel (syscalls by name).
set -u
R=$(cd "$(dirname "$0")/../../.." && pwd); cd $R
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee $OUT/s26c.log) 2>&1
N=${BUILD:-fin}; F=$R/build/$N
[ -x $F/bin/mpicc ] || tar xJf build/pack/$N.txz -C build
[ -x /tmp/perfkit/perf ] || tar xJf build/pack/perfkit.txz -C /tmp
PERF="env LD_LIBRARY_PATH=/tmp/perfkit/lib /tmp/perfkit/perf"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
date -u; cat /sys/devices/system/clocksource/clocksource0/current_clocksource
[ -x /tmp/gbf ] || $F/bin/mpicc -std=c99 -O2 -o /tmp/gbf benches/gpumpi-bench.c -ldl -lm
$PERF record -g -F 20000 -o /tmp/pg.data -- $F/bin/mpirun -n 2 /tmp/gbf -d cuda -o pingpong -b 8 -e 8 -w 1000 -n 300000 2>&1 | grep -v "^#" | tail -2
$PERF report -i /tmp/pg.data --no-children --comm gbf --sort sym --symbols osDevReadReg032,rwsem_spin_on_owner,mutex_spin_on_owner -G --stdio 2>/dev/null | grep -v "^$" | head -120
echo "== syscalls of the ping-pong (perf trace -s)"
$PERF stat -e 'raw_syscalls:sys_enter' -e 'irq:irq_handler_entry' -- $F/bin/mpirun -n 2 /tmp/gbf -d cuda -o pingpong -b 8 -e 8 -w 1000 -n 100000 2>&1 | grep -v "^#" | tail -8
$PERF record -e raw_syscalls:sys_enter -o /tmp/sc.data -- $F/bin/mpirun -n 2 /tmp/gbf -d cuda -o pingpong -b 8 -e 8 -w 1000 -n 100000 > /dev/null 2>&1
$PERF script -i /tmp/sc.data -F comm,tid,trace 2>/dev/null | awk '{print $1, $NF, $0}' | sed -E 's/.*NR ([0-9]+).*/\1/' | sort | uniq -c | sort -rn | head -12
date -u
