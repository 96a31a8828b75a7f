#!/usr/bin/env bash
# `cformers serve` driven by the official openai Python SDK (issue 42): completions with
# logprobs equal to a float64 reference's log-softmax within 1e-5 (tests/fixtures/infer/
# stories260K_serve.logits), echo + max_tokens 0 scoring the same numbers, a logit bias of
# -100 changing the greedy token, batched prompts, best_of, seed, a stream with one chunk
# per token and the include_usage chunk, chat whole and streamed, errors as the SDK's typed
# exceptions naming the field, the API key enforced. The SDK is the system's `openai`, or
# one pip installs into a venv under the build directory (once); SKIPPED, saying so, when
# neither can be had (no network).
source "$(dirname "$0")/lib_cli.sh"
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
require_asset stories260K/stories260K.bin
unset CFORMERS_API_KEY
py=python3
if ! python3 -c "import openai" 2>/dev/null; then
    venv="$(cd "$(dirname "$bin")" && pwd)/openai-venv"
    if ! "$venv/bin/python" -c "import openai" 2>/dev/null; then
        rm -rf "$venv"
        { python3 -m venv "$venv" && timeout 180 "$venv/bin/pip" install -q --disable-pip-version-check openai; } \
            >"$tmp/pip.out" 2>&1
        "$venv/bin/python" -c "import openai" 2>/dev/null || {
            echo "SKIP: the openai SDK is not installed and pip could not install it (no network?):"
            tail -3 "$tmp/pip.out"; rm -rf "$venv"; exit 77; }
    fi
    py="$venv/bin/python"
fi
stories260k_ckpt "$tmp/s.ckpt"
"$bin" serve --model "$tmp/s.ckpt" --port 0 --threads 1 --max-batch 4 --model-name stories --api-key sekret \
    >"$tmp/server.out" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; rm -rf "$tmp"' EXIT
server_url "$tmp/server.out" "cli serve openai"
"$py" - "$url/v1" "$src/tests/fixtures/infer/stories260K_serve.logits" >"$tmp/py.out" 2>&1 <<'EOF2' || fail_because "openai SDK"
import json, math, struct, sys
import openai
url, ref = sys.argv[1], open(sys.argv[2], "rb").read()
print("openai", openai.__version__)
n, vocab = struct.unpack_from("<II", ref, 12)
ids = list(struct.unpack_from("<%di" % n, ref, 24))
logits = struct.unpack_from("<%df" % (n * vocab), ref, 24 + 4 * n)
def lsm(pos, tok):
    row = logits[pos * vocab:(pos + 1) * vocab]
    m = max(row)
    return row[tok] - m - math.log(sum(math.exp(x - m) for x in row))
c = openai.OpenAI(base_url=url, api_key="sekret", max_retries=0)
# the key is enforced
try:
    openai.OpenAI(base_url=url, api_key="wrong", max_retries=0).models.list()
    raise SystemExit("a wrong key was let in")
except openai.AuthenticationError as e:
    assert e.status_code == 401 and e.code == "invalid_api_key", e
assert [m.id for m in c.models.list()] == ["stories"] and c.models.retrieve("stories").id == "stories"
# scoring: echo + max_tokens 0 + logprobs, the reference's numbers
r = c.completions.create(model="stories", prompt=ids, echo=True, max_tokens=0, logprobs=1)
lp = r.choices[0].logprobs
assert lp.token_logprobs[0] is None and r.usage.completion_tokens == 0, r
for t in range(1, n):
    assert abs(lp.token_logprobs[t] - lsm(t - 1, ids[t])) <= 1e-5, (t, lp.token_logprobs[t], lsm(t - 1, ids[t]))
# generation: greedy logprobs the same; a logit bias of -100 on the first greedy token changes it
prompt_n = 5  # BOS and "Once upon a time"
g = c.completions.create(model="stories", prompt="Once upon a time", max_tokens=n - prompt_n, temperature=0, logprobs=1)
for i, v in enumerate(g.choices[0].logprobs.token_logprobs):
    assert abs(v - lsm(prompt_n + i - 1, ids[prompt_n + i])) <= 1e-5, (i, v)
b = c.completions.create(model="stories", prompt="Once upon a time", max_tokens=1, temperature=0,
                         logit_bias={str(ids[prompt_n]): -100})
assert b.choices[0].text != g.choices[0].logprobs.tokens[0], b
# batched prompts, n, best_of, seed
r = c.completions.create(model="stories", prompt=["Once upon a time", "Lily"], max_tokens=6, temperature=0, n=2)
assert [x.index for x in r.choices] == [0, 1, 2, 3] and r.choices[0].text == g.choices[0].text[:len(r.choices[0].text)], r
s1 = c.completions.create(model="stories", prompt="Once", max_tokens=8, temperature=1, seed=11, best_of=3, n=2)
s2 = c.completions.create(model="stories", prompt="Once", max_tokens=8, temperature=1, seed=11, best_of=3, n=2)
assert [x.text for x in s1.choices] == [x.text for x in s2.choices] and len(s1.choices) == 2, (s1, s2)
# a stream: one chunk per token, then the usage chunk
chunks = list(c.completions.create(model="stories", prompt="Once upon a time", max_tokens=10, temperature=0, stream=True,
                                   stream_options={"include_usage": True}))
texts = [ch.choices[0].text for ch in chunks if ch.choices and ch.choices[0].text]
assert len(texts) == 10 and chunks[-1].usage.completion_tokens == 10 and not chunks[-1].choices, chunks[-1]
assert "".join(texts) == g.choices[0].text[:len("".join(texts))], texts
# chat, whole and streamed, with logprobs
m = [{"role": "user", "content": "Lily"}]
w = c.chat.completions.create(model="stories", messages=m, max_tokens=6, temperature=0, logprobs=True, top_logprobs=2)
assert w.choices[0].message.role == "assistant" and len(w.choices[0].logprobs.content) == w.usage.completion_tokens, w
st = c.chat.completions.create(model="stories", messages=m, max_tokens=6, temperature=0, stream=True,
                               stream_options={"include_usage": True})
text = "".join(ch.choices[0].delta.content or "" for ch in st if ch.choices)
assert text == w.choices[0].message.content, (text, w)
# a tool call, whole and streamed: the deltas (id and name, then argument fragments) add up
# to the whole answer's call
tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object",
          "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}]
m = [{"role": "user", "content": "1+2?"}]
w = c.chat.completions.create(model="stories", messages=m, tools=tools, tool_choice="required", seed=4)
assert w.choices[0].finish_reason == "tool_calls", w
call = w.choices[0].message.tool_calls[0]
st = c.chat.completions.create(model="stories", messages=m, tools=tools, tool_choice="required", seed=4, stream=True)
got = {"id": None, "name": None, "arguments": "", "finish": None}
for ch in st:
    d = ch.choices[0].delta
    for tc in d.tool_calls or []:
        assert tc.index == 0, tc
        got["id"] = tc.id or got["id"]
        got["name"] = (tc.function.name if tc.function else None) or got["name"]
        got["arguments"] += (tc.function.arguments if tc.function else None) or ""
    got["finish"] = ch.choices[0].finish_reason or got["finish"]
assert got["finish"] == "tool_calls" and got["name"] == call.function.name and got["id"].startswith("call_"), got
assert json.loads(got["arguments"]) == json.loads(call.function.arguments), (got, call)
# errors: the SDK's BadRequestError with the field named
for kw, param in [({"n": 5}, "n"), ({"suffix": "x"}, "suffix"), ({"best_of": 1, "n": 2}, "best_of"),
                  ({"stop": ["a", "b", "c", "d", "e"]}, "stop")]:
    try:
        c.completions.create(model="stories", prompt="x", max_tokens=2, **kw)
        raise SystemExit("%s was accepted" % kw)
    except openai.BadRequestError as e:
        assert e.status_code == 400 and e.param == param, (kw, e.param, e)
try:
    c.completions.create(model="gpt-4", prompt="x")
    raise SystemExit("another model was accepted")
except openai.NotFoundError as e:
    assert e.param == "model", e
print("openai SDK ok")
EOF2
cat "$tmp/py.out"
finish "cli serve openai"
