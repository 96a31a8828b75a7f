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
finish cli_lora
