#!/bin/bash
# `convert --from hf` on config.json files the importer refuses (issues 40 and 46): the
# message names the file and the key or value, the exit status is 1 and nothing is written.
#   - an unsupported model_type (falcon) is named (qwen2's was printed from freed memory, a
#     use-after-free, before qwen2 was a family);
#   - values the checkpoint reader refuses: refused before writing, not by `generate` later;
#   - a rope type cformers does not implement, in transformers 5's rope_parameters.
source "$(dirname "$0")/lib_cli.sh"
fx="$src/tests/fixtures/infer/tiny_hf"

# a copy of the tiny LLaMA with config.json's `from` replaced by `to` (sed expressions)
variant() {
    rm -rf "$tmp/hf" && mkdir -p "$tmp/hf" && cp "$fx/model.safetensors" "$tmp/hf/" &&
        sed "s/$1/$2/" "$fx/config.json" >"$tmp/hf/config.json"
}

refused() { # DESC FROM TO TEXT
    variant "$2" "$3"
    check "$1" 1 "$bin" convert --from hf "$tmp/hf" --output "$tmp/m.ckpt"
    stderr_has "$1" "$tmp/hf/config.json"
    stderr_has "$1" "$4"
    [ ! -e "$tmp/m.ckpt" ] || fail_because "$1: $tmp/m.ckpt written although refused"
}

refused "falcon" '"model_type": "llama"' '"model_type": "falcon"' "model_type 'falcon' is not supported"
refused "max_position_embeddings 2^40" '"max_position_embeddings": 32' '"max_position_embeddings": 1099511627776' \
    "model_config.max_position_embeddings: 1099511627776 is out of range"
refused "pad_token_id -100" '"rope_theta"' '"pad_token_id": -100, "rope_theta"' \
    "model_config.pad_token_id: -100 is out of range"
refused "yarn" '"rope_theta": 10000.0' '"rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0}' \
    "rope_parameters.rope_type 'yarn' is not supported"
refused "attention_bias" '"rope_theta"' '"attention_bias": true, "rope_theta"' "attention_bias: true is not supported"

variant '"rope_theta": 10000.0' '"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}'
check "rope_parameters" 0 "$bin" convert --from hf "$tmp/hf" --output "$tmp/m.ckpt"
finish cli_convert_hf
