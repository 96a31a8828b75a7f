#!/bin/bash
# MindFormers YAML as it is: `config import` prints the native config with a warning line per
# key that has no effect; the LLaMA-2 7B pretrain fixture scaled down by overrides trains 20
# steps; epochs: 1 with train_steps unset runs one pass over the data; a warmup longer than
# the run is refused.
source "$(dirname "$0")/lib_cli.sh"
fx="$src/tests/fixtures/mindformers"

check "import pretrain_llama2_7b, summarised" 0 "$bin" config import "$fx/pretrain_llama2_7b.yaml"
[ "$(grep -c 'no effect here' "$tmp/err")" = 1 ] || fail_because "the inert keys are not one line: $(head -3 "$tmp/err")"
stderr_has "the summary names file and count" "pretrain_llama2_7b.yaml: 45 keys have no effect here"
check "import pretrain_llama2_7b --verbose" 0 "$bin" config import "$fx/pretrain_llama2_7b.yaml" --verbose
stdout_has "intermediate_size from multiple_of" "intermediate_size: 11008"
stdout_has "seq_length from model_config" "seq_length: 4096"
stdout_has "dataset_dir" 'data_dir: "/data/wiki4096"'
stderr_has "one line per inert key" "pretrain_llama2_7b.yaml:120: context.mode: has no effect here"
[ "$(grep -c 'cformers config: warning: .*\(has no effect here\|float32 is used instead\)' "$tmp/err")" = "$(wc -l <"$tmp/err")" ] || fail_because "stderr holds more than warnings"
stderr_has "the release file's float16 master weights: float32, one line" \
    "pretrain_llama2_7b.yaml:151: model.model_config.param_init_type: float16 asked; float32 is used instead"
"$bin" config import "$fx/pretrain_llama2_7b.yaml" >"$tmp/native.yaml" 2>/dev/null
check "the imported config loads back, silently" 0 "$bin" config import "$tmp/native.yaml"
[ -s "$tmp/err" ] && fail_because "native config warned: $(cat "$tmp/err")"
cmp -s "$tmp/out" "$tmp/native.yaml" || fail_because "import of the imported config differs"
check "mindformers-keys" 0 "$bin" config mindformers-keys
sed -n '/^<!-- mindformers-keys -->$/,/^<!-- \/mindformers-keys -->$/p' "$src/docs/mindformers.md" | sed '1d;$d' |
    diff - "$tmp/out" >/dev/null || fail_because "docs/mindformers.md's table differs from \`cformers config mindformers-keys\`"
for f in finetune_llama2_7b finetune_llama3_8b run_gpt2; do
    check "import $f" 0 "$bin" config import "$fx/$f.yaml"
done
# MindFormers' own llama2 release files that need no model parallelism or LoRA
# (tools/mindformers_release_yamls.sh) load as they are: exit 0, the precision keys asking
# for less than cformers uses one warning each, the inert keys one summary line.
n=0
for f in "$fx"/release/*.yaml; do
    n=$((n + 1))
    check "config show release $(basename "$f")" 0 "$bin" config show "$f"
    stderr_has "release $(basename "$f"): inert keys summarised" "keys have no effect here"
    [ "$(grep -c . "$tmp/err")" -le 4 ] || fail_because "release $(basename "$f"): $(grep -c . "$tmp/err") warning lines"
done
[ $n -ge 12 ] || fail_because "only $n MindFormers release files"
printf 'model:\n  model_config:\n    pet_config: {pet_type: ptuning2}\n    type: Nope\nrunner_config:\n  batch: 2\n' >"$tmp/bad.yaml"
check "all problems in one pass" 2 "$bin" train --config "$tmp/bad.yaml"
stderr_has "first problem" "bad.yaml:3: model.model_config.pet_config.pet_type: 'ptuning2' is not supported (only lora)"
stderr_has "second problem" "bad.yaml:4: model.model_config.type: 'Nope'"
stderr_has "third problem" "bad.yaml:6: runner_config.batch: unknown key"

export CFORMERS_THREADS=1
for i in $(seq 120); do echo "To be, or not to be, that is the question $i:"; done >"$tmp/text.txt"
small=(--config "$fx/pretrain_llama2_7b.yaml" --train_dataset.data_dir="$tmp/text.txt" --train_dataset.tokenizer=
       --model.model_config.hidden_size=32 --model.model_config.num_layers=1 --model.model_config.num_heads=2
       --model.model_config.vocab_size=256 --model.model_config.compute_dtype=float32 --model.model_config.bos_token_id=-1
       --model.model_config.eos_token_id=-1 --model.model_config.pad_token_id=-1
       --runner_config.seq_length=32 --runner_config.batch_size=2 --runner_config.gradient_accumulation_steps=1
       --parallel_config.data_parallel=0 --runner_config.log_interval=1 --callbacks.summary_monitor.summary_dir=
       --quiet)
check "scaled-down LLaMA-2 7B file trains 20 steps" 0 "$bin" train "${small[@]}" --output_dir="$tmp/run20" \
    --runner_config.train_steps=20
[ "$(train_losses "$tmp/run20" | wc -l)" = 20 ] || fail_because "want 20 train records, got $(train_losses "$tmp/run20" | wc -l)"
[ -f "$tmp/run20/llama2_7b_step20.ckpt" ] || ls "$tmp/run20" | grep -q 'llama2_7b.*20' ||
    fail_because "no checkpoint with CheckpointMonitor's prefix: $(ls "$tmp/run20")"

# epochs: 1 with train_steps unset is one pass over the text: bytes / (batch x seq) steps.
steps=$(( $(wc -c <"$tmp/text.txt") / (2 * 32) ))
check "epochs 1" 0 "$bin" train "${small[@]}" --output_dir="$tmp/epoch" --runner_config.epochs=1 \
    --runner_config.save_interval=0
[ "$(train_losses "$tmp/epoch" | wc -l)" = "$steps" ] ||
    fail_because "epochs 1: want $steps steps, got $(train_losses "$tmp/epoch" | wc -l)"

# On records, epochs: 1 is the split's steps per epoch: (tokens + one EOS per document - 1)
# / seq_length / batch; the schedule spans them (the last step's lr is near lr_end).
if [ -f "$data/stories260K/tok512.model" ]; then
    head -c 12000 "$data/tinyshakespeare/input.txt" >"$tmp/small.txt" 2>/dev/null ||
        for i in $(seq 400); do echo "To be, or not to be, that is the question $i."; echo; done >"$tmp/small.txt"
    "$bin" preprocess --input "$tmp/small.txt" --tokenizer "$data/stories260K/tok512.model" --output "$tmp/rec" \
        --workers 1 >"$tmp/pre.out" 2>&1 || fail_because "preprocess: $(cat "$tmp/pre.out")"
    sed -n 's/.*train \([0-9]*\) docs \/ \([0-9]*\) tokens.*/\1 \2/p' "$tmp/pre.out" | tail -1 >"$tmp/counts"
    read -r docs tokens <"$tmp/counts"
    want=$(( (tokens + docs - 1) / 32 / 4 ))
    check "epochs 1 over records" 0 "$bin" train --config stories260k --train_dataset.data_dir="$tmp/rec" \
        --train_dataset.tokenizer="$data/stories260K/tok512.model" --runner_config.seq_length=32 \
        --runner_config.batch_size=4 --runner_config.train_steps=0 --runner_config.epochs=1 \
        --runner_config.eval_interval=0 --runner_config.sample_interval=0 --runner_config.log_interval=1 \
        --lr_schedule.warmup_steps=1 --lr_schedule.lr_end=0 --output_dir="$tmp/recrun" --quiet
    got=$(train_losses "$tmp/recrun" | wc -l)
    [ "$got" = "$want" ] && [ "$want" -gt 0 ] || fail_because "epochs 1 over records: want $want steps, got $got"
    grep '"event":"train"' "$tmp/recrun/metrics.jsonl" | tail -1 | grep -q '"lr":[0-9.]*e-' ||
        fail_because "the schedule does not end at the last step of the epoch"
else
    echo "SKIP (part): no $data/stories260K/tok512.model for epochs over records"
fi

check "warmup longer than the run" 1 "$bin" train "${small[@]}" --output_dir="$tmp/warm" \
    --runner_config.train_steps=5 --lr_schedule.warmup_ratio=0 --lr_schedule.warmup_steps=6
stderr_has "warmup error" "lr_schedule.warmup_steps: a warmup of 6 steps is longer than the 5-step run"
# run_mode eval on a checkpoint prints the validation loss the training run reported at that step.
loud=("${small[@]:0:${#small[@]}-1}") # without --quiet, which is last
check "train with evaluation" 0 "$bin" train "${loud[@]}" --output_dir="$tmp/evalrun" --runner_config.train_steps=20 \
    --runner_config.eval_interval=10 --runner_config.eval_steps=2 --train_dataset.eval_split=0.1 \
    --runner_config.save_interval=10 --callbacks.checkpoint_monitor.keep_checkpoint_max=0
want=$(sed -n 's/.*step 10: validation loss \([0-9.]*\).*/\1/p' "$tmp/out" | head -1)
ckpt=$(ls "$tmp/evalrun"/*step10*.ckpt 2>/dev/null | head -1)
check "run_mode eval" 0 "$bin" train "${small[@]}" --output_dir="$tmp/evalonly" --run_mode=eval \
    --load_checkpoint="$ckpt" --runner_config.eval_steps=2 --train_dataset.eval_split=0.1
[ -n "$want" ] && grep -q "validation loss $want," "$tmp/out" ||
    fail_because "run_mode eval: want validation loss '$want', got: $(cat "$tmp/out" "$tmp/err")"
check "run_mode eval without a checkpoint" 2 "$bin" train "${small[@]}" --run_mode=eval --train_dataset.eval_split=0.1
stderr_has "eval needs a checkpoint" "load_checkpoint: run_mode eval needs the checkpoint"
check "run_mode predict without a checkpoint" 2 "$bin" train "${small[@]}" --run_mode=predict
stderr_has "predict needs a checkpoint" "load_checkpoint: run_mode predict needs the checkpoint to generate with"
check "config show of a predict file without its checkpoint" 0 "$bin" config show "$fx/pretrain_llama2_7b.yaml" --run_mode=predict
stdout_has "the predict config is shown" "run_mode: predict"

# run_mode predict generates: greedy (MindFormers' do_sample: False) as `cformers generate`.
if [ -f "$data/stories260K/stories260K.bin" ]; then
    "$bin" convert --from llama2c "$data/stories260K/stories260K.bin" --tokenizer "$data/stories260K/tok512.bin" \
        --output "$tmp/s.ckpt" >/dev/null 2>&1 || fail_because "convert stories260K"
    printf 'Once upon a time\nLily\n' >"$tmp/prompts.txt"
    check "run_mode predict" 0 "$bin" train --config stories260k --run_mode=predict --load_checkpoint="$tmp/s.ckpt" \
        --predict.input_data="$tmp/prompts.txt" --predict.max_new_tokens=60
    cp "$tmp/out" "$tmp/predicted"
    : >"$tmp/want"
    while read -r p; do
        "$bin" generate --model "$tmp/s.ckpt" --prompt "$p" --temperature 0 -n 60 2>/dev/null >>"$tmp/want"
    done <"$tmp/prompts.txt"
    cmp -s "$tmp/predicted" "$tmp/want" || { fail_because "predict differs from generate"; diff "$tmp/predicted" "$tmp/want" | head; }
else
    echo "SKIP (part): no $data/stories260K/stories260K.bin for run_mode predict"
fi
finish cli_mindformers
