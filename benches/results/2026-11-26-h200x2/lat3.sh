#!/bin/bash
export NCCL_NVLS_ENABLE=0
for P in build/base build/new; do bash build/dev/fixprefix.sh $P >/dev/null; done
nvidia-smi -L; uptime
NCCL_LIB=$(python3 -c "import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],'lib'))")
export LD_LIBRARY_PATH=$NCCL_LIB:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
for P in build/base build/new; do $P/bin/mpicc -std=c99 -O2 -Ibenches -o /tmp/gb-$(basename $P) benches/gpumpi-bench.c -ldl -lm || exit 1; done
pp() { $1/bin/mpirun -n 2 "${@:3}" /tmp/gb-$(basename $1) -d cuda -o pingpong -b 1 -e 1M -f 2 -w 50 -n 500 -z 1 | awk -v l="$2" '!/^#/{printf "%s %10s %8s %8s %s\n", l, $1, $6, $10, $9}'; }
for rep in 1 2; do pp build/base base; pp build/new new; done
$P/bin/mpirun -n 2 /tmp/gb-new -B nccl -d cuda -o pingpong -b 1 -e 1M -f 4 -w 50 -n 500 -z 1 | awk '!/^#/{printf "nccl %10s %8s %8s %s\n", $1, $6, $10, $9}'
echo "== firstcall"
for r in 1 2; do for P in build/base build/new; do echo $P; $P/bin/mpirun -n 2 /tmp/gb-$(basename $P) -d cuda -o firstcall 2>&1 | grep -v "^#"; done; done
echo "== unit gpu::"
build/unit/lib-tests gpu:: --test-threads=1 2>&1 | tail -8
build/unit/lib-tests gpu::resident --nocapture 2>&1 | grep -i "skip" | head
echo "== gpu suite on new"
GPUMPI_TEST_CUDART=/usr/local/cuda/lib64/libcudart.so timeout 300 bash tests/gpu/run.sh build/new 2>&1 | grep -E "^==|PASS|FAIL|SKIP" | head -60
