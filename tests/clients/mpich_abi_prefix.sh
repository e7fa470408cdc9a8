#!/usr/bin/env bash
# Make a stand-in "install" from MPICH's standard-ABI library (PyPI wheel mpich==5.0.2, which
# ships libmpi_abi.so.1 + mpi_abi.h), laid out like `scripts/install.sh --prefix DIR`, so that
# run_rsmpi.sh / run_mpi4py.sh can be checked, and gpumpi compared, without gpumpi:
#
#   tests/clients/mpich_abi_prefix.sh DIR && tests/clients/run_rsmpi.sh DIR
#
# DIR/bin/{mpicc,mpicxx,mpirun}, DIR/include/mpi.h, DIR/lib (the wheel's lib directory, holding
# libmpi_abi.so and pkgconfig/mpi.pc). mpirun is MPICH's hydra; --oversubscribe is dropped.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
VERSION=${MPICH_WHEEL_VERSION:-5.0.2}
PY=${PYTHON:-python3}
mkdir -p "$1"
P=$(cd "$1" && pwd)
rm -rf "$P/.wheel" "$P/bin" "$P/include" "$P/lib"
mkdir -p "$P/.wheel" "$P/bin" "$P/include"
"$PY" -m pip download -q --no-deps --only-binary :all: -d "$P/.wheel" "mpich==$VERSION"
"$PY" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
    "$(ls "$P"/.wheel/mpich-*.whl)" "$P/.wheel"
D=$(ls -d "$P"/.wheel/mpich-*.data/data)
chmod +x "$D"/bin/*
# The library finds its bundled dependencies through $ORIGIN: keep the real directory.
ln -s "$D/lib" "$P/lib"
cp "$D/include/mpi_abi.h" "$P/include/mpi.h"
for w in mpicc:cc:CC mpicxx:c++:CXX; do
    IFS=: read -r name cc var <<<"$w"
    cat >"$P/bin/$name" <<EOF
#!/bin/sh
# stand-in wrapper: same compile line shape as gpumpi's mpicc
flags="-I$P/include -L$P/lib -Wl,-rpath,$P/lib -lmpi_abi"
if [ "\$1" = "-show" ]; then echo "\${$var:-$cc} \$flags"; exit 0; fi
exec \${$var:-$cc} "\$@" \$flags
EOF
done
cat >"$P/bin/mpirun" <<EOF
#!/usr/bin/env bash
args=()
for a in "\$@"; do [ "\$a" = --oversubscribe ] || args+=("\$a"); done
exec "$D/bin/mpiexec.hydra" "\${args[@]}"
EOF
chmod +x "$P"/bin/*
mkdir -p "$D/lib/pkgconfig"
cat >"$D/lib/pkgconfig/mpi.pc" <<EOF
prefix=$P
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: mpi
Description: stand-in install: MPICH $VERSION libmpi_abi (MPI-5.0 standard ABI)
Version: $VERSION
Cflags: -I\${includedir}
Libs: -L\${libdir} -Wl,-rpath,\${libdir} -lmpi_abi
EOF
echo "MPICH $VERSION standard-ABI stand-in installed in $P"
