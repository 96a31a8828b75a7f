#!/usr/bin/env bash
# `cformers train` with callbacks.profile_monitor: profiling steps 2..3 of a tiny run on a
# text file prints the per-op table (op types such as matmul and adamw, the slowest nodes)
# and writes output_dir/profile.json and the Chrome trace, with no temp files left; an
# unwritable timeline path fails before training with an error naming the file; a window
# outside the run says so; a save in the window shows on the checkpoint writer's lane, and
# the loader's batches on their workers' lanes. tests/test_profile.c parses the files and checks their contents.
source "$(dirname "$0")/lib_cli.sh"

for i in $(seq 400); do echo "To be, or not to be, that is the question $i:"; done >"$tmp/text.txt"
tiny=(--config tiny_shakespeare --train_dataset.data_dir="$tmp/text.txt" --train_dataset.tokenizer=
      --model.model_config.hidden_size=32 --model.model_config.num_layers=1 --model.model_config.num_heads=2
      --model.model_config.intermediate_size=64 --model.model_config.max_position_embeddings=32
      --runner_config.seq_length=32 --runner_config.batch_size=2 --runner_config.train_steps=4 --lr_schedule.warmup_steps=2
      --runner_config.log_interval=1 --callbacks.profile_monitor.enable=true
      --callbacks.profile_monitor.start_step=2 --callbacks.profile_monitor.stop_step=3)

check "help mentions the profile" 0 "$bin" train --help
stdout_has "help mentions the profile" "profile_monitor"

check "profiled run" 0 "$bin" train "${tiny[@]}" --output_dir="$tmp/run" --callbacks.profile_monitor.timeline=trace.json
stdout_has "table title" "profile of steps 2-3"
stdout_has "files named" "profile: wrote $tmp/run/profile.json and $tmp/run/trace.json"
for text in "data loader" forward backward optimizer "calls/step" "slowest nodes" matmul adamw; do
    stdout_has "profile table" "$text"
done
# The table follows step 3's progress line.
grep -A1 "^step 3/4" "$tmp/out" | grep -q "profile of steps" || fail_because "table not right after step 3"
[ -s "$tmp/run/trace.json" ] || fail_because "no timeline output_dir/trace.json"
grep -q '"traceEvents"' "$tmp/run/trace.json" || fail_because "timeline lacks traceEvents"
grep -q '"ph":"X"' "$tmp/run/trace.json" || fail_because "timeline lacks complete events"
grep -q '"step_ms"' "$tmp/run/profile.json" 2>/dev/null || fail_because "no output_dir/profile.json"
grep -q '"event":"profile"' "$tmp/run/metrics.jsonl" || fail_because "metrics lack the profile event"
ls "$tmp/run" | grep -q '\.tmp$' && fail_because "temp files left: $(ls "$tmp/run")"

# A checkpoint at step 2 (in the window), on record shards: the trace has the writer's lane
# (whether the loader's worker filled a batch inside so short a window depends on the
# scheduler: tests/test_profile.c checks its lane).
check "tokenizer" 0 "$bin" tokenizer train --input "$tmp/text.txt" --vocab-size 300 --output "$tmp/tok.json" --quiet
sed 'n;n;n;G' "$tmp/text.txt" >"$tmp/docs.txt" # a document every 4 lines
check "shards" 0 "$bin" preprocess --input "$tmp/docs.txt" --tokenizer "$tmp/tok.json" --output "$tmp/shards" \
    --valid-fraction 0.1 --quiet
check "profiled run with a save" 0 "$bin" train "${tiny[@]}" --output_dir="$tmp/saves" --runner_config.save_interval=2 \
    --train_dataset.data_dir="$tmp/shards" --train_dataset.tokenizer="$tmp/tok.json" --model.model_config.vocab_size=300
for name in "checkpoint writer" "checkpoint write"; do
    grep -q "\"name\":\"$name\"" "$tmp/saves/timeline.json" 2>/dev/null || fail_because "the trace lacks '$name'"
done

check "unwritable timeline" 1 "$bin" train "${tiny[@]}" --output_dir="$tmp/bad" \
    --callbacks.profile_monitor.timeline=no_such_dir/trace.json
stderr_has "unwritable timeline" "no_such_dir/trace.json"
grep -q "^step 1/" "$tmp/out" && fail_because "trained before failing on the timeline path"

check "window after the run" 0 "$bin" train "${tiny[@]}" --output_dir="$tmp/late" --steps 1
stdout_has "window after the run" "no step of this run is in the window 2-3"
[ -e "$tmp/late/profile.json" ] && fail_because "profile.json written without profiled steps"

check "profile off" 0 "$bin" train "${tiny[@]}" --output_dir="$tmp/off" --callbacks.profile_monitor.enable=false
grep -q "profile of steps" "$tmp/out" && fail_because "table printed with the profile off"
ls "$tmp/off" | grep -q "profile\|timeline" && fail_because "profile files written with the profile off"
finish "cli profile"
