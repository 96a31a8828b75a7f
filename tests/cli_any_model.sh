#!/usr/bin/env bash
# Any model file is a model (issue 43): generate, validate, inspect, serve and
# train --load_checkpoint read a Hugging Face directory or a GGUF file as they are,
# converted in memory, and give what the checkpoint `cformers convert` writes from it gives:
# the same text, the same logits, the same report; a directory that is no model and a file
# of another kind are refused saying what they are. No shared asset needed: the model is a
# tiny one trained here on bytes (its byte-level tokenizer travels in tokenizer.json / the
# GGUF metadata), plus the committed tiny LLaMA and its reference logits.
source "$(dirname "$0")/lib_cli.sh"
fx="$src/tests/fixtures/infer"
export CFORMERS_THREADS=1

# --- the models: a checkpoint, its Hugging Face export and its GGUF export, and what
# `convert` makes of each of those (the references)
tiny_run --runner_config.train_steps=2 --output_dir="$tmp/base" --quiet
check "train the tiny byte-level model" 0 "$bin" train "${tiny[@]}"
ckpt=$(ls "$tmp"/base/*_step2.ckpt 2>/dev/null | head -1)
[ -n "$ckpt" ] || { fail_because "no checkpoint written"; ls "$tmp/base"; finish cli_any_model; }
check "export to Hugging Face" 0 "$bin" convert --to safetensors "$ckpt" --output "$tmp/hf"
[ -f "$tmp/hf/tokenizer.json" ] || fail_because "the export carries no tokenizer.json"
check "export to GGUF" 0 "$bin" convert --to gguf "$ckpt" --output "$tmp/m.gguf"
check "convert the HF directory" 0 "$bin" convert --from hf "$tmp/hf" --output "$tmp/hf.ckpt"
check "convert the GGUF file" 0 "$bin" convert --from gguf "$tmp/m.gguf" --output "$tmp/gguf.ckpt"
# the committed tiny LLaMA (no tokenizer) and its reference logits, the same three ways
check "convert tiny llama2.c" 0 "$bin" convert --from llama2c "$fx/tiny_v1.bin" --output "$tmp/tiny.ckpt"
check "tiny to Hugging Face" 0 "$bin" convert --to safetensors "$tmp/tiny.ckpt" --output "$tmp/tinyhf"
check "tiny to GGUF" 0 "$bin" convert --to gguf "$tmp/tiny.ckpt" --output "$tmp/tiny.gguf"
check "tiny HF converted" 0 "$bin" convert --from hf "$tmp/tinyhf" --output "$tmp/tinyhf.ckpt"
check "tiny GGUF converted" 0 "$bin" convert --from gguf "$tmp/tiny.gguf" --output "$tmp/tinygguf.ckpt"

# same_stdout DESC A B: two outputs saved by `keep` are identical
keep() { cp "$tmp/out" "$tmp/$1.out"; cp "$tmp/err" "$tmp/$1.err"; }
same_stdout() { cmp -s "$tmp/$2.out" "$tmp/$3.out" || { fail_because "$1: outputs differ"; diff "$tmp/$2.out" "$tmp/$3.out" | head; }; }

# --- generate: the same greedy text, one status line saying what was converted
for kind in hf gguf; do
    model="$tmp/hf"; [ $kind = gguf ] && model="$tmp/m.gguf"
    check "generate from the $kind reference" 0 "$bin" generate --model "$tmp/$kind.ckpt" --prompt "To be" -n 24 --temperature 0
    keep gen_ref_$kind
    check "generate from the $kind source" 0 "$bin" generate --model "$model" --prompt "To be" -n 24 --temperature 0
    keep gen_$kind
    same_stdout "generate from $kind" gen_ref_$kind gen_$kind
    stdout_has "$kind text continues the prompt" "^To be"
done
cp "$tmp/gen_hf.err" "$tmp/err"
stderr_has "HF status line" "^converted Hugging Face directory $tmp/hf in memory (f32, [0-9.]* s)$"
cp "$tmp/gen_gguf.err" "$tmp/err"
stderr_has "GGUF status line" "^converted GGUF file $tmp/m.gguf in memory (f32, [0-9.]* s)$"
# --dtype still chooses the weights: a bf16 conversion generates what the bf16 checkpoint does
check "bf16 reference" 0 "$bin" convert --from hf "$tmp/hf" --dtype bf16 --output "$tmp/hf16.ckpt"
check "generate bf16 reference" 0 "$bin" generate --model "$tmp/hf16.ckpt" --prompt "To be" -n 24 --temperature 0
keep gen_ref16
check "generate bf16 from HF" 0 "$bin" generate --model "$tmp/hf" --dtype bf16 --prompt "To be" -n 24 --temperature 0
keep gen16
same_stdout "generate bf16" gen_ref16 gen16
stderr_has "bf16 conversion" "in memory (bf16, "
stderr_has "bf16 weights read" "bf16 weights"

# --- validate: the same logits (every error figure equal) as the converted checkpoints
for kind in hf gguf; do
    check "validate the tiny $kind reference" 0 "$bin" validate --model "$tmp/tiny$kind.ckpt" --reference "$fx/tiny.logits"
    keep val_ref_$kind
    model="$tmp/tinyhf"; [ $kind = gguf ] && model="$tmp/tiny.gguf"
    check "validate the tiny $kind source" 0 "$bin" validate --model "$model" --reference "$fx/tiny.logits"
    keep val_$kind
    same_stdout "validate from $kind" val_ref_$kind val_$kind
    stdout_has "$kind passes" "^PASS"
done

# --- inspect: the report of the checkpoint the conversion makes (all but the path)
for kind in hf gguf; do
    model="$tmp/hf"; [ $kind = gguf ] && model="$tmp/m.gguf"
    check "inspect the $kind reference" 0 "$bin" inspect --json --verify "$tmp/$kind.ckpt"
    grep -v '"path"' "$tmp/out" >"$tmp/insp_ref_$kind.out"
    check "inspect the $kind source" 0 "$bin" inspect --json --verify "$model"
    grep -v '"path"' "$tmp/out" >"$tmp/insp_$kind.out"
    same_stdout "inspect $kind" insp_ref_$kind insp_$kind
    stdout_has "$kind report names the path given" "\"path\": \"$model\""
done
check "inspect text of an HF directory" 0 "$bin" inspect "$tmp/hf"
stdout_has "tokenizer embedded from the directory" "tokenizer"

# --- serve: one greedy completion gives the reference's text
if command -v curl >/dev/null && command -v python3 >/dev/null; then
    servers=()
    trap 'for p in "${servers[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$tmp"' EXIT
    complete() { # complete MODEL NAME: the text of one greedy completion, into $tmp/NAME.out
        "$bin" serve --model "$1" --port 0 --threads 1 >"$tmp/$2.log" 2>&1 &
        local pid=$!
        servers+=($pid)
        server_url "$tmp/$2.log" cli_any_model
        curl -s "$url/v1/completions" -d '{"prompt":"To be","max_tokens":16,"temperature":0}' >"$tmp/$2.json"
        python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['choices'][0]['text'])" "$tmp/$2.json" \
            >"$tmp/$2.out" 2>&1 || fail_because "$2: no completion: $(cat "$tmp/$2.json")"
        kill $pid
        wait $pid 2>/dev/null
    }
    for kind in hf gguf; do
        model="$tmp/hf"; [ $kind = gguf ] && model="$tmp/m.gguf"
        complete "$tmp/$kind.ckpt" serve_ref_$kind
        complete "$model" serve_$kind
        same_stdout "serve from $kind" serve_ref_$kind serve_$kind
        grep -q "^converted .* in memory (f32, " "$tmp/serve_$kind.log" ||
            fail_because "serve $kind: no status line: $(cat "$tmp/serve_$kind.log")"
    done
else
    echo "no curl or python3: skipping serve"
fi

# --- train --load_checkpoint from a Hugging Face directory and from a GGUF file fine-tunes
for kind in hf gguf; do
    model="$tmp/hf"; [ $kind = gguf ] && model="$tmp/m.gguf"
    tiny_run --runner_config.train_steps=3 --output_dir="$tmp/ft_$kind" --load_checkpoint="$model" \
        --run_mode=finetune
    check "fine-tune from $kind" 0 "$bin" train "${tiny[@]}"
    stdout_has "$kind weights loaded" "load_checkpoint: loaded [0-9]* tensors .* from $model"
    stderr_has "$kind converted once" "^converted .* $model in memory (f32, "
    [ "$(grep -c '^converted' "$tmp/err")" = 1 ] || fail_because "fine-tune from $kind: converted more than once"
    [ "$(train_losses "$tmp/ft_$kind" | wc -l)" = 3 ] || fail_because "fine-tune from $kind: not 3 steps"
    ls "$tmp/ft_$kind"/*_step3.ckpt >/dev/null 2>&1 || fail_because "fine-tune from $kind saved no checkpoint"
done
# ... starting from the same weights as the converted checkpoint: the same losses
tiny_run --runner_config.train_steps=3 --output_dir="$tmp/ft_ref" --load_checkpoint="$tmp/hf.ckpt" --run_mode=finetune
check "fine-tune from the HF reference" 0 "$bin" train "${tiny[@]}"
same_losses "$tmp/ft_ref" "$tmp/ft_hf" "fine-tune from HF vs its conversion"

# --- convert --to reads any model too: HF directory -> GGUF directly, the same bytes as
# through the converted checkpoint
check "HF directory to GGUF" 0 "$bin" convert --to gguf "$tmp/hf" --output "$tmp/direct.gguf"
check "HF checkpoint to GGUF" 0 "$bin" convert --to gguf "$tmp/hf.ckpt" --output "$tmp/via.gguf"
cmp -s "$tmp/direct.gguf" "$tmp/via.gguf" || fail_because "GGUF from the HF directory differs from the one via its checkpoint"

# --- what is no model: said what it is, and what is accepted, by every command
mkdir -p "$tmp/empty" "$tmp/notmodel"
echo hello >"$tmp/notmodel/README.md"
printf '\x7fELF\x02\x01\x01\x00 not a model at all' >"$tmp/strange.bin"
cp "$tmp/hf/model.safetensors" "$tmp/lonely.safetensors"
accepted="a model is a cformers checkpoint (magic CFCKPT), a Hugging Face directory (config.json"
refused() { # refused DESC PATH TEXT: every command exits 1 naming PATH with TEXT and what is accepted
    local cmd
    for cmd in generate validate serve inspect; do
        case $cmd in
        generate) check "$1: $cmd" 1 "$bin" generate --model "$2" ;;
        validate) check "$1: $cmd" 1 "$bin" validate --model "$2" --reference "$fx/tiny.logits" ;;
        serve) check "$1: $cmd" 1 "$bin" serve --model "$2" --port 0 ;;
        inspect) check "$1: $cmd" 1 "$bin" inspect "$2" ;;
        esac
        stderr_has "$1: $cmd says what was found" "cformers $cmd: $2: $3"
        stderr_has "$1: $cmd says what is accepted" "$accepted"
        [ "$(wc -l <"$tmp/err")" = 1 ] || fail_because "$1: $cmd: not one line: $(cat "$tmp/err")"
    done
    tiny_run --runner_config.train_steps=1 --output_dir="$tmp/ft_bad" --load_checkpoint="$2" --run_mode=finetune
    check "$1: train" 2 "$bin" train "${tiny[@]}"
    stderr_has "$1: train says what was found" "load_checkpoint: $2: $3"
}
refused "directory without config.json" "$tmp/notmodel" "a directory without config.json (it holds 1 entry: README.md)"
refused "empty directory" "$tmp/empty" "an empty directory is no model"
refused "ELF file" "$tmp/strange.bin" 'a file of unknown kind (first bytes 7f 45 4c 46 02 01 01 00, ".ELF....")'
refused "lone safetensors file" "$tmp/lonely.safetensors" "a safetensors file without its directory"
refused "config.json alone" "$tmp/hf/config.json" "a config.json alone is no model"
refused "missing path" "$tmp/none" "cannot open: No such file or directory"
finish cli_any_model
