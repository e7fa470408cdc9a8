#!/bin/bash
# s26i: the final tree (build/s26, unit binary build/s26unit) on 2x H200: unit gpu::tests (the
# call memo against the driver), then main at the session's start (build/fin) against it,
# interleaved: device ping-pong 1 B-1 MiB (3 rounds), blocking allreduce / alltoall 8 B-1 MiB.
set -u
R=$(cd "$(dirname "$0")/../../.." && pwd); cd $R
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee $OUT/s26i.log) 2>&1
for n in fin s26; do tar xJf build/pack/$n.txz -C build; done
B=$R/build/fin; N=$R/build/s26
export NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
date -u; uptime
echo "== unit gpu::tests"; timeout 60 build/s26unit/lib-tests gpu::tests --test-threads=1 2>&1 | grep -E "^test |test result"
P() { awk '!/^#/ && NF >= 10 {printf "%s:%s%s ", $1, $10, ($9>0?"!WRONG":"")} END {print ""}'; }
for p in B N; do eval "pre=\$$p"; $pre/bin/mpicc -std=c99 -O2 -o /tmp/gb$p benches/gpumpi-bench.c -ldl -lm; done
for r in 1 2 3; do
  echo "r$r base: $(timeout 40 $B/bin/mpirun -n 2 /tmp/gbB -d cuda -o pingpong -b 1 -e 1M -f 2 -w 100 -n 1000 2>&1 | P)"
  echo "r$r new : $(timeout 40 $N/bin/mpirun -n 2 /tmp/gbN -d cuda -o pingpong -b 1 -e 1M -f 2 -w 100 -n 1000 2>&1 | P)"
done
for op in allreduce alltoall; do
  echo "$op base: $(timeout 40 $B/bin/mpirun -n 2 /tmp/gbB -d cuda -z 1 -o $op -b 8 -e 1M -f 2 -w 50 -n 300 2>&1 | P)"
  echo "$op new : $(timeout 40 $N/bin/mpirun -n 2 /tmp/gbN -d cuda -z 1 -o $op -b 8 -e 1M -f 2 -w 50 -n 300 2>&1 | P)"
done
date -u
