#!/bin/bash
# s19c: GPUDirect RDMA over the ibverbs double with real device memory (g19), and net_ib's
# dma-buf registration test.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee $OUT/s19c.log) 2>&1
export NCCL_NVLS_ENABLE=0
P=$PWD/build/new
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
mkdir -p /work target/tmp && ln -sfn $PWD /work/main
date -u
cc -shared -fPIC -O1 -o /tmp/libfakeibverbs.so tests/support/fake_ibverbs.c -ldl && $P/bin/mpicc -O2 -Itests/gpu -o /tmp/gpu_net tests/gpu/gpu_net.c -ldl -lm -lpthread || exit 1
GPUMPI_DEBUG=2 GPUMPI_NET=ib GPUMPI_IBVERBS_LIB=/tmp/libfakeibverbs.so FAKEIBV_FABRIC=/dev/shm/fakeibv-gdr timeout 300 $P/bin/mpirun -n 2 --oversubscribe --timeout 240 -x GPUMPI_DEBUG -x GPUMPI_NET -x GPUMPI_IBVERBS_LIB -x FAKEIBV_FABRIC scripts/emulate-nodes.sh 2 /tmp/gpu_net gdr >$OUT/gdr.log 2>&1; echo rc=$?
rm -f /dev/shm/fakeibv-gdr
grep -E "^(PASS|FAIL|SKIP)|GPUDirect RDMA for|fakeibv|rank [0-9]+:" $OUT/gdr.log | head -30
echo "rx $(grep -c 'between the buffers (GPUDirect' $OUT/gdr.log) tx $(grep -c 'from the device buffer (GPUDirect' $OUT/gdr.log)"
grep -i "error\|panick" $OUT/gdr.log | head -10
echo "== net_ib gpu"; timeout 120 build/dev/net_ib gpu_dmabuf engine_moves_device --test-threads=1 2>&1 | tail -8
date -u
