#!/bin/bash
export NCCL_NVLS_ENABLE=0
N=build/new; bash build/dev/fixprefix.sh $N >/dev/null
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
$N/bin/mpicc -O2 -Itests/gpu -o /tmp/churn tests/gpu/gpu_churn.c -ldl -lm -lpthread || exit 1
for n in 2 4; do
 echo "== IPC -n $n"; $N/bin/mpirun -n $n -x GPUMPI_CUDA_IPC --timeout 200 /tmp/churn 300 20 2>&1 | grep -v DEBUG | tail -4
 for c in 250 450; do echo "== P2P off -n $n cycles $c"; GPUMPI_CUDA_IPC=0 GPUMPI_GPU_HOST_CHUNK=65536 GPUMPI_GPU_HOST_KERNEL=262144 $N/bin/mpirun -n $n -x GPUMPI_CUDA_IPC -x GPUMPI_GPU_HOST_CHUNK -x GPUMPI_GPU_HOST_KERNEL --timeout 200 /tmp/churn $c 18 2>&1 | grep -v DEBUG | tail -4; done
done
