#!/usr/bin/env bash
# Device point-to-point between 2 emulated nodes on one GPU machine (scripts/emulate-nodes.sh:
# GPUMPI_NODE_ID and NCCL_HOSTID per rank, loopback TCP), two gpumpi installs side by side
# (rounds interleaved), with NCCL's socket transport in the same run and each rank on its own
# GPU (CUDA_VISIBLE_DEVICES = rank mod GPUs):
# - benches/micro/dev_call_cost.c: MPI_Send and MPI_Recv timed alone (8 B, 32 KiB, 256 KiB),
#   beside cudaMemcpy from and to page-locked and pageable host memory;
# - gpumpi-bench pingpong 8 B - 4 MiB (one-way us), device buffers, then host buffers (control);
# - NEW only: GPUMPI_NET_SLEEP_AFTER=off (blocking waits never sleep in poll: what the wake-up
#   costs), and one GPUMPI_DEBUG=2 run whose end-of-run lines say where the device messages spent
#   their time and how often the waits slept.
#
#   benches/devnet_bench.sh BASE_PREFIX NEW_PREFIX      (env: ROUNDS=2, ITERS=2000)
set -uo pipefail
BASE=${1:?usage: devnet_bench.sh BASE_PREFIX NEW_PREFIX}
NEW=${2:?usage: devnet_bench.sh BASE_PREFIX NEW_PREFIX}
here=$(cd "$(dirname "$0")/.." && pwd)
emu="$here/scripts/emulate-nodes.sh"
rounds=${ROUNDS:-2} iters=${ITERS:-2000}
work=$(mktemp -d /tmp/devnet.XXXXXX)
trap 'rm -rf "$work"' EXIT
export NCCL_NVLS_ENABLE=0 NCCL_NET=Socket NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1
NCCL_LIB=$(python3 -c "import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=${NCCL_LIB}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}

echo "# $(date -u +%FT%TZ) $(uname -n), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
nvidia-smi -L | sed 's/^/# /'
for v in base new; do
    P=$BASE
    [ $v = new ] && P=$NEW
    "$P/bin/mpicc" -std=c99 -O2 -I "$here/tests/gpu" -I "$here/benches/micro" \
        -o "$work/dcc-$v" "$here/benches/micro/dev_call_cost.c" -ldl || exit 1
    "$P/bin/mpicc" -std=c99 -O2 -o "$work/gb-$v" "$here/benches/gpumpi-bench.c" -ldl -lm || exit 1
done
ngpu=$(nvidia-smi -L | wc -l)
cat >"$work/gpu-per-rank.sh" <<SH
#!/bin/sh
r=\${GPUMPI_RANK:-\${OMPI_COMM_WORLD_RANK:-\${PMI_RANK:-0}}}
CUDA_VISIBLE_DEVICES=\$((r % $ngpu)) exec "\$@"
SH
chmod +x "$work/gpu-per-rank.sh"
# run VARIANT PROGRAM ARGS...: 2 ranks on 2 emulated nodes, one GPU each.
run() {
    local v=$1 P=$BASE
    shift
    [ "$v" = new ] && P=$NEW
    timeout 300 "$P/bin/mpirun" -n 2 "$emu" 2 "$work/gpu-per-rank.sh" "$@"
}
pp=(-o pingpong -b 8 -e 4M -f 8 -w 100 -n 1000)
for r in $(seq "$rounds"); do
    for v in base new; do
        for bytes in 8 32768 262144; do
            echo "== round $r $v dev_call_cost $bytes B"
            run $v "$work/dcc-$v" "$iters" "$bytes"
        done
        echo "== round $r $v gpumpi-bench device ${pp[*]}"
        run $v "$work/gb-$v" -d cuda "${pp[@]}"
        echo "== round $r $v gpumpi-bench host ${pp[*]}"
        run $v "$work/gb-$v" "${pp[@]}"
    done
    echo "== round $r NCCL socket device ${pp[*]}"
    run new "$work/gb-new" -B nccl -d cuda "${pp[@]}"
    for bytes in 32768 262144; do
        echo "== round $r new GPUMPI_NET_SLEEP_AFTER=off dev_call_cost $bytes B"
        GPUMPI_NET_SLEEP_AFTER=off run new "$work/dcc-new" "$iters" "$bytes"
    done
    echo "== round $r new GPUMPI_NET_SLEEP_AFTER=off gpumpi-bench device ${pp[*]}"
    GPUMPI_NET_SLEEP_AFTER=off run new "$work/gb-new" -d cuda "${pp[@]}"
done
for bytes in 32768 262144; do
    echo "== new GPUMPI_DEBUG=2 dev_call_cost $bytes B (the end-of-run lines)"
    GPUMPI_DEBUG=2 run new "$work/dcc-new" "$iters" "$bytes" 2>&1 |
        grep -E "MPI_Send|device messages between nodes|blocking waits slept"
done
echo "# done $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
