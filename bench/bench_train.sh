#!/usr/bin/env bash
# `make bench-train`: cformers training throughput and MFU for the ~15M / 42M / 110M LLaMA
# presets in each compute_dtype (float32, bfloat16 and float16 mixed precision), side by
# side with the same models trained by PyTorch (python3-torch, same threads, same batch and
# sequence: float32, and CPU autocast for bfloat16; its CPU autocast has no float16), median
# step time after warmup. MFU is against the peak of the unit the products run on (bf16:
# the bf16 dot products; f32 and f16, whose products are f32: FMA). ~25 minutes on 2 cores.
#
# env: BUILD (build dir, default build), CFORMERS_THREADS (default: all cores),
#      BENCH_STEPS (timed steps, default 3), BENCH_WARMUP (default 1),
#      BENCH_SIZES (default "llama_15m:8:256 llama_42m:2:512 llama_110m:1:1024"),
#      BENCH_DTYPES (default "float32 bfloat16 float16")
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
THREADS=${CFORMERS_THREADS:-$(nproc)}
STEPS=${BENCH_STEPS:-3}
WARMUP=${BENCH_WARMUP:-1}
SIZES=${BENCH_SIZES:-"llama_15m:8:256 llama_42m:2:512 llama_110m:1:1024"}
DTYPES=${BENCH_DTYPES:-"float32 bfloat16 float16"}
PYTHON=/usr/bin/python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

printf '%-11s %5s %5s %-8s | %12s %7s | %12s | %7s\n' preset batch seq dtype "cformers t/s" MFU "PyTorch t/s" speedup
for spec in $SIZES; do
    IFS=: read -r preset batch seq <<<"$spec"
    "$BUILD/cformers" config show "$preset" --runner_config.batch_size="$batch" \
        --runner_config.seq_length="$seq" --runner_config.train_steps=$((STEPS + WARMUP)) --lr_schedule.warmup_steps=0 \
        --runner_config.gradient_accumulation_steps=1 >"$work/$preset.yaml"
    for dtype in $DTYPES; do
        mine=$(CFORMERS_THREADS=$THREADS "$BUILD/bench/bench_train" --steps "$STEPS" --warmup "$WARMUP" "$spec:$dtype")
        peer='{}'
        if [ "$dtype" != float16 ]; then
            peer=$(env -u OPENBLAS_CORETYPE OMP_NUM_THREADS="$THREADS" "$PYTHON" tools/torch_train.py bench \
                "$work/$preset.yaml" --steps "$STEPS" --warmup "$WARMUP" --threads "$THREADS" \
                $([ "$dtype" = bfloat16 ] && echo --autocast-bf16))
        fi
        echo "$mine" >>"$work/results.jsonl"
        echo "$peer" >>"$work/results.jsonl"
        "$PYTHON" - "$preset" "$batch" "$seq" "$dtype" "$mine" "$peer" <<'PY'
import json, sys
preset, batch, seq, dtype = sys.argv[1:5]
mine, peer = json.loads(sys.argv[5]), json.loads(sys.argv[6])
theirs = peer.get("tokens_per_s")
print(f"{preset:<11} {batch:>5} {seq:>5} {dtype:<8} | {mine['tokens_per_s']:12.0f} {100 * mine['mfu']:6.1f}% | "
      + (f"{theirs:12.0f} | {mine['tokens_per_s'] / theirs:6.2f}x" if theirs else f"{'-':>12} | {'-':>7}"))
PY
    done
done
echo "(peaks measured: $(grep '"engine"' "$work/results.jsonl" | sed 's/.*"dtype": "\([a-z0-9]*\)".*"peak_gflops": \([0-9.]*\).*/\1 \2/' | sort -u | tr '\n' ' ')GFLOP/s; $THREADS threads)"
