#!/bin/bash
# One-way latency (pingpong) and windowed bandwidth (bw, 64 in flight) at 16/24/32/48/64 KiB
# between 2 emulated nodes x 1 rank (scripts/emulate-nodes.sh, loopback TCP), installs
# interleaved, 3 rounds.
#   eager_bench.sh LABEL=PREFIX...   e.g. base=/tmp/base new=/tmp/new
here=$(cd "$(dirname "$0")/../../.." && pwd)
emu=$here/scripts/emulate-nodes.sh
work=$(mktemp -d /tmp/eager_bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
for lp in "$@"; do
    "${lp#*=}/bin/mpicc" -std=c99 -O2 -o "$work/gb-${lp%%=*}" "$here/benches/gpumpi-bench.c" -ldl -lm || exit 1
done
for r in 1 2 3; do
    for lp in "$@"; do
        v=${lp%%=*} P=${lp#*=}
        echo "== round $r $v $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
        for args in "-o pingpong -b 16K -e 64K -f 2 -w 200 -n 2000" "-o pingpong -b 24K -e 48K -f 2 -w 200 -n 2000" \
                    "-o bw -b 16K -e 64K -f 2 -w 10 -n 100" "-o bw -b 24K -e 48K -f 2 -w 10 -n 100"; do
            timeout 300 "$P/bin/mpirun" -n 2 "$emu" 2 "$work/gb-$v" $args | grep -v "^#" | grep -v "^\s*$"
        done
    done
done
