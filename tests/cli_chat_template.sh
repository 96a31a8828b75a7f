#!/bin/bash
# Chat templates from the command line (issue 40): `generate --chat` and `serve` render the
# model's own chat_template (read from the tokenizer_config.json beside the tokenizer it was
# converted with), else the family's built-in one, and say which; --chat-template forces a
# built-in; /tokenize with messages shows the rendering (BOS once, by the tokenizer; the
# template's eos_token text encoded as the EOS id).
source "$(dirname "$0")/lib_cli.sh"
require_asset stories260K/stories260K.bin
model="$data/stories260K/stories260K.bin"

check "no template" 0 "$bin" convert --from llama2c "$model" --tokenizer "$data/stories260K/tok512.bin" \
    --output "$tmp/plain.ckpt"
check "generate --chat, family's" 0 "$bin" generate --model "$tmp/plain.ckpt" --chat --prompt "Hi" -n 4 --temperature 0
stderr_has "generate --chat, family's" "chat template: built-in llama2 (the model has no chat_template; the family's)"
# text the chat template cannot hold as JSON is refused with a line, not dropped (once: the
# message json_pack NULL, and the prompt silently empty); a model name served in every
# response must be UTF-8 too (once: each response's envelope NULL)
check "generate --chat, --prompt not UTF-8" 1 "$bin" generate --model "$tmp/plain.ckpt" --chat --prompt $'a\xff' -n 2
stderr_has "generate --chat, --prompt not UTF-8" "prompt is not valid UTF-8"
check "serve, --model-name not UTF-8" 1 "$bin" serve --model "$tmp/plain.ckpt" --port 0 --model-name $'m\xff'
stderr_has "serve, --model-name not UTF-8" "is not valid UTF-8 of at most 255 bytes; pass --model-name"
check "--system needs --chat" 2 "$bin" generate --model "$tmp/plain.ckpt" --system "x"

mkdir -p "$tmp/tok" && cp "$data/stories260K/tok512.bin" "$tmp/tok/"
cat >"$tmp/tok/tokenizer_config.json" <<'JSON'
{"chat_template": "{{ bos_token }}{% for m in messages %}{{ m.role | upper }}: {{ m.content | trim }}{{ eos_token }}\n{% endfor %}{% if add_generation_prompt %}ASSISTANT:{% endif %}"}
JSON
check "with template" 0 "$bin" convert --from llama2c "$model" --tokenizer "$tmp/tok/tok512.bin" --output "$tmp/t.ckpt"
check "generate --chat, own" 0 "$bin" generate --model "$tmp/t.ckpt" --chat --system " Be kind. " --prompt "Once" \
    -n 4 --temperature 0 --verbose
stderr_has "generate --chat, own" "chat template: the model's own chat_template"
stderr_has "generate --chat, own" "SYSTEM: Be kind."
stderr_has "generate --chat, own" "USER: Once"
check "generate --chat-template plain" 0 "$bin" generate --model "$tmp/t.ckpt" --chat --chat-template plain \
    --prompt "Once" -n 2 --temperature 0 --verbose
stderr_has "generate --chat-template plain" "chat template: built-in plain (chosen by --chat-template)"
stderr_has "generate --chat-template plain" "user: Once"

"$bin" serve --model "$tmp/t.ckpt" --port 0 --threads 1 >"$tmp/serve.out" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; rm -rf "$tmp"' EXIT
server_url "$tmp/serve.out" cli_chat_template
grep -q "serve: chat template: the model's own chat_template" "$tmp/serve.out" ||
    fail_because "serve did not say which chat template: $(cat "$tmp/serve.out")"
grep -q "serve: tools: described in a system message (the model's chat template does not use 'tools')" "$tmp/serve.out" ||
    fail_because "serve did not say how tools reach the prompt: $(cat "$tmp/serve.out")"
body=$(curl -s "$url/../tokenize" -d '{"messages": [{"role": "user", "content": "Once"}]}')
python3 - "$body" <<'PY' || fail_because "/tokenize of messages: $body"
import json, sys
d = json.loads(sys.argv[1])
toks = d["tokens"]
assert toks[0] == 1 and 1 not in toks[1:], toks  # BOS once: the template's bos_token is cut, the tokenizer adds it
# the </s> the template writes after each turn is the EOS token, not the pieces of "</s>"
assert toks.count(2) == 1 and toks[toks.index(2) + 1] != 2, toks
PY
kill $server
finish cli_chat_template
