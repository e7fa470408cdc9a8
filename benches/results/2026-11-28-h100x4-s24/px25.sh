#!/bin/bash
# px25 (issue 19: PXN no slower than without at any size). Usage: bash px25.sh PREFIX
# (PREFIX = an install of the px25 tree: scripts/install.sh --prefix PREFIX). Run as root from
# the copy of the px25 tree (benches/, scripts/ here); needs iproute2 (namespace nodes). No GPU
# is used: this checks the model's other branch, ranks with a CPU each (the build VM has 8
# ranks on 2 CPUs), where `GPUMPI_PXN_ALLTOALL=auto` takes the rail aggregators below the bulk
# threshold instead of the node leaders. <= 6 minutes.
# 1. correctness: coll_data at 2 x 4 on 2 rails with PXN on, auto (now rails below 64 KiB per
#    node block) and forced leaders / forwarders (blocking alltoallv through the forwarders).
# 2. time: benches/pxn_bench.sh 2x2 and 2x4, modes PXN off, auto, leaders, rails, forwarders,
#    16 KiB - 1 MiB per rank, 7 rounds. Check: auto (= rails here) within noise of PXN off and
#    of 1:leaders at 16-64 KiB (the model says the aggregators cost no more with a CPU per
#    rank); if 1:leaders is clearly faster than auto there, the CPU condition is wrong.
set -u
P=${1:?usage: px25.sh PREFIX}
OUT=${OUT:-/tmp/px25out}; mkdir -p "$OUT"
date -u; uptime; nproc
echo "== 1. correctness"
"$P/bin/mpicc" -std=c99 -O2 -o "$OUT/coll_data" tests/c/coll_data.c -lm || exit 1
for sched in auto leaders forwarders; do
    GPUMPI_PXN=1 GPUMPI_PXN_ALLTOALL=$sched GPUMPI_DEBUG=2 timeout 170 "$P/bin/mpirun" --oversubscribe -n 8 \
        --timeout 160 scripts/emulate-nodes.sh --rails 2 2 "$OUT/coll_data" blocking > "$OUT/cd-$sched.log" 2>&1
    echo "coll_data 8 $sched: rc=$? $(grep -c '^OK' "$OUT/cd-$sched.log") OK;" \
        "$(grep -o 'alltoall[vw]* through the PXN [a-z ]* over' "$OUT/cd-$sched.log" | sort | uniq -c | tr '\n' ';')"
done
echo "== 2. time"
LAYOUTS="2 4" SIZES="-b 16K -e 1M -f 4" MODES="0 1 1:leaders 1:rails 1:forwarders" ROUNDS=7 ITERS=20 \
    COUNT=200 CMAX=1M bash benches/pxn_bench.sh "$P" "$OUT/bench"
uptime
