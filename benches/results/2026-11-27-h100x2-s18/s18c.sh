#!/bin/bash
# s18c: why a small device message across emulated nodes takes ~160 us.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee $OUT/s18c.log) 2>&1
which strace ltrace gdb perf
export NCCL_NVLS_ENABLE=0
build/b/bin/mpicc -std=c99 -O2 -o /tmp/gb benches/gpumpi-bench.c -ldl -lm
EMU=scripts/emulate-nodes.sh
GPUMPI_DEBUG=3 timeout 60 build/b/bin/mpirun -n 2 $EMU 2 /tmp/gb -d cuda -o pingpong -b 8 -e 8 -w 30 -n 10 > $OUT/trace.txt 2>&1
wc -l $OUT/trace.txt
if command -v strace >/dev/null; then
  timeout 60 build/b/bin/mpirun -n 2 bash -c 'if [ "$GPUMPI_RANK" = 1 ]; then exec strace -f -tt -T -o /tmp/st.txt scripts/emulate-nodes.sh 2 /tmp/gb -d cuda -o pingpong -b 8 -e 8 -w 30 -n 200; else exec scripts/emulate-nodes.sh 2 /tmp/gb -d cuda -o pingpong -b 8 -e 8 -w 30 -n 200; fi'
  tail -3000 /tmp/st.txt > $OUT/strace-tail.txt
  strace -c -f -o /dev/null true 2>/dev/null
  awk '{print $3}' /tmp/st.txt | sort | uniq -c | sort -rn | head -5
fi
