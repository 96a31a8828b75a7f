#!/usr/bin/env bash
# A disk that fills up under a running job (output_dir on a small tmpfs, filled by another
# file): the background checkpoint write fails with a one-line error naming the file,
# training goes on, the earlier checkpoint stays intact, and once space is freed a later
# save succeeds; SIGTERM then ends the run with exit 0 and --resume takes the newest.
# Needs root (mount); skipped otherwise.
source "$(dirname "$0")/lib_cli.sh"
mnt="$tmp/small"
mkdir -p "$mnt"
mount -t tmpfs -o size=4m tmpfs "$mnt" 2>/dev/null || { echo "SKIP: cannot mount a tmpfs (not root?)"; exit 77; }
trap 'umount "$mnt"; rm -rf "$tmp"' EXIT
tiny_run --output_dir="$mnt/run" --runner_config.train_steps=1000000 --runner_config.save_interval=20

# The newest checkpoint step in the run directory, or 0.
newest() { ls "$mnt/run" 2>/dev/null | sed -n 's/^checkpoint_step\([0-9]*\)\.ckpt$/\1/p' | sort -n | tail -1; }
# Waits (60 s at most) until command $1 succeeds.
wait_for() { for _ in $(seq 600); do eval "$1" && return 0; sleep 0.1; done; fail_because "timed out: $1"; return 1; }

"$bin" train "${tiny[@]}" >"$tmp/out" 2>"$tmp/err" &
job=$!
wait_for '[ -n "$(newest)" ]'
dd if=/dev/zero of="$mnt/filler" bs=64k 2>/dev/null # fills the disk
wait_for 'grep -q "was not saved" "$tmp/err"'
grep -q "warning: the checkpoint of step [0-9]* was not saved: .*$mnt/run/checkpoint_step[0-9]*.ckpt.tmp: .*No space left on device" "$tmp/err" ||
    fail_because "the failure does not name the file and the cause: $(cat "$tmp/err")"
failed=$(sed -n 's/.*checkpoint of step \([0-9]*\) was not saved.*/\1/p' "$tmp/err" | head -1)
kept=$(newest)
[ -n "$kept" ] && [ "$kept" -lt "$failed" ] && cp "$mnt/run/checkpoint_step$kept.ckpt" "$tmp/kept.ckpt" ||
    fail_because "no earlier checkpoint is left (newest '$kept', the failed save of step $failed)"
rm "$mnt/filler"
wait_for '[ "$(newest)" -gt "${failed:-0}" ]'
kill -TERM $job
wait $job
got=$?
[ "$got" = 0 ] || { fail_because "SIGTERM after the disk filled: exit $got"; cat "$tmp/err"; }
check "the earlier checkpoint is intact" 0 "$bin" train "${tiny[@]}" --output_dir="$tmp/again" \
    --resume "$tmp/kept.ckpt" --steps $((kept + 1)) --quiet
check "resume after the disk filled" 0 "$bin" train "${tiny[@]}" --resume --steps $(($(newest) + 1)) --quiet
finish "cli disk full"
