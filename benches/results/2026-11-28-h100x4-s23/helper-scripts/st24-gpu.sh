#!/bin/bash
# st24 (issue 24: the direct two-shot stream allreduce as the default from 16 MiB, its peers'
# outputs exchanged off the enqueue call). Usage: bash st24-gpu.sh PREFIX (PREFIX = build/st24;
# main's install beside it at build/main, or MAIN_PREFIX). Run from the copy of the st24 tree
# (tests/, benches/ here). <= 3 minutes (each step has its own time limit).
# 1. correctness: gpu_stream at 2 and 4 ranks, defaults; direct forced from 16 B (two
#    communicators enqueued in opposite orders, staged buffers on one rank, in place, graphs,
#    fresh buffers, 300 calls in flight); direct forced with no wait for the table entry.
# 2. gpu_stream bench allreduce 1 MiB - 1 GiB (x4), 2 and 4 ranks: main, new (direct from 16 MiB),
#    new with direct from 1 MiB, one after another; NCCL -z 0 beside them.
set -u
P=${1:?usage: st24-gpu.sh PREFIX}
M=${MAIN_PREFIX:-$(dirname "$P")/main}
OUT=${OUT:-/tmp/st24out}; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export GPUMPI_TEST_CUDART=${GPUMPI_TEST_CUDART:-/usr/local/cuda/lib64/libcudart.so}
T0=$(date +%s)
el() { echo "[+$(( $(date +%s) - T0 ))s]"; }
date -u; uptime; nvidia-smi -L | head -4
for x in "$P" "$M"; do
    t=$(basename "$x")
    "$x/bin/mpicc" -O2 -Itests/gpu -o "$OUT/gs-$t" tests/gpu/gpu_stream.c -ldl -lm -lpthread || echo "build failed: $x"
done
"$P/bin/mpicc" -std=c99 -O2 -o "$OUT/gb" benches/gpumpi-bench.c -ldl -lm
NEW=$OUT/gs-$(basename "$P") OLD=$OUT/gs-$(basename "$M")
VARS="-x GPUMPI_DEBUG -x GPUMPI_STREAM_DIRECT_MIN -x GPUMPI_STREAM_DIRECT_MIN_WIDE -x GPUMPI_STREAM_DIRECT_WAIT_US -x GPUMPI_STREAM_LL_MAX -x GPUMPI_STREAM_LL_MAX_WIDE -x GPUMPI_STREAM_SCRATCH -x GPUMPI_STREAM_BLOCKS"
gs() { # label ranks limit env... : gpu_stream checks with the debug log
    local label=$1 n=$2 lim=$3; shift 3
    env GPUMPI_DEBUG=2 "$@" timeout $((lim + 5)) "$P/bin/mpirun" -n $n --oversubscribe --timeout $lim $VARS \
        "$NEW" 2>&1 | grep -v "not set in mpirun.s environment" > "$OUT/gs.log"
    local rc=${PIPESTATUS[0]}
    echo "$label -n $n: rc=$rc $(grep -E '^(PASS|FAIL|SKIP)' "$OUT/gs.log" | head -1) $(el)"
    echo "   allreduce lines: $(grep -c 'MPIX_Allreduce_enqueue: stream kernel (direct two-shot)' "$OUT/gs.log") direct, $(grep -c 'direct two-shot through the scratch' "$OUT/gs.log") offered nothing, $(grep -c 'MPIX_Allreduce_enqueue: host-function fallback' "$OUT/gs.log") fallback"
    if [ $rc != 0 ]; then
        grep -E "^rank [0-9]+:|FAIL|panick|error" "$OUT/gs.log" | head -20
        grep -v "DEBUG\|INFO" "$OUT/gs.log" | tail -15
    fi
}
echo "== 1. correctness $(el)"
for n in 2 4; do
    gs "defaults" $n 40 X=1
    gs "direct from 16 B, 64 KiB slots, 3 blocks" $n 40 GPUMPI_STREAM_DIRECT_MIN=16 GPUMPI_STREAM_DIRECT_MIN_WIDE=16 \
        GPUMPI_STREAM_LL_MAX=0 GPUMPI_STREAM_LL_MAX_WIDE=0 GPUMPI_STREAM_SCRATCH=256k GPUMPI_STREAM_BLOCKS=3
    gs "direct from 16 B, no wait for the table" $n 40 GPUMPI_STREAM_DIRECT_MIN=16 GPUMPI_STREAM_DIRECT_MIN_WIDE=16 \
        GPUMPI_STREAM_DIRECT_WAIT_US=0 GPUMPI_STREAM_LL_MAX=0 GPUMPI_STREAM_LL_MAX_WIDE=0
done
echo "== 2. gpu_stream bench allreduce 1 MiB - 1 GiB x4 (us per call, median of 5, slowest rank: blocking / back to back / graph) $(el)"
B() { # label prog ranks env...
    local label=$1 prog=$2 n=$3; shift 3
    echo "-- $label -n $n $(el)"
    env "$@" timeout 40 "$P/bin/mpirun" -n $n --oversubscribe --timeout 35 $VARS "$prog" bench 1073741824 1048576 4 \
        2>&1 | grep -v "^#" | grep -E "^ *[0-9]"
}
for n in 2 4; do
    B "main" "$OLD" $n X=1
    B "new (direct from 16 MiB)" "$NEW" $n X=1
    echo "-- new (direct from 1 MiB), 1-16 MiB only -n $n $(el)"
    env GPUMPI_STREAM_DIRECT_MIN=1m GPUMPI_STREAM_DIRECT_MIN_WIDE=1m timeout 30 "$P/bin/mpirun" -n $n --oversubscribe \
        --timeout 25 $VARS "$NEW" bench 16777216 1048576 4 2>&1 | grep -v "^#" | grep -E "^ *[0-9]"
    echo "-- NCCL -z 0 -n $n (size:median us) $(el)"
    timeout 40 "$P/bin/mpirun" -n $n --oversubscribe --timeout 35 "$OUT/gb" -B nccl -d cuda -z 0 -o allreduce \
        -t int32 -b 1M -e 1G -f 4 -w 5 -n 20 2>&1 | awk '!/^#/ && NF >= 10 {printf "%s:%s ", $1, $10} END {print ""}'
done
echo "== done $(el)"; uptime
