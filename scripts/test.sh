#!/usr/bin/env bash
# The test command (README "Tests"): every test that runs without a GPU.
#   1. cargo test: unit tests (schedules, datatypes, ops, matching, bootstrap, ABI data) and
#      integration tests (mpirun, shared-memory engine, installed headers/library/mpicc, and the
#      C MPI programs of tests/c at the rank counts of tests/c/testlist).
#   2. Real clients against the installed library: rsmpi examples and mpi4py's own test modules
#      (built from source, and mpi4py's binary wheel on libmpi.so.12), on one node and on 2
#      emulated nodes x 2 ranks; MPICH's mpicc on libmpi.so.12.
#   3. The benchmark driver's smoke run; launchers (PMIx, PMI-1) where their tests exist.
# GPU tests are not run here: see tests/gpu/ (they run on the GPU machine); the GPU unit tests
# and tests/gpu_run.rs record skips here, and fail instead on a machine with a GPU.
# Skips: each stage runs with GPUMPI_TEST_SKIPS naming a file where a test that cannot run writes
# "SKIP <test>: <reason>" (tests/support/skip.rs, and the client runners). A stage that succeeds
# with skip records counts as skipped, not passed, and the summary lists every record. A stage
# whose script is missing fails. The last line is "stages: N passed, N failed, N skipped".
set -uo pipefail
cd "$(dirname "$0")/.."
export CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-2}
prefix=$PWD/build/install
skipdir=$PWD/build/test-skips
rm -rf "$skipdir" && mkdir -p "$skipdir"
passed=0 failed=0 skipped=0 names=() results=()
stage() {
    local name=$1; shift
    echo "=== $name: $*"
    local t0=$SECONDS rc nskip
    export GPUMPI_TEST_SKIPS=$skipdir/$name.txt
    : >"$GPUMPI_TEST_SKIPS"
    "$@"; rc=$?
    nskip=$(grep -c '^SKIP ' "$GPUMPI_TEST_SKIPS") || nskip=0
    local took="$((SECONDS - t0)) s"
    if [ "$rc" -ne 0 ]; then
        failed=$((failed + 1)); names+=("$name"); results+=("FAILED  $name (exit $rc, $took)")
        echo "=== $name: FAILED (exit $rc, $took)"
    elif [ "$nskip" -gt 0 ]; then
        skipped=$((skipped + 1)); results+=("SKIPPED $name: $nskip test(s) skipped, the rest passed ($took)")
        echo "=== $name: ok with $nskip test(s) skipped ($took)"
    else
        passed=$((passed + 1)); results+=("ok      $name ($took)")
        echo "=== $name: ok ($took)"
    fi
    unset GPUMPI_TEST_SKIPS
}
# System packages (compilers, pkg-config, binutils, libclang, python3 venv/pip): installed with
# apt-get where this runs as root, else each missing one is named; every stage runs either way.
stage deps bash scripts/install-deps.sh
# CUDA kernels (kernels/*.cu) compile with nvcc 13.0 from PyPI even without a GPU. build.rs
# watches build/cuda, so a library built before (scripts/example.sh) is rebuilt with kernels.
[ -x build/cuda/nvidia/cu13/bin/nvcc ] || stage nvcc bash scripts/install-nvcc.sh
# The tests inspect the built libmpi_abi.so (cargo test alone builds only the rlib).
stage cargo-build cargo build --workspace --release
# LAUNCHERS_INSTALL=1: tests/launchers.rs installs Open MPI 5 and MPICH 5 from PyPI and runs the C
# programs under their mpirun/prterun (PMIx) and hydra mpiexec (PMI-1).
export LAUNCHERS_INSTALL=${LAUNCHERS_INSTALL:-1}
stage cargo-test cargo test --workspace --release --no-fail-fast
stage install bash scripts/install.sh --prefix "$prefix"
stage rsmpi bash tests/clients/run_rsmpi.sh "$prefix"
stage mpi4py bash tests/clients/run_mpi4py.sh "$prefix"
# The MPICH ABI (lib/libmpi.so.12): mpi4py's binary wheel runs the same modules on it, and a
# program built with MPICH's own mpicc runs on it in place of MPICH's library.
# (Over emulated nodes on TCP only: the ibverbs double's runs of the sdist stage cover the
# network path, which is the same under either ABI.)
stage mpi4py-wheel env MPI4PY_FROM=wheel MPI4PY_NODES=2x2 bash tests/clients/run_mpi4py.sh "$prefix"
stage mpich-abi bash tests/clients/run_mpich_abi.sh "$prefix"
stage bench-smoke bash benches/ci_smoke.sh "$prefix"
echo
echo "=== summary"
printf '  %s\n' "${results[@]}"
if [ "$skipped" -gt 0 ]; then
    echo "skipped tests, with their reasons:"
    for f in "$skipdir"/*.txt; do
        sed -n "s|^SKIP |  [$(basename "$f" .txt)] |p" "$f"
    done
fi
[ "$failed" -gt 0 ] && echo "failed stages: ${names[*]}"
echo "stages: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
