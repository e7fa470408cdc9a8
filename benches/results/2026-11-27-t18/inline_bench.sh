#!/bin/bash
# Between 2 emulated nodes x 1 rank (scripts/emulate-nodes.sh, loopback TCP), installs
# interleaved, ROUNDS rounds (3): one-way latency (gpumpi-bench pingpong, 8 B-256 KiB), its
# tail at 32 KiB (pingpong_tail.c: percentiles, iterations over 1 and 10 ms, and the ranks'
# context switches), windowed bandwidth (bw, 64 KiB-4 MiB) and allreduce (8 B-1 MiB).
#   inline_bench.sh LABEL=PREFIX...   e.g. base=/tmp/base new=/tmp/new
# A label `ompi` takes an Open MPI bin directory instead (run with `--mca btl tcp,self` over lo).
here=$(cd "$(dirname "$0")/../../.." && pwd)
emu=$here/scripts/emulate-nodes.sh
work=$(mktemp -d /tmp/inline_bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
run() {
    if [ "$v" = ompi ]; then
        OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 300 "$P/mpirun" \
            --oversubscribe -n 2 --mca btl tcp,self --mca btl_tcp_if_include lo --mca pml ob1 "$@"
    else
        timeout 300 "$P/bin/mpirun" -n 2 "$emu" 2 "$@"
    fi
}
for lp in "$@"; do
    v=${lp%%=*} P=${lp#*=}
    [ "$v" = ompi ] && P=$(dirname "$P")
    "$P/bin/mpicc" -std=c99 -O2 -o "$work/gb-$v" "$here/benches/gpumpi-bench.c" -ldl -lm || exit 1
    "$P/bin/mpicc" -O2 -o "$work/tail-$v" "$(dirname "$0")/pingpong_tail.c" || exit 1
done
for r in $(seq "${ROUNDS:-3}"); do
    for lp in "$@"; do
        v=${lp%%=*} P=${lp#*=}
        echo "== round $r $v $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
        run "$work/tail-$v" 32768 5000
        for args in "-o pingpong -b 8 -e 256K -f 4 -w 200 -n 2000" "-o bw -b 64K -e 4M -f 4 -w 5 -n 50" \
                    "-o allreduce -b 8 -e 1M -f 8 -w 20 -n 200"; do
            run "$work/gb-$v" $args | grep -v "^#" | grep -v "^\s*$"
        done
    done
done
