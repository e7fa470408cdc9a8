#!/bin/bash
# s26h: the GPU suite's three failures of s26g (gpu_net -n 4 over the ib double: in-place
# allreduce at 64 MiB wrong) after the fix (the call memo forgets what the library gave back),
# first main at the session's start (build/fin) and the fixed tree (build/s26) on that case,
# then the whole suite and unit gpu:: on the fixed tree.
set -u
R=$(cd "$(dirname "$0")/../../.." && pwd); cd $R
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
for n in fin s26; do tar xJf build/pack/$n.txz -C build; done
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
mkdir -p /tmp/gh; cc -shared -fPIC -O1 -o /tmp/gh/libfib.so tests/support/fake_ibverbs.c -ldl
{ date -u
for b in fin s26; do
  F=$R/build/$b; $F/bin/mpicc -O2 -Itests/gpu -o /tmp/gh/gpu_net-$b tests/gpu/gpu_net.c -ldl -lm -lpthread
  fab=/dev/shm/s26h-$b; rm -f $fab
  echo "== $b: gpu_net -n 4 over 2 emulated nodes, ib double $(date -u +%T)"
  GPUMPI_NET=ib GPUMPI_IBVERBS_LIB=/tmp/gh/libfib.so FAKEIBV_FABRIC=$fab timeout 120 $F/bin/mpirun -n 4 --oversubscribe --timeout 110 \
    -x GPUMPI_NET -x GPUMPI_IBVERBS_LIB -x FAKEIBV_FABRIC scripts/emulate-nodes.sh 2 /tmp/gh/gpu_net-$b 2>&1 | grep -E "^(PASS|FAIL)|want" | head -4
  rm -f $fab
done; } 2>&1 | tee $OUT/s26h.log
BUILD=s26 BENCH=0 SUITE_LIMIT=330 timeout 420 bash benches/results/2026-11-28-h100x4-s24/s24b.sh
