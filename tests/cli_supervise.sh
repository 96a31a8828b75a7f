#!/usr/bin/env bash
# `cformers launch --max-restarts`: a rank killed with SIGKILL at some step of a 2-rank
# training job; the launcher runs the job again by itself, the run resumes from its newest
# checkpoint (a `start` record with "restart": 1), and its final weights and Adam moments
# are bit-identical to an uninterrupted run's. A run whose command is refused (status 2)
# is not retried. Prints the recovery time (the kill to the first step after the restart).
# A rank that hangs (CFORMERS_HANG_AT_STEP) stops sending heartbeats: the launcher kills the
# job after --heartbeat-timeout and restarts it, and the run ends with the uninterrupted
# run's losses.
source "$(dirname "$0")/lib_cli.sh"
command -v mpirun >/dev/null || { echo "SKIP: no mpirun"; exit 77; }
PYTHON=/usr/bin/python3 # Debian's, with python3-numpy (scripts/install-deps.sh)
"$PYTHON" -c 'import numpy' 2>/dev/null || { echo "SKIP: no numpy for tools/ckpt_reader.py"; exit 77; }
export ASAN_OPTIONS="$mpi_asan_options" # every command here is an MPI job

tiny_run --runner_config.train_steps=1000 --runner_config.save_interval=20 \
         --callbacks.checkpoint_monitor.async_save=false --quiet

check "refused command is not retried" 2 "$bin" launch -n 2 --max-restarts 3 -- train --config tiny_shakespeare --frob
stderr_has "not retried" "not restarting"

check "uninterrupted run" 0 "$bin" launch -n 2 -- train "${tiny[@]}" --output_dir="$tmp/ref"

"$bin" launch -n 2 --max-restarts 2 -- train "${tiny[@]}" --output_dir="$tmp/sup" >"$tmp/sup.out" 2>"$tmp/sup.err" &
job=$!
killed=""
for _ in $(seq 3000); do # kill rank 1 once the run is past its first checkpoint
    if ls "$tmp/sup"/checkpoint_step*.ckpt >/dev/null 2>&1; then
        launcher=$(pgrep -f -- "^mpirun .*--output_dir=$tmp/sup" | head -1)
        victim=$([ -n "$launcher" ] && pgrep -P "$launcher" | tail -1)
        [ -n "$victim" ] && kill -9 "$victim" && killed=$(date +%s.%N) && break
    fi
    sleep 0.02
done
[ -n "$killed" ] || fail_because "found no rank to kill"
timeout 300 tail --pid=$job -f /dev/null
wait $job
got=$?
[ "$got" = 0 ] || { fail_because "the supervised job ended with status $got"; cat "$tmp/sup.err"; }
grep -q "restart 1 of 2, resuming" "$tmp/sup.err" || { fail_because "the launcher did not restart the job"; cat "$tmp/sup.err"; }
grep -q '"restart":1' "$tmp/sup/metrics.jsonl" || fail_because "the metrics lack the restart's start record"

"$PYTHON" - "$src/tools" "$tmp/ref/checkpoint_step1000.ckpt" "$tmp/sup/checkpoint_step1000.ckpt" "$tmp/sup/metrics.jsonl" \
    "$killed" <<'PY' || fail_because "the restarted run's final state differs from the uninterrupted run's"
import json, sys
sys.path.insert(0, sys.argv[1])
import ckpt_reader
a, _ = ckpt_reader.read(sys.argv[2])
b, _ = ckpt_reader.read(sys.argv[3])
names = [n for n in a if not n.startswith("tokenizer")]
bad = [n for n in names if n not in b or a[n].shape != b[n].shape or a[n].tobytes() != b[n].tobytes()]
if bad:
    print("differ:", bad[:5])
    sys.exit(1)
lines = [json.loads(l) for l in open(sys.argv[4])]
start = next(i for i, l in enumerate(lines) if l["event"] == "start" and l.get("restart") == 1)
first = next(l for l in lines[start:] if l["event"] == "train")
print(f"restart: {len(names)} tensors bit-identical to the uninterrupted run; "
      f"kill -9 to the first step after the restart: {first['time'] - float(sys.argv[5]):.1f} s")
PY
# A hung rank: rank 1 stops after step 30 (of 60; checkpoints every 20), rank 0 waits in
# its all-reduce; no heartbeat for 10 s has the launcher kill and restart the job.
check "uninterrupted short run" 0 "$bin" launch -n 2 -- train "${tiny[@]}" --runner_config.train_steps=60 \
    --output_dir="$tmp/ref60"
check "hung rank, restarted" 0 env CFORMERS_HANG_AT_STEP=30:1 "$bin" launch -n 2 --max-restarts 1 \
    --heartbeat-timeout 10 -- train "${tiny[@]}" --runner_config.train_steps=60 --output_dir="$tmp/hung"
stderr_has "the hang is seen" "has sent no heartbeat for"
stderr_has "and the job restarted" "restart 1 of 1, resuming"
same_losses "$tmp/ref60" "$tmp/hung" "the run restarted after a hang"
check "bad --heartbeat-timeout" 2 "$bin" launch -n 2 --heartbeat-timeout -1 -- train --config tiny_shakespeare
finish "cli supervise"
