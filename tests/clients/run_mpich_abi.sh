#!/usr/bin/env bash
# The MPICH ABI (PREFIX/lib/libmpi.so.12) against MPICH's own build tools and mpi4py's ABI probe.
#
#   tests/clients/run_mpich_abi.sh PREFIX
#
# 1. tests/clients/mpich_abi/abi.c is compiled with the `mpicc` of MPICH's PyPI wheel (MPICH's
#    mpi.h and libmpi.so.12; the wheel's RUNPATH names its own lib/) and run under PREFIX's
#    mpirun at 1, 2 and 4 ranks with LD_LIBRARY_PATH=PREFIX/lib, which the loader searches before
#    a RUNPATH: the program must load gpumpi's libmpi.so.12 and pass every check.
# 2. The standard ABI as released mpi4py sees it: with MPI4PY_LIBMPI=PREFIX/lib/libmpi_abi.so.1,
#    mpi4py 4.1.2's probe (mpi4py._mpiabi) must classify gpumpi as the standard ABI ("mpiabi":
#    MPI_Abi_get_version major > 0); its wheels have no variant for it yet, so importing MPI must
#    then fail (ImportError), never load the MPICH variant on it.
#    PREFIX/lib/libmpi.so.12 must classify as "mpich". Needs the venv of
#    `MPI4PY_FROM=wheel tests/clients/run_mpi4py.sh PREFIX` (made here when missing).
#
# Environment: CLIENTS_BUILD_DIR (default <repo>/target/clients), PYTHON (python3),
# MPICH_WHEEL_VERSION (5.0.2), MPI4PY_VERSION (4.1.2), MPICH_ABI_NP (rank counts, "1 2 4").
# Last line: "mpich-abi: N passed, N failed".
set -u -o pipefail
[ $# -eq 1 ] || { echo "usage: $0 PREFIX" >&2; exit 2; }
PREFIX=$(cd "$1" && pwd) || { echo "mpich-abi: no such PREFIX: $1" >&2; exit 2; }
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
BUILD=${CLIENTS_BUILD_DIR:-$REPO/target/clients}
PY=${PYTHON:-python3}
VERSION=${MPICH_WHEEL_VERSION:-5.0.2}
NPS=${MPICH_ABI_NP:-1 2 4}
mkdir -p "$BUILD"
BUILD=$(cd "$BUILD" && pwd)
LOGDIR=$BUILD/mpich-abi-logs
rm -rf "$LOGDIR" && mkdir -p "$LOGDIR"
passed=0 failed=0
log() { echo "mpich-abi: $*"; }
die() { echo "mpich-abi: ERROR: $*" >&2; exit 1; }
pass() { passed=$((passed + 1)); echo "PASS $*"; }
fail() { failed=$((failed + 1)); echo "FAIL $*"; }
[ -e "$PREFIX/lib/libmpi.so.12" ] || die "missing $PREFIX/lib/libmpi.so.12"

# --- 1. MPICH's mpicc -----------------------------------------------------------------------------
WHEEL=$BUILD/mpich-wheel-$VERSION
if [ ! -x "$WHEEL/data/bin/mpicc" ]; then
    rm -rf "$WHEEL" && mkdir -p "$WHEEL/dl"
    log "downloading the mpich==$VERSION wheel"
    "$PY" -m pip download -q --no-deps --only-binary :all: -d "$WHEEL/dl" "mpich==$VERSION" \
        >"$LOGDIR/pip.log" 2>&1 || { cat "$LOGDIR/pip.log" >&2; die "pip download mpich failed"; }
    "$PY" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
        "$(ls "$WHEEL"/dl/mpich-*.whl)" "$WHEEL/x" || die "cannot unpack the mpich wheel"
    mv "$WHEEL"/x/mpich-*.data/data "$WHEEL/data"
    chmod +x "$WHEEL"/data/bin/*
fi
EXE=$LOGDIR/abi
if "$WHEEL/data/bin/mpicc" -Wall -O1 "$HERE/mpich_abi/abi.c" -o "$EXE" >"$LOGDIR/cc.log" 2>&1; then
    if readelf -d "$EXE" | grep 'NEEDED.*\[libmpi\.so\.12\]' >/dev/null; then
        pass "abi.c built with MPICH's mpicc ($("$WHEEL/data/bin/mpicc" -show | cut -c1-60)...)"
    else
        fail "abi.c does not link libmpi.so.12"
    fi
    for n in $NPS; do
        out=$LOGDIR/abi.n$n.log
        LD_LIBRARY_PATH=$PREFIX/lib timeout --kill-after=10 300 \
            "$PREFIX/bin/mpirun" --oversubscribe -n "$n" "$EXE" >"$out" 2>&1
        rc=$?
        if [ "$rc" -eq 0 ] && grep -q '^abi: ok' "$out"; then
            pass "abi -n $n: $(grep '^abi:' "$out")"
        else
            fail "abi -n $n: exit $rc"
            tail -n 20 "$out" | sed 's/^/    | /'
        fi
    done
else
    fail "MPICH's mpicc could not build abi.c"
    tail -n 20 "$LOGDIR/cc.log" | sed 's/^/    | /'
fi

# --- 2. mpi4py's ABI probe --------------------------------------------------------------------------
VENV=$BUILD/mpi4py-wheel-venv
if [ ! -x "$VENV/bin/python" ]; then
    MPI4PY_FROM=wheel MPI4PY_NP= bash "$HERE/run_mpi4py.sh" "$PREFIX" >"$LOGDIR/wheel.log" 2>&1
fi
if [ -x "$VENV/bin/python" ]; then
    probe() { # expected-kind env...
        local want=$1; shift
        env "$@" "$VENV/bin/python" - "$want" <<'PYEOF'
import sys
import mpi4py._mpiabi as abi
want = sys.argv[1]
kind = abi._get_mpiabi()
assert kind == want, f"classified as {kind!r}, expected {want!r}"
try:
    from mpi4py import MPI
except ImportError as e:
    assert want == "mpiabi", e
    print(f"{kind}: this wheel has no variant for it ({e})")
else:
    assert want == "mpich", f"imported {MPI.__file__} for {kind!r}"
    assert MPI.Get_library_version().startswith("gpumpi")
    print(f"{kind}: {MPI.__file__.split('/')[-1]}")
PYEOF
    }
    if o=$(probe mpich LD_LIBRARY_PATH="$PREFIX/lib" 2>&1); then pass "mpi4py probe, libmpi.so.12: $o"; else fail "mpi4py probe, libmpi.so.12: $o"; fi
    if o=$(probe mpiabi MPI4PY_LIBMPI="$PREFIX/lib/libmpi_abi.so.1" 2>&1); then
        pass "mpi4py probe, MPI4PY_LIBMPI=libmpi_abi.so.1: $o"
    else
        fail "mpi4py probe, MPI4PY_LIBMPI=libmpi_abi.so.1: $o"
    fi
else
    fail "no mpi4py wheel venv ($LOGDIR/wheel.log)"
    tail -n 20 "$LOGDIR/wheel.log" | sed 's/^/    | /'
fi
log "logs in $LOGDIR"
echo "mpich-abi: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
