# Shared by the tests/cli_*.sh scripts, sourced with the cformers binary as $1:
#   bin, data, src     the binary, the shared assets, the source tree
#   tmp                a scratch directory removed at exit
#   check DESC CODE CMD...   runs CMD (stdout in $tmp/out, stderr in $tmp/err) and records a
#                            failure when it exits with another code
#   stdout_has / stderr_has DESC TEXT   the last check's output holds TEXT
#   fail_because MESSAGE     records a failure
#   require_asset PATH       exits 77 (skipped) when a shared asset is missing
#   mpirun_ranks PATTERN     the pids of the ranks of the mpirun whose command line matches
#                            the extended regular expression PATTERN (after "mpirun "),
#                            once both of 2 are running; empty after 10 s without them
#   tiny_run ARGS...         writes $tmp/text.txt and sets the array tiny: `train` arguments
#                            for a tiny model trained on its bytes (no tokenizer: no shared
#                            asset needed), one thread, logging every step, no evaluation or
#                            samples, then ARGS
#   train_losses DIR         "step loss" of every train record of DIR/metrics.jsonl
#   same_losses A B WHAT [FROM]  runs A and B recorded the same loss, bit for bit, at every
#                            step (from step FROM on); the last record of a step counts (a
#                            crashed run trains some steps again after its resume)
#   server_url LOG NAME      the http://127.0.0.1:PORT a server started in the background printed
#                            into LOG (sets url), waiting up to 10 s; else fails and finishes NAME
#   finish NAME              prints the verdict and exits 0 or 1
set -u
bin="$1"
data="${CFORMERS_DATA_DIR:-../shared/data}"
src="${CFORMERS_SOURCE_DIR:-.}"
tmp=$(mktemp -d /tmp/cformers_cli.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail=0
# Open MPI leaks from components it unloads at MPI_Finalize, where LeakSanitizer cannot even
# name them: multi-rank commands run with this ASAN_OPTIONS (no leak check; the rest stays).
mpi_asan_options="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"

fail_because() { echo "FAIL: $*"; fail=1; }

check() {
    local what="$1" want="$2"; shift 2
    "$@" >"$tmp/out" 2>"$tmp/err"
    local got=$?
    if [ "$got" != "$want" ]; then
        fail_because "$what: exit $got, want $want"
        cat "$tmp/out" "$tmp/err"
    fi
}

stdout_has() { grep -q -- "$2" "$tmp/out" || { fail_because "$1: stdout lacks '$2'"; cat "$tmp/out"; }; }
stderr_has() { grep -q -- "$2" "$tmp/err" || { fail_because "$1: stderr lacks '$2'"; cat "$tmp/err"; }; }

require_asset() { [ -e "$data/$1" ] || { echo "SKIP: no $data/$1"; exit 77; }; }

mpirun_ranks() {
    local launcher ranks
    for _ in $(seq 100); do # the ranks are mpirun's children
        launcher=$(pgrep -f -- "^mpirun .*$1" | head -1)
        ranks=$([ -n "$launcher" ] && pgrep -P "$launcher")
        [ "$(echo "$ranks" | grep -c .)" = 2 ] && echo "$ranks" && return 0
        sleep 0.1
    done
}

# stories260K (llama2.c) with its 512-token tokenizer as a cformers checkpoint at $1, the
# base of the fine-tuning, serve and tokenizer tests (they require the two assets).
stories260k_ckpt() {
    check "convert stories260K" 0 "$bin" convert --from llama2c "$data/stories260K/stories260K.bin" \
        --tokenizer "$data/stories260K/tok512.bin" --output "$1"
}

tiny_run() {
    export CFORMERS_THREADS=1
    for i in $(seq 400); do echo "To be, or not to be, that is the question $i:"; done >"$tmp/text.txt"
    tiny=(--config tiny_shakespeare --train_dataset.data_dir="$tmp/text.txt" --train_dataset.tokenizer=
          --model.model_config.hidden_size=32 --model.model_config.num_layers=1 --model.model_config.num_heads=2
          --model.model_config.intermediate_size=64 --model.model_config.max_position_embeddings=32
          --runner_config.seq_length=32 --runner_config.batch_size=2 --runner_config.log_interval=1
          --runner_config.eval_interval=0 --runner_config.sample_interval=0 --lr_schedule.warmup_steps=2 "$@")
}

train_losses() {
    sed -n 's/.*"event":"train","time":[^,]*,"run":"[^"]*","step":\([0-9]*\),"loss":\([^,]*\),.*/\1 \2/p' "$1/metrics.jsonl"
}

same_losses() {
    local from="${4:-1}" d
    for d in 1 2; do
        train_losses "${!d}" | tac | awk -v from="$from" '$1 >= from && !seen[$1]++' | sort -n >"$tmp/losses$d"
    done
    [ -s "$tmp/losses1" ] && cmp -s "$tmp/losses1" "$tmp/losses2" ||
        { fail_because "$3: losses differ"; diff "$tmp/losses1" "$tmp/losses2" | head; }
}

server_url() {
    url=""
    for _ in $(seq 100); do
        url=$(grep -o 'http://127.0.0.1:[0-9]*' "$1" 2>/dev/null) && return 0
        sleep 0.1
    done
    fail_because "the server printed no address"
    cat "$1"
    finish "$2"
}

finish() {
    [ $fail = 0 ] && echo "$1: all passed"
    exit $fail
}
