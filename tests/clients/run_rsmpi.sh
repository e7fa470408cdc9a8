#!/usr/bin/env bash
# Build the rsmpi (`mpi` crate) client programs against an MPI install and run them.
#
#   tests/clients/run_rsmpi.sh PREFIX
#
# PREFIX is an install made by `scripts/install.sh --prefix PREFIX`:
#   PREFIX/bin/{mpicc,mpirun}, PREFIX/include/mpi.h, PREFIX/lib/libmpi_abi.so,
#   PREFIX/lib/pkgconfig/mpi.pc
#
# Environment (all optional):
#   CLIENTS_BUILD_DIR  where to build (default: <repo>/target/clients)
#   RSMPI_PROBE        how mpi-sys finds MPI: "mpicc" (default; MPICC + `mpicc -show`) or
#                      "pkgconfig" (MPI_PKG_CONFIG=PREFIX/lib/pkgconfig/mpi.pc)
#   RSMPI_COMPAT       "auto" (default): add a compatibility header only when PREFIX's mpi.h lacks
#                      MPI_Fint / MPI_Comm_c2f (see README); "0": never; "1": always
#   RSMPI_NP           rank counts to run on one node (default "1 2 4")
#   RSMPI_NODES        runs over emulated nodes, each KxR: K nodes of R ranks (default
#                      "2x2 2x2ib"; "" for none): scripts/emulate-nodes.sh K gives each rank a
#                      GPUMPI_NODE_ID, so ranks of different "nodes" talk through the network
#                      transport (loopback TCP); with GPUMPI_DEBUG=1 every rank must log frames
#                      received over the network, or the run fails (our programs; the upstream
#                      examples run on one node only). KxRib: the same with GPUMPI_NET=ib over the
#                      libibverbs test double (tests/support/fake_ibverbs.c, built here with cc;
#                      a fabric file per run), every rank also logging its ib rail
#   RSMPI_TIMEOUT      seconds per mpirun (default 120)
#   RSMPI_PROGRAMS     space-separated subset of our programs to run (default: all)
#   RSMPI_UPSTREAM     "1": also build and run rsmpi's own examples (default 0)
#   RSMPI_VERBOSE      "1": print every program's output
#
# Exits non-zero if the build or any run fails, or nothing ran. Skipped runs are appended, with
# their reasons, to the file named by GPUMPI_TEST_SKIPS when it is set (scripts/test.sh lists
# them). Last line: "rsmpi: N passed, N failed, N skipped".
set -u -o pipefail

if [ $# -lt 1 ]; then
    echo "usage: $0 PREFIX" >&2
    exit 2
fi
PREFIX=$(cd "$1" && pwd) || { echo "rsmpi: no such PREFIX: $1" >&2; exit 2; }
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
BUILD=${CLIENTS_BUILD_DIR:-$REPO/target/clients}
PROBE=${RSMPI_PROBE:-mpicc}
COMPAT=${RSMPI_COMPAT:-auto}
NPS=${RSMPI_NP-1 2 4}
NODES=${RSMPI_NODES-2x2 2x2ib}
TIMEOUT=${RSMPI_TIMEOUT:-120}
PROGRAMS=${RSMPI_PROGRAMS:-env_info p2p bcast reduce gather_scatter nonblocking comm_split datatypes}
export CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-1}

log() { echo "rsmpi: $*"; }
die() { echo "rsmpi: ERROR: $*" >&2; exit 1; }

for f in bin/mpicc bin/mpirun include/mpi.h; do
    [ -e "$PREFIX/$f" ] || die "missing $PREFIX/$f"
done
ls "$PREFIX"/lib/libmpi_abi.so* >/dev/null 2>&1 || die "missing $PREFIX/lib/libmpi_abi.so"
command -v cargo >/dev/null || die "cargo not found"

# bindgen (run by mpi-sys's build script) loads libclang at run time.
if [ -z "${LIBCLANG_PATH:-}" ] && ! ldconfig -p 2>/dev/null | grep 'libclang[-.0-9]*\.so' >/dev/null; then
    die "libclang not found: install Debian package libclang-dev (or set LIBCLANG_PATH)"
fi

mkdir -p "$BUILD"
BUILD=$(cd "$BUILD" && pwd)
TARGET=$BUILD/rsmpi-target
LOGDIR=$BUILD/rsmpi-logs
rm -rf "$LOGDIR"
mkdir -p "$TARGET" "$LOGDIR"

# --- how mpi-sys will find MPI ------------------------------------------------------------
# build-probe-mpi tries, in order: $MPI_PKG_CONFIG (a .pc file path or package name),
# $CRAY_MPICH_DIR, `$MPICC -show` (default `mpicc`), pkg-config mpich, pkg-config ompi.
# From `mpicc -show` it keeps only -I, -L and -l arguments (no rpath), and the cc crate compiles
# mpi-sys's C shim with $MPICC itself; bindgen gets only the -I paths.
need_compat=0
case "$COMPAT" in
    1) need_compat=1 ;;
    0) need_compat=0 ;;
    auto)
        # Compile with the flags the chosen probe will hand to mpi-sys.
        if [ "$PROBE" = pkgconfig ]; then
            probe_cc=(cc $(PKG_CONFIG_PATH="$PREFIX/lib/pkgconfig" pkg-config --cflags mpi))
        else
            probe_cc=("$PREFIX/bin/mpicc")
        fi
        if ! printf '#include <mpi.h>\nMPI_Fint f(MPI_Comm c) { return MPI_Comm_c2f(c); }\n' |
            "${probe_cc[@]}" -Werror=implicit-function-declaration -x c -c -o /dev/null - \
            >"$LOGDIR/compat-probe.log" 2>&1; then
            need_compat=1
        fi ;;
    *) die "RSMPI_COMPAT must be auto, 0 or 1" ;;
esac

INCS="-I$PREFIX/include"
if [ "$need_compat" = 1 ]; then
    # mpi-sys 0.2.x needs MPI_Fint and MPI_<handle>_c2f/_f2c, which the MPI-5.0 standard-ABI
    # mpi.h does not declare (it has MPI_<handle>_toint/_fromint instead). Map them.
    log "PREFIX/include/mpi.h lacks MPI_Fint/MPI_Comm_c2f: using the compatibility header"
    COMPATDIR=$BUILD/rsmpi-compat
    mkdir -p "$COMPATDIR"
    {
        echo "/* generated by run_rsmpi.sh: MPI_Fint and c2f/f2c over the ABI's toint/fromint */"
        echo "#include_next <mpi.h>"
        echo "#ifndef RSMPI_COMPAT_FINT"
        echo "#define RSMPI_COMPAT_FINT"
        echo "typedef int MPI_Fint;"
        echo "#endif"
        for h in Comm Errhandler File Group Info Message Op Request Type Win; do
            echo "#define MPI_${h}_c2f(h) MPI_${h}_toint(h)"
            echo "#define MPI_${h}_f2c(i) MPI_${h}_fromint(i)"
        done
    } >"$COMPATDIR/mpi.h"
    INCS="-I$COMPATDIR $INCS"
fi

# Our wrapper: a compile line with the -I/-L/-l mpi-sys needs, whatever PREFIX's mpicc prints.
WRAP=$BUILD/rsmpi-mpicc
LIBS="-L$PREFIX/lib -Wl,-rpath,$PREFIX/lib -lmpi_abi"
cat >"$WRAP" <<EOF
#!/bin/sh
# generated by run_rsmpi.sh
if [ "\$1" = "-show" ]; then
    echo "cc $INCS $LIBS"
    exit 0
fi
exec "$PREFIX/bin/mpicc" $INCS "\$@"
EOF
chmod +x "$WRAP"

unset MPI_PKG_CONFIG CRAY_MPICH_DIR
case "$PROBE" in
    mpicc)
        log "PREFIX/bin/mpicc -show: $("$PREFIX/bin/mpicc" -show 2>&1)"
        export MPICC="$WRAP" ;;
    pkgconfig)
        PC=$PREFIX/lib/pkgconfig/mpi.pc
        [ -e "$PC" ] || die "missing $PC"
        if [ "$need_compat" = 1 ]; then
            mkdir -p "$BUILD/rsmpi-pc"
            sed "s|^Cflags:|Cflags: -I$COMPATDIR|" "$PC" >"$BUILD/rsmpi-pc/mpi.pc"
            PC=$BUILD/rsmpi-pc/mpi.pc
        fi
        log "pkg-config mpi: $(PKG_CONFIG_PATH=$(dirname "$PC") pkg-config --cflags --libs mpi 2>&1)"
        export MPI_PKG_CONFIG="$PC"
        export MPICC=/nonexistent-mpicc ;;
    *) die "RSMPI_PROBE must be mpicc or pkgconfig" ;;
esac

# Neither probe passes an rpath to rustc: add it so the programs find libmpi_abi.so.1.
export RUSTFLAGS="${RUSTFLAGS:-} -C link-arg=-Wl,-rpath,$PREFIX/lib"
export CARGO_TARGET_DIR="$TARGET"

# mpi-sys's build script only tracks its own C files: when the install, its mpi.h or the probe
# method changes, force it (and the crates built on it) to be rebuilt.
stamp="$PREFIX|$PROBE|$need_compat|$(cksum <"$PREFIX/include/mpi.h" | cut -d' ' -f1)"
if [ "$(cat "$TARGET/.gpumpi-stamp" 2>/dev/null)" != "$stamp" ]; then
    (cd "$HERE/rsmpi" && cargo clean --release -p mpi-sys -p mpi) >/dev/null 2>&1 || true
    if [ -d "$BUILD/rsmpi-upstream" ]; then
        (cd "$BUILD/rsmpi-upstream" && cargo clean --release -p mpi-sys -p mpi) >/dev/null 2>&1 || true
    fi
fi

log "building (target dir $TARGET)"
t0=$(date +%s)
if ! (cd "$HERE/rsmpi" && cargo build --release --locked --bins) >"$LOGDIR/build.log" 2>&1; then
    tail -n 60 "$LOGDIR/build.log" >&2
    die "build failed (full log: $LOGDIR/build.log)"
fi
echo "$stamp" >"$TARGET/.gpumpi-stamp"
log "built in $(( $(date +%s) - t0 ))s"

UPSTREAM_EXAMPLES=""
if [ "${RSMPI_UPSTREAM:-0}" = 1 ]; then
    # rsmpi's own examples, from the crate source cargo downloaded for our Cargo.lock.
    SRC=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/mpi-0.8.2 2>/dev/null | head -n 1)
    [ -n "$SRC" ] || die "mpi-0.8.2 source not found in the cargo registry"
    rm -rf "$BUILD/rsmpi-upstream"
    cp -r "$SRC" "$BUILD/rsmpi-upstream"
    printf '\n[workspace]\n' >>"$BUILD/rsmpi-upstream/Cargo.toml"
    log "building rsmpi's own examples"
    if ! (cd "$BUILD/rsmpi-upstream" && cargo build --release --examples) >"$LOGDIR/build-upstream.log" 2>&1; then
        tail -n 60 "$LOGDIR/build-upstream.log" >&2
        die "upstream examples build failed (full log: $LOGDIR/build-upstream.log)"
    fi
    # Left out: comm_name (rsmpi 0.8.2's get_name reads a dropped temporary in release builds),
    # spawn, spawn_multiple (dynamic processes), derive_* and complex_numbers (not built:
    # need crate features).
    UPSTREAM_EXAMPLES="all_gather all_gather_bool all_gather_varcount all_to_all attributes barrier
        broadcast buffered cartesian cartesian_map complex_datatype contiguous datatype_dup duplicate
        dyn_communicator env_inq gather gather_varcount group immediate immediate_all_gather
        immediate_all_gather_varcount immediate_all_to_all immediate_barrier immediate_broadcast
        immediate_gather immediate_gather_varcount immediate_multiple_barrier
        immediate_multiple_requests immediate_multiple_test immediate_reduce immediate_scan
        immediate_scatter immediate_scatter_varcount init_with_threading pack readme ready_send
        reduce scan scatter scatter_varcount send_receive simple split structured time vector
        wait_any"
fi

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
skipped=0
failures=()
run_one() { # name exe n expect_ok_lines [tag launch...]: launch, when given, starts each rank
    local name=$1 exe=$2 n=$3 want=$4 tag=n$3 label="-n $3" out rc nnet=0 netok=1
    shift 4
    if [ $# -gt 0 ]; then
        tag=$1
        label="-n $n over ${tag%x*} emulated nodes"
        [[ $tag == *ib ]] && label="$label, GPUMPI_NET=ib over the libibverbs test double"
        shift
    fi
    out=$LOGDIR/${name//\//-}.$tag.log
    timeout --kill-after=10 "$TIMEOUT" "$PREFIX/bin/mpirun" --oversubscribe -n "$n" "$@" "$exe" >"$out" 2>&1
    rc=$?
    local oks
    oks=$(grep -c ': .*OK$' "$out" || true)
    if [ $# -gt 0 ]; then
        # Over emulated nodes: every rank's network counters (GPUMPI_DEBUG=1) show frames in.
        nnet=$(grep -cE 'net: rank [0-9]+: [0-9]+ frames .* [1-9][0-9]* frames \([0-9]+ bytes\) received over the network' "$out" || true)
        [ "$nnet" -eq "$n" ] || netok=0
        # Over the ib double: every rank's ib rail too.
        [[ $tag != *ib ]] || [ "$(grep -c 'ib: rail' "$out")" -eq "$n" ] || netok=0
    fi
    if [ "$rc" -eq 0 ] && { [ "$want" = 0 ] || [ "$oks" -eq "$n" ]; } && [ "$netok" = 1 ]; then
        passed=$((passed + 1))
        echo "PASS $name $label"
    else
        failed=$((failed + 1))
        failures+=("$name $label")
        if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
            echo "FAIL $name $label (timeout after ${TIMEOUT}s)"
        elif [ "$netok" = 0 ]; then
            echo "FAIL $name $label ($nnet of $n ranks logged frames received over the network (and, over ib, an ib rail))"
        else
            echo "FAIL $name $label (exit $rc, $oks/$n ranks reported OK)"
        fi
        sed 's/^/    | /' "$out" | tail -n 25
    fi
    if [ "${RSMPI_VERBOSE:-0}" = 1 ]; then sed 's/^/    > /' "$out"; fi
}

for p in $PROGRAMS; do
    for n in $NPS; do
        run_one "$p" "$TARGET/release/$p" "$n" 1
    done
    for spec in $NODES; do
        k=${spec%x*}
        per=${spec#*x}
        per=${per%ib}
        case "$k$per" in *[!0-9]* | "") die "RSMPI_NODES: '$spec' is not KxR or KxRib" ;; esac
        [[ $spec == *ib ]] && fake_ib_env "rsmpi-$p"
        run_one "$p" "$TARGET/release/$p" "$((k * per))" 1 "$spec" \
            env GPUMPI_DEBUG="${GPUMPI_DEBUG:-1}" "${IBENV[@]}" "$REPO/scripts/emulate-nodes.sh" "$k"
        fake_ib_done
    done
done
for p in $UPSTREAM_EXAMPLES; do
    for n in $NPS; do
        case "$p:$n" in
            all_gather_bool:1 | immediate_multiple_requests:1)
                skipped=$((skipped + 1)); echo "SKIP upstream/$p -n $n (needs 2+ ranks)"
                [ -z "${GPUMPI_TEST_SKIPS:-}" ] ||
                    echo "SKIP rsmpi upstream/$p -n $n: the example needs 2 or more ranks" >>"$GPUMPI_TEST_SKIPS"
                continue ;;
        esac
        run_one "upstream/$p" "$TARGET/release/examples/$p" "$n" 0
    done
done

if [ $((passed + failed)) -eq 0 ]; then
    failed=1
    log "no program ran (RSMPI_PROGRAMS='$PROGRAMS', RSMPI_NP='$NPS', RSMPI_NODES='$NODES')"
fi
if [ "${#failures[@]}" -gt 0 ]; then
    log "failed: ${failures[*]}"
fi
log "logs in $LOGDIR"
echo "rsmpi: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
