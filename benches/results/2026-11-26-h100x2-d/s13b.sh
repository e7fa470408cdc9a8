#!/bin/bash
# s13b.sh: host allreduce 1-32 KiB base vs new (with the measured scratch costs), and gpu_mismatch -n 4 with the debug log.
export NCCL_NVLS_ENABLE=0
bash build/dev/fixprefix.sh build/base >/dev/null; bash build/dev/fixprefix.sh build/new >/dev/null
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export GPUMPI_TEST_CUDART=/usr/local/cuda/lib64/libcudart.so
nvidia-smi -L | head -2; uptime
for P in build/base build/new; do $P/bin/mpicc -std=c99 -O2 -Ibenches -o /tmp/gb-$(basename $P) benches/gpumpi-bench.c -ldl -lm || exit 1; done
for P in build/base build/new; do echo "costs $P"; GPUMPI_DEBUG=2 $P/bin/mpirun -n 2 -x GPUMPI_DEBUG /tmp/gb-$(basename $P) -o allreduce -b 2K -e 2K -w 1 -n 1 2>&1 | grep -i "measured costs\|algo" | head -6; done
b() { l=$1; P=$2; shift 2; $P/bin/mpirun -n 2 /tmp/gb-$(basename $P) "$@" | awk -v l="$l" '!/^#/{printf "%-6s %10s %9s\n", l, $1, $6}'; }
echo "== host allreduce 2 ranks"; for r in 1 2 3; do b base build/base -o allreduce -b 256 -e 32K -f 2 -w 100 -n 2000; b new build/new -o allreduce -b 256 -e 32K -f 2 -w 100 -n 2000; done
echo "== host bcast 2 ranks"; for r in 1 2; do b base build/base -o bcast -b 256 -e 32K -f 4 -w 100 -n 2000; b new build/new -o bcast -b 256 -e 32K -f 4 -w 100 -n 2000; done
build/new/bin/mpicc -O2 -Itests/gpu -o /tmp/gm tests/gpu/gpu_mismatch.c -ldl -lm -lpthread || exit 1
echo "== gpu_mismatch -n 4 debug"; GPUMPI_DEBUG=2 timeout 120 build/new/bin/mpirun -n 4 --oversubscribe --timeout 100 -x GPUMPI_DEBUG -x GPUMPI_TEST_CUDART /tmp/gm > $OUT/gm4.log 2>&1; echo rc=$?; grep -c . $OUT/gm4.log; grep "gpu_mismatch\|small device" $OUT/gm4.log | head -20
date -u
