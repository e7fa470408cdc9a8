#!/bin/bash
# Issue 24/16: the wide resident kernel with MID_U=4 words in flight per thread in its copies and
# pushes (new) against base, blocking allreduce and alltoall 128 KiB-2 MiB on 2 GPUs, 32 and 64
# blocks, NCCL beside; device one way 4 KiB-1 MiB. 3 rounds interleaved.
W=$(mktemp -d)
for v in base new; do build/s32/$v/bin/mpicc -std=c99 -O2 -o $W/gb-$v benches/gpumpi-bench.c -ldl -lm || exit 1; done
export NCCL_NVLS_ENABLE=0
NCCL_LIB=$(python3 -c "import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=${NCCL_LIB}:${LD_LIBRARY_PATH:-}
nvidia-smi -L; uptime
row() { tr '\n' ' ' ; echo; }
for r in 1 2 3; do
  for op in allreduce alltoall; do
    for b in 32 64; do
      for v in base new; do
        echo -n "r$r $op b$b $v: "
        GPUMPI_GPU_RESIDENT_BLOCKS=$b timeout 60 build/s32/$v/bin/mpirun -n 2 $W/gb-$v -o $op -d cuda -z 1 -b 128K -e 2M -f 2 -w 50 -n 500 2>&1 | grep -v "^#" | awk '{printf "%s=%s%s ", $1, $10, ($9!=0?"!WRONG"$9:"")}'; echo
      done
    done
    echo -n "r$r $op nccl: "
    timeout 60 build/s32/base/bin/mpirun -n 2 $W/gb-base -B nccl -o $op -d cuda -z 1 -b 128K -e 2M -f 2 -w 50 -n 500 2>&1 | grep -v "^#" | awk '{printf "%s=%s%s ", $1, $10, ($9!=0?"!WRONG"$9:"")}'; echo
  done
  for v in base new; do
    echo -n "r$r pingpong $v: "
    timeout 60 build/s32/$v/bin/mpirun -n 2 $W/gb-$v -o pingpong -d cuda -b 4K -e 1M -f 2 -w 100 -n 1000 2>&1 | grep -v "^#" | awk '{printf "%s=%s%s ", $1, $10, ($9!=0?"!WRONG"$9:"")}'; echo
  done
done
