#!/bin/bash
# s17d.sh: device allreduce 256 KiB-8 MiB at each session-15 merge point (as s17c), four
# interleaved repeats, to check the 2 MiB allreduce gap of s17a/s17b (base 24-27 us, new 28-30).
exec > >(tee $OUT/s17d.log) 2>&1
tar xJf build/bisx/bis.tar.xz -C build
export NCCL_NVLS_ENABLE=0
nvidia-smi -L; date -u; uptime
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
V="base q c l new"
for v in $V; do P=$PWD/build/bis/$v; $P/bin/mpicc -std=c99 -O2 -Ibenches -o /tmp/gb-$v benches/gpumpi-bench.c -ldl -lm || exit 1; done
b() { v=$1; shift; timeout 60 $PWD/build/bis/$v/bin/mpirun -n 2 /tmp/gb-$v "$@" | awk -v l="$v" '!/^#/{printf "%-5s %9s %8s %8s %8s\n", l, $1, $6, $10, $11}'; }
echo "== device allreduce (size, mean, med, min us)"
for r in 1 2 3 4; do for v in $V; do b $v -d cuda -o allreduce -b 256K -e 8M -f 2 -w 100 -n 500; done; done
echo "== device alltoall"
for r in 1 2 3; do for v in base new; do b $v -d cuda -o alltoall -b 256K -e 16M -f 4 -w 100 -n 500; done; done
date -u
