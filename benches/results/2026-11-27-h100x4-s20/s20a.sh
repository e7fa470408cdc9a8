#!/bin/bash
# s20a: first GPU look at the helpers' branches: m24's mid-size latency micro (benches/micro/midlat.cu),
# k24's GPU-native MPIX_Allreduce_enqueue (gpu_stream at 2 ranks, its bench), NCCL back-to-back beside it.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee $OUT/s20a.log) 2>&1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
K=$PWD/build/k24
nvidia-smi -L; date -u
NCCL_LIB=$(python3 -c "import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=${NCCL_LIB}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export GPUMPI_TEST_CUDART=/usr/local/cuda/lib64/libcudart.so
mkdir -p /work target/tmp && ln -sfn $PWD /work/main
if [ -f build/m24src/midlat.cu ]; then
  echo "== midlat"; nvcc -O3 -arch=sm_90 -Ibenches/micro build/m24src/midlat.cu -o /tmp/midlat 2>&1 | tail -5
  timeout 150 /tmp/midlat 5000 2 2>&1 | tail -60; timeout 120 /tmp/midlat 3000 4 2>&1 | tail -60
fi
date -u
if [ -x $K/bin/mpicc ]; then
  $K/bin/mpicc -O2 -Ibuild/k24src -o /tmp/gst build/k24src/gpu_stream.c -ldl -lm -lpthread 2>&1 | tail -5
  for n in 2 4; do echo "== gpu_stream -n $n"; GPUMPI_DEBUG=2 timeout 120 $K/bin/mpirun -n $n --oversubscribe /tmp/gst > $OUT/gst$n.log 2>&1; echo "rc=$?"; grep -v "^engine\|^net:" $OUT/gst$n.log | tail -15; grep -ci "stream" $OUT/gst$n.log; done
  echo "== gpu_stream bench -n 2"; timeout 150 $K/bin/mpirun -n 2 /tmp/gst bench 2>&1 | tail -40
  $K/bin/mpicc -std=c99 -O2 -o /tmp/gbn benches/gpumpi-bench.c -ldl -lm
  echo "== NCCL back-to-back (-z 0), one node"
  timeout 120 $K/bin/mpirun -n 2 /tmp/gbn -B nccl -d cuda -z 0 -o allreduce -b 8 -e 1G -f 8 -w 20 -n 100 2>&1 | grep -v '^#' | awk '{printf "%s:%s ", $1, $6} END {print " (nccl z=0)"}'
fi
date -u
# Where a device message spends its time (main at session start, build/new): one node and 2 emulated nodes.
N=$PWD/build/new
if [ -x $N/bin/mpicc ]; then
  which perf nsys ncu 2>&1 | head -3
  $N/bin/mpicc -O2 -Itests/gpu -Ibenches/micro -o /tmp/dcc benches/micro/dev_call_cost.c -ldl
  for b in 8 4096 32768; do echo "== dev_call_cost one node $b B"; timeout 60 $N/bin/mpirun -n 2 /tmp/dcc 5000 $b 2>&1 | tail -6; done
  for b in 8 32768 262144; do echo "== dev_call_cost 2 emulated nodes $b B"; timeout 60 $N/bin/mpirun -n 2 scripts/emulate-nodes.sh 2 /tmp/dcc 2000 $b 2>&1 | tail -6; done
fi
date -u
