#!/usr/bin/env bash
# Node-aggregated gatherv/scatterv (GPUMPI_COLL_HIER=1) against the flat linear schedules
# (GPUMPI_COLL_HIER=0) on 2 emulated nodes of PER ranks each (scripts/emulate-nodes.sh over
# loopback TCP, or namespace nodes with NETNS=1: scripts/netns-nodes.sh, root needed). For each
# op it runs gpumpi-bench (blocking, root 0, equal blocks through the v interface) in each mode
# in alternation, ROUNDS times, and prints per size the median and range over the rounds of each
# run's time per call (gpumpi-bench's med_us: the median over its iterations, the largest over
# the ranks; the mean is dominated by preemptions where the ranks outnumber the cores), and
# the network operations of one call (summed over the ranks: the GPUMPI_DEBUG=1 counters at
# MPI_Finalize of a job of 10+COUNT calls back to back (-z 0: 10 batches, the same barriers)
# minus those of a job of 10 calls, divided by COUNT; network sends plus bulk transfers).
#
# usage: benches/gatherv_bench.sh GPUMPI_PREFIX [OUT_DIR]
#   env: PER (4), OPS ("gatherv scatterv"), SIZES ("-b 64 -e 64K -f 16": the total over ranks,
#        as in nccl-tests), ROUNDS (5), ITERS (20), COUNT (20, a multiple of 10; 0: no counting), NETNS (0)
set -uo pipefail
prefix=${1:?usage: gatherv_bench.sh GPUMPI_PREFIX [OUT_DIR]}
out=${2:-$(mktemp -d /tmp/gatherv-bench.XXXXXX)}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
per=${PER:-4} ops=${OPS:-gatherv scatterv} sizes=${SIZES:--b 64 -e 64K -f 16}
rounds=${ROUNDS:-5} iters=${ITERS:-20} count=${COUNT:-20} netns=${NETNS:-0}
n=$((2 * per))
mkdir -p "$out/raw"
"$prefix/bin/mpicc" -std=c99 -O2 -o "$out/gpumpi-bench" "$here/gpumpi-bench.c" -ldl -lm || exit 1
emu=("$repo/scripts/emulate-nodes.sh")
if [ "$netns" = 1 ]; then
    ns=gvb$$
    bash "$repo/scripts/netns-nodes.sh" -p "$ns" up 2 1 || exit $?
    trap 'bash "$repo/scripts/netns-nodes.sh" -p "$ns" down' EXIT
    emu+=(--netns "$ns")
fi
echo "# $(date -u +%FT%TZ) $(uname -n), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# 2 nodes x $per ranks ($([ "$netns" = 1 ] && echo namespaces || echo loopback)); $sizes; $rounds rounds x $iters iterations; GPUMPI_COLL_HIER 0 (flat) and 1 (hierarchical) alternated"
job() { # hier tag op bench-args...
    local hier=$1 tag=$2 op=$3
    shift 3
    GPUMPI_COLL_HIER=$hier GPUMPI_DEBUG=1 "$prefix/bin/mpirun" --oversubscribe -n "$n" --timeout 600 \
        "${emu[@]}" 2 "$out/gpumpi-bench" -o "$op" "$@" >"$out/raw/$tag.out" 2>"$out/raw/$tag.err" ||
        { echo "run failed: $tag (see $out/raw)" >&2; exit 1; }
}
for op in $ops; do
    for ((k = 0; k < rounds; k++)); do
        for hier in 0 1; do
            job "$hier" "$op-$hier-$k" "$op" $sizes -w 2 -n "$iters" --csv "$out/raw/$op-$hier-$k.csv"
        done
    done
    csizes=$(python3 -c 'import csv,sys; print(" ".join(r["size"] for r in csv.DictReader(open(sys.argv[1]))))' "$out/raw/$op-0-0.csv")
    if ((count > 0)); then
        for size in $csizes; do
            for hier in 0 1; do
                for c in 10 $((10 + count)); do
                    job "$hier" "cnt-$op-$hier-$size-$c" "$op" -b "$size" -e "$size" -w 0 -z 0 -n "$c"
                done
            done
        done
    fi
    python3 - "$out/raw" "$op" "$rounds" "$count" "$csizes" "$per" <<'PY'
import csv, re, statistics, sys
raw, op, rounds, count, csizes, per = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5].split(), int(sys.argv[6])
def times(h):
    t = {}
    for k in range(rounds):
        for r in csv.DictReader(open(f"{raw}/{op}-{h}-{k}.csv")):
            t.setdefault(int(r["size"]), []).append(float(r["med_us"]))
    return {s: (statistics.median(v), min(v), max(v)) for s, v in t.items()}
def ops(path):
    n = 0
    for line in open(path):
        m = re.search(r"(\d+) network sends \(\d+ aggregated\)", line)
        if m:
            n += int(m.group(1))
        m = re.search(r"(\d+) bulk transfers \(\d+ bytes\) sent", line)
        if m:
            n += int(m.group(1))
    return n
def per_call(h, s):
    if count == 0:
        return None
    tag = f"{raw}/cnt-{op}-{h}-{s}"
    return (ops(f"{tag}-{10 + count}.err") - ops(f"{tag}-10.err")) / count
t = {h: times(h) for h in (0, 1)}
print(f"{op}, 2 nodes x {per} ranks: med_us, median [min-max] of {rounds} rounds; flat/hier = ratio of medians; ops = network operations per call, all ranks")
print(f"{'bytes':>9} {'block':>7} | {'flat (HIER=0)':>26} {'ops':>5} | {'hierarchical (HIER=1)':>26} {'ops':>5} | {'flat/hier':>9}")
for s in sorted(t[0]):
    row = f"{s:>9} {s // (2 * per):>7}"
    for h in (0, 1):
        med, lo, hi = t[h][s]
        c = per_call(h, s)
        row += f" | {med:>9.1f} [{lo:>6.0f}-{hi:>6.0f}]     {c if c is not None else '-':>5}"
    row += f" | {t[0][s][0] / t[1][s][0]:>9.2f}"
    print(row)
PY
done
echo "# raw outputs: $out/raw"
