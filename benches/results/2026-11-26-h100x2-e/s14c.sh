#!/bin/bash
# s14c.sh: final GPU verification of main with the helper branches merged, against base (9e8cedc).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
bash build/dev/fixprefix.sh build/base >/dev/null
cp -a build/new /tmp/moved-new; N=/tmp/moved-new
nvidia-smi -L; date -u
NCCL_LIB=$(python3 -c "import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],'lib'))")
export LD_LIBRARY_PATH=$NCCL_LIB:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
mkdir -p /work target/tmp && ln -sfn $PWD /work/main
echo "== unit gpu::"; build/unit/lib-tests gpu:: --test-threads=1 2>&1 | grep -E "test result|FAILED|panicked" | head
echo "== gpu suite"; GPUMPI_TEST_CUDART=/usr/local/cuda/lib64/libcudart.so GPU_TEST_TIMEOUT=60 timeout 360 bash tests/gpu/run.sh $N 2>&1 | tee $OUT/runsh.log | grep -E "^PASS|FAIL|SKIP|^gpu:" | head -60
for P in build/base $N; do $P/bin/mpicc -std=c99 -O2 -Ibenches -o /tmp/gb-$(basename $P) benches/gpumpi-bench.c -ldl -lm || exit 1; done
b() { l=$1; P=$2; shift 2; $P/bin/mpirun -n 2 /tmp/gb-$(basename $P) "$@" | awk -v l="$l" '!/^#/{printf "%-6s %10s %9s %8s %s\n", l, $1, $6, $8, $9}'; }
for op in allreduce alltoall allgather; do echo "== $op -d cuda 4K-4M (time us, busbw GB/s, wrong); nvl = new with GPUMPI_GPU_RESIDENT_MAX=0"
 for r in 1 2; do b base build/base -d cuda -o $op -b 4K -e 4M -f 4 -w 20 -n 200; b new $N -d cuda -o $op -b 4K -e 4M -f 4 -w 20 -n 200; GPUMPI_GPU_RESIDENT_MAX=0 b nvl $N -d cuda -o $op -b 4K -e 4M -f 4 -w 20 -n 200; done
 b nccl $N -B nccl -d cuda -o $op -b 4K -e 4M -f 4 -w 20 -n 200; done
echo "== host allreduce 2 ranks, default vs GPUMPI_GPU_COLL=0"; for r in 1 2; do b base build/base -o allreduce -b 8 -e 16K -f 4 -w 100 -n 2000; b new $N -o allreduce -b 8 -e 16K -f 4 -w 100 -n 2000; GPUMPI_GPU_COLL=0 b new0 $N -o allreduce -b 8 -e 16K -f 4 -w 100 -n 2000; done
date -u
