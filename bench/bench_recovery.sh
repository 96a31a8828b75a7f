#!/usr/bin/env bash
# `make bench-recovery`: how long `cformers launch --max-restarts` takes to bring a 2-rank
# training job back after kill -9 of one rank, median of 5 kills (docs/training.md).
# The demo config (tiny_shakespeare, its stories260K tokenizer, Tiny Shakespeare) runs
# supervised with a checkpoint every 20 steps; rank 1 is killed 5 times, each once the
# restarted run has trained; recovery = the kill to the first step after the restart,
# from the run's metrics. env: BUILD (default build), CFORMERS_DATA_DIR, KILLS (default 5)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib_bench.sh bench-recovery
KILLS=${KILLS:-5}
job=""
on_exit '[ -n "$job" ] && kill $job 2>/dev/null'
demo_data "$OUT/data"
"$BIN" launch -n 2 --max-restarts "$KILLS" -- train --config tiny_shakespeare --output_dir="$OUT/run" \
    --train_dataset.data_dir="$OUT/data" --train_dataset.tokenizer="$TOKENIZER" \
    --runner_config.train_steps=1000000 --runner_config.save_interval=20 --runner_config.eval_interval=0 \
    --runner_config.sample_interval=0 --quiet >"$OUT/launch.out" 2>"$OUT/launch.err" &
job=$!
steps() { local n; n=$(grep -c '"event":"train"' "$OUT/run/metrics.jsonl" 2>/dev/null); echo "${n:-0}"; }
kills=()
for k in $(seq "$KILLS"); do
    before=$(steps)
    until [ "$(steps)" -ge $((before + 30)) ]; do sleep 0.2; done # trained past a checkpoint
    launcher=$(pgrep -f -- "^mpirun .*--output_dir=$OUT/run" | head -1)
    victim=$(pgrep -P "$launcher" | tail -1)
    kills+=("$(date +%s.%N)")
    kill -9 "$victim"
    until grep -q "\"restart\":$k" "$OUT/run/metrics.jsonl" 2>/dev/null; do sleep 0.2; done
done
until [ "$(/usr/bin/python3 -c "
import json,sys
l=[json.loads(x) for x in open('$OUT/run/metrics.jsonl')]
s=[i for i,x in enumerate(l) if x['event']=='start' and x.get('restart')==$KILLS]
print(1 if s and any(x['event']=='train' for x in l[s[0]:]) else 0)")" = 1 ]; do sleep 0.2; done
kill -TERM "$job"; wait "$job" || true; job=""
/usr/bin/python3 - "$OUT/run/metrics.jsonl" "${kills[@]}" <<'PY'
import json, statistics, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
took = []
for k, killed in enumerate(sys.argv[2:], start=1):
    start = next(i for i, l in enumerate(lines) if l["event"] == "start" and l.get("restart") == k)
    first = next(l for l in lines[start:] if l["event"] == "train")
    took.append(first["time"] - float(killed))
print("kill -9 of rank 1 to the first step after the restart: " + ", ".join(f"{t:.1f} s" for t in took))
print(f"median of {len(took)}: {statistics.median(took):.1f} s")
PY
