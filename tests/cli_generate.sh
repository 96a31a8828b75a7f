#!/usr/bin/env bash
# convert / generate / validate from the command line: the stories260K greedy story,
# validation against the committed reference, exports, and misuse errors.
. "$(dirname "$0")/lib_cli.sh"
fx="$src/tests/fixtures/infer"

check "generate without --model" 2 "$bin" generate
stderr_has "generate usage" "--model is required"
check "generate bad -n" 2 "$bin" generate --model x -n zero
check "generate bad --kv-cache" 2 "$bin" generate --model x --kv-cache f16
stderr_has "kv-cache reason" "--kv-cache must be f32, bf16 or q8_0, not 'f16'"
[ "$(wc -l < "$tmp/err")" -eq 1 ] || { echo "FAIL: bad --kv-cache should print one line"; cat "$tmp/err"; fail=1; }
check "convert without format" 2 "$bin" convert --output x
check "convert unknown format" 2 "$bin" convert --from onnx x --output y
check "validate missing args" 2 "$bin" validate --model x
# A reference whose counts claim 64 TiB in a 24-byte file: exit 1 naming the fields, not an abort.
printf 'CFLOGITS\001\000\000\000\000\000\020\000\000\000\000\001\000\000\000\000' >"$tmp/huge.logits"
check "validate a reference claiming 64 TiB" 1 "$bin" validate --model x --reference "$tmp/huge.logits"
stderr_has "huge reference" "huge.logits: offset 12: n_tokens 1048576 x vocab 16777216"
check "generate missing file" 1 "$bin" generate --model "$tmp/none.ckpt"
stderr_has "missing checkpoint" "none.ckpt: cannot open"

check "convert tiny llama2.c" 0 "$bin" convert --from llama2c "$fx/tiny_v1.bin" --output "$tmp/tiny.ckpt"
check "validate tiny" 0 "$bin" validate --model "$tmp/tiny.ckpt" --reference "$fx/tiny.logits"
grep -q "^PASS" "$tmp/out" || { echo "FAIL: validate did not print PASS"; fail=1; }
check "validate bf16 tight tolerance fails" 1 "$bin" validate --model "$tmp/tiny.ckpt" --reference "$fx/tiny.logits" --dtype bf16 --tolerance 1e-7
grep -q "^FAIL" "$tmp/out" || { echo "FAIL: validate did not print FAIL"; fail=1; }
check "generate needs a tokenizer" 1 "$bin" generate --model "$tmp/tiny.ckpt"
stderr_has "no tokenizer" "no tokenizer embedded"
check "export safetensors" 0 "$bin" convert --to safetensors "$tmp/tiny.ckpt" --output "$tmp/hf"
# PyTorch (tools/torch_logits_reference.py: HF's layout and rotate-half RoPE) runs the LLaMA
# export itself and agrees with cformers within 1e-5
if /usr/bin/python3 -c "import torch" 2>/dev/null; then
    check "PyTorch runs the LLaMA export" 0 /usr/bin/python3 "$src/tools/torch_logits_reference.py" "$tmp/hf" \
        --tokens 1,7,33,2,40,11,19,5 --output "$tmp/hf.logits"
    check "validate against the export's PyTorch logits" 0 "$bin" validate --model "$tmp/tiny.ckpt" \
        --reference "$tmp/hf.logits" --tolerance 1e-5
fi
check "import it back" 0 "$bin" convert --from hf "$tmp/hf" --output "$tmp/back.ckpt"
check "validate round trip" 0 "$bin" validate --model "$tmp/back.ckpt" --reference "$fx/tiny.logits"

# GPT-2 (tools/make_gpt2_fixtures.py): the HF import (Conv1D [in, out] weights, tied head)
# matches PyTorch's float64 logits within 1e-5; PyTorch loads the export back (when it is
# installed); re-importing the export and a GGUF round trip give bit-identical logits.
check "convert tiny GPT-2" 0 "$bin" convert --from hf "$fx/tiny_gpt2_hf" --output "$tmp/g.ckpt"
check "validate GPT-2 against PyTorch" 0 "$bin" validate --model "$tmp/g.ckpt" --reference "$fx/tiny_gpt2.logits" --tolerance 1e-5
cp "$tmp/out" "$tmp/g_validate"
# bf16 and q8_0 weights split c_attn's rows into q, k, v after conversion: close to PyTorch
# (random weights of std 0.3 in 16-wide rows, padded to a q8_0 block, lose about 3%)
check "validate GPT-2 with bf16 weights" 0 "$bin" validate --model "$tmp/g.ckpt" --reference "$fx/tiny_gpt2.logits" --dtype bf16 --tolerance 0.05
check "validate GPT-2 with q8_0 weights" 0 "$bin" validate --model "$tmp/g.ckpt" --reference "$fx/tiny_gpt2.logits" --dtype q8_0 --tolerance 0.05
check "export GPT-2 to safetensors" 0 "$bin" convert --to safetensors "$tmp/g.ckpt" --output "$tmp/ghf"
grep -q '"model_type": "gpt2"' "$tmp/ghf/config.json" || { echo "FAIL: GPT-2 config.json"; cat "$tmp/ghf/config.json"; fail=1; }
if /usr/bin/python3 -c "import torch" 2>/dev/null; then
    check "PyTorch loads the GPT-2 export" 0 /usr/bin/python3 "$src/tools/make_gpt2_fixtures.py" --check "$tmp/ghf" "$fx/tiny_gpt2.logits"
fi
check "import the GPT-2 export" 0 "$bin" convert --from hf "$tmp/ghf" --output "$tmp/g2.ckpt"
check "validate re-imported GPT-2" 0 "$bin" validate --model "$tmp/g2.ckpt" --reference "$fx/tiny_gpt2.logits" --tolerance 1e-5
cmp -s "$tmp/out" "$tmp/g_validate" || { echo "FAIL: re-imported GPT-2 logits differ"; diff "$tmp/out" "$tmp/g_validate"; fail=1; }
check "GPT-2 to GGUF" 0 "$bin" convert --to gguf "$tmp/g.ckpt" --output "$tmp/g.gguf"
check "GPT-2 from GGUF" 0 "$bin" convert --from gguf "$tmp/g.gguf" --output "$tmp/g3.ckpt"
check "validate GGUF GPT-2" 0 "$bin" validate --model "$tmp/g3.ckpt" --reference "$fx/tiny_gpt2.logits" --tolerance 1e-5
cmp -s "$tmp/out" "$tmp/g_validate" || { echo "FAIL: GGUF round-trip GPT-2 logits differ"; diff "$tmp/out" "$tmp/g_validate"; fail=1; }

if [ -f "$data/stories260K/stories260K.bin" ]; then
    check "convert stories260K" 0 "$bin" convert --from llama2c "$data/stories260K/stories260K.bin" \
        --tokenizer "$data/stories260K/tok512.bin" --output "$tmp/s.ckpt"
    check "generate greedy" 0 "$bin" generate --model "$tmp/s.ckpt" --temperature 0 -n 256
    cmp -s "$tmp/out" "$fx/stories260K_greedy.txt" || { echo "FAIL: greedy story differs from llama2.c's"; diff "$tmp/out" "$fx/stories260K_greedy.txt"; fail=1; }
    stderr_has "speed report" "decode: 256 tokens"
    stderr_has "f32 weights keep an f32 cache" "f32 KV cache of"
    # why generation stopped, on the status line (issue 43): -n, end-of-text, the context
    stderr_has "stopped at -n" "; stopped: length, -n 256 tokens"
    check "generate to end-of-text" 0 "$bin" generate --model "$tmp/s.ckpt" --prompt "Once upon a time" --temperature 0 -n 1000
    stderr_has "stopped at EOS" "; stopped: end-of-text after [0-9]* of -n 1000 tokens"
    long=$(for _ in $(seq 31); do printf 'Lily went to the park and played with her ball. '; done)
    check "generate to the end of the context" 0 "$bin" generate --model "$tmp/s.ckpt" --prompt "$long" --temperature 0 -n 1000
    stderr_has "stopped at the context" "; stopped: context, the 512-token context is full"
    check "convert to bf16" 0 "$bin" convert --from llama2c "$data/stories260K/stories260K.bin" \
        --tokenizer "$data/stories260K/tok512.bin" --dtype bf16 --output "$tmp/s16.ckpt"
    check "generate from bf16 weights" 0 "$bin" generate --model "$tmp/s16.ckpt" --dtype bf16 --temperature 0 -n 30
    grep -q "^Once upon a time, there was a little girl named Lily" "$tmp/out" || { echo "FAIL: bf16 story"; cat "$tmp/out"; fail=1; }
    stderr_has "bf16 weights get a bf16 cache" "bf16 KV cache of"
    check "convert to q8_0" 0 "$bin" convert --from llama2c "$data/stories260K/stories260K.bin" \
        --tokenizer "$data/stories260K/tok512.bin" --dtype q8_0 --output "$tmp/s8.ckpt"
    check "generate from q8_0 weights" 0 "$bin" generate --model "$tmp/s8.ckpt" --dtype q8_0 --temperature 0 -n 30
    grep -q "^Once upon a time, there was a little girl named Lily" "$tmp/out" || { echo "FAIL: q8_0 story"; cat "$tmp/out"; fail=1; }
    stderr_has "q8_0 weights get a bf16 cache" "q8_0 weights, bf16 KV cache of"
    # without --dtype the matmuls read what the checkpoint stores: no silent widening to f32
    check "generate from q8_0 weights, dtype as stored" 0 "$bin" generate --model "$tmp/s8.ckpt" --temperature 0 -n 30
    stderr_has "q8_0 as stored" "q8_0 weights, bf16 KV cache of"
    check "convert to q4_0" 0 "$bin" convert --from llama2c "$data/stories260K/stories260K.bin" \
        --tokenizer "$data/stories260K/tok512.bin" --dtype q4_0 --output "$tmp/s4.ckpt"
    check "generate from q4_0 weights" 0 "$bin" generate --model "$tmp/s4.ckpt" --temperature 0 -n 30
    grep -q "^Once upon a time, there was a" "$tmp/out" || { echo "FAIL: q4_0 story"; cat "$tmp/out"; fail=1; }
    stderr_has "q4_0 as stored" "q4_0 weights, bf16 KV cache of"
    check "quantize at load" 0 "$bin" generate --model "$tmp/s.ckpt" --dtype q8_0 --temperature 0 -n 30
    grep -q "^Once upon a time, there was a little girl named Lily" "$tmp/out" || { echo "FAIL: q8_0 at load"; cat "$tmp/out"; fail=1; }
    check "bf16 cache on f32 weights" 0 "$bin" generate --model "$tmp/s.ckpt" --kv-cache bf16 --temperature 0 -n 30
    grep -q "^Once upon a time, there was a little girl named Lily" "$tmp/out" || { echo "FAIL: bf16 cache story"; cat "$tmp/out"; fail=1; }
    stderr_has "overridden cache dtype" "f32 weights, bf16 KV cache of"
    check "q8_0 cache on f32 weights" 0 "$bin" generate --model "$tmp/s.ckpt" --kv-cache q8_0 --temperature 0 -n 30
    grep -q "^Once upon a time, there was a little girl named Lily" "$tmp/out" || { echo "FAIL: q8_0 cache story"; cat "$tmp/out"; fail=1; }
    stderr_has "q8_0 cache dtype" "f32 weights, q8_0 KV cache of"
    check "sampled with seed" 0 "$bin" generate --model "$tmp/s.ckpt" --prompt "Lily" --temperature 0.9 --top-p 0.9 --top-k 20 --seed 3 -n 20
    cp "$tmp/out" "$tmp/first"
    check "same seed again" 0 "$bin" generate --model "$tmp/s.ckpt" --prompt "Lily" --temperature 0.9 --top-p 0.9 --top-k 20 --seed 3 -n 20
    cmp -s "$tmp/out" "$tmp/first" || { echo "FAIL: same seed gave different text"; fail=1; }
    # Malformed UTF-8 falls back to byte tokens (here 14 tokens for 4 bytes): the KV cache is
    # sized from the prompt's tokens, not its bytes (it was refused: "does not fit the context
    # of 9"; with -n 30 the story was cut at 23 tokens).
    check "non-UTF-8 prompt" 0 "$bin" generate --model "$tmp/s.ckpt" --prompt $'\xff\xff\xff\xff' --temperature 0 -n 3
    stderr_has "non-UTF-8 prompt tokens" "prefill: 14 tokens"
    stderr_has "non-UTF-8 prompt continued" "decode: 3 tokens"
    check "non-UTF-8 prompt, longer" 0 "$bin" generate --model "$tmp/s.ckpt" --prompt $'\xff\xff\xff\xff' \
        --temperature 0 -n 30
    stderr_has "non-UTF-8 prompt not cut short" "decode: 30 tokens"
    check "export gguf" 0 "$bin" convert --to gguf "$tmp/s.ckpt" --output "$tmp/s.gguf"
    head -c 4 "$tmp/s.gguf" | grep -q GGUF || { echo "FAIL: no GGUF magic"; fail=1; }
    check "import gguf, its tokenizer included" 0 "$bin" convert --from gguf "$tmp/s.gguf" --output "$tmp/sg.ckpt"
    check "generate greedy from the GGUF import" 0 "$bin" generate --model "$tmp/sg.ckpt" --temperature 0 -n 256
    cmp -s "$tmp/out" "$fx/stories260K_greedy.txt" || { echo "FAIL: greedy story after GGUF differs"; fail=1; }
else
    echo "stories260K not found: skipping the pretrained checks"
fi
finish "cli generate"
