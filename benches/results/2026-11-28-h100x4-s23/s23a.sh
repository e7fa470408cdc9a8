#!/bin/bash
# s23a: round 1 part 1 on 4x H100: st24's script (direct two-shot stream allreduce) against its install,
# main's install (3defbc3) as base.
set -u
R=$(cd "$(dirname "$0")/../../.." && pwd); cd $R
bash benches/results/2026-11-28-h100x4-s23/unpack.sh >/dev/null
{ nvidia-smi -L | head -4; date -u; uptime; } 
OUT=${OUT:-/tmp/out} LIMIT=${LIMIT:-230} bash benches/results/2026-11-28-h100x4-s23/round.sh "$@"
