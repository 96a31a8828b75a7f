#!/usr/bin/env bash
# Tokenizers travel with the weights: fine-tuning stories260K (converted from llama2.c) on
# Tiny Shakespeare from a config that names only the checkpoint and the text keeps the
# checkpoint's tokenizer and architecture, so its first sample is readable and its
# checkpoints generate with no --tokenizer; a model trained on raw bytes does the same.
. "$(dirname "$0")/lib_cli.sh"
require_asset stories260K/stories260K.bin
require_asset stories260K/tok512.bin
require_asset tinyshakespeare/input.txt
export CFORMERS_THREADS=1

stories260k_ckpt "$tmp/s260k.ckpt"
cat >"$tmp/finetune.yaml" <<YAML
run_mode: finetune
load_checkpoint: $tmp/s260k.ckpt
output_dir: $tmp/ft
runner_config: {batch_size: 2, seq_length: 64, train_steps: 3, log_interval: 1, eval_interval: 0,
                sample_interval: 1, sample_tokens: 48, save_interval: 3}
lr_schedule: {learning_rate: 1.0e-4, warmup_steps: 1}
train_dataset: {data_dir: $data/tinyshakespeare/input.txt, eval_split: 0.05}
YAML
check "fine-tune from the converted checkpoint" 0 "$bin" train --config "$tmp/finetune.yaml"
stdout_has "weights loaded" "load_checkpoint: loaded 47 tensors (260032 parameters) from $tmp/s260k.ckpt; tokenizer: tok512.bin"
stdout_has "architecture from the checkpoint" "parameters: 260,032"
# The first sample, decoded with the checkpoint's tokenizer: English words, not bytes.
sed -n '/^step 1: sample:/{n;p;q}' "$tmp/out" >"$tmp/sample1"
/usr/bin/python3 - "$tmp/sample1" <<'PY' || fail_because "the first sample is not readable text: $(cat "$tmp/sample1")"
import re, sys
text = open(sys.argv[1], encoding="utf-8", errors="replace").read()
words = re.findall(r"[A-Za-z]+", text)
plain = sum(c.isascii() and (c.isalnum() or c in " .,!?'\"\n-") for c in text)
sys.exit(0 if len(words) >= 8 and plain >= 0.95 * len(text) else 1)
PY
check "generate from the fine-tuned checkpoint, no --tokenizer" 0 "$bin" generate --model "$tmp/ft/checkpoint_step3.ckpt" \
    --prompt "Once upon a time" -n 16 --temperature 0
stdout_has "generated text" "Once upon a time"

# A config that contradicts the checkpoint's architecture: one line naming the key.
check "contradicting architecture" 2 "$bin" train --config "$tmp/finetune.yaml" --model.model_config.hidden_size=128
stderr_has "key named" "model.model_config.hidden_size: 128 contradicts load_checkpoint $tmp/s260k.ckpt, whose model has 64"
[ "$(wc -l <"$tmp/err")" = 1 ] || fail_because "contradiction error is not one line"

# Raw bytes (configs/shakespeare.yaml): the byte vocabulary is embedded like any tokenizer.
bytes=(--config "$src/configs/shakespeare.yaml" --train_dataset.data_dir="$data/tinyshakespeare/input.txt"
       --runner_config.batch_size=2 --runner_config.seq_length=32 --runner_config.train_steps=2
       --runner_config.eval_interval=0 --runner_config.sample_interval=0 --runner_config.save_interval=2
       --lr_schedule.warmup_steps=1 --quiet)
check "byte-level run" 0 "$bin" train "${bytes[@]}" --output_dir="$tmp/bytes"
check "generate from the byte-level checkpoint, no --tokenizer" 0 "$bin" generate \
    --model "$tmp/bytes/shakespeare_step2.ckpt" --prompt "ROMEO:" -n 8 --temperature 0
stdout_has "byte-level prompt echoed" "ROMEO:"
# ... and fine-tuning from it keeps reading the text as bytes with the same vocabulary.
check "fine-tune the byte-level checkpoint" 0 "$bin" train --config "$src/configs/shakespeare.yaml" \
    --load_checkpoint="$tmp/bytes/shakespeare_step2.ckpt" --output_dir="$tmp/bytes2" \
    --train_dataset.data_dir="$data/tinyshakespeare/input.txt" --runner_config.batch_size=2 \
    --runner_config.seq_length=32 --runner_config.train_steps=1 --runner_config.eval_interval=0 \
    --runner_config.sample_interval=0 --runner_config.save_interval=1 --lr_schedule.warmup_steps=1
stdout_has "byte vocabulary carried" "tokenizer: bytes.tokenizer.json"
check "its checkpoint generates" 0 "$bin" generate --model "$tmp/bytes2/shakespeare_step1.ckpt" --prompt "A" -n 4
check "no prompt and no BOS" 1 "$bin" generate --model "$tmp/bytes2/shakespeare_step1.ckpt" -n 4
stderr_has "empty prompt reason" "the prompt is empty and the tokenizer has no BOS token to start from"

finish cli_finetune
