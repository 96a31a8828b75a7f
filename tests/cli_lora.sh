#!/usr/bin/env bash
# LoRA fine-tuning end to end (docs/lora.md): stories260K converted from llama2.c is the
# base; a LoRA run over it (the base frozen in q8_0) writes a PEFT directory beside each
# checkpoint; a run stopped at step 2 and resumed gives the uninterrupted run's losses bit
# for bit; the checkpoint generates on its own (its adapters applied) and as
# --lora over the base, the PEFT directory likewise; the memory table shows the LoRA rows;
# 2 data-parallel ranks train as one; merged == unmerged; the refusals.
. "$(dirname "$0")/lib_cli.sh"
require_asset stories260K/stories260K.bin
require_asset stories260K/tok512.bin
require_asset tinyshakespeare/input.txt
export CFORMERS_THREADS=1

stories260k_ckpt "$tmp/base.ckpt"
cat >"$tmp/lora.yaml" <<YAML
run_mode: finetune
load_checkpoint: $tmp/base.ckpt
runner_config: {batch_size: 2, seq_length: 64, train_steps: 4, log_interval: 1, eval_interval: 0,
                sample_interval: 0, save_interval: 2}
lr_schedule: {learning_rate: 1.0e-2, warmup_steps: 1}
train_dataset: {data_dir: $data/tinyshakespeare/input.txt, eval_split: 0.05}
lora: {rank: 4, alpha: 8, target_modules: "q_proj,v_proj,o_proj", base_dtype: q8_0}
YAML
check "LoRA run" 0 "$bin" train --config "$tmp/lora.yaml" --output_dir="$tmp/full"
stdout_has "LoRA line" "LoRA: rank 4, alpha 8 on q_proj,v_proj,o_proj: 7,040 adapter parameters train"
stdout_has "adapter rows" "LoRA adapters (f32 master)"
stdout_has "the base loaded" "load_checkpoint: loaded 47 tensors (260032 parameters) from $tmp/base.ckpt; tokenizer: tok512.bin; LoRA adapters it lacks start at their init"
stdout_has "frozen base row" "frozen base (q8_0)"
for f in adapter_config.json adapter_model.safetensors; do
    [ -f "$tmp/full/checkpoint_step4.peft/$f" ] || fail_because "no PEFT $f beside the checkpoint"
done
grep -q '"r": 4' "$tmp/full/checkpoint_step4.peft/adapter_config.json" || fail_because "adapter_config.json lacks r"
check "stopped at step 2" 0 "$bin" train --config "$tmp/lora.yaml" --output_dir="$tmp/split" --steps 2
check "resumed" 0 "$bin" train --config "$tmp/lora.yaml" --output_dir="$tmp/split" --resume
losses() { grep '"event":"train"' "$1" | sed 's/.*"step":\([0-9]*\),"loss":\([^,]*\),.*/\1 \2/'; }
[ "$(losses "$tmp/full/metrics.jsonl")" = "$(losses "$tmp/split/metrics.jsonl")" ] ||
    fail_because "resumed losses differ: $(losses "$tmp/full/metrics.jsonl" | tr '\n' ' ') vs $(losses "$tmp/split/metrics.jsonl" | tr '\n' ' ')"
# 2 data-parallel ranks of batch 1 (only the adapters' gradients are in the all-reduced
# block) give the 1-rank batch-2 run's losses, to f32 summation order
if command -v mpirun >/dev/null; then
    check "2 ranks" 0 env ASAN_OPTIONS="$mpi_asan_options" mpirun --oversubscribe --allow-run-as-root \
        -x CFORMERS_THREADS=1 -n 2 "$bin" train --config "$tmp/lora.yaml" --output_dir="$tmp/dp" \
        --runner_config.batch_size=1 --quiet
    /usr/bin/python3 - "$tmp/full/metrics.jsonl" "$tmp/dp/metrics.jsonl" <<'PY' || fail_because "2-rank losses differ"
import json, sys
runs = [[json.loads(l)["loss"] for l in open(f) if '"event":"train"' in l] for f in sys.argv[1:]]
sys.exit(0 if len(runs[0]) == 4 and all(abs(a - b) <= 1e-5 * abs(a) for a, b in zip(*runs)) else 1)
PY
fi
gen=(--prompt "Once upon a time" -n 24 --temperature 0)
check "the LoRA checkpoint generates" 0 "$bin" generate --model "$tmp/full/checkpoint_step4.ckpt" "${gen[@]}"
head -1 "$tmp/out" >"$tmp/own"
check "--lora CKPT over the base" 0 "$bin" generate --model "$tmp/base.ckpt" --dtype q8_0 --lora "$tmp/full/checkpoint_step4.ckpt" "${gen[@]}"
head -1 "$tmp/out" >"$tmp/ckpt"
check "--lora PEFT over the base" 0 "$bin" generate --model "$tmp/base.ckpt" --dtype q8_0 --lora "$tmp/full/checkpoint_step4.peft" "${gen[@]}"
head -1 "$tmp/out" >"$tmp/peft"
check "the base alone" 0 "$bin" generate --model "$tmp/base.ckpt" --dtype q8_0 "${gen[@]}"
head -1 "$tmp/out" >"$tmp/base"
cmp -s "$tmp/own" "$tmp/ckpt" || fail_because "the checkpoint and --lora CKPT differ: $(cat "$tmp/own") / $(cat "$tmp/ckpt")"
cmp -s "$tmp/ckpt" "$tmp/peft" || fail_because "--lora CKPT and --lora PEFT differ: $(cat "$tmp/ckpt") / $(cat "$tmp/peft")"
cmp -s "$tmp/base" "$tmp/peft" && fail_because "the adapter changed nothing: $(cat "$tmp/base")"
# merged into the f32 base (convert --merge-lora) == applied unmerged over it
check "merge into the f32 base" 0 "$bin" convert --merge-lora "$tmp/full/checkpoint_step4.peft" "$tmp/base.ckpt" \
    --output "$tmp/merged.ckpt"
check "the merged model" 0 "$bin" generate --model "$tmp/merged.ckpt" "${gen[@]}"
head -1 "$tmp/out" >"$tmp/merged"
check "--lora over the f32 base" 0 "$bin" generate --model "$tmp/base.ckpt" --lora "$tmp/full/checkpoint_step4.peft" "${gen[@]}"
head -1 "$tmp/out" >"$tmp/unmerged"
cmp -s "$tmp/merged" "$tmp/unmerged" || fail_because "merged and unmerged differ: $(cat "$tmp/merged") / $(cat "$tmp/unmerged")"
check "a q8_0 base" 0 "$bin" convert --from llama2c "$data/stories260K/stories260K.bin" --dtype q8_0 \
    --tokenizer "$data/stories260K/tok512.bin" --output "$tmp/base_q8.ckpt"
check "merging into a quantized base" 1 "$bin" convert --merge-lora "$tmp/full/checkpoint_step4.peft" \
    "$tmp/base_q8.ckpt" --output "$tmp/nope.ckpt"
stderr_has "refused naming the tensor" "is q8_0: merging into a quantized base is refused"
check "--lora CKPT over another base" 1 "$bin" generate --model "$tmp/merged.ckpt" --lora "$tmp/full/checkpoint_step4.ckpt" "${gen[@]}"
stderr_has "the base named" "its adapters were trained over $tmp/base.ckpt, and $tmp/merged.ckpt holds other weights"
[ "$(wc -l <"$tmp/err")" = 1 ] || fail_because "the other-base error is not one line"
check "a missing adapter" 1 "$bin" generate --model "$tmp/base.ckpt" --lora "$tmp/nope" "${gen[@]}"
stderr_has "names it" "--lora $tmp/nope"
# serve: the base and three adapters over it (the PEFT directory, it at scale 4, the LoRA
# checkpoint), chosen by each request's "model"; the batch mixing them all gives each
# request the text it gets alone
check "serve: an adapter that is not there" 1 "$bin" serve --model "$tmp/base.ckpt" --port 0 --lora "x=$tmp/nope"
stderr_has "serve names it" "--lora $tmp/nope"
check "serve: one name twice" 1 "$bin" serve --model "$tmp/base.ckpt" --port 0 --model-name stories \
    --lora "stories=$tmp/full/checkpoint_step4.peft"
stderr_has "the name said" "'stories' is already served"
check "serve: --lora without a path" 2 "$bin" serve --model "$tmp/base.ckpt" --lora "=x"
if command -v curl >/dev/null && command -v python3 >/dev/null; then
    "$bin" serve --model "$tmp/base.ckpt" --port 0 --threads 1 --model-name stories --max-batch 16 \
        --lora "tuned=$tmp/full/checkpoint_step4.peft" --lora "strong=$tmp/full/checkpoint_step4.peft:4" \
        --lora "ckpt=$tmp/full/checkpoint_step4.ckpt" >"$tmp/server.out" 2>&1 &
    server=$!
    trap 'kill $server 2>/dev/null; rm -rf "$tmp"' EXIT
    server_url "$tmp/server.out" cli_lora
    grep -q "serve: LoRA adapter 'strong': $tmp/full/checkpoint_step4.peft:4" "$tmp/server.out" ||
        fail_because "the server does not list its adapters: $(cat "$tmp/server.out")"
    /usr/bin/python3 - "$url" "$(head -c -1 "$tmp/unmerged")" <<'PY' || fail_because "serving the adapters"
import json, sys, threading, urllib.error, urllib.request
url, want_tuned = sys.argv[1], sys.argv[2]
def post(body):
    req = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)
bad = []
with urllib.request.urlopen(url + "/v1/models") as r:
    ids = [(m["id"], m.get("parent")) for m in json.load(r)["data"]]
if ids != [("stories", None), ("tuned", "stories"), ("strong", "stories"), ("ckpt", "stories")]:
    bad.append("/v1/models: %s" % ids)
with urllib.request.urlopen(url + "/v1/models/strong") as r:
    if json.load(r).get("parent") != "stories":
        bad.append("/v1/models/strong names no parent")
prompts = ["Once upon a time", "The little dog", "Lily and Ben went to the park. They"]
def body(model, prompt):
    return {"model": model, "prompt": prompt, "max_tokens": 24, "temperature": 0, "logprobs": 1}
alone = {}
for model in ["stories", "tuned", "strong", "ckpt"]:
    for p in prompts:
        status, j = post(body(model, p))
        if status != 200 or j["model"] != model:
            bad.append("%s alone: %s %s" % (model, status, j))
            continue
        alone[model, p] = (j["choices"][0]["text"], j["choices"][0]["logprobs"]["token_logprobs"])
if ("tuned", prompts[0]) in alone and prompts[0] + alone["tuned", prompts[0]][0] != want_tuned:
    bad.append("tuned: %r, generate --lora: %r" % (prompts[0] + alone["tuned", prompts[0]][0], want_tuned))
if alone.get(("ckpt", prompts[0])) != alone.get(("tuned", prompts[0])):
    bad.append("the checkpoint's adapter and its PEFT directory differ")
if len({alone.get((m, prompts[0]), ("",))[0] for m in ["stories", "tuned", "strong"]}) != 3:
    bad.append("the base and the two adapters do not give three texts: %s" % alone)
together = {}
def run(model, p):
    together[model, p] = post(body(model, p))
threads = [threading.Thread(target=run, args=(m, p)) for p in prompts for m in ["strong", "stories", "ckpt", "tuned"]]
for t in threads: t.start()
for t in threads: t.join()
for key, (status, j) in together.items():
    got = (j["choices"][0]["text"], j["choices"][0]["logprobs"]["token_logprobs"]) if status == 200 else None
    if got != alone.get(key):
        bad.append("%s batched: %s, alone: %s" % (key, got, alone.get(key)))
status, j = post(body("nobody", "x"))
if status != 404 or j["error"]["param"] != "model" or "'nobody' does not exist" not in j["error"]["message"] \
        or "'tuned'" not in j["error"]["message"]:
    bad.append("an unknown model: %s %s" % (status, j))
print("served: %d alone, %d batched" % (len(alone), len(together)))
for b in bad: print(b)
sys.exit(1 if bad else 0)
PY
    kill $server
    wait $server 2>/dev/null
fi
finish cli_lora
