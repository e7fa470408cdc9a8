#!/usr/bin/env bash
# Build and run the GPU tests against an installed gpumpi:
#   tests/gpu/run.sh PREFIX [--bench] [--max-count N]
# Runs gpu_test at 1, 2 and 4 ranks (one GPU per rank, round-robin over the visible GPUs) and
# at 2 ranks sharing one GPU, then at 4 and 3 ranks with CUDA IPC forced off (collectives
# through pinned shared host memory, point-to-point staged), at 2 ranks with derived types packed on
# the host (GPUMPI_CUDA_PACK=0), at 4 ranks with the kernel peer copy, at 4 ranks with every
# device rendezvous pushed and at 2 ranks with every one pulled, at 2 ranks with every device
# pull above 16 KiB by the wide resident kernel (GPUMPI_GPU_PULL_WIDE_MAX=16m, all pulled) and at
# 4 ranks by the copy engine (GPUMPI_GPU_PULL_WIDE_MAX=0), at 3 and 4 ranks with every
# allreduce that two_shot_ring_push serves taking it (a GPU tuning table); gpu_mt runs device collectives from two threads (MPI_THREAD_MULTIPLE)
# at 2 and 4 ranks and at 4 ranks with CUDA IPC off. gpu_mem runs every memory kind (cudaMalloc, cuMemAlloc, cuMemCreate/VMM,
# cudaMallocHost, cudaHostRegister, managed, host) mixed between ranks at 2 and 4 ranks and at
# 4 ranks with CUDA IPC off; gpu_test at 2 and 4 ranks and gpu_mem at 4 ranks over 2 emulated
# nodes (scripts/emulate-nodes.sh: the network transport between them), and gpu_net (device
# send/recv, truncation and allreduce, 0 B..64 MiB) over 2 emulated nodes at 2 and 4 ranks,
# with small chunks, and staged whole (GPUMPI_NET_GPU_PIPELINE=0); `gpu_net gdr` runs device and
# host send/recv (0 B..64 MiB) at 2 ranks over 2 emulated nodes with GPUMPI_NET=ib over the
# libibverbs test double (tests/support/fake_ibverbs.c, built here with cc: real dma-buf
# registrations, device bytes moved by the double with CUDA copies) and checks from the debug log
# that every message from 64 KiB on went as one GPUDirect RDMA bulk transfer, nothing staged (it
# prints "SKIP: gpu_net gdr: <why>" without a C compiler or where the backend registers no device
# memory); gpu_net at 2 and 4 ranks (also with small chunks, staged whole, allreduce and
# alltoall in 64 KiB pieces and whole), gpu_test at 2 and 4 and gpu_mem at 4 ranks over 2
# emulated nodes run again with GPUMPI_NET=ib over the double (every rank must log its ib rail);
# gpu_net at 4 ranks over 2 emulated nodes on 2 rails with PXN on (GPUMPI_PXN=1), over TCP and
# over the double with device steps, must pass with 0 cross-rail network sends on every rank and
# frames forwarded inside the node; the whole gpu_net (0 B..4 MiB+12) runs at 4 ranks over the
# double with device steps (GPUMPI_COLL_DEVICE=1);
# `gpu_net coll` (device alltoall, allgather, bcast, allreduce) at 4 ranks over the double, PXN off
# and on, must run its collectives on the device buffers (every rank logs collective steps on
# device memory and GPUDirect RDMA receives), and once more forced over TCP
# (GPUMPI_COLL_DEVICE=1); `gpu_mem fd` checks from the debug log that cuMemCreate memory is
# mapped through POSIX descriptors; `gpu_mem big` runs its 1 GiB-per-buffer part once at 4 ranks (it
# prints "SKIP: gpu_mem big: <why>" when device memory is short). Without a CUDA runtime or device
# each run prints "SKIP: no CUDA device (<reason>)". err_matrix (tests/c) runs every misuse with
# device buffers at 1 and 2 ranks. gpu_churn creates and frees communicators with device
# collectives (300 cycles, 20 alive at once; 250 and 18 with CUDA IPC off) and checks that each
# sets up the resident path and gives its GPU state back. gpu_mismatch runs mismatched
# collectives on device buffers at 2 and 4 ranks and at 4 ranks with CUDA IPC off (every rank
# must get the standard's class from each, within 120 s, and later collectives must be right).
# gpu_resident_mid runs allreduce (every op and type the GPU kernels serve), alltoall and
# allgather from 4 B to 4 MiB, in place and not, at 2 and 4 ranks with the built-in resident
# table, at 4 ranks with one_shot and at 3 and 2 ranks with two_shot for every allreduce (and
# push for the others) up to 4 MiB, at 2 and 4 ranks with one_shot_ll and push_ll up to 1 MiB,
# at 2 and 4 ranks with one_shot_ll128 and push_ll128 up to 4 MiB and at 2 with them on 3 blocks
# (GPUMPI_GPU_RESIDENT_TUNING, GPUMPI_GPU_RESIDENT_MAX=4m; the 3-block runs with
# GPUMPI_GPU_RESIDENT_BLOCKS=3), and with the kernels idle 1 us at 2 and 4 ranks (they exit
# between calls); where every rank has its own GPU each run must
# set up the wide resident kernel on every rank (its debug log says so).
# gpu_stream runs every MPIX_*_enqueue form on device buffers (ordering with the caller's own
# stream work, two stream communicators at once, captured CUDA graphs replayed 1000 times) and
# MPIX_Allreduce_enqueue's stream kernel (every op and type, sizes around its boundaries, host
# buffers on one rank) and the stream kernels of bcast, allgather, alltoall and
# reduce_scatter_block (blocks around their block and slot boundaries, in place, back to back
# mixed with allreduce, in a replayed graph) at 2 and 4 ranks, again with 64 KiB slots and 3
# blocks (GPUMPI_STREAM_SCRATCH=256k GPUMPI_STREAM_BLOCKS=3), and at 2 ranks with the kernel off;
# with one GPU per rank the debug log must show every MPIX_Allreduce_enqueue on the stream
# kernel, and every bcast/allgather/alltoall/reduce_scatter_block enqueue but one
# non-contiguous bcast per rank.
# --bench also runs gpu_bench and `gpu_stream bench` (allreduce 8 B to 1 GiB: blocking, enqueued
# back-to-back, enqueued from a graph).
# Every run is a pass (exit 0 and a PASS line), a skip (exit 0 and a SKIP line) or a failure; the
# last line is "gpu: N passed, N failed, N skipped". On a machine with a GPU (`nvidia-smi -L`
# lists one, or GPUMPI_REQUIRE_GPU=1; GPUMPI_REQUIRE_GPU=0 says no) a skip fails the script
# unless GPUMPI_ALLOW_GPU_SKIP names it (comma-separated parts of run labels, or `all`).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
prefix=${1:?usage: run.sh PREFIX [--bench] [--max-count N]}
shift
bench=no
max=$((16 << 20))
tmo=${GPU_TEST_TIMEOUT:-300}
while [ $# -gt 0 ]; do
    case "$1" in
        --bench) bench=yes; shift ;;
        --max-count) max="$2"; shift 2 ;;
        *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
export NCCL_NVLS_ENABLE=0   # never NVLink multicast on shared machines
out=${GPU_TEST_BUILD:-$(mktemp -d)}
mkdir -p "$out"
for p in gpu_test gpu_bench gpu_mt gpu_mem gpu_churn gpu_mismatch gpu_resident_mid gpu_net gpu_stream; do
    "$prefix/bin/mpicc" -O2 -I"$here" -o "$out/$p" "$here/$p.c" -ldl -lm -lpthread
done
# The bad-input matrix of tests/c with device memory as every valid buffer.
"$prefix/bin/mpicc" -O2 -DERR_MATRIX_DEVICE -I"$here" -I"$here/../c" -o "$out/err_matrix" \
    "$here/../c/err_matrix.c" -ldl
mpirun="$prefix/bin/mpirun"
case "${GPUMPI_REQUIRE_GPU:-}" in
    1) gpu_required=yes ;;
    0) gpu_required=no ;;
    *) if nvidia-smi -L 2>/dev/null | grep -q "^GPU "; then gpu_required=yes; else gpu_required=no; fi ;;
esac
fail=0 npass=0 nfail=0 nskip=0
skip_allowed() { # label
    local p
    IFS=, read -ra allowed <<<"${GPUMPI_ALLOW_GPU_SKIP:-}"
    for p in "${allowed[@]}"; do
        [ "$p" = all ] && return 0
        [ -n "$p" ] && [[ "$1" == *"$p"* ]] && return 0
    done
    return 1
}
verdict() { # label pass|skip|fail [why]: counts one run
    case $2 in
        pass) npass=$((npass + 1)) ;;
        skip)
            if [ "$gpu_required" = yes ] && ! skip_allowed "$1"; then
                echo "FAILED: $1: skipped on a machine with a GPU (GPUMPI_ALLOW_GPU_SKIP allows it): $3"
                nfail=$((nfail + 1)); fail=1
            else
                nskip=$((nskip + 1))
            fi ;;
        *) echo "FAILED: $1${3:+: $3}"; nfail=$((nfail + 1)); fail=1 ;;
    esac
}
run() { # label env... -- args
    local label=$1 log="$out/run.log"; shift
    echo "== $label"
    if ! env "$@" 2>&1 | tee "$log"; then verdict "$label" fail; return; fi
    if grep -q "^SKIP: " "$log"; then verdict "$label" skip "$(grep -m1 "^SKIP: " "$log")"
    elif grep -q "^PASS: " "$log"; then verdict "$label" pass
    else verdict "$label" fail "exit 0 without a PASS or SKIP line"; fi
}
for n in 1 2 4; do
    run "gpu_test -n $n" "$mpirun" -n "$n" --oversubscribe --timeout "$tmo" "$out/gpu_test" "$max"
done
run "gpu_test -n 2, two ranks per GPU" GPUMPI_TEST_RANKS_PER_GPU=2 \
    "$mpirun" -n 2 --oversubscribe --timeout "$tmo" -x GPUMPI_TEST_RANKS_PER_GPU "$out/gpu_test" "$max"
run "gpu_test -n 4, P2P forced off (GPUMPI_CUDA_IPC=0: pinned host memory, 64 KiB rounds and pipe slots)" \
    GPUMPI_CUDA_IPC=0 GPUMPI_GPU_HOST_CHUNK=65536 GPUMPI_GPU_PIPE=65536 GPUMPI_GPU_PIPE_DEPTH=2 \
    "$mpirun" -n 4 --oversubscribe --timeout "$tmo" -x GPUMPI_CUDA_IPC -x GPUMPI_GPU_HOST_CHUNK \
    -x GPUMPI_GPU_PIPE -x GPUMPI_GPU_PIPE_DEPTH "$out/gpu_test" 1048577
run "gpu_test -n 3, P2P forced off (the kernel-driven host-memory allreduce at an odd rank count)" \
    GPUMPI_CUDA_IPC=0 "$mpirun" -n 3 --oversubscribe --timeout "$tmo" -x GPUMPI_CUDA_IPC \
    "$out/gpu_test" 1048577
run "gpu_test -n 2, derived types packed on the host (GPUMPI_CUDA_PACK=0)" GPUMPI_CUDA_PACK=0 \
    "$mpirun" -n 2 --oversubscribe --timeout "$tmo" -x GPUMPI_CUDA_PACK "$out/gpu_test" 65537
run "gpu_test -n 4, kernel peer copies (GPUMPI_GPU_P2P_COPY=kernel)" GPUMPI_GPU_P2P_COPY=kernel \
    "$mpirun" -n 4 --oversubscribe --timeout "$tmo" -x GPUMPI_GPU_P2P_COPY "$out/gpu_test" 65537
run "gpu_test -n 4, every device rendezvous pushed by the sender (GPUMPI_GPU_P2P_PUSH=0)" \
    GPUMPI_GPU_P2P_PUSH=0 "$mpirun" -n 4 --oversubscribe --timeout "$tmo" -x GPUMPI_GPU_P2P_PUSH \
    "$out/gpu_test" 1048577
run "gpu_test -n 2, every device rendezvous pulled by the receiver (GPUMPI_GPU_P2P_PUSH=off)" \
    GPUMPI_GPU_P2P_PUSH=off "$mpirun" -n 2 --oversubscribe --timeout "$tmo" -x GPUMPI_GPU_P2P_PUSH \
    "$out/gpu_test" "$max"
run "gpu_test -n 2, device pulls by the wide resident kernel up to 16 MiB (GPUMPI_GPU_PULL_WIDE_MAX=16m GPUMPI_GPU_P2P_PUSH=off)" \
    GPUMPI_GPU_PULL_WIDE_MAX=16m GPUMPI_GPU_P2P_PUSH=off "$mpirun" -n 2 --oversubscribe --timeout "$tmo" \
    -x GPUMPI_GPU_PULL_WIDE_MAX -x GPUMPI_GPU_P2P_PUSH "$out/gpu_test" "$max"
run "gpu_test -n 4, device pulls by the copy engine above 16 KiB (GPUMPI_GPU_PULL_WIDE_MAX=0)" \
    GPUMPI_GPU_PULL_WIDE_MAX=0 "$mpirun" -n 4 --oversubscribe --timeout "$tmo" -x GPUMPI_GPU_PULL_WIDE_MAX \
    "$out/gpu_test" 1048577
# Every allreduce the copy-engine pipelined two-shot serves takes it (small sizes too: its
# pieces and phases are the same at every size), the others the usual rows.
printf 'allreduce two_shot_ring_push\nallreduce bytes<256k one_shot\nallreduce two_shot_fused\n' \
    >"$out/ring_push.txt"
for n in 3 4; do
    run "gpu_test -n $n, allreduce two_shot_ring_push wherever it serves (GPUMPI_GPU_COLL_TUNING)" \
        GPUMPI_GPU_COLL_TUNING="$out/ring_push.txt" "$mpirun" -n "$n" --oversubscribe --timeout "$tmo" \
        -x GPUMPI_GPU_COLL_TUNING "$out/gpu_test" 1048577
done
for n in 2 4; do
    run "gpu_mt -n $n (MPI_THREAD_MULTIPLE: two threads, collectives on two communicators)" \
        "$mpirun" -n "$n" --oversubscribe --timeout "$tmo" "$out/gpu_mt"
done
run "gpu_mt -n 4, P2P forced off (two communicators' host-memory pipelines at once)" \
    GPUMPI_CUDA_IPC=0 "$mpirun" -n 4 --oversubscribe --timeout "$tmo" -x GPUMPI_CUDA_IPC "$out/gpu_mt"
# gpu_stream with the debug log: where every rank has its own GPU, MPIX_Allreduce_enqueue must
# have taken the stream kernel (and never the host-function fallback) on every rank.
streamrun() { # label ranks env...
    local label="gpu_stream -n $2 $1" n=$2 log="$out/gpu_stream.log" k f; shift 2
    echo "== $label"
    if ! env GPUMPI_DEBUG=2 "$@" "$mpirun" -n "$n" --oversubscribe --timeout "$tmo" -x GPUMPI_DEBUG \
        -x GPUMPI_STREAM_KERNEL -x GPUMPI_STREAM_SCRATCH -x GPUMPI_STREAM_BLOCKS \
        -x GPUMPI_STREAM_LL_MAX -x GPUMPI_STREAM_LL_MAX_WIDE -x GPUMPI_STREAM_PIPE_MIN \
        -x GPUMPI_STREAM_PIPE_CHUNK -x GPUMPI_STREAM_STAGES -x GPUMPI_STREAM_ONE_SHOT_MAX \
        -x GPUMPI_STREAM_PIPE_MIN_WIDE \
        "$out/gpu_stream" >"$log" 2>&1; then
        { grep -E "^(PASS|FAIL|SKIP)|^gpu_stream|^rank [0-9]+:" "$log" || true; } | head -20 || true
        tail -20 "$log"
        verdict "$label" fail; return
    fi
    grep -E "^(PASS|FAIL|SKIP)|^gpu_stream:" "$log" || true
    if grep -q "^SKIP: " "$log"; then verdict "$label" skip "$(grep -m1 "^SKIP: " "$log")"; return; fi
    if ! grep -q "^PASS: gpu_stream" "$log"; then verdict "$label" fail "no PASS line"; return; fi
    k=$(grep -c "MPIX_Allreduce_enqueue: stream kernel" "$log" || true)
    f=$(grep -c "MPIX_Allreduce_enqueue: host-function fallback" "$log" || true)
    echo "MPIX_Allreduce_enqueue: $k stream kernel calls, $f fallback calls (debug log)"
    if grep -q "stream kernel expected" "$log" && { [ "$k" -eq 0 ] || [ "$f" -ne 0 ]; }; then
        verdict "$label" fail "every MPIX_Allreduce_enqueue should take the stream kernel"
        return
    fi
    # The other collectives' kernels: every call on the kernel but one non-contiguous bcast
    # per rank, whose fallback line says why.
    local form want bad=""
    for form in Bcast Allgather Alltoall Reduce_scatter_block; do
        k=$(grep -c "MPIX_${form}_enqueue: stream kernel (" "$log" || true)
        f=$(grep -c "MPIX_${form}_enqueue: host-function fallback" "$log" || true)
        echo "MPIX_${form}_enqueue: $k stream kernel calls, $f fallback calls (debug log)"
        want=0
        [ "$form" = Bcast ] && want=$n
        if grep -q "stream kernel expected" "$log" && { [ "$k" -eq 0 ] || [ "$f" -ne "$want" ]; }; then
            bad="$bad $form"
        fi
    done
    grep -m2 "not the stream kernel: the datatype is not contiguous" "$log" || true
    if [ -n "$bad" ]; then
        verdict "$label" fail "stream kernel expected for every contiguous call of:$bad"
    else
        verdict "$label" pass
    fi
}
for n in 2 4; do
    streamrun "(MPIX stream enqueue forms, the stream kernel, two streams, CUDA graphs replayed 1000 times)" "$n"
done
# Small slots (64 KiB) and 3 blocks: many rounds, and two-shot from 512 KiB at 4 ranks.
for n in 2 4; do
    streamrun "(stream kernel with 64 KiB slots and 3 blocks: GPUMPI_STREAM_SCRATCH=256k GPUMPI_STREAM_BLOCKS=3)" "$n" \
        GPUMPI_STREAM_SCRATCH=256k GPUMPI_STREAM_BLOCKS=3
done
# Every algorithm of the stream kernel at sizes it does not take by default: LL words up to 1
# MiB (the LL area then holds them); pipelined from 16 bytes (2 ranks too) with 64 KiB stages,
# 2 stages and 16 KiB rounds (many rounds, each stage reused within a call and across calls),
# flagged rounds everywhere (LL and pipelining off).
for n in 2 4; do
    streamrun "(stream kernel, LL words up to 1 MiB: GPUMPI_STREAM_LL_MAX=1m GPUMPI_STREAM_LL_MAX_WIDE=1m GPUMPI_STREAM_SCRATCH=64m)" "$n" \
        GPUMPI_STREAM_LL_MAX=1m GPUMPI_STREAM_LL_MAX_WIDE=1m GPUMPI_STREAM_SCRATCH=64m
    streamrun "(stream kernel pipelined from 16 B: GPUMPI_STREAM_PIPE_MIN=16 GPUMPI_STREAM_PIPE_MIN_WIDE=16 GPUMPI_STREAM_STAGES=2 GPUMPI_STREAM_PIPE_CHUNK=16k GPUMPI_STREAM_SCRATCH=1m GPUMPI_STREAM_LL_MAX=0 GPUMPI_STREAM_LL_MAX_WIDE=0 GPUMPI_STREAM_ONE_SHOT_MAX=64k)" "$n" \
        GPUMPI_STREAM_PIPE_MIN=16 GPUMPI_STREAM_PIPE_MIN_WIDE=16 GPUMPI_STREAM_STAGES=2 GPUMPI_STREAM_PIPE_CHUNK=16k GPUMPI_STREAM_SCRATCH=1m \
        GPUMPI_STREAM_LL_MAX=0 GPUMPI_STREAM_LL_MAX_WIDE=0 GPUMPI_STREAM_ONE_SHOT_MAX=64k
    streamrun "(stream kernel, flagged rounds only: GPUMPI_STREAM_PIPE_MIN_WIDE=0 GPUMPI_STREAM_LL_MAX=0 GPUMPI_STREAM_LL_MAX_WIDE=0)" "$n" \
        GPUMPI_STREAM_PIPE_MIN_WIDE=0 GPUMPI_STREAM_LL_MAX=0 GPUMPI_STREAM_LL_MAX_WIDE=0
done
streamrun "(stream kernel off: GPUMPI_STREAM_KERNEL=0, the staged fallback)" 2 GPUMPI_STREAM_KERNEL=0
for n in 2 4; do
    run "gpu_mem -n $n (every memory kind, mixed between ranks)" \
        "$mpirun" -n "$n" --oversubscribe --timeout "$tmo" "$out/gpu_mem"
done
run "gpu_mem -n 4, P2P forced off (GPUMPI_CUDA_IPC=0: host-memory collectives, p2p through pipes)" GPUMPI_CUDA_IPC=0 \
    "$mpirun" -n 4 --oversubscribe --timeout "$tmo" -x GPUMPI_CUDA_IPC "$out/gpu_mem"
# Emulated nodes (scripts/emulate-nodes.sh: GPUMPI_NODE_ID per rank, loopback TCP between the
# nodes): device data to off-node peers through host copies; at 4 ranks (2 per node) allreduce,
# reduce, bcast, allgather and alltoall take the hierarchical schedules (device buffers staged
# through host mirrors), the other collectives flat schedules.
emu="$here/../../scripts/emulate-nodes.sh"
for n in 2 4; do
    run "gpu_test -n $n over 2 emulated nodes (device data over the network transport)" \
        "$mpirun" -n "$n" --oversubscribe --timeout "$tmo" "$emu" 2 "$out/gpu_test" 1048577
done
run "gpu_mem -n 4 over 2 emulated nodes" \
    "$mpirun" -n 4 --oversubscribe --timeout "$tmo" "$emu" 2 "$out/gpu_mem"
# Device buffers between nodes (gpu_net: 0 B..64 MiB send/recv device<->device and
# device<->host, truncation, allreduce; gather, scatter, allgatherv, reduce_scatter_block, at 4
# ranks the hierarchical schedules): pipelined through host memory in chunks (default 1 MiB
# x 4; then 64 KiB x 2, many chunks per message), and staged whole (GPUMPI_NET_GPU_PIPELINE=0).
for n in 2 4; do
    run "gpu_net -n $n over 2 emulated nodes (device messages pipelined through host memory)" \
        "$mpirun" -n "$n" --oversubscribe --timeout "$tmo" "$emu" 2 "$out/gpu_net"
done
run "gpu_net -n 2 over 2 emulated nodes, 64 KiB chunks x 2 (GPUMPI_NET_GPU_CHUNK/DEPTH)" \
    GPUMPI_NET_GPU_CHUNK=65536 GPUMPI_NET_GPU_DEPTH=2 "$mpirun" -n 2 --oversubscribe --timeout "$tmo" \
    -x GPUMPI_NET_GPU_CHUNK -x GPUMPI_NET_GPU_DEPTH "$emu" 2 "$out/gpu_net"
run "gpu_net -n 2 over 2 emulated nodes, staged whole (GPUMPI_NET_GPU_PIPELINE=0)" \
    GPUMPI_NET_GPU_PIPELINE=0 "$mpirun" -n 2 --oversubscribe --timeout "$tmo" \
    -x GPUMPI_NET_GPU_PIPELINE "$emu" 2 "$out/gpu_net"
# Large allreduce and alltoall between nodes in pieces (src/dispatch/piped.rs): 64 KiB pieces
# relayed through pinned buffers (the debug log says so), and whole (GPUMPI_COLL_PIECE=0).
piecerun() {
    local label="gpu_net -n $1 over 2 emulated nodes, allreduce and alltoall in 64 KiB pieces" log="$out/gpu_net_pieces$1.log"
    echo "== $label"
    if ! GPUMPI_COLL_PIECE=65536 GPUMPI_DEBUG=2 "$mpirun" -n "$1" --oversubscribe --timeout "$tmo" \
        -x GPUMPI_COLL_PIECE -x GPUMPI_DEBUG "$emu" 2 "$out/gpu_net" 4194316 >"$log" 2>&1; then
        tail -40 "$log"; verdict "$label" fail; return
    fi
    grep -E "^(PASS|FAIL|SKIP)" "$log"
    if grep -q "^SKIP: " "$log"; then verdict "$label" skip "$(grep -m1 "^SKIP: " "$log")"; return; fi
    if ! grep -q "^PASS: gpu_net" "$log"; then verdict "$label" fail "no PASS line"; return; fi
    if ! grep -q "allreduce between nodes in pieces, device buffers relayed" "$log" ||
        ! grep -q "alltoall between nodes in pieces, device buffers relayed" "$log"; then
        verdict "$label" fail "no relayed pieces of both in the debug log"; return
    fi
    verdict "$label" pass
}
piecerun 2
piecerun 4
# PXN on device buffers (GPUMPI_PXN=1): 4 ranks over 2 emulated nodes on 2 rails, so every
# rank has a peer on the other rail of the other node. Point-to-point, allreduce, alltoall(v),
# gather, scatter, allgatherv and reduce_scatter_block must pass with every network message on
# its sender's rail (each rank's counters: 0 cross-rail) and frames forwarded inside the node.
pxnrun() { # label-suffix [VAR=VAL...]
    local what=$1 vars=() xs=() log cross fwd
    shift
    for v in "$@"; do vars+=("$v"); xs+=(-x "${v%%=*}"); done
    pxnn=$((${pxnn:-0} + 1))
    local label="gpu_net -n 4 over 2 emulated nodes on 2 rails, PXN on ($what)"
    log="$out/gpu_net_pxn_$pxnn.log"
    echo "== $label"
    if ! env GPUMPI_PXN=1 GPUMPI_DEBUG=1 "${vars[@]}" "$mpirun" -n 4 --oversubscribe --timeout "$tmo" \
        -x GPUMPI_PXN -x GPUMPI_DEBUG "${xs[@]}" "$emu" --rails 2 2 "$out/gpu_net" 4194316 >"$log" 2>&1; then
        grep -E "^(PASS|FAIL|SKIP)|gpumpi|fakeibv" "$log" | grep -v " INFO " | head -20 || true; tail -30 "$log"
        verdict "$label" fail; return
    fi
    grep -E "^(PASS|FAIL|SKIP)" "$log" || true
    if grep -q "^SKIP: " "$log"; then verdict "$label" skip "$(grep -m1 "^SKIP: " "$log")"; return; fi
    if ! grep -q "^PASS: gpu_net" "$log"; then verdict "$label" fail "no PASS line"; return; fi
    cross=$(grep -c "rail [0-9]*: .* 0 cross-rail" "$log") || cross=0
    fwd=$(grep -c "pxn: rank [0-9]*: [1-9][0-9]* frames .* forwarded for" "$log") || fwd=0
    grep -E "net: rank [0-9]+ rail|pxn: rank" "$log" | sed -e 's/^.*\(net: rank\|pxn: rank\)/\1/' | head -8
    if [ "$cross" -ne 4 ] || [ "$fwd" -lt 1 ]; then
        verdict "$label" fail "$cross of 4 ranks logged 0 cross-rail, $fwd forwarded frames"
    else
        verdict "$label" pass
    fi
}
pxnrun "TCP, device data staged through host memory"
run "gpu_net -n 2 over 2 emulated nodes, allreduce and alltoall whole (GPUMPI_COLL_PIECE=0)" \
    GPUMPI_COLL_PIECE=0 "$mpirun" -n 2 --oversubscribe --timeout "$tmo" \
    -x GPUMPI_COLL_PIECE "$emu" 2 "$out/gpu_net"
# GPUDirect RDMA over the ibverbs backend, against the libibverbs test double (no RDMA device
# here): device buffers registered through real dma-buf descriptors, moved by the double with
# CUDA copies. Per rank, 3 sizes (64 KiB, 1 MiB+3, 64 MiB) x 3 mixes are received as one bulk
# transfer between the buffers, and 3 x 2 (device to device, device to host) sent from the device.
ib_lib="$out/libfakeibverbs.so"
ib_built=no
"${CC:-cc}" -shared -fPIC -O1 -Wall -o "$ib_lib" "$here/../support/fake_ibverbs.c" -ldl \
    >"$out/fake_ibverbs.log" 2>&1 && ib_built=yes
gdrrun() {
    local label="gpu_net gdr -n 2 over 2 emulated nodes (GPUMPI_NET=ib over the libibverbs test double: GPUDirect RDMA)"
    local log="$out/gpu_net_gdr.log" lib="$ib_lib" fabric="/dev/shm/gpumpi-fakeibv-gpu-$$" rx tx
    echo "== $label"
    if [ "$ib_built" = no ]; then
        cat "$out/fake_ibverbs.log"
        echo "SKIP: gpu_net gdr: the libibverbs test double does not build here"
        verdict "$label" skip "the libibverbs test double does not build here"; return
    fi
    if ! GPUMPI_DEBUG=2 GPUMPI_NET=ib GPUMPI_IBVERBS_LIB="$lib" FAKEIBV_FABRIC="$fabric" \
        "$mpirun" -n 2 --oversubscribe --timeout "$tmo" -x GPUMPI_DEBUG -x GPUMPI_NET \
        -x GPUMPI_IBVERBS_LIB -x FAKEIBV_FABRIC "$emu" 2 "$out/gpu_net" gdr >"$log" 2>&1; then
        rm -f "$fabric"
        { grep -E "^(PASS|FAIL|SKIP)|rank [0-9]+:.*byte|GPUDirect|fakeibv" "$log" || true; } | head -20 || true
        tail -30 "$log"
        verdict "$label" fail; return
    fi
    rm -f "$fabric"
    if grep -q "^SKIP: " "$log"; then
        grep -m1 "^SKIP: " "$log"; verdict "$label" skip "$(grep -m1 "^SKIP: " "$log")"; return
    fi
    if grep -q "GPUDirect RDMA for device buffers between nodes off" "$log"; then
        echo "SKIP: gpu_net gdr: $(grep -m1 -o "GPUDirect RDMA for device buffers between nodes off.*" "$log")"
        verdict "$label" skip "the ibverbs backend registers no device memory here"; return
    fi
    grep -E "^(PASS|FAIL)|GPUDirect RDMA for device buffers|device memory \(GPUDirect" "$log" || true
    if ! grep -q "^PASS: gpu_net gdr" "$log"; then verdict "$label" fail "no PASS line"; return; fi
    rx=$(grep -c "one bulk transfer between the buffers (GPUDirect RDMA, no staging)" "$log") || rx=0
    tx=$(grep -c "one bulk transfer from the device buffer (GPUDirect RDMA, no staging)" "$log") || tx=0
    echo "GPUDirect RDMA receives: $rx of 18, sends from device memory: $tx of 12"
    if [ "$rx" -ne 18 ] || [ "$tx" -ne 12 ]; then
        verdict "$label" fail "every message from 64 KiB on should go as one GPUDirect RDMA bulk transfer"
    else
        verdict "$label" pass
    fi
}
gdrrun
# The emulated-node device tests again with GPUMPI_NET=ib over the double (a fabric file of
# their own each): device point-to-point from the bulk threshold on by GPUDirect RDMA, the rest
# (smaller messages, collectives' host mirrors and relayed pieces, memory the double cannot
# share: VMM, managed) through host memory. Every rank must log its ib rail.
ibn=0
ibrun() { # [VAR=VAL...] program nranks [args...]; IBRUN_WANT: a line the log must contain
    local vars=() xs=() want="${IBRUN_WANT:-}"
    while [[ "${1:-}" == *=* ]]; do vars+=("$1"); xs+=(-x "${1%%=*}"); shift; done
    ibn=$((ibn + 1))
    local label="$1 -n $2 over 2 emulated nodes, GPUMPI_NET=ib over the libibverbs test double${vars[*]:+ (${vars[*]})}"
    local prog=$1 n=$2 log="$out/ib_$1_$2_$ibn.log" fabric="/dev/shm/gpumpi-fakeibv-gpu-$$-$ibn" rails
    shift 2
    echo "== $label"
    if [ "$ib_built" = no ]; then
        echo "SKIP: $prog over ib: the libibverbs test double does not build here"
        verdict "$label" skip "the libibverbs test double does not build here"; return
    fi
    if ! env GPUMPI_DEBUG=1 GPUMPI_NET=ib GPUMPI_IBVERBS_LIB="$ib_lib" FAKEIBV_FABRIC="$fabric" "${vars[@]}" \
        "$mpirun" -n "$n" --oversubscribe --timeout "$tmo" -x GPUMPI_DEBUG -x GPUMPI_NET \
        -x GPUMPI_IBVERBS_LIB -x FAKEIBV_FABRIC "${xs[@]}" "$emu" 2 "$out/$prog" "$@" >"$log" 2>&1; then
        rm -f "$fabric"
        grep -E "^(PASS|FAIL|SKIP)|gpumpi|fakeibv" "$log" | grep -v " INFO " | head -20 || true; tail -30 "$log"
        verdict "$label" fail; return
    fi
    rm -f "$fabric"
    grep -E "^(PASS|FAIL|SKIP)" "$log" || true
    if grep -q "^SKIP: " "$log"; then verdict "$label" skip "$(grep -m1 "^SKIP: " "$log")"; return; fi
    if ! grep -q "^PASS: $prog" "$log"; then verdict "$label" fail "no PASS line"; return; fi
    rails=$(grep -c "ib: rail" "$log") || rails=0
    if [ "$rails" -ne "$n" ]; then
        verdict "$label" fail "$rails of $n ranks logged an ib rail"
    elif [ -n "$want" ] && ! grep -q "$want" "$log"; then
        verdict "$label" fail "no \"$want\" in the log"
    else
        verdict "$label" pass
    fi
}
ibrun gpu_net 2
ibrun gpu_net 4
ibrun gpu_test 2 1048577
ibrun gpu_test 4 1048577
ibrun gpu_mem 4
# The device-buffer variants of the emulated-node runs above over ib: small chunks, staged
# whole, and allreduce/alltoall in 64 KiB pieces relayed through pinned host memory.
ibrun GPUMPI_NET_GPU_CHUNK=65536 GPUMPI_NET_GPU_DEPTH=2 gpu_net 2
ibrun GPUMPI_NET_GPU_PIPELINE=0 gpu_net 2
IBRUN_WANT="alltoall between nodes in pieces, device buffers relayed" \
    ibrun GPUMPI_COLL_DEVICE=0 GPUMPI_COLL_PIECE=65536 GPUMPI_DEBUG=2 gpu_net 4 4194316
ibrun GPUMPI_COLL_PIECE=0 gpu_net 2
# Collectives between nodes on the device buffers themselves (GPUMPI_COLL_DEVICE=auto: where the
# backend registers device memory, as the double does): `gpu_net coll` runs device alltoall,
# allgather, bcast and allreduce (64 KiB..4 MiB blocks) at 4 ranks over 2 emulated nodes, PXN off
# and on (2 rails: the alltoall schedule through the PXN forwarders, the forward hop GPU to GPU).
# Every rank must log collective steps on device memory and bulk transfers from and into device
# memory (GPUDirect RDMA). Then device steps forced over TCP (the engine's pipeline per message).
devcollrun() { # label-suffix [VAR=VAL...] [-- --rails R]
    local what=$1 vars=() xs=() rails=() log fabric n=4 steps gdr
    shift
    while [ $# -gt 0 ] && [ "$1" != -- ]; do vars+=("$1"); xs+=(-x "${1%%=*}"); shift; done
    [ "${1:-}" = -- ] && { shift; rails=("$@"); }
    ibn=$((ibn + 1))
    local label="gpu_net coll -n $n over 2 emulated nodes, device collectives on the device buffers over the ib double ($what)"
    log="$out/devcoll_$ibn.log" fabric="/dev/shm/gpumpi-fakeibv-gpu-$$-$ibn"
    echo "== $label"
    if [ "$ib_built" = no ]; then
        echo "SKIP: gpu_net coll over ib: the libibverbs test double does not build here"
        verdict "$label" skip "the libibverbs test double does not build here"; return
    fi
    if ! env GPUMPI_DEBUG=1 GPUMPI_NET=ib GPUMPI_IBVERBS_LIB="$ib_lib" FAKEIBV_FABRIC="$fabric" "${vars[@]}" \
        "$mpirun" -n "$n" --oversubscribe --timeout "$tmo" -x GPUMPI_DEBUG -x GPUMPI_NET \
        -x GPUMPI_IBVERBS_LIB -x FAKEIBV_FABRIC "${xs[@]}" "$emu" "${rails[@]}" 2 "$out/gpu_net" coll >"$log" 2>&1; then
        rm -f "$fabric"
        grep -E "^(PASS|FAIL|SKIP)|gpumpi|fakeibv" "$log" | grep -v " INFO " | head -20 || true; tail -30 "$log"
        verdict "$label" fail; return
    fi
    rm -f "$fabric"
    grep -E "^(PASS|FAIL|SKIP)|^coll " "$log" || true
    if grep -q "^SKIP: " "$log"; then verdict "$label" skip "$(grep -m1 "^SKIP: " "$log")"; return; fi
    if grep -q "GPUDirect RDMA for device buffers between nodes off" "$log"; then
        echo "SKIP: gpu_net coll over ib: $(grep -m1 -o "GPUDirect RDMA for device buffers between nodes off.*" "$log")"
        verdict "$label" skip "the ibverbs backend registers no device memory here"; return
    fi
    if ! grep -q "^PASS: gpu_net coll" "$log"; then verdict "$label" fail "no PASS line"; return; fi
    steps=$(grep -c "collective steps on device memory: [1-9]" "$log") || steps=0
    gdr=$(grep -c "received into device memory (GPUDirect RDMA)" "$log") || gdr=0
    grep -E "collective steps on device memory|device memory \(GPUDirect RDMA\)" "$log" | sed -e 's/^.*gpumpi[^ ]* //' | head -8
    if [ "$steps" -ne "$n" ] || [ "$gdr" -ne "$n" ]; then
        verdict "$label" fail "$steps of $n ranks logged device steps, $gdr of $n GPUDirect RDMA receives"
    else
        verdict "$label" pass
    fi
}
devcollrun "PXN off"
devcollrun "PXN on, 2 rails" GPUMPI_PXN=1 FAKEIBV_DEVICES=fake0,fake1 -- --rails 2
tcplog="$out/devcoll_tcp.log"
label="gpu_net coll -n 4 over 2 emulated nodes, device steps forced over TCP (GPUMPI_COLL_DEVICE=1)"
echo "== $label"
if GPUMPI_DEBUG=1 GPUMPI_COLL_DEVICE=1 "$mpirun" -n 4 --oversubscribe --timeout "$tmo" \
    -x GPUMPI_DEBUG -x GPUMPI_COLL_DEVICE "$emu" 2 "$out/gpu_net" coll >"$tcplog" 2>&1; then
    grep -E "^(PASS|FAIL|SKIP)" "$tcplog" || true
    if grep -q "^SKIP: " "$tcplog"; then verdict "$label" skip "$(grep -m1 "^SKIP: " "$tcplog")"
    elif ! grep -q "^PASS: gpu_net coll" "$tcplog"; then verdict "$label" fail "no PASS line"
    elif [ "$(grep -c "collective steps on device memory: [1-9]" "$tcplog")" -ne 4 ]; then
        verdict "$label" fail "not every rank logged collective steps on device memory"
    else verdict "$label" pass; fi
else
    tail -30 "$tcplog"; verdict "$label" fail
fi
# The whole gpu_net (point-to-point, every collective, 0 B..4 MiB+12) with device steps over the
# ib double at 4 ranks, then PXN on over 2 double devices (device steps, forward hop GPU to GPU).
if [ "$ib_built" = yes ]; then
    ibrun GPUMPI_COLL_DEVICE=1 gpu_net 4 4194316
    pxnrun "ib double, device steps" GPUMPI_NET=ib GPUMPI_IBVERBS_LIB="$ib_lib" \
        FAKEIBV_FABRIC="/dev/shm/gpumpi-fakeibv-gpu-$$-pxn" FAKEIBV_DEVICES=fake0,fake1 GPUMPI_COLL_DEVICE=1
    rm -f "/dev/shm/gpumpi-fakeibv-gpu-$$-pxn"
fi
# cuMemCreate memory with the POSIX descriptor handle type must be mapped (zero-copy), not staged:
# the debug log of each rank that imported a peer's buffer says so.
fdrun() {
    local label="gpu_mem fd -n 4" log="$out/gpu_mem_fd.log" n
    echo "== $label (cuMemCreate memory mapped through POSIX descriptors, not staged)"
    if ! GPUMPI_DEBUG=2 "$mpirun" -n 4 --oversubscribe --timeout "$tmo" -x GPUMPI_DEBUG "$out/gpu_mem" fd >"$log" 2>&1; then
        tail -40 "$log"; verdict "$label" fail; return
    fi
    grep -E "^(PASS|FAIL|SKIP)|^vmm:|^fd:" "$log"
    if grep -q "^SKIP: " "$log"; then verdict "$label" skip "$(grep -m1 "^SKIP: " "$log")"; return; fi
    if grep -q "POSIX fd handles refused" "$log"; then
        echo "SKIP: gpu_mem fd: the driver refused cuMemCreate with POSIX descriptor handles"
        verdict "$label" skip "the driver refused POSIX descriptor handles"; return
    fi
    if ! grep -q "^PASS: gpu_mem" "$log"; then verdict "$label" fail "no PASS line"; return; fi
    n=$(grep -c "imported through a POSIX descriptor" "$log") || n=0
    echo "VMM imports through descriptors: $n"
    if [ "$n" -lt 4 ]; then
        verdict "$label" fail "every rank should map its peers' cuMemCreate buffers through descriptors"
    else
        verdict "$label" pass
    fi
}
fdrun
for n in 1 2; do
    run "gpu_err_matrix -n $n (every misuse of a buffer-taking call, the valid buffers on the device)" \
        "$mpirun" -n "$n" --oversubscribe --timeout "$tmo" "$out/err_matrix" return device
done
# Communicator churn with device buffers: every communicator (freed ones too, and 20 alive at
# once) must set up the resident path, and release its GPU state when freed (the program checks
# the counters and the device's free memory; the log shows the path of every communicator).
churn() { # label cycles live env...
    local label=$1 cycles=$2 live=$3 log="$out/gpu_churn.log" want got rel; shift 3
    echo "== gpu_churn -n 4 $label"
    if ! env GPUMPI_DEBUG=2 "$@" "$mpirun" -n 4 --oversubscribe --timeout "$tmo" -x GPUMPI_DEBUG \
        -x GPUMPI_CUDA_IPC -x GPUMPI_GPU_HOST_CHUNK -x GPUMPI_GPU_HOST_KERNEL \
        "$out/gpu_churn" "$cycles" "$live" >"$log" 2>&1; then
        tail -40 "$log"; verdict "gpu_churn $label" fail; return
    fi
    grep -E "^(PASS|FAIL|SKIP)|^gpu_churn:" "$log" || true
    if grep -q "^SKIP: " "$log"; then verdict "gpu_churn $label" skip "$(grep -m1 "^SKIP: " "$log")"; return; fi
    if ! grep -q "^PASS: gpu_churn" "$log"; then verdict "gpu_churn $label" fail "no PASS line"; return; fi
    if [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" -lt 4 ]; then
        echo "(fewer than 4 GPUs: ranks share GPUs, the resident path is not taken; paths not counted)"
        verdict "gpu_churn $label" pass; return
    fi
    want=$((4 * (cycles + live * ((cycles + 49) / 100))))
    got=$(grep -c "resident collectives ready on a communicator" "$log" || true)
    rel=$(grep -c "released by its communicator's free" "$log" || true)
    echo "resident set-ups: $got of $want; releases at MPI_Comm_free: $rel"
    if [ "$got" -lt "$want" ] || [ "$rel" -lt "$want" ]; then
        verdict "gpu_churn $label" fail "every communicator should set up the resident path and release it"
    else
        verdict "gpu_churn $label" pass
    fi
}
churn "(CUDA IPC)" 300 20 GPUMPI_CUDA_IPC=1 GPUMPI_GPU_HOST_CHUNK=1048576 \
    GPUMPI_GPU_HOST_KERNEL=1048576
churn "(P2P forced off: pinned host regions per communicator)" 250 18 GPUMPI_CUDA_IPC=0 \
    GPUMPI_GPU_HOST_CHUNK=65536 GPUMPI_GPU_HOST_KERNEL=262144
for n in 2 4; do
    run "gpu_mismatch -n $n (mismatched collectives on device buffers fail with their class, never hang)" \
        "$mpirun" -n "$n" --oversubscribe --timeout 120 "$out/gpu_mismatch"
done
run "gpu_mismatch -n 4 (CUDA IPC off: the pinned host-memory paths)" GPUMPI_CUDA_IPC=0 \
    "$mpirun" -n 4 --oversubscribe --timeout 120 -x GPUMPI_CUDA_IPC "$out/gpu_mismatch"
# The resident kernels' mid sizes: every result checked; with one GPU per rank the wide kernel
# must have been set up on every rank.
midrun() { # label ranks env...
    local label=$1 n=$2 log="$out/gpu_resident_mid.log" got; shift 2
    echo "== gpu_resident_mid -n $n $label"
    if ! env GPUMPI_DEBUG=2 "$@" "$mpirun" -n "$n" --oversubscribe --timeout "$tmo" -x GPUMPI_DEBUG \
        -x GPUMPI_GPU_RESIDENT_TUNING -x GPUMPI_GPU_RESIDENT_MAX -x GPUMPI_GPU_RESIDENT_BLOCKS \
        -x GPUMPI_GPU_RESIDENT_IDLE_US \
        "$out/gpu_resident_mid" $((4 << 20)) >"$log" 2>&1; then
        { grep -E "^(PASS|FAIL|SKIP)|^gpu_resident_mid:" "$log" || true; } | head -20 || true
        tail -20 "$log"
        verdict "gpu_resident_mid -n $n $label" fail; return
    fi
    grep -E "^(PASS|FAIL|SKIP)|^gpu_resident_mid:" "$log" || true
    if grep -q "^SKIP: " "$log"; then verdict "gpu_resident_mid -n $n $label" skip "$(grep -m1 "^SKIP: " "$log")"; return; fi
    if ! grep -q "^PASS: gpu_resident_mid" "$log"; then verdict "gpu_resident_mid -n $n $label" fail "no PASS line"; return; fi
    if [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" -lt "$n" ]; then
        echo "(fewer than $n GPUs: ranks share GPUs, the resident kernels are not used)"
        verdict "gpu_resident_mid -n $n $label" pass; return
    fi
    got=$(grep -c "wide resident kernel ready on a communicator" "$log" || true)
    echo "wide resident kernel set-ups: $got of $n ranks"
    if [ "$got" -lt "$n" ]; then
        verdict "gpu_resident_mid -n $n $label" fail "every rank should set up the wide resident kernel"
    else
        verdict "gpu_resident_mid -n $n $label" pass
    fi
}
printf 'allreduce resident\nallreduce one_shot\nalltoall resident\nalltoall push\nallgather resident\nallgather push\n' \
    >"$out/resident_one_shot.txt"
printf 'allreduce two_shot\nalltoall push\nallgather push\n' >"$out/resident_two_shot.txt"
printf 'allreduce resident\nallreduce one_shot_ll\nallreduce one_shot\nalltoall resident\nalltoall push_ll\nalltoall push\nallgather resident\nallgather push_ll\nallgather push\n' \
    >"$out/resident_ll.txt"
for n in 2 4; do
    midrun "(built-in table)" "$n"
done
midrun "(one_shot up to 4 MiB)" 4 GPUMPI_GPU_RESIDENT_TUNING="$out/resident_one_shot.txt" \
    GPUMPI_GPU_RESIDENT_MAX=4m
for n in 2 4; do
    midrun "(one_shot_ll and push_ll up to 1 MiB, flags above)" "$n" \
        GPUMPI_GPU_RESIDENT_TUNING="$out/resident_ll.txt" GPUMPI_GPU_RESIDENT_MAX=4m
done
# LL128 lines (the built-in table's allreduce at 2 ranks above 16 KiB) for every collective that
# has them, up to 4 MiB, and with 3 blocks (many batches of lines per block, partial last lines).
printf 'allreduce resident\nallreduce one_shot_ll128\nalltoall resident\nalltoall push_ll128\nallgather resident\nallgather push_ll128\n' \
    >"$out/resident_ll128.txt"
for n in 2 4; do
    midrun "(one_shot_ll128 and push_ll128 up to 4 MiB)" "$n" \
        GPUMPI_GPU_RESIDENT_TUNING="$out/resident_ll128.txt" GPUMPI_GPU_RESIDENT_MAX=4m
done
midrun "(one_shot_ll128 and push_ll128 up to 4 MiB, 3 blocks)" 2 \
    GPUMPI_GPU_RESIDENT_TUNING="$out/resident_ll128.txt" GPUMPI_GPU_RESIDENT_MAX=4m GPUMPI_GPU_RESIDENT_BLOCKS=3
midrun "(two_shot from 4 B to 4 MiB, 3 blocks)" 3 GPUMPI_GPU_RESIDENT_TUNING="$out/resident_two_shot.txt" \
    GPUMPI_GPU_RESIDENT_MAX=4m GPUMPI_GPU_RESIDENT_BLOCKS=3
midrun "(two_shot from 4 B to 4 MiB)" 2 GPUMPI_GPU_RESIDENT_TUNING="$out/resident_two_shot.txt" \
    GPUMPI_GPU_RESIDENT_MAX=4m
# A kernel idle for 1 us exits between calls, and must not exit while some of its blocks still
# run a call: the relaunch would run that call again (in place, the second run pushes results).
for n in 2 4; do
    midrun "(kernels idle 1 us)" "$n" GPUMPI_GPU_RESIDENT_IDLE_US=1 GPUMPI_GPU_RESIDENT_MAX=4m
done
run "gpu_mem big -n 4 (1 GiB per buffer)" \
    "$mpirun" -n 4 --oversubscribe --timeout "$tmo" "$out/gpu_mem" big
if [ "$bench" = yes ]; then
    for n in 2 4; do
        echo "== gpu_bench -n $n"
        "$mpirun" -n "$n" --oversubscribe --timeout "$tmo" "$out/gpu_bench" || { echo "FAILED: gpu_bench -n $n"; fail=1; }
        echo "== gpu_stream bench -n $n"
        # Up to 1 GiB where every rank has its own GPU (the stream kernel), else up to 64 MiB
        # (the staged fallback takes about a second per GiB).
        smax=$((64 << 20))
        [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" -ge "$n" ] && smax=$((1 << 30))
        "$mpirun" -n "$n" --oversubscribe --timeout "$tmo" "$out/gpu_stream" bench "$smax" || { echo "FAILED: gpu_stream bench -n $n"; fail=1; }
    done
fi
echo "gpu: $npass passed, $nfail failed, $nskip skipped"
exit $fail
