#!/usr/bin/env bash
# `make bench-generate`: prefill/decode tokens per second on stories260K and a random ~110M
# LLaMA, 1 and 2 threads, f32, bf16 and q8_0 weights, with the decode step's weight traffic in GB/s
# against this machine's read bandwidth, measured just before each decode measurement. A few
# minutes on 2 cores.
#
# env: BUILD (build dir, default build), BENCH_RUNS (median of, default 3),
#      BENCH_PREFILL / BENCH_DECODE (110M prompt and generated tokens, default 128 / 64),
#      CFORMERS_DATA_DIR (for stories260K, default ../shared/data); arguments (e.g. --skip-110m)
#      go to bench_generate
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export CFORMERS_DATA_DIR=${CFORMERS_DATA_DIR:-$PWD/../shared/data}
exec "$BUILD/bench/bench_generate" --runs "${BENCH_RUNS:-3}" --prefill "${BENCH_PREFILL:-128}" \
    --decode "${BENCH_DECODE:-64}" "$@"
