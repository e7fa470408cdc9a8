#!/bin/bash
# s16a.sh: GPU verification of main dc7ba67+ (m22b, q16, c17, h23, l18 merged) against base 62a4fb1.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
bash build/dev/fixprefix.sh build/base >/dev/null; bash build/dev/fixprefix.sh build/new >/dev/null
N=$PWD/build/new; B=$PWD/build/base
nvidia-smi -L; date -u
NCCL_LIB=$(python3 -c "import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],'lib'))")
export LD_LIBRARY_PATH=$NCCL_LIB:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
mkdir -p /work target/tmp && ln -sfn $PWD /work/main
echo "== unit gpu::"; timeout 60 build/unit/lib-tests gpu:: --test-threads=1 2>&1 | grep -E "test result|FAILED|panicked" | head
echo "== gpu suite"; GPUMPI_TEST_CUDART=/usr/local/cuda/lib64/libcudart.so GPU_TEST_TIMEOUT=60 timeout 400 bash tests/gpu/run.sh $N > $OUT/runsh.log 2>&1; echo "rc=$?"; grep -E "^PASS|FAIL|SKIP|^gpu:" $OUT/runsh.log | tail -50
date -u
export GPUMPI_TEST_CUDART=/usr/local/cuda/lib64/libcudart.so
$N/bin/mpicc -O2 -Itests/gpu -o /tmp/gmm tests/gpu/gpu_mismatch.c -ldl -lm -lpthread
for i in 1 2 3; do echo "== gpu_mismatch -n 4 IPC off #$i"; GPUMPI_CUDA_IPC=0 timeout 60 $N/bin/mpirun -n 4 --oversubscribe --timeout 50 -x GPUMPI_CUDA_IPC -x GPUMPI_TEST_CUDART /tmp/gmm 2>&1 | grep -E 'expected|PASS|FAIL' | head -3; done
for P in $B $N; do $P/bin/mpicc -std=c99 -O2 -Ibenches -o /tmp/gb-$(basename $P) benches/gpumpi-bench.c -ldl -lm || exit 1; done
b() { l=$1; P=$2; shift 2; timeout 60 $P/bin/mpirun -n 2 /tmp/gb-$(basename $P) "$@" | awk -v l="$l" '!/^#/{printf "%-6s %10s %9s %8s %s\n", l, $1, $6, $8, $9}'; }
echo "== host allreduce on a dup (time us)"; for r in 1 2; do b base $B -o allreduce -C dup -b 8 -e 8K -f 8 -w 200 -n 3000; b new $N -o allreduce -C dup -b 8 -e 8K -f 8 -w 200 -n 3000; done
echo "== device pingpong one-way (us)"; for r in 1 2; do b base $B -o pingpong -d cuda -b 8 -e 64K -f 8 -w 200 -n 2000; b new $N -o pingpong -d cuda -b 8 -e 64K -f 8 -w 200 -n 2000; done
echo "== host pingpong one-way (us)"; for r in 1 2; do b base $B -o pingpong -b 8 -e 64K -f 8 -w 200 -n 5000; b new $N -o pingpong -b 8 -e 64K -f 8 -w 200 -n 5000; done
echo "== device allreduce (time us)"; for r in 1; do b base $B -d cuda -o allreduce -b 8 -e 4M -f 8 -w 20 -n 300; b new $N -d cuda -o allreduce -b 8 -e 4M -f 8 -w 20 -n 300; done; b nccl $N -B nccl -d cuda -o allreduce -b 8 -e 4M -f 8 -w 20 -n 300
date -u
