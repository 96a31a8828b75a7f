#!/usr/bin/env bash
# Background checkpoints (callbacks.checkpoint_monitor.async_save): a checkpoint written
# while training goes on holds the state of its step (a run resumed from it continues
# with the uninterrupted run's losses, alone and on 2 ranks with ZeRO-1), the losses
# match a run saving synchronously; a failed write is reported in one line naming the
# file, keeps the earlier checkpoints, and training goes on to a later save that
# succeeds; keep_every_n_steps keeps every M-th checkpoint besides the last K.
source "$(dirname "$0")/lib_cli.sh"
tiny_run --runner_config.train_steps=8 --runner_config.save_interval=2 --quiet

check "background saves" 0 "$bin" train "${tiny[@]}" --output_dir="$tmp/bg"
for s in 4 6 8; do [ -f "$tmp/bg/checkpoint_step$s.ckpt" ] || fail_because "no checkpoint of step $s"; done
[ "$(grep -c '"event":"checkpoint",.*"background":true' "$tmp/bg/metrics.jsonl")" = 4 ] ||
    fail_because "metrics lack 4 background checkpoint records"
check "synchronous saves" 0 "$bin" train "${tiny[@]}" --output_dir="$tmp/sync" --callbacks.checkpoint_monitor.async_save=false
grep -q '"event":"checkpoint",.*"background":false' "$tmp/sync/metrics.jsonl" || fail_because "no synchronous record"
same_losses "$tmp/bg" "$tmp/sync" "background and synchronous saves" 1
check "resume from a background checkpoint" 0 "$bin" train "${tiny[@]}" --output_dir="$tmp/again" \
    --resume "$tmp/bg/checkpoint_step4.ckpt"
same_losses "$tmp/bg" "$tmp/again" "resumed from the checkpoint of step 4, written while steps 5.. trained" 5

# A write that fails (a directory stands where the temporary file goes).
check "the first 2 steps" 0 "$bin" train "${tiny[@]}" --output_dir="$tmp/fail" --steps 2
mkdir "$tmp/fail/checkpoint_step4.ckpt.tmp"
check "a failed background write" 0 "$bin" train "${tiny[@]}" --output_dir="$tmp/fail" --resume
stderr_has "the failure names the file" "warning: the checkpoint of step 4 was not saved: $tmp/fail/checkpoint_step4.ckpt"
[ "$(grep -c 'was not saved' "$tmp/err")" = 1 ] || fail_because "the failure is not one line: $(cat "$tmp/err")"
for s in 2 6 8; do [ -f "$tmp/fail/checkpoint_step$s.ckpt" ] || fail_because "failed write: no checkpoint of step $s"; done
grep -q '"event":"checkpoint_failed",.*"step":4' "$tmp/fail/metrics.jsonl" || fail_because "metrics lack the failure"

check "retention" 0 "$bin" train "${tiny[@]}" --output_dir="$tmp/keep" --runner_config.save_interval=1 \
    --runner_config.train_steps=7 --callbacks.checkpoint_monitor.keep_checkpoint_max=2 \
    --callbacks.checkpoint_monitor.keep_every_n_steps=3
[ "$(ls "$tmp/keep" | grep '\.ckpt$' | tr '\n' ' ')" = "checkpoint_step3.ckpt checkpoint_step6.ckpt checkpoint_step7.ckpt " ] ||
    fail_because "keep 2 and every 3rd of 7: $(ls "$tmp/keep")"

if command -v mpirun >/dev/null; then
    mpi=(env ASAN_OPTIONS="$mpi_asan_options" mpirun --oversubscribe --allow-run-as-root -x CFORMERS_THREADS=1 -n 2)
    zero=(--parallel_config.optimizer_shard=true --parallel_config.bucket_size_mb=0.01)
    check "2 ranks, ZeRO-1, background saves" 0 "${mpi[@]}" "$bin" train "${tiny[@]}" "${zero[@]}" --output_dir="$tmp/z"
    check "2 ranks resume from step 4" 0 "${mpi[@]}" "$bin" train "${tiny[@]}" "${zero[@]}" --output_dir="$tmp/z2" \
        --resume "$tmp/z/checkpoint_step4.ckpt"
    same_losses "$tmp/z" "$tmp/z2" "2 ranks with ZeRO-1 resumed from a background checkpoint" 5
fi
finish "cli background save"
