#!/usr/bin/env bash
# Run gpumpi programs under Slurm's srun on a one-node Slurm started on this machine:
#   srun --mpi=pmix (PMIx bootstrap) and srun --mpi=pmi2 (its PMI-1 wire: pmi1 bootstrap).
#
# Usage: tests/slurm.sh PREFIX [--build-dir DIR] [--install] [--c-dir DIR]
#   PREFIX       a gpumpi install (scripts/install.sh --prefix PREFIX)
#   --build-dir  where slurm.conf, state, logs and test binaries go (default build/slurm)
#   --install    apt-get install slurm-wlm, libpmix-dev (Slurm's pmix plugin dlopens
#                libpmix.so from it) and munge when srun is missing
#   --c-dir DIR  where init_plain.c, p2p_basic.c, coll_reduce.c, abort_job.c are (default tests/c)
#   --pmix-lib F also run launcher_check under srun --mpi=pmix with GPUMPI_PMIX_LIB=F (another
#                libpmix than Slurm's, e.g. Open MPI's: a client of another PMIx version)
# Needs root: munged, slurmctld and slurmd run as root here. Exits 77 (skip) with the reason
# when Slurm is not installed (without --install) or when not root. The daemons it starts
# (slurmctld, slurmd, and munged if none was running) are stopped at exit.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
prefix=""
build="$root/build/slurm"
install=no
cdir="$root/tests/c"
pmix_lib=""
while [ $# -gt 0 ]; do
    case "$1" in
        --build-dir) build="$2"; shift 2 ;;
        --install) install=yes; shift ;;
        --c-dir) cdir="$2"; shift 2 ;;
        --pmix-lib) pmix_lib="$2"; shift 2 ;;
        -h|--help) sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "slurm.sh: unknown option $1" >&2; exit 2 ;;
        *) prefix="$1"; shift ;;
    esac
done
[ -n "$prefix" ] && [ -x "$prefix/bin/mpicc" ] || {
    echo "slurm.sh: give the prefix of a gpumpi install" >&2
    exit 2
}
prefix=$(cd "$prefix" && pwd)
if [ "$(id -u)" != 0 ]; then
    echo "SKIP: a local Slurm needs root (munged, slurmctld, slurmd)"
    exit 77
fi
if ! command -v srun > /dev/null || ! command -v slurmd > /dev/null; then
    if [ "$install" = no ]; then
        echo "SKIP: Slurm is not installed (tests/slurm.sh --install installs slurm-wlm with apt-get)"
        exit 77
    fi
    export DEBIAN_FRONTEND=noninteractive
    (apt-get update -q && apt-get install -y -q slurm-wlm libpmix-dev munge) > /dev/null || {
        echo "slurm.sh: apt-get install slurm-wlm libpmix-dev munge failed" >&2
        exit 1
    }
fi
mkdir -p "$build"/{state,spool,log,bin,out}
build=$(cd "$build" && pwd)
host=$(hostname -s)

# Our daemons, stopped at exit (only those this script started, by their pid files).
pids=()
cleanup() {
    for f in "${pids[@]}"; do
        [ -f "$f" ] && kill "$(cat "$f")" 2> /dev/null
    done
}
trap cleanup EXIT

if ! munge -n 2> /dev/null | unmunge > /dev/null 2>&1; then
    [ -f /etc/munge/munge.key ] || { mungekey --create 2> /dev/null || create-munge-key; }
    mkdir -p /run/munge
    munged --force --pid-file="$build/munged.pid" 2> /dev/null || {
        echo "slurm.sh: cannot start munged" >&2
        exit 1
    }
    pids+=("$build/munged.pid")
fi

port=$((20000 + $$ % 20000))
export SLURM_CONF="$build/slurm.conf"
cat > "$SLURM_CONF" << EOF
ClusterName=gpumpi-ci
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$build/state
SlurmdSpoolDir=$build/spool
SlurmctldPidFile=$build/slurmctld.pid
SlurmdPidFile=$build/slurmd.pid
SlurmctldLogFile=$build/log/slurmctld.log
SlurmdLogFile=$build/log/slurmd.log
SlurmctldPort=$port
SlurmdPort=$((port + 1))
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
NodeName=$host CPUs=8 State=UNKNOWN
PartitionName=ci Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8
EOF
slurmctld -f "$SLURM_CONF" && pids+=("$build/slurmctld.pid")
slurmd -f "$SLURM_CONF" && pids+=("$build/slurmd.pid")
for _ in $(seq 1 40); do
    sinfo -h -o %t 2> /dev/null | grep -q idle && break
    sleep 0.5
done
sinfo -h -o %t 2> /dev/null | grep -q idle || {
    echo "slurm.sh: the local Slurm did not come up; logs in $build/log" >&2
    tail -5 "$build/log/"*.log >&2
    exit 1
}
echo "== local Slurm up ($(srun --version)); mpi plugins: $(srun --mpi=list 2>&1 | grep -v types | tr -s '\t\n' '  ')"

bin="$build/bin"
rm -rf "$bin"
mkdir -p "$bin"
progs=(launcher_check)
"$prefix/bin/mpicc" -O1 -o "$bin/launcher_check" "$root/tests/c/launcher_check.c" || exit 1
for p in init_plain p2p_basic coll_reduce abort_job; do
    if [ -f "$cdir/$p.c" ]; then
        "$prefix/bin/mpicc" -O1 -o "$bin/$p" "$cdir/$p.c" || exit 1
        [ "$p" != abort_job ] && progs+=("$p")
    fi
done

pass=0
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
for mode in "pmix pmix" "pmi2 pmi1"; do
    set -- $mode
    plugin=$1 method=$2
    echo "== srun --mpi=$plugin (bootstrap $method)"
    for n in 1 2 4 8; do
        for p in "${progs[@]}"; do
            args=""
            [ "$p" = launcher_check ] && args=$n
            [ "$p" = coll_reduce ] && args=blocking
            log="$build/out/$plugin-$p-$n"
            GPUMPI_DEBUG=1 timeout 120 srun --mpi="$plugin" -n "$n" "$bin/$p" $args > "$log.out" 2> "$log.err"
            rc=$?
            oks=$(grep -c "^OK $p" "$log.out")
            chosen=$(grep -c "bootstrap: $method " "$log.err")
            if [ $rc -ne 0 ] || [ "$oks" != 1 ] || [ "$chosen" != "$n" ]; then
                fail "srun --mpi=$plugin -n $n $p: rc=$rc, OK lines=$oks, ranks on '$method'=$chosen (see $log.*)"
            else
                pass=$((pass + 1))
                echo "  ok  srun --mpi=$plugin -n $n $p $(grep "^OK $p" "$log.out" | cut -d' ' -f3-)"
            fi
        done
    done
    if [ -x "$bin/abort_job" ]; then
        t0=$(date +%s)
        timeout 60 srun --mpi="$plugin" -n 3 "$bin/abort_job" > /dev/null 2> "$build/out/$plugin-abort.err"
        rc=$?
        if [ $rc -eq 0 ] || [ $rc -eq 124 ] || ! grep -aq MPI_Abort "$build/out/$plugin-abort.err"; then
            fail "srun --mpi=$plugin abort_job: rc=$rc"
        else
            pass=$((pass + 1))
            echo "  ok  srun --mpi=$plugin -n 3 abort_job: exit $rc after $(( $(date +%s) - t0 ))s"
        fi
    fi
done
if [ -n "$pmix_lib" ]; then
    log="$build/out/pmix-otherlib"
    GPUMPI_PMIX_LIB="$pmix_lib" GPUMPI_DEBUG=2 timeout 120 srun --mpi=pmix -n 4 "$bin/launcher_check" 4 \
        > "$log.out" 2> "$log.err"
    rc=$?
    if [ $rc -ne 0 ] || ! grep -q "^OK launcher_check size=4" "$log.out" \
        || [ "$(grep -c "pmix: loaded $pmix_lib" "$log.err")" != 4 ]; then
        fail "srun --mpi=pmix with GPUMPI_PMIX_LIB=$pmix_lib: rc=$rc (see $log.*)"
    else
        pass=$((pass + 1))
        echo "  ok  srun --mpi=pmix -n 4 launcher_check with $pmix_lib: $(grep -o "version [^(]*" "$log.err" | head -1)"
    fi
fi
echo "== $pass passed, $fails failed"
[ $fails -eq 0 ]
