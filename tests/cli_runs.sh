#!/usr/bin/env bash
# Runs in an output directory: a run has an id, in its checkpoints and its metrics, which
# mark each start and resume; a fresh run into a directory holding another run's
# checkpoints is refused unless --overwrite; --resume passes over a corrupt or truncated
# newest checkpoint (with a warning) and a leftover temporary file; a resume that changes
# the model or seq_length is refused naming the key, one that changes the batch size or
# learning rate is logged.
source "$(dirname "$0")/lib_cli.sh"
run="$tmp/run"
tiny_run --output_dir="$run" --runner_config.train_steps=20 --runner_config.save_interval=1
metrics="$run/metrics.jsonl"
# The run id of the last "start" record.
last_run() { sed -n 's/.*"event":"start","time":[^,]*,"run":"\([^"]*\)".*/\1/p' "$metrics" | tail -1; }
one_line() { [ "$(wc -l <"$tmp/err")" = 1 ] || fail_because "$1: the error is not one line: $(cat "$tmp/err")"; }

check "a run of 3 steps" 0 "$bin" train "${tiny[@]}" --steps 3
id=$(last_run)
[ -n "$id" ] || fail_because "no start record with a run id"
grep -q "\"event\":\"start\",.*\"run\":\"$id\",\"step\":0,\"resumed\":false" "$metrics" || fail_because "the start record"
grep -q "\"event\":\"train\",.*\"run\":\"$id\",\"step\":3," "$metrics" || fail_because "train records lack the run id"
grep -aq "\"id\": \"$id\"" "$run/checkpoint_step3.ckpt" || fail_because "the checkpoint metadata lacks the run id"

check "a fresh run over another run's checkpoints" 1 "$bin" train "${tiny[@]}" --steps 1
stderr_has "the refusal names the directory" "$run holds the checkpoints of another run"
stderr_has "the refusal suggests --resume and --overwrite" "--resume continues it, --overwrite starts over"
one_line "fresh run refused"

# The newest checkpoint corrupt (a flipped stretch of tensor data), a temporary file of
# a save that never finished: the resume takes step 2, with a warning naming the file.
size=$(stat -c %s "$run/checkpoint_step3.ckpt")
printf 'XXXXXXXX' | dd of="$run/checkpoint_step3.ckpt" bs=1 seek=$((size / 2)) conv=notrunc 2>/dev/null
head -c 1000 "$run/checkpoint_step2.ckpt" >"$run/checkpoint_step9.ckpt.tmp"
check "resume past a corrupt checkpoint" 0 "$bin" train "${tiny[@]}" --resume --steps 4
stderr_has "the corrupt checkpoint is named" "warning: passing over a checkpoint that does not load: $run/checkpoint_step3.ckpt"
[ "$(last_run)" = "$id" ] || fail_because "the resumed run changed its id: $(last_run), was $id"
grep -q "\"event\":\"start\",.*\"run\":\"$id\",\"step\":2,\"resumed\":true,\"from\":\"$run/checkpoint_step2.ckpt\"" "$metrics" ||
    fail_because "the resume record: $(grep '"start"' "$metrics")"

# A truncated newest checkpoint (a copy cut short) is passed over as well.
head -c 5000 "$run/checkpoint_step4.ckpt" >"$tmp/cut" && mv "$tmp/cut" "$run/checkpoint_step4.ckpt"
check "resume past a truncated checkpoint" 0 "$bin" train "${tiny[@]}" --resume --steps 5
stderr_has "the truncated checkpoint is named" "checkpoint_step4.ckpt"
stdout_has "the resume is reported" "run $id resumed at step 3"

check "resume with another hidden_size" 1 "$bin" train "${tiny[@]}" --resume --model.model_config.hidden_size=64
stderr_has "the changed key is named" "would change model_config.hidden_size from 32 to 64"
one_line "model change refused"
check "resume with another vocab_size" 1 "$bin" train "${tiny[@]}" --resume --model.model_config.vocab_size=300
stderr_has "the changed key is named" "model_config.vocab_size"
check "resume with another seq_length" 1 "$bin" train "${tiny[@]}" --resume --runner_config.seq_length=16
stderr_has "the changed key is named" "would change runner_config.seq_length from 32 to 16"

check "resume with another batch size and lr" 0 "$bin" train "${tiny[@]}" --resume --steps 6 \
    --runner_config.batch_size=4 --lr_schedule.learning_rate=0.0005
stdout_has "the batch size change is logged" "the resume changes runner_config.batch_size: \[before, now\] = \[2,4\]"
stdout_has "the lr change is logged" "the resume changes lr_schedule.learning_rate"
grep -q '"event":"start",.*"changed":{"runner_config.batch_size":\[2,4\]' "$metrics" || fail_because "metrics lack the changes"

check "a fresh run with --overwrite" 0 "$bin" train "${tiny[@]}" --steps 1 --overwrite
[ "$(last_run)" != "$id" ] || fail_because "--overwrite kept the old run id"
[ "$(ls "$run" | grep -c '\.ckpt$')" = 1 ] || fail_because "--overwrite left the old checkpoints: $(ls "$run")"
if command -v mpirun >/dev/null; then
    check "2 ranks: a fresh run over another run's checkpoints" 1 mpirun --oversubscribe --allow-run-as-root -n 2 \
        "$bin" train "${tiny[@]}" --steps 1
    stderr_has "rank 0 refuses, naming the directory" "rank 0 of 2: $run holds the checkpoints of another run"
fi
check "resume with nothing valid" 1 "$bin" train "${tiny[@]}" --output_dir="$tmp/empty" --resume
stderr_has "no checkpoint is named" "$tmp/empty: no checkpoint_step\*.ckpt checkpoint to resume from"
finish "cli runs"
