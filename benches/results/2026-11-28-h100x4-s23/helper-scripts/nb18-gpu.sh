#!/usr/bin/env bash
# nb18: TCP bulk data on the control socket vs striped (GPUMPI_NET_TCP_STRIPE), windowed host
# bandwidth between 2 emulated nodes over loopback, base (build/main) vs new, raw TCP in the
# same rounds. No GPU used. About 2.5 minutes.
#   bash nb18-gpu.sh PREFIX_OF_NB18_INSTALL     (run from the copy of nb18's tree)
set -uo pipefail
new=${1:?usage: nb18-gpu.sh NEW_PREFIX}
base=$(cd "$(dirname "$new")/main" && pwd)
b=benches/net_bulk_bench.sh
[ -f "$b" ] || b=$(dirname "$0")/benches/net_bulk_bench.sh
echo "### nproc $(nproc); base=$base new=$new; $(uptime)"
echo "### 0. the choice new makes (GPUMPI_DEBUG=2), unbound and under taskset -c 0,1"
timeout 30 bash "$b" --rounds 1 --max 64K --env GPUMPI_DEBUG=2 "$base" "$new" 2>&1 | grep -o "tcp: bulk data.*" | sort | uniq -c | head -4
timeout 30 taskset -c 0,1 bash "$b" --rounds 1 --max 64K --env GPUMPI_DEBUG=2 "$base" "$new" 2>&1 | grep -o "tcp: bulk data.*" | sort | uniq -c | head -4
echo "### 1. auto (this host: striped expected on both), 2 rounds, 64K-16M"
timeout 80 bash "$b" --rounds 2 --max 16M "$base" "$new" 2>&1 | tail -9
echo "### 2. new with GPUMPI_NET_TCP_STRIPE=0 (control socket) vs base (striped), 1 round"
timeout 45 bash "$b" --rounds 1 --max 16M --env GPUMPI_NET_TCP_STRIPE=0 "$base" "$new" 2>&1 | tail -9
echo "### 3. every process under taskset -c 0,1 (new auto: control socket; base striped), 1 round"
timeout 50 taskset -c 0,1 bash "$b" --rounds 1 --max 16M "$base" "$new" 2>&1 | tail -9
