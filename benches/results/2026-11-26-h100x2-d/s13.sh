#!/bin/bash
# s13.sh: GPU suite on main after the a23 merge, and base (46b8736) vs new side by side.
export NCCL_NVLS_ENABLE=0
bash build/dev/fixprefix.sh build/base >/dev/null; bash build/dev/fixprefix.sh build/new >/dev/null
nvidia-smi -L; nproc; uptime; date -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
echo "== gpu suite"; GPUMPI_TEST_CUDART=/usr/local/cuda/lib64/libcudart.so GPU_TEST_TIMEOUT=60 timeout 420 bash tests/gpu/run.sh build/new > $OUT/runsh.log 2>&1; grep -E "^PASS|FAIL|SKIP|^gpu:" $OUT/runsh.log | tail -45
for P in build/base build/new; do $P/bin/mpicc -std=c99 -O2 -Ibenches -o /tmp/gb-$(basename $P) benches/gpumpi-bench.c -ldl -lm || exit 1; done
b() { l=$1; P=$2; shift 2; $P/bin/mpirun -n 2 /tmp/gb-$(basename $P) "$@" | awk -v l="$l" '!/^#/{printf "%-6s %10s %9s %8s %s\n", l, $1, $6, $8, $9}'; }
echo "== device allreduce small (long runs)"; for r in 1 2 3; do b base build/base -d cuda -o allreduce -b 8 -e 4K -f 8 -w 100 -n 2000; b new build/new -d cuda -o allreduce -b 8 -e 4K -f 8 -w 100 -n 2000; done
echo "== host allreduce 2 ranks"; for r in 1 2; do b base build/base -o allreduce -b 2K -e 512K -f 4 -w 50 -n 500; b new build/new -o allreduce -b 2K -e 512K -f 4 -w 50 -n 500; done
echo "== host pingpong 8B"; for r in 1 2 3; do b base build/base -o pingpong -b 8 -e 8 -w 100 -n 5000; b new build/new -o pingpong -b 8 -e 8 -w 100 -n 5000; done
date -u
