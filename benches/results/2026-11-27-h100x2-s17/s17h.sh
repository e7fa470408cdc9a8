#!/bin/bash
# s17h.sh: the final tree: unit gpu:: and the GPU suite.
exec > >(tee $OUT/s17h.log) 2>&1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
N=$PWD/build/new
nvidia-smi -L; date -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export GPUMPI_TEST_CUDART=/usr/local/cuda/lib64/libcudart.so
mkdir -p /work target/tmp && ln -sfn $PWD /work/main
echo "== unit gpu::"; timeout 90 build/unit/lib-tests gpu:: --test-threads=1 2>&1 | grep -E "test result|FAILED|panicked" | head
echo "== gpu suite"; GPU_TEST_TIMEOUT=60 timeout 420 bash tests/gpu/run.sh $N > $OUT/runsh.log 2>&1; echo "rc=$?"; grep -E "FAIL|^gpu:" $OUT/runsh.log | tail -20
date -u
# old = f50e0fe (s17f's new), new = the final tree: point-to-point and allreduce, 3 interleaved runs.
for v in old new; do build/$v/bin/mpicc -std=c99 -O2 -Ibenches -o /tmp/gb-$v benches/gpumpi-bench.c -ldl -lm || exit 1; done
b() { v=$1; shift; timeout 60 $PWD/build/$v/bin/mpirun -n 2 /tmp/gb-$v "$@" | awk -v l="$v" '!/^#/{printf "%-5s %9s %8s %8s %8s\n", l, $1, $6, $10, $11}'; }
echo "== device pingpong (size, mean, med, min us)"; for r in 1 2 3; do for v in old new; do b $v -d cuda -o pingpong -b 16 -e 1M -f 16 -w 300 -n 1000; done; done
echo "== device sendrecv"; for r in 1 2 3; do for v in old new; do b $v -d cuda -o sendrecv -b 16 -e 1M -f 16 -w 300 -n 1000; done; done
echo "== device allreduce"; for r in 1 2 3; do for v in old new; do b $v -d cuda -o allreduce -b 8 -e 8M -f 8 -w 100 -n 500; done; done
echo "== host pingpong dup"; for r in 1 2 3; do for v in old new; do b $v -o pingpong -C dup -b 8 -e 4K -f 8 -w 1000 -n 20000; done; done
echo "== host pingpong world"; for r in 1 2 3; do for v in old new; do b $v -o pingpong -b 8 -e 4K -f 8 -w 1000 -n 20000; done; done
date -u
