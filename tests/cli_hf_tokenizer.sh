#!/usr/bin/env bash
# The tokenizer survives a Hugging Face round trip: `convert --to safetensors` writes it in
# a form transformers' AutoTokenizer loads (tokenizer.model for SentencePiece, a llama2.c
# tokenizer.bin rewritten as one; tokenizer.json for byte-level BPE; tokenizer_config.json
# and special_tokens_map.json), and `convert --from hf` of that export embeds it again.
. "$(dirname "$0")/lib_cli.sh"

# Byte-level (no assets): a model trained on raw text.
tiny_run --output_dir="$tmp/run" --runner_config.train_steps=2 --runner_config.save_interval=2 --quiet
check "tiny byte-level run" 0 "$bin" train "${tiny[@]}"
check "export it" 0 "$bin" convert --to safetensors "$tmp/run/checkpoint_step2.ckpt" --output "$tmp/hf_bytes"
for f in tokenizer.json tokenizer_config.json special_tokens_map.json; do
    [ -f "$tmp/hf_bytes/$f" ] || fail_because "byte-level export lacks $f"
done
grep -q '"tokenizer_class": "PreTrainedTokenizerFast"' "$tmp/hf_bytes/tokenizer_config.json" ||
    fail_because "tokenizer_config.json: $(cat "$tmp/hf_bytes/tokenizer_config.json")"
check "import it back" 0 "$bin" convert --from hf "$tmp/hf_bytes" --output "$tmp/bytes_back.ckpt"
check "inspect the import" 0 "$bin" inspect "$tmp/bytes_back.ckpt"
stdout_has "byte vocabulary back" "tokenizer: tokenizer.json (byte-level-bpe), vocabulary 256"
check "generate from the original" 0 "$bin" generate --model "$tmp/run/checkpoint_step2.ckpt" --prompt "To be" -n 12 --temperature 0
head -1 "$tmp/out" >"$tmp/gen_a"
check "generate from the round trip, no --tokenizer" 0 "$bin" generate --model "$tmp/bytes_back.ckpt" --prompt "To be" -n 12 --temperature 0
head -1 "$tmp/out" >"$tmp/gen_b"
cmp -s "$tmp/gen_a" "$tmp/gen_b" || fail_because "byte-level round trip generates '$(cat "$tmp/gen_b")', not '$(cat "$tmp/gen_a")'"

# SentencePiece: stories260K with llama2.c's tok512.bin (the byte-level part above has run
# either way, so a missing asset skips only this part).
for a in stories260K/stories260K.bin stories260K/tok512.bin; do
    [ -e "$data/$a" ] || { echo "SKIP: the SentencePiece round trip: no $data/$a"; finish cli_hf_tokenizer; }
done
stories260k_ckpt "$tmp/s.ckpt"
check "export stories260K" 0 "$bin" convert --to safetensors "$tmp/s.ckpt" --output "$tmp/hf"
[ -f "$tmp/hf/tokenizer.model" ] || fail_because "no tokenizer.model in the export"
[ -f "$tmp/hf/tok512.bin" ] && fail_because "the llama2.c file was copied as it is (transformers cannot load it)"
grep -q '"bos_token": "<s>"' "$tmp/hf/special_tokens_map.json" || fail_because "special tokens: $(cat "$tmp/hf/special_tokens_map.json")"
grep -q '"tokenizer_class": "LlamaTokenizer"' "$tmp/hf/tokenizer_config.json" || fail_because "no LlamaTokenizer class"
text="Once upon a time, there was a little  girl named Lily.
She loved to play outside in the sunshine!"
check "encode with tok512.bin" 0 "$bin" tokenizer encode --tokenizer "$data/stories260K/tok512.bin" --text "$text" --bos
cp "$tmp/out" "$tmp/ids_bin"
check "encode with the exported tokenizer.model" 0 "$bin" tokenizer encode --tokenizer "$tmp/hf/tokenizer.model" --text "$text" --bos
cmp -s "$tmp/ids_bin" "$tmp/out" || fail_because "exported tokenizer.model encodes differently: $(cat "$tmp/out") vs $(cat "$tmp/ids_bin")"
# The sentencepiece library (what transformers' LlamaTokenizer runs) reads it the same way.
if /usr/bin/python3 -c "import sentencepiece" 2>/dev/null; then
    /usr/bin/python3 - "$tmp/hf/tokenizer.model" "$text" "$tmp/ids_bin" <<'PY' || fail_because "sentencepiece disagrees"
import sys, sentencepiece as spm
sp = spm.SentencePieceProcessor(model_file=sys.argv[1])
want = [int(v) for v in open(sys.argv[3]).read().split()]
got = [sp.bos_id()] + sp.encode(sys.argv[2])
assert got == want, (got, want)
assert (sp.bos_id(), sp.eos_id(), sp.unk_id(), sp.id_to_piece(1)) == (1, 2, 0, "<s>")
PY
fi
check "import the export" 0 "$bin" convert --from hf "$tmp/hf" --output "$tmp/back.ckpt"
check "inspect the import" 0 "$bin" inspect "$tmp/back.ckpt"
stdout_has "tokenizer back" "tokenizer: tokenizer.model (sentencepiece-bpe), vocabulary 512, bos 1, eos 2"
check "generate from the original" 0 "$bin" generate --model "$tmp/s.ckpt" -n 24 --temperature 0
head -1 "$tmp/out" >"$tmp/gen_a"
check "generate from the round trip, no --tokenizer" 0 "$bin" generate --model "$tmp/back.ckpt" -n 24 --temperature 0
head -1 "$tmp/out" >"$tmp/gen_b"
cmp -s "$tmp/gen_a" "$tmp/gen_b" || fail_because "round trip generates '$(cat "$tmp/gen_b")', not '$(cat "$tmp/gen_a")'"

finish cli_hf_tokenizer
