#!/usr/bin/env bash
# Device point-to-point bandwidth between 2 emulated nodes on one GPU machine (GPUMPI_NODE_ID per
# rank through scripts/emulate-nodes.sh, loopback TCP between the "nodes"), side by side in one
# run: device messages pipelined through host memory (GPUMPI_NET_GPU_PIPELINE=1, the default:
# chunks copied device to host while earlier ones are on the wire) against the whole-message
# staging (GPUMPI_NET_GPU_PIPELINE=0), alternating ROUNDS times. Each line: size, then GB/s of
# each run (best of 3 trials per run; rank 0 -> rank 1, window of 4 messages, REPS messages per
# size).
#
# usage: benches/gpu_net_bench.sh GPUMPI_PREFIX [MAX_BYTES]
#   env: ROUNDS (2), REPS (20), CHUNK (GPUMPI_NET_GPU_CHUNK, default 1m), DEPTH (4)
# Needs 2 ranks' worth of GPUs (1 or 2 visible GPUs: rank r takes GPU r mod count).
set -uo pipefail
prefix=${1:?usage: gpu_net_bench.sh GPUMPI_PREFIX [MAX_BYTES]}
max=${2:-$((64 << 20))}
rounds=${ROUNDS:-2} reps=${REPS:-20}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
out=$(mktemp -d /tmp/gpu-net-bench.XXXXXX)
"$prefix/bin/mpicc" -O2 -I"$repo/tests/gpu" -o "$out/gpu_net" "$repo/tests/gpu/gpu_net.c" -ldl -lm || exit 1
export NCCL_NVLS_ENABLE=0
echo "# $(date -u +%FT%TZ) $(uname -n), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
nvidia-smi -L 2>/dev/null | sed 's/^/# /'
echo "# chunk ${CHUNK:-1m} x depth ${DEPTH:-4}; $reps messages per size; $rounds rounds"
runs=()
for r in $(seq "$rounds"); do
    for mode in 1 0; do
        name=staged; [ "$mode" = 1 ] && name=piped
        f="$out/$name.round$r"
        GPUMPI_NET_GPU_PIPELINE=$mode GPUMPI_NET_GPU_CHUNK=${CHUNK:-1m} GPUMPI_NET_GPU_DEPTH=${DEPTH:-4} \
            "$prefix/bin/mpirun" -n 2 --timeout 600 -x GPUMPI_NET_GPU_PIPELINE -x GPUMPI_NET_GPU_CHUNK \
            -x GPUMPI_NET_GPU_DEPTH "$repo/scripts/emulate-nodes.sh" 2 "$out/gpu_net" bench "$max" "$reps" \
            >"$f" 2>"$f.err" || { echo "run pipeline=$mode round $r failed:"; tail -20 "$f.err"; exit 1; }
        grep -q "^SKIP" "$f" && { cat "$f"; exit 0; }
        runs+=("$f")
    done
done
printf "%12s" bytes
for f in "${runs[@]}"; do printf " %18s" "$(basename "$f")"; done
echo
printf "%12s" ""
for f in "${runs[@]}"; do printf " %18s" "GB/s"; done
echo
grep -v '^#' "${runs[0]}" | awk '{print $1}' | while read -r n; do
    printf "%12s" "$n"
    for f in "${runs[@]}"; do
        printf " %18s" "$(awk -v n="$n" '$1 == n {print $3}' "$f")"
    done
    echo
done
echo "# piped = GPUMPI_NET_GPU_PIPELINE=1 (default), staged = GPUMPI_NET_GPU_PIPELINE=0; raw output in $out"
