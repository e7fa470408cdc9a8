#!/bin/bash
# s17a.sh: GPU verification of main (issue 17/23 done-when) against base 62a4fb1, one device call.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
N=$PWD/build/new; B=$PWD/build/base
nvidia-smi -L; date -u; uptime
NCCL_LIB=$(python3 -c "import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],'lib'))")
export LD_LIBRARY_PATH=$NCCL_LIB:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export GPUMPI_TEST_CUDART=/usr/local/cuda/lib64/libcudart.so
mkdir -p /work target/tmp && ln -sfn $PWD /work/main
echo "== unit gpu::"; timeout 90 build/unit/lib-tests gpu:: --test-threads=1 2>&1 | grep -E "test result|FAILED|panicked" | head
if [ "${SKIP_SUITE:-0}" != 1 ]; then
echo "== gpu suite"; GPU_TEST_TIMEOUT=60 timeout 420 bash tests/gpu/run.sh $N > $OUT/runsh.log 2>&1; echo "rc=$?"; grep -E "^PASS|FAIL|SKIP|^gpu:|passed|failed" $OUT/runsh.log | tail -60
fi
date -u
for P in $B $N; do $P/bin/mpicc -std=c99 -O2 -Ibenches -o /tmp/gb-$(basename $P) benches/gpumpi-bench.c -ldl -lm || exit 1; done
b() { l=$1; P=$2; shift 2; timeout 60 $P/bin/mpirun -n 2 /tmp/gb-$(basename $P) "$@" | awk -v l="$l" '!/^#/{printf "%-6s %10s %9s %8s %s\n", l, $1, $6, $8, $9}'; }
bn() { timeout 90 $N/bin/mpirun -n 2 /tmp/gb-new -B nccl "$@" | awk '!/^#/{printf "%-6s %10s %9s %8s %s\n", "nccl", $1, $6, $8, $9}'; }
for op in allreduce alltoall sendrecv; do
  echo "== device $op (2 ranks; size, time us, busbw GB/s)"
  for r in 1 2; do b base $B -d cuda -o $op -b 8 -e 16M -f 8 -w 20 -n 200; b new $N -d cuda -o $op -b 8 -e 16M -f 8 -w 20 -n 200; done
  bn -d cuda -o $op -b 8 -e 16M -f 8 -w 20 -n 200
done
echo "== host allreduce on a dup (time us)"; for r in 1 2; do b base $B -o allreduce -C dup -b 8 -e 64K -f 8 -w 200 -n 3000; b new $N -o allreduce -C dup -b 8 -e 64K -f 8 -w 200 -n 3000; done
echo "== host pingpong one-way (us)"; for r in 1 2; do b base $B -o pingpong -b 8 -e 64K -f 8 -w 200 -n 5000; b new $N -o pingpong -b 8 -e 64K -f 8 -w 200 -n 5000; done
echo "== device pingpong one-way (us)"; for r in 1 2; do b base $B -o pingpong -d cuda -b 8 -e 64K -f 8 -w 200 -n 2000; b new $N -o pingpong -d cuda -b 8 -e 64K -f 8 -w 200 -n 2000; done
date -u
