#!/usr/bin/env bash
# cformers bench: both benchmarks run on a tiny shape; misuse exits 2 with a reason.
. "$(dirname "$0")/lib_cli.sh"
check "no benchmark" 2 "$bin" bench
check "unknown benchmark" 2 "$bin" bench frobnicate
check "bad size" 2 "$bin" bench gemm --m 0
stderr_has "--m 0 message" "--m needs a whole number"
check "missing value" 2 "$bin" bench gemm --k
check "option of the other benchmark" 2 "$bin" bench peak --m 4
check "bench gemm" 0 "$bin" bench gemm --m 37 --n 29 --k 41 --ta --reps 3 --threads 1
grep -q "gemm TN 37 x 29 x 41 f32 .*GFLOP/s" "$tmp/out" || fail_because "bench gemm output: $(cat "$tmp/out")"
check "bench gemm --bf16" 0 "$bin" bench gemm --m 16 --n 16 --k 16 --bf16 --reps 1 --threads 1
stdout_has "bench gemm --bf16 output" "bf16"
check "bench peak" 0 "$bin" bench peak --threads 1
grep -qE "^1 +[0-9.]+ +[0-9.]+$" "$tmp/out" || fail_because "bench peak output: $(cat "$tmp/out")"
finish "cli bench"
