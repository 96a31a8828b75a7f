#!/usr/bin/env bash
# Makes tests/fixtures/gguf/tiny_q4_k_m.gguf and .logits: a tiny LLaMA (hidden 64, 1 layer,
# MLP 256, GQA 4/2 heads, the 301-token GPT-2-style tokenizer of tests/fixtures/data/gpt2_tiny)
# trained a few steps by cformers, exported to GGUF f32, quantized by llama.cpp's own
# quantizer to Q4_K_M (which with these shapes writes q6_K, q5_0 and q8_0 tensors: rows of 64
# are too short for K-quants' 256, so llama.cpp falls back), and the logits llama.cpp computes
# with it for a fixed token sequence. test_gguf_quants imports the file and checks that
# cformers' logits match llama.cpp's.
#   usage: tools/make_gguf_quant_model.sh LLAMA_SRC LLAMA_LIBDIR [OUT_DIR]
#   e.g.   tools/make_gguf_quant_model.sh /tmp/llamacpp/llama_cpp_python-0.3.36/vendor/llama.cpp \
#              /tmp/llamacpp/build/bin
# env: BUILD (default build). llama.cpp comes from bench/llamacpp_build.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$1 lib=$2 out=${3:-tests/fixtures/gguf}
bin=${BUILD:-build}/cformers
work=$(mktemp -d /tmp/gguf_quant_model.XXXXXX)
trap 'rm -rf "$work"' EXIT
for tool in quantize logits; do
    cc -O1 "tools/llama_cpp_$tool.c" -I"$src/include" -I"$src/ggml/include" -L"$lib" -lllama -o "$work/$tool"
done
export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" CFORMERS_THREADS=1
for i in $(seq 400); do echo "To be, or not to be, that is the question $i:"; done >"$work/text.txt"
"$bin" train --config tiny_shakespeare --train_dataset.data_dir="$work/text.txt" \
    --train_dataset.tokenizer=tests/fixtures/data/gpt2_tiny --model.model_config.vocab_size=301 \
    --model.model_config.hidden_size=64 --model.model_config.num_layers=1 --model.model_config.num_heads=4 \
    --model.model_config.num_kv_heads=2 --model.model_config.intermediate_size=256 \
    --model.model_config.max_position_embeddings=32 --runner_config.seq_length=32 --runner_config.batch_size=2 \
    --runner_config.eval_interval=0 --runner_config.sample_interval=0 --lr_schedule.warmup_steps=2 \
    --runner_config.train_steps=20 --runner_config.save_interval=20 --output_dir="$work/run" --quiet >/dev/null
"$bin" convert --to gguf "$work/run/checkpoint_step20.ckpt" --output "$work/f32.gguf" >/dev/null 2>&1
"$work/quantize" "$work/f32.gguf" "$out/tiny_q4_k_m.gguf" 15 >"$work/quantize.log" 2>&1 || { cat "$work/quantize.log"; exit 1; }
grep -o "converting to [a-z0-9_A-Z]*\|type [a-z0-9_A-Z]*, size" "$work/quantize.log" | sort | uniq -c || true
"$work/logits" "$out/tiny_q4_k_m.gguf" "$out/tiny_q4_k_m.logits" 1 17 42 7 99 250 3 64 128 5 200 11 300 0 77 19 \
    2>/dev/null
ls -l "$out"/tiny_q4_k_m.*
