#!/usr/bin/env bash
# `cformers config`: list, show (presets, files, overrides), keys, and one-line errors
# with exit 2 for misuse and 1 for a bad config.
set -u
bin="$1"
src="${CFORMERS_SOURCE_DIR:-$(dirname "$0")/..}"
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
fail=0
run() { # expected exit code, command...
    local want="$1"; shift
    "$@" >"$out" 2>"$err"
    local got=$?
    if [ "$got" != "$want" ]; then
        echo "FAIL: $*: exit $got, want $want"; cat "$out" "$err"; fail=1
    fi
}
expect() { # file, text it must hold
    grep -qF -- "$2" "$1" || { echo "FAIL: expected '$2' in:"; cat "$1"; fail=1; }
}
one_line_error() {
    [ "$(wc -l <"$err")" = 1 ] || { echo "FAIL: error is not one line:"; cat "$err"; fail=1; }
}

run 0 "$bin" config --help
expect "$out" "usage: cformers config list"

run 0 "$bin" config list
for preset in llama2_7b llama2_13b llama2_70b llama3_8b gpt2 gpt2_medium gpt2_large gpt2_xl \
              llama_15m llama_42m llama_110m tiny_shakespeare; do
    expect "$out" "$preset"
done
# docs/config.md shows the same listing.
while IFS= read -r line; do
    grep -qxF -- "$line" "$src/docs/config.md" || { echo "FAIL: docs/config.md lacks the preset line '$line'"; fail=1; }
done <"$out"

run 0 "$bin" config show llama2_70b
expect "$out" "parameters: 68,976,648,192"
expect "$out" "    num_kv_heads: 8"
expect "$out" "optimizer state (AdamW m, v; f32)"
expect "$out" "activations (saved for backward)"
expect "$out" "planned activation arena"

# With recomputation the arena row also gives the arena without it.
run 0 "$bin" config show llama_15m --recompute_config.recompute=true
expect "$out" "activations (saved for backward)"
expect "$out" "full recompute"
expect "$out" "MiB without recomputation ("
run 0 "$bin" config show llama_15m --recompute_config.recompute=true --recompute_config.recompute_layers=2 \
    --recompute_config.select_recompute=true
expect "$out" "first 2 of 6 layers recomputed, selective in the others"

# Presets resolve from any working directory.
(cd / && "$bin" config show gpt2 >"$out" 2>"$err") || { echo "FAIL: preset from /"; cat "$err"; fail=1; }
expect "$out" "parameters: 124,439,808"

run 0 "$bin" config show llama_15m --runner_config.batch_size=8 --model.model_config.compute_dtype=bf16
expect "$out" "  batch_size: 8"
expect "$out" "compute_dtype: bfloat16"
expect "$out" "batch 8 x seq_length 256, compute bf16"

# The printed YAML is a config file: it reads back to the same output.
printed=$(mktemp --suffix=.yaml)
"$bin" config show llama3_8b | sed '/^parameters:/,$d' >"$printed"
run 0 "$bin" config show "$printed"
expect "$out" "parameters: 8,030,261,248"
rm -f "$printed"

for file in "$src"/configs/*.yaml; do
    run 0 "$bin" config show "$file"
done

run 0 "$bin" config keys
expect "$out" '| `runner_config.batch_size` | integer |'
# docs/config.md carries the same table.
sed -n '/^<!-- keys -->$/,/^<!-- \/keys -->$/p' "$src/docs/config.md" | sed '1d;$d' | diff - "$out" >/dev/null ||
    { echo "FAIL: docs/config.md's key table differs from \`cformers config keys\`"; fail=1; }

# Misuse: exit 2 and a one-line reason.
run 2 "$bin" config
one_line_error
run 2 "$bin" config frobnicate
expect "$err" "unknown action 'frobnicate'"
run 2 "$bin" config show
expect "$err" "show needs a preset NAME or a YAML FILE"
run 2 "$bin" config show gpt2 --verbos
expect "$err" "unknown option '--verbos'"

# Bad configs: exit 2 (misuse, as train says of them; README), one line naming the place and the key.
run 2 "$bin" config show lama2_7b
expect "$err" "did you mean llama2_7b?"
one_line_error
run 2 "$bin" config show gpt2 --runner_config.batch_sise=8
expect "$err" "override '--runner_config.batch_sise=8': runner_config.batch_sise: unknown key (did you mean runner_config.batch_size?)"
one_line_error
run 2 "$bin" config show "$src/tests/fixtures/config/indivisible_heads.yaml"
expect "$err" "indivisible_heads.yaml:6: model.model_config.num_heads: hidden_size 100 is not divisible by num_heads 3"
one_line_error

# Presets name the shared assets through CFORMERS_DATA_DIR (../shared/data when unset).
CFORMERS_DATA_DIR=/elsewhere/data run 0 "$bin" config show tiny_shakespeare
expect "$out" '/elsewhere/data/stories260K/tok512.model'
(unset CFORMERS_DATA_DIR; "$bin" config show tiny_shakespeare) | grep -q '"../shared/data/stories260K/tok512.model"' ||
    { echo "FAIL: without CFORMERS_DATA_DIR the preset does not use ../shared/data"; fail=1; }

[ $fail = 0 ] && echo "cli config: all passed"
exit $fail
