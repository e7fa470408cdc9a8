#!/bin/bash
# round.sh NAME...: runs each helper's GPU script (build/NAMEsrc/gpu.sh, copied from /work/wt/NAME-gpu.sh) against
# its install build/NAME (main's install build/main is the base), output to $OUT/NAME.txt.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$PWD
for N in "$@"; do
  echo "=== $N $(date -u +%T)"
  (cd $R/build/${N}src && SRC=$PWD timeout ${LIMIT:-200} bash ./gpu.sh $R/build/$N) > $OUT/$N.txt 2>&1
  echo "rc=$? $(date -u +%T)"; tail -3 $OUT/$N.txt
done
