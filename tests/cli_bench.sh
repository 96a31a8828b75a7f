#!/usr/bin/env bash
# cformers bench: both benchmarks run on a tiny shape; misuse exits 2 with a reason.
set -u
bin="$1"
fail=0
expect_exit() { # description, expected code, command...
    local what="$1" want="$2"; shift 2
    "$@" >/tmp/cli_bench.$$ 2>&1
    local got=$?
    if [ "$got" != "$want" ]; then echo "FAIL: $what: exit $got, want $want"; cat /tmp/cli_bench.$$; fail=1; fi
}
expect_exit "no benchmark" 2 "$bin" bench
expect_exit "unknown benchmark" 2 "$bin" bench frobnicate
expect_exit "bad size" 2 "$bin" bench gemm --m 0
expect_exit "missing value" 2 "$bin" bench gemm --k
expect_exit "option of the other benchmark" 2 "$bin" bench peak --m 4
"$bin" bench gemm --m 0 2>&1 | grep -q -- "--m needs a whole number" || { echo "FAIL: --m 0 message"; fail=1; }
out=$("$bin" bench gemm --m 37 --n 29 --k 41 --ta --reps 3 --threads 1) || { echo "FAIL: bench gemm"; fail=1; }
echo "$out" | grep -q "gemm TN 37 x 29 x 41 f32 .*GFLOP/s" || { echo "FAIL: bench gemm output: $out"; fail=1; }
out=$("$bin" bench gemm --m 16 --n 16 --k 16 --bf16 --reps 1 --threads 1) || { echo "FAIL: bench gemm --bf16"; fail=1; }
echo "$out" | grep -q "bf16" || { echo "FAIL: bench gemm --bf16 output: $out"; fail=1; }
out=$("$bin" bench peak --threads 1) || { echo "FAIL: bench peak"; fail=1; }
echo "$out" | grep -qE "^1 +[0-9.]+ +[0-9.]+$" || { echo "FAIL: bench peak output: $out"; fail=1; }
rm -f /tmp/cli_bench.$$
[ $fail = 0 ] && echo "cli bench: all passed"
exit $fail
