#!/usr/bin/env bash
# Across 2 emulated nodes on one machine (scripts/emulate-nodes.sh: GPUMPI_NODE_ID, and
# NCCL_HOSTID for NCCL, per rank; loopback TCP between the "nodes"), side by side in one run:
# raw loopback TCP (1 and 4 streams: the limit), gpumpi beside Open MPI (`--mca btl tcp,self`)
# on host buffers, and, where a GPU and NCCL are present, gpumpi beside NCCL's socket transport
# (`NCCL_NET=Socket`, `NCCL_SOCKET_IFNAME=lo`) on device buffers. For the issue's targets on
# a GPU machine, which has no `ip` tool for namespace nodes (benches/netns_bench.sh there).
#
#   benches/emunodes_bench.sh GPUMPI_PREFIX [OMPI_BIN_DIR]
#   env: NP (2 ranks, one per node), ROUNDS (2: gpumpi and the other MPI alternate), QUICK=1,
#        SKIP_HOST=1 / SKIP_DEVICE=1 (only the other part)
#
# Output: gpumpi-bench's tables (one-way us for pingpong, GB/s for bw, us and bus GB/s for the
# collectives), each run labelled. Open MPI is skipped when no Open MPI mpicc is found.
set -uo pipefail
P=${1:?usage: emunodes_bench.sh GPUMPI_PREFIX [OMPI_BIN_DIR]}
here=$(cd "$(dirname "$0")/.." && pwd)
emu="$here/scripts/emulate-nodes.sh"
np=${NP:-2} rounds=${ROUNDS:-2}
work=$(mktemp -d /tmp/emunodes.XXXXXX)
trap 'rm -rf "$work"' EXIT
export NCCL_NVLS_ENABLE=0

echo "# $(date -u +%FT%TZ) $(uname -n), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
"$P/bin/mpicc" -std=c99 -O2 -o "$work/gb" "$here/benches/gpumpi-bench.c" -ldl -lm || exit 1

ompi=${2:-}
if [ -z "$ompi" ]; then
    for d in /usr/bin /usr/local/bin /opt/openmpi/bin /usr/lib/x86_64-linux-gnu/openmpi/bin; do
        if [ -x "$d/ompi_info" ]; then ompi=$d; break; fi
    done
fi
if [ -n "$ompi" ] && "$ompi/mpicc" -std=c99 -O2 -o "$work/gb-ompi" "$here/benches/gpumpi-bench.c" -ldl -lm; then
    echo "# Open MPI: $("$ompi/ompi_info" --version 2>/dev/null | head -1)"
else
    echo "# Open MPI: not found, skipped"
    ompi=
fi

port=$((47000 + $$ % 1000))
cc -O2 -pthread -o "$work/raw_tcp" "$here/benches/raw_tcp.c" || exit 1
for s in 1 4; do
    "$work/raw_tcp" recv 127.0.0.1 "$port" "$s" 1048576 spin &
    r=$!
    sleep 0.3
    "$work/raw_tcp" send 127.0.0.1 "$port" "$s" 3 1048576 spin
    wait "$r"
    port=$((port + 1))
done

big=64M iters=(-w 5 -n 50)
[ "${QUICK:-0}" = 1 ] && big=4M iters=(-w 3 -n 20)
gpumpi() { timeout 300 "$P/bin/mpirun" -n "$np" "$emu" 2 "$work/gb" "$@"; }
openmpi() {
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 300 "$ompi/mpirun" \
        --oversubscribe -n "$np" --mca btl tcp,self --mca btl_tcp_if_include lo --mca pml ob1 \
        "$work/gb-ompi" "$@"
}
host_runs=(
    "-o pingpong -b 8 -e 64K -f 8 -w 200 -n 2000"
    "-o bw -b 64K -e $big -f 4 ${iters[*]}"
    "-o allreduce -b 8 -e $big -f 8 ${iters[*]}"
)
[ "${SKIP_HOST:-0}" = 1 ] && host_runs=()
for r in $(seq "$rounds"); do
    for args in "${host_runs[@]}"; do
        echo "== round $r host gpumpi: $args"
        gpumpi $args
        if [ -n "$ompi" ]; then
            echo "== round $r host Open MPI tcp: $args"
            openmpi $args
        fi
    done
done

[ "${SKIP_DEVICE:-0}" = 1 ] && exit 0
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "# no GPU: device runs skipped"
    exit 0
fi
nvidia-smi -L | sed 's/^/# /'
# One GPU per rank: gpumpi-bench picks the device by local rank, which is 0 on every emulated
# node, so each rank sees only GPU (rank mod GPUs) (several ranks on one GPU would time-slice).
ngpu=$(nvidia-smi -L | wc -l)
cat >"$work/gpu-per-rank.sh" <<SH
#!/bin/sh
r=\${GPUMPI_RANK:-\${OMPI_COMM_WORLD_RANK:-\${PMI_RANK:-0}}}
CUDA_VISIBLE_DEVICES=\$((r % $ngpu)) exec "\$@"
SH
chmod +x "$work/gpu-per-rank.sh"
gpumpi_dev() { timeout 300 "$P/bin/mpirun" -n "$np" "$emu" 2 "$work/gpu-per-rank.sh" "$work/gb" "$@"; }
NCCL_LIB=$(python3 -c "import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=${NCCL_LIB}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export NCCL_NET=Socket NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1
dev_runs=(
    "-o pingpong -b 8 -e 1M -f 8 -w 100 -n 1000"
    "-o allreduce -b 8 -e 128M -f 8 -w 5 -n 30"
    "-o alltoall -b 64 -e 128M -f 8 -w 5 -n 30"
)
for r in $(seq "$rounds"); do
    for args in "${dev_runs[@]}"; do
        echo "== round $r device gpumpi: $args"
        gpumpi_dev -d cuda -z 1 $args
        echo "== round $r device NCCL socket: $args"
        gpumpi_dev -B nccl -z 1 $args
    done
done
