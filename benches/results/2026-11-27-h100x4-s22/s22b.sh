#!/bin/bash
# s22b: the intermittent gpu_mismatch -n 4 hang with CUDA IPC off (host-mode resident kernels), 30 runs on main
# with the host barrier after a given-up call; then short device benches (ping-pong, stream allreduce 512 KiB-1 MiB).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee $OUT/s22b.log) 2>&1
export NCCL_NVLS_ENABLE=0
F=$PWD/build/main
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
date -u
echo "== gpu_mismatch -n 4, GPUMPI_CUDA_IPC=0, debug 2 once"
GPUMPI_CUDA_IPC=0 GPUMPI_DEBUG=2 timeout 60 $F/bin/mpirun -n 4 --oversubscribe --timeout 40 -x GPUMPI_CUDA_IPC -x GPUMPI_DEBUG /tmp/gt/gpu_mismatch > $OUT/mm-debug.log 2>&1; echo "rc=$?"
grep -c "waits for every rank" $OUT/mm-debug.log; grep -m2 "waits for every rank" $OUT/mm-debug.log
ok=0; bad=0
for i in $(seq 30); do
  s=$(date +%s.%N)
  GPUMPI_CUDA_IPC=0 timeout 60 $F/bin/mpirun -n 4 --oversubscribe --timeout 40 -x GPUMPI_CUDA_IPC /tmp/gt/gpu_mismatch > $OUT/mm-$i.log 2>&1; rc=$?
  e=$(date +%s.%N)
  if [ $rc = 0 ]; then ok=$((ok+1)); rm $OUT/mm-$i.log; else bad=$((bad+1)); echo "run $i rc=$rc"; tail -3 $OUT/mm-$i.log; fi
  awk -v i=$i -v s=$s -v e=$e 'BEGIN {printf "%d:%.1fs ", i, e - s}'
done; echo; echo "gpu_mismatch IPC off: $ok passed, $bad failed"
date -u
$F/bin/mpicc -std=c99 -O2 -o /tmp/gbf benches/gpumpi-bench.c -ldl -lm
P() { awk '!/^#/ {printf "%s:%s%s ", $1, $10, ($9>0?"!WRONG":"")} END {print ""}'; }
for r in 1 2; do echo "pingpong r$r: $(timeout 60 $F/bin/mpirun -n 2 /tmp/gbf -d cuda -o pingpong -b 1 -e 1M -f 2 -w 200 -n 2000 2>&1 | P)"; done
for n in 2 4; do echo "== gpu_stream bench -n $n 256K-2M"; timeout 60 $F/bin/mpirun -n $n /tmp/gt/gpu_stream bench 2097152 262144 2 2>&1 | grep -v "^#"; done
date -u
