#!/usr/bin/env bash
# The demo's validation-loss curve against PyTorch's, with identical inputs so that only the
# arithmetic differs: cformers trains the tiny_shakespeare preset on the demo's records
# (tok512), writing its step-0 weights (--save-initial) and every batch it trains and
# evaluates on (--dump-batches); tools/torch_train.py replays them in float32 PyTorch from the
# resolved config.yaml. Prints both curves side by side and exits 1 if the validation losses
# differ by more than 2% at any evaluation step.
#
#   bash tools/compare_curves.sh [extra `cformers train` arguments, e.g. --runner_config.train_steps=100]
# env: BUILD (default build), CFORMERS_DATA_DIR (default ../shared/data), OUT (default
#      output/compare_curves), THREADS (default 2, both sides), TOLERANCE (default 0.02).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BUILD:-build}/cformers
DATA=${CFORMERS_DATA_DIR:-../shared/data}
OUT=${OUT:-output/compare_curves}
THREADS=${THREADS:-2}
TOKENIZER=$DATA/stories260K/tok512.model

[ -x "$BIN" ] || { echo "compare_curves: $BIN is not built" >&2; exit 2; }
rm -rf "$OUT"
mkdir -p "$OUT"
echo "== tokenizing Tiny Shakespeare with $TOKENIZER"
"$BIN" preprocess --input "$DATA/tinyshakespeare/input.txt" --tokenizer "$TOKENIZER" --output "$OUT/data" \
    --valid-fraction 0.05 --quiet

echo "== cformers train (tiny_shakespeare, $THREADS threads)"
CFORMERS_THREADS=$THREADS "$BIN" train --config tiny_shakespeare --output_dir="$OUT/cformers" \
    --train_dataset.data_dir="$OUT/data" --train_dataset.tokenizer="$TOKENIZER" \
    --callbacks.metrics_monitor.file=metrics.jsonl --runner_config.sample_interval=0 \
    --dump-batches "$OUT/batches.bin" --save-initial "$OUT/initial.ckpt" "$@"

echo "== PyTorch replay ($THREADS threads)"
env -u OPENBLAS_CORETYPE OMP_NUM_THREADS="$THREADS" /usr/bin/python3 tools/torch_train.py curve \
    "$OUT/cformers/config.yaml" --batches "$OUT/batches.bin" --init "$OUT/initial.ckpt" --threads "$THREADS" \
    | tee "$OUT/torch.jsonl"

echo
/usr/bin/python3 - "$OUT/cformers/metrics.jsonl" "$OUT/torch.jsonl" "${TOLERANCE:-0.02}" <<'PY'
import json, sys
metrics = [json.loads(line) for line in open(sys.argv[1])]
evals = {e["step"]: e["val_loss"] for e in metrics if e["event"] == "eval"}
trains = {e["step"]: e["loss"] for e in metrics if e["event"] == "train"}
torch = {e["step"]: e for e in map(json.loads, open(sys.argv[2]))}
tol, worst = float(sys.argv[3]), 0.0
print(f"{'step':>6} {'train cformers':>15} {'train torch':>12} {'val cformers':>13} {'val torch':>10} {'val rel diff':>13}")
for step in sorted(evals):
    if step not in torch:
        sys.exit(f"compare_curves: PyTorch has no evaluation at step {step}")
    rel = evals[step] / torch[step]["val_loss"] - 1
    worst = max(worst, abs(rel))
    ours_train = f"{trains[step]:.4f}" if step in trains else "-"
    print(f"{step:>6} {ours_train:>15} {torch[step]['train_loss']:>12.4f} {evals[step]:>13.4f} "
          f"{torch[step]['val_loss']:>10.4f} {100 * rel:>+12.3f}%")
print(f"largest validation-loss difference {100 * worst:.3f}% ({'within' if worst <= tol else 'NOT within'} "
      f"{100 * tol:g}%)")
sys.exit(0 if worst <= tol and evals else 1)
PY
