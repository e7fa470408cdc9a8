#!/bin/bash
# mb16 round 1 (issue 16: small device point-to-point). Usage: bash mb16-gpu.sh PREFIX
# (PREFIX = build/mb16; main's install is expected beside it at build/main). Run from the copy
# of the mb16 tree (benches/, tests/ here). <= 3 minutes.
# 1. micro (no MPI): echo with 1/2/4/8 polling warps and staggers; pull vs push pingpong.
# 2. correctness: gpu_test -n 2 default; -n 4 with 4 pollers and every pull up to 1 MiB on the
#    one-block kernel (GPUMPI_GPU_PULL_NARROW_MAX=1m, GPUMPI_GPU_P2P_PUSH=off).
# 3. gpumpi-bench pingpong 1 B - 1 MiB, base (main) vs new settings interleaved, 3 rounds.
set -u
P=${1:?usage: mb16-gpu.sh PREFIX}
M=${MAIN_PREFIX:-$(dirname "$P")/main}
OUT=${OUT:-/tmp/mb16out}; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
T0=$(date +%s)
el() { echo "[+$(( $(date +%s) - T0 ))s]"; }
date -u; uptime; nvidia-smi -L | head -4; git -C "$P/.." log -1 --oneline 2>/dev/null
echo "== 1. micro: p2plat (2 GPUs, 20000 iterations per row) $(el)"
if $NVCC -O3 -arch=sm_90 -Ibenches/micro -o "$OUT/p2plat" benches/micro/p2plat.cu -lpthread; then
    CUDA_VISIBLE_DEVICES=0,1 timeout 60 "$OUT/p2plat" 20000; echo "rc=$?"
fi
echo "== 1b. micro: mailbox (2 GPUs) $(el)"
if $NVCC -O3 -arch=sm_90 -Ibenches/micro -o "$OUT/mailbox" benches/micro/mailbox.cu -lpthread; then
    CUDA_VISIBLE_DEVICES=0,1 timeout 30 "$OUT/mailbox" 20000 2 | grep -E "echo|pingpong"
fi
echo "== 2. correctness $(el)"
mkdir -p "$OUT/gt"
"$P/bin/mpicc" -O2 -Itests/gpu -o "$OUT/gt/gpu_test" tests/gpu/gpu_test.c -ldl -lm -lpthread || echo "gpu_test build failed"
gt() { # label env... : runs gpu_test, prints PASS/FAIL and, on failure, the log's tail and a debug rerun's tail
    local label=$1; shift
    env "$@" timeout 60 "$P/bin/mpirun" -n $N --oversubscribe --timeout 55 -x GPUMPI_GPU_RESIDENT_POLLERS \
        -x GPUMPI_GPU_PULL_NARROW_MAX -x GPUMPI_GPU_P2P_PUSH "$OUT/gt/gpu_test" 65537 > "$OUT/gt.log" 2>&1
    local rc=$?
    echo "$label: rc=$rc $(grep -E '^(PASS|FAIL|SKIP)' "$OUT/gt.log" | head -1)"
    if [ $rc != 0 ]; then
        grep -v "^gpu_test:" "$OUT/gt.log" | head -30
        env "$@" GPUMPI_DEBUG=1 timeout 30 "$P/bin/mpirun" -n $N --oversubscribe --timeout 25 -x GPUMPI_DEBUG \
            -x GPUMPI_GPU_RESIDENT_POLLERS -x GPUMPI_GPU_PULL_NARROW_MAX -x GPUMPI_GPU_P2P_PUSH \
            "$OUT/gt/gpu_test" 65537 > "$OUT/gt-debug.log" 2>&1
        echo "-- debug rerun rc=$? (last 40 lines)"; tail -40 "$OUT/gt-debug.log"
    fi
}
N=2 gt "gpu_test -n 2 (defaults)" X=1
N=4 gt "gpu_test -n 4 (4 pollers, one-block pulls to 1 MiB, all pulled)" GPUMPI_GPU_RESIDENT_POLLERS=4 \
    GPUMPI_GPU_PULL_NARROW_MAX=1m GPUMPI_GPU_P2P_PUSH=off
echo "== 3. pingpong -d cuda, 1 B - 1 MiB, median one-way us (-w 100 -n 1000) $(el)"
"$M/bin/mpicc" -std=c99 -O2 -o "$OUT/gb-main" benches/gpumpi-bench.c -ldl -lm
"$P/bin/mpicc" -std=c99 -O2 -o "$OUT/gb-new" benches/gpumpi-bench.c -ldl -lm
PP() { awk '!/^#/ && NF >= 10 {printf "%s:%s%s ", $1, $10, ($9 > 0 ? "!WRONG" : "")} END {print ""}'; }
pp() { # label prefix bench env...
    local label=$1 pre=$2 b=$3; shift 3
    echo "$label: $(env "$@" timeout 40 "$pre/bin/mpirun" -n 2 -x GPUMPI_GPU_RESIDENT_POLLERS -x GPUMPI_GPU_RESIDENT_STAGGER_NS \
        -x GPUMPI_GPU_PULL_NARROW_MAX "$OUT/$b" -d cuda -o pingpong -b 1 -e 1M -f 2 -w 100 -n 1000 2>&1 | PP)"
}
for r in 1 2 3; do
    echo "-- round $r $(el)"
    pp "base      " "$M" gb-main X=1
    pp "new       " "$P" gb-new X=1
    pp "new P2    " "$P" gb-new GPUMPI_GPU_RESIDENT_POLLERS=2
    pp "new P4    " "$P" gb-new GPUMPI_GPU_RESIDENT_POLLERS=4
    pp "new P4s150" "$P" gb-new GPUMPI_GPU_RESIDENT_POLLERS=4 GPUMPI_GPU_RESIDENT_STAGGER_NS=150
    pp "new N256k " "$P" gb-new GPUMPI_GPU_PULL_NARROW_MAX=256k
    pp "new N1m P4" "$P" gb-new GPUMPI_GPU_PULL_NARROW_MAX=1m GPUMPI_GPU_RESIDENT_POLLERS=4
    [ $(( $(date +%s) - T0 )) -gt 160 ] && { echo "time budget reached after round $r"; break; }
done
echo "== done $(el)"; uptime
