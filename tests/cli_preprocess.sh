#!/usr/bin/env bash
# `cformers preprocess`: a run on Tiny Shakespeare with progress, identical output for
# 1 and 2 workers, and exit codes for misuse and bad input.
. "$(dirname "$0")/lib_cli.sh"
require_asset stories260K/tok512.model
tok="$data/stories260K/tok512.model"
check "no arguments" 2 "$bin" preprocess
check "unknown option" 2 "$bin" preprocess --frob
check "bad workers" 2 "$bin" preprocess --input a --tokenizer "$tok" --output "$tmp/x" --workers zero
check "bad compression" 2 "$bin" preprocess --input a --tokenizer "$tok" --output "$tmp/x" --compress lz4
check "missing input" 1 "$bin" preprocess --input "$tmp/nope.txt" --tokenizer "$tok" --output "$tmp/x"
grep -q "nope.txt" "$tmp/err" || { echo "FAIL: error does not name the input"; fail=1; }
printf '\n\n' >"$tmp/empty.txt"
check "empty input" 1 "$bin" preprocess --input "$tmp/empty.txt" --tokenizer "$tok" --output "$tmp/e"
grep -q "no documents" "$tmp/err" || { echo "FAIL: empty input message: $(cat "$tmp/err")"; fail=1; }

head -c 300000 "$data/tinyshakespeare/input.txt" >"$tmp/corpus.txt"
for w in 1 2; do
    check "preprocess workers=$w" 0 "$bin" preprocess --input "$tmp/corpus.txt" --tokenizer "$tok" \
        --output "$tmp/out$w" --workers $w --compress zstd --shard-tokens 40000 --valid-fraction 0.05
done
grep -q "preprocess:" "$tmp/err" || { echo "FAIL: no progress output"; fail=1; }
ls "$tmp/out1"/train-00001.cfrec "$tmp/out1"/valid-00000.cfrec >/dev/null || fail=1
for f in "$tmp/out1"/*.cfrec; do
    cmp -s "$f" "$tmp/out2/$(basename "$f")" || { echo "FAIL: $(basename "$f") differs between 1 and 2 workers"; fail=1; }
done
check "existing records" 1 "$bin" preprocess --input "$tmp/corpus.txt" --tokenizer "$tok" --output "$tmp/out1"
check "output in a directory not made yet" 0 "$bin" preprocess --input "$tmp/corpus.txt" --tokenizer "$tok" \
    --output "$tmp/new/nested/data" --quiet
ls "$tmp/new/nested/data"/train-*.cfrec >/dev/null 2>&1 || { echo "FAIL: no shards under the new nested directory"; fail=1; }
finish "cli preprocess"
