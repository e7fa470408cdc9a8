#!/usr/bin/env bash
# Windowed bandwidth (gpumpi-bench -o bw, 1+1 ranks) between two namespace nodes for several
# (install, environment) variants, interleaved round by round (order rotated each round), with
# raw TCP (1 and 2 streams, 1 MiB and 64 MiB writes, 2 s each) and `uptime` in every round.
#
#   variants.sh ROUNDS MAX NAME=PREFIX[,VAR=VAL...] ...
set -euo pipefail
rounds=$1 max=$2
shift 2
here=$(cd "$(dirname "$0")/../../.." && pwd)
nodes="$here/scripts/netns-nodes.sh"
ns=nb25$$
work=$(mktemp -d)
cleanup() { bash "$nodes" -p "$ns" down >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT
bash "$nodes" -p "$ns" up 2 1 >/dev/null
names=() ; declare -A pre envs
for v in "$@"; do
    n=${v%%=*}; rest=${v#*=}
    IFS=, read -r -a parts <<<"$rest"
    pre[$n]=${parts[0]}; envs[$n]="${parts[*]:1}"
    names+=("$n")
    [[ -x $work/bench-$(basename "${parts[0]}") ]] || \
        "${parts[0]}/bin/mpicc" -std=c99 -O2 -o "$work/bench-$(basename "${parts[0]}")" "$here/benches/gpumpi-bench.c" -ldl -lm
done
raw() {
    local z s r
    for z in 1048576 67108864; do for s in 1 2; do
        bash "$nodes" -p "$ns" exec 1 python3 "$here/benches/raw_tcp.py" recv 198.18.0.2 47100 "$s" "$z" &
        r=$!; sleep 0.5
        bash "$nodes" -p "$ns" exec 0 python3 "$here/benches/raw_tcp.py" send 198.18.0.2 47100 "$s" 2 "$z"
        wait "$r"
    done; done
}
bench() {
    local n=$1 p=${pre[$1]}
    echo "== $n ($p ${envs[$1]}) $(cut -d' ' -f1-3 /proc/loadavg)"
    # shellcheck disable=SC2086
    bash "$nodes" -p "$ns" exec 0 env GPUMPI_NET_IFNAME==rail0 ${envs[$n]} /usr/bin/time -f "cpu: %U s user, %S s system, %e s wall" \
        "$p/bin/mpirun" --host localhost:1,n1:1 --launch-agent "$here/scripts/netns-agent -p $ns" \
        --timeout 900 "$work/bench-$(basename "$p")" -o bw -b 64K -e "$max" -f 4 -w 1 -n 3
}
for r in $(seq 1 "$rounds"); do
    echo "#### round $r $(date -u +%H:%M:%S) $(uptime)"
    raw
    k=${#names[@]}
    for i in $(seq 0 $((k - 1))); do bench "${names[$(( (i + r - 1) % k ))]}"; done
done 2>&1 | tee "$work/log"
echo "#### end $(date -u +%H:%M:%S) $(uptime)"
python3 - "$work/log" "${names[@]}" <<'PY'
import re, statistics, sys
names = sys.argv[2:]
runs = {n: {} for n in names}
raw, cur, best = [], None, None
for line in open(sys.argv[1]):
    if line.startswith("#### round"):
        if best is not None: raw.append(best)
        best = None
    m = re.match(r"raw TCP .*: ([0-9.]+) GB/s", line)
    if m: best = max(best or 0.0, float(m.group(1)))
    m = re.match(r"== (\S+) ", line)
    if m: cur = m.group(1)
    f = line.split()
    if cur and len(f) >= 11 and f[0].isdigit() and f[1].isdigit():
        runs[cur].setdefault(int(f[0]), []).append(int(f[0]) / float(f[9]) / 1e3)
if best is not None: raw.append(best)
rawm = statistics.median(raw)
print(f"# GB/s, median over rounds of each run's median iteration; raw TCP = median of each round's best ({', '.join(f'{x:.2f}' for x in raw)})")
print(f"{'size':>10} " + " ".join(f"{n:>8}" for n in names) + f" {'raw':>6} " + " ".join(f"{n+'/raw':>9}" for n in names))
for size in sorted(runs[names[0]]):
    v = [statistics.median(runs[n].get(size, [float('nan')])) for n in names]
    print(f"{size:>10} " + " ".join(f"{x:8.2f}" for x in v) + f" {rawm:6.2f} " + " ".join(f"{100*x/rawm:8.0f}%" for x in v))
PY
