#!/usr/bin/env bash
# Every subcommand answers --help with exit 0; misuse exits 2 with a one-line reason.
set -u
bin="$1"
fail=0
check() { # description, expected exit code, command...
    local what="$1" want="$2"; shift 2
    "$@" >/tmp/cli_out.$$ 2>&1
    local got=$?
    if [ "$got" != "$want" ]; then
        echo "FAIL: $what: exit $got, want $want"; cat /tmp/cli_out.$$; fail=1
    fi
}
check "top-level --help" 0 "$bin" --help
check "no command" 2 "$bin"
check "unknown command" 2 "$bin" frobnicate
"$bin" frobnicate 2>&1 | grep -q "unknown command 'frobnicate'" || { echo "FAIL: unknown command message"; fail=1; }
for sub in train generate convert validate preprocess tokenizer config bench launch serve; do
    check "$sub --help" 0 "$bin" "$sub" --help
    "$bin" "$sub" --help | grep -q "usage: cformers $sub" || { echo "FAIL: $sub --help lacks usage line"; fail=1; }
done
rm -f /tmp/cli_out.$$
[ $fail = 0 ] && echo "cli basics: all passed"
exit $fail
