#!/usr/bin/env bash
# Every subcommand answers --help with exit 0; misuse exits 2 with a one-line reason.
. "$(dirname "$0")/lib_cli.sh"
check "top-level --help" 0 "$bin" --help
check "no command" 2 "$bin"
check "unknown command" 2 "$bin" frobnicate
stderr_has "unknown command message" "unknown command 'frobnicate'"
check "a mistyped command" 2 "$bin" trian --config llama_15m
stderr_has "did you mean" "unknown command 'trian' (did you mean 'train'?"
for sub in train generate convert validate preprocess tokenizer config bench launch serve; do
    check "$sub --help" 0 "$bin" "$sub" --help
    stdout_has "$sub --help" "usage: cformers $sub"
done
finish "cli basics"
