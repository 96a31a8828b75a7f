#!/usr/bin/env bash
# A two-node test cluster on one machine (docs/distributed.md, "The netsim cluster").
#
#   scripts/netsim.sh up [--rate 1gbit|10gbit] [--slots S]   make (or re-make) it
#   scripts/netsim.sh down                                   remove it
#   scripts/netsim.sh status                                 say whether it is up, and how
#   scripts/netsim.sh mpirun-prefix | mpirun-args            print mpirun.prefix / .args on a line
#
# Two network namespaces, cfn0 and cfn1 (the "nodes"; $CFORMERS_NETSIM_NAME, default cfn,
# names them, so that a test's cluster leaves another one alone), joined by a veth pair
# named cfv at both ends, 10.218.0.1 and 10.218.0.2 (/24, addresses that exist only inside
# the two namespaces: nothing is routed anywhere else), each end shaped to the rate with a
# token bucket (tc tbf). `up` writes into $CFORMERS_NETSIM_DIR (default /tmp/cformers-netsim):
#   hosts      the nodes' addresses and names, /etc/hosts style
#   hostfile   Open MPI's: "cfn0 slots=S" and "cfn1 slots=S" (S default 1)
#   agent      Open MPI's launch agent (plm_rsh_agent): `agent HOST COMMAND...` runs
#              COMMAND in HOST's namespace instead of over ssh
#   mpirun.args    the flags mpirun needs, one a line
#   mpirun.prefix  what runs mpirun inside cfn0, where the link is (ip netns exec cfn0)
# `cformers launch --netsim` puts it all together; by hand:
#   $(scripts/netsim.sh mpirun-prefix) mpirun $(scripts/netsim.sh mpirun-args) -n 2 PROGRAM
# that is: ip netns exec cfn0 mpirun --hostfile /tmp/cformers-netsim/hostfile ... -n 2 PROGRAM
# Ranks on one node share memory (vader); ranks on different nodes talk TCP over cfv.
# The nodes share this machine's cores, so ranks are not bound and yield while they wait
# (a rank spinning in MPI would starve the kernel's side of the link).
# Needs root (CAP_NET_ADMIN); exits 77 where namespaces cannot be made.
set -euo pipefail

dir="${CFORMERS_NETSIM_DIR:-/tmp/cformers-netsim}"
name="${CFORMERS_NETSIM_NAME:-cfn}"
nodes=("${name}0" "${name}1")
addrs=(10.218.0.1 10.218.0.2)
subnet=10.218.0.0/24
link=cfv

usage() {
    echo "usage: scripts/netsim.sh up [--rate 1gbit|10gbit] [--slots S] | down | status | mpirun-prefix | mpirun-args" >&2
    exit 2
}

down() {
    for ns in "${nodes[@]}"; do
        if ip netns list 2>/dev/null | grep -qw "$ns"; then ip netns del "$ns"; fi
    done
    rm -f "$dir"/{hosts,hostfile,agent,mpirun.args,mpirun.prefix,rate}
    rmdir "$dir" 2>/dev/null || true
}

# Burst of the token bucket: a millisecond at the rate, and no less than 64 KiB (a veth
# hands tbf whole 64 KiB GSO packets).
burst_for() {
    case "$1" in
    1gbit) echo 128kb ;;
    10gbit) echo 1250kb ;;
    *) echo "netsim: --rate must be 1gbit or 10gbit, not '$1'" >&2; exit 2 ;;
    esac
}

write_files() {
    local slots="$1" rate="$2"
    mkdir -p "$dir"
    : >"$dir/hosts"
    : >"$dir/hostfile"
    for i in 0 1; do
        echo "${addrs[$i]} ${nodes[$i]}" >>"$dir/hosts"
        echo "${nodes[$i]} slots=$slots" >>"$dir/hostfile"
    done
    cat >"$dir/agent" <<EOF
#!/bin/sh
# Open MPI launch agent for the netsim nodes: \`agent [ssh options] HOST COMMAND...\`
# runs COMMAND (one shell line, as ssh would) in HOST's network namespace, under HOST's
# name as its host name (a UTS namespace of its own), as on a machine of that name.
while [ \$# -gt 0 ] && [ "\${1#-}" != "\$1" ]; do shift; done
case "\$1" in
${nodes[0]}|${addrs[0]}) ns=${nodes[0]} ;;
${nodes[1]}|${addrs[1]}) ns=${nodes[1]} ;;
*) echo "netsim agent: unknown host '\$1'" >&2; exit 255 ;;
esac
shift
exec ip netns exec "\$ns" unshare --uts sh -c "hostname \$ns && \$*"
EOF
    chmod +x "$dir/agent"
    printf '%s\n' --hostfile "$dir/hostfile" --mca plm_rsh_agent "$dir/agent" --mca btl tcp,self,vader \
        --mca btl_tcp_if_include "$subnet" --mca oob_tcp_if_include "$subnet" \
        --mca mpi_yield_when_idle 1 --bind-to none >"$dir/mpirun.args"
    printf '%s\n' ip netns exec "${nodes[0]}" >"$dir/mpirun.prefix"
    echo "$rate" >"$dir/rate"
    echo "netsim: up at $rate: ${nodes[0]} ${addrs[0]} <-> ${nodes[1]} ${addrs[1]} over $link; files in $dir"
}

up() {
    local rate=1gbit slots=1
    while [ $# -gt 0 ]; do
        case "$1" in
        --rate) rate="${2:-}"; shift 2 || usage ;;
        --slots) slots="${2:-}"; shift 2 || usage ;;
        *) usage ;;
        esac
    done
    [[ "$slots" =~ ^[1-9][0-9]*$ ]] || { echo "netsim: --slots must be a positive count" >&2; exit 2; }
    local burst
    burst="$(burst_for "$rate")"
    down
    if ! ip netns add "${nodes[0]}" 2>/dev/null; then
        echo "netsim: cannot make network namespaces here (needs root / CAP_NET_ADMIN)" >&2
        exit 77
    fi
    trap 'echo "netsim: setting up failed, removing what was made" >&2; down' ERR
    ip netns add "${nodes[1]}"
    ip link add "${link}0" netns "${nodes[0]}" type veth peer name "${link}1" netns "${nodes[1]}"
    for i in 0 1; do
        local ns="${nodes[$i]}"
        ip -n "$ns" link set "${link}$i" name "$link"
        ip -n "$ns" addr add "${addrs[$i]}/24" dev "$link"
        ip -n "$ns" link set lo up
        ip -n "$ns" link set "$link" mtu 9000 up # jumbo frames, as 10 Gbit/s clusters use
        # A link of known bandwidth: no return to slow start after each idle pause.
        ip netns exec "$ns" sysctl -qw net.ipv4.tcp_slow_start_after_idle=0
        ip netns exec "$ns" tc qdisc add dev "$link" root tbf rate "$rate" burst "$burst" latency 20ms
    done
    write_files "$slots" "$rate"
    trap - ERR
}

status() {
    local ns
    for ns in "${nodes[@]}"; do
        if ! ip netns list 2>/dev/null | grep -qw "$ns"; then
            echo "netsim: down (no namespace $ns)"
            return 1
        fi
    done
    echo "netsim: up, files in $dir"
    for ns in "${nodes[@]}"; do
        echo "$ns: $(ip -n "$ns" -br addr show dev "$link" | tr -s ' ')"
        echo "$ns: $(ip netns exec "$ns" tc qdisc show dev "$link")"
    done
}

case "${1:-}" in
up) shift; up "$@" ;;
down) down; echo "netsim: down" ;;
status) status ;;
mpirun-prefix | mpirun-args)
    file="$dir/mpirun.${1#mpirun-}"
    [ -r "$file" ] || { echo "netsim: no $file: run scripts/netsim.sh up first" >&2; exit 1; }
    echo $(cat "$file") # the words on one line, for $(...) or .split()
    ;;
*) usage ;;
esac
