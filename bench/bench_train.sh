#!/usr/bin/env bash
# `make bench-train`: cformers training throughput and MFU for the ~15M / 42M / 110M LLaMA
# presets in each compute_dtype (float32, bfloat16 and float16 mixed precision), side by
# side with the same models trained by PyTorch 2.x (tools/torch_train.py bench: same
# threads, batch and sequence, fused AdamW) in its modes: eager (the reference's own masked
# attention), +SDPA (scaled_dot_product_attention), torch.compile (with SDPA; compiled in
# the warmup step, not timed); in bfloat16 rows each of those under CPU autocast to bf16.
# Median step time after warmup. MFU is against the peak of the unit the products run on
# (bf16: the bf16 dot products; f32 and f16, whose products are f32: FMA), PyTorch's MFU
# (of its best mode) against the same peak.
#
# The peer is PyPI's torch, in a venv outside the repository that this script makes on
# first use (python3 -m venv + pip install torch numpy pyyaml, ~3 GB of wheels) and reuses;
# where PyPI cannot be reached it falls back to /usr/bin/python3 (Debian's python3-torch
# 1.13: eager only, its SDPA and compile columns print '-'), and says so. A mode that fails
# (a compile error) prints '-' and the bench goes on. Never run by CI or install-deps.
#
# env: BUILD (build dir, default build), CFORMERS_THREADS (default: all cores),
#      BENCH_STEPS (timed steps, default 3), BENCH_WARMUP (default 1),
#      BENCH_SIZES (default "llama_15m:8:256 llama_42m:2:512 llama_110m:1:1024"),
#      BENCH_DTYPES (default "float32 bfloat16 float16"),
#      BENCH_PEER_MODES (default "eager sdpa compile"; "" = no PyTorch runs),
#      BENCH_PEER_F16=1 (float16 rows also run PyTorch's CPU autocast to f16; off by default),
#      BENCH_PEER_BF16 (1: bfloat16 rows run PyTorch's bf16 autocast; 0: they do not; default
#      1 where the CPU has AVX-512 BF16 or AMX, else 0: there PyTorch's bf16 falls to slow
#      reference kernels, 20-40x its f32, and a 110M run takes over half an hour),
#      BENCH_PEER_TIMEOUT (seconds per PyTorch run, default 1800),
#      CFORMERS_TORCH_VENV (the venv, default ~/.cache/cformers/torch2-venv; point it at an
#      existing one with torch, numpy and pyyaml), CFORMERS_TORCH_PYTHON (a python to make it
#      with, default python3), BENCH_JSON (the JSON lines, default $BUILD/bench_train.jsonl).
# A quick run: BENCH_SIZES=llama_15m:8:256 BENCH_DTYPES="float32 bfloat16" BENCH_PEER_MODES=sdpa
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
THREADS=${CFORMERS_THREADS:-$(nproc)}
STEPS=${BENCH_STEPS:-3}
WARMUP=${BENCH_WARMUP:-1}
SIZES=${BENCH_SIZES:-"llama_15m:8:256 llama_42m:2:512 llama_110m:1:1024"}
DTYPES=${BENCH_DTYPES:-"float32 bfloat16 float16"}
MODES=${BENCH_PEER_MODES-"eager sdpa compile"}
PEER_TIMEOUT=${BENCH_PEER_TIMEOUT:-1800}
if grep -qwE 'avx512_bf16|amx_bf16' /proc/cpuinfo 2>/dev/null; then PEER_BF16=${BENCH_PEER_BF16:-1}; else PEER_BF16=${BENCH_PEER_BF16:-0}; fi
VENV=${CFORMERS_TORCH_VENV:-$HOME/.cache/cformers/torch2-venv}
JSON=${BENCH_JSON:-$BUILD/bench_train.jsonl}
FMT=/usr/bin/python3
[ -x "$FMT" ] || FMT=python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
say() { echo "bench_train: $*" >&2; }

# The python that runs the peer: the venv's, made or completed from PyPI when needed,
# else Debian's /usr/bin/python3.
has_peer_modules() { "$1" -c 'import torch, numpy, yaml' 2>/dev/null; }
peer_python() {
    local py=$VENV/bin/python missing
    if [ -x "$py" ] && has_peer_modules "$py"; then echo "$py"; return; fi
    if [ ! -x "$py" ]; then
        say "making a venv for PyTorch at $VENV (set CFORMERS_TORCH_VENV to use an existing one)"
        mkdir -p "$(dirname "$VENV")"
        "${CFORMERS_TORCH_PYTHON:-python3}" -m venv "$VENV" >&2 || true
    fi
    if [ -x "$py" ]; then
        missing=$(for m in torch numpy yaml; do "$py" -c "import $m" 2>/dev/null || echo "$m"; done | sed 's/^yaml$/pyyaml/' | tr '\n' ' ')
        case " $missing " in *" torch "*) say "downloading PyTorch and its CUDA wheels from PyPI (~3 GB, once) into $VENV ..." ;; esac
        # shellcheck disable=SC2086 # a list of package names
        if "$py" -m pip install --retries 1 --timeout 30 $missing >&2 && has_peer_modules "$py"; then echo "$py"; return; fi
    fi
    say "no PyTorch from PyPI (unreachable, or the install into $VENV failed): the peer is /usr/bin/python3's torch (Debian's 1.13; no SDPA or compile)"
    echo /usr/bin/python3
}

PEER=""
if [ -n "$MODES" ]; then
    PEER=$(peer_python)
    has_peer_modules "$PEER" || { say "$PEER has no torch/numpy/yaml either: PyTorch columns left empty"; PEER=""; }
fi
[ "$PEER_BF16" = 1 ] || [[ " $DTYPES " != *" bfloat16 "* ]] || [ -z "$PEER" ] ||
    say "no AVX-512 BF16 on this CPU: PyTorch's bf16 autocast is not run (its reference kernels take 20-40x its f32; BENCH_PEER_BF16=1 runs it)"
torch_version=$([ -n "$PEER" ] && "$PEER" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null || echo none)
: >"$JSON"

# One PyTorch run: its JSON line, or {"error": ...} when it fails or prints none.
peer_run() { # yaml amp_flag mode
    local flags
    case $3 in eager) flags="" ;; sdpa) flags="--sdpa" ;; compile) flags="--sdpa --compile" ;; *) flags="--$3" ;; esac
    # shellcheck disable=SC2086 # flag lists
    env -u OPENBLAS_CORETYPE OMP_NUM_THREADS="$THREADS" timeout "$PEER_TIMEOUT" "$PEER" tools/torch_train.py bench "$1" \
        --steps "$STEPS" --warmup "$WARMUP" --threads "$THREADS" $flags $2 >"$work/peer.out" 2>"$work/peer.err" || true
    grep '^{' "$work/peer.out" | tail -1 | grep . ||
        echo "{\"mode\": \"$3${2:+ $2}\", \"error\": \"no result (crash or timeout after $PEER_TIMEOUT s): $(tail -c 200 "$work/peer.err" | tr -d '"\\\n' | tr -c '[:print:]' ' ')\"}"
}

printf '%-33s | %-22s | %-33s | %s\n' "" "cformers" "PyTorch $torch_version (bf16: autocast)" "cformers /"
printf '%-11s %5s %5s %-8s | %8s %6s %6s | %8s %8s %8s %6s | %s\n' preset batch seq dtype "tok/s" MFU "/ f32" \
    eager "+SDPA" compile "MFU" "PyTorch"
for spec in $SIZES; do
    IFS=: read -r preset batch seq <<<"$spec"
    "$BUILD/cformers" config show "$preset" --runner_config.batch_size="$batch" \
        --runner_config.seq_length="$seq" --runner_config.train_steps=$((STEPS + WARMUP)) --lr_schedule.warmup_steps=0 \
        --runner_config.gradient_accumulation_steps=1 >"$work/$preset.yaml"
    f32_tps=""
    for dtype in $DTYPES; do
        mine=$(CFORMERS_THREADS=$THREADS "$BUILD/bench/bench_train" --steps "$STEPS" --warmup "$WARMUP" "$spec:$dtype") ||
            mine='{"error": "bench_train failed"}'
        amp=""
        case $dtype in bfloat16) amp=--autocast-bf16 ;; float16) amp=--autocast-f16 ;; esac
        : >"$work/peers"
        for mode in eager sdpa compile; do
            if [ -n "$PEER" ] && [[ " $MODES " == *" $mode "* ]] && { [ "$dtype" != float16 ] || [ "${BENCH_PEER_F16:-0}" = 1 ]; } &&
                { [ "$dtype" != bfloat16 ] || [ "$PEER_BF16" = 1 ]; }; then
                peer_run "$work/$preset.yaml" "$amp" "$mode" >>"$work/peers"
            else
                echo '{}' >>"$work/peers"
            fi
        done
        f32_tps=$("$FMT" - "$preset" "$batch" "$seq" "$dtype" "$mine" "$f32_tps" "$work/peers" "$JSON" <<'PY'
import json, sys
preset, batch, seq, dtype, mine, f32_tps, peers, out = sys.argv[1:9]
mine = json.loads(mine)
peers = [json.loads(line) for line in open(peers)]
tps = mine.get("tokens_per_s")
fpt = mine["model_gflops"] / tps * 1e9 if tps else None  # model FLOPs per token
peak = mine.get("peak_gflops", 0) * 1e9
best = max((p for p in peers if p.get("tokens_per_s")), key=lambda p: p["tokens_per_s"], default=None)
with open(out, "a") as f:
    f.write(json.dumps(mine) + "\n")
    for p in peers:
        if p:
            p.update(engine="pytorch", preset=preset, dtype=mine.get("dtype", dtype), batch=int(batch), seq=int(seq))
            if p.get("tokens_per_s") and fpt and peak:
                p["mfu"] = round(p["tokens_per_s"] * fpt / peak, 4)
            f.write(json.dumps(p) + "\n")
num = lambda v, w, f="{:.0f}": f.format(v).rjust(w) if v else "-".rjust(w)
ratio = tps / float(f32_tps) if tps and f32_tps and dtype != "float32" else None
print(f"{preset:<11} {batch:>5} {seq:>5} {dtype:<8} | {num(tps, 8)} {num(100 * mine.get('mfu', 0), 6, '{:.1f}%')} "
      f"{num(ratio, 6, '{:.2f}x')} | " + " ".join(num(p.get('tokens_per_s'), 8) for p in peers)
      + f" {num(best and fpt and peak and 100 * best['tokens_per_s'] * fpt / peak, 6, '{:.1f}%')} | "
      + f"{num(best and tps and tps / best['tokens_per_s'], 7, '{:.2f}x')}"
      + (f" ({best['mode']})" if best else ""), file=sys.stderr)
for p in peers:
    if p.get("error"):
        print(f"  (PyTorch {p['mode']}: {p['error'][:150]})", file=sys.stderr)
print(f32_tps if dtype != "float32" else (tps or ""))
PY
        )
    done
done 2>&1
echo "(peaks measured: $(grep '"engine": "cformers"' "$JSON" | sed 's/.*"dtype": "\([a-z0-9]*\)".*"peak_gflops": \([0-9.]*\).*/\1 \2/' | sort -u | tr '\n' ' ')GFLOP/s; $THREADS threads; PyTorch: ${PEER:-none}; JSON lines: $JSON)"
