#!/usr/bin/env bash
# Does llama.cpp tokenize our GGUF exports as cformers does? For each tokenizer given, trains a
# 1-step tiny model with it (so the checkpoint embeds it), exports to GGUF, and compares the ids
# llama.cpp's llama_tokenize gives on the GGUF (tools/llama_cpp_tokenize.c, built against a
# llama.cpp build) with `cformers tokenizer encode --bos` on the tokenizer file, for a few texts
# (unicode, runs of spaces, tabs and newlines, numbers, contractions).
#   usage: tools/check_gguf_tokenizer_llama_cpp.sh LLAMA_SRC LLAMA_LIBDIR TOKENIZER:VOCAB...
#   e.g.   tools/check_gguf_tokenizer_llama_cpp.sh /tmp/llamacpp/src /tmp/llamacpp/build/bin \
#              ../shared/data/stories260K/tok512.bin:512 ../shared/data/gpt2-tokenizer:50257
# env: BUILD (default build). Prints one line per tokenizer; exits 1 when any differs.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$1 lib=$2
shift 2
bin=${BUILD:-build}/cformers
work=$(mktemp -d /tmp/gguf_tok_check.XXXXXX)
trap 'rm -rf "$work"' EXIT
cc -O1 tools/llama_cpp_tokenize.c -I"$src/include" -I"$src/ggml/include" -L"$lib" -lllama -o "$work/llama_tokenize"
export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" CFORMERS_THREADS=1
texts=("Hello world" $'  two  spaces,   three   and\ttabs\n\nnew lines\n' "unicode: café naïve 日本語 😀!"
       "It's 2026; they'll say: 12345 + 678 = 13023" "    " "the cat sat on the mat")
for _ in $(seq 50); do echo "the cat sat on the mat; they'll say it's there"; done >"$work/text.txt"
status=0
for spec in "$@"; do
    tok=${spec%:*} vocab=${spec##*:} out="$work/$(basename "$tok")"
    "$bin" train --config tiny_shakespeare --train_dataset.data_dir="$work/text.txt" --train_dataset.tokenizer="$tok" \
        --model.model_config.vocab_size="$vocab" --model.model_config.hidden_size=8 --model.model_config.num_layers=1 \
        --model.model_config.num_heads=2 --model.model_config.intermediate_size=16 \
        --model.model_config.max_position_embeddings=16 --runner_config.seq_length=16 --runner_config.batch_size=2 \
        --runner_config.eval_interval=0 --runner_config.sample_interval=0 --lr_schedule.warmup_steps=1 \
        --runner_config.train_steps=1 --runner_config.save_interval=1 --output_dir="$out" --quiet >/dev/null
    "$bin" convert --to gguf "$out/checkpoint_step1.ckpt" --output "$out.gguf" >/dev/null
    "$work/llama_tokenize" "$out.gguf" "${texts[@]}" 2>/dev/null >"$out.llama"
    for t in "${texts[@]}"; do "$bin" tokenizer encode --tokenizer "$tok" --text "$t" --bos; done >"$out.cformers"
    if cmp -s "$out.llama" "$out.cformers"; then
        echo "same ids: $tok"
    else
        echo "DIFFERENT ids: $tok"; diff "$out.llama" "$out.cformers" | head -6; status=1
    fi
done
exit $status
