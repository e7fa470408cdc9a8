#!/usr/bin/env bash
# Variant sweep for the GPU-native paths at one size (benches/NOTES.md records the results):
#   benches/gpu_tune.sh PREFIX [NP] [SIZE]
# NCCL first (same run, same machine), then gpumpi allreduce and alltoall variants
# (VARIANTS="op:algo ...", names as in src/gpu/nvlink/tuning.txt), each at the block counts in BLOCKS
# (GPUMPI_GPU_BLOCKS), the whole list REPEAT times (interleaved, to see the run-to-run
# spread), then sendrecv (copy engines, copy kernel) unless SENDRECV=0. Blocking mode (-z 1).
# NVLink multicast stays off.
set -u
P=${1:?usage: gpu_tune.sh PREFIX [NP] [SIZE]}
NP=${2:-4}
S=${3:-512M}
B=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export NCCL_NVLS_ENABLE=0
GB=${GB:-/tmp/gb}
[ -x "$GB" ] || "$P/bin/mpicc" -std=c99 -O2 -I "$B" -o "$GB" "$B/gpumpi-bench.c" -ldl -lm || exit 1
T=$(mktemp -d)
run() { # label env... -- bench args
    local label=$1; shift
    local line
    line=$(timeout 120 env "$@" 2>&1 | grep -E '^ +[0-9]+ ' | tail -1)
    printf '%-44s %s\n' "$label" "$line"
}
echo "# $(date -u) $NP ranks, $S, blocking; columns: size count type redop root time algbw busbw #wrong med min"
nccl() { run "nccl $1" "$P/bin/mpirun" -n "$NP" "$GB" -B nccl -o "$1" -b $S -e $S -w 3 -n 10 -z 1; }
VARIANTS=${VARIANTS:-allreduce:two_shot allreduce:two_shot_push alltoall:direct alltoall:pull}
for rep in $(seq "${REPEAT:-1}"); do
    for op in $(printf '%s\n' $VARIANTS | cut -d: -f1 | sort -u); do nccl "$op"; done
    for oa in $VARIANTS; do
        op=${oa%%:*} a=${oa#*:}
        echo "$op $a" > "$T/${op}_$a"
        for blk in ${BLOCKS:-132 264 528}; do
            run "gpumpi $op $a blocks=$blk" GPUMPI_GPU_COLL_TUNING="$T/${op}_$a" GPUMPI_GPU_BLOCKS=$blk \
                "$P/bin/mpirun" -n "$NP" "$GB" -d cuda -o "$op" -b $S -e $S -w 3 -n 10 -z 1
        done
    done
done
[ "${SENDRECV:-1}" = 0 ] && exit 0
nccl sendrecv
run "gpumpi sendrecv ce" GPUMPI_GPU_P2P_COPY=ce \
    "$P/bin/mpirun" -n "$NP" "$GB" -d cuda -o sendrecv -b $S -e $S -w 3 -n 10 -z 1
for blk in 132 264 528; do
    run "gpumpi sendrecv kernel blocks=$blk" GPUMPI_GPU_P2P_COPY=kernel GPUMPI_GPU_BLOCKS=$blk \
        "$P/bin/mpirun" -n "$NP" "$GB" -d cuda -o sendrecv -b $S -e $S -w 3 -n 10 -z 1
done
