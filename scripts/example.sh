#!/usr/bin/env bash
# Quick start: build and install gpumpi under build/install, compile examples/hello.c with our
# mpicc and run it on N ranks (default 4) with our mpirun.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-4}
prefix=${GPUMPI_PREFIX:-$PWD/build/install}
bash scripts/install.sh --prefix "$prefix"
mkdir -p build/examples
"$prefix/bin/mpicc" -O2 -Wall -o build/examples/hello examples/hello.c
exec "$prefix/bin/mpirun" --oversubscribe -n "$n" build/examples/hello
