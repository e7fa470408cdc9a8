#!/bin/bash
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
cp -a build/new /tmp/moved-new; N=/tmp/moved-new
nvidia-smi -L; uptime; date -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
echo "== unit gpu::"; timeout 100 build/unit/lib-tests gpu:: --test-threads=1 2>&1 | grep -E "test result|FAILED|panicked" | head
echo "== gpu suite"; GPUMPI_TEST_CUDART=/usr/local/cuda/lib64/libcudart.so GPU_TEST_TIMEOUT=120 timeout 440 bash tests/gpu/run.sh $N > $OUT/runsh.log 2>&1; echo "rc=$?"
grep -E "^==|^PASS|FAIL|SKIP|^gpu:|mismatch|class" $OUT/runsh.log | head -120
date -u
