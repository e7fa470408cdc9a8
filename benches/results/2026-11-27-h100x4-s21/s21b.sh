#!/bin/bash
# s21b: the merged tree (main + d18 + s24: build/m, sources build/msrc) on 4x H100: unit gpu::, the GPU suite,
# and s24's sweep of the stream kernel (gpu_stream bench) beside NCCL -z0.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee $OUT/s21b.log) 2>&1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
M=$PWD/build/m; S=$PWD/build/msrc
nvidia-smi -L | head -1; date -u; uptime
NCCL_LIB=$(python3 -c "import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=${NCCL_LIB}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export GPUMPI_TEST_CUDART=/usr/local/cuda/lib64/libcudart.so
mkdir -p /work target/tmp && ln -sfn $S /work/main
echo "== unit gpu::"; timeout 120 build/munit/lib-tests gpu:: --test-threads=1 2>&1 | grep -E "test result|FAILED|panicked" | head
ln -sfn $PWD /work/main
echo "== gpu suite"; GPU_TEST_TIMEOUT=60 GPU_TEST_BUILD=/tmp/gt timeout 330 bash $S/tests/gpu/run.sh $M > $OUT/runsh-s21b.log 2>&1; echo "rc=$?"; grep -E "^FAILED|^gpu:" $OUT/runsh-s21b.log | tail -20
date -u
$M/bin/mpicc -std=c99 -O2 -o /tmp/gbm benches/gpumpi-bench.c -ldl -lm
P() { awk '!/^#/ {printf "%s:%s%s ", $1, $10, ($9>0?"!WRONG":"")} END {print ""}'; }
G=/tmp/gt/gpu_stream
SB() { local n=$1; shift; echo "-- n=$n $*"; env "$@" timeout 90 $M/bin/mpirun -n $n $(for kv in "$@"; do echo -n "-x ${kv%%=*} "; done) $G bench $BA 2>&1 | grep -v "^#" | tail -12; }
for n in 2 4; do
  BA="1073741824 8 8"; SB $n GPUMPI_DEBUG=0
  echo "n=$n nccl -z0 A: $(timeout 60 $M/bin/mpirun -n $n /tmp/gbm -B nccl -d cuda -z 0 -o allreduce -b 8 -e 1G -f 8 -w 20 -n 100 2>&1 | P)"
  BA="1048576 4096 2"
  SB $n GPUMPI_DEBUG=0
  SB $n GPUMPI_STREAM_LL_MAX=0 GPUMPI_STREAM_LL_MAX_WIDE=0
  SB $n GPUMPI_STREAM_LL_MAX=1m GPUMPI_STREAM_LL_MAX_WIDE=1m GPUMPI_STREAM_SCRATCH=64m
  SB $n GPUMPI_STREAM_BLOCK_BYTES=16k
  echo "n=$n nccl -z0 B: $(timeout 60 $M/bin/mpirun -n $n /tmp/gbm -B nccl -d cuda -z 0 -o allreduce -b 4K -e 1M -f 2 -w 20 -n 200 2>&1 | P)"
  BA="1073741824 1048576 4"
  SB $n GPUMPI_STREAM_PIPE_MIN=0
  SB $n GPUMPI_STREAM_PIPE_MIN=1m
  SB $n GPUMPI_STREAM_SCRATCH=128m
  if [ $n = 2 ]; then
    SB $n GPUMPI_STREAM_SCRATCH=128m GPUMPI_STREAM_STAGES=8
    SB $n GPUMPI_STREAM_PIPE_CHUNK=512k
    SB $n GPUMPI_STREAM_BLOCKS=96
  fi
  echo "n=$n nccl -z0 C: $(timeout 60 $M/bin/mpirun -n $n /tmp/gbm -B nccl -d cuda -z 0 -o allreduce -b 1M -e 1G -f 4 -w 20 -n 100 2>&1 | P)"
done
date -u
