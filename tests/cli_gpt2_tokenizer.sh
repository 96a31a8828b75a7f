#!/usr/bin/env bash
# Tokenizers travel with the weights, with no shared asset: a run trained with GPT-2's
# encoder.json + vocab.bpe (tests/fixtures/data/gpt2_tiny, tools/make_gpt2_tiny_tokenizer.py)
# embeds it as a tokenizer.json, so `generate` needs no --tokenizer; exported to GGUF and
# imported back (no --tokenizer either), it generates the same greedy text; and a GGUF whose
# tokenizer.ggml.model is not supported is refused with one line naming the key and value.
. "$(dirname "$0")/lib_cli.sh"
tiny_run --train_dataset.tokenizer="$src/tests/fixtures/data/gpt2_tiny" --model.model_config.vocab_size=301 \
    --runner_config.train_steps=4 --runner_config.save_interval=4 --output_dir="$tmp/run"
check "train with encoder.json + vocab.bpe" 0 "$bin" train "${tiny[@]}"
ckpt="$tmp/run/checkpoint_step4.ckpt"
check "inspect" 0 "$bin" inspect "$ckpt"
stdout_has "embedded as tokenizer.json" "tokenizer: tokenizer.json (byte-level-bpe), vocabulary 301, bos 300, eos 300"
check "generate without --tokenizer" 0 "$bin" generate --model "$ckpt" --prompt "the cat" -n 8 --temperature 0
grep -q "^the cat" "$tmp/out" || fail_because "the prompt is not echoed: $(cat "$tmp/out")"
cp "$tmp/out" "$tmp/greedy"
check "export to GGUF" 0 "$bin" convert --to gguf "$ckpt" --output "$tmp/m.gguf"
check "import the GGUF without --tokenizer" 0 "$bin" convert --from gguf "$tmp/m.gguf" --output "$tmp/back.ckpt"
check "inspect the import" 0 "$bin" inspect "$tmp/back.ckpt"
stdout_has "GGUF tokenizer embedded" "tokenizer: tokenizer.json (byte-level-bpe), vocabulary 301, bos 300, eos 300"
check "generate from the import" 0 "$bin" generate --model "$tmp/back.ckpt" --prompt "the cat" -n 8 --temperature 0
cmp -s "$tmp/out" "$tmp/greedy" || { fail_because "greedy text differs after GGUF"; diff "$tmp/out" "$tmp/greedy"; }
# "gpt2" -> "bert" in place (same length): refused, one line
/usr/bin/python3 - "$tmp/m.gguf" "$tmp/bert.gguf" <<'PY'
import sys
d = open(sys.argv[1], "rb").read()
key = b"tokenizer.ggml.model"
i = d.index(key) + len(key) + 4 + 8
assert d[i:i + 4] == b"gpt2"
open(sys.argv[2], "wb").write(d[:i] + b"bert" + d[i + 4:])
PY
check "unsupported tokenizer model" 1 "$bin" convert --from gguf "$tmp/bert.gguf" --output "$tmp/bert.ckpt"
stderr_has "names key and value" "bert.gguf: metadata tokenizer.ggml.model 'bert' is not supported (llama, gpt2)"
[ "$(wc -l <"$tmp/err")" = 1 ] || fail_because "the refusal is not one line: $(cat "$tmp/err")"
[ ! -e "$tmp/bert.ckpt" ] || fail_because "a refused import left a checkpoint"
check "--tokenizer instead" 0 "$bin" convert --from gguf "$tmp/bert.gguf" --output "$tmp/bert.ckpt" \
    --tokenizer "$src/tests/fixtures/data/gpt2_tiny"
finish cli_gpt2_tokenizer
