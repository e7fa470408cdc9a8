#!/bin/bash
export NCCL_NVLS_ENABLE=0
bash build/dev/fixprefix.sh build/new >/dev/null; N=$PWD/build/new
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH GPUMPI_TEST_CUDART=/usr/local/cuda/lib64/libcudart.so
$N/bin/mpicc -O2 -Itests/gpu -o /tmp/gmm tests/gpu/gpu_mismatch.c -ldl -lm -lpthread || exit 1
for i in 1 2 3 4 5; do echo "== -n 4 IPC off #$i"; GPUMPI_CUDA_IPC=0 timeout 60 $N/bin/mpirun -n 4 --oversubscribe --timeout 50 -x GPUMPI_CUDA_IPC -x GPUMPI_TEST_CUDART /tmp/gmm 2>&1 | grep -E 'expected|PASS|FAIL' | head -3; done
for n in 2 4; do echo "== -n $n IPC on"; timeout 60 $N/bin/mpirun -n $n --oversubscribe --timeout 50 -x GPUMPI_TEST_CUDART /tmp/gmm 2>&1 | grep -E 'expected|PASS|FAIL' | head -3; done
echo "== -n 2 IPC off"; GPUMPI_CUDA_IPC=0 timeout 60 $N/bin/mpirun -n 2 --timeout 50 -x GPUMPI_CUDA_IPC -x GPUMPI_TEST_CUDART /tmp/gmm 2>&1 | grep -E 'expected|PASS|FAIL' | head -3
date -u
