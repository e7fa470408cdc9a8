#!/usr/bin/env bash
# One batched GPU session for the issue notes: the GPU test suite, gpumpi beside NCCL (blocking
# and back-to-back), first-call times, device memory per process, the mid sizes of the resident
# kernels (16 KiB - 4 MiB: one-shot, two-shot, the NVLink plans), alltoall at 16 B per peer and
# the P2P-off comparison (collectives and sendrecv), VMM (cuMemCreate) buffers at 512 MiB, and
# Gloo beside both. SKIP_TESTS=1 skips the test suite.
#   OUT=dir benches/gpu_session.sh PREFIX [NP]
# PREFIX: a gpumpi install; NP: ranks (one GPU each). NVLink multicast stays off.
set -u
P=${1:?usage: gpu_session.sh PREFIX [NP]}
NP=${2:-4}
OUT=${OUT:-$(mktemp -d)}
B=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
R=$(cd "$B/.." && pwd)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
exec > >(tee "$OUT/session.log") 2>&1
date -u; nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1
NCCL_LIB=$(python3 -c "import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],'lib'))" 2>/dev/null)
CUDART=$(ls /usr/local/cuda/lib64/libcudart.so* 2>/dev/null | head -1)
export LD_LIBRARY_PATH=${NCCL_LIB}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export GPUMPI_TEST_CUDART=$CUDART
echo "NCCL_LIB=$NCCL_LIB CUDART=$CUDART"; ls "$NCCL_LIB" 2>/dev/null | head -3

if [ "${SKIP_TESTS:-0}" != 1 ]; then
    echo "== GPU test suite (tests/gpu/run.sh)"
    timeout 400 bash "$R/tests/gpu/run.sh" "$P"; echo "gpu tests rc=$?"
fi

"$P/bin/mpicc" -std=c99 -O2 -I "$B" -o /tmp/gb "$B/gpumpi-bench.c" -ldl -lm || exit 1
echo "== first call (MPI_Init, first send/recv, first allreduce on device buffers)"
timeout 60 "$P/bin/mpirun" -n "$NP" /tmp/gb -d cuda -o firstcall
timeout 120 "$P/bin/mpirun" -n "$NP" /tmp/gb -B nccl -o firstcall

echo "== device memory per process (nvidia-smi, sampled every 100 ms), 8 B allreduce loop"
for be in "-d cuda" "-B nccl"; do
    nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits -lms 100 > /tmp/mem.csv &
    sm=$!
    timeout 60 "$P/bin/mpirun" -n "$NP" /tmp/gb $be -o allreduce -b 8 -e 8 -w 100 -n 3000 > /dev/null
    kill $sm; wait $sm 2>/dev/null
    echo "$be: max MiB per process: $(sort -t, -k1,1 -k2,2n /tmp/mem.csv | awk -F, '{m[$1]=$2} END {for (p in m) printf "%s ", m[p]}')"
done

for z in 1 0; do
    echo "== gpumpi beside NCCL, $NP ranks, device buffers, -z $z"
    timeout 900 python3 "$B/compare.py" --backends gpumpi,nccl --gpumpi-prefix "$P" \
        --ops pingpong,sendrecv,allreduce,alltoall -n "$NP" -d cuda -b 8 -e 512M -f 4 \
        -w 5 --iters 20 -z $z --timeout 300 -o /tmp/cmp$z > /tmp/cmp$z.log 2>&1
    echo "compare rc=$?"; cat /tmp/cmp$z/tables.txt 2>/dev/null || tail -30 /tmp/cmp$z.log
done
echo "== mid sizes (16 KiB - 4 MiB), blocking: the wide resident kernel (built-in table, then one_shot,"
echo "   two_shot and the LL algorithms (up to 1 MiB) forced), the NVLink plans (GPUMPI_GPU_RESIDENT_MAX=0), NCCL"
printf 'allreduce resident\nallreduce one_shot\n' > /tmp/res_one.txt
printf 'allreduce resident\nallreduce two_shot\n' > /tmp/res_two.txt
printf 'allreduce resident\nallreduce one_shot_ll\nalltoall resident\nalltoall push_ll\nallgather resident\nallgather push_ll\n' > /tmp/res_ll.txt
for op in allreduce alltoall allgather; do
    for v in "builtin" "one /tmp/res_one.txt" "two /tmp/res_two.txt" "ll /tmp/res_ll.txt" "nvlink"; do
        set -- $v
        [ "$op" != allreduce ] && [ "$1" != builtin ] && [ "$1" != nvlink ] && [ "$1" != ll ] && continue
        echo "-- $op gpumpi $1"
        case $1 in
            builtin) e="GPUMPI_GPU_RESIDENT_MAX=4m" ;;
            nvlink) e="GPUMPI_GPU_RESIDENT_MAX=0" ;;
            *) e="GPUMPI_GPU_RESIDENT_MAX=4m GPUMPI_GPU_RESIDENT_TUNING=$2" ;;
        esac
        timeout 120 env $e "$P/bin/mpirun" -n "$NP" -x GPUMPI_GPU_RESIDENT_MAX -x GPUMPI_GPU_RESIDENT_TUNING \
            /tmp/gb -d cuda -o $op -b 16K -e 4M -f 2 -w 50 -n 500 -z 1
    done
    echo "-- $op NCCL"
    timeout 120 "$P/bin/mpirun" -n "$NP" /tmp/gb -B nccl -o $op -b 16K -e 4M -f 2 -w 50 -n 500 -z 1
done
echo "== alltoall 16 B per peer ($((16 * NP)) B per rank), blocking, gpumpi then NCCL"
for be in "-d cuda" "-B nccl"; do
    timeout 60 "$P/bin/mpirun" -n "$NP" /tmp/gb $be -o alltoall -b $((16 * NP)) -e $((16 * NP)) -w 100 -n 2000 -z 1
done
echo "== sendrecv and pingpong 8 B, blocking, long runs (small device copies go through the resident"
echo "   kernel once its module is loaded in the background, a few ms after the first messages;"
echo "   compare.py's 25 calls per size end before that), gpumpi then NCCL"
for be in "-d cuda" "-B nccl"; do
    timeout 60 "$P/bin/mpirun" -n "$NP" /tmp/gb $be -o sendrecv -b 8 -e 8 -w 200 -n 3000 -z 1
    timeout 60 "$P/bin/mpirun" -n 2 /tmp/gb $be -o pingpong -b 8 -e 8 -w 200 -n 3000
done
echo "== P2P off: gpumpi GPUMPI_CUDA_IPC=0 (pinned shared host memory) beside NCCL_P2P_DISABLE=1, allreduce, blocking"
timeout 300 env GPUMPI_CUDA_IPC=0 "$P/bin/mpirun" -n "$NP" -x GPUMPI_CUDA_IPC /tmp/gb -d cuda -o allreduce -b 8 -e 512M -f 4 -w 2 -n 7 -z 1
timeout 300 env NCCL_P2P_DISABLE=1 "$P/bin/mpirun" -n "$NP" -x NCCL_P2P_DISABLE /tmp/gb -B nccl -o allreduce -b 8 -e 512M -f 4 -w 2 -n 7 -z 1
for op in alltoall allgather bcast reduce; do
    echo "== P2P off, $op: gpumpi GPUMPI_CUDA_IPC=0 then NCCL_P2P_DISABLE=1, blocking"
    timeout 200 env GPUMPI_CUDA_IPC=0 "$P/bin/mpirun" -n "$NP" -x GPUMPI_CUDA_IPC /tmp/gb -d cuda -o $op -b 64 -e 512M -f 8 -w 2 -n 7 -z 1
    timeout 200 env NCCL_P2P_DISABLE=1 "$P/bin/mpirun" -n "$NP" -x NCCL_P2P_DISABLE /tmp/gb -B nccl -o $op -b 64 -e 512M -f 8 -w 2 -n 7 -z 1
done
echo "== P2P off, sendrecv ($NP ranks) and pingpong (2 ranks): gpumpi GPUMPI_CUDA_IPC=0 (pipes through"
echo "   pinned shared host memory) then NCCL_P2P_DISABLE=1, blocking"
for op in "sendrecv $NP" "pingpong 2"; do
    set -- $op
    timeout 200 env GPUMPI_CUDA_IPC=0 "$P/bin/mpirun" -n $2 -x GPUMPI_CUDA_IPC /tmp/gb -d cuda -o $1 -b 64K -e 512M -f 8 -w 2 -n 7 -z 1
    timeout 200 env NCCL_P2P_DISABLE=1 "$P/bin/mpirun" -n $2 -x NCCL_P2P_DISABLE /tmp/gb -B nccl -o $1 -b 64K -e 512M -f 8 -w 2 -n 7 -z 1
done
echo "== VMM (cuMemCreate) buffers, 512 MiB, blocking: gpumpi -d vmm (POSIX fd: mapped by peers),"
echo "   -d vmm-nohandle (not exportable: host-memory pipelines or staged), NCCL -d vmm"
for op in allreduce alltoall sendrecv; do
    for be in "-d vmm" "-d vmm-nohandle" "-B nccl -d vmm"; do
        echo "-- $op $be"
        timeout 120 "$P/bin/mpirun" -n "$NP" /tmp/gb $be -o $op -b 512M -e 512M -w 2 -n 7 -z 1 | grep -E '^ +[0-9]+ '
    done
done
echo "== Gloo (torch.distributed, CUDA tensors; point-to-point staged through host tensors) beside gpumpi and NCCL, blocking"
timeout 600 python3 "$B/compare.py" --backends gpumpi,nccl,gloo --gpumpi-prefix "$P" \
    --ops allreduce,alltoall,sendrecv -n "$NP" -d cuda -b 8 -e 128M -f 16 -w 2 --iters 5 -z 1 \
    --timeout 300 -o /tmp/cmpg > /tmp/cmpg.log 2>&1
echo "compare rc=$?"; cat /tmp/cmpg/tables.txt 2>/dev/null || tail -30 /tmp/cmpg.log
tar czf "$OUT/results.tgz" -C /tmp cmp1 cmp0 cmpg cmp1.log cmp0.log cmpg.log 2>/dev/null
date -u
