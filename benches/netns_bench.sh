#!/usr/bin/env bash
# Benchmarks between namespace nodes (scripts/netns-nodes.sh): raw TCP throughput between the
# namespaces (the limit), then gpumpi-bench under `mpirun --host` across them: point-to-point
# latency (pingpong) and windowed bandwidth at 1+1 ranks, allreduce at 1+1 and 2+2 ranks (the
# 2+2 run with the hierarchical path and without it, GPUMPI_COLL_HIER=0).
#
#   benches/netns_bench.sh [--rate RATE] [--quick] PREFIX_INSTALL
#
# PREFIX_INSTALL holds bin/mpicc and bin/mpirun (scripts/install.sh --prefix). --rate shapes
# every rail with a tc token bucket (tbf) of RATE (e.g. 1gbit) on both nodes' rail0; --quick
# runs fewer sizes and iterations. Needs root and `ip` (else exit 77 with the reason). The
# namespaces are removed at the end, also on failure. Output: one block per run, as
# gpumpi-bench prints it, and the raw TCP figures.
set -euo pipefail

rate= quick=
while [[ $# -gt 0 ]]; do
    case $1 in
    --rate) rate=${2:?--rate needs a value}; shift 2 ;;
    --quick) quick=1; shift ;;
    -*) echo "netns_bench: unknown option $1" >&2; exit 2 ;;
    *) break ;;
    esac
done
prefix=${1:?usage: netns_bench.sh [--rate RATE] [--quick] PREFIX_INSTALL}
here=$(cd "$(dirname "$0")/.." && pwd)
nodes="$here/scripts/netns-nodes.sh"
ns=gnb$$
work=$(mktemp -d)
cleanup() {
    bash "$nodes" -p "$ns" down >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

set +e
out=$(bash "$nodes" -p "$ns" up 2 1 2>&1)
rc=$?
set -e
if [[ $rc -ne 0 ]]; then
    echo "netns_bench: $out" >&2
    exit "$rc"
fi
if [[ -n $rate ]]; then
    for i in 0 1; do
        ip netns exec "$ns-n$i" tc qdisc replace dev rail0 root tbf rate "$rate" burst 256kb latency 50ms
    done
fi

"$prefix/bin/mpicc" -std=c99 -O2 -o "$work/gpumpi-bench" "$here/benches/gpumpi-bench.c" -ldl -lm

# Raw TCP between the namespaces: one stream and four, 1 MiB writes, 2 s each (benches/raw_tcp.c,
# both ends polling their sockets; the receiver in node 1, the sender in node 0).
cc -O2 -pthread -o "$work/raw_tcp" "$here/benches/raw_tcp.c"
for s in 1 4; do
    ip netns exec "$ns-n1" "$work/raw_tcp" recv 198.18.0.2 47000 "$s" 1048576 spin &
    r=$!
    sleep 0.3
    ip netns exec "$ns-n0" "$work/raw_tcp" send 198.18.0.2 47000 "$s" 2 1048576 spin
    wait "$r"
done

iters=(-w 5 -n 50)
big=64M
if [[ -n $quick ]]; then
    iters=(-w 2 -n 10)
    big=4M
fi
run() {
    local hosts=$1
    shift
    echo "== mpirun --host $hosts gpumpi-bench $*"
    bash "$nodes" -p "$ns" exec 0 env "${ENVV[@]}" "$prefix/bin/mpirun" --oversubscribe \
        --host "$hosts" --launch-agent "$here/scripts/netns-agent -p $ns" --timeout 600 \
        "$work/gpumpi-bench" "$@"
}
ENVV=(NETNS_BENCH=hier)
run localhost:1,n1:1 -o pingpong -b 8 -e 64K -f 8 "${iters[@]}"
run localhost:1,n1:1 -o bw -b 64K -e "$big" -f 4 "${iters[@]}"
run localhost:1,n1:1 -o allreduce -b 8 -e "$big" -f 16 "${iters[@]}"
run localhost:2,n1:2 -o allreduce -b 8 -e "$big" -f 16 "${iters[@]}"
ENVV=(GPUMPI_COLL_HIER=0)
run localhost:2,n1:2 -o allreduce -b 8 -e "$big" -f 16 "${iters[@]}"
