#!/bin/bash
# Issue 24: LL128 lines in the wide resident kernel (one_shot_ll128, push_ll128) against the
# session-33 build. Part 1: gpu_resident_mid with an LL128 table at 2 ranks (default blocks, 3
# blocks, 64 blocks, kernels idle 1 us). Part 2: blocking allreduce/alltoall/allgather 16 KiB-1 MiB,
# base (s33 build, built-in table), new (built-in table), ll128 (new, LL128 table), 32 and 64
# blocks, interleaved rounds; NCCL -z 1 once.
W=$(mktemp -d)
P=build/s34/x; B=build/s33/new
export NCCL_NVLS_ENABLE=0
$P/bin/mpicc -O2 -I tests/gpu -o $W/mid tests/gpu/gpu_resident_mid.c -ldl -lm -lpthread || exit 1
for v in new base; do d=$P; [ $v = base ] && d=$B; $d/bin/mpicc -std=c99 -O2 -o $W/gb-$v benches/gpumpi-bench.c -ldl -lm || exit 1; done
printf 'allreduce resident\nallreduce one_shot_ll128\nalltoall resident\nalltoall push_ll128\nallgather resident\nallgather push_ll128\n' > $W/ll128.txt
nvidia-smi -L; uptime
if [ "${MID:-1}" = 1 ]; then
for cfg in GPUMPI_X=0 GPUMPI_GPU_RESIDENT_BLOCKS=3 GPUMPI_GPU_RESIDENT_IDLE_US=1; do
  echo "== mid ll128 $cfg"
  env $cfg GPUMPI_GPU_RESIDENT_TUNING=$W/ll128.txt GPUMPI_GPU_RESIDENT_MAX=4m timeout 120 $P/bin/mpirun -n 2 \
    -x GPUMPI_GPU_RESIDENT_TUNING -x GPUMPI_GPU_RESIDENT_MAX -x GPUMPI_GPU_RESIDENT_BLOCKS -x GPUMPI_GPU_RESIDENT_IDLE_US \
    $W/mid $((4<<20)) > $W/mid.log 2>&1; echo "rc=$?"; grep -E "^(PASS|FAIL|SKIP)|wrong|error" $W/mid.log | head -8
done
fi
R=${ROUNDS:-2}
run() { # label prefix-binary env...
  local l=$1 bin=$2; shift 2
  echo -n "$l: "
  env "$@" timeout 60 $P/bin/mpirun -n 2 $bin -o $op -d cuda -z 1 -b ${BMIN:-16K} -e ${EMAX:-1M} -f 2 -w 100 -n ${NIT:-500} 2>&1 | grep -v "^#" | awk '{printf "%s=%s%s ", $1, $10, ($9!=0?"!WRONG"$9:"")}'; echo
}
for r in $(seq 1 $R); do
  for op in allreduce alltoall allgather; do
    for b in ${BLOCKS:-32 64}; do
      run "r$r $op b$b base" $W/gb-base GPUMPI_GPU_RESIDENT_BLOCKS=$b GPUMPI_GPU_RESIDENT_MAX=${RMAX:-1m}
      run "r$r $op b$b new" $W/gb-new GPUMPI_GPU_RESIDENT_BLOCKS=$b GPUMPI_GPU_RESIDENT_MAX=${RMAX:-1m}
      run "r$r $op b$b ll128" $W/gb-new GPUMPI_GPU_RESIDENT_BLOCKS=$b GPUMPI_GPU_RESIDENT_MAX=${RMAX:-1m} GPUMPI_GPU_RESIDENT_TUNING=$W/ll128.txt
    done
    if [ $r = 1 ]; then
      echo -n "r$r $op nccl: "
      timeout 60 $B/bin/mpirun -n 2 $W/gb-base -B nccl -o $op -d cuda -z 1 -b ${BMIN:-16K} -e ${EMAX:-1M} -f 2 -w 100 -n ${NIT:-500} 2>&1 | grep -v "^#" | awk '{printf "%s=%s%s ", $1, $10, ($9!=0?"!WRONG"$9:"")}'; echo
    fi
  done
done
