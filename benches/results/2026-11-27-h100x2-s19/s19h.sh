#!/bin/bash
# s19h: pieces from 1 MiB (512 KiB floor, build/dev) against the 1 MiB floor (build/new) for
# allreduce between 2 emulated nodes, host and device, interleaved, beside NCCL's socket transport.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee $OUT/s19h.log) 2>&1
export NCCL_NVLS_ENABLE=0
NCCL_LIB=$(python3 -c "import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=${NCCL_LIB}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export NCCL_IB_DISABLE=1
date -u
for v in new dev; do build/$v/bin/mpicc -std=c99 -O2 -o /tmp/gb-$v benches/gpumpi-bench.c -ldl -lm; done
cat > /tmp/gpr.sh <<'SH'
#!/bin/sh
CUDA_VISIBLE_DEVICES=$((GPUMPI_RANK % 2)) exec "$@"
SH
chmod +x /tmp/gpr.sh
R() { local v=$1; shift; timeout 100 build/$v/bin/mpirun -n 2 scripts/emulate-nodes.sh 2 /tmp/gpr.sh /tmp/gb-$v "$@" 2>&1 | grep -v '^#' | awk '{printf "%s:%s/%s%s ", $1, $6, $10, ($9>0?"!WRONG":"")} END {print ""}'; }
for r in 1 2 3; do
  for v in new dev; do
    echo "dev $v: $(R $v -d cuda -z 1 -o allreduce -b 512K -e 4M -f 2 -w 5 -n 30)"
    echo "host $v: $(R $v -d host -o allreduce -b 512K -e 4M -f 2 -w 5 -n 30)"
  done
  echo "dev nccl: $(NCCL_NET=Socket NCCL_SOCKET_IFNAME=lo R new -B nccl -d cuda -z 1 -o allreduce -b 512K -e 4M -f 2 -w 5 -n 30)"
done
date -u
