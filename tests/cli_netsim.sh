#!/usr/bin/env bash
# scripts/netsim.sh: a two-node cluster of its own (namespaces named for this test, so a
# cluster someone else is using stays up) that `cformers launch --netsim` runs 2 ranks on,
# one per node, over a link shaped to 1 Gbit/s; `down` removes it. Skipped where network
# namespaces cannot be made (not root, no CAP_NET_ADMIN) or mpirun is missing.
. "$(dirname "$0")/lib_cli.sh"
netsim="$src/scripts/netsim.sh"
export CFORMERS_NETSIM_DIR="$tmp/netsim" CFORMERS_NETSIM_NAME="cft$$"
command -v mpirun >/dev/null || { echo "SKIP: no mpirun"; exit 77; }
bash "$netsim" up --rate 1gbit >"$tmp/up" 2>&1
case $? in
0) trap 'bash "$netsim" down >/dev/null 2>&1; rm -rf "$tmp"' EXIT ;;
77) echo "SKIP: $(cat "$tmp/up")"; exit 77 ;;
*) fail_because "netsim up: $(cat "$tmp/up")"; finish "cli netsim" ;;
esac
check "status" 0 bash "$netsim" status
stdout_has "status shows the shaping" "rate 1Gbit"

check "launch --netsim" 0 "$bin" launch -n 2 --netsim -- config list
[ "$(grep -c '^llama_15m ' "$tmp/out")" = 2 ] || fail_because "launch --netsim: not two ranks' output: $(cat "$tmp/out")"
stderr_has "launch --netsim runs mpirun in the first node" "ip netns exec ${CFORMERS_NETSIM_NAME}0 mpirun -n 2"

# The probe: rank 0 on one node, rank 1 on the other, no faster than the link allows.
probe="$(dirname "$bin")/bench/mpi_bw"
if [ -x "$probe" ]; then
    check "mpi_bw over the link" 0 env ASAN_OPTIONS=detect_leaks=0 $(bash "$netsim" mpirun-prefix) \
        mpirun $(bash "$netsim" mpirun-args) --allow-run-as-root -n 2 "$probe" --reps 3
    stdout_has "ranks on two nodes" "(${CFORMERS_NETSIM_NAME}0) -> rank 1 (${CFORMERS_NETSIM_NAME}1)"
    gbits=$(sed -n 's/.* \([0-9.]*\) Gbit\/s.*/\1/p' "$tmp/out")
    awk -v g="$gbits" 'BEGIN { exit !(g > 0 && g < 1.2) }' || fail_because "1 Gbit/s link measured '$gbits' Gbit/s"
fi

check "down" 0 bash "$netsim" down
check "status when down" 1 bash "$netsim" status
trap 'rm -rf "$tmp"' EXIT
finish "cli netsim"
