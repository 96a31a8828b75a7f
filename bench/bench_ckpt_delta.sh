#!/usr/bin/env bash
# `make bench-ckpt-delta`: how much smaller differential checkpoints are on the demo run.
# Trains the demo config (tiny_shakespeare, 400 steps, Tiny Shakespeare with the
# stories260K tokenizer) saving a full checkpoint every 20 steps, then has
# bench_ckpt_delta rewrite them as the trainer would with full_checkpoint_interval=EVERY
# (default 5) and report the sizes and where the bytes go.
#   env: BUILD (default build), CFORMERS_DATA_DIR (default ../shared/data), EVERY
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BUILD:-build}/cformers
DATA=${CFORMERS_DATA_DIR:-../shared/data}
EVERY=${EVERY:-5}
TEXT=$DATA/tinyshakespeare/input.txt
TOKENIZER=$DATA/stories260K/tok512.model
[ -f "$TEXT" ] && [ -f "$TOKENIZER" ] || { echo "bench-ckpt-delta: needs $TEXT and $TOKENIZER (CFORMERS_DATA_DIR)" >&2; exit 1; }
OUT=$(mktemp -d /tmp/cformers_bench_delta.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
"$BIN" preprocess --input "$TEXT" --tokenizer "$TOKENIZER" --output "$OUT/data" --valid-fraction 0.05 --quiet
"$BIN" train --config tiny_shakespeare --output_dir="$OUT/run" --train_dataset.data_dir="$OUT/data" \
    --train_dataset.tokenizer="$TOKENIZER" --runner_config.save_interval=20 --runner_config.sample_interval=0 \
    --callbacks.checkpoint_monitor.keep_checkpoint_max=0 --quiet
mapfile -t ckpts < <(ls -1 "$OUT"/run/checkpoint_step*.ckpt | sort -V)
"${BUILD:-build}"/bench/bench_ckpt_delta "$EVERY" "${ckpts[@]}"
