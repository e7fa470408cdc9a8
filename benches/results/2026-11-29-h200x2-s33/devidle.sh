#!/bin/bash
# The wide resident kernel's idle exit while some of its blocks still run a command (the host then
# relaunches and the command runs twice): gpu_resident_mid on 2 GPUs with the kernels idle for
# 1 us (they exit between calls), base against new (block 0 exits only once every block reported
# the last command), 3 runs each, interleaved.
W=$(mktemp -d)
for v in base new; do build/s33/$v/bin/mpicc -O2 -Itests/gpu -o $W/t-$v tests/gpu/gpu_resident_mid.c -ldl -lm -lpthread || exit 1; done
nvidia-smi -L
for r in ${RS:-1 2 3}; do
  for v in base new; do
    echo "== r$r $v"
    GPUMPI_GPU_RESIDENT_IDLE_US=1 GPUMPI_GPU_RESIDENT_MAX=4m timeout 120 build/s33/$v/bin/mpirun -n 2 -x GPUMPI_GPU_RESIDENT_IDLE_US -x GPUMPI_GPU_RESIDENT_MAX $W/t-$v $((4 << 20)) > $W/log 2>&1; echo "rc=$?"
    grep -E "^(PASS|FAIL)" $W/log; grep -c "^gpu_resident_mid:" $W/log; grep "^gpu_resident_mid:" $W/log | head -6
  done
done
