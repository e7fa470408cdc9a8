#!/usr/bin/env bash
# Namespace "nodes" for multi-node tests on one machine.
#
#   scripts/netns-nodes.sh [-p PREFIX] up N R      N nodes with R rails each
#   scripts/netns-nodes.sh [-p PREFIX] down        remove everything with PREFIX
#   scripts/netns-nodes.sh [-p PREFIX] exec NODE CMD...   run CMD inside node NODE (0-based)
#   scripts/netns-nodes.sh [-p PREFIX] list        the namespaces with PREFIX
#
# Layout: network namespaces PREFIX-n0 .. PREFIX-n(N-1) are the nodes; PREFIX-sw holds one Linux
# bridge per rail (br0 .. br(R-1)). Node n has R veth interfaces rail0 .. rail(R-1); rail r of
# node n has the address 198.18.r.(n+1)/24 (RFC 2544 benchmarking range, only inside these
# namespaces) and its other end is a port of bridge br(r). Each node also has its own loopback.
# Nothing is created in the root namespace, so deleting the namespaces removes everything.
#
# `up` starts from a clean slate (it removes an earlier set with the same prefix first) and
# removes what it created if any step fails. `down` is idempotent.
#
# Exit codes: 0 done; 1 bad usage or a failed step; 77 network namespaces are not available here
# (not root, no `ip`, or the kernel refuses): the reason is printed, and tests skip on it.
set -euo pipefail

PREFIX=gpumpi
if [[ ${1:-} == -p ]]; then
    PREFIX=${2:?-p needs a prefix}
    shift 2
fi
[[ $PREFIX =~ ^[A-Za-z0-9_]{1,20}$ ]] || { echo "netns-nodes: bad prefix '$PREFIX' (letters, digits, _; at most 20)" >&2; exit 1; }

SKIP=77

usage() {
    sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 1
}

need_netns() {
    if ! command -v ip >/dev/null 2>&1; then
        echo "netns-nodes: the 'ip' tool (iproute2) is not installed" >&2
        exit $SKIP
    fi
    if [[ $(id -u) -ne 0 ]]; then
        echo "netns-nodes: network namespaces need root (running as uid $(id -u))" >&2
        exit $SKIP
    fi
    local probe="${PREFIX}-probe" out
    if ! out=$(ip netns add "$probe" 2>&1); then
        echo "netns-nodes: cannot create a network namespace: $out" >&2
        exit $SKIP
    fi
    if ! out=$(ip -n "$probe" link add probebr type bridge 2>&1); then
        ip netns del "$probe" 2>/dev/null || true
        echo "netns-nodes: cannot create a bridge in a namespace: $out" >&2
        exit $SKIP
    fi
    ip netns del "$probe"
}

ours() {
    ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${PREFIX}-(n[0-9]+|sw|probe)\$" || true
}

down() {
    local ns
    for ns in $(ours); do
        ip netns del "$ns" 2>/dev/null || true
    done
    if [[ -n $(ours) ]]; then
        echo "netns-nodes: could not remove: $(ours | tr '\n' ' ')" >&2
        return 1
    fi
}

up() {
    local n=$1 r=$2
    [[ $n =~ ^[0-9]+$ && $r =~ ^[0-9]+$ && $n -ge 1 && $n -le 250 && $r -ge 1 && $r -le 16 ]] ||
        { echo "netns-nodes: up N R needs 1 <= N <= 250 nodes and 1 <= R <= 16 rails" >&2; exit 1; }
    need_netns
    down
    trap 'echo "netns-nodes: set-up failed; removing what was created" >&2; down' ERR
    local sw="${PREFIX}-sw" i k
    ip netns add "$sw"
    ip -n "$sw" link set lo up
    for ((k = 0; k < r; k++)); do
        ip -n "$sw" link add "br$k" type bridge
        ip -n "$sw" link set "br$k" up
    done
    for ((i = 0; i < n; i++)); do
        local node="${PREFIX}-n$i"
        ip netns add "$node"
        ip -n "$node" link set lo up
        for ((k = 0; k < r; k++)); do
            ip -n "$sw" link add "p${i}r$k" type veth peer name "rail$k" netns "$node"
            ip -n "$sw" link set "p${i}r$k" master "br$k" up
            ip -n "$node" addr add "198.18.$k.$((i + 1))/24" dev "rail$k"
            ip -n "$node" link set "rail$k" up
        done
    done
    trap - ERR
    echo "netns-nodes: $n nodes x $r rails up (prefix $PREFIX; rail r of node i is 198.18.r.(i+1))"
}

case ${1:-} in
    up) [[ $# -eq 3 ]] || usage; up "$2" "$3" ;;
    down) [[ $# -eq 1 ]] || usage; command -v ip >/dev/null 2>&1 || exit 0; down ;;
    exec)
        [[ $# -ge 3 && $2 =~ ^[0-9]+$ ]] || usage
        node="${PREFIX}-n$2"
        shift 2
        exec ip netns exec "$node" "$@"
        ;;
    list) ours ;;
    *) usage ;;
esac
