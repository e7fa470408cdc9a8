#!/usr/bin/env bash
# dx20: device collectives between emulated nodes on the device buffers themselves
# (GPUMPI_COLL_DEVICE; src/engine/coll.rs device steps), over GPUMPI_NET=ib with the libibverbs
# test double (GPUDirect RDMA through dma-buf), PXN off and on; base (main) vs new side by side.
#   bash dx20-gpu.sh PREFIX        (PREFIX = build/dx20; main's install at build/main beside it)
set -uo pipefail
prefix=${1:?usage: dx20-gpu.sh PREFIX}
base=$(dirname "$prefix")/main
src=$PWD
[ -f "$src/tests/gpu/gpu_net.c" ] || src=$(dirname "$prefix")/dx20src
out=$(mktemp -d)
trap 'rm -rf "$out" /dev/shm/gpumpi-fakeibv-dx20-$$-*' EXIT
export NCCL_NVLS_ENABLE=0
echo "== dx20 GPU run $(date -u +%H:%M:%S) src=$src prefix=$prefix base=$base"
nvidia-smi -L 2>/dev/null | head -4
uptime
cc -shared -fPIC -O1 -Wall -o "$out/libfakeibverbs.so" "$src/tests/support/fake_ibverbs.c" -ldl ||
    { echo "FAIL: the libibverbs test double does not build"; exit 1; }
for v in dx20 main; do
    p=$prefix; [ $v = main ] && p=$base
    "$p/bin/mpicc" -O2 -I"$src/tests/gpu" -o "$out/gpu_net_$v" "$src/tests/gpu/gpu_net.c" -ldl -lm -lpthread ||
        { echo "FAIL: gpu_net does not build against $p"; exit 1; }
done
emu="$src/scripts/emulate-nodes.sh"
k=0
tmo=60
# run LABEL VERSION N [VAR=VAL...] -- [--rails R] ARGS...: gpu_net over 2 emulated nodes, ib double
run() {
    local label=$1 v=$2 n=$3 vars=() xs=() rails=()
    shift 3
    while [ "$1" != -- ]; do vars+=("$1"); xs+=(-x "${1%%=*}"); shift; done
    shift
    if [ "${1:-}" = --rails ]; then rails=(--rails "$2"); shift 2; fi
    k=$((k + 1))
    local p=$prefix log="$out/run$k.log"
    [ $v = main ] && p=$base
    echo "== $label ($v, $n ranks${vars[*]:+, ${vars[*]}})"
    local t0=$SECONDS
    env GPUMPI_NET=ib GPUMPI_IBVERBS_LIB="$out/libfakeibverbs.so" \
        FAKEIBV_FABRIC="/dev/shm/gpumpi-fakeibv-dx20-$$-$k" GPUMPI_DEBUG=1 "${vars[@]}" \
        timeout $((tmo + 10)) "$p/bin/mpirun" -n "$n" --oversubscribe --timeout $tmo -x GPUMPI_NET \
        -x GPUMPI_IBVERBS_LIB -x FAKEIBV_FABRIC -x GPUMPI_DEBUG "${xs[@]}" \
        "$emu" "${rails[@]}" 2 "$out/gpu_net_$v" "$@" >"$log" 2>&1
    local rc=$?
    echo "exit $rc in $((SECONDS - t0)) s"
    grep -E "^(PASS|FAIL|SKIP)|^coll |rank [0-9]+: .*(GPUDirect RDMA for device|collective steps on device|PXN o)|device memory \(GPUDirect|^rank [0-9]+: .* at [0-9]+ bytes" "$log" |
        sed -e 's/^.*gpumpi[^ ]* //' | sort | uniq -c | sort -k2 | head -40
    [ $rc -eq 0 ] || tail -25 "$log"
}
# `auto` is now off: the full gpu_net must pass (staged); then the same with device steps forced
# (GPUMPI_COLL_DEVICE=1) at three largest sizes, to find the call and size whose RDMA write
# fails (GPUMPI_DEBUG=2 logs each call that ran device steps: the last ones before the error).
run "gpu_net (all device collectives) over ib, auto (now off: staged)" dx20 4 -- 4194316
tmo=25
for m in 65536 1048577 4194316; do
    run "gpu_net up to $m bytes over ib, device steps forced (GPUMPI_COLL_DEVICE=1)" dx20 4 GPUMPI_COLL_DEVICE=1 -- $m
done
echo "== the last calls before the failure (GPUMPI_DEBUG=2, 4194316, device steps forced)"
env GPUMPI_NET=ib GPUMPI_IBVERBS_LIB="$out/libfakeibverbs.so" FAKEIBV_FABRIC="/dev/shm/gpumpi-fakeibv-dx20-$$-d2" \
    GPUMPI_DEBUG=2 GPUMPI_COLL_DEVICE=1 timeout 35 "$prefix/bin/mpirun" -n 4 --oversubscribe --timeout 25 \
    -x GPUMPI_NET -x GPUMPI_IBVERBS_LIB -x FAKEIBV_FABRIC -x GPUMPI_DEBUG -x GPUMPI_COLL_DEVICE \
    "$emu" 2 "$out/gpu_net_dx20" 4194316 >"$out/d2.log" 2>&1
echo "exit $?"
grep -nE "rank 0|^(PASS|FAIL)|ERROR|fakeibv|CUDA error" "$out/d2.log" | grep -vE "INFO (CUDA|MPI_Init)" | tail -40
grep -nE "ERROR|fakeibv|CUDA error" "$out/d2.log" | head -10
tmo=60
# The timed collectives, device steps forced (1) vs staged (0) vs main, PXN off and on.
run "gpu_net coll, device steps (GPUMPI_COLL_DEVICE=1)" dx20 4 GPUMPI_COLL_DEVICE=1 -- coll 4194304 5
run "gpu_net coll, staged (GPUMPI_COLL_DEVICE=0)" dx20 4 GPUMPI_COLL_DEVICE=0 -- coll 4194304 5
run "gpu_net coll, base" main 4 -- coll 4194304 5
run "gpu_net coll, PXN, device steps (GPUMPI_COLL_DEVICE=1)" dx20 4 GPUMPI_COLL_DEVICE=1 GPUMPI_PXN=1 FAKEIBV_DEVICES=fake0,fake1 -- --rails 2 coll 4194304 5
run "gpu_net coll, PXN, staged (GPUMPI_COLL_DEVICE=0)" dx20 4 GPUMPI_PXN=1 FAKEIBV_DEVICES=fake0,fake1 GPUMPI_COLL_DEVICE=0 -- --rails 2 coll 4194304 5
# Device steps without GPUDirect RDMA (TCP: the engine's pipeline per message), forced on.
echo "== gpu_net coll over TCP, device steps forced (GPUMPI_COLL_DEVICE=1)"
GPUMPI_DEBUG=1 GPUMPI_COLL_DEVICE=1 timeout 100 "$prefix/bin/mpirun" -n 4 --oversubscribe --timeout 90 \
    -x GPUMPI_DEBUG -x GPUMPI_COLL_DEVICE "$emu" 2 "$out/gpu_net_dx20" coll 4194304 3 >"$out/tcp.log" 2>&1
echo "exit $?"
grep -E "^(PASS|FAIL|SKIP)|^coll |collective steps on device" "$out/tcp.log" | sed -e 's/^.*gpumpi[^ ]* //' | head -30
echo "== done $(date -u +%H:%M:%S)"
