#!/usr/bin/env bash
# `cformers train`: misuse exits 2 with a one-line reason; a tiny run on a text file trains,
# evaluates, samples, writes metrics and a checkpoint; --resume continues it; a corrupt
# checkpoint, or one of a model with more layers, is refused with exit 1; --dump-batches and --save-initial (the inputs
# tools/torch_train.py replays) write every micro-batch and a step-0 checkpoint that
# resumes into the same run.
set -u
bin="$1"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
check() { # description, expected exit code, command...
    local what="$1" want="$2"; shift 2
    "$@" >"$work/out" 2>&1
    local got=$?
    if [ "$got" != "$want" ]; then
        echo "FAIL: $what: exit $got, want $want"; cat "$work/out"; fail=1
    fi
}
check "no --config" 2 "$bin" train
check "unknown argument" 2 "$bin" train --config tiny_shakespeare --frobnicate
check "bad --steps" 2 "$bin" train --config tiny_shakespeare --steps zero
check "unknown preset" 2 "$bin" train --config no_such_preset
check "--dump-batches without a file" 2 "$bin" train --config tiny_shakespeare --dump-batches
check "--save-initial without a file" 2 "$bin" train --config tiny_shakespeare --save-initial --quiet
check "bad override" 2 "$bin" train --config tiny_shakespeare --runner_config.batch_size=-3
grep -q "runner_config.batch_size" "$work/out" || { echo "FAIL: bad override message lacks the key"; fail=1; }

for i in $(seq 400); do echo "To be, or not to be, that is the question $i:"; done >"$work/text.txt"
tiny=(--config tiny_shakespeare --train_dataset.data_dir="$work/text.txt" --train_dataset.tokenizer= --output_dir="$work/run"
      --model.model_config.hidden_size=32 --model.model_config.num_layers=1 --model.model_config.num_heads=2
      --model.model_config.intermediate_size=64 --model.model_config.max_position_embeddings=32
      --runner_config.seq_length=32 --runner_config.batch_size=2 --runner_config.train_steps=6 --lr_schedule.warmup_steps=2
      --runner_config.log_interval=1 --runner_config.eval_interval=3 --runner_config.eval_steps=1
      --runner_config.sample_interval=6 --runner_config.sample_tokens=8 --runner_config.save_interval=3)
check "tiny run, stopped at step 3" 0 "$bin" train "${tiny[@]}" --steps 3
grep -q "step 3: validation loss" "$work/out" || { echo "FAIL: no validation loss line"; cat "$work/out"; fail=1; }
[ -f "$work/run/checkpoint_step3.ckpt" ] || { echo "FAIL: no checkpoint at step 3"; fail=1; }
check "resume to the end" 0 "$bin" train "${tiny[@]}" --resume
grep -q "resumed at step 3" "$work/out" || { echo "FAIL: resume not reported"; cat "$work/out"; fail=1; }
grep -q "step 6: sample:" "$work/out" || { echo "FAIL: no sample"; fail=1; }
grep -q "peak resident memory" "$work/out" || { echo "FAIL: no memory report"; fail=1; }
# A peak off the estimate by more than 10% (this tiny model's is) says what to plan on.
if grep -q "peak resident memory.*not within 10%" "$work/out"; then
    grep -q "peak resident memory.*not within 10%: .*plan on the" "$work/out" ||
        { echo "FAIL: the memory line is off the estimate and gives no guidance"; grep "peak resident" "$work/out"; fail=1; }
fi
[ "$(grep -c '"event":"train"' "$work/run/metrics.jsonl")" = 6 ] || { echo "FAIL: metrics lack 6 train lines"; fail=1; }

# A checkpoint of a 2-layer model does not load into a config that says 1 layer (its layer 1
# used to be ignored): the architecture comes from load_checkpoint, and the key that
# contradicts it is named.
check "2-layer run" 0 "$bin" train "${tiny[@]}" --model.model_config.num_layers=2 --output_dir="$work/two" --steps 1 --quiet
check "2-layer checkpoint into a 1-layer model" 2 "$bin" train "${tiny[@]}" --output_dir="$work/one" --steps 1 \
    --load_checkpoint="$work/two/checkpoint_step1.ckpt"
grep -q "model.model_config.num_layers: 1 contradicts load_checkpoint .*checkpoint_step1.ckpt, whose model has 2" "$work/out" ||
    { echo "FAIL: contradicting key not named"; cat "$work/out"; fail=1; }

head -c 1000 "$work/run/checkpoint_step6.ckpt" >"$work/bad.ckpt"
check "truncated checkpoint" 1 "$bin" train "${tiny[@]}" --resume "$work/bad.ckpt"
grep -q "bad.ckpt" "$work/out" || { echo "FAIL: error does not name the checkpoint"; cat "$work/out"; fail=1; }
dump=("${tiny[@]}" --runner_config.gradient_accumulation_steps=2 --runner_config.sample_interval=0 --quiet)
check "tiny run with dumps" 0 "$bin" train "${dump[@]}" --output_dir="$work/dumped" \
    --dump-batches "$work/batches.bin" --save-initial "$work/init.ckpt"
# 6 steps x 2 micro-batches + 2 evaluations x 1 batch, each a 16-byte header and 2 x 33 int32 ids.
size=$(stat -c %s "$work/batches.bin" 2>/dev/null)
[ "$size" = $(((6 * 2 + 2) * (16 + 2 * 33 * 4))) ] || { echo "FAIL: batch dump is ${size:-missing} bytes"; fail=1; }
[ -f "$work/batches.bin.tmp" ] && { echo "FAIL: batch dump left its temp file"; fail=1; }
check "resume from the initial checkpoint" 0 "$bin" train "${dump[@]}" --output_dir="$work/replay" --resume "$work/init.ckpt"
losses() { grep -o '"step":[0-9]*,"\(loss\|val_loss\)":[^,}]*' "$1"; }
[ -n "$(losses "$work/dumped/metrics.jsonl")" ] &&
    [ "$(losses "$work/dumped/metrics.jsonl")" = "$(losses "$work/replay/metrics.jsonl")" ] ||
    { echo "FAIL: resuming from the initial checkpoint did not reproduce the run"; fail=1; }
[ $fail = 0 ] && echo "cli train: all passed"
exit $fail
