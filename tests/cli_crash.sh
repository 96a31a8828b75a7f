#!/usr/bin/env bash
# Fault injection (src/train/crash_inject.h): a process that dies in the middle of a
# checkpoint write leaves only a temporary file, never picked: --resume takes the previous
# checkpoint and continues with the uninterrupted run's losses; a rank that aborts at a
# chosen step (alone, and one of 2 ranks) fails the job, and --resume carries on the same.
source "$(dirname "$0")/lib_cli.sh"
ulimit -c 0
tiny_run --runner_config.train_steps=8 --runner_config.save_interval=2
crashed() { # the last check's command was aborted (SIGABRT, or mpirun's failure)
    grep -q "crashing on purpose: $1" "$tmp/err" || fail_because "no crash message for $1: $(cat "$tmp/err")"
}

check "uninterrupted" 0 "$bin" train "${tiny[@]}" --output_dir="$tmp/ref" --quiet

check "the first 2 steps" 0 "$bin" train "${tiny[@]}" --output_dir="$tmp/save" --steps 2 --quiet
CFORMERS_CRASH_IN_SAVE=1 check "a crash in the middle of a checkpoint write" 134 "$bin" train "${tiny[@]}" \
    --output_dir="$tmp/save" --resume --quiet
crashed CFORMERS_CRASH_IN_SAVE
[ -f "$tmp/save/checkpoint_step4.ckpt.tmp" ] || fail_because "no partial file: $(ls "$tmp/save")"
[ ! -e "$tmp/save/checkpoint_step4.ckpt" ] || fail_because "the partial write has the checkpoint's name"
check "resume after the crash" 0 "$bin" train "${tiny[@]}" --output_dir="$tmp/save" --resume
stdout_has "the previous checkpoint is taken" "resumed at step 2 (loss [0-9.]*) from $tmp/save/checkpoint_step2.ckpt"
same_losses "$tmp/ref" "$tmp/save" "resumed after a crash in a checkpoint write"

# Synchronous saves: a background write of step 4 could still be in flight at step 5.
sync=(--callbacks.checkpoint_monitor.async_save=false)
CFORMERS_CRASH_AT_STEP=5 check "a crash at step 5" 134 "$bin" train "${tiny[@]}" "${sync[@]}" --output_dir="$tmp/step" --quiet
crashed CFORMERS_CRASH_AT_STEP
check "resume after the crash at step 5" 0 "$bin" train "${tiny[@]}" --output_dir="$tmp/step" --resume
stdout_has "the newest checkpoint is taken" "resumed at step 4"
same_losses "$tmp/ref" "$tmp/step" "resumed after a crash at step 5"

if command -v mpirun >/dev/null; then
    mpi=(env ASAN_OPTIONS="$mpi_asan_options" mpirun --oversubscribe --allow-run-as-root -x CFORMERS_THREADS=1 -n 2)
    check "2 ranks uninterrupted" 0 "${mpi[@]}" "$bin" train "${tiny[@]}" --output_dir="$tmp/ref2" --quiet
    "${mpi[@]}" -x CFORMERS_CRASH_AT_STEP=3:1 "$bin" train "${tiny[@]}" "${sync[@]}" --output_dir="$tmp/two" --quiet >"$tmp/out" 2>"$tmp/err"
    [ $? != 0 ] || fail_because "2 ranks, rank 1 crashing at step 3: the job exited 0"
    crashed CFORMERS_CRASH_AT_STEP
    check "2 ranks resume after the crash" 0 "${mpi[@]}" "$bin" train "${tiny[@]}" --output_dir="$tmp/two" --resume
    stdout_has "the newest checkpoint is taken" "resumed at step 2"
    same_losses "$tmp/ref2" "$tmp/two" "2 ranks resumed after rank 1 crashed at step 3"
fi
finish "cli crash"
