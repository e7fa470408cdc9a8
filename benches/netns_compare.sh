#!/usr/bin/env bash
# gpumpi beside Open MPI 5 and MPICH 5 between namespace nodes (scripts/netns-nodes.sh), side by
# side in one run, with the raw TCP throughput between the namespaces (the limit): issue 18's
# multi-node benchmark on one machine. The same benches/gpumpi-bench.c is built with each MPI's
# own mpicc; each MPI runs with its own launcher across the nodes (our mpirun through
# scripts/netns-agent, Open MPI's mpirun with the agent as its ssh, hydra with the agent as its
# launcher), the three interleaved case by case and round by round.
#
#   benches/netns_compare.sh GPUMPI_PREFIX [OUT_DIR]
#   env: ROUNDS (2), VENVS (dir of venv-ompi, venv-mpich; created from PyPI when missing;
#        default ~/.cache/gpumpi-bench), ONLY (regular expression over the case names:
#        pingpong bw allreduce2x2 allreduce4x1), MPIS (default "gpumpi ompi mpich"),
#        ALLREDUCE_MAX (64M: the largest allreduce; where the ranks outnumber the CPUs, as 4
#        ranks on a 2-CPU machine, Open MPI's and MPICH's spinning ranks take milliseconds to
#        seconds per call, and 1M keeps a run within minutes), BASE_PREFIX (another gpumpi
#        install, run as "base" beside the others: an A/B of a change in the same run),
#        BUSY (1: a process spinning on the machine, outside the namespaces, for the whole run:
#        a machine busy with other work; default 0)
#
# Cases: 8 B-64 KiB ping-pong and windowed bandwidth 64 KiB-64 MiB (window 64) between 2 nodes
# of 1 rank (64-256 KiB with 50 windows timed, a window there taking milliseconds; from 1 MiB
# with 3); allreduce 8 B-64 MiB at 2 nodes x 2 ranks and 4 nodes x 1 rank (8 B-32 KiB in x8
# steps, 200 iterations; 256 KiB-64 MiB in x4 steps, 10 iterations). Open MPI runs
# `--mca pml ob1 --mca btl tcp,sm,self` on rail0 (TCP between nodes, shared memory inside one,
# as a user would run it), MPICH `FI_PROVIDER=tcp` on rail0 (its ch4 ofi netmod). No MPI binds
# its ranks: each namespace node would otherwise bind its first rank to the machine's first core,
# all of them to the same one. Prints one table per case: the median over rounds of each run's
# median (one-way us for ping-pong, GB/s for bandwidth, us for allreduce), and for bandwidth the
# best raw TCP figure (benches/raw_tcp.c: 1 or 4 streams of 64 KiB or 1 MiB writes). Needs root
# and `ip` (else exit 77 with the reason).
set -uo pipefail
prefix=${1:?usage: netns_compare.sh GPUMPI_PREFIX [OUT_DIR]}
out=${2:-$(mktemp -d /tmp/netns-compare.XXXXXX)}
rounds=${ROUNDS:-2}
venvs=${VENVS:-$HOME/.cache/gpumpi-bench}
base=${BASE_PREFIX:-}
mpis=${MPIS:-gpumpi${base:+ base} ompi mpich}
here=$(cd "$(dirname "$0")/.." && pwd)
nodes="$here/scripts/netns-nodes.sh"
ns=gnc$$
mkdir -p "$out/raw"
cc -O2 -pthread -o "$out/raw_tcp" "$(dirname "$0")/raw_tcp.c" || exit 1
spinner=
cleanup() {
    [ -n "$spinner" ] && kill "$spinner" 2> /dev/null
    bash "$nodes" -p "$ns" down > /dev/null 2>&1 || true
}
trap cleanup EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# shellcheck source=benches/mpi_venvs.sh
. "$(dirname "$0")/mpi_venvs.sh"
ensure_mpi_venvs "$venvs" netns_compare.sh
ompi=$venvs/venv-ompi mpich=$venvs/venv-mpich

up=$(bash "$nodes" -p "$ns" up 4 1 2>&1)
rc=$?
[ $rc -ne 0 ] && { echo "netns_compare.sh: $up" >&2; exit $rc; }
agent=$out/agent agentk=$out/agent-keep
printf '#!/bin/sh\nexec "%s" -p %s "$@"\n' "$here/scripts/netns-agent" "$ns" > "$agent"
printf '#!/bin/sh\nexec "%s" -p %s --keep-hostname "$@"\n' "$here/scripts/netns-agent" "$ns" > "$agentk"
chmod +x "$agent" "$agentk"

build() { "$1" -std=c99 -O2 -o "$2" "$here/benches/gpumpi-bench.c" -ldl -lm || exit 1; }
build "$prefix/bin/mpicc" "$out/gb-gpumpi"
[ -n "$base" ] && build "$base/bin/mpicc" "$out/gb-base"
PATH=$ompi/bin:$PATH build "$ompi/bin/mpicc" "$out/gb-ompi"
PATH=$mpich/bin:$PATH build "$mpich/bin/mpicc" "$out/gb-mpich"

# launch MPI NODES PER_NODE ARGS...: one run across the first NODES nodes.
launch() {
    local mpi=$1 n=$2 per=$3
    shift 3
    local i ours="localhost:$per" theirs="198.18.0.1:$per"
    for ((i = 1; i < n; i++)); do
        ours+=",n$i:$per"
        theirs+=",198.18.0.$((i + 1)):$per"
    done
    local np=$((n * per))
    case $mpi in
    gpumpi | base)
        local p=$prefix
        [ "$mpi" = base ] && p=$base
        timeout 600 bash "$nodes" -p "$ns" exec 0 env GPUMPI_BIND=none GPUMPI_NET_IFNAME==rail0 \
            "$p/bin/mpirun" --host "$ours" --launch-agent "$agent" "$out/gb-$mpi" "$@" ;;
    ompi)
        timeout 600 "$agent" 198.18.0.1 env PATH="$ompi/bin:$PATH" OMPI_ALLOW_RUN_AS_ROOT=1 \
            OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "$ompi/bin/mpirun" --allow-run-as-root --bind-to none \
            --prefix "$ompi" --mca plm_ssh_agent "$agent" --host "$theirs" -n $np --mca pml ob1 \
            --mca btl tcp,sm,self --mca btl_tcp_if_include rail0 "$out/gb-ompi" "$@" ;;
    mpich)
        timeout 600 "$agentk" 198.18.0.1 "$mpich/bin/mpiexec.hydra" -launcher ssh \
            -launcher-exec "$agentk" -hosts "$theirs" -n $np -genv MPICH_CH4_NETMOD ofi \
            -genv FI_PROVIDER tcp -genv FI_TCP_IFACE rail0 "$out/gb-mpich" "$@" ;;
    esac
}

# Allreduce: 8 B-32 KiB with 200 timed iterations (a median over 10 iterations of a
# microsecond-scale call moves by tens of percent from run to run where ranks share CPUs), then
# 256 KiB up to ALLREDUCE_MAX in x4 steps (to 64 MiB by default) with 10.
amax=${ALLREDUCE_MAX:-64M}
small="-o allreduce -b 8 -e 32K -f 8 -w 20 -n 200"
large="-o allreduce -b 256K -e $amax -f 4 -w 2 -n 10"
# name|nodes|ranks per node|benchmark arguments (one launch per ';'-separated part)
cases=(
    "pingpong|2|1|-o pingpong -b 8 -e 64K -f 8 -w 200 -n 2000"
    "bw|2|1|-o bw -b 64K -e 256K -f 4 -w 5 -n 50;-o bw -b 1M -e 64M -f 4 -w 1 -n 3"
    "allreduce2x2|2|2|$small;$large"
    "allreduce4x1|4|1|$small;$large"
)
if [ -n "${ONLY:-}" ]; then
    kept=()
    for c in "${cases[@]}"; do [[ ${c%%|*} =~ $ONLY ]] && kept+=("$c"); done
    cases=("${kept[@]}")
fi
if [ "${BUSY:-0}" = 1 ]; then
    sh -c 'while :; do :; done' &
    spinner=$!
fi
{
    echo "# netns_compare.sh $(date -u +%FT%TZ) on $(hostname), $(nproc) CPUs, rounds=$rounds${spinner:+, busy (one spinning process)}"
    echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$out/summary.txt"
for r in $(seq 1 "$rounds"); do
    # Raw TCP node 0 -> node 1 in each round (benches/raw_tcp.c, both ends polling their
    # sockets as the MPIs do): 1 and 4 streams of 64 KiB and 1 MiB writes, 2 s each.
    for z in 65536 1048576; do
        for s in 1 4; do
            port=$((47000 + s))
            bash "$nodes" -p "$ns" exec 1 "$out/raw_tcp" recv 198.18.0.2 $port "$s" $z spin &
            rp=$!
            sleep 0.3
            bash "$nodes" -p "$ns" exec 0 "$out/raw_tcp" send 198.18.0.2 $port "$s" 2 $z spin \
                >> "$out/raw/raw-tcp.txt"
            wait "$rp"
        done
    done
    for c in "${cases[@]}"; do
        IFS='|' read -r name n per args <<< "$c"
        IFS=';' read -r -a parts <<< "$args"
        for mpi in $mpis; do
            : > "$out/raw/$name-$mpi-$r.txt"
            for a in "${parts[@]}"; do
                # shellcheck disable=SC2086
                launch "$mpi" "$n" "$per" $a >> "$out/raw/$name-$mpi-$r.txt" 2>&1 ||
                    echo "# $name $mpi round $r ($a): exit $?" | tee -a "$out/summary.txt"
            done
        done
    done
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/summary.txt"

python3 - "$out" "$mpis" << 'EOF' | tee -a "$out/summary.txt"
import os, re, statistics as st, sys
out, mpis = sys.argv[1], sys.argv[2].split()
res = {}
for fn in os.listdir(os.path.join(out, "raw")):
    m = re.match(r"(\w+)-(\w+)-(\d+)\.txt$", fn)
    if not m or m.group(1) == "raw":
        continue
    name, mpi = m.group(1), m.group(2)
    for l in open(os.path.join(out, "raw", fn)):
        f = l.split()
        if l.startswith("#") or len(f) < 11 or not f[0].isdigit():
            continue
        res.setdefault((name, int(f[0]), mpi), []).append(float(f[9]))
raw = [float(x) for x in re.findall(r"([0-9.]+) GB/s", open(os.path.join(out, "raw", "raw-tcp.txt")).read())]
print(f"\nraw TCP node 0 -> node 1, GB/s per run (1 and 4 streams of 64 KiB, then of 1 MiB writes, per round): {' '.join(f'{x:.2f}' for x in raw)}")
best_raw = st.median(sorted(raw)[len(raw) // 2:]) if raw else None
for name in ["pingpong", "bw", "allreduce2x2", "allreduce4x1"]:
    sizes = sorted({k[1] for k in res if k[0] == name})
    if not sizes:
        continue
    unit = "GB/s, window 64" if name == "bw" else ("one-way us" if name == "pingpong" else "us")
    print(f"\n## {name} ({unit}; median over rounds of each run's median)")
    print(f"{'size':>10}" + "".join(f"{m:>10}" for m in mpis) + "  gpumpi/best" + ("  gpumpi/raw" if name == "bw" else ""))
    for s in sizes:
        v = {}
        for m in mpis:
            x = res.get((name, s, m))
            if x:
                med = st.median(x)
                v[m] = s / med / 1e3 if name == "bw" else med
        row = f"{s:>10}" + "".join(f"{v[m]:>10.3f}" if m in v else f"{'-':>10}" for m in mpis)
        others = [v[m] for m in mpis if m not in ("gpumpi", "base") and m in v]
        if "gpumpi" in v and others:
            g = v["gpumpi"]
            row += f"  {(g / max(others) if name == 'bw' else min(others) / g):>10.2f}x"
        if name == "bw" and "gpumpi" in v and best_raw:
            row += f"  {v['gpumpi'] / best_raw:>9.0%}"
        print(row)
print("\n(gpumpi/best above 1: gpumpi ahead of the better of the others; gpumpi/raw: against the median of the better half of the raw TCP runs)")
EOF
echo "raw outputs: $out/raw"
