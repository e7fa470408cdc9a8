#!/bin/bash
# Host windowed bandwidth between 2 emulated nodes on loopback (one rank each) on the device
# machine (16 CPUs): GPUMPI_NET_BULK_MIN auto / off / 64k interleaved, 3 rounds.
P=$PWD/build/s31/inst
W=$(mktemp -d)
"$P/bin/mpicc" -std=c99 -O2 -o $W/gb benches/gpumpi-bench.c -ldl -lm || exit 1
emu=scripts/emulate-nodes.sh
echo "# $(nproc) CPUs, $(date -u +%FT%TZ)"
GPUMPI_DEBUG=1 timeout 60 $P/bin/mpirun -n 2 $emu 2 $W/gb -o bw -b 1M -e 1M -w 1 -n 2 2>&1 | grep -E "bulk transfers between|bulk transfers \(|stripe" | head -4
for r in 1 2 3; do
  for m in auto off 64k; do
    echo "== round $r GPUMPI_NET_BULK_MIN=$m"
    GPUMPI_NET_BULK_MIN=$m timeout 120 $P/bin/mpirun -n 2 $emu 2 $W/gb -o bw -b 64K -e 256K -f 4 -w 5 -n 50 2>&1 | grep -v "^#"
    GPUMPI_NET_BULK_MIN=$m timeout 120 $P/bin/mpirun -n 2 $emu 2 $W/gb -o bw -b 1M -e 64M -f 4 -w 1 -n 3 2>&1 | grep -v "^#"
  done
done
