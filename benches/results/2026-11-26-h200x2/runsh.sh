#!/bin/bash
export NCCL_NVLS_ENABLE=0
cp -a build/new /tmp/moved-new; N=/tmp/moved-new
nvidia-smi -L; date -u
GPUMPI_TEST_CUDART=/usr/local/cuda/lib64/libcudart.so GPU_TEST_TIMEOUT=120 timeout 400 bash tests/gpu/run.sh $N 2>&1 | tee $OUT/runsh.log | grep -E "^==|^PASS|FAIL|SKIP|^gpu:|resident set-ups|fewer than|^gpu_churn:" | head -80
