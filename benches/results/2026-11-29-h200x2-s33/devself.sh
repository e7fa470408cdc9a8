#!/bin/bash
# Issue 24: the wide resident kernel without a rank's own piece in its scratch (new: the push
# goes to the peers only, the reduction and copy-out read the rank's own piece from its buffer)
# against base, blocking allreduce, alltoall and allgather 16 KiB-4 MiB on 2 GPUs, 32 and 64
# blocks, NCCL beside. 3 rounds interleaved.
W=$(mktemp -d)
for v in base new; do build/s33/$v/bin/mpicc -std=c99 -O2 -o $W/gb-$v benches/gpumpi-bench.c -ldl -lm || exit 1; done
export NCCL_NVLS_ENABLE=0
NCCL_LIB=$(python3 -c "import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=${NCCL_LIB}:${LD_LIBRARY_PATH:-}
nvidia-smi -L; uptime
R=${ROUNDS:-3}
for r in $(seq 1 $R); do
  for op in allreduce alltoall allgather; do
    for b in ${BLOCKS:-32 64}; do
      for v in base new; do
        echo -n "r$r $op b$b $v: "
        GPUMPI_GPU_RESIDENT_MAX=${RMAX:-1m} GPUMPI_GPU_RESIDENT_BLOCKS=$b timeout 60 build/s33/$v/bin/mpirun -n 2 $W/gb-$v -o $op -d cuda -z 1 -b ${BMIN:-16K} -e ${EMAX:-1M} -f 2 -w 100 -n ${NIT:-500} 2>&1 | grep -v "^#" | awk '{printf "%s=%s%s ", $1, $10, ($9!=0?"!WRONG"$9:"")}'; echo
      done
    done
    if [ $r = 1 ]; then
    echo -n "r$r $op nccl: "
    timeout 60 build/s33/base/bin/mpirun -n 2 $W/gb-base -B nccl -o $op -d cuda -z 1 -b ${BMIN:-16K} -e ${EMAX:-1M} -f 2 -w 100 -n ${NIT:-500} 2>&1 | grep -v "^#" | awk '{printf "%s=%s%s ", $1, $10, ($9!=0?"!WRONG"$9:"")}'; echo
    fi
  done
done
