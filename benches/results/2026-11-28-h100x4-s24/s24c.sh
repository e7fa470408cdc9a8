#!/bin/bash
# s24c: the final tree (build/f24, unit build/f24unit) on 4x H100: s24b (unit gpu::, the GPU
# suite), then windowed host bandwidth between 2 emulated nodes over loopback, main before
# nb25 (build/main, debug info stripped) vs the final tree, raw TCP in the same rounds
# (benches/net_bulk_bench.sh): auto (this 64-core host stripes), then under taskset -c 0,1.
set -u
R=$(cd "$(dirname "$0")/../../.." && pwd); cd $R
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
BUILD=f24 BENCH=0 bash benches/results/2026-11-28-h100x4-s24/s24b.sh
echo "== net_bulk auto, 2 rounds $(date -u +%T)" | tee -a $OUT/s24c.log
timeout ${NB_LIMIT:-110} bash benches/net_bulk_bench.sh --rounds 2 --max 16M build/main build/f24 2>&1 | tail -12 | tee -a $OUT/s24c.log
echo "== net_bulk taskset -c 0,1, 1 round $(date -u +%T)" | tee -a $OUT/s24c.log
timeout ${NB2_LIMIT:-60} taskset -c 0,1 bash benches/net_bulk_bench.sh --rounds 1 --max 4M build/main build/f24 2>&1 | tail -10 | tee -a $OUT/s24c.log
date -u | tee -a $OUT/s24c.log
