#!/bin/bash
# s20c: the helpers' branches merged (lead 52a5b65: k24 first version, m24, t18, i20+i20b) on 4x H100:
# unit gpu::, the GPU suite of that tree, gpu_stream bench (MPIX_Allreduce_enqueue as a kernel) at 2 and 4 ranks.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee $OUT/s20c.log) 2>&1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
T=$PWD/build/t1; S=$PWD/build/t1src
nvidia-smi -L; date -u
NCCL_LIB=$(python3 -c "import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=${NCCL_LIB}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export GPUMPI_TEST_CUDART=/usr/local/cuda/lib64/libcudart.so
mkdir -p /work target/tmp && ln -sfn $PWD /work/main
echo "== unit gpu::"; timeout 90 build/t1unit/lib-tests gpu:: --test-threads=1 2>&1 | grep -E "test result|FAILED|panicked" | head
echo "== gpu suite"; GPU_TEST_TIMEOUT=60 GPU_TEST_BUILD=/tmp/gt timeout 470 bash $S/tests/gpu/run.sh $T > $OUT/runsh-s20c.log 2>&1; echo "rc=$?"; grep -E "FAIL|^gpu:" $OUT/runsh-s20c.log | tail -20
date -u
for n in 2 4; do [ -x /tmp/gt/gpu_stream ] && { echo "== gpu_stream bench -n $n"; timeout 60 $T/bin/mpirun -n $n /tmp/gt/gpu_stream bench 2>&1 | tail -25; }; done
date -u
