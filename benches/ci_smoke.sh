#!/usr/bin/env bash
# CI smoke test of the benchmark harness against an MPI install:
#     benches/ci_smoke.sh PREFIX          (PREFIX/bin/mpicc and PREFIX/bin/mpirun|mpiexec)
# 1. unit tests (bench_util.h in C, compare.py/gloo_bench.py helpers in Python)
# 2. builds gpumpi-bench with PREFIX's mpicc, runs pingpong/allreduce/alltoall at
#    2 ranks on host buffers, checks #wrong == 0, and that --inject-error is caught
# 3. runs compare.py for gpumpi (and mpich when MPICH_PREFIX or the cached venv
#    exists), checks the table, CSV and PNGs exist and #wrong is 0 everywhere.
# Env: BENCH_OUT (output folder, kept; default a temp dir removed after a passing run),
# MPICH_PREFIX, PYTHON.
set -euo pipefail

PREFIX=${1:?usage: ci_smoke.sh PREFIX}
PREFIX=$(cd "$PREFIX" && pwd)
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ -n "${BENCH_OUT:-}" ]; then
    OUT=$BENCH_OUT
else
    # A temporary folder of our own: removed when the smoke test passes, kept (and named) when
    # it fails, so a CI machine keeps nothing from passing runs.
    OUT=$(mktemp -d -t gpumpi-bench-smoke.XXXXXX)
    trap 'rc=$?; if [ "$rc" = 0 ]; then rm -rf "$OUT"; else echo "ci_smoke: output kept in $OUT" >&2; fi' EXIT
fi
PY=${PYTHON:-python3}
# Open MPI refuses to run as root without these (CI runs as root); others ignore them
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1} OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
mkdir -p "$OUT"
fail() { echo "ci_smoke: FAIL: $*" >&2; exit 1; }
step() { echo "== ci_smoke: $*"; }

[ -x "$PREFIX/bin/mpicc" ] || fail "$PREFIX/bin/mpicc not found"
if [ -x "$PREFIX/bin/mpirun" ]; then RUN="$PREFIX/bin/mpirun"; else RUN="$PREFIX/bin/mpiexec"; fi
[ -x "$RUN" ] || fail "no mpirun/mpiexec in $PREFIX/bin"
LAUNCH=("$RUN" -n 2)
# MPICH's hydra has no --oversubscribe; gpumpi's and Open MPI's mpirun want it on small machines
[ -x "$PREFIX/bin/mpichversion" ] || LAUNCH+=(--oversubscribe)

step "unit tests"
cc -std=c99 -O1 -Wall -Wextra -Werror -o "$OUT/test_bench_util" "$HERE/test_bench_util.c" -lm
"$OUT/test_bench_util"
"$PY" -m unittest discover -s "$HERE" -p 'test_*.py'

step "build gpumpi-bench with $PREFIX/bin/mpicc"
"$PREFIX/bin/mpicc" -std=c99 -O2 -Wall -I "$HERE" -o "$OUT/gpumpi-bench" "$HERE/gpumpi-bench.c" -ldl -lm

step "2-rank sweep on host buffers"
CSV="$OUT/smoke.csv"
rm -f "$CSV"
for op in pingpong allreduce alltoall; do
    timeout 300 "${LAUNCH[@]}" "$OUT/gpumpi-bench" -o "$op" -b 64 -e 64K -f 4 -w 2 -n 10 -L smoke --csv "$CSV" \
        | tee "$OUT/smoke_$op.txt"
    grep -q '^ *65536 ' "$OUT/smoke_$op.txt" || fail "$op: no 64 KiB row in the output"
done
# column 14 of the CSV is #wrong
awk -F, 'NR > 1 && $1 != "backend" { n++; if ($14 != 0) bad++ } END { if (n != 18 || bad) { print "rows=" n " wrong=" bad; exit 1 } }' \
    "$CSV" || fail "smoke CSV: expected 18 rows, all with #wrong 0"

step "--json output and first-call mode"
timeout 120 "${LAUNCH[@]}" "$OUT/gpumpi-bench" -o allgather -b 64 -e 4K -f 8 -w 1 -n 3 --json "$OUT/smoke.json" > /dev/null
"$PY" -c 'import json, sys; d = json.load(open(sys.argv[1])); r = d["results"]
assert d["op"] == "allgather" and len(r) == 3 and all(x["wrong"] == 0 for x in r), d' "$OUT/smoke.json" \
    || fail "--json output is not the expected JSON"
timeout 120 "${LAUNCH[@]}" "$OUT/gpumpi-bench" -o firstcall > "$OUT/firstcall.txt"
for ev in init_main_to_mpi_init_done first_sendrecv_roundtrip first_allreduce_8B; do
    grep -Eq "^$ev +[0-9.]+$" "$OUT/firstcall.txt" || fail "firstcall: no $ev line"
done

step "validation catches a corrupted result"
timeout 120 "${LAUNCH[@]}" "$OUT/gpumpi-bench" -o allreduce -b 1K -e 1K -w 0 -n 2 --inject-error > "$OUT/inject.txt"
awk '!/^#/ && NF >= 9 { if ($9 != 1) exit 1; seen = 1 } END { exit !seen }' "$OUT/inject.txt" \
    || fail "--inject-error did not report exactly 1 wrong element: $(cat "$OUT/inject.txt")"

step "-d cuda and -B nccl without a GPU skip cleanly (exit 0)"
timeout 120 "${LAUNCH[@]}" "$OUT/gpumpi-bench" -o allreduce -d cuda -b 8 -e 8 > "$OUT/cuda.txt" || fail "-d cuda exited non-zero"
timeout 120 "${LAUNCH[@]}" "$OUT/gpumpi-bench" -o allreduce -B nccl -b 8 -e 8 > "$OUT/nccl.txt" || fail "-B nccl exited non-zero"
grep -Eq '^# (skip|nccl: not available)|^ +8 ' "$OUT/cuda.txt" || fail "-d cuda: neither a skip line nor a result"
grep -Eq '^# nccl: not available|^ +8 ' "$OUT/nccl.txt" || fail "-B nccl: neither a skip line nor a result"

step "-d cuda / -B nccl plumbing through mock libcudart.so and libnccl.so.2 (host memory, over MPI)"
MOCK="$OUT/mock"
mkdir -p "$MOCK"
cc -std=c99 -O1 -Wall -shared -fPIC -o "$MOCK/libcudart.so" "$HERE/mock/mock_cudart.c"
"$PREFIX/bin/mpicc" -std=c99 -O1 -Wall -shared -fPIC -o "$MOCK/libnccl.so.2" "$HERE/mock/mock_nccl.c"
for be in nccl mpi; do
    for op in pingpong bw sendrecv allreduce reduce_scatter alltoall bcast allgather; do
        LD_LIBRARY_PATH="$MOCK${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" timeout 120 "${LAUNCH[@]}" "$OUT/gpumpi-bench" \
            -B "$be" -d cuda -o "$op" -b 64 -e 64K -f 32 -w 1 -n 3 -t double -p max > "$OUT/mock_${be}_$op.txt"
        grep -q "^# gpumpi-bench op=$op backend=$be .*mem=cuda" "$OUT/mock_${be}_$op.txt" \
            || fail "mock $be $op did not run: $(head -3 "$OUT/mock_${be}_$op.txt")"
        awk '!/^#/ && NF >= 9 { n++; if ($9 != 0) bad++ } END { exit !(n == 3 && !bad) }' "$OUT/mock_${be}_$op.txt" \
            || fail "mock $be $op: expected 3 rows with #wrong 0: $(cat "$OUT/mock_${be}_$op.txt")"
    done
    LD_LIBRARY_PATH="$MOCK${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" timeout 120 "${LAUNCH[@]}" "$OUT/gpumpi-bench" \
        -B "$be" -d cuda -o alltoall -b 1K -e 1K -w 0 -n 2 --inject-error > "$OUT/mock_${be}_inject.txt"
    awk '!/^#/ && NF >= 9 { if ($9 != 1) exit 1; seen = 1 } END { exit !seen }' "$OUT/mock_${be}_inject.txt" \
        || fail "mock $be: --inject-error not caught"
done

# the driver-API fallback: only libcuda.so.1 (mock) and libnccl.so.2 on the path
MOCKD="$OUT/mock-driver"
mkdir -p "$MOCKD"
cc -std=c99 -O1 -Wall -shared -fPIC -o "$MOCKD/libcuda.so.1" "$HERE/mock/mock_cuda.c"
cp "$MOCK/libnccl.so.2" "$MOCKD/"
for be in mpi nccl; do
    LD_LIBRARY_PATH="$MOCKD${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" timeout 120 "${LAUNCH[@]}" "$OUT/gpumpi-bench" \
        -B "$be" -d cuda -o allreduce -b 64 -e 64K -f 32 -w 1 -n 3 > "$OUT/mockd_$be.txt"
    grep -q '^# cuda: driver API' "$OUT/mockd_$be.txt" || fail "mock driver API $be: not used: $(head -5 "$OUT/mockd_$be.txt")"
    awk '!/^#/ && NF >= 9 { n++; if ($9 != 0) bad++ } END { exit !(n == 3 && !bad) }' "$OUT/mockd_$be.txt" \
        || fail "mock driver API $be: expected 3 rows with #wrong 0"
done

step "compare.py"
BACKENDS=gpumpi
MPICH=${MPICH_PREFIX:-$HOME/.cache/gpumpi-bench/venv-mpich}
if [ -x "$MPICH/bin/mpicc" ] && [ "$MPICH" != "$PREFIX" ]; then BACKENDS=gpumpi,mpich; fi
CMP="$OUT/compare"
rc=0
MPICH_PREFIX="$MPICH" timeout 1200 "$PY" "$HERE/compare.py" --backends "$BACKENDS" --gpumpi-prefix "$PREFIX" \
    --ops pingpong,allreduce,alltoall -n 2 -b 8 -e 64K -f 8 -w 2 --iters 10 -o "$CMP" --install || rc=$?
[ -s "$CMP/tables.txt" ] || fail "no table"
for op in pingpong allreduce alltoall; do
    grep -q "^## $op" "$CMP/tables.txt" || fail "table for $op missing"
    [ -s "$CMP/$op.png" ] || fail "plot $CMP/$op.png missing"
    head -c 8 "$CMP/$op.png" | od -An -c | grep -q 'P   N   G' || fail "$op.png is not a PNG"
done
grep -q '^#   gpumpi: ok' "$CMP/tables.txt" || fail "gpumpi backend did not run: $(grep '^#   gpumpi' "$CMP/tables.txt")"
[ -s "$CMP/results.csv" ] && [ -s "$CMP/results.json" ] || fail "results.csv/json missing"
awk -F, 'NR > 1 { n++; if ($14 != 0) bad++ } END { if (!n || bad) exit 1 }' "$CMP/results.csv" \
    || fail "compare results.csv has rows with #wrong != 0 (or none)"
[ "$rc" -eq 0 ] || fail "compare.py exited $rc"
echo "ci_smoke: OK ($BACKENDS)"
