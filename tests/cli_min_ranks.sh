#!/usr/bin/env bash
# `cformers launch --min-ranks`: a 4-rank ZeRO-1 training job on two hosts (tests/fake_mpirun.sh
# runs both here) loses a rank at step 25, and its second host stops answering; the launcher
# restarts the job on the 2 ranks of the host that answers, the trainer keeps the global batch
# (2 ranks x 2 micro-batches for 4 x 1), resumes from the step-20 checkpoint with the ZeRO
# shards re-partitioned, and finishes. With fewer answering ranks than --min-ranks the job
# does not start.
source "$(dirname "$0")/lib_cli.sh"
command -v mpirun >/dev/null || { echo "SKIP: no mpirun"; exit 77; }
export ASAN_OPTIONS="$mpi_asan_options" # every command here is an MPI job

tiny_run --runner_config.train_steps=40 --runner_config.save_interval=10 --parallel_config.optimizer_shard=true \
         --callbacks.checkpoint_monitor.async_save=false --quiet
printf 'localhost slots=2\nghost slots=2\n' >"$tmp/hosts"
# ghost answers until the job has written a checkpoint (so the first start has 4 ranks)
cat >"$tmp/check.sh" <<CHECK
#!/bin/sh
[ "\$1" = localhost ] || ! ls "$tmp/run"/checkpoint_step*.ckpt >/dev/null 2>&1
CHECK
chmod +x "$tmp/check.sh"
launch=(launch -n 4 --hostfile "$tmp/hosts" --mpirun "$src/tests/fake_mpirun.sh" --host-check "$tmp/check.sh")

check "usage: --min-ranks needs a hostfile" 2 "$bin" launch -n 4 --min-ranks 2 -- train --config tiny_shakespeare
stderr_has "names the flag it needs" "needs --hostfile"
check "usage: --min-ranks above -n" 2 "$bin" "${launch[@]}" --min-ranks 5 -- train --config tiny_shakespeare

check "a rank lost and a host down: restarted on 2 ranks" 0 env CFORMERS_CRASH_AT_STEP=25:3 "$bin" "${launch[@]}" \
    --min-ranks 2 --max-restarts 2 --heartbeat-timeout 0 -- train "${tiny[@]}" --output_dir="$tmp/run"
stderr_has "the crash is seen" "restart 1 of 2, resuming"
stderr_has "the down host is left out" "host ghost does not answer"
stderr_has "on fewer ranks" "running 2 of the 4 ranks (--min-ranks 2)"
stderr_has "the global batch is kept" "gradient_accumulation_steps 1 -> 2 keep the global batch of 8 sequences"
grep -q '"restart":1' "$tmp/run/metrics.jsonl" || fail_because "the metrics lack the restart's start record"
grep -q '"ranks":\[4,2\]' "$tmp/run/metrics.jsonl" || { fail_because "the resume does not record 4 -> 2 ranks"; cat "$tmp/run/metrics.jsonl" | grep start; }
[ -f "$tmp/run/checkpoint_step40.ckpt" ] || fail_because "the restarted run did not reach step 40"

check "too few ranks answer" 1 "$bin" "${launch[@]}" --min-ranks 3 -- train "${tiny[@]}" --output_dir="$tmp/run" --resume
stderr_has "says why it does not start" "fewer than --min-ranks 3; not starting the job"
finish "cli min-ranks"
