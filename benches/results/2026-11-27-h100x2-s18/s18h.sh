#!/bin/bash
# s18h: the merged tree: unit gpu::, the GPU suite, then emulated nodes side by side (issue 18)
# and where a small device allreduce across nodes spends its time.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee $OUT/s18h.log) 2>&1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
N=$PWD/build/new
nvidia-smi -L; date -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export GPUMPI_TEST_CUDART=/usr/local/cuda/lib64/libcudart.so
mkdir -p /work target/tmp && ln -sfn $PWD /work/main
echo "== unit gpu::"; timeout 90 build/unit/lib-tests gpu:: --test-threads=1 2>&1 | grep -E "test result|FAILED|panicked" | head
echo "== gpu suite"; GPU_TEST_TIMEOUT=60 timeout 420 bash tests/gpu/run.sh $N > $OUT/runsh.log 2>&1; echo "rc=$?"; grep -E "FAIL|^gpu:" $OUT/runsh.log | tail -20
date -u
$N/bin/mpicc -std=c99 -O2 -o /tmp/gb benches/gpumpi-bench.c -ldl -lm
cat > /tmp/gpr.sh <<'SH'
#!/bin/sh
CUDA_VISIBLE_DEVICES=$((GPUMPI_RANK % 2)) exec "$@"
SH
chmod +x /tmp/gpr.sh
EMU=scripts/emulate-nodes.sh
echo "== small allreduce across emulated nodes: host, device, device variants (median us)"
for v in "host X=1" "cuda X=1" "cuda GPUMPI_GPU_SMALL_COPY=0"; do
  set -- $v
  echo "$v: $(env $2 timeout 60 $N/bin/mpirun -n 2 $EMU 2 /tmp/gpr.sh /tmp/gb -d $1 -o allreduce -b 8 -e 4K -f 8 -w 100 -n 2000 | grep -v '^#' | tr -s ' ' | cut -d' ' -f2,11 | tr '\n' '|')"
done
echo "device allreduce 16M-128M: $(timeout 120 $N/bin/mpirun -n 2 $EMU 2 /tmp/gpr.sh /tmp/gb -d cuda -o allreduce -b 16M -e 128M -f 8 -w 2 -n 5 | grep -v '^#' | tr -s ' ' | cut -d' ' -f2,8,11 | tr '\n' '|')"
date -u
