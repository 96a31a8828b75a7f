#!/usr/bin/env bash
# `make bench-ckpt-delta`: how much smaller differential checkpoints are on the demo run.
# Trains the demo config (tiny_shakespeare, 400 steps, Tiny Shakespeare with the
# stories260K tokenizer) saving a full checkpoint every 20 steps, then has
# bench_ckpt_delta rewrite them as the trainer would with full_checkpoint_interval=EVERY
# (default 5) and report the sizes and where the bytes go.
#   env: BUILD (default build), CFORMERS_DATA_DIR (default ../shared/data), EVERY
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib_bench.sh bench-ckpt-delta
EVERY=${EVERY:-5}
demo_data "$OUT/data"
"$BIN" train --config tiny_shakespeare --output_dir="$OUT/run" --train_dataset.data_dir="$OUT/data" \
    --train_dataset.tokenizer="$TOKENIZER" --runner_config.save_interval=20 --runner_config.sample_interval=0 \
    --callbacks.checkpoint_monitor.keep_checkpoint_max=0 --quiet
mapfile -t ckpts < <(ls -1 "$OUT"/run/checkpoint_step*.ckpt | sort -V)
"${BUILD:-build}"/bench/bench_ckpt_delta "$EVERY" "${ckpts[@]}"
