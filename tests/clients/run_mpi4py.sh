#!/usr/bin/env bash
# Build mpi4py from its PyPI sdist against an MPI install and run its own test modules; or,
# with MPI4PY_FROM=wheel, install mpi4py's binary wheel (built for the MPICH ABI) and run the same
# modules on the install's MPICH-ABI library PREFIX/lib/libmpi.so.12, which the wheel finds
# through LD_LIBRARY_PATH=PREFIX/lib (how a user points a wheel at an MPI).
#
#   tests/clients/run_mpi4py.sh PREFIX
#   MPI4PY_FROM=wheel tests/clients/run_mpi4py.sh PREFIX
#
# PREFIX is an install made by `scripts/install.sh --prefix PREFIX` (PREFIX/bin/{mpicc,mpirun},
# PREFIX/include/mpi.h, PREFIX/lib/libmpi_abi.so). Needs python3 with venv/pip, a C compiler
# and access to PyPI (mpi4py sdist; setuptools, wheel, build, Cython: all installed as wheels).
#
# Environment (all optional):
#   MPI4PY_FROM        "sdist" (default): build from source with PREFIX/bin/mpicc;
#                      "wheel": `pip install --only-binary=:all: mpi4py==VERSION` (no build); the
#                      test modules come from the sdist, which is downloaded but not built
#   CLIENTS_BUILD_DIR  where to build (default: <repo>/target/clients)
#   PYTHON             interpreter for the venv (default: python3)
#   MPI4PY_VERSION     sdist version (default 4.1.2)
#   MPI4PY_CONFIGURE   "1" (default): MPI4PY_BUILD_CONFIGURE=1 (probe every MPI name at build time);
#                      "0": trust mpi.h's MPI_ABI_VERSION (mpi4py then assumes the full MPI-5.0 API)
#   MPI4PY_CFLAGS      extra CFLAGS for compiling MPI.c (default "-O1": -O3 takes much longer)
#   MPI4PY_REBUILD     "1": rebuild even if the venv was built for the same PREFIX/mpi.h/mpi-ext.h
#   MPI4PY_NUMPY       "1": also install numpy (more array backends, about 2x test time)
#   MPI4PY_TESTS       test modules (default: the five below)
#   MPI4PY_NP          rank counts on one node (default "1 2 4")
#   MPI4PY_NODES       runs over emulated nodes, each KxR: K nodes of R ranks (default
#                      "2x2 2x2ib"; "" for none): scripts/emulate-nodes.sh K gives each rank a
#                      GPUMPI_NODE_ID, so ranks of different "nodes" talk through the network
#                      transport (loopback TCP); with GPUMPI_DEBUG=1 every rank must log frames
#                      received over the network, or the run fails. KxRib: the same with
#                      GPUMPI_NET=ib over the libibverbs test double (tests/support/fake_ibverbs.c,
#                      built here with cc; a fabric file per run), every rank also logging its
#                      ib rail; the modules of MPI4PY_IB_TESTS only
#   MPI4PY_IB_TESTS    test modules of the KxRib runs (default: those of MPI4PY_TESTS but
#                      test_cco_nb_buf, the slowest at 2x2, whose nonblocking collectives the C
#                      tests run over the double: tests/c/testlist)
#   MPI4PY_TIMEOUT     seconds per mpirun (default 600)
#   MPI4PY_XFILE       exclusion list (default: tests/clients/mpi4py-exclude.txt)
#   MPI4PY_ARGS        extra arguments for test/main.py (e.g. "-x testProbeCancel" or "-f")
#
# Exits non-zero if the build or any run fails, or a run ran no test. Exclusions and the suite's own
# skips are appended, with their reasons, to the file named by GPUMPI_TEST_SKIPS when it is set
# (scripts/test.sh lists them in its summary). Last line: "mpi4py: N passed, N failed".
set -u -o pipefail

if [ $# -lt 1 ]; then
    echo "usage: $0 PREFIX" >&2
    exit 2
fi
PREFIX=$(cd "$1" && pwd) || { echo "mpi4py: no such PREFIX: $1" >&2; exit 2; }
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
BUILD=${CLIENTS_BUILD_DIR:-$REPO/target/clients}
PY=${PYTHON:-python3}
VERSION=${MPI4PY_VERSION:-4.1.2}
CONFIGURE=${MPI4PY_CONFIGURE:-1}
TESTS=${MPI4PY_TESTS:-test_p2p_buf test_cco_buf test_cco_nb_buf test_comm test_datatype}
NPS=${MPI4PY_NP-1 2 4}
NODES=${MPI4PY_NODES-2x2 2x2ib}
IB_TESTS=${MPI4PY_IB_TESTS-$(echo " $TESTS " | sed 's/ test_cco_nb_buf / /')}
TIMEOUT=${MPI4PY_TIMEOUT:-600}
XFILE_SRC=${MPI4PY_XFILE:-$HERE/mpi4py-exclude.txt}

log() { echo "mpi4py: $*"; }
skip_record() { [ -z "${GPUMPI_TEST_SKIPS:-}" ] || echo "SKIP mpi4py $1" >>"$GPUMPI_TEST_SKIPS"; }
die() { echo "mpi4py: ERROR: $*" >&2; exit 1; }

for f in bin/mpicc bin/mpirun include/mpi.h; do
    [ -e "$PREFIX/$f" ] || die "missing $PREFIX/$f"
done
command -v "$PY" >/dev/null || die "$PY not found"

mkdir -p "$BUILD"
BUILD=$(cd "$BUILD" && pwd)
FROM=${MPI4PY_FROM:-sdist}
VENV=$BUILD/mpi4py-venv
[ "$FROM" = wheel ] && VENV=$BUILD/mpi4py-wheel-venv
SRCROOT=$BUILD/mpi4py-src
SRC=$SRCROOT/mpi4py-$VERSION
LOGDIR=$BUILD/mpi4py-logs
[ "$FROM" = wheel ] && LOGDIR=$BUILD/mpi4py-wheel-logs
rm -rf "$LOGDIR"
mkdir -p "$LOGDIR"

# --- wheel ------------------------------------------------------------------------------------
# The binary wheel carries MPI.mpich.*.so (NEEDED libmpi.so.12) and MPI.openmpi.*.so; at import,
# mpi4py dlopens libmpi.so / libmpi.so.12 from the search path and picks the variant by the
# library's answers (src/mpi4py/_mpiabi.py). The test modules come from the sdist's test/.
wheel_install() {
    if [ "${MPI4PY_REBUILD:-0}" != 1 ] && [ -e "$VENV/.gpumpi-stamp" ] &&
        [ "$(cat "$VENV/.gpumpi-stamp")" = "wheel|$VERSION" ] && [ -d "$SRC/test" ]; then
        log "reusing the mpi4py wheel in $VENV"
        return
    fi
    rm -rf "$VENV"
    "$PY" -m venv "$VENV" || die "python venv failed (Debian: apt-get install python3-venv)"
    log "installing the binary wheel mpi4py==$VERSION"
    "$VENV/bin/python" -m pip --disable-pip-version-check install -q --only-binary=:all: \
        "mpi4py==$VERSION" >"$LOGDIR/pip-wheel.log" 2>&1 ||
        { cat "$LOGDIR/pip-wheel.log" >&2; die "pip install of the mpi4py wheel failed"; }
    if [ ! -d "$SRC/test" ]; then
        # The sdist only for its tests (pip prepares its metadata: setuptools and wheel, as
        # wheels, in the venv; nothing is compiled).
        mkdir -p "$SRCROOT"
        { "$VENV/bin/python" -m pip --disable-pip-version-check install -q "setuptools>=70.1" wheel &&
            "$VENV/bin/python" -m pip --disable-pip-version-check download -q --no-deps \
                --no-binary mpi4py --no-build-isolation -d "$SRCROOT" "mpi4py==$VERSION" &&
            tar -xzf "$SRCROOT/mpi4py-$VERSION.tar.gz" -C "$SRCROOT"; } >"$LOGDIR/sdist.log" 2>&1 ||
            { cat "$LOGDIR/sdist.log" >&2; die "cannot fetch the mpi4py $VERSION sdist for its tests"; }
    fi
    echo "wheel|$VERSION" >"$VENV/.gpumpi-stamp"
}

if [ "$FROM" = wheel ]; then
    [ -e "$PREFIX/lib/libmpi.so.12" ] || die "missing $PREFIX/lib/libmpi.so.12"
    wheel_install
    export LD_LIBRARY_PATH=$PREFIX/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    # The wheel must take its MPICH variant and load gpumpi's library, not another MPI.
    "$VENV/bin/python" - <<'PYEOF' || die "the mpi4py wheel did not pick gpumpi's libmpi.so.12"
import mpi4py, mpi4py._mpiabi as abi
from mpi4py import MPI
kind = abi._get_mpiabi()
lib = MPI.Get_library_version()
print(f"mpi4py: wheel {mpi4py.__version__}: ABI variant {kind!r}, library {lib.splitlines()[0]!r}")
assert kind == "mpich", kind
assert MPI.__file__.split("/")[-1].startswith("MPI.mpich."), MPI.__file__
assert lib.startswith("gpumpi"), lib
PYEOF
else
# --- build ------------------------------------------------------------------------------------
# mpi4py links libmpi_abi dynamically: only the headers (what configure probes and MPI.c
# compiles against) and the prefix (rpath) decide whether the build must be redone.
hdrsum=$(cat "$PREFIX/include/mpi.h" "$PREFIX"/include/mpi-ext.h 2>/dev/null | cksum | cut -d' ' -f1)
stamp="$VERSION|$PREFIX|$CONFIGURE|${MPI4PY_CFLAGS:--O1}|$hdrsum"
if [ "${MPI4PY_REBUILD:-0}" != 1 ] && [ -e "$VENV/.gpumpi-stamp" ] &&
    [ "$(cat "$VENV/.gpumpi-stamp")" = "$stamp" ] && [ -d "$SRC/test" ]; then
    log "reusing mpi4py build in $VENV"
else
    t0=$(date +%s)
    rm -rf "$VENV" "$SRCROOT"
    mkdir -p "$SRCROOT"
    "$PY" -m venv "$VENV" || die "python venv failed (Debian: apt-get install python3-venv)"
    PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
    log "installing build requirements"
    "${PIP[@]}" install -q "setuptools>=70.1" wheel build "cython>=3.0.1,<4" >"$LOGDIR/pip-reqs.log" 2>&1 ||
        { cat "$LOGDIR/pip-reqs.log" >&2; die "pip install of build requirements failed"; }
    if [ "${MPI4PY_NUMPY:-0}" = 1 ]; then
        "${PIP[@]}" install -q numpy >>"$LOGDIR/pip-reqs.log" 2>&1 || die "pip install numpy failed"
    fi
    log "downloading mpi4py==$VERSION sdist"
    "${PIP[@]}" download -q --no-deps --no-binary mpi4py --no-build-isolation \
        -d "$SRCROOT" "mpi4py==$VERSION" \
        >"$LOGDIR/pip-download.log" 2>&1 ||
        { cat "$LOGDIR/pip-download.log" >&2; die "pip download failed"; }
    tar -xzf "$SRCROOT/mpi4py-$VERSION.tar.gz" -C "$SRCROOT" || die "cannot unpack the sdist"
    log "building mpi4py (configure=$CONFIGURE) with $PREFIX/bin/mpicc; log: $LOGDIR/build.log"
    benv=(MPI4PY_BUILD_MPICC="$PREFIX/bin/mpicc" MPICC="$PREFIX/bin/mpicc"
        CFLAGS="${MPI4PY_CFLAGS:--O1}")
    [ "$CONFIGURE" = 1 ] && benv+=(MPI4PY_BUILD_CONFIGURE=1)
    if ! (cd "$SRC" && env "${benv[@]}" "${PIP[@]}" install -v --no-build-isolation --no-deps .) \
        >"$LOGDIR/build.log" 2>&1; then
        grep -v '^\s*checking for' "$LOGDIR/build.log" | tail -n 60 >&2
        die "mpi4py build failed (full log: $LOGDIR/build.log)"
    fi
    echo "$stamp" >"$VENV/.gpumpi-stamp"
    cp "$LOGDIR/build.log" "$VENV/build.log"
    log "built in $(( $(date +%s) - t0 ))s"
fi
if [ -e "$VENV/build.log" ]; then
    # What the configure step found missing (names from mpi4py's src/mpi4py/libmpi.pxd).
    grep "failed check for" "$VENV/build.log" | sed "s/.*failed check for '\(.*\)'.*/\1/" \
        >"$LOGDIR/configure-missing.txt" || true
    grep -c "^ *checking for '" "$VENV/build.log" >"$LOGDIR/configure-count.txt" || true
    log "configure: $(cat "$LOGDIR/configure-count.txt") names probed," \
        "$(wc -l <"$LOGDIR/configure-missing.txt") missing (list: $LOGDIR/configure-missing.txt)"
fi

fi
PYV=$VENV/bin/python
"$PYV" -c "import mpi4py; print('mpi4py', mpi4py.__version__, mpi4py.get_config())" ||
    die "mpi4py is not importable"

# --- exclusions -------------------------------------------------------------------------------
XFILE=$LOGDIR/exclude.txt
: >"$XFILE"
if [ -e "$XFILE_SRC" ]; then
    while IFS= read -r line; do
        pat=${line%%#*}
        pat=$(echo "$pat" | tr -d '[:space:]')
        [ -n "$pat" ] || continue
        echo "$pat" >>"$XFILE"
        reason=""
        case "$line" in *'#'*) reason=${line#*#} ;; esac
        log "excluded: $pat --${reason}"
        skip_record "$pat: excluded (tests/clients/mpi4py-exclude.txt):${reason:- no reason given}"
    done <"$XFILE_SRC"
fi
XARGS=()
[ -s "$XFILE" ] && XARGS=(--xfile "$XFILE")

# --- run --------------------------------------------------------------------------------------
# The libibverbs test double for KxRib node runs, built once with cc: fake_ib_env TAG sets
# IBENV to the variables of a run over it (a fabric file of its own, removed by fake_ib_done).
IB_LIB="" IBENV=() IB_FABRIC=""
fake_ib_env() {
    if [ -z "$IB_LIB" ]; then
        IB_LIB=$BUILD/libfakeibverbs.so
        "${CC:-cc}" -shared -fPIC -O1 -Wall -o "$IB_LIB" "$REPO/tests/support/fake_ibverbs.c" -ldl ||
            die "cannot build the libibverbs test double (tests/support/fake_ibverbs.c)"
    fi
    IB_FABRIC=/dev/shm/gpumpi-fakeibv-$1-$$
    IBENV=(GPUMPI_NET=ib "GPUMPI_IBVERBS_LIB=$IB_LIB" "FAKEIBV_FABRIC=$IB_FABRIC")
}
fake_ib_done() { [ -z "$IB_FABRIC" ] || rm -f "$IB_FABRIC"; IBENV=() IB_FABRIC=""; }
passed=0
failed=0
failures=()
# run_module MODULE N TAG [LAUNCH...]: one mpirun of a module at N ranks, each rank started
# through LAUNCH (empty: directly; or scripts/emulate-nodes.sh K). TAG names its log files.
run_module() {
    local t=$1 n=$2 tag=$3 label out rc ran res nskip nnet=0 netok=1
    shift 3
    label="-n $n"
    [ $# -eq 0 ] || label="-n $n over ${tag%x*} emulated nodes"
    [[ $tag != *ib ]] || label="$label, GPUMPI_NET=ib over the libibverbs test double"
    out=$LOGDIR/$t.$tag.log
    # `python -m mpi4py` aborts the whole job if one rank dies with an exception.
    # shellcheck disable=SC2086
    timeout --kill-after=10 "$TIMEOUT" "$PREFIX/bin/mpirun" --oversubscribe -n "$n" \
        "$@" "$PYV" -m mpi4py "$SRC/test/main.py" --no-builddir -v "${XARGS[@]}" ${MPI4PY_ARGS:-} "$t" \
        >"$out" 2>&1
    rc=$?
    # Ranks share stdout/stderr, so lines can be glued together ("OKOK"): match loosely.
    ran=$(grep -oE 'Ran [0-9]+ tests?' "$out" | head -n 1 | awk '{print $2}')
    res=$(grep -oE '^(OK|FAILED)( \([^)]*\))?' "$out" | head -n 1)
    nskip=$(grep -c -E '\.\.\. skipped' "$out" || true)
    if [ $# -gt 0 ]; then
        # Over emulated nodes: every rank's network counters (GPUMPI_DEBUG=1) show frames in.
        nnet=$(grep -cE 'net: rank [0-9]+: [0-9]+ frames .* [1-9][0-9]* frames \([0-9]+ bytes\) received over the network' "$out" || true)
        [ "$nnet" -eq "$n" ] || netok=0
        # Over the ib double: every rank's ib rail too.
        [[ $tag != *ib ]] || [ "$(grep -c 'ib: rail' "$out")" -eq "$n" ] || netok=0
    fi
    if [ "$rc" -eq 0 ] && [ "${ran:-0}" -gt 0 ] && [ "$netok" = 1 ]; then
        passed=$((passed + 1))
        echo "PASS $t $label: ran ${ran:-?} per rank, $res"
    elif [ "$rc" -eq 0 ] && [ "${ran:-0}" -gt 0 ]; then
        failed=$((failed + 1))
        failures+=("$t $label")
        echo "FAIL $t $label: $nnet of $n ranks logged frames received over the network (and, over ib, an ib rail)"
    elif [ "$rc" -eq 0 ]; then
        failed=$((failed + 1))
        failures+=("$t $label")
        echo "FAIL $t $label: exit 0 but ran ${ran:-no} tests (module missing, or everything excluded?)"
        tail -n 25 "$out" | sed 's/^/    | /'
    else
        failed=$((failed + 1))
        failures+=("$t $label")
        if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
            echo "FAIL $t $label: timeout after ${TIMEOUT}s"
        else
            echo "FAIL $t $label: exit $rc, ran ${ran:-?} per rank, ${res:-no result line}"
        fi
        grep -E '^(ERROR|FAIL):' "$out" | sort | uniq -c | sed 's/^/    /' | head -n 40
        grep -E -A12 '^(ERROR|FAIL):' "$out" | grep -E '(Error|Exception|assert)' |
            sort | uniq -c | sort -rn | sed 's/^/    | /' | head -n 15
        [ -n "$ran" ] || tail -n 25 "$out" | sed 's/^/    | /'
    fi
    # Skipped tests with their reasons (all ranks, deduplicated).
    if [ "$nskip" -gt 0 ]; then
        grep -E '\.\.\. skipped' "$out" | sed -E 's/^(test\w+) \(([^)]*)\).*skipped (.*)$/\2: \3/' |
            sort -u >"$LOGDIR/$t.$tag.skipped.txt"
    fi
}
for n in $NPS; do
    for t in $TESTS; do
        run_module "$t" "$n" "n$n"
    done
done
for spec in $NODES; do
    k=${spec%x*}
    per=${spec#*x}
    per=${per%ib}
    case "$k$per" in *[!0-9]* | "") die "MPI4PY_NODES: '$spec' is not KxR or KxRib" ;; esac
    tests=$TESTS
    [[ $spec != *ib ]] || tests=$IB_TESTS
    for t in $tests; do
        [[ $spec == *ib ]] && fake_ib_env "mpi4py-$t"
        run_module "$t" "$((k * per))" "$spec" \
            env GPUMPI_DEBUG="${GPUMPI_DEBUG:-1}" "${IBENV[@]}" "$REPO/scripts/emulate-nodes.sh" "$k"
        fake_ib_done
    done
done
cat "$LOGDIR"/*.skipped.txt 2>/dev/null | sort -u >"$LOGDIR/skipped.txt"
if [ -s "$LOGDIR/skipped.txt" ]; then
    log "tests skipped by the suite itself ($(wc -l <"$LOGDIR/skipped.txt"), reasons in $LOGDIR/skipped.txt)"
    while IFS= read -r line; do skip_record "$line"; done <"$LOGDIR/skipped.txt"
fi
if [ $((passed + failed)) -eq 0 ]; then
    failed=1
    log "no test module ran (MPI4PY_TESTS='$TESTS', MPI4PY_NP='$NPS', MPI4PY_NODES='$NODES')"
fi
if [ "${#failures[@]}" -gt 0 ]; then
    log "failed: ${failures[*]}"
fi
log "logs in $LOGDIR"
echo "mpi4py: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
