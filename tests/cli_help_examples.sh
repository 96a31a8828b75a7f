#!/usr/bin/env bash
# Every example a `cformers COMMAND --help` shows runs as shown: each command that
# `cformers --help` lists has an "examples" section (the lines after it up to a blank line,
# `\` continuations joined), and each example exits 0 when run from a copy of the
# repository root (README.md, docs/, configs/, tests/fixtures/ linked in), in this order,
# later examples using what earlier ones made: tokenizer, preprocess, train, convert, then
# the rest. The servers' (serve, dashboard) are started and stopped once they print their
# address (their --port becomes 0, a free one); launch's real job runs when mpirun is there.
. "$(dirname "$0")/lib_cli.sh"
src=$(cd "$src" && pwd)
export CFORMERS_THREADS=1 OMPI_MCA_rmaps_base_oversubscribe=1
run="$tmp/repo"
mkdir -p "$run/tests"
for f in README.md docs configs; do ln -s "$src/$f" "$run/$f"; done
ln -s "$src/tests/fixtures" "$run/tests/fixtures"

listed=$("$bin" --help | sed -n '/^commands:/,/^$/s/^  \([a-z]*\) .*/\1/p')
order="tokenizer preprocess train convert"
for c in $listed; do case " $order " in *" $c "*) ;; *) order="$order $c" ;; esac; done
n=0
for c in $order; do
    "$bin" "$c" --help >"$tmp/help" 2>&1 || fail_because "$c --help exits $?"
    sed -n '/^examples/,/^$/p' "$tmp/help" | sed '1d;/^$/d' |
        awk '{ if (sub(/\\$/, "")) { acc = acc $0 } else { print acc $0; acc = "" } }' |
        sed -e 's/^ *//' -e 's/  */ /g' >"$tmp/examples"
    [ -s "$tmp/examples" ] || { fail_because "$c --help shows no examples"; continue; }
    while IFS= read -r line; do
        n=$((n + 1))
        case "$line" in "cformers $c"*) ;; *) fail_because "$c --help: an example of another command: $line"; continue ;; esac
        cmd="\"$bin\"${line#cformers}"
        case "$c" in
        serve|dashboard)
            cmd=$(sed 's/--port [0-9]*/--port 0/' <<<"$cmd")
            (cd "$run" && eval "$cmd") >"$tmp/server.log" 2>&1 </dev/null &
            server=$!
            server_url "$tmp/server.log" "cli help examples"
            kill "$server"; wait "$server" 2>/dev/null
            echo "ran (started, stopped): $line"
            continue ;;
        launch)
            case "$line" in *--dry-run*) ;; *)
                command -v mpirun >/dev/null || { echo "skipped (no mpirun): $line"; continue; } ;;
            esac ;;
        esac
        (cd "$run" && ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:detect_leaks=0} eval "$cmd") >"$tmp/out" 2>"$tmp/err" </dev/null ||
            { fail_because "$c --help example (exit $?): $line"; tail -n 5 "$tmp/out" "$tmp/err"; continue; }
        echo "ran: $line"
    done <"$tmp/examples"
done
[ $n -ge 20 ] || fail_because "only $n examples"
finish "cli help examples"
