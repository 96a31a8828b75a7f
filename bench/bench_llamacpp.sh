#!/usr/bin/env bash
# cformers against llama.cpp on the same weights: the random ~110M LLaMA of bench_generate
# (llama2.c's stories110M shape, untied head), converted to cformers checkpoints in f32, bf16,
# q8_0 and q4_0 and exported from those with `cformers convert --to gguf`. Prefill (a 512-token
# prompt, llama-bench -p 512) and decode (128 tokens one at a time from position 0,
# llama-bench -n 128) tokens/s on 1 and 2 threads; the two engines interleaved (which one
# goes first alternates), each figure the median of BENCH_RUNS runs. Never part of CI: it
# needs a llama.cpp build, made here on request by bench/llamacpp_build.sh from the llama.cpp
# sources vendored in PyPI's llama-cpp-python sdist (about half an hour on 2 cores).
#
#   bash bench/bench_llamacpp.sh [--build-llamacpp]
#
# env: BUILD (our build dir, default build); LLAMACPP_DIR (default /tmp/cformers-llamacpp:
#      the llama.cpp build, bin/llama-bench, and the models); LLAMACPP_SDIST (a downloaded
#      llama_cpp_python-*.tar.gz to build from instead of `pip download`); BENCH_RUNS (3),
#      BENCH_THREADS ("1 2"), BENCH_DTYPES ("f32 bf16 q8_0 q4_0"), BENCH_PREFILL (512),
#      BENCH_DECODE (128); BENCH_PRIORITY=1 runs each measurement at autogroup nice -20 (a
#      shared machine; needs the right to raise priority); CFORMERS_DATA_DIR (for
#      llama2c-tokenizer/tokenizer.bin, the 32000-token vocabulary the export writes).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${BUILD:-build}
LLAMACPP_DIR=${LLAMACPP_DIR:-/tmp/cformers-llamacpp}
RUNS=${BENCH_RUNS:-3}
THREADS=${BENCH_THREADS:-1 2}
DTYPES=${BENCH_DTYPES:-f32 bf16 q8_0 q4_0}
PREFILL=${BENCH_PREFILL:-512}
DECODE=${BENCH_DECODE:-128}
DATA=${CFORMERS_DATA_DIR:-$ROOT/../shared/data}
TOKENIZER=$DATA/llama2c-tokenizer/tokenizer.bin
LLAMA_BENCH=$LLAMACPP_DIR/build/bin/llama-bench
MODELS=$LLAMACPP_DIR/models
die() { echo "bench_llamacpp: $*" >&2; exit 1; }

build_llamacpp() { bash bench/llamacpp_build.sh llama-bench; }

if [ "${1:-}" = "--build-llamacpp" ]; then build_llamacpp; shift; fi
[ $# -eq 0 ] || die "usage: bash bench/bench_llamacpp.sh [--build-llamacpp]"
[ -x "$LLAMA_BENCH" ] || die "$LLAMA_BENCH not found: run with --build-llamacpp (or set LLAMACPP_DIR)"
[ -x "$BUILD/cformers" ] && [ -x "$BUILD/bench/bench_generate" ] || die "build cformers first (make build)"
[ -f "$TOKENIZER" ] || die "$TOKENIZER not found (set CFORMERS_DATA_DIR)"

# Runs "$@" at autogroup nice -20 when BENCH_PRIORITY=1 (ahead of other jobs on the machine).
prio() {
    if [ "${BENCH_PRIORITY:-0}" = 1 ]; then bash -c 'echo -20 > /proc/self/autogroup; exec "$@"' prio "$@"
    else "$@"; fi
}

mkdir -p "$MODELS"
[ -f "$MODELS/llama110m.bin" ] || "$BUILD/bench/bench_generate" --write-llama2c "$MODELS/llama110m.bin"
for d in $DTYPES; do
    [ -f "$MODELS/m_$d.ckpt" ] || "$BUILD/cformers" convert --from llama2c "$MODELS/llama110m.bin" \
        --tokenizer "$TOKENIZER" --dtype "$d" --output "$MODELS/m_$d.ckpt" >&2
    [ -f "$MODELS/m_$d.gguf" ] || "$BUILD/cformers" convert --to gguf "$MODELS/m_$d.ckpt" --output "$MODELS/m_$d.gguf" >&2
done

# One measurement each, appended to $RESULTS as "engine dtype threads pp tg".
RESULTS=$(mktemp)
trap 'rm -f "$RESULTS"' EXIT
ours() {
    local r
    r=$(prio "$BUILD/bench/bench_generate" --model "$MODELS/m_$1.ckpt" --dtype "$1" --threads "$2" --runs 1 \
        --prefill "$PREFILL" --decode "$DECODE")
    echo "cformers $1 $2 $r" >>"$RESULTS"
}
theirs() {
    local out pp tg
    out=$(prio "$LLAMA_BENCH" -m "$MODELS/m_$1.gguf" -t "$2" -p "$PREFILL" -n "$DECODE" -r 1 -o jsonl 2>/dev/null)
    # one JSON object per test: n_prompt > 0 is the prefill test, n_gen > 0 the decode one
    read -r pp tg < <(python3 -c 'import json, sys
r = [json.loads(l) for l in sys.stdin if l.strip().startswith("{")]
pp = [t["avg_ts"] for t in r if t["n_prompt"] > 0]
tg = [t["avg_ts"] for t in r if t["n_gen"] > 0]
print(pp[0] if pp else "", tg[0] if tg else "")' <<<"$out")
    [ -n "$tg" ] || die "llama-bench on m_$1.gguf gave no result"
    echo "llama.cpp $1 $2 $pp $tg" >>"$RESULTS"
}
for ((run = 1; run <= RUNS; run++)); do
    for d in $DTYPES; do
        for t in $THREADS; do
            if ((run % 2)); then ours "$d" "$t"; theirs "$d" "$t"; else theirs "$d" "$t"; ours "$d" "$t"; fi
        done
    done
    echo "run $run of $RUNS done" >&2
done

median() { sort -g | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo "110M LLaMA, tokens/s, medians of $RUNS (pp$PREFILL: prefill of a $PREFILL-token prompt; tg$DECODE: $DECODE tokens decoded from position 0)"
printf '%-6s %7s | %12s %12s | %12s %12s\n' dtype threads "cformers pp" "llama.cpp pp" "cformers tg" "llama.cpp tg"
for d in $DTYPES; do
    for t in $THREADS; do
        printf '%-6s %7s' "$d" "$t"
        for col in 4 5; do
            printf ' |'
            for e in cformers llama.cpp; do
                printf ' %12.1f' "$(awk -v e="$e" -v d="$d" -v t="$t" -v c="$col" '$1 == e && $2 == d && $3 == t { print $c }' "$RESULTS" | median)"
            done
        done
        printf '\n'
    done
done
