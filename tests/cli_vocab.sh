#!/usr/bin/env bash
# Tokenizer, record shards and model must agree before the first step (issue 43): shards made
# with the 512-token tokenizer trained with a 1000-token one, or with another 512-token one,
# or a tokenizer larger than the model, exit 1 with one line naming both sides and save
# nothing; the checkpoint's model_config bos/eos ids are its embedded tokenizer's; --resume
# and fine-tuning take the checkpoint's tokenizer (the preset's path need not exist), unless
# --train_dataset.tokenizer= names another on the command line.
source "$(dirname "$0")/lib_cli.sh"
require_asset stories260K/tok512.model
require_asset tinyshakespeare/input.txt
export CFORMERS_THREADS=1

head -c 300000 "$data/tinyshakespeare/input.txt" >"$tmp/corpus.txt"
check "preprocess with tok512" 0 "$bin" preprocess --input "$tmp/corpus.txt" --tokenizer "$data/stories260K/tok512.model" \
    --output "$tmp/rec512" --valid-fraction 0.05
check "a 1000-token BPE" 0 "$bin" tokenizer train --input "$tmp/corpus.txt" --vocab-size 1000 --output "$tmp/tok1000.json" --quiet
check "another 512-token BPE" 0 "$bin" tokenizer train --input "$tmp/corpus.txt" --vocab-size 512 --output "$tmp/bpe512.json" --quiet

shape=(--model.model_config.hidden_size=32 --model.model_config.num_layers=1
       --model.model_config.num_heads=2 --model.model_config.intermediate_size=64
       --model.model_config.max_position_embeddings=32 --runner_config.seq_length=32 --runner_config.batch_size=2
       --runner_config.train_steps=2 --runner_config.log_interval=1 --runner_config.eval_interval=0
       --runner_config.sample_interval=0 --runner_config.save_interval=2 --lr_schedule.warmup_steps=1)
small=(--config tiny_shakespeare "${shape[@]}")
one_line() { [ "$(wc -l <"$tmp/err")" = 1 ] || fail_because "$1: not one line: $(cat "$tmp/err")"; }
no_step() { grep -q "^step 1" "$tmp/out" && fail_because "$1: a step ran"; [ -e "$2" ] && ls "$2" | grep -q ckpt &&
    fail_because "$1: a checkpoint was saved"; true; }

# the issue's case: 512-token shards, a 1000-token tokenizer, a 512-token model
check "1000-token tokenizer, 512-token model" 1 "$bin" train "${small[@]}" --train_dataset.data_dir="$tmp/rec512" \
    --train_dataset.tokenizer="$tmp/tok1000.json" --output_dir="$tmp/a"
stderr_has "tokenizer side" "train_dataset.tokenizer $tmp/tok1000.json has 1000 tokens"
stderr_has "model side" "model_config.vocab_size is 512"
one_line "tokenizer over the model"
no_step "tokenizer over the model" "$tmp/a"
# ... with a model that would hold it: the shards' 512 against the tokenizer's 1000
check "512-token shards, 1000-token tokenizer" 1 "$bin" train "${small[@]}" --train_dataset.data_dir="$tmp/rec512" \
    --train_dataset.tokenizer="$tmp/tok1000.json" --model.model_config.vocab_size=1000 --output_dir="$tmp/b"
stderr_has "shards side" "$tmp/rec512: the train shards were made with a tokenizer of 512 tokens"
stderr_has "tokenizer side" "train_dataset.tokenizer $tmp/tok1000.json with 1000"
one_line "shards against the tokenizer"
no_step "shards against the tokenizer" "$tmp/b"
# the same size, another vocabulary: the shards' fingerprint tells
check "another 512-token tokenizer" 1 "$bin" train "${small[@]}" --train_dataset.data_dir="$tmp/rec512" \
    --train_dataset.tokenizer="$tmp/bpe512.json" --output_dir="$tmp/c"
stderr_has "fingerprint" "the train shards were made with another tokenizer of 512 tokens (fingerprint"
stderr_has "its name" "than the run's, train_dataset.tokenizer $tmp/bpe512.json"
one_line "another tokenizer"
# a text file encoded with a tokenizer the model cannot embed
check "text, tokenizer over the model" 1 "$bin" train "${small[@]}" --train_dataset.data_dir="$tmp/corpus.txt" \
    --train_dataset.tokenizer="$tmp/tok1000.json" --output_dir="$tmp/d"
stderr_has "text: both sides" "has 1000 tokens but model_config.vocab_size is 512"

# the matching tokenizer trains (named in a config file, as a preset names it); its
# checkpoint's bos/eos ids are the tokenizer's
cp "$data/stories260K/tok512.model" "$tmp/tok.model"
cat >"$tmp/run.yaml" <<YAML
model: {model_config: {arch: llama, vocab_size: 512}}
output_dir: $tmp/ok
train_dataset: {data_dir: $tmp/rec512, tokenizer: $tmp/tok.model}
YAML
check "shards with their tokenizer" 0 "$bin" train --config "$tmp/run.yaml" "${shape[@]}" --runner_config.train_steps=4 --steps 2
ids() { "$bin" inspect "$1" --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
m, t = d["model_config"], d["tokenizer"]
print(m["bos_token_id"], m["eos_token_id"], t["bos"], t["eos"])'; }
[ "$(ids "$tmp/ok/checkpoint_step2.ckpt")" = "1 2 1 2" ] || fail_because "ids of the tok512 run: $(ids "$tmp/ok/checkpoint_step2.ckpt")"
# a BPE whose specials are elsewhere: the preset's 1/2 would disagree; the checkpoint has the tokenizer's
check "records of a BPE" 0 "$bin" preprocess --input "$tmp/corpus.txt" --tokenizer "$tmp/bpe512.json" --output "$tmp/recbpe"
check "train on them" 0 "$bin" train --config llama_15m "${shape[@]}" --model.model_config.vocab_size=512 \
    --train_dataset.data_dir="$tmp/recbpe" --train_dataset.tokenizer="$tmp/bpe512.json" --output_dir="$tmp/bpe"
stdout_has "the change is said" "model_config.eos_token_id 2 -> 511, the tokenizer's (train_dataset.tokenizer $tmp/bpe512.json)"
set -- $(ids "$tmp/bpe/checkpoint_step2.ckpt")
[ "$1 $2" = "$3 $4" ] && [ "$2" != 2 ] || fail_because "config ids $1 $2 differ from the embedded tokenizer's $3 $4"

# --resume takes the checkpoint's tokenizer: the config's file is gone (issue 43 item 4)
rm "$tmp/tok.model"
check "resume without the config's tokenizer file" 0 "$bin" train --config "$tmp/run.yaml" "${shape[@]}" \
    --runner_config.train_steps=4 --resume
stdout_has "resumed" "resumed at step 2"
stdout_has "the checkpoint's tokenizer, said" "train_dataset.tokenizer $tmp/tok.model is not read: the tokenizer embedded in"
[ "$(ids "$tmp/ok/checkpoint_step4.ckpt")" = "1 2 1 2" ] || fail_because "the resumed run's checkpoint"
# ... unless one is named on the command line: it is used, and checked
check "resume with a named tokenizer" 1 "$bin" train --config "$tmp/run.yaml" "${shape[@]}" \
    --runner_config.train_steps=6 --resume --train_dataset.tokenizer="$tmp/tok1000.json"
stderr_has "the named one is checked" "train_dataset.tokenizer $tmp/tok1000.json has 1000 tokens"
# fine-tuning from the checkpoint: its tokenizer, not the config's (missing) file
cat >"$tmp/ft.yaml" <<YAML
run_mode: finetune
load_checkpoint: $tmp/ok/checkpoint_step4.ckpt
output_dir: $tmp/ft
train_dataset: {data_dir: $tmp/rec512, tokenizer: $tmp/tok.model}
runner_config: {seq_length: 32, batch_size: 2, train_steps: 1, log_interval: 1, eval_interval: 0, sample_interval: 0,
                save_interval: 1}
lr_schedule: {warmup_steps: 0}
YAML
check "fine-tune with the checkpoint's tokenizer" 0 "$bin" train --config "$tmp/ft.yaml"
stdout_has "tokenizer loaded" "tokenizer: tok.model"
# ... and a fine-tuning on shards of another tokenizer is refused naming the checkpoint's
check "fine-tune on another tokenizer's shards" 1 "$bin" train --config "$tmp/ft.yaml" \
    --train_dataset.data_dir="$tmp/recbpe" --output_dir="$tmp/ft2"
stderr_has "checkpoint side" "than the run's, the tokenizer embedded in $tmp/ok/checkpoint_step4.ckpt (tok.model)"
one_line "fine-tune on another tokenizer's shards"
# run_mode predict: the checkpoint's tokenizer too
check "predict with the checkpoint's tokenizer" 0 "$bin" train --config "$tmp/ft.yaml" --run_mode=predict \
    --predict.input_data="ROMEO:" --predict.max_new_tokens=4
stdout_has "predicted" "ROMEO:"
finish "cli vocab"
