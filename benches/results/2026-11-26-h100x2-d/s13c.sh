#!/bin/bash
# s13c.sh: GPU suite on main 059d908 (a23, n18b, v20, m22, p16, x19 merged); PXN with device buffers;
# mpi4py binary wheel + CuPy through libmpi.so.12; dma-buf registration through the ibverbs double.
export NCCL_NVLS_ENABLE=0
bash build/dev/fixprefix.sh build/base >/dev/null; bash build/dev/fixprefix.sh build/new >/dev/null
nvidia-smi -L; nproc; uptime; date -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export GPUMPI_TEST_CUDART=/usr/local/cuda/lib64/libcudart.so
echo "== gpu suite"; GPU_TEST_TIMEOUT=60 timeout 400 bash tests/gpu/run.sh build/new > $OUT/runsh.log 2>&1; grep -E "FAIL|SKIP|^gpu:" $OUT/runsh.log | tail -12
build/new/bin/mpicc -O2 -Itests/gpu -o /tmp/gt tests/gpu/gpu_test.c -ldl -lm -lpthread || echo "no gpu_test"
for p in 1 0; do echo "== PXN=$p device buffers, 2 emulated nodes x 2 ranks, 2 rails"; GPUMPI_DEBUG=1 GPUMPI_PXN=$p timeout 120 build/new/bin/mpirun -n 4 -x GPUMPI_DEBUG -x GPUMPI_PXN -x GPUMPI_TEST_CUDART scripts/emulate-nodes.sh --rails 2 2 /tmp/gt > $OUT/pxn$p.log 2>&1; echo rc=$?; grep -E "PASS|FAIL|PXN|cross-rail|forwarder" $OUT/pxn$p.log | sort | uniq -c | head -12; done
echo "== mpi4py wheel + CuPy via libmpi.so.12"; python3 -m venv --system-site-packages /tmp/wv && /tmp/wv/bin/pip install -q --no-index build/dev/whl/*.whl 2>&1 | tail -2
for n in 2 4; do LD_LIBRARY_PATH=$PWD/build/new/lib:$LD_LIBRARY_PATH timeout 120 build/new/bin/mpirun -n $n -x LD_LIBRARY_PATH /tmp/wv/bin/python tests/gpu/mpi4py_wheel_cupy.py 2>&1 | tail -4; done
echo "== dma-buf through the ibverbs double"; mkdir -p /work && ln -sfn $PWD /work/main && (cd /work/main && timeout 120 build/dev/net_ib gpu_dmabuf_registration_through_the_double --nocapture 2>&1 | tail -8)
for P in build/base build/new; do $P/bin/mpicc -std=c99 -O2 -Ibenches -o /tmp/gb-$(basename $P) benches/gpumpi-bench.c -ldl -lm || exit 1; done
b() { l=$1; P=$2; shift 2; $P/bin/mpirun -n 2 /tmp/gb-$(basename $P) "$@" | awk -v l="$l" '!/^#/{printf "%-6s %10s %9s\n", l, $1, $6}'; }
echo "== host allreduce 2 ranks (base 46b8736)"; for r in 1 2; do b base build/base -o allreduce -b 256 -e 32K -f 4 -w 100 -n 2000; b new build/new -o allreduce -b 256 -e 32K -f 4 -w 100 -n 2000; done
bb() { l=$1; P=$2; shift 2; $P/bin/mpirun -n 2 /tmp/gb-$(basename $P) "$@" | awk -v l="$l" '!/^#/{print l, $0}'; }
echo "== host bw window 64 (base 46b8736)"; for r in 1 2; do bb base build/base -o bw -b 64K -e 64M -f 4 -w 5 -n 30; bb new build/new -o bw -b 64K -e 64M -f 4 -w 5 -n 30; done
date -u
