#!/usr/bin/env bash
# nb25: fewer syscalls per bulk message on the TCP backend (one sendmsg for every queued
# control item, payload + next header in one readv, tests of requests other than the next skip
# a full/empty socket) and the engine's queued protocol frames to a peer leaving as one network
# operation. Windowed host bandwidth between 2 emulated nodes over loopback, base (build/main)
# vs new, raw TCP in the same rounds. No GPU used. About 4 minutes (plus ~15 with --tests).
#   bash nb25-gpu.sh NEW_PREFIX [--tests]     (run from the copy of nb25's tree)
set -uo pipefail
new=${1:?usage: nb25-gpu.sh NEW_PREFIX [--tests]}
base=$(cd "$(dirname "$new")/main" && pwd)
b=benches/net_bulk_bench.sh
echo "### nproc $(nproc); base=$base new=$new; $(uptime)"
echo "### 1. auto (striped on this host), 3 rounds, 64K-64M"
timeout 200 bash "$b" --rounds 3 --max 64M "$base" "$new" 2>&1 | tail -10
echo "### 2. GPUMPI_NET_TCP_STRIPE=0 on both (bulk data on the control socket), 2 rounds"
timeout 150 bash "$b" --rounds 2 --max 64M --env GPUMPI_NET_TCP_STRIPE=0 "$base" "$new" 2>&1 | tail -10
echo "### 3. every process under taskset -c 0,1 (auto: control socket), 2 rounds"
timeout 150 taskset -c 0,1 bash "$b" --rounds 2 --max 64M "$base" "$new" 2>&1 | tail -10
if [[ ${2:-} == --tests ]]; then
    echo "### 4. C tests net_bulk, p2p_large, p2p_order (every testlist line: emulated nodes, namespaces, ib double, PXN)"
    GPUMPI_TEST_PREFIX=$new cargo test --release --test c_programs -- net_bulk p2p_large p2p_order 2>&1 | tail -8
fi
