#!/usr/bin/env bash
# Install a project-local CUDA 13.0 compiler from PyPI into build/cuda (for building kernels/
# where no CUDA toolkit is installed, e.g. CI):
#   scripts/install-nvcc.sh [DIR]     (default DIR: <repo>/build/cuda)
# Afterwards build.rs finds DIR/nvidia/cu13/bin/nvcc by itself (or set NVCC / CUDA_HOME).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=${1:-$root/build/cuda}
python3 -m pip install --quiet --disable-pip-version-check --no-deps --upgrade --target "$dir" \
    "nvidia-cuda-nvcc==13.0.*" "nvidia-cuda-crt==13.0.*" "nvidia-nvvm==13.0.*" \
    "nvidia-cuda-runtime==13.0.*" "nvidia-cuda-cccl==13.0.*"
cu="$dir/nvidia/cu13"
[ -x "$cu/bin/nvcc" ] || { echo "install-nvcc.sh: no nvcc under $cu/bin" >&2; exit 1; }
# nvcc looks for cicc under ../nvvm/bin and for ptxas, fatbinary next to itself: the wheels put
# them there. Headers: include/ (runtime, crt, cccl). Check it can build a fatbin.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf 'extern "C" __global__ void k(int *p) { *p = 1; }\n' > "$tmp/t.cu"
"$cu/bin/nvcc" -fatbin -arch=sm_80 -o "$tmp/t.fatbin" "$tmp/t.cu"
echo "nvcc ready: $cu/bin/nvcc ($("$cu/bin/nvcc" --version | tail -1))"
