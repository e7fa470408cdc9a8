#!/bin/bash
export NCCL_NVLS_ENABLE=0
bash build/dev/fixprefix.sh build/new >/dev/null; N=$PWD/build/new
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH GPUMPI_TEST_CUDART=/usr/local/cuda/lib64/libcudart.so
$N/bin/mpicc -O2 -Itests/gpu -o /tmp/gmm tests/gpu/gpu_mismatch.c -ldl -lm -lpthread || exit 1
for i in 1 2; do GPUMPI_DEBUG=1 GPUMPI_CUDA_IPC=0 timeout 60 $N/bin/mpirun -n 4 --oversubscribe --timeout 50 -x GPUMPI_DEBUG -x GPUMPI_CUDA_IPC -x GPUMPI_TEST_CUDART /tmp/gmm > $OUT/mm$i.log 2>&1; grep -E 'expected|PASS|FAIL' $OUT/mm$i.log | head -3; done
$N/bin/mpicc -std=c99 -O2 -Ibenches -o /tmp/gb benches/gpumpi-bench.c -ldl -lm
for r in 1 2 3 4; do GPUMPI_DEBUG=1 timeout 60 $N/bin/mpirun -n 2 -x GPUMPI_DEBUG /tmp/gb -o pingpong -d cuda -b 512 -e 4K -f 8 -w 200 -n 2000 > $OUT/pp$r.log 2>&1; grep -v '^#' $OUT/pp$r.log | grep -E '^ +[0-9]' ; grep -i -E 'near|bounce' $OUT/pp$r.log | head -4; done
