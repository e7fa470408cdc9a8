#!/bin/bash
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee $OUT/s18f.log) 2>&1
R=$(pwd)
SKIP_HOST=1 ROUNDS=1 timeout 400 bash benches/emunodes_bench.sh $R/build/b
