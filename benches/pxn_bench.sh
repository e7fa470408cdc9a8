#!/usr/bin/env bash
# PXN on vs off, side by side in one run, on an emulated rail-optimized fabric
# (scripts/netns-nodes.sh up 2 R --spine RATE --rail RATE): 2 namespace nodes, local rank i on
# rail i mod R (scripts/emulate-nodes.sh --rails R), cross-rail packets through a spine shaped
# to a fraction of a rail. For each layout (NODES x PER ranks) it runs gpumpi-bench's alltoall
# with GPUMPI_PXN=0 and =1 in alternation, ROUNDS times, and prints per size the median time of
# each and the ratio, then each run's network counters summed over the ranks (GPUMPI_DEBUG=1
# log lines at MPI_Finalize: network sends, aggregated sends, cross-rail sends, forwarded frames,
# bulk transfers sent: each one more network operation).
#
# usage: benches/pxn_bench.sh GPUMPI_PREFIX [OUT_DIR]
#   env: LAYOUTS ("2 4": ranks per node; 2 nodes each), RAILS (2), SPINE (250mbit),
#        RAIL (1gbit), SIZES ("-b 64K -e 4M -f 4": alltoall total bytes over ranks),
#        ROUNDS (3), ITERS (5), HIER (1: GPUMPI_COLL_HIER; MPI_Alltoall on a communicator
#        across nodes is then hierarchical, one leader per node on the network, so PXN changes
#        little; 0: the flat schedule, every rank on the network)
# Root and iproute2 needed (exit 77 otherwise, from netns-nodes.sh).
set -uo pipefail
prefix=${1:?usage: pxn_bench.sh GPUMPI_PREFIX [OUT_DIR]}
out=${2:-$(mktemp -d /tmp/pxn-bench.XXXXXX)}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
layouts=${LAYOUTS:-2 4} rails=${RAILS:-2} spine=${SPINE:-250mbit} rail=${RAIL:-1gbit}
sizes=${SIZES:--b 64K -e 4M -f 4} rounds=${ROUNDS:-3} iters=${ITERS:-5} hier=${HIER:-1}
ns=pxnb$$
mkdir -p "$out/raw"
"$prefix/bin/mpicc" -std=c99 -O2 -o "$out/gpumpi-bench" "$here/gpumpi-bench.c" -ldl -lm || exit 1
bash "$repo/scripts/netns-nodes.sh" -p "$ns" up 2 "$rails" --spine "$spine" --rail "$rail" || exit $?
trap 'bash "$repo/scripts/netns-nodes.sh" -p "$ns" down' EXIT
echo "# $(date -u +%FT%TZ) $(uname -n), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# 2 nodes, $rails rails at $rail, spine at $spine; alltoall $sizes; $rounds rounds x $iters iterations; GPUMPI_COLL_HIER=$hier"
for per in $layouts; do
    n=$((2 * per))
    for ((k = 0; k < rounds; k++)); do
        for pxn in 0 1; do
            GPUMPI_COLL_HIER=$hier GPUMPI_DEBUG=1 GPUMPI_PXN=$pxn "$prefix/bin/mpirun" --oversubscribe -n "$n" --timeout 600 \
                "$repo/scripts/emulate-nodes.sh" --netns "$ns" --rails "$rails" 2 \
                "$out/gpumpi-bench" -o alltoall $sizes -w 1 -n "$iters" \
                --csv "$out/raw/a2a-$per-$pxn-$k.csv" \
                >"$out/raw/a2a-$per-$pxn-$k.out" 2>"$out/raw/a2a-$per-$pxn-$k.err" ||
                { echo "run failed: 2x$per PXN=$pxn round $k (see $out/raw)" >&2; exit 1; }
        done
    done
    python3 - "$out/raw" "$per" "$rounds" <<'PY'
import csv, glob, re, statistics, sys
raw, per, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
def times(pxn):
    t = {}
    for k in range(rounds):
        rows = list(csv.DictReader(open(f"{raw}/a2a-{per}-{pxn}-{k}.csv")))
        for r in rows:
            t.setdefault(int(r["size"]), []).append(float(r["time_us"]))
    return {s: statistics.median(v) for s, v in t.items()}
off, on = times(0), times(1)
print(f"2 nodes x {per} ranks: alltoall time (us, median of rounds)")
print(f"{'bytes':>10} {'PXN=0':>12} {'PXN=1':>12} {'off/on':>8}")
for s in sorted(off):
    print(f"{s:>10} {off[s]:>12.1f} {on[s]:>12.1f} {off[s]/on[s]:>8.2f}")
for pxn in (0, 1):
    c = [0, 0, 0, 0, 0]
    for line in open(f"{raw}/a2a-{per}-{pxn}-0.err"):
        m = re.search(r"(\d+) network sends \((\d+) aggregated\), (\d+) cross-rail", line)
        if m:
            for i in range(3):
                c[i] += int(m.group(i + 1))
        m = re.search(r"(\d+) frames \(\d+ bytes\) forwarded", line)
        if m:
            c[3] += int(m.group(1))
        m = re.search(r"(\d+) bulk transfers \(\d+ bytes\) sent", line)
        if m:
            c[4] += int(m.group(1))
    print(f"PXN={pxn} (round 0, all sizes, all ranks): {c[0]} network sends, {c[1]} aggregated, {c[2]} cross-rail, {c[3]} frames forwarded, {c[4]} bulk transfers")
PY
done
echo "# raw outputs: $out/raw"
