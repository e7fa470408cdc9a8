#!/usr/bin/env bash
# The test command (README "Tests"): every test that runs without a GPU.
#   1. cargo test: unit tests (schedules, datatypes, ops, matching, bootstrap, ABI data) and
#      integration tests (mpirun, shared-memory engine, installed headers/library/mpicc, and the
#      C MPI programs of tests/c at 1, 2, 3, 4 and 7 ranks).
#   2. Real clients against the installed library: rsmpi examples and mpi4py's own test modules.
#   3. The benchmark driver's smoke run; launchers (PMIx, PMI-1) where their tests exist.
# GPU tests are not run here: see tests/gpu/ (they run on the GPU machine).
set -uo pipefail
cd "$(dirname "$0")/.."
export CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-2}
prefix=$PWD/build/install
passed=0 failed=0 names=()
stage() {
    local name=$1; shift
    echo "=== $name: $*"
    local t0=$SECONDS
    if "$@"; then passed=$((passed + 1)); echo "=== $name: ok ($((SECONDS - t0)) s)"
    else failed=$((failed + 1)); names+=("$name"); echo "=== $name: FAILED ($((SECONDS - t0)) s)"; fi
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
[ -x tests/clients/run_rsmpi.sh ] && stage rsmpi bash tests/clients/run_rsmpi.sh "$prefix"
[ -x tests/clients/run_mpi4py.sh ] && stage mpi4py bash tests/clients/run_mpi4py.sh "$prefix"
[ -x benches/ci_smoke.sh ] && stage bench-smoke bash benches/ci_smoke.sh "$prefix"
echo
[ "$failed" -gt 0 ] && echo "failed stages: ${names[*]}"
echo "stages: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
