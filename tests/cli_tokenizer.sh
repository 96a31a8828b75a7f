#!/usr/bin/env bash
# `cformers tokenizer`: encode/decode round trip, train, and exit codes for misuse.
. "$(dirname "$0")/lib_cli.sh"
require_asset gpt2-tokenizer
check "no action" 2 "$bin" tokenizer
check "unknown action" 2 "$bin" tokenizer frob
check "encode without --tokenizer" 2 "$bin" tokenizer encode --text hi
check "train without --output" 2 "$bin" tokenizer train --input x --vocab-size 300
check "tiny vocab" 2 "$bin" tokenizer train --input x --vocab-size 10 --output y
# --vocab-size and --threads are parsed strictly, with a range (atoi took 300x as 300 and
# 99999999999 as 1215752191, sizing the trainer's tables from it).
for bad in 99999999999 300x -5 ""; do
    check "vocab size '$bad'" 2 "$bin" tokenizer train --input x --vocab-size "$bad" --output y
    stderr_has "vocab size '$bad' named" "--vocab-size: '$bad' is not an integer in 258.."
    [ "$(wc -l <"$tmp/err")" -eq 1 ] || fail_because "vocab size '$bad': not one line"
done
check "threads 0" 2 "$bin" tokenizer train --input x --vocab-size 300 --threads 0 --output y
stderr_has "threads named" "--threads: '0' is not an integer in 1..1024"
# A hostile tokenizer file is refused with one line naming the file and field, exit 1.
printf '{"added_tokens": [{"id": 4294967295, "content": "<s>"}], "pre_tokenizer": {"type": "ByteLevel"},
 "model": {"type": "BPE", "vocab": {}, "merges": []}}' >"$tmp/hostile.json"
check "hostile tokenizer.json" 1 "$bin" tokenizer encode --tokenizer "$tmp/hostile.json" --text hi
stderr_has "hostile tokenizer.json named" "hostile.json: added_tokens\[0\]: id 4294967295"
[ "$(wc -l <"$tmp/err")" -eq 1 ] || fail_because "hostile tokenizer.json: not one line"
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
