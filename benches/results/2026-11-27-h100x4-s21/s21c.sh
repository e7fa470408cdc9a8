#!/bin/bash
# s21c: the merged tree (build/m) beside main at session start (build/t) on 4x H100: d18's device point-to-point
# between 2 emulated nodes (benches/devnet_bench.sh), p18's pieces threshold (taskset masks), the wide kernel at
# 1 MiB (blocks, limit) and the device ping-pong 1 B-1 MiB.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee $OUT/s21c.log) 2>&1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
M=$PWD/build/m; S=$PWD/build/msrc; T=$PWD/build/t
date -u; uptime
NCCL_LIB=$(python3 -c "import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=${NCCL_LIB}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
P() { awk '!/^#/ {printf "%s:%s%s ", $1, $10, ($9>0?"!WRONG":"")} END {print ""}'; }
$M/bin/mpicc -std=c99 -O2 -o /tmp/gbm benches/gpumpi-bench.c -ldl -lm
$T/bin/mpicc -std=c99 -O2 -o /tmp/gbt benches/gpumpi-bench.c -ldl -lm
echo "== d18: devnet_bench (base = build/t, new = build/m)"
ROUNDS=1 ITERS=1000 timeout 300 bash $S/benches/devnet_bench.sh $T $M
date -u
echo "== p18: host allreduce between 2 emulated nodes by CPU mask, 4m vs 0 (auto's choice logged)"
for c in 0,1 0-3 0-7 0-63; do
  echo "mask $c auto: $(GPUMPI_DEBUG=1 taskset -c $c $M/bin/mpirun --oversubscribe -n 2 scripts/emulate-nodes.sh 2 /tmp/gbm -d host -o allreduce -b 64M -e 64M -w 1 -n 2 2>&1 | grep -m1 -E "collectives between")"
  for r in 1 2; do for v in 4m 0; do
    echo "mask $c r$r piece=$v: $(GPUMPI_COLL_PIECE=$v taskset -c $c $M/bin/mpirun --oversubscribe -n 2 -x GPUMPI_COLL_PIECE scripts/emulate-nodes.sh 2 /tmp/gbm -d host -o allreduce -b 4M -e 64M -f 4 -w 2 -n 8 2>&1 | P)"
  done; done
done
date -u
echo "== lead: 1 MiB allreduce on the wide kernel (blocks 32/64, limit 1m/2m), 2 and 4 ranks"
for n in 2 4; do for x in "32 1m" "64 1m" "32 2m" "64 2m"; do set -- $x
  echo "n=$n blocks=$1 max=$2: $(GPUMPI_GPU_RESIDENT_BLOCKS=$1 GPUMPI_GPU_RESIDENT_MAX=$2 timeout 40 $M/bin/mpirun -n $n -x GPUMPI_GPU_RESIDENT_BLOCKS -x GPUMPI_GPU_RESIDENT_MAX /tmp/gbm -d cuda -z 1 -o allreduce -b 256K -e 2M -f 2 -w 50 -n 400 2>&1 | P)"
done; done
echo "n=2 nccl: $(timeout 40 $T/bin/mpirun -n 2 /tmp/gbt -B nccl -d cuda -z 1 -o allreduce -b 256K -e 2M -f 2 -w 50 -n 400 2>&1 | P)"
GPUMPI_DEBUG=2 timeout 40 $T/bin/mpirun -n 2 /tmp/gbt -d cuda -z 1 -o allreduce -b 1M -e 1M -w 1 -n 2 2>&1 | grep -i "resident\|wide\|one_shot\|nvlink" | sort | uniq -c | head -12
echo "== lead: device ping-pong one way, 1 B-1 MiB, 2 ranks (issue 16: non-decreasing?)"
for r in 1 2; do echo "r$r: $(timeout 60 $T/bin/mpirun -n 2 /tmp/gbt -d cuda -o pingpong -b 1 -e 1M -f 2 -w 100 -n 1000 2>&1 | P)"; done
echo "== lead: syscalls of rank 0 during 20000 blocking 8 B device allreduces (strace -c)"
which strace perf gdb 2>&1 | head -3
cat > /tmp/st.sh <<'EOS'
#!/bin/bash
if [ "$GPUMPI_RANK" = 0 ]; then exec strace -f -c -o /tmp/strace0.txt "$@"; else exec "$@"; fi
EOS
chmod +x /tmp/st.sh
command -v strace >/dev/null && { timeout 60 $T/bin/mpirun -n 2 /tmp/st.sh /tmp/gbt -d cuda -z 1 -o allreduce -b 8 -e 8 -w 100 -n 20000 -c 0 2>&1 | P; head -25 /tmp/strace0.txt; }
date -u
