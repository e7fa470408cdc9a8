#!/bin/sh
# Run one rank of a job as if the job's ranks were spread over K nodes, all on this host:
#
#   mpirun -n 4 scripts/emulate-nodes.sh 2 ./prog args...   # ranks 0,1 on "node0"; 2,3 on "node1"
#
#   mpirun -n 4 scripts/emulate-nodes.sh --netns PREFIX 2 ./prog   # each "node" in namespace
#                                                                   # PREFIX-n<i> (netns-nodes.sh up)
#
#   mpirun -n 4 scripts/emulate-nodes.sh --rails 2 2 ./prog   # local rank i on rail i mod 2
#                                                               # (GPUMPI_RAIL, unless set)
#
# Ranks are placed in blocks (rank * K / size; round-robin where the launcher exports no size)
# through GPUMPI_NODE_ID (and NCCL_HOSTID, unless set, for NCCL programs), so ranks of different
# "nodes" talk through the network transport instead of shared memory. Without --netns the
# network stays on loopback (GPUMPI_NET_IFNAME defaults to =lo here); with it, each rank runs in
# its node's namespace (made by scripts/netns-nodes.sh -p PREFIX up K R, root needed) and the
# network backend picks the node's rails (198.18.r.(i+1)) by its default interface selection.
# The launcher, its Unix socket and /dev/shm are shared by all namespaces. The rank and size come from our mpirun
# (GPUMPI_RANK/GPUMPI_SIZE), PMIx launchers (PMIX_RANK, OMPI_COMM_WORLD_SIZE) or PMI-1
# (PMI_RANK/PMI_SIZE).
set -eu
netns=
rails=
while :; do
    case "${1:-}" in
    --netns) netns=${2:?--netns needs a prefix}; shift 2 ;;
    --rails) rails=${2:?--rails needs a number}; shift 2 ;;
    *) break ;;
    esac
done
if [ $# -lt 2 ]; then
    echo "usage: $0 [--netns PREFIX] [--rails R] NODES PROGRAM [ARGS...]" >&2
    exit 2
fi
k=$1
shift
rank=${GPUMPI_RANK:-${PMIX_RANK:-${PMI_RANK:-${OMPI_COMM_WORLD_RANK:-}}}}
size=${GPUMPI_SIZE:-${OMPI_COMM_WORLD_SIZE:-${PMI_SIZE:-}}}
if [ -z "$rank" ]; then
    echo "$0: no rank in the environment (not started by a launcher?)" >&2
    exit 2
fi
if [ -n "$size" ]; then
    node=$((rank * k / size))
else
    node=$((rank % k)) # a launcher that exports no job size: round-robin
fi
GPUMPI_NODE_ID=emulated-node$node
# NCCL's own node emulation, so NCCL runs beside gpumpi see the same nodes.
NCCL_HOSTID=${NCCL_HOSTID:-$GPUMPI_NODE_ID}
export GPUMPI_NODE_ID NCCL_HOSTID
if [ -n "$rails" ] && [ -z "${GPUMPI_RAIL:-}" ]; then
    if [ -n "$size" ]; then
        first=$(((node * size + k - 1) / k)) # the node's lowest rank (blocks)
        local_rank=$((rank - first))
    else
        local_rank=$((rank / k))
    fi
    GPUMPI_RAIL=$((local_rank % rails))
    export GPUMPI_RAIL
fi
if [ -n "$netns" ]; then
    exec ip netns exec "$netns-n$node" "$@"
fi
GPUMPI_NET_IFNAME=${GPUMPI_NET_IFNAME:-=lo}
export GPUMPI_NET_IFNAME
exec "$@"
