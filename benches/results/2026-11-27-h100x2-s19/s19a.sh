#!/bin/bash
# s19a: where large collectives across 2 emulated nodes lose time (issue 18): host sendrecv,
# windowed bw and allreduce per algorithm; device allreduce/alltoall with a larger staging pool.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee $OUT/s19a.log) 2>&1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
N=$PWD/build/new
nvidia-smi -L; date -u; nproc
NCCL_LIB=$(python3 -c "import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=${NCCL_LIB}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export NCCL_IB_DISABLE=1
$N/bin/mpicc -std=c99 -O2 -o /tmp/gb benches/gpumpi-bench.c -ldl -lm
cat > /tmp/gpr.sh <<'SH'
#!/bin/sh
CUDA_VISIBLE_DEVICES=$((GPUMPI_RANK % 2)) exec "$@"
SH
chmod +x /tmp/gpr.sh
EMU=scripts/emulate-nodes.sh
R() { timeout 120 $N/bin/mpirun -n 2 $EMU 2 /tmp/gpr.sh /tmp/gb "$@" 2>&1 | grep -v '^#' | awk '{printf "%s:%s/%s ", $1, $6, $10} END {print ""}'; }
echo "== host (size:mean/median us)"
for op in bw sendrecv; do echo "$op: $(R -d host -o $op -b 1M -e 64M -f 4 -w 3 -n 20)"; done
for a in recursive_doubling ring rabenseifner; do echo "allreduce $a: $(GPUMPI_ALLREDUCE_ALGORITHM=$a R -d host -o allreduce -b 1M -e 64M -f 4 -w 3 -n 20)"; done
echo "== device"
for pool in 256m 2g; do
  echo "allreduce pool=$pool: $(GPUMPI_CUDA_STAGING_POOL=$pool R -d cuda -z 1 -o allreduce -b 16M -e 128M -f 8 -w 3 -n 10)"
  echo "alltoall pool=$pool: $(GPUMPI_CUDA_STAGING_POOL=$pool R -d cuda -o alltoall -b 16M -e 128M -f 8 -w 3 -n 10)"
done
echo "allreduce ring pool=2g: $(GPUMPI_ALLREDUCE_ALGORITHM=ring GPUMPI_CUDA_STAGING_POOL=2g R -d cuda -z 1 -o allreduce -b 16M -e 128M -f 8 -w 3 -n 10)"
echo "nccl allreduce: $(NCCL_NET=Socket NCCL_SOCKET_IFNAME=lo R -B nccl -z 1 -d cuda -z 1 -o allreduce -b 16M -e 128M -f 8 -w 3 -n 10)"
echo "nccl alltoall: $(NCCL_NET=Socket NCCL_SOCKET_IFNAME=lo R -B nccl -z 1 -d cuda -o alltoall -b 16M -e 128M -f 8 -w 3 -n 10)"
GPUMPI_DEBUG=2 timeout 60 $N/bin/mpirun -n 2 $EMU 2 /tmp/gpr.sh /tmp/gb -d cuda -o allreduce -b 128M -e 128M -w 0 -n 1 -c 0 2>&1 | grep -iv "frame" | grep -i "stag\|pool\|pinned\|bulk\|allreduce" | head -20
date -u
