#!/bin/bash
# s20e: the tree to merge (lead: k24 final, m24, t18 with bulk data striped, i20+i20b) on 4x H100: unit gpu::,
# the GPU suite, gpu_stream bench beside NCCL back-to-back, host traffic between 2 emulated nodes and device
# call costs beside main at session start (build/new), large host allreduce in pieces vs whole on 2 cores.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee $OUT/s20e.log) 2>&1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
T=$PWD/build/t2; S=$PWD/build/t2src; B=$PWD/build/new
nvidia-smi -L | head -1; date -u
NCCL_LIB=$(python3 -c "import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=${NCCL_LIB}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export GPUMPI_TEST_CUDART=/usr/local/cuda/lib64/libcudart.so
mkdir -p /work target/tmp && ln -sfn $PWD /work/main
echo "== unit gpu::"; timeout 90 build/t2unit/lib-tests gpu:: --test-threads=1 --skip kabi 2>&1 | grep -E "test result|FAILED|panicked" | head
echo "== gpu suite"; GPU_TEST_TIMEOUT=60 GPU_TEST_BUILD=/tmp/gt timeout 300 bash $S/tests/gpu/run.sh $T > $OUT/runsh-s20e.log 2>&1; echo "rc=$?"; grep -E "^FAILED|^gpu:" $OUT/runsh-s20e.log | tail -20
date -u
$B/bin/mpicc -std=c99 -O2 -o /tmp/gbb benches/gpumpi-bench.c -ldl -lm
$T/bin/mpicc -std=c99 -O2 -o /tmp/gbt benches/gpumpi-bench.c -ldl -lm
P() { awk '!/^#/ {printf "%s:%s%s ", $1, $10, ($9>0?"!WRONG":"")} END {print ""}'; }   # size:median us
PB() { awk '!/^#/ {printf "%s:%s%s ", $1, $7, ($9>0?"!WRONG":"")} END {print ""}'; }  # size:algbw GB/s
for n in 2 4; do
  [ -x /tmp/gt/gpu_stream ] && { echo "== gpu_stream bench -n $n"; timeout 60 $T/bin/mpirun -n $n /tmp/gt/gpu_stream bench 2>&1 | tail -12; }
  echo "n=$n nccl -z0: $(timeout 60 $T/bin/mpirun -n $n /tmp/gbt -B nccl -d cuda -z 0 -o allreduce -b 8 -e 1G -f 8 -w 20 -n 100 2>&1 | P)"
done
date -u
echo "== mid-size blocking, 16 KiB-1 MiB (new)"
for n in 2 4; do for op in allreduce alltoall allgather; do
  echo "n=$n $op new: $(timeout 40 $T/bin/mpirun -n $n /tmp/gbt -d cuda -z 1 -o $op -b 16K -e 1M -f 2 -w 50 -n 400 2>&1 | P)"
done; echo "n=$n allreduce nccl: $(timeout 40 $T/bin/mpirun -n $n /tmp/gbt -B nccl -d cuda -z 1 -o allreduce -b 16K -e 1M -f 2 -w 50 -n 400 2>&1 | P)"; done
date -u
EMU=scripts/emulate-nodes.sh
H() { local p=$1 g=$2 f=$3; shift 3; timeout 60 $p/bin/mpirun -n 2 $EMU 2 $g -d host "$@" 2>&1 | $f; }
for r in 1 2; do
  for x in "B /tmp/gbb" "T /tmp/gbt"; do set -- $x; p=${!1}
    echo "r$r $1 pingpong: $(H $p $2 P -o pingpong -b 8 -e 256K -f 8 -w 100 -n 2000)"
    echo "r$r $1 bw      : $(H $p $2 PB -o bw -b 64K -e 16M -f 4 -w 3 -n 20)"
    echo "r$r $1 allreduce: $(H $p $2 P -o allreduce -b 8 -e 16M -f 8 -w 20 -n 200)"
  done
done
date -u
$B/bin/mpicc -O2 -Itests/gpu -Ibenches/micro -o /tmp/dccb benches/micro/dev_call_cost.c -ldl
$T/bin/mpicc -O2 -Itests/gpu -Ibenches/micro -o /tmp/dcct benches/micro/dev_call_cost.c -ldl
for b in 8 32768; do for x in "base /tmp/dccb $B" "new /tmp/dcct $T"; do set -- $x
  echo "== dev_call_cost 2 emulated nodes $b B $1"; timeout 40 $3/bin/mpirun -n 2 $EMU 2 $2 2000 $b 2>&1 | tail -2
done; done
date -u
echo "== host allreduce between 2 emulated nodes, every rank and thread on cores 0-1 (taskset), pieces vs whole"
for busy in 0 1; do
  [ $busy = 1 ] && { taskset -c 0 sh -c 'while :; do :; done' & BP=$!; }
  for r in 1 2; do
    echo "busy=$busy r$r pieces: $(taskset -c 0,1 $T/bin/mpirun -n 2 --oversubscribe $EMU 2 /tmp/gbt -d host -o allreduce -b 4M -e 64M -f 4 -w 2 -n 8 2>&1 | P)"
    echo "busy=$busy r$r whole : $(GPUMPI_COLL_PIECE=0 taskset -c 0,1 $T/bin/mpirun -n 2 --oversubscribe -x GPUMPI_COLL_PIECE $EMU 2 /tmp/gbt -d host -o allreduce -b 4M -e 64M -f 4 -w 2 -n 8 2>&1 | P)"
  done
  [ $busy = 1 ] && kill $BP
done
echo "unbound, all cores: pieces $(timeout 60 $T/bin/mpirun -n 2 $EMU 2 /tmp/gbt -d host -o allreduce -b 4M -e 64M -f 4 -w 2 -n 8 2>&1 | P)"
echo "unbound, all cores: whole  $(GPUMPI_COLL_PIECE=0 timeout 60 $T/bin/mpirun -n 2 -x GPUMPI_COLL_PIECE $EMU 2 /tmp/gbt -d host -o allreduce -b 4M -e 64M -f 4 -w 2 -n 8 2>&1 | P)"
date -u
