#!/usr/bin/env bash
# `make bench-ckpt-stall`: what a checkpoint costs the training loop, llama_110m (batch 1 x
# 1024, a 1.3 GB checkpoint of weights and both Adam moments), a synchronous save against a
# background one (callbacks.checkpoint_monitor.async_save), interleaved ROUNDS times: per
# save, the stall at the step boundary as a share of the median step, and the steps that ran
# while the background write was in flight against that median (docs/training.md).
# env: BUILD (default build), CFORMERS_DATA_DIR, ROUNDS (default 2), STEPS (default 13),
# INTERVAL (default 4: saves at 4, 8, 12; the final save is waited for and not counted)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib_bench.sh bench-ckpt-stall
ROUNDS=${ROUNDS:-2} STEPS=${STEPS:-13} INTERVAL=${INTERVAL:-4}
demo_data "$OUT/data"
for round in $(seq "$ROUNDS"); do
    for mode in false true; do
        echo "round $round, async_save=$mode" >&2
        "$BIN" train --config llama_110m --output_dir="$OUT/$mode-$round" --train_dataset.data_dir="$OUT/data" \
            --train_dataset.tokenizer="$TOKENIZER" --model.model_config.vocab_size=512 \
            --runner_config.train_steps="$STEPS" --runner_config.save_interval="$INTERVAL" \
            --runner_config.eval_interval=0 --runner_config.sample_interval=0 --runner_config.log_interval=1 \
            --lr_schedule.warmup_steps=1 \
            --callbacks.checkpoint_monitor.async_save="$mode" --callbacks.checkpoint_monitor.keep_checkpoint_max=1 \
            --quiet
        cp "$OUT/$mode-$round/metrics.jsonl" "$OUT/metrics-$mode-$round.jsonl"
        rm -rf "${OUT:?}/$mode-$round"
    done
done
/usr/bin/python3 - "$OUT" "$ROUNDS" "$STEPS" <<'PY'
import json, statistics, sys
out, rounds, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
print("| save | round | median step | stall per save (share of the step) | steps during the write (vs median) |")
print("|---|---:|---:|---|---|")
for mode in ("false", "true"):
    for r in range(1, rounds + 1):
        recs = [json.loads(l) for l in open(f"{out}/metrics-{mode}-{r}.jsonl")]
        step_s = {x["step"]: x["step_seconds"] for x in recs if x["event"] == "train"}
        saves = [x for x in recs if x["event"] == "checkpoint" and x["step"] < steps]
        med = statistics.median(step_s[s] for s in step_s if s > 1)
        stalls = ", ".join(f"{x['stall_seconds']:.2f} s ({100 * x['stall_seconds'] / med:.1f}%)" for x in saves)
        during = []
        for x in saves:
            if not x.get("background"):
                continue
            left, s = x.get("write_seconds", 0.0), x["step"] + 1
            while left > 0 and s in step_s:
                during.append(step_s[s] / med - 1)
                left -= step_s[s]
                s += 1
        slow = ", ".join(f"{100 * d:+.0f}%" for d in during) or "-"
        print(f"| {'background' if mode == 'true' else 'synchronous'} | {r} | {med:.2f} s | {stalls} | {slow} |")
PY
