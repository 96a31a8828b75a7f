#!/usr/bin/env bash
# One exit-status rule for every command (README, "The cformers command"): 2 when the
# command line or the config is wrong (an unknown command or flag, a missing or bad value,
# a config that does not parse or validate, a config file or preset that is not there),
# 1 when a well-formed command fails (a model, data or tokenizer file missing, unreadable
# or corrupt, or the run itself failing); each with a one-line reason. `config show`,
# `config import` and `train` say the same of the same bad config.
. "$(dirname "$0")/lib_cli.sh"
one_line() { [ "$(grep -c . "$tmp/err")" = 1 ] || fail_because "$1: not one line: $(cat "$tmp/err")"; }

# Misuse, for every subcommand `cformers --help` lists: an unknown flag.
commands=$("$bin" --help | sed -n '/^commands:/,/^$/s/^  \([a-z]*\) .*/\1/p')
[ "$(echo "$commands" | wc -w)" -ge 10 ] || fail_because "cformers --help lists only: $commands"
for c in $commands; do
    check "$c --frobnicate" 2 "$bin" "$c" --frobnicate
    one_line "$c --frobnicate"
done
check "an unknown command" 2 "$bin" trian
stderr_has "an unknown command" "did you mean 'train'"

# Bad configs: the same status and reason from config show, config import and train.
printf 'model:\n  model_config:\n    hidden_size: [1\n' >"$tmp/syntax.yaml"
printf 'runner_config:\n  batch_sise: 8\n' >"$tmp/unknown_key.yaml"
printf 'runner_config:\n  batch_size: many\n' >"$tmp/bad_value.yaml"
for cfg in "$tmp/syntax.yaml" "$tmp/unknown_key.yaml" "$tmp/bad_value.yaml" "$tmp/missing.yaml" lama2_7b; do
    reasons=()
    for cmd in "config show" "config import" "train --config"; do
        # shellcheck disable=SC2086 # the command's words
        check "$cmd $(basename "$cfg")" 2 "$bin" $cmd "$cfg"
        one_line "$cmd $(basename "$cfg")"
        reasons+=("$(sed 's/^cformers [a-z]*: //' "$tmp/err")")
    done
    [ "${reasons[0]}" = "${reasons[1]}" ] && [ "${reasons[0]}" = "${reasons[2]}" ] ||
        fail_because "$(basename "$cfg"): the commands give different reasons: ${reasons[*]}"
done
check "a bad override" 2 "$bin" train --config tiny_shakespeare --runner_config.batch_size=0
check "a bad override, config show" 2 "$bin" config show tiny_shakespeare --runner_config.batch_size=0

# Bad data: files that are not there or not what they claim.
printf 'not a model' >"$tmp/junk.ckpt"
check "generate, no such model" 1 "$bin" generate --model "$tmp/none.ckpt" -n 1
check "generate, junk model" 1 "$bin" generate --model "$tmp/junk.ckpt" -n 1
one_line "generate, junk model"
check "inspect, junk model" 1 "$bin" inspect "$tmp/junk.ckpt"
check "validate, no such model" 1 "$bin" validate --model "$tmp/none.ckpt" --reference "$tmp/none.logits"
check "convert, no such input" 1 "$bin" convert --from hf "$tmp/none" --output "$tmp/x.ckpt"
check "tokenizer encode, no such tokenizer" 1 "$bin" tokenizer encode --tokenizer "$tmp/none.json" --text hi
check "preprocess, no such input" 1 "$bin" preprocess --input "$tmp/none.txt" --tokenizer "$tmp/none.json" --output "$tmp/d"
check "serve, no such model" 1 "$bin" serve --model "$tmp/none.ckpt" --port 0
tiny_run --steps 1
check "train, data that is not there" 1 "$bin" train "${tiny[@]}" --train_dataset.data_dir="$tmp/none" --output_dir="$tmp/run"
one_line "train, data that is not there"
stderr_has "train, data that is not there: the key to override" "train_dataset.data_dir: $tmp/none: No such file or directory (give another with --train_dataset.data_dir="
# The README states the rule.
grep -q "status 2 when the command line or the config is wrong" "$src/README.md" ||
    fail_because "the README does not state the exit-status rule"
finish "cli exit codes"
