#!/usr/bin/env bash
# The README's tour is a test: every command of its "A tour" block runs, in order, in a
# fresh directory (only configs/ and tests/fixtures/ of the source tree linked in, the
# output directories created by the commands themselves), and exits 0. To keep it short,
# training runs 8 steps (--steps 200 becomes --steps 4, step 400 step 8), GEMM benchmarks one
# small repetition;
# the two MPI lines run when mpirun is there.
#
# Without the shared assets the tour names (a fresh clone), it runs on what `make demo` falls
# back to (scripts/fortunes-corpus.sh): Debian's fortunes for Tiny Shakespeare and a 512-token
# byte-level BPE trained on them for every tokenizer file, also given to the tiny_shakespeare
# runs (whose preset names the stories260K one) and the byte-level run reading the fortunes;
# the import of the pretrained stories260K is skipped and out/s260k.ckpt is the tour's own
# checkpoint_step8 instead, so the lines after it run. Skipped when the fortunes are not
# installed either. The README says the same below the tour.
. "$(dirname "$0")/lib_cli.sh"
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin") # the tour runs elsewhere
src=$(cd "$src" && pwd)
readme="$src/README.md"
[ -f "$readme" ] || { echo "SKIP: no $readme"; exit 77; }
fallback=""
for a in tinyshakespeare/input.txt stories260K/tok512.model stories260K/stories260K.bin stories260K/tok512.bin \
         llama2c-tokenizer/tokenizer.model; do
    [ -e "$data/$a" ] || { fallback="$a"; break; }
done
if [ -n "$fallback" ]; then
    echo "no $data/$fallback: the tour runs on Debian's fortunes, as make demo does without the shared assets"
    bash "$src/scripts/fortunes-corpus.sh" "$bin" "$tmp/fortunes" >"$tmp/out" 2>&1 ||
        { cat "$tmp/out"; echo "SKIP: neither the shared assets nor Debian's fortunes are here"; exit 77; }
    fortunes="$tmp/fortunes/fortunes.txt" bpe="$tmp/fortunes/tokenizer.json"
fi
[ -d "$data" ] && data=$(cd "$data" && pwd)
export CFORMERS_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export CFORMERS_DATA_DIR="$data"
run="$tmp/tour"
mkdir -p "$run/tests" && ln -s "$src/configs" "$run/configs" && ln -s "$src/tests/fixtures" "$run/tests/fixtures"
short=(--runner_config.train_steps=8 --runner_config.save_interval=4 --runner_config.eval_interval=4
       --runner_config.eval_steps=1 --runner_config.sample_interval=8 --runner_config.sample_tokens=16
       --lr_schedule.warmup_steps=2)

# The block's commands, continuation lines joined, comments and the B=/D= line dropped.
awk '/^## A tour/ {on = 1} on && /^```sh/ {inblock = 1; next} inblock && /^```/ {exit} inblock' "$readme" |
    sed -e 's/[[:space:]]#.*$//' -e '/^[[:space:]]*#/d' -e '/^B=/d' -e '/^[[:space:]]*$/d' |
    awk '{ if (sub(/\\$/, "")) { acc = acc $0 } else { print acc $0; acc = "" } }' >"$tmp/commands"
[ "$(grep -c . "$tmp/commands")" -ge 20 ] || fail_because "the tour has $(grep -c . "$tmp/commands") commands"
n=0
while IFS= read -r line; do
    n=$((n + 1))
    line=${line//\$B/$bin}
    if [ -n "$fallback" ]; then
        line=${line//\$D\/tinyshakespeare\/input.txt/$fortunes}
        for tok in stories260K/tok512.model stories260K/tok512.bin llama2c-tokenizer/tokenizer.model; do
            line=${line//\$D\/$tok/$bpe}
        done
    fi
    line=${line//\$D/$data}
    line=${line//--steps 200/--steps 4}
    line=${line//checkpoint_step400/checkpoint_step8}
    extra=()
    case "$line" in
    *"cformers train "*|*"-- train "*) extra=("${short[@]}") ;;
    *" bench gemm"*) extra=(--reps 1 --m 256 --n 256 --k 256) ;;
    esac
    if [ -n "$fallback" ]; then
        case "$line" in
        *stories260K.bin*)
            echo "skipped (no pretrained stories260K; out/s260k.ckpt is the tour's checkpoint_step8): $line"
            cp "$run/out/run/checkpoint_step8.ckpt" "$run/out/s260k.ckpt" || fail_because "no checkpoint_step8 to stand in"
            continue ;;
        *"--config tiny_shakespeare"*) extra+=(--train_dataset.tokenizer="$bpe") ;;
        *"--config configs/shakespeare.yaml"*) extra+=(--train_dataset.data_dir="$fortunes") ;;
        esac
    fi
    asan=${ASAN_OPTIONS:-}
    case "$line" in
    mpirun*|*" launch "*)
        command -v mpirun >/dev/null || { echo "skipped (no mpirun): $line"; continue; }
        asan=$mpi_asan_options ;; # Open MPI's own leaks at MPI_Finalize (lib_cli.sh)
    esac
    # shellcheck disable=SC2086 # the README's words, split as the shell would
    (cd "$run" && ASAN_OPTIONS=$asan eval "$line \"\${extra[@]}\"") >"$tmp/out" 2>"$tmp/err" </dev/null ||
        { fail_because "tour command $n failed: $line"; tail -n 5 "$tmp/out" "$tmp/err"; }
done <"$tmp/commands"
# What the tour promises along the way.
[ -f "$run/out/run/checkpoint_step8.ckpt" ] || fail_because "the resumed run did not reach its end: $(ls "$run/out/run")"
"$bin" generate --model "$run/out/bytes/shakespeare_step8.ckpt" --prompt "ROMEO:" -n 4 >/dev/null 2>&1 ||
    fail_because "the byte-level checkpoint does not generate without --tokenizer"
finish cli_readme_tour
