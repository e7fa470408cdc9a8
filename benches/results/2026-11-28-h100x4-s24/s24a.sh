#!/bin/bash
# s24a: dx25 (device collective steps re-applied; the ib double prints why a device transfer
# fails) on 4x H100, install build/dx25, sources build/dx25src: the full gpu_net with device
# steps over the ib double at 4 ranks on 2 emulated nodes at three maximum sizes (which fail,
# and the double's reason), the failing size again with GPUMPI_DEBUG=2 (the last calls), and
# gpu_net with PXN on over TCP on 2 rails (counters).
set -u
R=$(cd "$(dirname "$0")/../../.." && pwd); cd $R
for f in build/pack/*.txz; do tar xJf $f -C build; done
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
F=$R/build/${BUILD:-dx25}; SRC=$R/build/${BUILD:-dx25}src; B=/tmp/s24a; mkdir -p $B
{ nvidia-smi -L | head -1; date -u; uptime; } | tee $OUT/s24a.log
$F/bin/mpicc -O2 -I$SRC/tests/gpu -o $B/gpu_net $SRC/tests/gpu/gpu_net.c -ldl -lm -lpthread || echo "mpicc failed" | tee -a $OUT/s24a.log
cc -shared -fPIC -O1 -Wall -o $B/libfakeibverbs.so $SRC/tests/support/fake_ibverbs.c -ldl || echo "double failed" | tee -a $OUT/s24a.log
emu=$SRC/scripts/emulate-nodes.sh
ibvars="-x GPUMPI_COLL_DEVICE -x GPUMPI_NET -x GPUMPI_IBVERBS_LIB -x FAKEIBV_FABRIC -x GPUMPI_DEBUG"
for sz in ${SIZES:-4194316 2097152 1048577}; do
  fab=/dev/shm/s24a-$sz; rm -f $fab
  echo "== gpu_net $sz device steps over ib $(date -u +%T)" | tee -a $OUT/s24a.log
  GPUMPI_DEBUG=1 GPUMPI_COLL_DEVICE=1 GPUMPI_NET=ib GPUMPI_IBVERBS_LIB=$B/libfakeibverbs.so FAKEIBV_FABRIC=$fab \
    timeout 100 $F/bin/mpirun -n 4 --oversubscribe --timeout 90 $ibvars $emu 2 $B/gpu_net $sz > $OUT/diag-$sz.log 2>&1
  echo "rc=$?" | tee -a $OUT/s24a.log; rm -f $fab
  grep -E "^PASS|^FAIL|fakeibv|status|rror" $OUT/diag-$sz.log | grep -v " INFO " | head -15 | tee -a $OUT/s24a.log
done
sz=${DEBUG_SIZE:-4194316}; fab=/dev/shm/s24a-dbg; rm -f $fab
echo "== gpu_net $sz device steps over ib, GPUMPI_DEBUG=2 $(date -u +%T)" | tee -a $OUT/s24a.log
GPUMPI_DEBUG=2 GPUMPI_COLL_DEVICE=1 GPUMPI_NET=ib GPUMPI_IBVERBS_LIB=$B/libfakeibverbs.so FAKEIBV_FABRIC=$fab \
  timeout 100 $F/bin/mpirun -n 4 --oversubscribe --timeout 90 $ibvars $emu 2 $B/gpu_net $sz > $OUT/diag-dbg.log 2>&1
echo "rc=$?" | tee -a $OUT/s24a.log; rm -f $fab
grep -E "^PASS|^FAIL|fakeibv" $OUT/diag-dbg.log | head -8 | tee -a $OUT/s24a.log
echo "== gpu_net 4194316 PXN on over TCP, 2 rails $(date -u +%T)" | tee -a $OUT/s24a.log
GPUMPI_PXN=1 GPUMPI_DEBUG=1 timeout 100 $F/bin/mpirun -n 4 --oversubscribe --timeout 90 -x GPUMPI_PXN -x GPUMPI_DEBUG \
  $emu --rails 2 2 $B/gpu_net 4194316 > $OUT/pxn-tcp.log 2>&1
echo "rc=$?" | tee -a $OUT/s24a.log
grep -E "^PASS|^FAIL|net: rank|pxn: rank" $OUT/pxn-tcp.log | sed -e 's/^.*\(net: rank\|pxn: rank\)/\1/' | head -12 | tee -a $OUT/s24a.log
date -u | tee -a $OUT/s24a.log
