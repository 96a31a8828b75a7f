#!/usr/bin/env bash
# `make tour`: runs every command of the README's "A tour" block, in order, printing each,
# in a fresh directory (DIR, default output/tour; configs/ and tests/fixtures/ of the source
# tree linked in, the out/ directories made by the commands themselves). Stops at the first
# command that fails, naming it.
#
# Without the shared assets the tour names (a fresh clone: nothing in CFORMERS_DATA_DIR,
# default ../shared/data), it runs on what `make demo` falls back to
# (scripts/fortunes-corpus.sh): Debian's fortunes for Tiny Shakespeare and a 512-token
# byte-level BPE trained on them for every tokenizer file, also given to the
# tiny_shakespeare runs (whose preset names the stories260K one) and to the byte-level run
# (whose YAML reads Tiny Shakespeare); the import of the pretrained stories260K is skipped
# and out/s260k.ckpt is the tour's own newest out/run checkpoint instead, so the lines
# after it run. The README says the same below the tour.
#
#   usage: scripts/tour.sh [--short] [--log FILE] [--dir DIR]
#     --short     what tests/cli_readme_tour.sh runs: training schedules of 8 steps (every
#                 `--steps N` of 50 or more becomes N/50), GEMM benchmarks one small repetition
#     --log FILE  each command's output into FILE (its last lines shown when it fails)
#                 instead of the terminal
#   env: BUILD (default build), CFORMERS_DATA_DIR, FORTUNES_DIR
# Exits 0 when every command ran, 1 when one failed, 77 when neither the shared assets nor
# Debian's fortunes are here. The MPI lines are skipped (saying so) without mpirun.
set -uo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
short=0 log="" dir=output/tour
while [ $# -gt 0 ]; do
    case "$1" in
    --short) short=1 ;;
    --log) log=$2; shift ;;
    --dir) dir=$2; shift ;;
    *) echo "tour: unknown argument '$1' (scripts/tour.sh [--short] [--log FILE] [--dir DIR])" >&2; exit 2 ;;
    esac
    shift
done
bin=${BUILD:-build}/cformers
[ -x "$bin" ] || bin=$src/$bin
[ -x "$bin" ] || { echo "tour: ${BUILD:-build}/cformers is not built (run \`make tour\`)" >&2; exit 1; }
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin") # the tour runs in $dir
data=${CFORMERS_DATA_DIR:-../shared/data}
readme="$src/README.md"
rm -rf "$dir" && mkdir -p "$dir/tests" && dir=$(cd "$dir" && pwd)
ln -s "$src/configs" "$dir/configs" && ln -s "$src/tests/fixtures" "$dir/tests/fixtures"

fallback=""
for a in tinyshakespeare/input.txt stories260K/tok512.model stories260K/stories260K.bin stories260K/tok512.bin \
         llama2c-tokenizer/tokenizer.model; do
    [ -e "$data/$a" ] || { fallback="$a"; break; }
done
if [ -n "$fallback" ]; then
    echo "== no $data/$fallback: the tour runs on Debian's fortunes, as make demo does without the shared assets"
    bash "$src/scripts/fortunes-corpus.sh" "$bin" "$dir/fortunes" || {
        echo "tour: neither the shared assets nor Debian's fortunes are here" >&2
        exit 77
    }
    fortunes="$dir/fortunes/fortunes.txt" bpe="$dir/fortunes/tokenizer.json"
fi
[ -d "$data" ] && data=$(cd "$data" && pwd)
export CFORMERS_DATA_DIR="$data"
quick=(--runner_config.train_steps=8 --runner_config.save_interval=4 --runner_config.eval_interval=4
       --runner_config.eval_steps=1 --runner_config.sample_interval=8 --runner_config.sample_tokens=16
       --lr_schedule.warmup_steps=2)

# The block's commands, continuation lines joined, comments and the B=/D= line dropped.
awk '/^## A tour/ {on = 1} on && /^```sh/ {inblock = 1; next} inblock && /^```/ {exit} inblock' "$readme" |
    sed -e 's/[[:space:]]#.*$//' -e 's/[[:space:]]*$//' -e '/^[[:space:]]*#/d' -e '/^B=/d' -e '/^[[:space:]]*$/d' |
    awk '{ if (sub(/\\$/, "")) { acc = acc $0 } else { print acc $0; acc = "" } }' >"$dir/commands"
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
    extra=()
    if [ $short = 1 ]; then
        # --steps N -> N/50 (200 -> 4, 400 -> 8) when N >= 50, and the checkpoint_stepN names with it.
        line=$(awk '{ out = ""
            while (match($0, /(--steps |checkpoint_step)[0-9]+/)) {
                w = substr($0, RSTART, RLENGTH); p = w; sub(/[0-9]+$/, "", p); k = substr(w, length(p) + 1) + 0
                out = out substr($0, 1, RSTART - 1) p (k >= 50 ? int(k / 50) : k); $0 = substr($0, RSTART + RLENGTH)
            }
            print out $0 }' <<<"$line")
        case "$line" in
        *"cformers train "*|*"-- train "*) extra=("${quick[@]}") ;;
        *" bench gemm"*) extra=(--reps 1 --m 256 --n 256 --k 256) ;;
        esac
    fi
    if [ -n "$fallback" ]; then
        case "$line" in
        *stories260K.bin*)
            ckpt=$(ls -1 "$dir"/out/run/checkpoint_step*.ckpt 2>/dev/null | sort -V | tail -n 1)
            echo "== skipped (no pretrained stories260K; out/s260k.ckpt is the tour's $(basename "${ckpt:-none}")): $line"
            cp "$ckpt" "$dir/out/s260k.ckpt" || { echo "tour: no out/run checkpoint to stand in" >&2; exit 1; }
            continue ;;
        *"--config tiny_shakespeare"*) extra+=(--train_dataset.tokenizer="$bpe") ;;
        *"--config configs/shakespeare.yaml"*) extra+=(--train_dataset.data_dir="$fortunes") ;;
        esac
    fi
    asan=${ASAN_OPTIONS:-}
    case "$line" in
    mpirun*|*" launch "*)
        command -v mpirun >/dev/null || { echo "== skipped (no mpirun): $line"; continue; }
        asan=${asan:+$asan:detect_leaks=0} ;; # Open MPI's own leaks at MPI_Finalize (tests/lib_cli.sh)
    esac
    echo "\$ $line${extra[*]:+ ${extra[*]}}"
    # shellcheck disable=SC2086 # the README's words, split as the shell would
    if [ -n "$log" ]; then
        (cd "$dir" && ASAN_OPTIONS=$asan eval "$line \"\${extra[@]}\"") >"$log" 2>&1 </dev/null
    else
        (cd "$dir" && ASAN_OPTIONS=$asan eval "$line \"\${extra[@]}\"") </dev/null
    fi || {
        [ -n "$log" ] && tail -n 5 "$log"
        echo "tour: command $n failed: $line" >&2
        exit 1
    }
done <"$dir/commands"
echo "== the tour ran its $n commands in $dir"
