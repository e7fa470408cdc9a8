#!/bin/bash
# s19b: allreduce between 2 emulated nodes in pieces (Piped path) and the ring row: unit gpu::,
# the GPU suite, then base (session start, 0814123) beside new and NCCL's socket transport.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee $OUT/s19b.log) 2>&1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
B=$PWD/build/base; N=$PWD/build/new
nvidia-smi -L; date -u
NCCL_LIB=$(python3 -c "import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=${NCCL_LIB}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export NCCL_IB_DISABLE=1 GPUMPI_TEST_CUDART=/usr/local/cuda/lib64/libcudart.so
mkdir -p /work target/tmp && ln -sfn $PWD /work/main
echo "== unit gpu::"; timeout 90 build/unit/lib-tests gpu:: --test-threads=1 2>&1 | grep -E "test result|FAILED|panicked" | head
echo "== gpu suite"; GPU_TEST_TIMEOUT=60 timeout 330 bash tests/gpu/run.sh $N > $OUT/runsh.log 2>&1; echo "rc=$?"; grep -E "FAIL|^gpu:|pieces" $OUT/runsh.log | tail -20
date -u
$B/bin/mpicc -std=c99 -O2 -o /tmp/gbb benches/gpumpi-bench.c -ldl -lm
$N/bin/mpicc -std=c99 -O2 -o /tmp/gbn benches/gpumpi-bench.c -ldl -lm
cat > /tmp/gpr.sh <<'SH'
#!/bin/sh
CUDA_VISIBLE_DEVICES=$((GPUMPI_RANK % 2)) exec "$@"
SH
chmod +x /tmp/gpr.sh
EMU=scripts/emulate-nodes.sh
R() { local p=$1; shift; timeout 100 $p/bin/mpirun -n 2 $EMU 2 /tmp/gpr.sh "$@" 2>&1 | grep -v '^#' | awk '{printf "%s:%s/%s%s ", $1, $6, $10, ($9>0?"!WRONG":"")} END {print ""}'; }
echo "== host allreduce across 2 nodes (size:mean/median us), algorithm crossover on base"
for a in recursive_doubling ring; do echo "base $a: $(GPUMPI_ALLREDUCE_ALGORITHM=$a R $B /tmp/gbb -d host -o allreduce -b 64K -e 1M -f 2 -w 5 -n 40)"; done
for r in 1 2; do
  echo "host base: $(R $B /tmp/gbb -d host -o allreduce -b 1M -e 64M -f 4 -w 3 -n 15)"
  echo "host new : $(R $N /tmp/gbn -d host -o allreduce -b 1M -e 64M -f 4 -w 3 -n 15)"
  echo "host new piece=0: $(GPUMPI_COLL_PIECE=0 R $N /tmp/gbn -d host -o allreduce -b 1M -e 64M -f 4 -w 3 -n 15)"
done
echo "== device allreduce across 2 nodes"
for r in 1 2; do
  echo "dev base: $(R $B /tmp/gbb -d cuda -z 1 -o allreduce -b 1M -e 128M -f 4 -w 3 -n 10)"
  echo "dev new : $(R $N /tmp/gbn -d cuda -z 1 -o allreduce -b 1M -e 128M -f 4 -w 3 -n 10)"
  echo "dev nccl: $(NCCL_NET=Socket NCCL_SOCKET_IFNAME=lo R $N /tmp/gbn -B nccl -d cuda -z 1 -o allreduce -b 1M -e 128M -f 4 -w 3 -n 10)"
done
for p in 1m 16m; do echo "dev new piece=$p: $(GPUMPI_COLL_PIECE=$p R $N /tmp/gbn -d cuda -z 1 -o allreduce -b 4M -e 128M -f 4 -w 3 -n 10)"; done
date -u
