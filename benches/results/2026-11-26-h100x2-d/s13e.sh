#!/bin/bash
# s13e.sh: mpi4py binary wheel + CuPy through libmpi.so.12; host allreduce base vs new with GPU collectives off (is the a23 regression in the GPU-path agreement?).
export NCCL_NVLS_ENABLE=0
bash build/dev/fixprefix.sh build/base >/dev/null; bash build/dev/fixprefix.sh build/new >/dev/null
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
which -a python3; python3 -c "import cupy, mpi4py; print(cupy.__file__, cupy.__version__, mpi4py.__file__)" 2>&1 | tail -1
CP=$(python3 -c "import cupy, os; print(os.path.dirname(os.path.dirname(cupy.__file__)))" 2>/dev/null)
PY=$(python3 -c "import sys; print(sys.executable)")
$PY -m venv /tmp/wv && /tmp/wv/bin/pip install -q --no-index build/dev/whl/*.whl 2>&1 | tail -2
echo "== mpi4py wheel + CuPy via libmpi.so.12 (cupy from $CP)"
for n in 1 2 4; do PYTHONPATH=$CP LD_LIBRARY_PATH=$PWD/build/new/lib:$LD_LIBRARY_PATH timeout 150 build/new/bin/mpirun -n $n -x PYTHONPATH -x LD_LIBRARY_PATH /tmp/wv/bin/python tests/gpu/mpi4py_wheel_cupy.py 2>&1 | tail -3; done
for P in build/base build/new; do $P/bin/mpicc -std=c99 -O2 -Ibenches -o /tmp/gb-$(basename $P) benches/gpumpi-bench.c -ldl -lm || exit 1; done
b() { l=$1; P=$2; shift 2; $P/bin/mpirun -n 2 -x GPUMPI_GPU_COLL /tmp/gb-$(basename $P) "$@" | awk -v l="$l" '!/^#/{printf "%-6s %10s %9s\n", l, $1, $6}'; }
for gc in 0 auto; do export GPUMPI_GPU_COLL=$gc; echo "== host allreduce 2 ranks, GPUMPI_GPU_COLL=$gc (base 46b8736)"; for r in 1 2 3; do b base build/base -o allreduce -b 256 -e 16K -f 4 -w 100 -n 3000; b new build/new -o allreduce -b 256 -e 16K -f 4 -w 100 -n 3000; done; done
date -u
