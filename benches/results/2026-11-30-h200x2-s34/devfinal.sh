#!/bin/bash
# Final pass of the session's build on 2x H200: the GPU suite (78 runs), then blocking
# allreduce/alltoall/allgather 16 KiB-1 MiB, base (session-33 build) against the session's
# build (built-in table: LL128 allreduce at 2 ranks), 32 and 64 blocks, NCCL -z 1 beside.
export NCCL_NVLS_ENABLE=0
nvidia-smi -L; uptime
GPUMPI_REQUIRE_GPU=1 GPU_TEST_TIMEOUT=120 bash tests/gpu/run.sh build/s34/new > $OUT/suite.txt 2>&1; echo "suite rc=$?"
grep -E "^(gpu:|FAIL)|verdict|^== gpu_resident_mid" $OUT/suite.txt | tail -20
tail -1 $OUT/suite.txt
W=$(mktemp -d)
for v in new base; do d=build/s34/new; [ $v = base ] && d=build/s33/new; $d/bin/mpicc -std=c99 -O2 -o $W/gb-$v benches/gpumpi-bench.c -ldl -lm || exit 1; done
NCCL_LIB=$(python3 -c "import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=${NCCL_LIB}:${LD_LIBRARY_PATH:-}
for r in 1 2; do
  for op in allreduce alltoall allgather; do
    for b in 32 64; do for v in base new; do
      d=build/s34/new; [ $v = base ] && d=build/s33/new
      echo -n "r$r $op b$b $v: "
      GPUMPI_GPU_RESIDENT_BLOCKS=$b timeout 60 $d/bin/mpirun -n 2 $W/gb-$v -o $op -d cuda -z 1 -b 8 -e 1M -f 2 -w 100 -n 500 2>&1 | grep -v "^#" | awk '{printf "%s=%s%s ", $1, $10, ($9!=0?"!WRONG"$9:"")}'; echo
    done; done
    if [ $r = 1 ]; then
      echo -n "r$r $op nccl: "
      timeout 60 build/s33/new/bin/mpirun -n 2 $W/gb-base -B nccl -o $op -d cuda -z 1 -b 8 -e 1M -f 2 -w 100 -n 500 2>&1 | grep -v "^#" | awk '{printf "%s=%s%s ", $1, $10, ($9!=0?"!WRONG"$9:"")}'; echo
    fi
  done
done
