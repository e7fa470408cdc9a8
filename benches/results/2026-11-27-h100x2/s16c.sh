#!/bin/bash
export NCCL_NVLS_ENABLE=0
bash build/dev/fixprefix.sh build/new >/dev/null; N=$PWD/build/new
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH GPUMPI_TEST_CUDART=/usr/local/cuda/lib64/libcudart.so
$N/bin/mpicc -O2 -Itests/gpu -o /tmp/gmm tests/gpu/gpu_mismatch.c -ldl -lm -lpthread || exit 1
for i in 1 2; do GPUMPI_DEBUG=2 GPUMPI_CUDA_IPC=0 timeout 60 $N/bin/mpirun -n 4 --oversubscribe --timeout 50 -x GPUMPI_DEBUG -x GPUMPI_CUDA_IPC -x GPUMPI_TEST_CUDART /tmp/gmm > $OUT/mm$i.log 2>&1; grep -E 'expected|PASS|FAIL' $OUT/mm$i.log | head -3; done
gzip $OUT/mm*.log; ls -la $OUT
