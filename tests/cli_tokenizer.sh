#!/usr/bin/env bash
# `cformers tokenizer`: encode/decode round trip, train, and exit codes for misuse.
. "$(dirname "$0")/lib_cli.sh"
require_asset gpt2-tokenizer
check "no action" 2 "$bin" tokenizer
check "unknown action" 2 "$bin" tokenizer frob
check "encode without --tokenizer" 2 "$bin" tokenizer encode --text hi
check "train without --output" 2 "$bin" tokenizer train --input x --vocab-size 300
check "tiny vocab" 2 "$bin" tokenizer train --input x --vocab-size 10 --output y
check "missing tokenizer file" 1 "$bin" tokenizer encode --tokenizer "$tmp/none.model" --text hi
grep -q "none.model" "$tmp/err" || { echo "FAIL: error does not name the file"; fail=1; }

check "gpt2 encode" 0 "$bin" tokenizer encode --tokenizer "$data/gpt2-tokenizer" --text "Hello world"
[ "$(cat "$tmp/out")" = "15496 995" ] || { echo "FAIL: gpt2 ids: $(cat "$tmp/out")"; fail=1; }
check "llama decode" 0 "$bin" tokenizer decode --tokenizer "$data/llama2c-tokenizer/tokenizer.model" --ids "1 15043 3186"
[ "$(cat "$tmp/out")" = "Hello world" ] || { echo "FAIL: llama decode: $(cat "$tmp/out")"; fail=1; }
check "decode bad id" 2 "$bin" tokenizer decode --tokenizer "$data/gpt2-tokenizer" --ids "99999999"

head -c 100000 "$data/tinyshakespeare/input.txt" >"$tmp/corpus.txt"
check "train" 0 "$bin" tokenizer train --input "$tmp/corpus.txt" --vocab-size 400 --output "$tmp/tok.json" --threads 2
grep -q "tokenizer train:" "$tmp/err" || { echo "FAIL: train shows no progress"; fail=1; }
echo "To be, or not to be" | "$bin" tokenizer encode --tokenizer "$tmp/tok.json" >"$tmp/ids" || fail=1
"$bin" tokenizer decode --tokenizer "$tmp/tok.json" <"$tmp/ids" >"$tmp/back" || fail=1
[ "$(cat "$tmp/back")" = "To be, or not to be" ] || { echo "FAIL: trained round trip: $(cat "$tmp/back")"; fail=1; }
finish "cli tokenizer"
