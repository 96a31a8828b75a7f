#!/usr/bin/env bash
# `cformers config show` on hostile configs: sizes whose products overflow or exceed the
# per-tensor limit exit 1 with one line naming file:line:key (it aborted, exit 134, while
# allocating the RoPE table), and a config with control characters in a string prints as
# YAML that `config show` loads back unchanged.
. "$(dirname "$0")/lib_cli.sh"

cat >"$tmp/big.yaml" <<'YAML'
model:
  model_config:
    vocab_size: 32000
    hidden_size: 1048576
    num_layers: 2
    num_heads: 2
runner_config:
  seq_length: 16777216
  batch_size: 1048576
YAML
check "products past the machine" 2 "$bin" config show "$tmp/big.yaml"
stderr_has "names the file, line and key" "big.yaml:2: model.model_config.intermediate_size: one MLP weight would take"
[ "$(wc -l <"$tmp/err")" = 1 ] || fail_because "error is not one line: $(cat "$tmp/err")"

check "a string with control characters" 0 "$bin" config show tiny_shakespeare "--output_dir=out/a
b	c$(printf '\033')[1m"
stdout_has "escaped" 'output_dir: "out/a\\nb\\tc\\x1B\[1m"'
yaml_part() { sed '/^parameters: /,$d' "$1"; } # the config, without the memory table after it
yaml_part "$tmp/out" >"$tmp/printed.yaml"
check "the printed config loads back" 0 "$bin" config show "$tmp/printed.yaml"
yaml_part "$tmp/out" | cmp -s - "$tmp/printed.yaml" ||
    fail_because "printed config changed on reload: $(yaml_part "$tmp/out" | diff "$tmp/printed.yaml" -)"

check "a byte that is not UTF-8" 2 "$bin" config show tiny_shakespeare "--output_dir=x$(printf '\377')"
stderr_has "names the override" "output_dir: byte 1 is not UTF-8"

finish cli_config_hostile
