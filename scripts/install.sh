#!/usr/bin/env bash
# Build gpumpi and install it under a prefix:
#   lib/libmpi_abi.so.1 (+ libmpi_abi.so), the MPICH-ABI lib/libmpi.so.12 (+ libmpi.so),
#   include/{mpi.h,mpi-ext.h},
#   bin/{mpicc,mpicxx,mpirun,gpumpi-info},
#   lib/pkgconfig/{mpi.pc,mpi-c.pc}.
# Usage: scripts/install.sh [--prefix DIR] [--debug] [--no-build]
#   --prefix DIR  install there (default: ./build/install in the repository)
#   --debug       use the debug build (cargo build) instead of the release build
#   --no-build    install what target/ already holds
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
prefix="$root/build/install"
profile=release
build=yes
while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) prefix="$2"; shift 2 ;;
        --prefix=*) prefix="${1#--prefix=}"; shift ;;
        --debug) profile=debug; shift ;;
        --no-build) build=no; shift ;;
        -h|--help) sed -n '2,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "install.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done

if [ "$build" = yes ]; then
    if [ "$profile" = release ]; then
        (cd "$root" && cargo build --release -p gpumpi -p gpumpi-mpich)
    else
        (cd "$root" && cargo build -p gpumpi -p gpumpi-mpich)
    fi
fi
target="${CARGO_TARGET_DIR:-$root/target}/$profile"
[ -f "$target/libmpi_abi.so" ] || { echo "install.sh: $target/libmpi_abi.so not built" >&2; exit 1; }

mkdir -p "$prefix"
prefix=$(cd "$prefix" && pwd)
mkdir -p "$prefix/lib/pkgconfig" "$prefix/include" "$prefix/bin"
version=$(sed -n 's/^version *= *"\(.*\)"/\1/p' "$root/Cargo.toml" | head -n1)

install -m 755 "$target/libmpi_abi.so" "$prefix/lib/libmpi_abi.so.1"
ln -sfn libmpi_abi.so.1 "$prefix/lib/libmpi_abi.so"
# The MPICH ABI (mpich/): binaries built against MPICH (mpi4py's wheel, MPICH's mpicc) load
# libmpi.so.12; it forwards to libmpi_abi.so.1 in the same directory.
if [ -f "$target/libmpi.so" ]; then
    install -m 755 "$target/libmpi.so" "$prefix/lib/libmpi.so.12"
    ln -sfn libmpi.so.12 "$prefix/lib/libmpi.so"
else
    # --no-build after a build of the gpumpi package alone (cargo build -p gpumpi).
    echo "install.sh: warning: $target/libmpi.so not built (cargo build -p gpumpi-mpich):" \
        "lib/libmpi.so.12 (the MPICH ABI) not installed" >&2
fi
install -m 644 "$root/include/mpi.h" "$root/include/mpi-ext.h" "$prefix/include/"
for tool in mpirun gpumpi-info; do
    if [ -x "$target/$tool" ]; then
        install -m 755 "$target/$tool" "$prefix/bin/$tool"
    fi
done

# Nothing installed names the prefix: the wrappers and pkg-config files find it from their own
# location (GPUMPI_PREFIX or pkg-config --define-variable=prefix= override), so the tree can be
# moved or copied elsewhere.
subst() { # template output name cc_var cc_default pcname
    sed -e "s|@VERSION@|$version|g" -e "s|@NAME@|$3|g" \
        -e "s|@CC_VAR@|$4|g" -e "s|@CC_DEFAULT@|$5|g" -e "s|@PCNAME@|$3|g" "$1" > "$2"
}
subst "$root/scripts/mpicc.in" "$prefix/bin/mpicc" mpicc MPICC_CC cc
subst "$root/scripts/mpicc.in" "$prefix/bin/mpicxx" mpicxx MPICXX_CXX c++
chmod 755 "$prefix/bin/mpicc" "$prefix/bin/mpicxx"
subst "$root/scripts/mpi.pc.in" "$prefix/lib/pkgconfig/mpi.pc" mpi - -
subst "$root/scripts/mpi.pc.in" "$prefix/lib/pkgconfig/mpi-c.pc" mpi-c - -

echo "installed gpumpi $version ($profile) to $prefix"
