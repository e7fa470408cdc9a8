#!/bin/bash
# s17b.sh: unit gpu:: tests, device allreduce and sendrecv base vs new (interleaved), gpu_session.sh.
exec > >(tee $OUT/s17b.log) 2>&1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
N=$PWD/build/new; B=$PWD/build/base
nvidia-smi -L; date -u; uptime
NCCL_LIB=$(python3 -c "import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],'lib'))")
export LD_LIBRARY_PATH=$NCCL_LIB:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export GPUMPI_TEST_CUDART=/usr/local/cuda/lib64/libcudart.so
mkdir -p /work target/tmp && ln -sfn $PWD /work/main
echo "== unit gpu::"; timeout 90 build/unit/lib-tests gpu:: --test-threads=1 2>&1 | grep -E "test result|FAILED|panicked" | head
for P in $B $N; do $P/bin/mpicc -std=c99 -O2 -Ibenches -o /tmp/gb-$(basename $P) benches/gpumpi-bench.c -ldl -lm || exit 1; done
b() { l=$1; P=$2; shift 2; timeout 60 $P/bin/mpirun -n 2 /tmp/gb-$(basename $P) "$@" | awk -v l="$l" '!/^#/{printf "%-6s %10s %9s %8s %s\n", l, $1, $6, $8, $9}'; }
bn() { timeout 90 $N/bin/mpirun -n 2 /tmp/gb-new -B nccl "$@" | awk '!/^#/{printf "%-6s %10s %9s %8s %s\n", "nccl", $1, $6, $8, $9}'; }
echo "== device allreduce (2 ranks; size, time us, busbw GB/s)"
for r in 1 2; do b base $B -d cuda -o allreduce -b 8 -e 16M -f 8 -w 20 -n 200; b new $N -d cuda -o allreduce -b 8 -e 16M -f 8 -w 20 -n 200; done
bn -d cuda -o allreduce -b 8 -e 16M -f 8 -w 20 -n 200
echo "== device sendrecv (2 ranks), 3 interleaved repeats"
for r in 1 2 3; do b base $B -d cuda -o sendrecv -b 8 -e 1M -f 2 -w 50 -n 500; b new $N -d cuda -o sendrecv -b 8 -e 1M -f 2 -w 50 -n 500; done
date -u
echo "== gpu_session.sh (new, 2 ranks)"
mkdir -p $OUT/session; OUT=$OUT/session SKIP_TESTS=1 timeout 330 bash benches/gpu_session.sh $N 2 > /dev/null 2>&1; echo "session rc=$?"
date -u
