#!/usr/bin/env bash
# Writes tests/fixtures/mindformers/release/: MindFormers' own llama2 YAML files, as they
# ship in its release wheel (1.3.2, the last with configs/llama2; Apache-2.0, see
# https://gitee.com/mindspore/mindformers), those that need no model or pipeline
# parallelism and no parameter-efficient tuning (model_parallel 1, pipeline_stage 1, no
# pet_config): the ones cformers must load as they are (tests/cli_mindformers.sh).
#   usage: tools/mindformers_release_yamls.sh [WHEEL]   (default: pip download mindformers==1.3.2)
set -euo pipefail
cd "$(dirname "$0")/.."
wheel=${1:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ -z "$wheel" ]; then
    pip download mindformers==1.3.2 --no-deps -d "$work" >/dev/null
    wheel=$(ls "$work"/mindformers-1.3.2-*.whl)
fi
(cd "$work" && unzip -q "$wheel" 'configs/llama2/*.yaml')
out=tests/fixtures/mindformers/release
rm -rf "$out" && mkdir -p "$out"
for f in "$work"/configs/llama2/*.yaml; do
    grep -qE '^  model_parallel: 1( |$)' "$f" && grep -qE '^  pipeline_stage: 1( |$)' "$f" && ! grep -q pet_config "$f" || continue
    cp "$f" "$out/"
done
echo "$(ls "$out" | wc -l) files in $out"
