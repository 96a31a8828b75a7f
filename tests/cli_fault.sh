#!/usr/bin/env bash
# Disk errors seen from the command line (CFORMERS_FAULT, core/fault.h): `convert` and
# `preprocess` that hit ENOSPC / EIO / a short write exit 1 with one line naming the file,
# keep what an earlier run wrote, and leave no temporary file. A thread the system refuses
# to `train` is one line and exit 1 too, not an abort.
. "$(dirname "$0")/lib_cli.sh"
hf="$src/tests/fixtures/infer/tiny_hf"

one_line_naming() { # DESC FILE: one error line (after any progress lines), naming FILE
    local errors
    errors=$(grep '^cformers ' "$tmp/err")
    [ "$(grep -c . <<<"$errors")" = 1 ] || fail_because "$1: not one error line: $(cat "$tmp/err")"
    grep -q -- "$2" <<<"$errors" || fail_because "$1: the error does not name $2: $errors"
}

check "convert" 0 "$bin" convert --from hf "$hf" --output "$tmp/m.ckpt"
cp "$tmp/m.ckpt" "$tmp/before.ckpt"
for fault in write:1:enospc write:3:eio write:4:short; do
    check "convert $fault" 1 env CFORMERS_FAULT=$fault "$bin" convert --from hf "$hf" --output "$tmp/m.ckpt" --dtype bf16
    one_line_naming "convert $fault" "$tmp/m.ckpt"
    cmp -s "$tmp/m.ckpt" "$tmp/before.ckpt" || fail_because "convert $fault: the earlier checkpoint changed"
    [ ! -e "$tmp/m.ckpt.tmp" ] || fail_because "convert $fault: m.ckpt.tmp left behind"
done
check "bad CFORMERS_FAULT" 0 env CFORMERS_FAULT=disk:full "$bin" convert --from hf "$hf" --output "$tmp/n.ckpt"
stderr_has "bad CFORMERS_FAULT" "CFORMERS_FAULT=disk:full"

tok="$data/stories260K/tok512.model"
if [ -e "$tok" ]; then
    head -c 20000 "$src/README.md" >"$tmp/corpus.txt"
    for fault in write:1:enospc write:2:short; do
        check "preprocess $fault" 1 env CFORMERS_FAULT=$fault "$bin" preprocess --input "$tmp/corpus.txt" \
            --tokenizer "$tok" --output "$tmp/rec"
        one_line_naming "preprocess $fault" "$tmp/rec"
        [ -z "$(find "$tmp/rec" -name '*.cfrec*' 2>/dev/null)" ] || fail_because "preprocess $fault: shards left behind"
    done
fi

tiny_run --runner_config.train_steps=2 --output_dir="$tmp/run" --quiet
check "train thread:1" 1 env CFORMERS_FAULT=thread:1 "$bin" train "${tiny[@]}" --context.num_threads=2
[ "$(grep -c . "$tmp/err")" = 1 ] || fail_because "train thread:1: not one line: $(cat "$tmp/err")"
stderr_has "train thread:1" "context.num_threads: thread pool: cannot start thread 2 of 2 (pthread_create: "
finish "cli fault"
