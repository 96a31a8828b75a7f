#!/usr/bin/env bash
# KV memory of a 32k-token context: a contiguous f32 cache preallocated for the maximum
# length (cf_infer_kv_cache_bytes at --max-seq 32768, and `generate`'s peak RSS) against the
# paged cache of `serve` in bf16 and q8_0 (pool of exactly one full context, swap space on;
# KV bytes from /metrics and the server's peak RSS, VmHWM). The model is the
# tiny_shakespeare preset (head_dim 32) with max_position_embeddings 32768, cut to
# LAYERS layers (default 1, so that the 32k-token prefill stays affordable on 2 cores)
# and trained one step (the weights do not matter to memory).
# usage: tools/kv_memory_32k.sh BUILD_DIR [WORK_DIR]
set -euo pipefail
bin="$(cd "$1" && pwd)/cformers"
work="${2:-$(mktemp -d)}"
repo="$(cd "$(dirname "$0")/.." && pwd)"
data="${CFORMERS_DATA_DIR:-$repo/../shared/data}"
layers="${LAYERS:-1}" max=32768 n=16
mkdir -p "$work"
ckpt="$work/model.ckpt"
if [ ! -f "$ckpt" ]; then
    (cd "$repo" && "$bin" train --config tiny_shakespeare --output_dir="$work/ts" \
        --train_dataset.data_dir="$data/tinyshakespeare/input.txt" --model.model_config.max_position_embeddings=$max \
        --model.model_config.num_layers="$layers" --steps 1 --quiet --overwrite >/dev/null)
    # the trainer's checkpoint has no tokenizer; a round trip through GGUF embeds it
    "$bin" convert --to gguf "$work/ts/checkpoint_step1.ckpt" --output "$work/model.gguf" >/dev/null
    "$bin" convert --from gguf "$work/model.gguf" --tokenizer "$data/stories260K/tok512.model" --output "$ckpt" >/dev/null
fi
head -c 51000 "$data/tinyshakespeare/input.txt" >"$work/prompt.txt"

/usr/bin/time -f '%M' -o "$work/gen.rss" "$bin" generate --model "$ckpt" --prompt "$(cat "$work/prompt.txt")" \
    --temperature 0 -n $n --kv-cache f32 >/dev/null 2>"$work/gen.err"
prompt_tokens=$(sed -n 's/.*prefill: \([0-9]*\) tokens.*/\1/p' "$work/gen.err")
gen_rss=$(($(cat "$work/gen.rss") * 1024))
# a contiguous f32 cache for the maximum length: 2 x layers x max x kv_dim(128) x 4 bytes
f32_bytes=$((2 * layers * max * 128 * 4))
echo "context: $prompt_tokens prompt + $n generated tokens; contiguous f32 cache for $max positions: $f32_bytes bytes; generate (f32 cache sized to the context) peak RSS: $gen_rss bytes"

python3 - "$work/prompt.txt" >"$work/body.json" <<'PY'
import json, sys
print(json.dumps({"prompt": open(sys.argv[1]).read(), "max_tokens": 16, "temperature": 0}))
PY
for kv in bf16 q8_0; do
    "$bin" serve --model "$ckpt" --port 0 --kv-cache $kv --kv-blocks $((max / 16)) --swap-space 64M \
        --max-batch 1 >"$work/serve_$kv.out" 2>&1 &
    pid=$!
    url=""
    for _ in $(seq 300); do url=$(grep -o 'http://127.0.0.1:[0-9]*' "$work/serve_$kv.out" || true); [ -n "$url" ] && break; sleep 0.1; done
    curl -s "$url/v1/completions" -H 'Content-Type: application/json' --data-binary @"$work/body.json" >"$work/reply_$kv.json"
    curl -s "$url/metrics" >"$work/metrics_$kv"
    rss=$(($(awk '/^VmHWM/ {print $2}' /proc/$pid/status) * 1024))
    kill $pid; wait $pid 2>/dev/null || true
    peak=$(sed -n 's/^cformers_kv_bytes_peak //p' "$work/metrics_$kv")
    block=$(sed -n 's/^cformers_kv_block_bytes //p' "$work/metrics_$kv")
    python3 - "$kv" "$peak" "$block" "$rss" "$f32_bytes" "$gen_rss" "$work/reply_$kv.json" <<'PY'
import json, sys
kv, peak, block, rss, f32, gen_rss, reply = sys.argv[1], *map(int, sys.argv[2:7]), sys.argv[7]
u = json.load(open(reply))["usage"]
print(f"paged {kv}: {u['prompt_tokens']}+{u['completion_tokens']} tokens, block {block} B, KV peak {peak} B = "
      f"{100 * peak / f32:.1f}% of the f32 cache; server peak RSS {rss} B = {100 * rss / gen_rss:.1f}% of generate's")
PY
done
