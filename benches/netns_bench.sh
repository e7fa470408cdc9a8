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

# Raw TCP between the namespaces: one stream and four, 1 MiB writes, 2 s each (python sockets;
# the receiver in node 1, the sender in node 0).
cat >"$work/raw.py" <<'EOF'
import socket, sys, threading, time
mode, streams, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
port = 47000
if mode == "recv":
    srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("198.18.0.2", port)); srv.listen(16)
    total = [0]
    def drain(c):
        buf = bytearray(1 << 20); v = memoryview(buf)
        while True:
            n = c.recv_into(v)
            if n == 0: break
            total[0] += n
    ts = []
    for _ in range(streams):
        c, _ = srv.accept()
        t = threading.Thread(target=drain, args=(c,)); t.start(); ts.append(t)
    for t in ts: t.join()
    print(total[0])
else:
    data = b"\0" * (1 << 20)
    socks = [socket.create_connection(("198.18.0.2", port)) for _ in range(streams)]
    sent = [0] * streams
    end = time.time() + secs
    def pump(i):
        s = socks[i]
        while time.time() < end:
            s.sendall(data); sent[i] += len(data)
        s.close()
    t0 = time.time()
    ts = [threading.Thread(target=pump, args=(i,)) for i in range(streams)]
    for t in ts: t.start()
    for t in ts: t.join()
    dt = time.time() - t0
    print(f"raw TCP {streams} stream(s): {sum(sent) / dt / 1e9:.2f} GB/s over {dt:.1f} s")
EOF
for s in 1 4; do
    ip netns exec "$ns-n1" python3 "$work/raw.py" recv "$s" 2 >/dev/null &
    r=$!
    sleep 0.5
    ip netns exec "$ns-n0" python3 "$work/raw.py" send "$s" 2
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
