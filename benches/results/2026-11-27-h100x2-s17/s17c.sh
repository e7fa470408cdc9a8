#!/bin/bash
# s17c.sh: device sendrecv/pingpong at 8 KiB-1 MiB across the session-15 merge points
# (base 62a4fb1, q = ad13eb2 after q16, c = a38da18 after c17, l = dc7ba67 after h23+l18, new = main),
# 3 interleaved repeats, to place the ~1 us sendrecv difference seen in s17a/s17b.
exec > >(tee $OUT/s17c.log) 2>&1
tar xJf build/bisx/bis.tar.xz -C build
export NCCL_NVLS_ENABLE=0
nvidia-smi -L; date -u; uptime
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
V="base q c l new"
for v in $V; do P=$PWD/build/bis/$v; $P/bin/mpicc -std=c99 -O2 -Ibenches -o /tmp/gb-$v benches/gpumpi-bench.c -ldl -lm || exit 1; done
b() { v=$1; shift; timeout 60 $PWD/build/bis/$v/bin/mpirun -n 2 /tmp/gb-$v "$@" | awk -v l="$v" '!/^#/{printf "%-5s %9s %8s %8s %8s\n", l, $1, $6, $10, $11}'; }
echo "== device sendrecv (size, mean, med, min us)"
for r in 1 2 3; do for v in $V; do b $v -d cuda -o sendrecv -b 16 -e 1M -f 4 -w 300 -n 1000; done; done
echo "== device pingpong one-way"
for r in 1 2; do for v in $V; do b $v -d cuda -o pingpong -b 16 -e 1M -f 4 -w 300 -n 1000; done; done
date -u
