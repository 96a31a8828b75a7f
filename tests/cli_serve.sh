#!/usr/bin/env bash
# `cformers serve` on stories260K over loopback: misuse exits 2 with one line; /health,
# /v1/models, /metrics; a greedy completion continues the prompt as `generate` does;
# streamed deltas add up to the whole text; chat completions; 8 concurrent requests give
# the texts they give one by one, also on a second server whose pool is far too small
# (swaps counted in /metrics); bad requests get OpenAI error JSON with 400/404/405/413 and
# the server keeps serving; every field it does not act on is refused naming it; /tokenize,
# /detokenize, /v1/models/{id}; --api-key; logprobs, echo, prompt scoring and logit_bias; a client that leaves mid-stream frees its blocks; the `openai`
# Python package talks to it where installed; q8_0 weights serve generate's text.
source "$(dirname "$0")/lib_cli.sh"
command -v curl >/dev/null || { echo "SKIP: no curl"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
require_asset stories260K/stories260K.bin
unset CFORMERS_API_KEY

check "no --model" 2 "$bin" serve
stderr_has "usage" "--model is required"
check "bad --port" 2 "$bin" serve --model x --port http
check "bad --kv-cache" 2 "$bin" serve --model x --kv-cache f16
[ "$(wc -l <"$tmp/err")" -eq 1 ] || fail_because "bad --kv-cache should print one line"
check "bad --kv-memory" 2 "$bin" serve --model x --kv-memory lots
stderr_has "size reason" "--kv-memory must be a size such as 512M"
check "both pool sizes" 2 "$bin" serve --model x --kv-blocks 4 --kv-memory 1M
check "bad --chat-template" 2 "$bin" serve --model x --chat-template vicuna
check "help" 0 "$bin" serve --help
stdout_has "help lists the endpoints" "/v1/chat/completions"
check "missing checkpoint" 1 "$bin" serve --model "$tmp/none.ckpt" --port 0
stderr_has "missing checkpoint named" "none.ckpt"

stories260k_ckpt "$tmp/s.ckpt"

servers=()
trap 'for p in "${servers[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$tmp"' EXIT
start_server() { # start_server LOG ARGS...: sets url
    local log="$1"; shift
    "$bin" serve --model "$tmp/s.ckpt" --port 0 --threads 1 "$@" >"$log" 2>&1 &
    servers+=($!)
    server_url "$log" "cli serve"
}
start_server "$tmp/server.out" --max-batch 4 --model-name stories
main="$url"
status() { curl -s -o "$tmp/body" -w '%{http_code}' "$@"; }
json() { python3 -c "import json,sys; d=json.load(open('$tmp/body')); print($1)"; }

[ "$(status "$main/health")" = 200 ] || fail_because "/health"
[ "$(status "$main/v1/models")" = 200 ] && [ "$(json "d['data'][0]['id']")" = stories ] ||
    fail_because "/v1/models does not list 'stories'"

# greedy: the continuation `generate` prints
check "generate" 0 "$bin" generate --model "$tmp/s.ckpt" --prompt "Once upon a time" --temperature 0 -n 40
want=$(head -c -1 "$tmp/out")
[ "$(status "$main/v1/completions" -d '{"model":"stories","prompt":"Once upon a time","max_tokens":40,"temperature":0}')" = 200 ] ||
    fail_because "completion status"
got="Once upon a time$(json "d['choices'][0]['text']")"
[ "$got" = "$want" ] || fail_because "server text differs from generate's: '$got' / '$want'"
[ "$(json "d['usage']['completion_tokens'], d['choices'][0]['finish_reason'], d['object']")" = "40 length text_completion" ] ||
    fail_because "usage or finish_reason: $(cat "$tmp/body")"

# streamed: deltas add up to the same text, then [DONE]
curl -sN "$main/v1/completions" -d '{"prompt":"Once upon a time","max_tokens":40,"temperature":0,"stream":true}' >"$tmp/sse"
streamed=$(python3 - "$tmp/sse" <<'EOF'
import json, sys
text, finish, done = "", None, False
for line in open(sys.argv[1]):
    if not line.startswith("data: "): continue
    if line.strip() == "data: [DONE]": done = True; continue
    c = json.loads(line[6:])["choices"][0]
    text += c.get("text", ""); finish = c["finish_reason"] or finish
print(("Once upon a time" + text) if done and finish == "length" else "incomplete stream")
EOF
)
[ "$streamed" = "$want" ] || fail_because "streamed text: '$streamed'"

# chat, whole and streamed
[ "$(status "$main/v1/chat/completions" -d '{"messages":[{"role":"system","content":"Tell a story."},{"role":"user","content":"Lily"}],"max_tokens":12,"temperature":0}')" = 200 ] &&
    [ "$(json "d['object'], d['choices'][0]['message']['role'], d['usage']['completion_tokens'] > 0")" = "chat.completion assistant True" ] ||
    fail_because "chat completion: $(cat "$tmp/body")"
curl -sN "$main/v1/chat/completions" -d '{"messages":[{"role":"user","content":"Lily"}],"max_tokens":12,"stream":true}' >"$tmp/sse"
grep -q '"object":"chat.completion.chunk"' "$tmp/sse" && grep -q '"delta":{"role":"assistant"' "$tmp/sse" &&
    tail -2 "$tmp/sse" | grep -q '^data: \[DONE\]' || { fail_because "chat stream"; cat "$tmp/sse"; }

# 8 at once: the texts they give one by one
prompts=("Once upon a time" "Lily and Tom" "The big dog" "One day, a little bird" "Sam had a red ball. He"
         "There was a tree" "Mom said" "The sun was hot and the children wanted to play in the water, so they")
body() { printf '{"prompt":"%s","max_tokens":%d,"temperature":0}' "$1" "$2"; }
for i in "${!prompts[@]}"; do
    curl -s "$main/v1/completions" -d "$(body "${prompts[$i]}" 120)" >"$tmp/alone$i"
done
run_all() { # run_all URL PREFIX: the 8 requests at once
    local pids=() i
    for i in "${!prompts[@]}"; do
        curl -s "$1/v1/completions" -d "$(body "${prompts[$i]}" 120)" >"$tmp/$2$i" &
        pids+=($!)
    done
    wait "${pids[@]}"
}
text_of() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['choices'][0]['text'])" "$1"; }
run_all "$main" together
for i in "${!prompts[@]}"; do
    [ "$(text_of "$tmp/together$i")" = "$(text_of "$tmp/alone$i")" ] || fail_because "request $i differs when batched"
done

# a pool of 20 blocks for 8 requests of 9 blocks each: swapped out and back, same texts
start_server "$tmp/small.out" --max-batch 8 --kv-blocks 20 --swap-space 1M --max-itl-ms 40
small="$url"
run_all "$small" small
for i in "${!prompts[@]}"; do
    [ "$(text_of "$tmp/small$i")" = "$(text_of "$tmp/alone$i")" ] || fail_because "request $i differs on the small pool"
done
curl -s "$small/metrics" >"$tmp/metrics"
swaps=$(sed -n 's/^cformers_preemptions_total{mode="swap"} //p' "$tmp/metrics")
[ "${swaps:-0}" -gt 0 ] || { fail_because "no swap counted on the small pool"; grep preempt "$tmp/metrics"; }
grep -q '^cformers_kv_blocks_total 20$' "$tmp/metrics" || fail_because "kv_blocks_total"
# the step time budget: its target, and every step in the step-duration histogram
grep -q '^cformers_step_time_target_seconds 0.040000$' "$tmp/metrics" || fail_because "step_time_target_seconds"
steps=$(sed -n 's/^cformers_engine_steps_total //p' "$tmp/metrics")
grep -q "^cformers_step_duration_seconds_bucket{le=\"+Inf\"} $steps\$" "$tmp/metrics" &&
    grep -q "^cformers_step_duration_seconds_count $steps\$" "$tmp/metrics" &&
    grep -q '^cformers_inter_token_latency_seconds_bucket{le="+Inf"}' "$tmp/metrics" &&
    grep -q '^cformers_step_cost_model_seconds{term="prefill_token"}' "$tmp/metrics" ||
    { fail_because "step duration histogram ($steps steps)"; grep step_ "$tmp/metrics"; }

# bad requests: OpenAI error JSON, and the server keeps serving
err_is() { # err_is WHAT WANT_STATUS PARAM CURL_ARGS...
    local what="$1" want="$2" param="$3"; shift 3
    local got; got=$(status "$@")
    [ "$got" = "$want" ] || { fail_because "$what: status $got, want $want"; cat "$tmp/body"; return; }
    [ "$(json "d['error']['type'] != '' and str(d['error']['param'])")" = "$param" ] ||
        { fail_because "$what: error JSON"; cat "$tmp/body"; }
}
err_is "invalid JSON" 400 None "$main/v1/completions" -d '{"prompt": "x",'
err_is "not an object" 400 None "$main/v1/completions" -d '[1, 2]'
err_is "max_tokens a string" 400 max_tokens "$main/v1/completions" -d '{"prompt":"x","max_tokens":"ten"}'
err_is "max_tokens beyond the context" 400 max_tokens "$main/v1/completions" -d '{"prompt":"x","max_tokens":100000}'
err_is "temperature out of range" 400 temperature "$main/v1/completions" -d '{"prompt":"x","temperature":9}'
err_is "stop of numbers" 400 stop "$main/v1/completions" -d '{"prompt":"x","stop":[1]}'
err_is "no messages" 400 messages "$main/v1/chat/completions" -d '{"model":"stories"}'
err_is "a bad role" 400 messages "$main/v1/chat/completions" -d '{"messages":[{"role":"wizard","content":"x"}]}'
err_is "unknown model" 404 model "$main/v1/completions" -d '{"model":"gpt-4","prompt":"x"}'
err_is "GET a POST route" 405 None "$main/v1/completions"
err_is "unknown route" 404 None "$main/v2/anything"
# issue 42: a field the server does not act on is refused naming it (400, param and message),
# never ignored; at OpenAI's default value, or a no-op field (user), it is accepted
refused() { # refused ENDPOINT FIELD BODY: 400 with param FIELD and FIELD in the message
    err_is "$2 refused" 400 "$2" "$main/v1/$1" -d "$3"
    json "d['error']['message']" | grep -qF "'$2'" || fail_because "$2: the message does not name it: $(cat "$tmp/body")"
}
refused completions logprobs '{"prompt":"x","logprobs":6}'
refused completions logprobs '{"prompt":"x","logprobs":true}'
refused completions echo '{"prompt":"x","echo":1}'
refused completions best_of '{"prompt":"x","best_of":1,"n":2}'
refused completions best_of '{"prompt":"x","best_of":2,"stream":true}'
refused completions suffix '{"prompt":"x","suffix":" the end"}'
refused completions logit_bias '{"prompt":"x","logit_bias":{"fifty":-100}}'
refused completions logit_bias '{"prompt":"x","logit_bias":{"050":-100}}'
refused completions logit_bias '{"prompt":"x","logit_bias":{"50":101}}'
refused completions logit_bias '{"prompt":"x","logit_bias":{"50":"-100"}}'
refused completions logit_bias '{"prompt":"x","logit_bias":{"512":1}}'
refused completions logit_bias '{"prompt":"x","logit_bias":[50]}'
refused completions min_p '{"prompt":"x","min_p":0.1}'
refused completions messages '{"prompt":"x","messages":[]}'
chat_body() { printf '{"messages":[{"role":"user","content":"Lily"}],%s}' "$1"; }
refused chat/completions logprobs "$(chat_body '"logprobs":1')"
refused chat/completions top_logprobs "$(chat_body '"top_logprobs":2')"
refused chat/completions top_logprobs "$(chat_body '"logprobs":true,"top_logprobs":21')"
refused chat/completions top_logprobs "$(chat_body '"logprobs":true,"top_logprobs":-1')"
refused completions top_logprobs '{"prompt":"x","top_logprobs":2}'
# structured output (tests/cli_serve_structured.sh): a malformed response_format, tool or tool_choice
err_is "response_format type" 400 response_format "$main/v1/chat/completions" -d "$(chat_body '"response_format":{"type":"xml"}')"
err_is "a nameless tool" 400 tools "$main/v1/chat/completions" -d "$(chat_body '"tools":[{"type":"function","function":{"parameters":{}}}]')"
refused chat/completions tool_choice "$(chat_body '"tool_choice":"auto"')"
refused chat/completions logit_bias "$(chat_body '"logit_bias":{"50":-101}')"
refused chat/completions echo "$(chat_body '"echo":true')"
refused chat/completions prompt "$(chat_body '"prompt":"x"')"
refused completions max_tokens '{"prompt":"x","max_tokens":0}'
refused completions max_tokens '{"prompt":"x","max_tokens":0,"echo":false,"logprobs":1}'
refused chat/completions max_tokens "$(chat_body '"max_tokens":0')"
refused chat/completions max_completion_tokens "$(chat_body '"max_completion_tokens":0')"
refused completions stream_options '{"prompt":"x","stream_options":{"include_usage":true}}'
err_is "a message's name" 400 messages "$main/v1/chat/completions" \
    -d '{"messages":[{"role":"user","content":"Lily","name":"Bob"}]}'
err_is "five stop strings" 400 stop "$main/v1/completions" -d '{"prompt":"x","stop":["a","b","c","d","e"]}'
err_is "max_tokens past the context after the prompt" 400 max_tokens "$main/v1/completions" -d '{"prompt":"Once upon a time","max_tokens":510}'
err_is "n over --max-batch" 400 n "$main/v1/completions" -d '{"prompt":"x","n":5}'
json "d['error']['message']" | grep -q "max-batch 4" || fail_because "n over --max-batch: $(cat "$tmp/body")"
[ "$(status "$main/v1/completions" -d '{"prompt":"x","max_tokens":2,"echo":false,"logprobs":null,"best_of":1,"logit_bias":{},"user":"u1"}')" = 200 ] ||
    fail_because "defaults and user should be accepted: $(cat "$tmp/body")"
[ "$(status "$main/v1/chat/completions" -d "$(chat_body '"max_tokens":2,"logprobs":false,"tools":[],"tool_choice":"none","response_format":{"type":"text"}')")" = 200 ] ||
    fail_because "chat defaults should be accepted: $(cat "$tmp/body")"
# four stop strings (OpenAI's limit), the fourth acting
[ "$(status "$main/v1/completions" -d '{"prompt":"Once upon a time","max_tokens":40,"temperature":0,"stop":["zzz","qqq","xxx","girl"]}')" = 200 ] &&
    [ "$(json "d['choices'][0]['finish_reason'], 'girl' not in d['choices'][0]['text']")" = "stop True" ] ||
    fail_because "the fourth stop string: $(cat "$tmp/body")"
# stream_options.include_usage: every chunk has "usage": null, then a last chunk with no choices
# and the usage, then [DONE]
curl -sN "$main/v1/completions" -d '{"prompt":"Once upon a time","max_tokens":12,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}' >"$tmp/sse"
python3 - "$tmp/sse" <<'EOF2' || { fail_because "include_usage stream"; cat "$tmp/sse"; }
import json, sys
ev = [l[6:].strip() for l in open(sys.argv[1]) if l.startswith("data: ")]
assert ev[-1] == "[DONE]", ev[-1]
chunks = [json.loads(e) for e in ev[:-1]]
last = chunks[-1]
assert last["choices"] == [] and last["usage"]["completion_tokens"] == 12 and last["usage"]["prompt_tokens"] > 0, last
assert last["usage"]["total_tokens"] == 12 + last["usage"]["prompt_tokens"], last
assert all("usage" in c and c["usage"] is None for c in chunks[:-1]), "a chunk without usage: null"
EOF2
curl -sN "$main/v1/completions" -d '{"prompt":"Once upon a time","max_tokens":12,"stream":true}' >"$tmp/sse"
grep -q '"usage"' "$tmp/sse" && fail_because "usage in a stream that did not ask for it"

# logprobs, echo, prompt scoring and logit_bias (issue 42), against a float64 PyTorch forward
# of stories260K (tools/torch_logits_reference.py; tokens: BOS, "Once upon a time" and the
# greedy continuation) that `cformers validate` agrees with: every logprob within 1e-5 of
# the log-softmax of those logits, whether scored (echo + max_tokens 0) or generated, whole
# or streamed; a logit bias of -100 on the greedy token changes it; chat's shape
ref="$src/tests/fixtures/infer/stories260K_serve.logits"
check "validate the serving reference" 0 "$bin" validate --model "$tmp/s.ckpt" --reference "$ref" --tolerance 1e-5
python3 - "$main" "$ref" >"$tmp/lp.out" 2>&1 <<'EOF' || { fail_because "logprobs"; cat "$tmp/lp.out"; }
import json, math, struct, sys, urllib.request
url, ref = sys.argv[1], open(sys.argv[2], "rb").read()
n, vocab = struct.unpack_from("<II", ref, 12)
ids = list(struct.unpack_from("<%di" % n, ref, 24))
logits = struct.unpack_from("<%df" % (n * vocab), ref, 24 + 4 * n)
def lsm(pos, tok):  # log_softmax of position pos's logits, at tok
    row = logits[pos * vocab:(pos + 1) * vocab]
    m = max(row)
    return row[tok] - m - math.log(sum(math.exp(x - m) for x in row))
def post(path, body):
    req = urllib.request.Request(url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        return json.load(urllib.request.urlopen(req))
    except urllib.error.HTTPError as e:
        raise SystemExit("%s %s: %s" % (path, body, e.read()))
def stream(path, body):
    req = urllib.request.Request(url + path, json.dumps(dict(body, stream=True)).encode(), {"Content-Type": "application/json"})
    ev = [l[6:].strip() for l in urllib.request.urlopen(req).read().decode().splitlines() if l.startswith("data: ")]
    assert ev[-1] == "[DONE]", ev[-1]
    return [json.loads(e) for e in ev[:-1]]
def close(a, b, what):
    assert abs(a - b) <= 1e-5, "%s: %r, reference %r" % (what, a, b)
def detok(t):
    return post("/detokenize", {"tokens": t})["content"]
prompt_n = len(post("/tokenize", {"prompt": "Once upon a time"})["tokens"])
assert ids[:prompt_n] == post("/tokenize", {"prompt": "Once upon a time"})["tokens"], "the reference's prompt"
# 1. scoring: echo + max_tokens 0 + logprobs, the prompt as token ids
d = post("/v1/completions", {"prompt": ids, "echo": True, "max_tokens": 0, "logprobs": 5})
c = d["choices"][0]; lp = c["logprobs"]
assert c["finish_reason"] == "length" and d["usage"]["completion_tokens"] == 0, d
assert c["text"] == detok(ids), (c["text"], detok(ids))
assert len(lp["tokens"]) == n and lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None, lp
assert "".join(lp["tokens"][1:]) == c["text"] and lp["text_offset"][:2] == [0, 0], lp
for t in range(1, n):
    close(lp["token_logprobs"][t], lsm(t - 1, ids[t]), "prompt token %d" % t)
    top = lp["top_logprobs"][t]
    assert 1 <= len(top) <= 5 and max(top.values()) >= lp["token_logprobs"][t], top
    for tok, v in top.items():
        assert v <= 0, top
    assert lp["text_offset"][t] == len("".join(lp["tokens"][1:t]).encode()), (t, lp["text_offset"])
scored = lp["token_logprobs"]
# the same prompt as text scores the same; logprobs 0: no alternatives
d = post("/v1/completions", {"prompt": detok(ids), "echo": True, "max_tokens": 0, "logprobs": 0})
assert d["choices"][0]["logprobs"]["token_logprobs"] == scored, "text prompt scores differ"
assert d["choices"][0]["logprobs"]["top_logprobs"][1] == {}, d
# echo without logprobs: the prompt's text, no logprobs
d = post("/v1/completions", {"prompt": "Once upon a time", "echo": True, "max_tokens": 0})
assert d["choices"][0]["text"] == "Once upon a time" and d["choices"][0]["logprobs"] is None, d
# 2. generation: greedy from the prompt, each token's logprob the reference's; echo puts the
# prompt's scores first, the same as scoring's
k = n - prompt_n
d = post("/v1/completions", {"prompt": "Once upon a time", "max_tokens": k, "temperature": 0, "logprobs": 2, "echo": True})
c = d["choices"][0]; gen = c["logprobs"]
assert c["text"] == detok(ids), (c["text"], detok(ids))
assert len(gen["tokens"]) == n, gen["tokens"]
assert gen["token_logprobs"] == scored, "generated logprobs differ from the scores of the same tokens"
for t in range(prompt_n, n):
    close(gen["token_logprobs"][t], lsm(t - 1, ids[t]), "generated token %d" % t)
    assert gen["token_logprobs"][t] == max(gen["top_logprobs"][t].values()), "the greedy token is not the likeliest"
    assert c["text"][gen["text_offset"][t]:].startswith(gen["tokens"][t]), (t, gen["text_offset"][t])
# streamed: every chunk with text carries its tokens' logprobs; they add up to the whole response's
chunks = stream("/v1/completions", {"prompt": "Once upon a time", "max_tokens": k, "temperature": 0, "logprobs": 2, "echo": True})
toks, vals, offs, text = [], [], [], ""
for ch in chunks:
    for cc in ch["choices"]:
        text += cc["text"]
        if cc["text"]:
            assert cc["logprobs"] and cc["logprobs"]["tokens"], ch
        if cc["logprobs"]:
            toks += cc["logprobs"]["tokens"]; vals += cc["logprobs"]["token_logprobs"]; offs += cc["logprobs"]["text_offset"]
assert text == c["text"] and toks == gen["tokens"] and vals == gen["token_logprobs"] and offs == gen["text_offset"], (text, toks, vals)
assert chunks[0]["choices"][0]["text"].startswith("Once upon a time"), chunks[0]
# sampled: the logprobs are the model's (no temperature in them), one per token
d = post("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 6, "temperature": 1.5, "top_k": 5, "seed": 3, "logprobs": 1})
lp = d["choices"][0]["logprobs"]
assert len(lp["tokens"]) == d["usage"]["completion_tokens"] and all(v <= 0 for v in lp["token_logprobs"]), lp
# 3. logit_bias -100 on the greedy first token: another token comes first, the logprobs unbiased
first = str(ids[prompt_n])
d = post("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 3, "temperature": 0, "logprobs": 1,
                             "logit_bias": {first: -100}})
lp = d["choices"][0]["logprobs"]
assert lp["tokens"][0] != gen["tokens"][prompt_n], (lp["tokens"], gen["tokens"][prompt_n])
assert lp["top_logprobs"][0] == {gen["tokens"][prompt_n]: gen["token_logprobs"][prompt_n]}, lp["top_logprobs"][0]
# 4. chat: logprobs.content with bytes and top_logprobs, whole and streamed
body = {"messages": [{"role": "user", "content": "Lily"}], "max_tokens": 6, "temperature": 0, "logprobs": True, "top_logprobs": 3}
d = post("/v1/chat/completions", body)
c = d["choices"][0]; content = c["logprobs"]["content"]
assert len(content) == d["usage"]["completion_tokens"] and "".join(e["token"] for e in content) == c["message"]["content"], d
for e in content:
    assert bytes(e["bytes"]).decode() == e["token"] and len(e["top_logprobs"]) == 3, e
    assert e["logprob"] == e["top_logprobs"][0]["logprob"] and e["token"] == e["top_logprobs"][0]["token"], e
streamed = [e for ch in stream("/v1/chat/completions", body) for cc in ch["choices"] if cc["logprobs"] for e in cc["logprobs"]["content"]]
assert streamed == content, (streamed, content)
d = post("/v1/chat/completions", dict(body, logprobs=False, top_logprobs=None))
assert d["choices"][0]["logprobs"] is None, d
print("logprobs ok")
EOF

# /tokenize and /detokenize (llama-server's and vLLM's shapes), /v1/models/{id}
[ "$(status "$main/v1/completions" -d '{"prompt":"Once upon a time","max_tokens":1}')" = 200 ] || fail_because "completion"
prompt_tokens=$(json "d['usage']['prompt_tokens']")
[ "$(status "$main/tokenize" -d '{"model":"stories","prompt":"Once upon a time"}')" = 200 ] &&
    [ "$(json "d['count'] == len(d['tokens']), d['tokens'][0], d['count'], d['max_model_len']")" = "True 1 $prompt_tokens 512" ] ||
    fail_because "vLLM's /tokenize: BOS first, the completion's prompt_tokens ($prompt_tokens): $(cat "$tmp/body")"
[ "$(status "$main/tokenize" -d '{"content":"Once upon a time"}')" = 200 ] &&
    [ "$(json "d['count'], 1 in d['tokens']")" = "$((prompt_tokens - 1)) False" ] ||
    fail_because "llama-server's /tokenize: no BOS: $(cat "$tmp/body")"
ids=$(json "d['tokens']")
[ "$(status "$main/tokenize" -d '{"content":"Once upon a time","add_special":true,"with_pieces":true}')" = 200 ] &&
    [ "$(json "d['tokens'][0]['id'], ''.join(t['piece'] for t in d['tokens'][1:])")" = "1 Once upon a time" ] ||
    fail_because "with_pieces: $(cat "$tmp/body")"
[ "$(status "$main/detokenize" -d "{\"tokens\":$ids}")" = 200 ] &&
    [ "$(json "d['content'] + '|' + d['prompt']")" = "Once upon a time|Once upon a time" ] ||
    fail_because "/detokenize: $(cat "$tmp/body")"
[ "$(status "$main/tokenize" -d '{"messages":[{"role":"user","content":"Lily"}]}')" = 200 ] || fail_because "/tokenize messages"
chat_count=$(json "d['count']")
[ "$(status "$main/v1/chat/completions" -d '{"messages":[{"role":"user","content":"Lily"}],"max_tokens":1}')" = 200 ] &&
    [ "$(json "d['usage']['prompt_tokens']")" = "$chat_count" ] || fail_because "/tokenize messages counts what chat runs"
err_is "detokenize out of the vocabulary" 400 tokens "$main/detokenize" -d '{"tokens":[1,512]}'
err_is "detokenize no tokens" 400 tokens "$main/detokenize" -d '{}'
err_is "detokenize a text field" 400 content "$main/detokenize" -d '{"content":"x"}'
err_is "tokenize without text" 400 content "$main/tokenize" -d '{}'
err_is "tokenize two texts" 400 prompt "$main/tokenize" -d '{"content":"a","prompt":"b"}'
err_is "tokenize unknown field" 400 return_token_strs "$main/tokenize" -d '{"prompt":"a","return_token_strs":true}'
err_is "tokenize another model" 404 model "$main/tokenize" -d '{"model":"gpt-4","prompt":"a"}'
err_is "GET /tokenize" 405 None "$main/tokenize"
[ "$(status "$main/v1/models/stories")" = 200 ] && [ "$(json "d['id'], d['object']")" = "stories model" ] ||
    fail_because "/v1/models/stories: $(cat "$tmp/body")"
err_is "/v1/models/another" 404 model "$main/v1/models/gpt-4"

head -c 2000000 /dev/zero | tr '\0' 'a' >"$tmp/huge"
err_is "huge body" 413 None "$main/v1/completions" --data-binary @"$tmp/huge"
[ "$(status "$main/health")" = 200 ] || fail_because "the server stopped serving after bad requests"

# a client that leaves mid-stream: its request is cancelled and its blocks freed
python3 - "${main#http://}" <<'EOF'
import socket, sys
host, port = sys.argv[1].split(":")
s = socket.create_connection((host, int(port)))
body = b'{"prompt":"Once upon a time","max_tokens":400,"stream":true}'
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
s.recv(200)
s.close()
EOF
freed=""
for _ in $(seq 100); do
    curl -s "$main/metrics" >"$tmp/metrics"
    grep -q '^cformers_requests_cancelled_total 1$' "$tmp/metrics" && grep -q '^cformers_kv_blocks_used 0$' "$tmp/metrics" &&
        grep -q '^cformers_sequences_running 0$' "$tmp/metrics" && { freed=1; break; }
    sleep 0.1
done
[ -n "$freed" ] || { fail_because "a client that left did not free its blocks"; grep -E 'cancelled|blocks_used|running' "$tmp/metrics"; }
for name in cformers_time_to_first_token_seconds_bucket cformers_inter_token_latency_seconds_count \
    cformers_kv_waste_ratio cformers_sequences_waiting cformers_sequences_swapped cformers_kv_blocks_free \
    'cformers_http_responses_total{code="413"} 1'; do
    grep -q "^$name" "$tmp/metrics" || fail_because "/metrics lacks $name"
done

# --api-key / CFORMERS_API_KEY: every route but /health needs the Bearer key, else 401 JSON
check "empty --api-key" 2 "$bin" serve --model x --api-key ""
start_server "$tmp/key.out" --api-key sekret
keyed="$url"
grep -q "API key required" "$tmp/key.out" || fail_because "the start line does not say a key is needed"
[ "$(status "$keyed/health")" = 200 ] || fail_because "/health needs no key"
err_is "no key" 401 None "$keyed/v1/models"
[ "$(json "d['error']['code']")" = invalid_api_key ] || fail_because "401 code: $(cat "$tmp/body")"
err_is "a wrong key" 401 None "$keyed/v1/models" -H "Authorization: Bearer sekreT"
err_is "a longer key" 401 None "$keyed/v1/models" -H "Authorization: Bearer sekret2"
err_is "not Bearer" 401 None "$keyed/v1/models" -H "Authorization: sekret"
err_is "POST without the key" 401 None "$keyed/v1/completions" -d '{"prompt":"x","max_tokens":2}'
err_is "tokenize without the key" 401 None "$keyed/tokenize" -d '{"prompt":"x"}'
err_is "metrics without the key" 401 None "$keyed/metrics"
[ "$(status "$keyed/v1/models" -H "Authorization: Bearer sekret")" = 200 ] || fail_because "the right key, GET"
[ "$(status "$keyed/v1/completions" -H "Authorization: Bearer sekret" -d '{"prompt":"x","max_tokens":2}')" = 200 ] ||
    fail_because "the right key, POST: $(cat "$tmp/body")"
curl -s -H "Authorization: Bearer sekret" "$keyed/metrics" | grep -q '^cformers_http_responses_total{code="401"} 7$' ||
    fail_because "401s not counted in /metrics"
export CFORMERS_API_KEY=fromenv
start_server "$tmp/envkey.out"
unset CFORMERS_API_KEY
err_is "CFORMERS_API_KEY, no key" 401 None "$url/v1/models"
[ "$(status "$url/v1/models" -H "Authorization: Bearer fromenv")" = 200 ] || fail_because "CFORMERS_API_KEY's key"

# the openai package, where installed
if python3 -c "import openai" 2>/dev/null; then
    python3 - "$main/v1" >"$tmp/openai.out" 2>&1 <<'EOF' || { fail_because "the openai client"; cat "$tmp/openai.out"; }
import sys, openai
c = openai.OpenAI(base_url=sys.argv[1], api_key="none")
r = c.completions.create(model="stories", prompt="Once upon a time", max_tokens=20, temperature=0)
assert r.choices[0].text and r.usage.completion_tokens == 20, r
chunks = c.chat.completions.create(model="stories", messages=[{"role": "user", "content": "Lily"}], max_tokens=10, stream=True)
text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
assert text, "empty stream"
try:
    c.completions.create(model="nope", prompt="x")
    raise SystemExit("no error for an unknown model")
except openai.NotFoundError:
    pass
print("openai client ok")
EOF
else
    echo "SKIP (part): the openai Python package is not installed"
fi

# q8_0 weights (issue 25's int8 blocks): the server's greedy text is generate's with q8_0
check "convert to q8_0" 0 "$bin" convert --from llama2c "$data/stories260K/stories260K.bin" \
    --tokenizer "$data/stories260K/tok512.bin" --dtype q8_0 --output "$tmp/s8.ckpt"
check "generate q8_0" 0 "$bin" generate --model "$tmp/s8.ckpt" --dtype q8_0 --prompt "Once upon a time" --temperature 0 -n 40
want=$(head -c -1 "$tmp/out")
"$bin" serve --model "$tmp/s8.ckpt" --dtype q8_0 --port 0 --threads 1 >"$tmp/q8.out" 2>&1 &
servers+=($!)
server_url "$tmp/q8.out" "cli serve"
grep -q "in bf16" "$tmp/q8.out" || fail_because "q8_0 weights should get a bf16 KV cache: $(cat "$tmp/q8.out")"
[ "$(status "$url/v1/completions" -d '{"prompt":"Once upon a time","max_tokens":40,"temperature":0}')" = 200 ] ||
    fail_because "q8_0 completion status"
got="Once upon a time$(json "d['choices'][0]['text']")"
[ "$got" = "$want" ] || fail_because "q8_0 server text differs from generate's: '$got' / '$want'"
check "bad --dtype" 2 "$bin" serve --model x --dtype f16

# a q8_0 KV cache: the server's greedy text is generate's with --kv-cache q8_0, and on a pool
# far too small (swapped out and back) the 8 requests give the texts they give alone
check "generate, q8_0 KV" 0 "$bin" generate --model "$tmp/s.ckpt" --kv-cache q8_0 --prompt "Once upon a time" \
    --temperature 0 -n 40
want=$(head -c -1 "$tmp/out")
start_server "$tmp/kvq8.out" --kv-cache q8_0 --max-batch 4
grep -q "in q8_0" "$tmp/kvq8.out" || fail_because "--kv-cache q8_0 not taken: $(cat "$tmp/kvq8.out")"
[ "$(status "$url/v1/completions" -d '{"prompt":"Once upon a time","max_tokens":40,"temperature":0}')" = 200 ] ||
    fail_because "q8_0 KV completion status"
got="Once upon a time$(json "d['choices'][0]['text']")"
[ "$got" = "$want" ] || fail_because "q8_0 KV server text differs from generate's: '$got' / '$want'"
for i in "${!prompts[@]}"; do
    curl -s "$url/v1/completions" -d "$(body "${prompts[$i]}" 120)" >"$tmp/kvq8_alone$i"
done
start_server "$tmp/kvq8_small.out" --kv-cache q8_0 --max-batch 8 --kv-blocks 20 --swap-space 1M
run_all "$url" kvq8_small
for i in "${!prompts[@]}"; do
    [ "$(text_of "$tmp/kvq8_small$i")" = "$(text_of "$tmp/kvq8_alone$i")" ] ||
        fail_because "q8_0 KV request $i differs on the small pool"
done
curl -s "$url/metrics" >"$tmp/metrics"
swaps=$(sed -n 's/^cformers_preemptions_total{mode="swap"} //p' "$tmp/metrics")
[ "${swaps:-0}" -gt 0 ] || fail_because "no swap counted on the small q8_0 pool"
# stories260K's 4 KV heads of 8: one padded q8_0 block of 34 bytes each, 16 tokens, 5 layers, K and V
grep -q '^cformers_kv_block_bytes 21760$' "$tmp/metrics" || fail_because "q8_0 kv_block_bytes: $(grep kv_block "$tmp/metrics")"
finish "cli serve"
