#!/usr/bin/env bash
# Host-memory point-to-point and allreduce of gpumpi, Open MPI 5 and MPICH 5 side by side, in
# one run, on one machine: the same benches/gpumpi-bench.c built with each MPI's own mpicc and
# launched with its own launcher, the three interleaved round by round (so a change of load hits
# all three alike), under three conditions:
#   bound    each launcher's default placement (gpumpi and Open MPI bind 2 ranks on 2 cores to a
#            core each; MPICH's hydra does not bind)
#   unbound  no binding anywhere (GPUMPI_BIND=none, Open MPI --bind-to none, hydra's default)
#   busy     default placement plus one process spinning on the CPU for the whole measurement
#
# usage: benches/host_compare.sh GPUMPI_PREFIX [OUT_DIR]
#   env: ROUNDS (3), CONDS ("bound unbound busy"), VENVS (dir of venv-ompi, venv-mpich: created
#        from PyPI when missing; default ~/.cache/gpumpi-bench), NP4 (1: also allreduce at 4 ranks),
#        ONLY (a regular expression: run only the cases whose name matches, e.g. 'pingpong|allred'),
#        MPIS (the columns to run, e.g. "gpumpi base ompi"; default all: gpumpi [base] ompi mpich),
#        BASE_ENV (e.g. "GPUMPI_SHM_MID_MAX=0": also run gpumpi with these variables set, as a
#        fourth column "base", interleaved with the others: an A/B of one install),
#        BASE_PREFIX (another gpumpi install, e.g. main's: the "base" column runs it instead,
#        with BASE_ENV if set: an A/B of two builds),
#        RT (1: run every job under `chrt -f 10`, real-time priority, so that on a machine loaded
#        by other work the ranks get their cores as on an idle one; not for jobs with more
#        ranks than CPUs, which run at normal priority. Needs root. The "busy"
#        process stays at normal priority, so "busy" means nothing then: CONDS="bound unbound")
# Prints one table per condition: for every (op, size) the median over rounds of each MPI's
# per-run median (latency in us; bw in GB/s from the median time), and each MPI's busy/bound
# ratio (how much it degrades with a third busy process). Raw outputs stay in OUT_DIR/raw.
set -uo pipefail
prefix=${1:?usage: host_compare.sh GPUMPI_PREFIX [OUT_DIR]}
out=${2:-$(mktemp -d /tmp/host-compare.XXXXXX)}
rounds=${ROUNDS:-3}
conds=${CONDS:-bound unbound busy}
[ "${RT:-0}" = 1 ] && conds=${CONDS:-bound unbound}
venvs=${VENVS:-$HOME/.cache/gpumpi-bench}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out/raw" "$venvs"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# shellcheck source=benches/mpi_venvs.sh
. "$(dirname "$0")/mpi_venvs.sh"
ensure_mpi_venvs "$venvs" host_compare.sh
ompi=$venvs/venv-ompi/bin mpich=$venvs/venv-mpich/bin

build() { "$1" -std=c99 -O2 -o "$2" "$here/gpumpi-bench.c" -ldl -lm || exit 1; }
build "$prefix/bin/mpicc" "$out/gb-gpumpi"
base_prefix=${BASE_PREFIX:-$prefix}
if [ -n "${BASE_PREFIX:-}" ]; then build "$base_prefix/bin/mpicc" "$out/gb-base"; else cp "$out/gb-gpumpi" "$out/gb-base"; fi
rt=()
[ "${RT:-0}" = 1 ] && rt=(chrt -f 10)
PATH=$ompi:$PATH build "$ompi/mpicc" "$out/gb-ompi"
PATH=$mpich:$PATH build "$mpich/mpicc" "$out/gb-mpich"

# launch MPI COND NP ARGS...: one run of the benchmark
launch() {
    local mpi=$1 cond=$2 np=$3
    shift 3
    local over=""
    [ "$np" -gt "$(nproc)" ] && over=1
    # Real-time priority only where every rank has a core: spinning FIFO ranks that share one
    # starve each other (and the machine).
    local rt=("${rt[@]}")
    [ -n "$over" ] && rt=()
    case $mpi in
    base)
        local bind=core
        [ "$cond" = unbound ] && bind=none
        # shellcheck disable=SC2086
        env ${BASE_ENV:-} GPUMPI_BIND=$bind timeout 300 "${rt[@]}" "$base_prefix/bin/mpirun" ${over:+--oversubscribe} -n "$np" "$out/gb-base" "$@" ;;
    gpumpi)
        local bind=core
        [ "$cond" = unbound ] && bind=none
        GPUMPI_BIND=$bind timeout 300 "${rt[@]}" "$prefix/bin/mpirun" ${over:+--oversubscribe} -n "$np" "$out/gb-gpumpi" "$@" ;;
    ompi)
        local b=()
        [ "$cond" = unbound ] && b=(--bind-to none)
        PATH=$ompi:$PATH timeout 300 "${rt[@]}" "$ompi/mpirun" ${over:+--oversubscribe} "${b[@]}" -n "$np" "$out/gb-ompi" "$@" ;;
    mpich)
        PATH=$mpich:$PATH timeout 300 "${rt[@]}" "$mpich/mpiexec" -n "$np" "$out/gb-mpich" "$@" ;;
    esac
}

# name|ranks|benchmark arguments
cases=(
    "pingpong|2|-o pingpong -b 8 -e 8 -w 200 -n 5000"
    "bw|2|-o bw -b 64K -e 64M -f 4 -w 1 -n 3"
    "bw1|2|-o bw -W 1 -b 64K -e 64M -f 4 -w 2 -n 20"
    "allreduce|2|-o allreduce -b 8 -e 1M -f 8 -w 10 -n 100"
)
[ "${NP4:-1}" = 1 ] && cases+=("allreduce4|4|-o allreduce -b 8 -e 1M -f 8 -w 10 -n 100")
if [ -n "${ONLY:-}" ]; then
    kept=()
    for c in "${cases[@]}"; do [[ ${c%%|*} =~ $ONLY ]] && kept+=("$c"); done
    cases=("${kept[@]}")
fi
mpis_run="gpumpi ompi mpich"
[ -n "${BASE_ENV:-}${BASE_PREFIX:-}" ] && mpis_run="gpumpi base ompi mpich"
[ -n "${MPIS:-}" ] && mpis_run=$MPIS

spin_pid=""
stop_spin() { [ -n "$spin_pid" ] && kill "$spin_pid" 2>/dev/null; wait "$spin_pid" 2>/dev/null; spin_pid=""; }
trap stop_spin EXIT
{
    echo "# host_compare.sh $(date -u +%FT%TZ) on $(hostname), $(nproc) CPUs, rounds=$rounds"
    echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)"
    [ -n "${BASE_PREFIX:-}" ] && echo "# base: gpumpi of $BASE_PREFIX"
    [ -n "${BASE_ENV:-}" ] && echo "# base: gpumpi with $BASE_ENV"
    [ "${RT:-0}" = 1 ] && echo "# every job under chrt -f 10 (real-time priority)"
} | tee "$out/summary.txt"
for cond in $conds; do
    [ "$cond" = busy ] && { sh -c 'while :; do :; done' & spin_pid=$!; }
    for r in $(seq 1 "$rounds"); do
        for c in "${cases[@]}"; do
            IFS='|' read -r name np args <<<"$c"
            for mpi in $mpis_run; do
                # shellcheck disable=SC2086
                launch $mpi "$cond" "$np" $args >"$out/raw/$cond-$name-$mpi-$r.txt" 2>&1 ||
                    echo "# $cond $name $mpi round $r: exit $?" | tee -a "$out/summary.txt"
            done
        done
    done
    stop_spin
    echo "# load after $cond: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/summary.txt"
done

python3 - "$out" "$rounds" "$conds" "$mpis_run" <<'EOF' | tee -a "$out/summary.txt"
import sys, os, statistics as st
out, rounds, conds = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
mpis = sys.argv[4].split()
def rows(path):
    r = {}
    try:
        for l in open(path):
            f = l.split()
            if l.startswith("#") or len(f) < 11 or not f[0].isdigit():
                continue
            r[int(f[0])] = float(f[9])  # median time (us)
    except OSError:
        pass
    return r
res = {}
for cond in conds:
    for fn in os.listdir(os.path.join(out, "raw")):
        c, name, mpi, _ = fn[:-4].split("-")
        if c != cond: continue
        for size, med in rows(os.path.join(out, "raw", fn)).items():
            res.setdefault((cond, name, size, mpi), []).append(med)
def val(cond, name, size, mpi):
    v = res.get((cond, name, size, mpi))
    if not v: return None
    m = st.median(v)
    return size / m / 1e3 if name.startswith("bw") else m
names = sorted({k[1] for k in res}, key=lambda n: ["pingpong", "bw", "bw1", "allreduce", "allreduce4"].index(n))
for cond in conds:
    print(f"\n## {cond}: median over rounds of each run's median (pingpong: one-way us; bw: GB/s, window 64, bw1: window 1; allreduce: us)")
    print(f"{'op':<11}{'size':>10}" + "".join(f"{m:>10}" for m in mpis) + "   gpumpi/ompi" + ("  base/ompi" if "base" in mpis else "") + ("   degradation busy/bound: " + " ".join(mpis) if cond == "busy" else ""))
    for name in names:
        for size in sorted({k[2] for k in res if k[0] == cond and k[1] == name}):
            v = [val(cond, name, size, m) for m in mpis]
            s = f"{name:<11}{size:>10}" + "".join(f"{x:>10.3f}" if x is not None else f"{'-':>10}" for x in v)
            o = v[mpis.index("ompi")]
            for m in ["gpumpi", "base"] if "base" in mpis else ["gpumpi"]:
                g = v[mpis.index(m)]
                if g and o:
                    s += f"   {(g / o if name.startswith('bw') else o / g):>8.2f}x"
            if cond == "busy":
                d = []
                for m in mpis:
                    a, b = val("bound", name, size, m), val("busy", name, size, m)
                    d.append(f"{(a / b if name.startswith('bw') else b / a):.2f}" if a and b else "-")
                s += "   " + " ".join(d)
            print(s)
print("\n(gpumpi/ompi above 1: gpumpi faster; degradation: busy time / bound time, 1 = unaffected)")
EOF
echo "raw outputs: $out/raw"
