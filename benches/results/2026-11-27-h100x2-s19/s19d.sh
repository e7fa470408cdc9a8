#!/bin/bash
# s19d: the merged tree (lead pieces + g19 + e19 + h19): unit gpu::, the GPU suite, and device
# alltoall/allreduce between 2 emulated nodes beside NCCL's socket transport.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee $OUT/s19d.log) 2>&1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
N=$PWD/build/new
nvidia-smi -L; date -u
NCCL_LIB=$(python3 -c "import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=${NCCL_LIB}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export NCCL_IB_DISABLE=1 GPUMPI_TEST_CUDART=/usr/local/cuda/lib64/libcudart.so
mkdir -p /work target/tmp && ln -sfn $PWD /work/main
echo "== unit gpu::"; timeout 90 build/unit/lib-tests gpu:: --test-threads=1 2>&1 | grep -E "test result|FAILED|panicked" | head
echo "== gpu suite"; GPU_TEST_TIMEOUT=60 timeout 360 bash tests/gpu/run.sh $N > $OUT/runsh.log 2>&1; echo "rc=$?"; grep -E "FAIL|^gpu:|pieces|gdr" $OUT/runsh.log | tail -20
date -u
$N/bin/mpicc -std=c99 -O2 -o /tmp/gbn benches/gpumpi-bench.c -ldl -lm
cat > /tmp/gpr.sh <<'SH'
#!/bin/sh
CUDA_VISIBLE_DEVICES=$((GPUMPI_RANK % 2)) exec "$@"
SH
chmod +x /tmp/gpr.sh
R() { timeout 100 $N/bin/mpirun -n 2 scripts/emulate-nodes.sh 2 /tmp/gpr.sh /tmp/gbn "$@" 2>&1 | grep -v '^#' | awk '{printf "%s:%s/%s%s ", $1, $6, $10, ($9>0?"!WRONG":"")} END {print ""}'; }
for r in 1 2; do
  echo "dev alltoall new : $(R -d cuda -z 1 -o alltoall -b 1M -e 128M -f 8 -w 3 -n 10)"
  echo "dev alltoall whole: $(GPUMPI_COLL_PIECE=0 R -d cuda -z 1 -o alltoall -b 1M -e 128M -f 8 -w 3 -n 10)"
  echo "dev alltoall nccl: $(NCCL_NET=Socket NCCL_SOCKET_IFNAME=lo R -B nccl -d cuda -z 1 -o alltoall -b 1M -e 128M -f 8 -w 3 -n 10)"
  echo "dev allreduce new : $(R -d cuda -z 1 -o allreduce -b 1M -e 128M -f 8 -w 3 -n 10)"
  echo "dev allreduce nccl: $(NCCL_NET=Socket NCCL_SOCKET_IFNAME=lo R -B nccl -d cuda -z 1 -o allreduce -b 1M -e 128M -f 8 -w 3 -n 10)"
done
date -u
