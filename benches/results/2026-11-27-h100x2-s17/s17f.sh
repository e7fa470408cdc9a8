#!/bin/bash
# s17f.sh: final tree f50e0fe (n18 + r17 merged): unit gpu::, the GPU suite, and old (a402cfd)
# vs new on device and host point-to-point and device allreduce, three interleaved repeats.
exec > >(tee $OUT/s17f.log) 2>&1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
N=$PWD/build/new; O=$PWD/build/old
nvidia-smi -L; date -u; uptime
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export GPUMPI_TEST_CUDART=/usr/local/cuda/lib64/libcudart.so
mkdir -p /work target/tmp && ln -sfn $PWD /work/main
echo "== unit gpu::"; timeout 90 build/unit/lib-tests gpu:: --test-threads=1 2>&1 | grep -E "test result|FAILED|panicked" | head
echo "== gpu suite"; GPU_TEST_TIMEOUT=60 timeout 420 bash tests/gpu/run.sh $N > $OUT/runsh.log 2>&1; echo "rc=$?"; grep -E "FAIL|^gpu:" $OUT/runsh.log | tail -20
date -u
for v in old new; do build/$v/bin/mpicc -std=c99 -O2 -Ibenches -o /tmp/gb-$v benches/gpumpi-bench.c -ldl -lm || exit 1; done
b() { v=$1; shift; timeout 60 $PWD/build/$v/bin/mpirun -n 2 /tmp/gb-$v "$@" | awk -v l="$v" '!/^#/{printf "%-5s %9s %8s %8s %8s\n", l, $1, $6, $10, $11}'; }
echo "== device pingpong (size, mean, med, min us)"; for r in 1 2 3; do for v in old new; do b $v -d cuda -o pingpong -b 16 -e 1M -f 4 -w 300 -n 1000; done; done
echo "== device sendrecv"; for r in 1 2 3; do for v in old new; do b $v -d cuda -o sendrecv -b 16 -e 1M -f 4 -w 300 -n 1000; done; done
echo "== device allreduce"; for r in 1 2 3; do for v in old new; do b $v -d cuda -o allreduce -b 8 -e 8M -f 8 -w 100 -n 500; done; done
echo "== host pingpong"; for r in 1 2 3; do for v in old new; do b $v -o pingpong -b 8 -e 64K -f 8 -w 1000 -n 20000; done; done
echo "== host sendrecv"; for r in 1 2 3; do for v in old new; do b $v -o sendrecv -b 8 -e 64K -f 8 -w 1000 -n 20000; done; done
echo "== host pingpong unbound (GPUMPI_BIND=none)"; for r in 1 2; do for v in old new; do GPUMPI_BIND=none b $v -o pingpong -b 8 -e 512 -f 8 -w 1000 -n 20000; done; done
date -u
