#!/usr/bin/env bash
# Signals to `cformers train`, as schedulers send them: SIGTERM ends a run at the next step
# boundary with a checkpoint and exit 0 (SIGINT, Ctrl-C, the same with exit 130 and says so), and --resume continues with the losses of an
# uninterrupted run, alone and on 2 ranks (a signal to one rank stops both at the same
# step); a second signal ends the process at once; SIGUSR1 saves and training goes on.
source "$(dirname "$0")/lib_cli.sh"
# train_steps spans far more steps than the runs take: a signal ends them.
tiny_run --runner_config.train_steps=1000000 --runner_config.save_interval=0 --quiet
# Waits (60 s at most) until run directory $1 has recorded step $2.
wait_step() {
    for _ in $(seq 600); do
        [ "$(train_losses "$1" 2>/dev/null | tail -1 | cut -d' ' -f1)" -ge "$2" ] 2>/dev/null && return 0
        sleep 0.1
    done
    fail_because "$1 did not reach step $2"
    return 1
}
# The steps named by the "stopped ... at step N" lines of $tmp/err, one per line.
stop_steps() { sed -n 's/.*stopped by .* at step \([0-9]*\) with a checkpoint.*/\1/p' "$tmp/err"; }
# Waits for background job $1 and checks its exit status is $2.
wait_exit() {
    wait "$1"
    local got=$?
    [ "$got" = "$2" ] || { fail_because "$3: exit $got, want $2"; cat "$tmp/out" "$tmp/err"; }
}

# Trains one process into $1, sends signal $3 once step $2 is logged, and checks the exit
# status $4, the stop line (grep pattern $5) and a checkpoint at the stop step, left in $s.
stop_by_signal() {
    "$bin" train "${tiny[@]}" --output_dir="$1" >"$tmp/out" 2>"$tmp/err" &
    local job=$!
    wait_step "$1" "$2" && kill "-$3" $job
    wait_exit $job "$4" "SIG$3 to one process"
    grep -q "$5" "$tmp/err" || fail_because "SIG$3: no stop message: $(cat "$tmp/err")"
    s=$(stop_steps)
    [ -n "$s" ] && [ -f "$1/checkpoint_step$s.ckpt" ] || fail_because "SIG$3: no checkpoint at the stop step '$s'"
}

# One process, SIGTERM: a checkpoint at the stop step, exit 0, then resume == uninterrupted.
stop_by_signal "$tmp/a" 3 TERM 0 "stopped by SIGTERM at step"
grep -q "\"event\":\"stopped\".*\"step\":$s," "$tmp/a/metrics.jsonl" || fail_because "metrics lack the stop"
check "resume after SIGTERM" 0 "$bin" train "${tiny[@]}" --output_dir="$tmp/a" --resume --steps $((s + 3))
check "uninterrupted run" 0 "$bin" train "${tiny[@]}" --output_dir="$tmp/b" --steps $((s + 3))
same_losses "$tmp/a" "$tmp/b" "one process stopped by SIGTERM and resumed"

# SIGINT (Ctrl-C): the same checkpoint, but exit 130, and the stop line says so.
stop_by_signal "$tmp/i" 2 INT 130 "stopped by SIGINT at step .*(exit 130: interrupted)"

# A second signal while the first is being handled ends the process at once.
"$bin" train "${tiny[@]}" --output_dir="$tmp/c" >"$tmp/out" 2>"$tmp/err" &
job=$!
wait_step "$tmp/c" 2 && kill -INT $job && kill -TERM $job
wait $job
got=$?
[ "$got" = 130 ] || [ "$got" = 143 ] || fail_because "a second signal: exit $got, want 130 or 143"

# SIGUSR1: a checkpoint, and the run goes on.
"$bin" train "${tiny[@]}" --output_dir="$tmp/u" >"$tmp/out" 2>"$tmp/err" &
job=$!
wait_step "$tmp/u" 2 && kill -USR1 $job
for _ in $(seq 300); do ls "$tmp/u"/checkpoint_step*.ckpt >/dev/null 2>&1 && break; sleep 0.1; done
u=$(ls "$tmp/u" | sed -n 's/^checkpoint_step\([0-9]*\)\.ckpt$/\1/p' | head -1)
[ -n "$u" ] || fail_because "SIGUSR1 wrote no checkpoint"
wait_step "$tmp/u" $((u + 3)) && kill -TERM $job
wait_exit $job 0 "SIGTERM after SIGUSR1"
grep -q "\"event\":\"checkpoint\",.*\"step\":$u," "$tmp/u/metrics.jsonl" || fail_because "metrics lack the SIGUSR1 checkpoint"
[ "$(stop_steps)" -gt "$u" ] || fail_because "the run did not go on after SIGUSR1"

# Two ranks, SIGTERM to one of them: both stop after the same step with one checkpoint.
if command -v mpirun >/dev/null; then
    mpi=(env ASAN_OPTIONS="$mpi_asan_options" mpirun --oversubscribe --allow-run-as-root -x CFORMERS_THREADS=1 -n 2)
    "${mpi[@]}" "$bin" train "${tiny[@]}" --output_dir="$tmp/d" >"$tmp/out" 2>"$tmp/err" &
    job=$!
    victim=$(mpirun_ranks "--output_dir=$tmp/d" | tail -1)
    [ -n "$victim" ] && wait_step "$tmp/d" 3 && kill -TERM "$victim" || fail_because "found no rank to signal"
    wait_exit $job 0 "SIGTERM to one of 2 ranks"
    [ "$(stop_steps | wc -l)" = 2 ] && [ "$(stop_steps | sort -u | wc -l)" = 1 ] ||
        fail_because "the 2 ranks did not both stop at one step: $(cat "$tmp/err")"
    grep -q "stopped by SIGTERM" "$tmp/err" && grep -q "stopped by a signal to another rank" "$tmp/err" ||
        fail_because "the stop messages do not say which rank was signalled: $(cat "$tmp/err")"
    s=$(stop_steps | head -1)
    [ -n "$s" ] && [ -f "$tmp/d/checkpoint_step$s.ckpt" ] || fail_because "2 ranks: no checkpoint at step '$s'"
    check "2 ranks resume after SIGTERM" 0 "${mpi[@]}" "$bin" train "${tiny[@]}" --output_dir="$tmp/d" --resume --steps $((s + 3))
    check "2 ranks uninterrupted" 0 "${mpi[@]}" "$bin" train "${tiny[@]}" --output_dir="$tmp/e" --steps $((s + 3))
    same_losses "$tmp/d" "$tmp/e" "2 ranks stopped by SIGTERM and resumed"
else
    echo "no mpirun: the 2-rank part is skipped"
fi
finish "cli signals"
