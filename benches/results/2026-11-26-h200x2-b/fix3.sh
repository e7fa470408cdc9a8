#!/bin/bash
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
bash build/dev/fixprefix.sh build/base >/dev/null
cp -a build/new /tmp/moved-new; N=/tmp/moved-new
nvidia-smi -L; uptime; date -u
NCCL_LIB=$(python3 -c "import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],'lib'))")
export LD_LIBRARY_PATH=$NCCL_LIB:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export GPUMPI_TEST_CUDART=/usr/local/cuda/lib64/libcudart.so
for p in gpu_mem gpu_mismatch; do $N/bin/mpicc -O2 -Itests/gpu -o /tmp/$p tests/gpu/$p.c -ldl -lm -lpthread || exit 1; done
for n in 2 4; do echo "== gpu_mem -n $n"; timeout 100 $N/bin/mpirun -n $n --oversubscribe --timeout 90 /tmp/gpu_mem 2>&1 | grep -E "PASS|FAIL|mismatch|error" | head -5; done
echo "== gpu_mem -n 4 IPC off"; GPUMPI_CUDA_IPC=0 timeout 100 $N/bin/mpirun -n 4 --oversubscribe --timeout 90 -x GPUMPI_CUDA_IPC /tmp/gpu_mem 2>&1 | grep -E "PASS|FAIL|mismatch|error" | head -5
echo "== gpu_mismatch -n 2"; timeout 50 $N/bin/mpirun -n 2 --oversubscribe --timeout 40 /tmp/gpu_mismatch 2>&1 | tail -12
date -u
for P in build/base $N; do $P/bin/mpicc -std=c99 -O2 -Ibenches -o /tmp/gb-$(basename $P) benches/gpumpi-bench.c -ldl -lm || exit 1; done
b() { l=$1; P=$2; shift 2; timeout 120 $P/bin/mpirun -n 2 /tmp/gb-$(basename $P) "$@" | awk -v l="$l" '!/^#/{printf "%-6s %10s %9s %8s %s\n", l, $1, $6, $8, $9}'; }
for op in allreduce alltoall sendrecv; do echo "== $op -d cuda (time us, busbw GB/s, wrong)"
 b base build/base -d cuda -o $op -b 8 -e 256M -f 16 -w 5 -n 20; b new $N -d cuda -o $op -b 8 -e 256M -f 16 -w 5 -n 20
 b base build/base -d cuda -o $op -b 8 -e 256M -f 16 -w 5 -n 20; b new $N -d cuda -o $op -b 8 -e 256M -f 16 -w 5 -n 20
 b nccl $N -B nccl -d cuda -o $op -b 8 -e 256M -f 16 -w 5 -n 20; done
echo "== pingpong -d cuda"; for r in 1 2; do b base build/base -d cuda -o pingpong -b 1 -e 1M -f 8 -w 50 -n 500; b new $N -d cuda -o pingpong -b 1 -e 1M -f 8 -w 50 -n 500; done
echo "== host allreduce 2 ranks"; for r in 1 2; do b base build/base -o allreduce -b 8 -e 4M -f 4 -w 20 -n 200; b new $N -o allreduce -b 8 -e 4M -f 4 -w 20 -n 200; done
date -u
