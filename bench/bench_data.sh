#!/usr/bin/env bash
# `make bench-data`: preprocessing MB/s with 1 and 2 workers, and loader tokens/s from
# records against tokenizing raw text on the fly (target >= 10x). About a minute on 2 cores.
#
# env: BUILD (build dir, default build), BENCH_RUNS (median of, default 3),
#      BENCH_REPEAT (copies of Tiny Shakespeare in the corpus, default 4),
#      CFORMERS_DATA_DIR (default ../shared/data)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export CFORMERS_DATA_DIR=${CFORMERS_DATA_DIR:-$PWD/../shared/data}
exec "$BUILD/bench/bench_data" --runs "${BENCH_RUNS:-3}" --repeat "${BENCH_REPEAT:-4}"
