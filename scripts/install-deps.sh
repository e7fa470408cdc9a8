#!/usr/bin/env bash
# The system packages the tests need beyond a Rust toolchain, on Debian/Ubuntu:
#   gcc, g++      mpicc/mpicxx and every C test          pkg-config   tests/install.rs (mpi.pc)
#   binutils      readelf (install and export checks)    libclang-dev bindgen, for the rsmpi stage
#   python3-venv  mpi4py stage, launcher tests (PyPI)    python3-pip  scripts/install-nvcc.sh
#   iproute2      `ip`: namespace nodes (scripts/netns-nodes.sh, tests/netns.rs)
# Usage: scripts/install-deps.sh [--check]
# Installs the missing ones with apt-get when it may (root, or sudo without a password, and
# apt-get present; not with --check). Otherwise, or if that fails, prints each package still
# missing and what goes without it. Exit 0 when nothing is missing afterwards, else 1 (callers
# go on: the stages that need a missing package fail on their own).
set -uo pipefail
check_only=no
[ "${1:-}" = --check ] && check_only=yes

# package | what needs it | test (succeeds when present)
has_libclang() {
    [ -n "${LIBCLANG_PATH:-}" ] || ls /usr/lib/llvm-*/lib/libclang.so* >/dev/null 2>&1 ||
        ldconfig -p 2>/dev/null | grep 'libclang[-.0-9]*\.so' >/dev/null
}
has_venv() {
    local t
    t=$(mktemp -d) || return 1
    python3 -m venv "$t/v" >/dev/null 2>&1
    local rc=$?
    rm -rf "$t"
    return $rc
}
checks=(
    "gcc|mpicc and the C tests|command -v cc || command -v gcc"
    "g++|mpicxx test|command -v c++ || command -v g++"
    "pkg-config|pkg-config checks of tests/install.rs|command -v pkg-config"
    "binutils|readelf checks of the install and exports|command -v readelf"
    "libclang-dev|rsmpi stage (bindgen loads libclang)|has_libclang"
    "python3-venv|mpi4py stage and launcher tests (Open MPI, MPICH from PyPI)|has_venv"
    "python3-pip|CUDA kernels (scripts/install-nvcc.sh takes nvcc from PyPI)|python3 -m pip --version"
    "iproute2|namespace nodes of the network tests (scripts/netns-nodes.sh)|command -v ip"
)
missing() {
    local c pkg
    for c in "${checks[@]}"; do
        IFS='|' read -r pkg _ test <<<"$c"
        eval "$test" >/dev/null 2>&1 || echo "$pkg"
    done
}
need=($(missing))
[ ${#need[@]} -eq 0 ] && { echo "install-deps: nothing missing"; exit 0; }

sudo=()
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo=(sudo -n)
fi
if [ "$check_only" = no ] && command -v apt-get >/dev/null 2>&1 &&
    { [ "$(id -u)" = 0 ] || [ ${#sudo[@]} -gt 0 ]; }; then
    echo "install-deps: installing ${need[*]}"
    "${sudo[@]}" apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${need[@]}" >/dev/null ||
        echo "install-deps: apt-get failed" >&2
    need=($(missing))
    [ ${#need[@]} -eq 0 ] && { echo "install-deps: installed"; exit 0; }
elif [ "$check_only" = no ]; then
    echo "install-deps: cannot install (needs root or passwordless sudo, and apt-get)" >&2
fi
for c in "${checks[@]}"; do
    IFS='|' read -r pkg what _ <<<"$c"
    for n in "${need[@]}"; do
        [ "$n" = "$pkg" ] && echo "install-deps: missing package $pkg: without it, $what fails" >&2
    done
done
echo "install-deps: install with: apt-get install ${need[*]}" >&2
exit 1
