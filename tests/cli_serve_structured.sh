#!/usr/bin/env bash
# Structured output over HTTP on stories260K (docs/serving.md): a json_schema chat answer
# parses and holds the schema's required properties; /v1/completions takes response_format
# too; a tool_choice that requires a call answers with OpenAI's tool_calls (id, type
# function, name, arguments as a JSON string) and finish_reason "tool_calls"; bad schemas
# and unsupported keywords get a 400 JSON error naming the part; the server keeps serving.
source "$(dirname "$0")/lib_cli.sh"
command -v curl >/dev/null || { echo "SKIP: no curl"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
require_asset stories260K/stories260K.bin
unset CFORMERS_API_KEY

stories260k_ckpt "$tmp/s.ckpt"
"$bin" serve --model "$tmp/s.ckpt" --port 0 --threads 1 --model-name stories >"$tmp/server.out" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; rm -rf "$tmp"' EXIT
server_url "$tmp/server.out" "cli serve"
status() { curl -s -o "$tmp/body" -w '%{http_code}' "$@"; }
json() { python3 -c "import json,sys; d=json.load(open('$tmp/body')); print($1)"; }

schema='{"type":"object","properties":{"name":{"type":"string","maxLength":10},"age":{"type":"integer"},
"pet":{"enum":["cat","dog"]},"tags":{"type":"array","items":{"type":"string","maxLength":4},"maxItems":2}},
"required":["name","age","pet","tags"]}'
for seed in 1 2 3; do
    [ "$(status "$url/v1/chat/completions" -d "{\"messages\":[{\"role\":\"user\",\"content\":\"A cat\"}],\"seed\":$seed,
        \"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"pet\",\"strict\":true,\"schema\":$schema}}}")" = 200 ] ||
        fail_because "json_schema chat: $(cat "$tmp/body")"
    [ "$(json "d['choices'][0]['finish_reason']")" = stop ] || fail_because "json_schema chat did not stop: $(cat "$tmp/body")"
    json "json.loads(d['choices'][0]['message']['content'])" >/dev/null 2>&1 || fail_because "content does not parse: $(cat "$tmp/body")"
    [ "$(json "sorted(json.loads(d['choices'][0]['message']['content']))")" = "['age', 'name', 'pet', 'tags']" ] ||
        fail_because "properties: $(cat "$tmp/body")"
    [ "$(json "json.loads(d['choices'][0]['message']['content'])['pet'] in ('cat', 'dog')")" = True ] || fail_because "enum"
done
[ "$(status "$url/v1/completions" -d '{"prompt":"Once","max_tokens":200,"seed":5,"response_format":{"type":"json_schema",
    "json_schema":{"name":"n","schema":{"type":"array","items":{"type":"number"},"maxItems":3}}}}')" = 200 ] ||
    fail_because "completions json_schema: $(cat "$tmp/body")"
[ "$(json "all(isinstance(x, (int, float)) for x in json.loads(d['choices'][0]['text']))")" = True ] ||
    fail_because "completions json_schema text: $(cat "$tmp/body")"

tools='[{"type":"function","function":{"name":"add","description":"Adds","parameters":{"type":"object",
"properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"required":["a","b"]}}}]'
[ "$(status "$url/v1/chat/completions" -d "{\"messages\":[{\"role\":\"user\",\"content\":\"1+2?\"}],\"tools\":$tools,
    \"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"add\"}}}")" = 200 ] || fail_because "tools: $(cat "$tmp/body")"
[ "$(json "d['choices'][0]['finish_reason']")" = tool_calls ] || fail_because "finish_reason: $(cat "$tmp/body")"
[ "$(json "d['choices'][0]['message']['content']")" = None ] || fail_because "content of a tool call"
[ "$(json "(lambda c: c['type'] + ' ' + c['function']['name'] + ' ' + str(sorted(json.loads(c['function']['arguments']))) + ' ' + str(c['id'].startswith('call_')))(d['choices'][0]['message']['tool_calls'][0])")" = "function add ['a', 'b'] True" ] ||
    fail_because "tool_calls: $(cat "$tmp/body")"
# streamed (OpenAI's shape): the role, then one delta with the call's id, type and name
# (arguments ""), then the arguments in fragments, finish_reason tool_calls, [DONE] last;
# the call is the one the whole answer gives for the same seed, and tool_choice auto on a
# text that is no call streams it as content, the same text as without stream
sse_check() { # sse_check WHAT SSE_FILE WHOLE_BODY_FILE
    python3 - "$2" "$3" <<'PY' || fail_because "$1: $(head -c 3000 "$2")"
import json, sys
events = [l[6:].strip() for l in open(sys.argv[1]) if l.startswith("data: ")]
whole = json.load(open(sys.argv[2]))["choices"][0]
assert events[-1] == "[DONE]", events[-1]
chunks = [json.loads(e) for e in events[:-1]]
assert all(c["object"] == "chat.completion.chunk" for c in chunks)
deltas = [c["choices"][0]["delta"] for c in chunks]
finish = [c["choices"][0]["finish_reason"] for c in chunks]
assert deltas[0].get("role") == "assistant", deltas[0]
assert finish[-1] == whole["finish_reason"] and all(f is None for f in finish[:-1]), (finish, whole)
if whole["finish_reason"] == "tool_calls":
    calls = [d["tool_calls"] for d in deltas if "tool_calls" in d]
    head = calls[0][0]
    assert head["index"] == 0 and head["id"].startswith("call_") and head["type"] == "function", head
    assert head["function"]["arguments"] == "" and len(calls) >= 2, calls
    assert all(len(c) == 1 and c[0]["index"] == 0 and set(c[0]) == {"index", "function"} for c in calls[1:]), calls
    args = "".join(c[0]["function"]["arguments"] for c in calls[1:])
    want = whole["message"]["tool_calls"][0]["function"]
    assert head["function"]["name"] == want["name"], (head, want)
    assert json.loads(args) == json.loads(want["arguments"]), (args, want)
    assert not any(d.get("content") for d in deltas), deltas
else:
    text = "".join(d.get("content") or "" for d in deltas)
    assert text == whole["message"]["content"], (text, whole)
    assert len([d for d in deltas if d.get("content")]) > 1, "one chunk per token"
PY
}
for seed in 1 2; do
    req="{\"messages\":[{\"role\":\"user\",\"content\":\"1+2?\"}],\"tools\":$tools,\"tool_choice\":\"required\",\"seed\":$seed"
    [ "$(status "$url/v1/chat/completions" -d "$req}")" = 200 ] || fail_because "tools, whole: $(cat "$tmp/body")"
    cp "$tmp/body" "$tmp/whole"
    curl -sN "$url/v1/chat/completions" -d "$req,\"stream\":true}" >"$tmp/sse"
    sse_check "streamed tool call, seed $seed" "$tmp/sse" "$tmp/whole"
done
req="{\"messages\":[{\"role\":\"user\",\"content\":\"Once\"}],\"tools\":$tools,\"seed\":3,\"max_tokens\":24"
[ "$(status "$url/v1/chat/completions" -d "$req}")" = 200 ] || fail_because "tools auto, whole: $(cat "$tmp/body")"
cp "$tmp/body" "$tmp/whole"
curl -sN "$url/v1/chat/completions" -d "$req,\"stream\":true}" >"$tmp/sse"
sse_check "streamed tool_choice auto, content" "$tmp/sse" "$tmp/whole"
[ "$(status "$url/v1/chat/completions" -d "$req,\"stream\":true,\"logprobs\":true}")" = 400 ] &&
    [ "$(json "d['error']['param']")" = logprobs ] || fail_because "streamed tools with logprobs: $(cat "$tmp/body")"
# a conversation that carries the call and its result back renders
[ "$(status "$url/v1/chat/completions" -d "{\"messages\":[{\"role\":\"user\",\"content\":\"1+2?\"},
    {\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"add\",\"arguments\":\"{\\\"a\\\":1,\\\"b\\\":2}\"}}]},
    {\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"3\"}],\"tools\":$tools,\"max_tokens\":4}")" = 200 ] ||
    fail_because "tool result conversation: $(cat "$tmp/body")"
# a tool_call_id cut at 100 bytes inside a character: the result message was dropped from
# the prompt (the cut text not UTF-8, json_pack NULL); now it is cut on a boundary
conv() { printf '{"messages":[{"role":"user","content":"1+2?"}%s],"tools":%s,"max_tokens":1}' "$1" "$tools"; }
[ "$(status "$url/v1/chat/completions" -d "$(conv '')")" = 200 ] || fail_because "no tool result: $(cat "$tmp/body")"
bare=$(json "d['usage']['prompt_tokens']")
[ "$(status "$url/v1/chat/completions" -d "$(conv ",{\"role\":\"tool\",\"tool_call_id\":\"$(printf 'a%.0s' $(seq 99))\u00e9\",\"content\":\"3\"}")")" = 200 ] ||
    fail_because "tool result with a long id: $(cat "$tmp/body")"
[ "$(json "d['usage']['prompt_tokens'] > $bare + 50")" = True ] || fail_because "the tool result is not in the prompt: $(cat "$tmp/body")"

err_is() { # err_is WHAT PARAM MESSAGE_PART BODY: 400 naming PARAM, the message holding MESSAGE_PART
    [ "$(status "$url/v1/chat/completions" -d "$4")" = 400 ] || { fail_because "$1: status, $(cat "$tmp/body")"; return; }
    [ "$(json "d['error']['param']")" = "$2" ] || fail_because "$1: param, $(cat "$tmp/body")"
    json "d['error']['message']" | grep -qF -- "$3" || fail_because "$1: message, $(cat "$tmp/body")"
}
rf() { printf '{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"s","schema":%s}}}' "$1"; }
err_is "pattern" response_format "response_format.json_schema.schema.properties.id: the keyword 'pattern' is not supported" \
    "$(rf '{"type":"object","properties":{"id":{"type":"string","pattern":"^a"}}}')"
err_is "minimum" response_format "schema.items: the keyword 'minimum'" "$(rf '{"type":"array","items":{"type":"integer","minimum":1}}')"
err_is "bad type" response_format "unknown type 'text'" "$(rf '{"type":"text"}')"
err_is "bad required" response_format "schema.required[0]: names no property" "$(rf '{"type":"object","properties":{},"required":["x"]}')"
err_is "bad parameters" tools "tools[0].function.parameters: the keyword 'oneof'" \
    '{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"oneof":[]}}}]}'
[ "$(status "$url/health")" = 200 ] || fail_because "the server stopped serving"
finish cli_serve_structured
