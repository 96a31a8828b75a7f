#!/usr/bin/env bash
# `make bench-train`: cformers training throughput and MFU for the ~15M / 42M / 110M LLaMA
# presets, side by side with the same models trained by PyTorch (python3-torch, float32,
# same threads, same batch and sequence), median step time after warmup. ~10 minutes on 2 cores.
#
# env: BUILD (build dir, default build), CFORMERS_THREADS (default: all cores),
#      BENCH_STEPS (timed steps, default 3), BENCH_WARMUP (default 1),
#      BENCH_SIZES (default "llama_15m:8:256 llama_42m:2:512 llama_110m:1:1024")
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
THREADS=${CFORMERS_THREADS:-$(nproc)}
STEPS=${BENCH_STEPS:-3}
WARMUP=${BENCH_WARMUP:-1}
SIZES=${BENCH_SIZES:-"llama_15m:8:256 llama_42m:2:512 llama_110m:1:1024"}
PYTHON=/usr/bin/python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

printf '%-11s %5s %5s | %12s %7s | %12s | %7s\n' preset batch seq "cformers t/s" MFU "PyTorch t/s" speedup
for spec in $SIZES; do
    IFS=: read -r preset batch seq <<<"$spec"
    mine=$(CFORMERS_THREADS=$THREADS "$BUILD/bench/bench_train" --steps "$STEPS" --warmup "$WARMUP" "$spec")
    "$BUILD/cformers" config show "$preset" --runner_config.batch_size="$batch" \
        --runner_config.seq_length="$seq" --runner_config.train_steps=$((STEPS + WARMUP)) --lr_schedule.warmup_steps=0 \
        --runner_config.gradient_accumulation_steps=1 >"$work/$preset.yaml"
    peer=$(env -u OPENBLAS_CORETYPE OMP_NUM_THREADS="$THREADS" "$PYTHON" tools/torch_train.py bench \
        "$work/$preset.yaml" --steps "$STEPS" --warmup "$WARMUP" --threads "$THREADS")
    echo "$mine" >>"$work/results.jsonl"
    echo "$peer" >>"$work/results.jsonl"
    "$PYTHON" - "$preset" "$batch" "$seq" "$mine" "$peer" <<'PY'
import json, sys
preset, batch, seq, mine, peer = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4]), json.loads(sys.argv[5])
print(f"{preset:<11} {batch:>5} {seq:>5} | {mine['tokens_per_s']:12.0f} {100 * mine['mfu']:6.1f}% | "
      f"{peer['tokens_per_s']:12.0f} | {mine['tokens_per_s'] / peer['tokens_per_s']:6.2f}x")
PY
done
echo "(peak: $(head -1 "$work/results.jsonl" | sed 's/.*"peak_gflops": \([0-9.]*\).*/\1/') GFLOP/s measured FMA peak, $THREADS threads, float32)"
