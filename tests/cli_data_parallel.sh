#!/usr/bin/env bash
# `mpirun -n 2 cformers train` as a user runs it: rank 0 alone prints, writes metrics and
# checkpoints (the metrics carry the communication figures, the Chrome trace a
# communication lane); a resume on 2 ranks continues; parallel_config.data_parallel that
# is not the job's size is a one-line error; model_parallel 2 trains as one process does and
# so do 2 pipeline stages (both at once are refused, named); a rank killed with SIGKILL makes the whole
# job exit with an error within seconds instead of hanging.
source "$(dirname "$0")/lib_cli.sh"
command -v mpirun >/dev/null || { echo "SKIP: no mpirun"; exit 77; }
mpi=(env ASAN_OPTIONS="$mpi_asan_options" mpirun --oversubscribe --allow-run-as-root -x CFORMERS_THREADS=1 -n 2)

tiny_run --output_dir="$tmp/run" --runner_config.train_steps=6 --runner_config.eval_interval=3 \
         --runner_config.eval_steps=1 --runner_config.sample_interval=6 --runner_config.sample_tokens=8 \
         --runner_config.save_interval=3 --parallel_config.bucket_size_mb=0.01

check "2 ranks, stopped at step 3" 0 "${mpi[@]}" "$bin" train "${tiny[@]}" --steps 3 \
    --callbacks.profile_monitor.enable=true --callbacks.profile_monitor.start_step=2 --callbacks.profile_monitor.stop_step=3
grep -q '"cat":"comm"' "$tmp/run/timeline.json" || fail_because "the trace has no communication lane"
stdout_has "validation loss printed once" "step 3: validation loss"
[ "$(grep -c 'step 3: validation loss' "$tmp/out")" = 1 ] || fail_because "the validation loss was printed by both ranks"
[ -f "$tmp/run/checkpoint_step3.ckpt" ] || fail_because "no checkpoint at step 3"
grep -q '"ranks":2' "$tmp/run/metrics.jsonl" || fail_because "metrics lack the ranks"
grep -q '"comm_bytes_sent":[1-9]' "$tmp/run/metrics.jsonl" || fail_because "metrics lack the bytes sent"
check "2 ranks resume to the end" 0 "${mpi[@]}" "$bin" train "${tiny[@]}" --resume
stdout_has "resume reported" "resumed at step 3"
[ "$(grep -c '"event":"train"' "$tmp/run/metrics.jsonl")" = 6 ] || fail_because "metrics lack 6 train lines"

check "data_parallel is not the job's size" 1 "${mpi[@]}" "$bin" train "${tiny[@]}" --parallel_config.data_parallel=4
stderr_has "the mismatch is named" "parallel_config.data_parallel is 4 but the job has 2 processes"
# Tensor parallelism: 2 ranks as one tensor group train as one process does (losses
# within 1e-5 as logged), one rank prints, the checkpoint is the single-process format (one
# process resumes it); a size the group cannot cut is refused, named.
check "model_parallel 2 trains" 0 "${mpi[@]}" "$bin" train "${tiny[@]}" --output_dir="$tmp/tp" \
    --parallel_config.model_parallel=2 --runner_config.train_steps=4 --runner_config.save_interval=4
[ "$(grep -c 'step 4: saved' "$tmp/out")" = 1 ] || fail_because "the save was not printed once under model_parallel 2"
[ -f "$tmp/tp/checkpoint_step4.ckpt" ] || fail_because "no checkpoint at step 4 under model_parallel 2"
check "alone, the same run" 0 "$bin" train "${tiny[@]}" --output_dir="$tmp/one" --runner_config.train_steps=4
paste <(train_losses "$tmp/tp") <(train_losses "$tmp/one") | awk '
    { n++; d = $2 - $4; if (d < 0) d = -d; if ($1 != $3 || d > 1e-5 * $4) bad = 1 }
    END { exit !(n == 4 && !bad) }' || fail_because "model_parallel 2 losses differ from one process's"
check "one process resumes the model_parallel 2 checkpoint" 0 "$bin" train "${tiny[@]}" --output_dir="$tmp/tp" \
    --runner_config.train_steps=6 --resume
stdout_has "resumed alone" "resumed at step 4"
check "model_parallel 2 that does not divide is refused" 1 "${mpi[@]}" "$bin" train "${tiny[@]}" \
    --parallel_config.model_parallel=2 --model.model_config.intermediate_size=63
stderr_has "the size is named" "parallel_config.model_parallel: 2 does not divide model_config.intermediate_size 63"
# Pipeline stages: fewer micro-batches than stages is refused, named; 2 stages train as one
# process with gradient_accumulation_steps = micro_batch_num (the same losses), and the
# global batch is said at the start.
pp=("${tiny[@]}" --model.model_config.num_layers=2 --model.model_config.tie_word_embeddings=false
    --runner_config.train_steps=4 --runner_config.save_interval=0 --runner_config.sample_interval=0)
check "micro_batch_num 1 for 2 stages is refused" 1 "${mpi[@]}" "$bin" train "${pp[@]}" --output_dir="$tmp/pp" \
    --parallel_config.pipeline_stage=2 --parallel_config.micro_batch_num=1
stderr_has "micro_batch_num named" "parallel_config.micro_batch_num is 1: 2 pipeline stages need at least one micro-batch"
check "2 pipeline stages train" 0 "${mpi[@]}" "$bin" train "${pp[@]}" --output_dir="$tmp/pp" \
    --parallel_config.pipeline_stage=2 --parallel_config.micro_batch_num=4
stdout_has "global batch said" "global batch = batch_size 2 x data_parallel 1 x micro_batch_num 4 = 8 sequences"
[ -f "$tmp/pp/checkpoint_step4.ckpt" ] || fail_because "the pipeline run wrote no checkpoint"
check "1 process, 4 accumulation steps" 0 "$bin" train "${pp[@]}" --output_dir="$tmp/pp1" \
    --runner_config.gradient_accumulation_steps=4
same_losses "$tmp/pp" "$tmp/pp1" "2 pipeline stages vs 1 process"
check "stages of tensor-parallel layers are refused" 1 "$bin" train "${tiny[@]}" \
    --parallel_config.pipeline_stage=2 --parallel_config.model_parallel=2
stderr_has "3-D layout named" "pipeline_stage 2 with model_parallel 2: pipeline stages of tensor-parallel layers"

# A rank killed mid-run: mpirun ends the job; it must not hang (timeout would say 124).
long=("${tiny[@]}" --output_dir="$tmp/long" --runner_config.train_steps=100000 --runner_config.eval_interval=0
      --runner_config.sample_interval=0 --runner_config.save_interval=0 --quiet)
timeout 60 "${mpi[@]}" "$bin" train "${long[@]}" >"$tmp/out" 2>"$tmp/err" &
job=$!
victim=$(mpirun_ranks "--output_dir=$tmp/long" | tail -1)
sleep 2
[ -n "$victim" ] && kill -9 "$victim" || fail_because "found no rank to kill"
start=$(date +%s)
wait $job
got=$?
took=$(($(date +%s) - start))
[ "$got" != 0 ] && [ "$got" != 124 ] || fail_because "a killed rank: job exit $got (124 = hung until the timeout)"
[ "$took" -le 20 ] || fail_because "a killed rank: the job took $took s to end"
grep -qi "signal 9\|killed\|exited on signal" "$tmp/err" "$tmp/out" || { fail_because "no message names the killed rank"; cat "$tmp/err"; }
finish "cli data parallel"
