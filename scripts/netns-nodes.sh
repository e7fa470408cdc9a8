#!/usr/bin/env bash
# Namespace "nodes" for multi-node tests on one machine.
#
#   scripts/netns-nodes.sh [-p PREFIX] up N R [--spine RATE] [--rail RATE]
#                                                  N nodes with R rails each
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
# A rail-optimized fabric (--spine RATE, e.g. 1gbit): namespace PREFIX-spine joins every rail's
# bridge (198.18.r.254) and routes between rails, its egress to each rail shaped with tc tbf to
# RATE (an oversubscribed spine); each node routes by source address: a packet from rail r's
# address leaves through rail r, to rail r's subnet directly and to any other rail through the
# spine. So a message sent from rail a to rail b != a crosses the spine, as between leaf
# switches. --rail RATE shapes each rail veth (both directions) to RATE too, so that the spine
# is a known fraction of a rail. `tc` (iproute2) is needed for the shaping.
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
    sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2
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
    ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${PREFIX}-(n[0-9]+|sw|spine|probe)\$" || true
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

# tbf at `rate` on the egress of interface `dev` in namespace `ns`.
shape() {
    local ns=$1 dev=$2 rate=$3
    ip netns exec "$ns" tc qdisc replace dev "$dev" root tbf rate "$rate" burst 256kb latency 100ms
}

up() {
    local n=$1 r=$2 spine=${3:-} rail=${4:-}
    if [[ -n $spine$rail ]] && ! command -v tc >/dev/null 2>&1; then
        echo "netns-nodes: the 'tc' tool (iproute2) is needed for --spine/--rail" >&2
        exit $SKIP
    fi
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
            if [[ -n $rail ]]; then
                shape "$node" "rail$k" "$rail"
                shape "$sw" "p${i}r$k" "$rail"
            fi
            if [[ -n $spine ]]; then
                # Source routing: rail k's address leaves through rail k, via the spine to
                # other rails.
                ip -n "$node" rule add from "198.18.$k.$((i + 1))" table $((100 + k)) pref $((100 + k))
                ip -n "$node" route add "198.18.$k.0/24" dev "rail$k" table $((100 + k))
                ip -n "$node" route add default via "198.18.$k.254" dev "rail$k" table $((100 + k))
            fi
        done
        if [[ $r -gt 1 ]]; then
            # A connection between rails leaves through one rail and is answered through the
            # other (or through the spine): no reverse-path filter.
            ip netns exec "$node" sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0
            for ((k = 0; k < r; k++)); do
                ip netns exec "$node" sysctl -qw "net.ipv4.conf.rail$k.rp_filter=0"
            done
        fi
    done
    if [[ -n $spine ]]; then
        local sp="${PREFIX}-spine"
        ip netns add "$sp"
        ip -n "$sp" link set lo up
        ip netns exec "$sp" sysctl -qw net.ipv4.ip_forward=1
        for ((k = 0; k < r; k++)); do
            ip -n "$sw" link add "sp$k" type veth peer name "s$k" netns "$sp"
            ip -n "$sw" link set "sp$k" master "br$k" up
            ip -n "$sp" addr add "198.18.$k.254/24" dev "s$k"
            ip -n "$sp" link set "s$k" up
            shape "$sp" "s$k" "$spine"
        done
    fi
    trap - ERR
    echo "netns-nodes: $n nodes x $r rails up (prefix $PREFIX; rail r of node i is 198.18.r.(i+1))${spine:+; spine at $spine}${rail:+; rails at $rail}"
}

case ${1:-} in
    up)
        [[ $# -ge 3 ]] || usage
        n=$2 r=$3 spine= rail=
        shift 3
        while [[ $# -gt 0 ]]; do
            case $1 in
                --spine) spine=${2:?--spine needs a rate}; shift 2 ;;
                --rail) rail=${2:?--rail needs a rate}; shift 2 ;;
                *) usage ;;
            esac
        done
        up "$n" "$r" "$spine" "$rail"
        ;;
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
