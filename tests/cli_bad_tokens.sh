#!/usr/bin/env bash
# A record shard holding a token id past the vocabulary stops `cformers train` with exit 1
# and one line naming the shard, the token's offset and the id (the loader checks every id
# when it opens a shard; the process never aborts). The same shard before the edit trains.
. "$(dirname "$0")/lib_cli.sh"
require_asset stories260K/tok512.model
tok="$data/stories260K/tok512.model"
PYTHON=/usr/bin/python3 # Debian's, with python3-numpy (scripts/install-deps.sh)
"$PYTHON" -c 'import numpy' 2>/dev/null || { echo "SKIP: no numpy for tools/record_set_token.py"; exit 77; }
head -c 20000 "$data/tinyshakespeare/input.txt" >"$tmp/corpus.txt" 2>/dev/null ||
    for i in $(seq 400); do echo "To be, or not to be, that is the question $i:"; done >"$tmp/corpus.txt"
check "preprocess" 0 "$bin" preprocess --input "$tmp/corpus.txt" --tokenizer "$tok" --output "$tmp/rec" \
    --valid-fraction 0 --quiet
shard="$tmp/rec/train-00000.cfrec"
tiny_run --train_dataset.data_dir="$tmp/rec" --train_dataset.tokenizer="$tok" --model.model_config.vocab_size=512 \
    --runner_config.train_steps=2 --output_dir="$tmp/run" --quiet
check "train on the intact shard" 0 "$bin" train "${tiny[@]}"

offset=$("$PYTHON" "$src/tools/record_set_token.py" "$shard" 10 600) || fail_because "cannot edit $shard"
check "train on a shard with id 600 of a vocabulary of 512" 1 "$bin" train "${tiny[@]}" --output_dir="$tmp/bad"
stderr_has "bad id" "train-00000.cfrec: offset $offset: token 10 has id 600 outside the vocabulary of 512"
[ "$(grep -c . "$tmp/err")" = 1 ] || fail_because "bad id: not one line: $(cat "$tmp/err")"
finish "cli bad tokens"
