#!/usr/bin/env bash
# PXN on vs off, side by side in one run, on an emulated rail-optimized fabric
# (scripts/netns-nodes.sh up 2 R --spine RATE --rail RATE): 2 namespace nodes, local rank i on
# rail i mod R (scripts/emulate-nodes.sh --rails R), cross-rail packets through a spine shaped
# to a fraction of a rail. For each layout (NODES x PER ranks) it runs gpumpi-bench's alltoall
# in each mode of MODES in alternation, ROUNDS times, and prints one table per layout: per size
# the median time of each mode, the ratio of the first mode's to each other's, and each mode's
# network operations and cross-rail operations of one call (summed over the ranks: the
# GPUMPI_DEBUG=1 counters at MPI_Finalize of a job of 1+COUNT calls minus those of a job of 1
# call, divided by COUNT; network sends plus bulk transfers, each one network operation), and
# the CPU time of one call (user plus system of every rank of the job, from the same two jobs:
# where the ranks outnumber the cores, the call's time is about this divided by the cores).
#
# usage: benches/pxn_bench.sh GPUMPI_PREFIX [OUT_DIR]
#   env: LAYOUTS ("2 4": ranks per node; 2 nodes each), RAILS (2), SPINE (250mbit),
#        RAIL (1gbit), SIZES ("-b 64K -e 4M -f 4": each rank's alltoall buffer, as in
#        nccl-tests: a block is SIZE / ranks), ROUNDS (3), ITERS (5), HIER (1: GPUMPI_COLL_HIER;
#        with PXN off MPI_Alltoall on a communicator across nodes is then hierarchical, one
#        leader per node on the network; 0: the flat schedule, every rank on the network),
#        MODES ("0 1": GPUMPI_PXN values; "1:rails" or "1:forwarders" also force
#        GPUMPI_PXN_ALLTOALL; a suffix "/H" sets GPUMPI_COLL_HIER=H for that mode only, e.g.
#        "0/0": PXN off with the flat schedule, every rank on the network), COUNT (4: calls of the counting jobs; 0: no counting),
#        CMAX (4M: count only sizes up to this many bytes),
#        OP (alltoall; or alltoallv: equal blocks through the v interface)
# Root and iproute2 needed (exit 77 otherwise, from netns-nodes.sh).
set -uo pipefail
prefix=${1:?usage: pxn_bench.sh GPUMPI_PREFIX [OUT_DIR]}
out=${2:-$(mktemp -d /tmp/pxn-bench.XXXXXX)}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
layouts=${LAYOUTS:-2 4} rails=${RAILS:-2} spine=${SPINE:-250mbit} rail=${RAIL:-1gbit}
sizes=${SIZES:--b 64K -e 4M -f 4} rounds=${ROUNDS:-3} iters=${ITERS:-5} hier=${HIER:-1}
modes=${MODES:-0 1} count=${COUNT:-4} op=${OP:-alltoall} cmax=${CMAX:-4M}
cmax=$(numfmt --from=iec "$cmax")
ns=pxnb$$
mkdir -p "$out/raw"
"$prefix/bin/mpicc" -std=c99 -O2 -o "$out/gpumpi-bench" "$here/gpumpi-bench.c" -ldl -lm || exit 1
bash "$repo/scripts/netns-nodes.sh" -p "$ns" up 2 "$rails" --spine "$spine" --rail "$rail" || exit $?
trap 'bash "$repo/scripts/netns-nodes.sh" -p "$ns" down' EXIT
echo "# $(date -u +%FT%TZ) $(uname -n), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# 2 nodes, $rails rails at $rail, spine at $spine; $op $sizes; $rounds rounds x $iters iterations; GPUMPI_COLL_HIER=$hier; modes: $modes"
# One job of mode $1 (GPUMPI_PXN[:GPUMPI_PXN_ALLTOALL]) over $n ranks; the rest are
# gpumpi-bench arguments; output to $out/raw/$tag.{out,err}.
job() {
    local mode=$1 tag=$2
    shift 2
    local pxn=${mode%%[:/]*} sched=auto h=$hier
    [[ $mode == */* ]] && h=${mode#*/} && mode=${mode%/*}
    [[ $mode == *:* ]] && sched=${mode#*:}
    GPUMPI_COLL_HIER=$h GPUMPI_DEBUG=1 GPUMPI_PXN=$pxn GPUMPI_PXN_ALLTOALL=$sched \
        /usr/bin/time -o "$out/raw/$tag.cpu" -f '%U %S' "$prefix/bin/mpirun" --oversubscribe -n "$n" --timeout 900 \
        "$repo/scripts/emulate-nodes.sh" --netns "$ns" --rails "$rails" 2 \
        "$out/gpumpi-bench" -o "$op" "$@" >"$out/raw/$tag.out" 2>"$out/raw/$tag.err" ||
        { echo "run failed: $tag (see $out/raw)" >&2; exit 1; }
}
# A mode's name in file names: ':' and '/' become '-'.
tagof() { echo "$1" | tr :/ --; }
for per in $layouts; do
    n=$((2 * per))
    for ((k = 0; k < rounds; k++)); do
        for mode in $modes; do
            job "$mode" "a2a-$per-$(tagof "$mode")-$k" $sizes -w 1 -n "$iters" \
                --csv "$out/raw/a2a-$per-$(tagof "$mode")-$k.csv"
        done
    done
    csizes=""
    if ((count > 0)); then
        csizes=$(python3 -c 'import csv,sys; print(" ".join(r["size"] for r in csv.DictReader(open(sys.argv[1]))))' \
            "$out/raw/a2a-$per-$(tagof "${modes%% *}")-0.csv")
        csizes=$(for x in $csizes; do ((x <= cmax)) && echo "$x"; done | xargs)
        for size in $csizes; do
            for mode in $modes; do
                for c in 1 $((1 + count)); do
                    job "$mode" "cnt-$per-$(tagof "$mode")-$size-$c" -b "$size" -e "$size" -w 0 -n "$c"
                done
            done
        done
    fi
    python3 - "$out/raw" "$per" "$rounds" "$count" "$modes" "$csizes" <<'PY'
import csv, re, statistics, sys
raw, per, rounds, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
modes, csizes = sys.argv[5].split(), sys.argv[6].split()
tag = lambda mode: mode.replace(':', '-').replace('/', '-')
def times(mode):
    t = {}
    for k in range(rounds):
        for r in csv.DictReader(open(f"{raw}/a2a-{per}-{tag(mode)}-{k}.csv")):
            t.setdefault(int(r["size"]), []).append(float(r["time_us"]))
    return {s: (statistics.median(v), min(v), max(v)) for s, v in t.items()}
def counters(path):
    ops = cross = 0
    for line in open(path):
        m = re.search(r"(\d+) network sends \(\d+ aggregated\), (\d+) cross-rail", line)
        if m:
            ops += int(m.group(1))
            cross += int(m.group(2))
        m = re.search(r"(\d+) bulk transfers \(\d+ bytes\) sent", line)
        if m:
            ops += int(m.group(1))
    return ops, cross
def per_call(mode, size):
    if str(size) not in csizes:
        return None
    t = f"{raw}/cnt-{per}-{tag(mode)}-{size}"
    o1, c1 = counters(f"{t}-1.err")
    o2, c2 = counters(f"{t}-{1 + count}.err")
    cpu = lambda c: sum(float(x) for x in open(f"{t}-{c}.cpu").read().split()[-2:])
    return (o2 - o1) / count, (c2 - c1) / count, (cpu(1 + count) - cpu(1)) / count * 1e6
t = {m: times(m) for m in modes}
base = modes[0]
print(f"2 nodes x {per} ranks: {len(modes)} modes; time us, median [min-max] of {rounds} rounds; "
      f"ratio = {base}'s median / the mode's; ops, cross-rail and CPU us per call, all ranks")
head = f"{'bytes':>10} {'block':>8}"
for m in modes:
    head += f" | {'PXN=' + m:>28}"
    if m != base:
        head += f" {'ratio':>6}"
    head += f" {'ops':>7} {'cross':>6} {'cpu':>7}"
print(head)
for s in sorted(t[base]):
    row = f"{s:>10} {s // (2 * per):>8}"
    for m in modes:
        med, lo, hi = t[m][s]
        row += f" | {med:>10.1f} [{lo:>7.0f}-{hi:>7.0f}]"
        if m != base:
            row += f" {t[base][s][0] / med:>6.2f}"
        c = per_call(m, s)
        row += f" {c[0]:>7.1f} {c[1]:>6.1f} {c[2]:>7.0f}" if c else f" {'-':>7} {'-':>6} {'-':>7}"
    print(row)
PY
done
echo "# raw outputs: $out/raw"
