#!/usr/bin/env bash
# Windowed point-to-point bandwidth between two nodes (gpumpi-bench -o bw: 64 nonblocking sends
# of one reused buffer per iteration, 1+1 ranks) for two installs side by side, interleaved
# round by round, beside raw TCP between the same endpoints (benches/raw_tcp.c, both ends
# polling their sockets, 1 and 4 streams,
# writes and reads of 1 MiB and of 64 MiB buffers, 2 s each: on loopback and veth the copies
# of large buffers come from memory, not cache, as the benchmark's do).
#
#   benches/net_bulk_bench.sh [--netns [--rate RATE]] [--rounds N] [--max BYTES]
#                             [--env VAR=VAL]... [--net-bench EXE] BASE_PREFIX NEW_PREFIX
#
# BASE_PREFIX and NEW_PREFIX hold bin/mpicc and bin/mpirun (scripts/install.sh --prefix).
# Default: emulated nodes on loopback (scripts/emulate-nodes.sh 2, TCP over lo; raw TCP over
# 127.0.0.1). --netns: two namespace nodes (scripts/netns-nodes.sh up 2 1, root and ip needed,
# else exit 77), mpirun --host localhost:1,n1:1 through scripts/netns-agent, raw TCP between
# 198.18.0.1 and 198.18.0.2; the namespaces are removed at the end. --rate shapes both nodes'
# rail0 with a tc token bucket (tbf) of RATE (e.g. 2gbit), so that the link, not the CPU,
# bounds the numbers. --max: the largest message (64M; sizes from 64K by factors of 4). --env sets a variable for
# both installs' runs (repeatable). Each run also prints the CPU seconds its processes used
# (/usr/bin/time, where present). --net-bench (loopback only) also runs EXE (the
# net-bench example: `cargo build --release --example net-bench`, target/release/examples/
# net-bench) each round: raw TCP with 1 and 4 streams and the TCP backend alone, per message
# size, in one process. --iters N: iterations per size (3; each of 64 messages). Output: per
# round, the raw figures and each install's gpumpi-bench table, then `uptime`, then one table:
# per size the median over rounds of base's and new's bandwidth (from each run's median time),
# the median of each round's best raw TCP figure, and new / raw.
set -euo pipefail

netns= rounds=3 netbench= rate= max=64M iters=3
envs=()
while [[ $# -gt 0 ]]; do
    case $1 in
    --netns) netns=1; shift ;;
    --rate) rate=${2:?--rate needs a value}; shift 2 ;;
    --max) max=${2:?--max needs a size}; shift 2 ;;
    --rounds) rounds=${2:?--rounds needs a number}; shift 2 ;;
    --iters) iters=${2:?--iters needs a number}; shift 2 ;;
    --env) envs+=("${2:?--env needs VAR=VAL}"); shift 2 ;;
    --net-bench) netbench=${2:?--net-bench needs a path}; shift 2 ;;
    -*) echo "net_bulk_bench: unknown option $1" >&2; exit 2 ;;
    *) break ;;
    esac
done
base=${1:?usage: net_bulk_bench.sh [--netns] [--rounds N] [--env VAR=VAL]... BASE_PREFIX NEW_PREFIX}
new=${2:?usage: net_bulk_bench.sh [--netns] [--rounds N] [--env VAR=VAL]... BASE_PREFIX NEW_PREFIX}
here=$(cd "$(dirname "$0")/.." && pwd)
nodes="$here/scripts/netns-nodes.sh"
ns=gbb$$
work=$(mktemp -d)
cleanup() {
    if [[ -n $netns ]]; then
        bash "$nodes" -p "$ns" down >/dev/null 2>&1 || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

if [[ -n $netns ]]; then
    set +e
    out=$(bash "$nodes" -p "$ns" up 2 1 2>&1)
    rc=$?
    set -e
    if [[ $rc -ne 0 ]]; then
        echo "net_bulk_bench: $out" >&2
        exit "$rc"
    fi
    raddr=198.18.0.2
    if [[ -n $rate ]]; then
        for i in 0 1; do
            bash "$nodes" -p "$ns" exec "$i" tc qdisc replace dev rail0 root tbf rate "$rate" \
                burst 256kb latency 50ms
        done
    fi
else
    raddr=127.0.0.1
fi

for which in base new; do
    eval "p=\$$which"
    "$p/bin/mpicc" -std=c99 -O2 -o "$work/bench-$which" "$here/benches/gpumpi-bench.c" -ldl -lm
done
cc -O2 -pthread -o "$work/raw_tcp" "$here/benches/raw_tcp.c"


# in_node I CMD...: CMD in namespace node I (--netns), else here.
in_node() {
    local i=$1
    shift
    if [[ -n $netns ]]; then
        bash "$nodes" -p "$ns" exec "$i" "$@"
    else
        "$@"
    fi
}

raw() {
    local s z
    for z in 1048576 67108864; do
        for s in 1 4; do
            in_node 1 "$work/raw_tcp" recv "$raddr" 47100 "$s" "$z" spin &
            local r=$!
            sleep 0.3
            in_node 0 "$work/raw_tcp" send "$raddr" 47100 "$s" 2 "$z" spin
            wait "$r"
        done
    done
}

# CPU seconds of mpirun and everything it waited for (the ranks, and the launch agents with
# theirs): a cost per byte that the machine's load does not change much.
timed=()
if [[ -x /usr/bin/time ]]; then
    timed=(/usr/bin/time -f "cpu: %U s user, %S s system, %e s wall (mpirun and the ranks)")
fi

bench() {
    local which=$1 p
    eval "p=\$$which"
    local args=(-o bw -b 64K -e "$max" -f 4 -w 1 -n "$iters")
    echo "== $which ($p)"
    if [[ -n $netns ]]; then
        bash "$nodes" -p "$ns" exec 0 env GPUMPI_NET_IFNAME==rail0 "${envs[@]}" "${timed[@]}" "$p/bin/mpirun" \
            --host localhost:1,n1:1 --launch-agent "$here/scripts/netns-agent -p $ns" \
            --timeout 900 "$work/bench-$which" "${args[@]}"
    else
        env "${envs[@]}" "${timed[@]}" "$p/bin/mpirun" -n 2 --timeout 900 "$here/scripts/emulate-nodes.sh" 2 \
            "$work/bench-$which" "${args[@]}"
    fi
}

for r in $(seq 1 "$rounds"); do
    echo "#### round $r $(date -u +%H:%M:%S) load: $(cut -d' ' -f1-3 /proc/loadavg)"
    raw
    if [[ -n $netbench && -z $netns ]]; then
        "$netbench" --mib 256 --window 32
    fi
    if [[ $((r % 2)) -eq 1 ]]; then
        bench base
        bench new
    else
        bench new
        bench base
    fi
done 2>&1 | tee "$work/log"
echo "#### end $(date -u +%H:%M:%S)"
uptime
python3 - "$work/log" <<'PY'
import re, statistics, sys
runs = {"base": {}, "new": {}}
raw, cur, best = [], None, None
for line in open(sys.argv[1]):
    if line.startswith("#### round"):
        if best is not None:
            raw.append(best)
        best = None
    m = re.match(r"raw TCP .*: ([0-9.]+) GB/s", line)
    if m:
        best = max(best or 0.0, float(m.group(1)))
    m = re.match(r"== (base|new) ", line)
    if m:
        cur = m.group(1)
    f = line.split()
    if cur and len(f) >= 11 and f[0].isdigit() and f[1].isdigit():
        size, med_us = int(f[0]), float(f[9])
        runs[cur].setdefault(size, []).append(size / med_us / 1e3)
if best is not None:
    raw.append(best)
rawm = statistics.median(raw) if raw else float("nan")
print(f"# windowed bandwidth, GB/s: median over {len(raw)} rounds of each run's median time; raw TCP = "
      f"median of each round's best raw figure ({', '.join(f'{x:.2f}' for x in raw)})")
print(f"{'size':>10} {'base':>7} {'new':>7} {'raw TCP':>8} {'new/raw':>8} {'new/base':>9}")
for size in sorted(runs["new"]):
    b = statistics.median(runs["base"].get(size, [float("nan")]))
    n = statistics.median(runs["new"][size])
    print(f"{size:>10} {b:7.2f} {n:7.2f} {rawm:8.2f} {100 * n / rawm:7.0f}% {n / b:8.2f}x")
PY
