#!/usr/bin/env bash
# `cformers inspect CKPT`: a trained checkpoint's config, tensors, tokenizer and training
# state, as text and as JSON; bad files and misuse give one-line errors. Needs no assets.
. "$(dirname "$0")/lib_cli.sh"
tiny_run --output_dir="$tmp/run" --runner_config.train_steps=2 --runner_config.save_interval=2 --quiet

check "inspect --help" 0 "$bin" inspect --help
stdout_has "help" "usage: cformers inspect MODEL"
check "tiny run" 0 "$bin" train "${tiny[@]}"
ckpt="$tmp/run/checkpoint_step2.ckpt"

check "inspect" 0 "$bin" inspect "$ckpt"
stdout_has "format" "format: cformers-train-state"
stdout_has "config" "  hidden_size: 32"
stdout_has "tokenizer" "tokenizer: bytes.tokenizer.json (byte-level-bpe), vocabulary 256, bos -1, eos -1"
stdout_has "step" "  step: 2"
stdout_has "run id" "  run_id: "
stdout_has "tensor line" "model.embed_tokens.weight  *f32   \[512, 32\]"
check "inspect --json --verify" 0 "$bin" inspect "$ckpt" --json --verify
/usr/bin/python3 - "$tmp/out" <<'PY' || fail_because "inspect --json: $(head -c 400 "$tmp/out")"
import json, math, sys
r = json.load(open(sys.argv[1]))
weights = [t for t in r["tensors"] if t["role"] == "weights"]
assert r["model_config"]["hidden_size"] == 32 and r["model_config"]["arch"] == "llama"
assert r["parameters"] == sum(math.prod(t["shape"]) for t in weights)
assert all(t["bytes"] == 4 * math.prod(t["shape"]) for t in r["tensors"] if t["dtype"] == "f32")
assert {t["name"] for t in r["tensors"] if t["role"] == "optimizer"} >= {"optimizer.adam_m", "optimizer.adam_v"}
assert r["tokenizer"] == {"file": "bytes.tokenizer.json", "type": "byte-level-bpe", "vocab_size": 256, "bos": -1, "eos": -1}
assert r["training"]["step"] == 2 and r["training"]["run_id"] and r["training"]["seq_length"] == 32
PY

# Misuse exits 2, bad files 1, each with one line on stderr.
check "no CKPT" 2 "$bin" inspect
stderr_has "no CKPT" "CKPT is required"
check "unknown option" 2 "$bin" inspect "$ckpt" --frob
check "two files" 2 "$bin" inspect "$ckpt" "$ckpt"
check "missing file" 1 "$bin" inspect "$tmp/none.ckpt"
stderr_has "missing" "none.ckpt: cannot open"
echo "not a checkpoint" >"$tmp/text.ckpt"
check "not a checkpoint" 1 "$bin" inspect "$tmp/text.ckpt"
stderr_has "not a checkpoint" "text.ckpt: "
head -c 2000 "$ckpt" >"$tmp/cut.ckpt"
check "truncated" 1 "$bin" inspect "$tmp/cut.ckpt"
stderr_has "truncated" "cut.ckpt: "
check "directory" 1 "$bin" inspect "$tmp"
stderr_has "directory" "a directory without config.json (it holds"
[ "$(wc -l <"$tmp/err")" = 1 ] || fail_because "error is not one line: $(cat "$tmp/err")"

finish cli_inspect
