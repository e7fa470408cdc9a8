#!/bin/bash
# s13d.sh: GPU suite on main after the q23 merge; dma-buf through the ibverbs double; host allreduce base (46b8736) vs new.
export NCCL_NVLS_ENABLE=0
bash build/dev/fixprefix.sh build/base >/dev/null; bash build/dev/fixprefix.sh build/new >/dev/null
nvidia-smi -L; uptime; date -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export GPUMPI_TEST_CUDART=/usr/local/cuda/lib64/libcudart.so
echo "== gpu suite"; GPU_TEST_TIMEOUT=60 timeout 400 bash tests/gpu/run.sh build/new > $OUT/runsh.log 2>&1; grep -E "FAIL|SKIP|^gpu:" $OUT/runsh.log | tail -12
echo "== dma-buf through the ibverbs double"; mkdir -p /work && ln -sfn $PWD /work/main && (cd /work/main && timeout 120 build/dev/net_ib gpu_dmabuf_registration_through_the_double --nocapture > $OUT/dmabuf.log 2>&1; echo rc=$?; grep -v "^$" $OUT/dmabuf.log | head -30)
for P in build/base build/new; do $P/bin/mpicc -std=c99 -O2 -Ibenches -o /tmp/gb-$(basename $P) benches/gpumpi-bench.c -ldl -lm || exit 1; done
b() { l=$1; P=$2; shift 2; $P/bin/mpirun -n 2 /tmp/gb-$(basename $P) "$@" | awk -v l="$l" '!/^#/{printf "%-6s %10s %9s\n", l, $1, $6}'; }
echo "== host allreduce 2 ranks (base 46b8736)"; for r in 1 2 3; do b base build/base -o allreduce -b 256 -e 32K -f 4 -w 100 -n 2000; b new build/new -o allreduce -b 256 -e 32K -f 4 -w 100 -n 2000; done
echo "== device allreduce"; for r in 1 2; do b base build/base -d cuda -o allreduce -b 8 -e 4K -f 8 -w 100 -n 2000; b new build/new -d cuda -o allreduce -b 8 -e 4K -f 8 -w 100 -n 2000; done
date -u
