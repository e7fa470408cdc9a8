#!/bin/bash
# s19g: host buffers at 2 emulated nodes x 2 ranks beside Open MPI's tcp btl (issue 18's 2x2 target).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee $OUT/s19g.log) 2>&1
N=$PWD/build/new
date -u
NP=4 ROUNDS=1 SKIP_DEVICE=1 timeout 500 bash benches/emunodes_bench.sh $N
date -u
