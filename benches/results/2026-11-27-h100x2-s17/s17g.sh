#!/bin/bash
# s17g.sh: device sendrecv and pingpong 16 B-4 KiB, old (a402cfd) vs new (f50e0fe), six
# interleaved repeats of 3000 calls, to settle the small-size sendrecv difference of s17f.
exec > >(tee $OUT/s17g.log) 2>&1
export NCCL_NVLS_ENABLE=0
nvidia-smi -L; date -u; uptime
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
for v in old new; do build/$v/bin/mpicc -std=c99 -O2 -Ibenches -o /tmp/gb-$v benches/gpumpi-bench.c -ldl -lm || exit 1; done
b() { v=$1; shift; timeout 60 $PWD/build/$v/bin/mpirun -n 2 /tmp/gb-$v "$@" | awk -v l="$v" '!/^#/{printf "%-5s %9s %8s %8s %8s\n", l, $1, $6, $10, $11}'; }
echo "== device sendrecv (size, mean, med, min us)"; for r in 1 2 3 4 5 6; do for v in old new; do b $v -d cuda -o sendrecv -b 16 -e 4K -f 16 -w 500 -n 3000; done; done
echo "== device pingpong"; for r in 1 2 3 4 5 6; do for v in old new; do b $v -d cuda -o pingpong -b 16 -e 4K -f 16 -w 500 -n 3000; done; done
date -u
