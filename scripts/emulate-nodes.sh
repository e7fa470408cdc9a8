#!/bin/sh
# Run one rank of a job as if the job's ranks were spread over K nodes, all on this host:
#
#   mpirun -n 4 scripts/emulate-nodes.sh 2 ./prog args...   # ranks 0,1 on "node0"; 2,3 on "node1"
#
# Ranks are placed in blocks (rank * K / size) through GPUMPI_NODE_ID, so ranks of different
# "nodes" talk through the network transport instead of shared memory. The network stays on
# loopback (GPUMPI_NET_IFNAME defaults to =lo here). The rank and size come from our mpirun
# (GPUMPI_RANK/GPUMPI_SIZE), PMIx launchers (PMIX_RANK, OMPI_COMM_WORLD_SIZE) or PMI-1
# (PMI_RANK/PMI_SIZE).
set -eu
if [ $# -lt 2 ]; then
    echo "usage: $0 NODES PROGRAM [ARGS...]" >&2
    exit 2
fi
k=$1
shift
rank=${GPUMPI_RANK:-${PMIX_RANK:-${PMI_RANK:-${OMPI_COMM_WORLD_RANK:-}}}}
size=${GPUMPI_SIZE:-${OMPI_COMM_WORLD_SIZE:-${PMI_SIZE:-}}}
if [ -z "$rank" ] || [ -z "$size" ]; then
    echo "$0: no rank/size in the environment (not started by a launcher?)" >&2
    exit 2
fi
GPUMPI_NODE_ID=emulated-node$((rank * k / size))
GPUMPI_NET_IFNAME=${GPUMPI_NET_IFNAME:-=lo}
export GPUMPI_NODE_ID GPUMPI_NET_IFNAME
exec "$@"
