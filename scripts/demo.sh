#!/usr/bin/env bash
# `make demo`: the README's main job. Trains the `tiny_shakespeare` preset (a 0.9M-parameter
# LLaMA) for a few minutes with a progress display, reports the validation loss, and
# generates text from the final checkpoint with `cformers generate` (no --tokenizer: the
# checkpoint carries it).
#
# The corpus and tokenizer: with the shared assets (CFORMERS_DATA_DIR), Tiny Shakespeare and
# the 512-token stories260K SentencePiece tokenizer; on a machine without them, the text of
# Debian's `fortunes` package (/usr/share/games/fortunes, installed by install-deps.sh) and
# a 512-token byte-level BPE tokenizer the demo trains on it with `cformers tokenizer train`
# (scripts/fortunes-corpus.sh, which the README tour's test uses too).
#
# Builds nothing (make demo builds the cformers binary alone first). Extra arguments go to `cformers train`, e.g.
#   bash scripts/demo.sh --runner_config.train_steps=100
# env: BUILD (default build), CFORMERS_DATA_DIR (default ../shared/data), DEMO_OUT
#      (default output/tiny_shakespeare), FORTUNES_DIR (default /usr/share/games/fortunes),
#      CFORMERS_THREADS.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BUILD:-build}/cformers
DATA=${CFORMERS_DATA_DIR:-../shared/data}
OUT=${DEMO_OUT:-output/tiny_shakespeare}
TEXT=$DATA/tinyshakespeare/input.txt
TOKENIZER=$DATA/stories260K/tok512.model
PROMPT="ROMEO:"

[ -x "$BIN" ] || { echo "demo: $BIN is not built (run \`make demo\`)" >&2; exit 1; }
rm -rf "$OUT"
mkdir -p "$OUT"

if [ -f "$TEXT" ] && [ -f "$TOKENIZER" ]; then
    echo "== corpus: Tiny Shakespeare ($TEXT), tokenizer: $TOKENIZER"
else
    echo "== no shared assets in $DATA ($TEXT, $TOKENIZER)"
    bash scripts/fortunes-corpus.sh "$BIN" "$OUT" || {
        echo "demo: neither the shared assets nor Debian's fortunes are here" >&2
        exit 1
    }
    TEXT=$OUT/fortunes.txt
    TOKENIZER=$OUT/tokenizer.json
    PROMPT="The"
fi

echo "== tokenizing $TEXT with $TOKENIZER"
"$BIN" preprocess --input "$TEXT" --tokenizer "$TOKENIZER" --output "$OUT/data" --valid-fraction 0.05 --quiet

echo "== training the tiny_shakespeare preset"
"$BIN" train --config tiny_shakespeare --output_dir="$OUT" --train_dataset.data_dir="$OUT/data" \
    --train_dataset.tokenizer="$TOKENIZER" --callbacks.metrics_monitor.file=metrics.jsonl "$@"

echo
echo "== validation loss by step"
/usr/bin/python3 - "$OUT/metrics.jsonl" <<'PY'
import json, sys
evals = [json.loads(l) for l in open(sys.argv[1]) if '"event":"eval"' in l]
for e in evals:
    print(f"  step {e['step']:>5}  {e['val_loss']:.4f}")
PY
echo
CKPT=$(ls -1 "$OUT"/checkpoint_step*.ckpt 2>/dev/null | sort -V | tail -n 1)
[ -n "$CKPT" ] || { echo "demo: training left no checkpoint in $OUT" >&2; exit 1; }
echo "== generating from $CKPT"
"$BIN" generate --model "$CKPT" --prompt "$PROMPT" -n 200 --temperature 0.8 --seed 42
echo
