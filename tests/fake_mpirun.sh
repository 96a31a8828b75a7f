#!/usr/bin/env bash
# A cluster on one machine, for tests of `cformers launch --hostfile`: runs the real mpirun
# with every host of the --hostfile it is given replaced by localhost (their slots summed),
# so a hostfile naming hosts that do not exist runs all its ranks here, unbound (the launcher
# bound them for hosts of their own).
args=()
while [ $# -gt 0 ]; do
    if [ "$1" = --hostfile ]; then
        slots=$(awk -F'slots=' 'NF > 1 { s += $2 + 0 } END { print s }' "$2")
        local_hosts=$(mktemp /tmp/cformers-fake-hosts.XXXXXX)
        echo "localhost slots=${slots:-1}" >"$local_hosts"
        args+=(--hostfile "$local_hosts" --oversubscribe --bind-to none)
        shift 2
    elif [ "$1" = --map-by ] || [ "$1" = --bind-to ]; then
        shift 2
    else
        args+=("$1")
        shift
    fi
done
mpirun "${args[@]}"
rc=$?
[ -n "${local_hosts:-}" ] && rm -f "$local_hosts"
exit $rc
