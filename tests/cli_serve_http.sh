#!/usr/bin/env bash
# `cformers serve`'s HTTP layer (issue 42): malformed requests over raw sockets are each
# answered with OpenAI's error JSON and counted in /metrics (tests/serve_http_cases.py);
# 600 idle and 50 trickling connections do not lock a new client out, and the descriptors
# come back; one connection past --max-connections gets 503 JSON; SIGTERM stops accepting,
# lets requests under way finish (or cancels them with --shutdown-timeout 0) and exits 0.
source "$(dirname "$0")/lib_cli.sh"
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
require_asset stories260K/stories260K.bin
unset CFORMERS_API_KEY
ulimit -n 4096 2>/dev/null || { [ "$(ulimit -n)" -ge 1400 ] || { echo "SKIP: ulimit -n $(ulimit -n) < 1400"; exit 77; }; }

check "bad --max-header-bytes" 2 "$bin" serve --model x --max-header-bytes 10
check "bad --header-timeout" 2 "$bin" serve --model x --header-timeout 0
check "help lists the limits" 0 "$bin" serve --help
stdout_has "help" "--max-connections"
stories260k_ckpt "$tmp/s.ckpt"

servers=()
trap 'for p in "${servers[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$tmp"' EXIT
start_server() { # start_server LOG ARGS...: sets url and pid
    local log="$1"; shift
    "$bin" serve --model "$tmp/s.ckpt" --port 0 --threads 1 "$@" >"$log" 2>&1 &
    pid=$!
    servers+=($pid)
    server_url "$log" "cli serve http"
}
py() { python3 "$src/tests/$1" "${@:2}" >"$tmp/py.out" 2>&1 || fail_because "$1 ${2-}"; cat "$tmp/py.out"; }

start_server "$tmp/a.out" --max-body-bytes 4K --header-timeout 2 --idle-timeout 2
py serve_http_cases.py "${url#http://}"

start_server "$tmp/b.out" --header-timeout 3 --idle-timeout 4
py serve_http_load.py slowloris "${url#http://}" "$pid" 4

start_server "$tmp/c.out" --max-connections 8
py serve_http_load.py cap "${url#http://}" 8

for how in finish cancel; do
    timeout_flag=30; [ $how = cancel ] && timeout_flag=0
    start_server "$tmp/$how.out" --max-batch 1 --shutdown-timeout $timeout_flag
    py serve_http_load.py sigterm "${url#http://}" "$pid" $how
    wait "$pid"; rc=$?
    [ $rc = 0 ] || fail_because "SIGTERM ($how): exit $rc"
    grep -q "serve: stopping" "$tmp/$how.out" || fail_because "SIGTERM ($how): no stopping line"
done
finish "cli serve http"
