#!/bin/bash
# WRITE_MAX A/B on the device machine: 2 emulated nodes x 1 rank on loopback, host buffers,
# base (no cap) vs wm (64 KiB per sendmsg), interleaved, 3 rounds; under taskset -c 2,3 (bulk
# inline on the control socket) and unbound (16 CPUs: bulk striped).
W=$(mktemp -d); emu=scripts/emulate-nodes.sh
for v in base wm; do build/s31/$v/bin/mpicc -std=c99 -O2 -o $W/gb-$v benches/gpumpi-bench.c -ldl -lm || exit 1; done
echo "# $(nproc) CPUs, $(date -u +%FT%TZ)"
for r in 1 2 3; do
  for cpus in "taskset -c 2,3" ""; do
    for v in base wm; do
      echo "== round $r ${cpus:-unbound} $v"
      $cpus timeout 100 build/s31/$v/bin/mpirun -n 2 $emu 2 $W/gb-$v -o bw -b 64K -e 256K -f 4 -w 5 -n 50 2>&1 | grep -v "^#" | awk '{print "bw", $1, $7}'
      $cpus timeout 100 build/s31/$v/bin/mpirun -n 2 $emu 2 $W/gb-$v -o bw -b 1M -e 64M -f 4 -w 1 -n 3 2>&1 | grep -v "^#" | awk '{print "bw", $1, $7}'
      $cpus timeout 100 build/s31/$v/bin/mpirun -n 2 $emu 2 $W/gb-$v -o pingpong -b 8 -e 1M -f 8 -w 100 -n 1000 2>&1 | grep -v "^#" | awk '{print "pp", $1, $10}'
    done
  done
done
