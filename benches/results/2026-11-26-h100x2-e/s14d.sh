#!/bin/bash
export NCCL_NVLS_ENABLE=0
bash build/dev/s14b.sh 2>&1 | grep -v '^GPU [01]:'
N=$PWD/build/new
echo "== gpu_net_bench (pipelined vs staged whole, 2 emulated nodes)"; ROUNDS=2 REPS=20 timeout 100 bash benches/gpu_net_bench.sh $N $((64<<20)) 2>&1 | tail -14
echo "== gpu_mismatch -n 4 IPC off x4"; $N/bin/mpicc -O2 -Itests/gpu -o /tmp/gmm tests/gpu/gpu_mismatch.c -ldl -lm -lpthread
for i in 1 2 3 4; do GPUMPI_TEST_CUDART=/usr/local/cuda/lib64/libcudart.so GPUMPI_CUDA_IPC=0 timeout 60 $N/bin/mpirun -n 4 --oversubscribe --timeout 50 -x GPUMPI_CUDA_IPC -x GPUMPI_TEST_CUDART /tmp/gmm 2>&1 | grep -E 'expected|PASS|FAIL' | head -3; done
date -u
